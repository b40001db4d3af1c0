// A prefix index keeps in its key table only the nodes its walk cannot reach
// from their parent without it (`keyless` in assembly/prefix-index/state.ts)
// until a caller names a node by key. These tests hold it to a twin that keeps
// every node in the table: the same matches, block counts, stats and
// snapshots, byte for byte, through prompts that branch at every depth (a
// third child takes the walk's shortcut off the first, which must then enter
// the table), eviction by capacity and by budget, clearRank and restores. A
// crafted collision of path keys, which the keyed twin refuses as it happens,
// is dropped before the index is snapshotted or asked for a node by key.
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { createPrefixIndex, init, restorePrefixIndex, type PrefixIndex } from "../src/index.js";
import { setKeyAllForTests } from "../src/index-core.js";
import { namespaceKey } from "../src/namespace.js";
import { mulberry32 as prng } from "../src/simulate/workload.js";

beforeAll(async () => {
  await init();
});

afterEach(() => {
  setKeyAllForTests(false);
});

type Options = Parameters<typeof createPrefixIndex>[0];

/** The index under test and its twin that keys every node. */
function twins(options: Options): [PrefixIndex, PrefixIndex] {
  const lazy = createPrefixIndex(options);
  setKeyAllForTests(true);
  const keyed = createPrefixIndex(options);
  setKeyAllForTests(false);
  return [lazy, keyed];
}

/** Asserts the two indexes answer alike: matches of `probes`, block counts, stats and snapshots. */
function expectAlike(a: PrefixIndex, b: PrefixIndex, probes: readonly number[][], where: string): void {
  for (const p of probes) expect(a.match(p), `${where}: match`).toEqual(b.match(p));
  for (let r = 0; r < a.numRanks; r++) expect(a.blockCount(r), `${where}: blockCount(${r})`).toBe(b.blockCount(r));
  expect(a.stats(), `${where}: stats`).toEqual(b.stats());
  expect(Buffer.from(a.snapshot()).equals(Buffer.from(b.snapshot())), `${where}: snapshot bytes`).toBe(true);
}

/**
 * Prompts of `depth` blocks of `tpb` tokens, each block one of `fan` at its
 * depth given the path so far: a tree that branches at every depth, so nodes
 * gain a third child and lose children again as blocks are evicted.
 */
function prompt(rand: () => number, tpb: number, depth: number, fan: number): number[] {
  const tokens: number[] = [];
  const blocks = 1 + Math.floor(rand() * depth);
  let path = 0;
  for (let b = 0; b < blocks; b++) {
    // Mostly the first two choices (long shared runs), sometimes a third or more.
    const r = rand();
    const choice = r < 0.45 ? 0 : r < 0.8 ? 1 : 2 + Math.floor(rand() * (fan - 2));
    path = (path * 31 + choice + 1) % 1000003;
    for (let t = 0; t < tpb; t++) tokens.push((path * 7 + t) % 50000);
  }
  // A partial block at the end is not stored, and must not change anything.
  if (rand() < 0.3) tokens.push(1, 2);
  return tokens;
}

describe("the keyless table against a twin that keys every node", () => {
  const configs: { name: string; options: Options }[] = [
    { name: "capacity", options: { numRanks: 4, tokensPerBlock: 4, capacityBlocksPerRank: 60 } },
    { name: "budget", options: { numRanks: 3, tokensPerBlock: 4, maxMemoryBytes: 160_000 } },
    { name: "one rank, many children", options: { numRanks: 1, tokensPerBlock: 2, capacityBlocksPerRank: 300 } },
  ];
  for (const { name, options } of configs) {
    for (const seed of [1, 2, 3]) {
      it(`matches, counts and snapshots alike (${name}, seed ${seed})`, () => {
        const rand = prng(seed * 7919 + name.length);
        let [lazy, keyed] = twins(options);
        const tpb = options.tokensPerBlock!;
        const ranks = options.numRanks;
        const seen: number[][] = [];
        for (let op = 0; op < 3000; op++) {
          const p = prompt(rand, tpb, 24, 6);
          if (seen.length < 64) seen.push(p);
          else if (rand() < 0.05) seen[Math.floor(rand() * seen.length)] = p;
          const r = rand();
          if (r < 0.02) {
            const rank = Math.floor(rand() * ranks);
            lazy.clearRank(rank);
            keyed.clearRank(rank);
          } else if (r < 0.3) {
            expect(lazy.match(p)).toEqual(keyed.match(p));
          } else {
            const rank = Math.floor(rand() * ranks);
            expect(lazy.insert(rank, p)).toBe(keyed.insert(rank, p));
          }
          if (op % 500 === 499) {
            expectAlike(lazy, keyed, seen, `op ${op}`);
            // Both restored (a restore numbers nodes afresh): the lazy one enters every node while it
            // loads, then its new blocks are keyless again; the twin keeps keying.
            if (op === 1499) {
              const restored = restorePrefixIndex(lazy.snapshot());
              setKeyAllForTests(true);
              const restoredTwin = restorePrefixIndex(keyed.snapshot());
              setKeyAllForTests(false);
              lazy.dispose();
              keyed.dispose();
              [lazy, keyed] = [restored, restoredTwin];
            }
          }
        }
        expectAlike(lazy, keyed, seen, "end");
        lazy.dispose();
        keyed.dispose();
      });
    }
  }
});

describe("an index fed KV events beside its learned prompts", () => {
  it("answers as its twin: stores with and without a parent, removals, learned inserts", () => {
    const rand = prng(99);
    const [lazy, keyed] = twins({ numRanks: 2, tokensPerBlock: 4, capacityBlocksPerRank: 80 });
    const probes: number[][] = [];
    let hash = 1;
    const held: number[][] = [[], []];
    for (let op = 0; op < 1500; op++) {
      const rank = Math.floor(rand() * 2);
      const p = prompt(rand, 4, 12, 5);
      if (probes.length < 48) probes.push(p);
      const r = rand();
      if (r < 0.4) {
        expect(lazy.insert(rank, p)).toBe(keyed.insert(rank, p));
      } else if (r < 0.8) {
        // A vLLM BlockStored of the prompt's whole blocks, below the last block this rank stored or at the root.
        const blocks = Math.floor(p.length / 4);
        if (blocks === 0) continue;
        const parent = rand() < 0.5 && held[rank]!.length > 0 ? held[rank]![held[rank]!.length - 1]! : null;
        const hashes = Array.from({ length: blocks }, () => hash++);
        const event = { ts: op, events: [{ type: "BlockStored", block_hashes: hashes, parent_block_hash: parent, token_ids: p.slice(0, blocks * 4), block_size: 4, lora_id: null, medium: "GPU" }], data_parallel_rank: rank };
        expect(lazy.applyKvEvents(event)).toEqual(keyed.applyKvEvents(event));
        held[rank]!.push(...hashes);
      } else if (held[rank]!.length > 0) {
        const gone = held[rank]!.splice(Math.floor(rand() * held[rank]!.length), 1);
        const event = { ts: op, events: [{ type: "BlockRemoved", block_hashes: gone, medium: "GPU" }], data_parallel_rank: rank };
        expect(lazy.applyKvEvents(event)).toEqual(keyed.applyKvEvents(event));
      }
      if (op % 300 === 299) expectAlike(lazy, keyed, probes, `op ${op}`);
    }
    const events = lazy.stats().kvEvents;
    expect(events.applied).toBeGreaterThan(300);
    expect(events.malformed).toBe(0);
    lazy.dispose();
    keyed.dispose();
  });
});

describe("the keyless table's own storage", () => {
  it("reserves what the twin does when a budget's first evictions free keyless blocks only", () => {
    // One long path, then one-block prompts: the budget first evicts the path's bottom blocks,
    // all keyless; the list of deferred table removals must be made then all the same.
    const [lazy, keyed] = twins({ numRanks: 1, tokensPerBlock: 2, maxMemoryBytes: 40_000 });
    let token = 1;
    for (let step = 0; step < 400; step++) {
      const p = Array.from({ length: step === 0 ? 400 : 2 }, () => token++);
      expect(lazy.insert(0, p)).toBe(keyed.insert(0, p));
      expect(lazy.stats(), `step ${step}`).toEqual(keyed.stats());
    }
    lazy.dispose();
    keyed.dispose();
  });
});

describe("a crafted collision of path keys", () => {
  const MASK = (1n << 64n) - 1n;
  /** The core's path key of a block under `parent` (assembly/prefix-index/table.ts: chain). */
  const chain = (parent: bigint, block: bigint): bigint => ((((parent << 23n) | (parent >> 41n)) & MASK) * 0x9e3779b97f4a7c15n & MASK) ^ block;
  const [lo, hi] = namespaceKey(null, null);
  const seed = (BigInt(hi) << 32n) | BigInt(lo);
  /** Block hashes as `insertBlockHashes` takes them. */
  const words = (blocks: bigint[]): Uint32Array => Uint32Array.from(blocks.flatMap((b) => [Number(b & 0xffffffffn), Number(b >> 32n)]));

  /** Rank 0 holds blocks [1, 2]; rank 1 is given [3, x] where x makes the second block's path key equal to that of [1, 2]. */
  function collide(index: PrefixIndex): Uint32Array {
    const keyA = chain(chain(seed, 1n), 2n);
    const x = keyA ^ chain(chain(seed, 3n), 0n);
    index.insertBlockHashes(0, words([1n, 2n]));
    index.insertBlockHashes(1, words([3n, x]));
    return words([3n, x]);
  }

  it("is dropped before a snapshot, which then restores and equals the keyed twin's", () => {
    const [lazy, keyed] = twins({ numRanks: 2, tokensPerBlock: 4 });
    const crafted = collide(lazy);
    collide(keyed);
    const out = new Uint32Array(2);
    // The keyed twin refused the colliding block as it came; the lazy index took it unchecked.
    keyed.matchHashesInto(out, crafted, 2);
    expect([...out]).toEqual([0, 4]);
    lazy.matchHashesInto(out, crafted, 2);
    expect([...out]).toEqual([0, 8]);
    const bytes = lazy.snapshot();
    lazy.matchHashesInto(out, crafted, 2);
    expect([...out]).toEqual([0, 4]);
    expect(Buffer.from(bytes).equals(Buffer.from(keyed.snapshot()))).toBe(true);
    const restored = restorePrefixIndex(bytes);
    restored.matchHashesInto(out, crafted, 2);
    expect([...out]).toEqual([0, 4]);
    expect(restored.match([])).toEqual([0, 0]);
    for (const i of [lazy, keyed, restored]) i.dispose();
  });

  it("whose block then loses the walk's shortcut stays out of the table, unreachable, until a snapshot drops it", () => {
    const lazy = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    // Block 1 gets three children first, so block [1, 2] is in the table when the crafted one comes.
    lazy.insertBlockHashes(0, words([1n, 21n]));
    lazy.insertBlockHashes(0, words([1n, 22n]));
    const crafted = collide(lazy);
    // Two more children of block 3 in rank 1: its first child (the crafted one) must now enter the table, and cannot.
    lazy.insertBlockHashes(1, words([3n, 11n]));
    lazy.insertBlockHashes(1, words([3n, 12n]));
    const out = new Uint32Array(2);
    lazy.matchHashesInto(out, crafted, 2);
    expect([...out]).toEqual([0, 4]);
    expect(lazy.blockCount(1)).toBe(4);
    const restored = restorePrefixIndex(lazy.snapshot());
    expect(lazy.blockCount(1)).toBe(3);
    expect(restored.blockCount(1)).toBe(3);
    restored.matchHashesInto(out, words([3n, 12n]), 2);
    expect([...out]).toEqual([0, 8]);
    lazy.dispose();
    restored.dispose();
  });
});
