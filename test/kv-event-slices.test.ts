// sliceKvEvents: a batch measured and cut into slices that, applied in order,
// leave an index matching exactly as the whole batch leaves it (for chains
// whose parents are held), in every encoding the index reads; events it must
// not cut (malformed, partly addressable, mixed adapters) stay whole.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createPrefixIndex, sliceKvEvents, type PrefixIndex } from "../src/index.js";

const TPB = 2;
type Encoding = "vllm-map" | "vllm-positional" | "trtllm";

/** One logical event: a chain stored below a parent, or hashes removed. */
type Logical = { kind: "stored"; parent: number | null; hashes: number[]; tokens: number[]; lora: number | null } | { kind: "removed"; hashes: number[] };

/** `e` in `encoding`, on rank 0. */
function encode(e: Logical, encoding: Encoding): unknown {
  if (encoding === "trtllm") {
    if (e.kind === "removed") return { event_id: 0, data: { type: "removed", block_hashes: e.hashes }, window_size: 32, attention_dp_rank: 0 };
    const blocks = e.hashes.map((block_hash, i) => ({ type: "stored_block", block_hash, tokens: e.tokens.slice(i * TPB, (i + 1) * TPB).map((token_id) => ({ type: "unique_token", token_id, token_extra_id: 0 })), ...(e.lora === null ? {} : { lora_id: e.lora }) }));
    return { event_id: 0, data: { type: "stored", parent_hash: e.parent, blocks }, window_size: 32, attention_dp_rank: 0 };
  }
  if (encoding === "vllm-map") {
    return e.kind === "removed" ? { type: "BlockRemoved", block_hashes: e.hashes, medium: "GPU" } : { type: "BlockStored", block_hashes: e.hashes, parent_block_hash: e.parent, token_ids: e.tokens, block_size: TPB, lora_id: e.lora, medium: "GPU" };
  }
  return e.kind === "removed" ? ["BlockRemoved", e.hashes, "GPU"] : ["BlockStored", e.hashes, e.parent, e.tokens, TPB, e.lora, "GPU"];
}

/** A batch of `events` in `encoding`. */
function batchOf(events: Logical[], encoding: Encoding): unknown {
  const list = events.map((e) => encode(e, encoding));
  if (encoding === "trtllm") return list;
  return encoding === "vllm-map" ? { ts: 1.5, events: list, data_parallel_rank: 0 } : [1.5, list, 0];
}

/** Batches of events over chains the generator keeps: stores extend a held block or start a root; removals take held blocks. */
const scenario = fc
  .array(fc.record({ extend: fc.nat(), blocks: fc.integer({ min: 1, max: 14 }), remove: fc.boolean(), lora: fc.constantFrom(null, 3), batchBreak: fc.boolean(), seed: fc.nat(1000) }), { minLength: 1, maxLength: 25 })
  .map((steps) => {
    let next = 1;
    const held: { hash: number; tokens: number[] }[] = [];
    const batches: Logical[][] = [[]];
    for (const s of steps) {
      if (s.remove && held.length > 0) {
        const at = s.extend % held.length;
        batches.at(-1)!.push({ kind: "removed", hashes: held.slice(at, at + s.blocks).map((b) => b.hash) });
      } else {
        const parent = held.length === 0 || s.extend % 3 === 0 ? null : held[s.extend % held.length]!;
        const hashes = Array.from({ length: s.blocks }, () => next++);
        const tokens = Array.from({ length: s.blocks * TPB }, (_, i) => (s.seed + i * 7) % 97);
        batches.at(-1)!.push({ kind: "stored", parent: parent?.hash ?? null, hashes, tokens, lora: parent === null ? s.lora : null });
        let prefix = parent?.tokens ?? [];
        hashes.forEach((hash, i) => {
          prefix = [...prefix, ...tokens.slice(i * TPB, (i + 1) * TPB)];
          held.push({ hash, tokens: prefix });
        });
      }
      if (s.batchBreak) batches.push([]);
    }
    return { batches: batches.filter((b) => b.length > 0), probes: held.map((b) => b.tokens) };
  });

/** What an index says of every probe, and its block count. */
const picture = (index: PrefixIndex, probes: number[][]) => ({ blocks: index.blockCount(0), matches: probes.map((p) => [index.match([...p, 0])[0], index.match([...p, 0], { loraTaskId: 3 })[0]]) });

describe("sliceKvEvents", () => {
  for (const encoding of ["vllm-map", "vllm-positional", "trtllm"] as const) {
    it(`slices applied in order leave the index as the whole batch does, however few blocks and events a slice may hold (${encoding})`, () => {
      fc.assert(
        fc.property(scenario, fc.integer({ min: 1, max: 6 }), fc.oneof(fc.constant(Infinity), fc.integer({ min: 1, max: 3 })), ({ batches, probes }, maxBlocks, maxEvents) => {
          const whole = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
          const sliced = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
          for (const events of batches) {
            const batch = batchOf(events, encoding);
            const cut = sliceKvEvents(batch, maxBlocks, maxEvents);
            const blocks = events.reduce((n, e) => n + e.hashes.length, 0);
            expect(cut.blocks).toBe(blocks);
            expect(cut.tokens).toBe(events.reduce((n, e) => n + (e.kind === "stored" ? e.tokens.length : 0), 0));
            expect(cut.events).toBe(events.length);
            for (const s of cut.slices) {
              const size = sliceKvEvents(s, Infinity);
              expect(size.blocks).toBeLessThanOrEqual(maxBlocks);
              expect(size.events).toBeLessThanOrEqual(maxEvents);
            }
            expect(whole.applyKvEvents(batch, { rank: 0 }).malformed).toBe(0);
            for (const s of cut.slices) expect(sliced.applyKvEvents(s, { rank: 0 }).malformed).toBe(0);
            expect(picture(sliced, probes)).toEqual(picture(whole, probes));
          }
          whole.dispose();
          sliced.dispose();
        }),
        { numRuns: 150 },
      );
    });
  }

  it("a bare list's slice that would start with a number or a string still reads as a list: no positional batch, no tagged event the whole batch did not hold", () => {
    const stored = ["BlockStored", [7], null, [1, 2], TPB, null, "GPU"];
    const clear = ["AllBlocksCleared"];
    // [{}, {}, 0, [stored]] cut at 2 events would give [0, [stored]], a positional batch that stores a block;
    // 1,024 empty objects and then a bare "AllBlocksCleared", cut at 1,024, a lone tagged event that empties the rank.
    for (const [batch, maxEvents] of [[[{}, {}, 0, [stored]], 2], [[...Array.from({ length: 1024 }, () => ({})), "AllBlocksCleared"], 1024], [[{}, "x", 5, clear], 1]] as const) {
      const whole = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
      const sliced = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
      for (const index of [whole, sliced]) index.applyKvEvents([1.5, [["BlockStored", [1], null, [5, 6], TPB, null, "GPU"]], 0], { rank: 0 });
      const cut = sliceKvEvents(batch, Infinity, maxEvents);
      expect(cut.slices.length).toBeGreaterThan(1);
      const before = whole.applyKvEvents(batch, { rank: 0 });
      let malformed = 0;
      for (const slice of cut.slices) malformed += sliced.applyKvEvents(slice, { rank: 0 }).malformed;
      expect(picture(sliced, [[5, 6], [1, 2]])).toEqual(picture(whole, [[5, 6], [1, 2]]));
      expect(malformed).toBe(before.malformed);
      whole.dispose();
      sliced.dispose();
    }
  });

  it("a batch within the limit is its own single slice, untouched", () => {
    const batch = batchOf([{ kind: "stored", parent: null, hashes: [1, 2], tokens: [1, 2, 3, 4], lora: null }], "vllm-map");
    const cut = sliceKvEvents(batch, 2);
    expect(cut.slices).toHaveLength(1);
    expect(cut.slices[0]).toBe(batch);
  });

  it("events it must not cut stay whole and are judged whole: a bad token, a wrong block size, multimodal blocks, mixed adapters", () => {
    const hashes = [1, 2, 3, 4];
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8];
    const badToken = { type: "BlockStored", block_hashes: hashes, parent_block_hash: null, token_ids: [...tokens.slice(0, 7), -1], block_size: TPB };
    const wrongSize = { type: "BlockStored", block_hashes: hashes, parent_block_hash: null, token_ids: tokens, block_size: 4 };
    const multimodal = { type: "BlockStored", block_hashes: hashes, parent_block_hash: null, token_ids: tokens, block_size: TPB, extra_keys: [null, null, [["image", 0]], null] };
    const trt = encode({ kind: "stored", parent: null, hashes, tokens, lora: null }, "trtllm") as { data: { blocks: Record<string, unknown>[] } };
    trt.data.blocks[2]!.lora_id = 7;
    for (const event of [badToken, wrongSize, multimodal, trt]) {
      const cut = sliceKvEvents([event], 1);
      expect(cut.slices).toEqual([[event]]);
      expect(cut.blocks).toBe(4);
    }
    // Judged whole as before: the multimodal chain keeps its first two blocks.
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
    for (const s of sliceKvEvents([multimodal], 1).slices) index.applyKvEvents(s, { rank: 0 });
    expect(index.blockCount(0)).toBe(2);
  });

  it("a TensorRT-LLM chain ending in a partial block (a prompt's tail) is cut too, the tail in its last piece: sliced equals whole", () => {
    // TPB 2: 601 full blocks and a tail of 1 token.
    const hashes = Array.from({ length: 602 }, (_, i) => i + 1);
    const tokens = Array.from({ length: 601 * TPB + 1 }, (_, i) => (i * 7) % 97);
    const event = encode({ kind: "stored", parent: null, hashes, tokens, lora: null }, "trtllm") as { data: { blocks: { tokens: unknown[] }[] } };
    expect(event.data.blocks.at(-1)!.tokens).toHaveLength(1);
    const cut = sliceKvEvents([event], 256);
    expect(cut.slices).toHaveLength(3);
    const whole = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
    const sliced = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
    const w = whole.applyKvEvents([event], { rank: 0 });
    let tails = 0;
    for (const slice of cut.slices) tails += sliced.applyKvEvents(slice, { rank: 0 }).partialTails;
    expect([w.partialTails, tails]).toEqual([1, 1]);
    expect(sliced.blockCount(0)).toBe(601);
    expect(picture(sliced, [tokens.slice(0, 1202), tokens.slice(0, 600)])).toEqual(picture(whole, [tokens.slice(0, 1202), tokens.slice(0, 600)]));
    whole.dispose();
    sliced.dispose();
  });

  it("a salted chain cut into pieces keeps its salt: every piece continues the salted chain", () => {
    const hashes = Array.from({ length: 9 }, (_, i) => i + 1);
    const tokens = Array.from({ length: 18 }, (_, i) => i);
    const event = { type: "BlockStored", block_hashes: hashes, parent_block_hash: null, token_ids: tokens, block_size: TPB, extra_keys: [["salt-a"], null, null, null, null, null, null, null, null] };
    const whole = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
    const sliced = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
    whole.applyKvEvents([event], { rank: 0 });
    const cut = sliceKvEvents([event], 4);
    expect(cut.slices).toHaveLength(3);
    for (const s of cut.slices) sliced.applyKvEvents(s, { rank: 0 });
    for (const ns of [{ cacheSalt: "salt-a" }, {}]) expect([...sliced.match([...tokens, 0], ns)]).toEqual([...whole.match([...tokens, 0], ns)]);
    expect(sliced.match([...tokens, 0], { cacheSalt: "salt-a" })[0]).toBe(18);
  });

  it("never throws, whatever it is given, and measures what it can read", () => {
    const hostile = new Proxy([], { get: () => { throw new Error("no"); } });
    for (const v of [null, undefined, 3, "x", {}, [], [1, 2], { events: 5 }, hostile, [hostile], { data: { type: "stored", blocks: 3 } }]) {
      expect(() => sliceKvEvents(v, 1)).not.toThrow();
    }
    expect(sliceKvEvents(hostile, 1).slices).toEqual([hostile]);
  });
});
