// The index fed KV events as the engines' own code writes them
// (test/fixtures/kv-events/engines.json, recorded by
// scripts/engine-event-fixtures.py from TensorRT-LLM's KVCacheEventSerializer
// and its kv_event_fanout.py, unmodified): a stored event whose last block is
// not yet full keeps its full blocks, and the fanout's synthetic all_cleared
// after an event-id gap empties that DP rank's view.
import { describe, expect, it } from "vitest";
import { decode } from "@msgpack/msgpack";
import { createPrefixIndex, init } from "../src/index.js";
import { createEngineCacheView } from "../src/engine-cache-entry.js";
import fixtures from "./fixtures/kv-events/engines.json" with { type: "json" };

const { tokensPerBlock } = fixtures;

describe("TensorRT-LLM's events as its serializer writes them", () => {
  it("a stored event with a partial last block: its full blocks are kept, the tail left out and counted, nothing malformed", async () => {
    await init();
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock });
    const f = fixtures.trtllm_partial_tail;
    const result = index.applyKvEvents(JSON.parse(f.json), { rank: 0 });
    expect(result).toMatchObject({ applied: 1, malformed: 0, ignored: 1, partialTails: 1 });
    expect(index.match(f.prompt)).toEqual([f.reused]);
    expect(index.blockCount(0)).toBe(f.reused / tokensPerBlock);
    // An event whose only block is partial stores nothing and is counted the same way.
    const only = index.applyKvEvents(JSON.parse(fixtures.trtllm_partial_only.json), { rank: 0 });
    expect(only).toMatchObject({ applied: 0, malformed: 0, ignored: 1, partialTails: 1 });
    expect(index.blockCount(0)).toBe(f.reused / tokensPerBlock);
    index.dispose();
  });

  it("the fanout's synthetic all_cleared after an event-id gap empties that DP rank's view, then the event after the gap applies", async () => {
    await init();
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock });
    const received = JSON.parse(fixtures.trtllm_fanout_gap.subscriber_json) as { data: { type: string } }[];
    expect(received.map((e) => e.data.type)).toEqual(["stored", "all_cleared", "stored"]);
    // Before the gap: block 301 (tokens 41..44) on rank 1.
    index.applyKvEvents([received[0]]);
    expect(index.match([41, 42, 43, 44, 45])).toEqual([0, 4]);
    const result = index.applyKvEvents(received.slice(1));
    expect(result).toMatchObject({ applied: 2, malformed: 0 });
    expect(index.match([41, 42, 43, 44, 45])).toEqual([0, 0]);
    expect(index.match([51, 52, 53, 54, 55])).toEqual([0, 4]);
    index.dispose();
  });

  it("the fanout's HTTP buffer holds only stored and removed events, their ids as the engine numbered them", () => {
    const drained = JSON.parse(fixtures.trtllm_fanout_gap.http_json) as { event_id: number; data: { type: string } }[];
    expect(drained.map((e) => [e.event_id, e.data.type])).toEqual([[1, "stored"], [5, "stored"]]);
  });
});

describe("hybrid models and attention windows, as the engines' own code writes their events", () => {
  /** The engine's reuse of a prompt (its tokens but the last, as its lookup). */
  const probe = (prompt: number[]) => prompt.slice(0, -1);

  it("vLLM's structs: two KV-cache groups, a removal in the sliding window's: 112 reused (a plain index: 0)", async () => {
    await init();
    const f = fixtures.vllm_hybrid;
    const groups = f.groups.map((g) => (g.kind === "sliding_window" ? { kind: "sliding_window" as const, slidingWindow: g.sliding_window! } : { kind: g.kind as "full_attention" }));
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: f.tokensPerBlock, groups });
    const plain = createPrefixIndex({ numRanks: 1, tokensPerBlock: f.tokensPerBlock });
    for (const hex of [f.stored_hex, f.removed_hex]) {
      const batch = decode(Buffer.from(hex, "hex"), { useBigInt64: true });
      expect(view.applyKvEvents(batch)).toMatchObject({ malformed: 0 });
      plain.applyKvEvents(batch);
    }
    expect(view.match(probe(f.prompt))).toEqual([f.reused]);
    expect(plain.match(probe(f.prompt))).toEqual([0]);
  });

  it("TensorRT-LLM's serializer: windows 512 and 32768, the continuation in the larger only: 96 reused (a plain index: 256)", async () => {
    await init();
    const f = fixtures.trtllm_vswa;
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: f.tokensPerBlock });
    const plain = createPrefixIndex({ numRanks: 1, tokensPerBlock: f.tokensPerBlock });
    const events = JSON.parse(f.json) as unknown[];
    expect(view.applyKvEvents(events)).toMatchObject({ malformed: 0, applied: 3 });
    plain.applyKvEvents(events);
    expect(view.groups.map((g) => g.key)).toEqual(["w512", "w32768"]);
    expect(view.match(probe(f.prompt))).toEqual([f.reused]);
    expect(plain.match(probe(f.prompt))).toEqual([256]);
  });
});

describe("namespaces as vLLM's block pool writes them (extra_keys)", () => {
  it("a salted chain is reused by its salt's requests only, a LoRA chain by its adapter's only, an image chain up to the image", async () => {
    await init();
    const f = fixtures.vllm_namespaces;
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: f.tokensPerBlock });
    const batch = decode(Buffer.from(f.hex, "hex"), { useBigInt64: true });
    expect(view.applyKvEvents(batch, { loraIds: new Map([[f.lora.adapter, 1]]) })).toMatchObject({ malformed: 0, applied: 3 });
    const probe = (p: number[]) => p.slice(0, -1);
    expect(view.match(probe(f.salted.prompt), { loraTaskId: null, cacheSalt: f.salted.salt })).toEqual([f.salted.reused]);
    expect(view.match(probe(f.salted.prompt))).toEqual([0]);
    expect(view.match(probe(f.salted.prompt), { loraTaskId: null, cacheSalt: "tenant-b" })).toEqual([0]);
    expect(view.match(probe(f.lora.prompt), { loraTaskId: 1, cacheSalt: null })).toEqual([f.lora.reused]);
    expect(view.match(probe(f.lora.prompt))).toEqual([0]);
    expect(view.match(probe(f.image.prompt))).toEqual([f.image.reused]);
  });
});
