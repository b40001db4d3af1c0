// The prefix index's API contract beyond the replayed cases: bad input, the
// memory budget, namespaces, block keys, and routing with an index.
import { describe, expect, it } from "vitest";
import { AdpInputError, createPrefixIndex, createRouter, restorePrefixIndex } from "../src/index.js";
import { idle } from "./support/build.js";

const range = (n: number, from = 0) => Array.from({ length: n }, (_, i) => from + i);

describe("prefix index input checks (nothing changes on a rejected call)", () => {
  const index = createPrefixIndex({ numRanks: 4, tokensPerBlock: 2 });
  index.insert(1, [1, 2, 3, 4]);
  const before = index.stats();
  it.each([
    ["rank out of range", () => index.insert(4, [1, 2]), "rank"],
    ["negative rank", () => index.insert(-1, [1, 2]), "rank"],
    ["token id 2^32", () => index.insert(0, [1, 2 ** 32]), "tokens[1]"],
    ["negative token id", () => index.match([-1, 2]), "tokens[0]"],
    ["fractional token id", () => index.insert(0, [1.5, 2]), "tokens[0]"],
    ["string token id", () => index.match(["1", 2] as unknown as number[]), "tokens[0]"],
    ["namespace with an unknown field", () => index.insert(0, [1, 2], { lora: 1 } as never), "ns.lora"],
    ["non-integer LoRA id", () => index.match([1, 2], { loraTaskId: 1.5 }), "ns.loraTaskId"],
    ["salt of the wrong type", () => index.match([1, 2], { cacheSalt: 7 as never }), "ns.cacheSalt"],
    ["negative block key", () => index.insertBlocks(0, [1, -2]), "blockKeys[1]"],
    ["clearRank out of range", () => index.clearRank(9), "rank"],
  ])("%s", (_name, call, field) => {
    expect(call).toThrow(AdpInputError);
    try {
      call();
    } catch (e) {
      expect((e as AdpInputError).field).toBe(field);
    }
    expect(index.stats()).toEqual(before);
  });

  it("rejects bad options by name, and a budget too small for one block", () => {
    expect(() => createPrefixIndex({ numRanks: 0 })).toThrow(/numRanks: must be an integer in \[1, 65535\], got 0/);
    expect(() => createPrefixIndex({ numRanks: 65536 })).toThrow(/numRanks: must be an integer in \[1, 65535\], got 65536/);
    expect(() => createPrefixIndex({ numRanks: 2, tokensPerBlock: 0 })).toThrow(/tokensPerBlock/);
    expect(() => createPrefixIndex({ numRanks: 2, blockSize: 4 } as never)).toThrow(/blockSize: is not a prefix index option/);
    expect(() => createPrefixIndex({ numRanks: 2, maxMemoryBytes: 10 })).toThrow(/maxMemoryBytes: must hold at least one block/);
    const gone = createPrefixIndex({ numRanks: 2 });
    gone.dispose();
    expect(() => gone.match([1])).toThrow(/disposed/);
  });
});

describe("prefix index semantics", () => {
  it("namespaces (LoRA id, cache salt) never match each other; null means none", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    index.insert(0, [1, 2, 3, 4], { loraTaskId: 3 });
    index.insert(1, [1, 2, 3, 4], { cacheSalt: "a" });
    expect(index.match([1, 2, 3, 4], { loraTaskId: 3 })).toEqual([4, 0]);
    expect(index.match([1, 2, 3, 4], { cacheSalt: "a" })).toEqual([0, 4]);
    expect(index.match([1, 2, 3, 4], { loraTaskId: 3, cacheSalt: "a" })).toEqual([0, 0]);
    expect(index.match([1, 2, 3, 4], { loraTaskId: null, cacheSalt: null })).toEqual([0, 0]);
  });

  it("caller block keys (a trace's hash_ids) work as blocks of tokensPerBlock tokens", () => {
    const index = createPrefixIndex({ numRanks: 3, tokensPerBlock: 512 });
    index.insertBlocks(2, [0, 14, 15, 16]);
    expect(index.matchBlocks([0, 14, 15, 99])).toEqual([0, 0, 1536]);
    expect(index.matchBlocks([0n, 14n])).toEqual([0, 0, 1024]);
  });

  it("a memory budget bounds bytesInUse by evicting least recently stamped leaves across ranks", () => {
    const budget = 64 * 1024;
    const index = createPrefixIndex({ numRanks: 8, tokensPerBlock: 4, maxMemoryBytes: budget });
    for (let i = 0; i < 2000; i++) {
      index.insert(i % 8, range(64, i * 1000));
      expect(index.stats().bytesInUse).toBeLessThanOrEqual(budget);
    }
    const stats = index.stats();
    expect(stats.evictions).toBeGreaterThan(0);
    // The most recent prompt survives; the oldest ones are gone.
    expect(index.match(range(64, 1999 * 1000))[1999 % 8]).toBe(64);
    expect(index.match(range(64, 0))).toEqual(new Array(8).fill(0));
  });

  it("an evicted leaf's parent goes next only if it is then the least recently stamped leaf", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1, capacityBlocksPerRank: 3 });
    index.insert(0, [1, 2]); // A → B, stamped 1
    index.insert(0, [9]); // X, stamped 2
    index.insert(0, [1]); // A restamped 3: B stays the oldest leaf
    index.insert(0, [5, 6]); // two more blocks: evict B, then X (2), not A (3), though B's removal leaves A a leaf
    expect(index.match([1, 2])).toEqual([1]);
    expect(index.match([9])).toEqual([0]);
    expect(index.match([5, 6])).toEqual([2]);
    expect(index.stats().evictions).toBe(2);
  });

  it("counts a block's next blocks per rank exactly past 255 (where the count leaves the residency slot)", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 1, capacityBlocksPerRank: 301 });
    for (let k = 0; k < 300; k++) index.insert(0, [7, 1000 + k]); // block [7] gets 300 next blocks in rank 0
    index.insert(1, [7, 1000]);
    expect(index.blockCount(0)).toBe(301);
    // Each disjoint one-block insert evicts rank 0's least recently stamped leaf:
    // the 300 next blocks in order, and only then [7], which is a leaf only once they are gone.
    for (let j = 1; j <= 301; j++) {
      index.insert(0, [5000 + j]);
      expect(index.blockCount(0)).toBe(301);
      expect(index.match([7, 1000 + Math.min(j, 299)])[0]).toBe(j < 300 ? 2 : j === 300 ? 1 : 0);
    }
    expect(index.match([7, 1000])).toEqual([0, 2]); // rank 1's view is its own
  });

  it("a memory budget bounds the module's linear memory too, not only what the index counts", () => {
    const budget = 8 << 20;
    const index = createPrefixIndex({ numRanks: 8, tokensPerBlock: 4, maxMemoryBytes: budget });
    for (let i = 0; i < 40_000; i++) index.insert(i % 8, Array.from({ length: 64 }, (_, t) => (t < 16 ? t : i * 100 + t)));
    const stats = index.stats();
    expect(stats.evictions).toBeGreaterThan(0);
    expect(stats.bytesInUse).toBeLessThanOrEqual(budget);
    expect(stats.bytesInUse).toBeGreaterThan(budget * 0.75); // the budget is used, not just respected
    // Large arrays are whole pages grown an eighth at a time; the fixed part is the
    // module's first pages and one 64 KiB slab per small size class.
    expect(stats.wasmMemoryBytes).toBeLessThanOrEqual(budget * 1.125 + (1 << 20));
  });

  it("an insert that evicts thousands of blocks at once (the table's removals batched) leaves every view exact", () => {
    const budget = 1 << 20;
    const index = createPrefixIndex({ numRanks: 4, tokensPerBlock: 1, maxMemoryBytes: budget });
    const prompt = (i: number, length: number) => Array.from({ length }, (_, t) => (t < 8 ? t : i * 100_000 + t));
    for (let i = 0; i < 120; i++) {
      // Every 3,000-block prompt shares its first 8 blocks and evicts about as many as it adds.
      index.insert(i % 4, prompt(i, 3_000));
      expect(index.stats().bytesInUse).toBeLessThanOrEqual(budget);
      expect(index.match(prompt(i, 3_000))[i % 4]).toBe(3_000);
    }
    const stats = index.stats();
    expect(stats.evictions).toBeGreaterThan(100 * 3_000);
    expect(index.match(prompt(0, 3_000))).toEqual([8, 8, 8, 8]); // long gone but for the shared blocks
    // Freed nodes are reused for new keys while the table holds only live ones:
    // a snapshot round trip sees the same views, and the index goes on taking inserts.
    const copy = restorePrefixIndex(index.snapshot());
    for (const i of [116, 117, 118, 119]) expect(copy.match(prompt(i, 3_000))).toEqual(index.match(prompt(i, 3_000)));
    for (let i = 120; i < 160; i++) index.insert(i % 4, prompt(i, 3_000));
    expect(index.match(prompt(159, 3_000))[3]).toBe(3_000);
    expect(index.stats().blocks).toBeLessThan(budget / 32);
  });

  it("supports 1,024 ranks and beyond in one walk", () => {
    const index = createPrefixIndex({ numRanks: 1500, tokensPerBlock: 4 });
    for (const r of [0, 700, 1023, 1499]) index.insert(r, range(4 * (1 + (r % 5))));
    const m = index.match(range(40));
    expect([m[0], m[700], m[1023], m[1499], m[5]]).toEqual([4, 4, 16, 20, 0]);
  });

  // The walk settles most steps from a block's count of next blocks and its
  // "next id is my child" flag instead of the table; these pin both down.
  it("finds an only next block that is not stored right after its parent", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    index.insert(0, [1, 2, 3, 4]); // blocks [1,2] and [3,4] stored one after the other
    index.insert(1, [1, 2, 5, 6]); // [1,2] gains a second next block, stored elsewhere
    index.clearRank(0); // [3,4] goes; [5,6] is now the only next block
    expect(index.match([1, 2, 5, 6, 0])).toEqual([0, 4]);
    expect(index.match([1, 2, 3, 4, 0])).toEqual([0, 2]);
    index.insert(0, [1, 2, 7, 8]); // may reuse the freed slot right after [1,2]
    expect(index.match([1, 2, 7, 8])).toEqual([4, 2]);
    expect(index.match([1, 2, 5, 6])).toEqual([2, 4]);
    expect(index.match([1, 2, 3, 4])).toEqual([2, 2]);
  });

  it("keeps matching below a block whose next blocks once exceeded the count it tracks", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    for (let k = 0; k < 200; k++) index.insert(0, [1, 2, 10 + k, 10 + k]);
    for (let k = 127; k < 200; k++) index.insert(1, [1, 2, 10 + k, 10 + k, 7, 7]);
    index.clearRank(0); // 127 next blocks go, 73 stay: a count that went down from its cap would say none
    for (let k = 0; k < 200; k++) expect(index.match([1, 2, 10 + k, 10 + k, 7, 7])).toEqual(k >= 127 ? [0, 6] : [0, 2]);
    index.insert(0, [1, 2, 99, 99]);
    expect(index.match([1, 2, 99, 99])).toEqual([4, 2]);
    expect(index.stats().blocks).toBe(1 + 2 * 73 + 1);
  });
});

describe("routing with a prefix index", () => {
  it("probes tokens[:-1] in the request's namespace and learns from its own decisions", () => {
    const router = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 4 } });
    const prompt = range(33);
    const first = router.route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: prompt }] });
    const home = first.assignments.findIndex((l) => l.length === 1);
    expect(router.prefixIndex!.blockCount(home)).toBe(8);
    // Same prompt again, with the home rank a little busier: the cached 32 of 33 tokens win.
    const states = idle(4).map((s, r) => (r === home ? { ...s, numActiveRequests: 1, numActiveTokens: 10 } : s));
    const second = router.route({ rankStates: states, maxNumActiveRequests: 8, requests: [{ id: 2, tokens: prompt }] });
    expect(second.assignments[home]).toEqual([2]);
    // Another namespace does not see the cache: back to load balancing (away from the busy home).
    const salted = router.route({ rankStates: states, maxNumActiveRequests: 8, requests: [{ id: 3, tokens: prompt, cacheSalt: "t" }] });
    expect(salted.assignments[home]).toEqual([]);
  });

  it("learnFromRouting: false leaves the index as given", () => {
    const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 4 }, learnFromRouting: false });
    router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: range(16) }] });
    expect(router.prefixIndex!.stats().residencies).toBe(0);
  });
});

describe("insert returns what the rank held before", () => {
  it("equals a match of the prompt in that rank just before, in the same walk", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    const prompt = Array.from({ length: 23 }, (_, i) => i);
    expect(index.insert(0, prompt)).toBe(0);
    expect(index.insert(0, prompt)).toBe(20);
    const longer = [...prompt.slice(0, 12), 99, 98, 97, 96, 95];
    const before = index.match(longer)[0];
    expect(index.insert(0, longer)).toBe(before);
    expect(index.insert(1, longer)).toBe(0);
  });
});

describe("block hashes (how gateway replicas share learned prompts)", () => {
  it("inserting a prompt's block hashes is the same change as inserting its tokens, byte for byte", () => {
    for (const [tpb, n] of [[4, 37], [32, 5000], [16, 100_000]] as const) {
      const a = createPrefixIndex({ numRanks: 2, tokensPerBlock: tpb });
      const b = createPrefixIndex({ numRanks: 2, tokensPerBlock: tpb });
      const tokens = Uint32Array.from({ length: n }, (_, i) => (i * 2654435761) >>> 0);
      a.insert(1, tokens, { cacheSalt: "x" });
      const hashes = a.blockHashes(tokens);
      expect(hashes.length).toBe(2 * Math.floor(n / tpb));
      b.insertBlockHashes(1, hashes, { cacheSalt: "x" });
      expect([...b.snapshot()]).toEqual([...a.snapshot()]);
      // In another namespace the same hashes are another path.
      const c = createPrefixIndex({ numRanks: 2, tokensPerBlock: tpb });
      c.insertBlockHashes(1, hashes, { cacheSalt: "y" });
      expect(c.match(tokens, { cacheSalt: "x" })).toEqual([0, 0]);
    }
  });

  it("insertBlockHashes returns what insert returns: the tokens the rank held before", () => {
    const a = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    const b = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    const first = Uint32Array.from({ length: 21 }, (_, i) => i);
    const longer = Uint32Array.from({ length: 41 }, (_, i) => (i < 12 ? i : 1000 + i));
    for (const [rank, tokens] of [[0, first], [0, first], [0, longer], [1, longer], [1, first.subarray(0, 3)]] as const) {
      const held = a.insert(rank, tokens);
      expect(b.insertBlockHashes(rank, a.blockHashes(tokens))).toBe(held);
    }
    expect(b.insertBlockHashes(0, a.blockHashes(longer))).toBe(40);
  });

  it("matching by block hashes is matching by tokens: any prefix of the hashes, over pieces, in its namespace, never past the hashes given", () => {
    for (const [tpb, n] of [[4, 37], [32, 5000], [16, 100_000]] as const) {
      const index = createPrefixIndex({ numRanks: 3, tokensPerBlock: tpb });
      const tokens = Uint32Array.from({ length: n }, (_, i) => (i * 2654435761) >>> 0);
      index.insert(0, tokens.subarray(0, Math.floor(n / 2)), { loraTaskId: 7 });
      index.insert(2, tokens, { loraTaskId: 7 });
      index.insert(1, tokens);
      const hashes = index.blockHashes(tokens);
      const blocks = hashes.length / 2;
      const out = new Uint32Array(3);
      for (const count of [0, 1, Math.floor(blocks / 3), blocks - 1, blocks]) {
        for (const ns of [{ loraTaskId: 7 }, null]) {
          index.matchHashesInto(out, hashes, count, ns);
          expect([...out]).toEqual(index.match(tokens.subarray(0, count * tpb), ns));
        }
      }
      // A count past the hashes given is the hashes given.
      index.matchHashesInto(out, hashes.subarray(0, 4), blocks);
      expect([...out]).toEqual(index.match(tokens.subarray(0, 2 * tpb)));
    }
  });
});
