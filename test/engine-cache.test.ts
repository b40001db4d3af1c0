// The engine cache view: each KV-cache group kept apart and matched as the
// engines' own lookups reuse (vLLM's HybridKVCacheCoordinator with its
// full-attention, sliding-window and Mamba managers; TensorRT-LLM's minimum
// over attention windows), hand-built events here; the engines' own payloads
// in test/engine-fixtures.test.ts.

import { beforeAll, describe, expect, it } from "vitest";
import { init, createPrefixIndex } from "../src/index.js";
import { createEngineCacheView, restoreEngineCacheView, type EngineCacheView } from "../src/engine-cache-entry.js";
import { decodeSnapshot, encodeSnapshot, SNAPSHOT_KINDS } from "../src/snapshot-format.js";

const TPB = 16;
/** Tokens 1..n. */
const tokens = (n: number, from = 1) => Array.from({ length: n }, (_, i) => from + i);
/** The probe of a prompt (its tokens but the last), as the engines look up. */
const probe = (prompt: number[]) => Uint32Array.from(prompt.slice(0, -1));
/** Each rank's reuse of a prompt. */
function reuse(view: EngineCacheView, prompt: number[], ns?: { loraTaskId: number | null; cacheSalt: string | null }): number[] {
  const out = new Uint32Array(view.numRanks);
  view.matchInto(out, probe(prompt), ns);
  return [...out];
}
/** A vLLM BlockStored of `blocks` blocks of `prompt` from block `from`, in group `g`. */
const stored = (prompt: number[], from: number, blocks: number, g: number, parent: number | null = from === 0 ? null : 1000 + from - 1) => ({
  type: "BlockStored",
  block_hashes: Array.from({ length: blocks }, (_, i) => 1000 + from + i),
  parent_block_hash: parent,
  token_ids: prompt.slice(from * TPB, (from + blocks) * TPB),
  block_size: TPB,
  lora_id: null,
  medium: "GPU",
  lora_name: null,
  group_idx: g,
});
const removed = (hashes: number[], g: number) => ({ type: "BlockRemoved", block_hashes: hashes, medium: "GPU", group_idx: g });
const batch = (events: unknown[], rank = 0) => ({ ts: 1, events, data_parallel_rank: rank });

beforeAll(async () => {
  await init();
});

describe("a vLLM hybrid model (full attention + a 32-token sliding window over 16-token blocks)", () => {
  const prompt = tokens(128); // 8 blocks; the engine looks up at most 127 tokens: 7 blocks
  const make = () => createEngineCacheView({ numRanks: 2, tokensPerBlock: TPB, groups: [{ kind: "full_attention" }, { kind: "sliding_window", slidingWindow: 32 }] });

  it("a sliding-window removal of the chain's first block leaves the full-attention prefix reusable (112 tokens)", () => {
    const view = make();
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1), removed([1000], 1)]));
    expect(reuse(view, prompt)).toEqual([112, 0]);
    // A plain prefix index, fed the same events, loses the whole chain.
    const plain = createPrefixIndex({ numRanks: 2, tokensPerBlock: TPB });
    plain.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1), removed([1000], 1)]));
    expect(plain.match(probe(prompt))).toEqual([0, 0]);
  });

  it("the window needs cdiv(31, 16) = 2 contiguous blocks before the hit: one hole before the end moves the hit back", () => {
    const view = make();
    // Sliding-window blocks 0..4 freed as the window moved (the engine frees them while the request runs), block 6 evicted.
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1), removed([1000, 1001, 1002, 1003, 1004, 1006], 1)]));
    // Blocks 5 held, 6 not: no run of 2 ends at 7; none at 6 (5 alone). The leading run from block 0 is empty: 0.
    expect(reuse(view, prompt)).toEqual([0, 0]);
    view.applyKvEvents(batch([stored(prompt, 4, 1, 1)])); // block 4 again (its parent 1003 is known from the chain)
    expect(reuse(view, prompt)).toEqual([96, 0]); // blocks 4, 5 held: hit at 6 blocks
  });

  it("the full-attention group bounds the window group (the fixed point)", () => {
    const view = make();
    view.applyKvEvents(batch([stored(prompt, 0, 3, 0), stored(prompt, 0, 8, 1)]));
    expect(reuse(view, prompt)).toEqual([48, 0]);
  });

  it("a short leading run counts when no run is long enough", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB, groups: [{ kind: "full_attention" }, { kind: "sliding_window", slidingWindow: 64 }] });
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1), removed([1002], 1)]));
    // need = cdiv(63, 16) = 4; held 0,1,3..7; scanning from 6: 6,5,4,3 is a run of 4 ending at 7 blocks.
    expect(reuse(view, prompt)).toEqual([112]);
    view.applyKvEvents(batch([removed([1005], 1)]));
    // held 0,1,3,4,6,7: runs from the right 6 (1), 4,3 (2), 1,0 (2): none of 4, the leading run is 2 blocks.
    expect(reuse(view, prompt)).toEqual([32]);
  });

  it("kinds may come in the events themselves (kv_cache_spec_kind, kv_cache_spec_sliding_window)", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    const sw = { ...stored(prompt, 0, 8, 1), kv_cache_spec_kind: "sliding_window", kv_cache_spec_sliding_window: 32 };
    view.applyKvEvents(batch([{ ...stored(prompt, 0, 8, 0), kv_cache_spec_kind: "full_attention" }, sw, removed([1000], 1)]));
    expect(view.groups).toEqual([
      { key: "g0", kind: "full_attention", slidingWindow: null },
      { key: "g1", kind: "sliding_window", slidingWindow: 32 },
    ]);
    expect(reuse(view, prompt)).toEqual([112]);
  });

  it("an undeclared group is read as full attention: fewer tokens, never more", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1), removed([1000], 1)]));
    expect(reuse(view, prompt)).toEqual([0]);
  });

  it("a Mamba group needs only its state at the hit point: the last held block", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB, groups: [{ kind: "full_attention" }, { kind: "mamba" }] });
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1), removed([1006, 1005], 1)]));
    expect(reuse(view, prompt)).toEqual([80]); // block 4 is the last held state at or before 7 blocks: 5 blocks
  });

  it("a rank's clear empties every group; snapshots restore every group exactly", () => {
    const view = make();
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1), removed([1000], 1)], 1));
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1)], 0));
    const copy = restoreEngineCacheView(view.snapshot());
    expect(reuse(copy, prompt)).toEqual(reuse(view, prompt));
    expect(copy.stats().kvEvents).toEqual(view.stats().kvEvents);
    view.applyKvEvents(batch([{ type: "AllBlocksCleared" }], 1));
    expect(reuse(view, prompt)).toEqual([112, 0]);
    // The copy goes on as the original would.
    copy.applyKvEvents(batch([removed([1006], 1)], 0));
    expect(reuse(copy, prompt)).toEqual([96, 112]); // rank 0: blocks 4, 5 are the run before block 6's hole
  });

  it("a declared group that has heard nothing is an empty cache: nothing is reused until it stores (never more than the engine)", () => {
    const view = make();
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0)]));
    expect(reuse(view, prompt)).toEqual([0, 0]);
    view.applyKvEvents(batch([stored(prompt, 0, 8, 1)]));
    expect(reuse(view, prompt)).toEqual([112, 0]);
  });

  it("a removal seen first makes no group: the stored events that follow name its kind", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    const sw = { ...stored(prompt, 0, 8, 1), kv_cache_spec_kind: "sliding_window", kv_cache_spec_sliding_window: 32 };
    expect(view.applyKvEvents(batch([removed([5], 1)]))).toMatchObject({ unknownBlock: 1, applied: 0 });
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), sw, removed([1000], 1)]));
    expect(view.groups.map((g) => g.kind)).toEqual(["full_attention", "sliding_window"]);
    expect(reuse(view, prompt)).toEqual([112]);
  });

  it("a hash stored again under other tokens lets its old block go; a removed hash matches nothing; the bound holds", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB, maxMemoryBytes: 1 << 20, groups: [{ kind: "full_attention" }, { kind: "mamba" }] });
    const other = tokens(128, 5000);
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1)]));
    // The same hashes, other tokens, in the Mamba group: the old blocks are no longer held there.
    view.applyKvEvents(batch([{ ...stored(other, 0, 8, 1) }]));
    expect(view.blockCount(0)).toBe(16);
    expect(reuse(view, prompt)).toEqual([0]);
    view.applyKvEvents(batch([stored(prompt, 0, 8, 1), removed([1006, 1005, 1004, 1003, 1002, 1001, 1000], 1)]));
    expect(reuse(view, prompt)).toEqual([0]);
    // Endless re-stores of one hash hold one block.
    for (let i = 0; i < 3000; i++) view.applyKvEvents(batch([{ ...stored(tokens(16, 10_000 + 16 * i), 0, 1, 1), block_hashes: [42] }]));
    expect(view.blockCount(0)).toBeLessThanOrEqual(8 + 2);
  });

  it("past its bound a presence group forgets the oldest stored first, through re-stores, removals and clears (a model's order)", () => {
    // 64 KiB gives the least bound, 1,024 blocks a rank.
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB, maxMemoryBytes: 64 << 10, groups: [{ kind: "full_attention" }, { kind: "sliding_window", slidingWindow: 32 }] });
    const model = new Map<number, true>();
    const held = () => (decodeSnapshot(view.snapshot(), SNAPSHOT_KINDS.engineCache).state as { groups: { byHash?: [number, string][][] }[] }).groups[1]!.byHash![0]!.map(([h]) => h);
    const storeOne = (h: number, c: number) => {
      view.applyKvEvents(batch([{ ...stored(tokens(16, 100 * c), 0, 1, 1), block_hashes: [h] }]));
      model.delete(h);
      model.set(h, true);
      for (const k of model.keys()) if (model.size > 1024) model.delete(k);
    };
    for (let h = 1; h <= 6_000; h++) {
      storeOne(h, h);
      if (h % 7 === 0 && model.has(h - 500)) storeOne(h - 500, h); // a hash stored again: the newest
      if (h % 11 === 0) {
        view.applyKvEvents(batch([removed([h - 3], 1)]));
        model.delete(h - 3);
      }
      if (h === 3_000) {
        view.applyKvEvents(batch([{ type: "AllBlocksCleared" }]));
        model.clear();
      }
      if (h % 500 === 0) expect(held()).toEqual([...model.keys()]);
    }
    expect(model.size).toBe(1024);
  }, 60_000);

  it("a snapshot that lies (checksum intact) is refused with a typed error, and nothing of it is kept", () => {
    const view = make();
    view.applyKvEvents(batch([stored(prompt, 0, 8, 0), stored(prompt, 0, 8, 1)]));
    const { state, sections } = decodeSnapshot(view.snapshot(), SNAPSHOT_KINDS.engineCache);
    expect(reuse(restoreEngineCacheView(encodeSnapshot(SNAPSHOT_KINDS.engineCache, state, sections)), prompt)).toEqual(reuse(view, prompt));
    type G = { kind: string; byHash?: unknown[][][]; section?: number; key: string; window?: unknown };
    const lies: [string, (st: { groups: G[] }) => void][] = [
      ["a kind no engine has", (st) => void (st.groups[1]!.kind = "sliding_wind0w")],
      ["a declared group's other window", (st) => void (st.groups[1]!.window = 64)],
      ["a hash as events never name it", (st) => void (st.groups[1]!.byHash![0]![0]![0] = "1000")],
      ["a hash named twice", (st) => void (st.groups[1]!.byHash![0]![1]![0] = 1000)],
      ["a path key that is not one", (st) => void (st.groups[1]!.byHash![0]![0]![1] = "xyz")],
      ["a key no engine names", (st) => void (st.groups[1]!.key = "g99")],
      ["two groups on one section", (st) => void st.groups.push({ key: "w4096", kind: "full_attention", section: 0, assumed: false } as G)],
      ["ranks missing", (st) => void st.groups[1]!.byHash!.pop()],
    ];
    for (const [what, lie] of lies) {
      const forged = structuredClone(state) as unknown as { groups: G[] };
      lie(forged);
      expect(() => restoreEngineCacheView(encodeSnapshot(SNAPSHOT_KINDS.engineCache, forged, sections)), what).toThrow(/engine cache view snapshot/);
    }
  });
});

describe("TensorRT-LLM with variable sliding windows (VSWA)", () => {
  /** One TensorRT-LLM stored event in window `w`. */
  const trt = (id: number, w: number, parent: number | null, from: number, blocks: number, prompt: number[]) => ({
    event_id: id,
    data: {
      type: "stored",
      parent_hash: parent,
      blocks: Array.from({ length: blocks }, (_, i) => ({ type: "stored_block", block_hash: 5000 + w + from + i, tokens: prompt.slice((from + i) * TPB, (from + i + 1) * TPB).map((t) => ({ type: "unique_token", token_id: t, token_extra_id: 0 })), lora_id: null, cache_level: 0, priority: 35 })),
    },
    window_size: w,
  });
  const prompt = tokens(16 * 16 + 1);

  it("the engine reuses the minimum over its windows, each looked up from the first block (96, not 256)", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    view.applyKvEvents([trt(1, 512, null, 0, 6, prompt), trt(2, 32768, null, 0, 6, prompt), trt(3, 32768, 5000 + 32768 + 5, 6, 10, prompt)]);
    expect(view.groups.map((g) => g.key)).toEqual(["w512", "w32768"]);
    expect(reuse(view, prompt)).toEqual([96]);
    const plain = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
    plain.applyKvEvents([trt(1, 512, null, 0, 6, prompt), trt(2, 32768, null, 0, 6, prompt), trt(3, 32768, 5000 + 32768 + 5, 6, 10, prompt)]);
    expect(plain.match(probe(prompt))).toEqual([256]);
  });

  it("with one window it is the prefix index exactly", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    const plain = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB });
    const events = [trt(1, 4096, null, 0, 6, prompt), trt(2, 4096, 5000 + 4096 + 5, 6, 10, prompt), { event_id: 3, data: { type: "removed", block_hashes: [5000 + 4096 + 9] }, window_size: 4096 }];
    expect(view.applyKvEvents(events)).toEqual(plain.applyKvEvents(events));
    expect(reuse(view, prompt)).toEqual(plain.match(probe(prompt)));
    expect(view.stats().kvEvents).toEqual(plain.stats().kvEvents);
  });
});

describe("TensorRT-LLM's block namespaces", () => {
  it("a salted chain (its blocks' cache_salt) matches only requests with that salt; a salt id it cannot compute matches none", () => {
    const prompt = tokens(33);
    const block = (salt: unknown) => ({ event_id: 1, data: { type: "stored", parent_hash: null, blocks: [{ type: "stored_block", block_hash: 7, tokens: prompt.slice(0, 16).map((t) => ({ type: "unique_token", token_id: t, token_extra_id: 0 })), cache_salt: salt, mm_keys: [], cache_level: 0, priority: 35 }] }, window_size: 4096 });
    const salted = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    salted.applyKvEvents([block("tenant-ä")]);
    expect(reuse(salted, prompt)).toEqual([0]);
    expect(reuse(salted, prompt, { loraTaskId: null, cacheSalt: "tenant-ä" })).toEqual([16]);
    expect(reuse(salted, prompt, { loraTaskId: null, cacheSalt: "tenant-b" })).toEqual([0]);
    const byId = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    byId.applyKvEvents([block(1234567)]);
    expect(reuse(byId, prompt)).toEqual([0]);
    expect(reuse(byId, prompt, { loraTaskId: null, cacheSalt: "1234567" })).toEqual([0]);
    const plain = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    plain.applyKvEvents([block(null)]);
    expect(reuse(plain, prompt)).toEqual([16]);
  });
});

describe("bounds", () => {
  it("a salt id too long to be TensorRT-LLM's is no namespace at all, and nothing throws", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    const event = { event_id: 1, data: { type: "stored", parent_hash: null, blocks: [{ type: "stored_block", block_hash: 7, tokens: tokens(16).map((t) => ({ type: "unique_token", token_id: t, token_extra_id: 0 })), cache_salt: BigInt("9".repeat(5000)) }] }, window_size: 4096 };
    expect(view.applyKvEvents([event])).toMatchObject({ applied: 1, malformed: 0 });
    expect(reuse(view, tokens(17))).toEqual([0]);
  });

  it("refuses a seventeenth group, counting it malformed", () => {
    const view = createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB });
    const prompt = tokens(32);
    const result = view.applyKvEvents(batch(Array.from({ length: 17 }, (_, g) => ({ ...stored(prompt, 0, 1, 0), group_idx: g }))));
    expect(result.malformed).toBe(1);
    expect(result.problems.join(" ")).toMatch(/group_idx 16 .*outside 0..15/);
  });

  it("checks its options", () => {
    expect(() => createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB, groups: [{ kind: "sliding_window" } as never] })).toThrow(/slidingWindow/);
    expect(() => createEngineCacheView({ numRanks: 0, tokensPerBlock: TPB })).toThrow(/numRanks/);
    expect(() => createEngineCacheView({ numRanks: 1, tokensPerBlock: TPB, groups: [{ kind: "linear" } as never] })).toThrow(/kind/);
  });
});
