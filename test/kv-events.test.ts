// Engine KV-cache events (TensorRT-LLM and vLLM shapes) feeding the index.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createPrefixIndex, restorePrefixIndex } from "../src/index.js";
import { decodeSnapshot, SNAPSHOT_KINDS } from "../src/snapshot-format.js";
import { NaivePrefixIndex } from "./oracle/naive-prefix-index.js";

const tok = (ids: number[]) => ids.map((token_id) => ({ type: "unique_token", token_id, token_extra_id: 0 }));
const stored = (rank: number, parent: number | null, blocks: [number, number[]][], eventId?: number) => ({
  event_id: eventId ?? 0,
  data: { type: "stored", parent_hash: parent, blocks: blocks.map(([block_hash, t]) => ({ type: "stored_block", block_hash, tokens: tok(t), cache_level: 0, priority: 35 })) },
  window_size: 32,
  attention_dp_rank: rank,
});
const removed = (rank: number, hashes: number[]) => ({ event_id: 0, data: { type: "removed", block_hashes: hashes }, window_size: 32, attention_dp_rank: rank });

describe("applyKvEvents", () => {
  it("TensorRT-LLM stored events build a rank's view; a removed block takes its descendants", () => {
    const index = createPrefixIndex({ numRanks: 3, tokensPerBlock: 2 });
    const r = index.applyKvEvents([stored(1, null, [[101, [1, 2]], [102, [3, 4]]], 1), stored(1, 102, [[103, [5, 6]]], 2)]);
    expect(r.applied).toBe(2);
    expect([...index.match([1, 2, 3, 4, 5, 6, 7])]).toEqual([0, 6, 0]);
    index.applyKvEvents(removed(1, [102]));
    expect([...index.match([1, 2, 3, 4, 5, 6, 7])]).toEqual([0, 2, 0]);
    expect(index.blockCount(1)).toBe(1);
  });

  it("event-fed and inserted blocks share one view and one capacity model", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2, capacityBlocksPerRank: 3 });
    index.insert(0, [1, 2, 3, 4]);
    index.applyKvEvents(stored(0, null, [[7, [1, 2]], [8, [3, 4]], [9, [5, 6]]]));
    expect(index.blockCount(0)).toBe(3);
    index.applyKvEvents(stored(0, null, [[10, [9, 9]]]));
    expect(index.blockCount(0)).toBe(3);
    expect([...index.match([1, 2, 3, 4, 5, 6])]).toEqual([4]);
  });

  it("vLLM BlockStored / BlockRemoved / AllBlocksCleared, in a batch with data_parallel_rank", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    index.applyKvEvents({ ts: 1, data_parallel_rank: 1, events: [{ type: "BlockStored", block_hashes: [5, 6], parent_block_hash: null, token_ids: [1, 2, 3, 4], block_size: 2, lora_id: null }] });
    expect([...index.match([1, 2, 3, 4])]).toEqual([0, 4]);
    index.applyKvEvents({ type: "BlockRemoved", block_hashes: [6] }, { rank: 1 });
    expect([...index.match([1, 2, 3, 4])]).toEqual([0, 2]);
    index.applyKvEvents({ type: "AllBlocksCleared" }, { rank: 1 });
    expect(index.blockCount(1)).toBe(0);
  });

  it("counts and skips unknown parents, unknown blocks, malformed and no-op events, never throws", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    const r = index.applyKvEvents([
      stored(0, 999, [[1, [1, 2]]]),
      removed(0, [12345]),
      stored(0, null, [[1, [1, 2, 3]]]),
      { event_id: 3, data: { type: "created", num_blocks_per_cache_level: [10] }, window_size: 32 },
      { event_id: 4, data: { type: "updated", block_hash: 1 }, window_size: 32, attention_dp_rank: 0 },
      stored(7, null, [[1, [1, 2]]]),
      "garbage",
      { data: { type: "stored", parent_hash: "x", blocks: [] }, attention_dp_rank: 0 },
      null,
    ]);
    expect(r).toMatchObject({ applied: 0, unknownParent: 1, unknownBlock: 1, ignored: 2, malformed: 5 });
    expect(r.problems[0]).toMatch(/holds 3 tokens/);
    expect(index.stats().kvEvents.malformed).toBe(5);
    expect(index.stats().residencies).toBe(0);
  });

  it("engine hashes beyond 2^53 are kept exact when given as bigint or string", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 });
    const big = 2n ** 63n + 5n;
    index.applyKvEvents(stored(0, null, [[0, [7]]]));
    index.applyKvEvents({ event_id: 2, data: { type: "stored", parent_hash: 0, blocks: [{ block_hash: big, tokens: tok([8]) }] }, attention_dp_rank: 0 });
    index.applyKvEvents({ event_id: 3, data: { type: "stored", parent_hash: (big + 1n).toString(), blocks: [{ block_hash: 1, tokens: tok([9]) }] }, attention_dp_rank: 0 });
    expect([...index.match([7, 8, 9])]).toEqual([2]);
    expect(index.applyKvEvents(removed(0, [Number(big)])).unknownBlock).toBe(1);
    index.applyKvEvents({ event_id: 4, data: { type: "removed", block_hashes: [big.toString()] }, attention_dp_rank: 0 });
    expect([...index.match([7, 8, 9])]).toEqual([1]);
  });

  it("random engine event streams agree with the naive model (stored = whole-path insert, removed = subtree)", () => {
    fc.assert(
      fc.property(
        fc.record({
          capacity: fc.option(fc.integer({ min: 2, max: 10 }), { nil: undefined }),
          steps: fc.array(fc.record({ kind: fc.constantFrom("store", "store", "store", "remove"), rank: fc.integer({ min: 0, max: 2 }), pick: fc.nat(), tokens: fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 2, maxLength: 8 }) }), { maxLength: 30 }),
        }),
        ({ capacity, steps }) => {
          const tpb = 2;
          const index = createPrefixIndex({ numRanks: 3, tokensPerBlock: tpb, ...(capacity ? { capacityBlocksPerRank: capacity } : {}) });
          const model = new NaivePrefixIndex(3, tpb, capacity);
          // The engine side: hash of each block path, per rank, as a real engine would assign.
          const hashes = new Map<string, number>();
          const hashOf = (path: number[]) => {
            const k = path.join(",");
            if (!hashes.has(k)) hashes.set(k, hashes.size + 1);
            return hashes.get(k)!;
          };
          const held: number[][][] = [[], [], []];
          for (const s of steps) {
            const full = s.tokens.slice(0, Math.floor(s.tokens.length / tpb) * tpb);
            if (s.kind === "store") {
              // Store the path's last block under its parent, if the model's rank holds the parent.
              const parentPath = full.slice(0, full.length - tpb);
              const holdsParent = parentPath.length === 0 || model.match(parentPath)[s.rank] === parentPath.length;
              index.applyKvEvents(stored(s.rank, parentPath.length ? hashOf(parentPath) : null, [[hashOf(full), full.slice(-tpb)]]));
              if (holdsParent) {
                model.insert(s.rank, full);
                held[s.rank]!.push(full);
              }
            } else if (held[s.rank]!.length > 0) {
              const path = held[s.rank]![s.pick % held[s.rank]!.length]!;
              index.applyKvEvents(removed(s.rank, [hashOf(path)]));
              if (model.match(path)[s.rank] === path.length) model.removeSubtree(s.rank, path);
            }
            for (let r = 0; r < 3; r++) expect(index.blockCount(r)).toBe(model.blockCount(r));
          }
          for (const path of hashes.keys()) {
            const t = path.split(",").map(Number);
            expect([...index.match(t)]).toEqual(model.match(t));
          }
        },
      ),
      { seed: 99, numRuns: 200 },
    );
  });
});

describe("applyKvEvents: an engine map stays bounded", () => {
  /** A vLLM BlockStored of one root block: hash `hash`, the tokens of content `c`. */
  const one = (hash: number, c: number) => ({ type: "BlockStored", block_hashes: [hash], parent_block_hash: null, token_ids: [c, c + 1], block_size: 2 });
  /** Each rank's engine map, as a snapshot lists it. */
  const engineMaps = (index: ReturnType<typeof createPrefixIndex>) => decodeSnapshot(index.snapshot(), SNAPSHOT_KINDS.prefixIndex).state.engineBlocks as [unknown, unknown][][];

  it("many hashes naming the same few blocks (a publisher posing as an engine): the map stays within 2 × blocks + 1,024, the newest hashes kept", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2, maxMemoryBytes: 1 << 20 });
    // 20,000 hashes over 100 contents: before, every one stayed, and each store swept them all (quadratic).
    for (let h = 1; h <= 20_000; h++) index.applyKvEvents({ events: [one(h, 10 * (h % 100))] }, { rank: 0 });
    expect(index.blockCount(0)).toBe(100);
    const size = engineMaps(index)[0]!.length;
    expect(size).toBeGreaterThanOrEqual(100);
    expect(size).toBeLessThanOrEqual(2 * 100 + 1024);
    // The newest hash of a content still removes it; the oldest are forgotten (a removal naming one is an unknown block).
    expect(index.applyKvEvents({ events: [{ type: "BlockRemoved", block_hashes: [20_000] }] }, { rank: 0 })).toMatchObject({ applied: 1, unknownBlock: 0 });
    expect(index.blockCount(0)).toBe(99);
    expect(index.applyKvEvents({ events: [{ type: "BlockRemoved", block_hashes: [1] }] }, { rank: 0 })).toMatchObject({ applied: 0, unknownBlock: 1 });
  });

  it("a removed block takes its descendants' hashes with it past the bound, without waiting for the next store", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2 });
    const chain = (from: number, n: number) => ({ type: "BlockStored", block_hashes: Array.from({ length: n }, (_, i) => from + i), parent_block_hash: null, token_ids: Array.from({ length: 2 * n }, (_, i) => i), block_size: 2 });
    index.applyKvEvents({ events: [chain(1, 3_000)] }, { rank: 0 });
    expect(engineMaps(index)[0]!.length).toBe(3_000);
    index.applyKvEvents({ events: [{ type: "BlockRemoved", block_hashes: [1] }] }, { rank: 0 });
    expect(index.blockCount(0)).toBe(0);
    expect(engineMaps(index)[0]!.length).toBeLessThanOrEqual(1024);
  });

  it("blocks evicted under the budget leave no entries past the bound, and a restored twin bounds its map the same", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2, capacityBlocksPerRank: 300 });
    const twin = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2, capacityBlocksPerRank: 300 });
    let restored: ReturnType<typeof createPrefixIndex> | null = null;
    for (let h = 1; h <= 6_000; h++) {
      const events = { events: [one(h, 10 * h)] };
      index.applyKvEvents(events, { rank: 0 });
      twin.applyKvEvents(events, { rank: 0 });
      restored?.applyKvEvents(events, { rank: 0 });
      if (h === 2_500) restored = restorePrefixIndex(twin.snapshot());
      if (h % 100 === 0) expect(engineMaps(index)[0]!.length).toBeLessThanOrEqual(2 * 300 + 1024 + 1);
    }
    expect(index.blockCount(0)).toBe(300);
    // The restored twin swept and kept the same entries, in the same order.
    expect(engineMaps(restored!)).toEqual(engineMaps(index));
    for (const c of [10, 57_000, 59_990]) expect([...restored!.match([c, c + 1, 0])]).toEqual([...index.match([c, c + 1, 0])]);
  }, 60_000);
});

describe("applyKvEvents: an engine map of 64-bit and negative hashes", () => {
  /** Each rank's engine map, as a snapshot lists it. */
  const engineMaps = (index: ReturnType<typeof createPrefixIndex>) => decodeSnapshot(index.snapshot(), SNAPSHOT_KINDS.prefixIndex).state.engineBlocks as [unknown, unknown][][];

  it("hashes past 2^53 (kept as text) and negative ones are bounded as small ones are, and a restored twin keeps the same entries in the same order", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2, capacityBlocksPerRank: 300 });
    let restored: ReturnType<typeof createPrefixIndex> | null = null;
    // vLLM's 64-bit block hashes arrive as msgpack bigints; half of these are past 2^53, half negative numbers.
    const hash = (h: number) => (h % 2 === 0 ? (1n << 63n) + BigInt(h) * 0x9e3779b97f4a7c15n % (1n << 62n) : -h * 7919);
    for (let h = 1; h <= 4_000; h++) {
      const events = { events: [{ type: "BlockStored", block_hashes: [hash(h)], parent_block_hash: null, token_ids: [10 * h, 10 * h + 1], block_size: 2 }] };
      expect(index.applyKvEvents(events, { rank: 0 }).applied).toBe(1);
      restored?.applyKvEvents(events, { rank: 0 });
      if (h === 1_500) restored = restorePrefixIndex(index.snapshot());
      if (h % 100 === 0) expect(engineMaps(index)[0]!.length).toBeLessThanOrEqual(2 * 300 + 1024);
    }
    expect(index.blockCount(0)).toBe(300);
    expect(engineMaps(restored!)).toEqual(engineMaps(index));
    // The newest blocks are still named by their hashes: a removal of the last one is applied.
    expect(index.applyKvEvents({ events: [{ type: "BlockRemoved", block_hashes: [hash(4_000)] }] }, { rank: 0 })).toMatchObject({ applied: 1, unknownBlock: 0 });
    expect(index.applyKvEvents({ events: [{ type: "BlockRemoved", block_hashes: [hash(3_999)] }] }, { rank: 0 })).toMatchObject({ applied: 1, unknownBlock: 0 });
  }, 60_000);

  it("under eviction at 20,000 blocks held, every held block is still named: each one's hash removes it", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2, capacityBlocksPerRank: 20_000 });
    const hash = (h: number) => (h * 2654435761) % 2 ** 40;
    for (let h = 1; h <= 60_000; h++) index.applyKvEvents({ events: [{ type: "BlockStored", block_hashes: [hash(h)], parent_block_hash: null, token_ids: [h, h + 1e6], block_size: 2 }] }, { rank: 0 });
    expect(index.blockCount(0)).toBe(20_000);
    const removed = index.applyKvEvents({ events: Array.from({ length: 20_000 }, (_, i) => ({ type: "BlockRemoved", block_hashes: [hash(60_000 - i)] })) }, { rank: 0 });
    expect(removed).toMatchObject({ applied: 20_000, unknownBlock: 0 });
  }, 60_000);

  it("ids sharing their low bits (multiples of 64) keep every block held named: each held block's hash still removes it", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2, capacityBlocksPerRank: 300 });
    for (let h = 1; h <= 3_000; h++) index.applyKvEvents({ events: [{ type: "BlockStored", block_hashes: [64 * h], parent_block_hash: null, token_ids: [10 * h, 10 * h + 1], block_size: 2 }] }, { rank: 0 });
    expect(index.blockCount(0)).toBe(300);
    const removed = index.applyKvEvents({ events: Array.from({ length: 300 }, (_, i) => ({ type: "BlockRemoved", block_hashes: [64 * (3_000 - i)] })) }, { rank: 0 });
    expect(removed).toMatchObject({ applied: 300, unknownBlock: 0 });
    expect(index.blockCount(0)).toBe(0);
  });
});

describe("applyKvEvents: every wire variant the engines publish (kv-events reference §2)", () => {
  const storedMap = (fields: Record<string, unknown>) => ({ type: "BlockStored", parent_block_hash: null, block_size: 2, lora_id: null, medium: "GPU", lora_name: null, ...fields });

  it("positional events and batches ([ts, events, rank], [tag, …]) read as their maps", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    const r = index.applyKvEvents([1.5, [["BlockStored", [11, 12], null, [1, 2, 3, 4], 2, null, "GPU"]], 1]);
    expect(r.applied).toBe(1);
    expect([...index.match([1, 2, 3, 4])]).toEqual([0, 4]);
    index.applyKvEvents([2.5, [["BlockRemoved", [12], "GPU"]], 1]);
    expect([...index.match([1, 2, 3, 4])]).toEqual([0, 2]);
    index.applyKvEvents([3.5, [["AllBlocksCleared"]], 1]);
    expect(index.blockCount(1)).toBe(0);
    expect(index.applyKvEvents([1, [["NoSuchEvent", 1]], 0]).malformed).toBe(1);
  });

  it("byte hashes stay whole and uint64 hashes keep every bit (bigints from msgpack)", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2 });
    const a = new Uint8Array(32).fill(7);
    const b = new Uint8Array(32).fill(7);
    b[31] = 8; // differs only in the last byte: a distinct block
    index.applyKvEvents({ events: [storedMap({ block_hashes: [a], token_ids: [1, 2] }), storedMap({ block_hashes: [b], parent_block_hash: a, token_ids: [3, 4] })] }, { rank: 0 });
    expect([...index.match([1, 2, 3, 4])]).toEqual([4]);
    index.applyKvEvents({ events: [{ type: "BlockRemoved", block_hashes: [b] }] }, { rank: 0 });
    expect([...index.match([1, 2, 3, 4])]).toEqual([2]);
    const big = (1n << 64n) - 1n;
    index.applyKvEvents({ events: [storedMap({ block_hashes: [big], token_ids: [5, 6] }), storedMap({ block_hashes: [big - 1n], parent_block_hash: big, token_ids: [7, 8] })] }, { rank: 0 });
    expect([...index.match([5, 6, 7, 8])]).toEqual([4]);
    // 2^64-1 and 2^64-2 are one number to a double: removing one must not remove the other.
    index.applyKvEvents({ events: [{ type: "BlockRemoved", block_hashes: [big - 1n] }] }, { rank: 0 });
    expect([...index.match([5, 6, 7, 8])]).toEqual([2]);
  });

  it("token ids as decimal strings or bigints (TensorRT-LLM allows strings)", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2 });
    expect(index.applyKvEvents(["BlockStored", [1], null, ["9", 10n], 2, null, "GPU"], { rank: 0 }).applied).toBe(1);
    expect([...index.match([9, 10])]).toEqual([2]);
    expect(index.applyKvEvents(["BlockStored", [2], null, ["x", 10], 2], { rank: 0 }).malformed).toBe(1);
  });

  it("a cache salt in the first block's extra_keys and a LoRA lora_name give the chain its namespace", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2 });
    const loraIds = new Map([["sql-adapter", 7]]);
    index.applyKvEvents({ events: [storedMap({ block_hashes: [1, 2], token_ids: [1, 2, 3, 4], extra_keys: [["salt-A"], null] })] }, { rank: 0, loraIds });
    expect([...index.match([1, 2, 3, 4])]).toEqual([0]);
    expect([...index.match([1, 2, 3, 4], { cacheSalt: "salt-A" })]).toEqual([4]);
    expect([...index.match([1, 2, 3, 4], { cacheSalt: "salt-B" })]).toEqual([0]);
    index.applyKvEvents({ events: [storedMap({ block_hashes: [3], token_ids: [5, 6], lora_name: "sql-adapter", lora_id: 99, extra_keys: [["sql-adapter"]] })] }, { rank: 0, loraIds });
    expect([...index.match([5, 6], { loraTaskId: 7 })]).toEqual([2]);
    expect([...index.match([5, 6], { loraTaskId: 99 })]).toEqual([0]);
    // An adapter the caller does not know: nothing of it can be asked for.
    const r = index.applyKvEvents({ events: [storedMap({ block_hashes: [4], token_ids: [7, 8], lora_name: "other" })] }, { rank: 0, loraIds });
    expect(r.ignored).toBe(1);
    expect([...index.match([7, 8])]).toEqual([0]);
  });

  it("blocks whose extra keys name inputs the tokens do not show (images) are left out, with what follows", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2 });
    index.applyKvEvents({ events: [storedMap({ block_hashes: [1, 2, 3], token_ids: [1, 2, 3, 4, 5, 6], extra_keys: [null, ["mm-hash-1"], null] })] }, { rank: 0 });
    expect([...index.match([1, 2, 3, 4, 5, 6])]).toEqual([2]);
    const trt = { event_id: 1, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 9, tokens: tok([7, 8]), mm_keys: [{ type: "mm_key", hash: "ab", start_offset: 0 }] }] }, window_size: 32 };
    expect(index.applyKvEvents(trt, { rank: 0 }).ignored).toBe(1);
  });
});

describe("applyKvEvents: tiers", () => {
  it("events of a tier other than the GPU's are ignored: an offloaded copy's removal leaves the GPU's block", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2 });
    index.applyKvEvents({ type: "BlockStored", block_hashes: [1], parent_block_hash: null, token_ids: [1, 2], block_size: 2, medium: "GPU" }, { rank: 0 });
    const r = index.applyKvEvents([{ type: "BlockRemoved", block_hashes: [1], medium: "CPU" }, { type: "BlockStored", block_hashes: [2], parent_block_hash: null, token_ids: [3, 4], block_size: 2, medium: "CPU" }], { rank: 0 });
    expect(r.ignored).toBe(2);
    expect([...index.match([1, 2])]).toEqual([2]);
    expect([...index.match([3, 4])]).toEqual([0]);
  });
});
