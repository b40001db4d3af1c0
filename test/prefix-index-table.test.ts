// The core's key table (assembly/prefix-index/table.ts) keeps seven entries a
// bucket and counts in each full bucket the entries that passed it. Random
// prompts rarely fill a bucket, so these tests choose block keys whose path
// keys all have the table's last bucket as their home: they overflow it, wrap
// around to the first buckets, and are evicted and replaced there, while
// every lookup must still find exactly the blocks the index holds. A count
// left too low ends a search early (a held block reads as missing), one never
// taken back only makes searches longer; either way against a model of the
// index's least-recently-used order, the answers must agree.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import { buildSync } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPrefixIndex, init } from "../src/index.js";
import { setTableSaltForTests } from "../src/index-core.js";
import { namespaceKey } from "../src/namespace.js";

// Each index salts its table's homes with random words, so that nobody can
// compute them; these tests craft homes, so their indexes are salted with 0.
beforeAll(async () => {
  await init();
  setTableSaltForTests([0, 0]);
});

afterAll(() => {
  setTableSaltForTests(null);
});

const MASK = (1n << 64n) - 1n;

/** The core's 64-bit finalizer (murmur3 fmix64). */
function fmix(h: bigint): bigint {
  h ^= h >> 33n;
  h = (h * 0xff51afd7ed558ccdn) & MASK;
  h ^= h >> 33n;
  h = (h * 0xc4ceb9fe1a85ec53n) & MASK;
  return h ^ (h >> 33n);
}

/** The core's path key of a one-block path: the namespace seed chained with the caller key's hash. */
function pathKey(key: number): bigint {
  const [lo, hi] = namespaceKey(null, null);
  const seed = (BigInt(hi) << 32n) | BigInt(lo);
  const block = fmix(BigInt(key) ^ 0xd6e8feb86659fd93n) ^ 0x2545f4914f6cdd1dn;
  const rotated = ((seed << 23n) | (seed >> 41n)) & MASK;
  return ((rotated * 0x9e3779b97f4a7c15n) & MASK) ^ block;
}

/** The first `n` block keys from `from` whose home is bucket `bucket` of a table of `buckets`. */
function keysHomedAt(bucket: number, buckets: number, n: number, from = 1): number[] {
  const keys: number[] = [];
  for (let k = from; keys.length < n; k++) {
    if (Number(fmix(pathKey(k)) & BigInt(buckets - 1)) === bucket) keys.push(k);
  }
  return keys;
}

describe("the prefix index's key table", () => {
  it("finds every held block when many share the last bucket, overflow past it, wrap around and are evicted in turn", () => {
    // A new index's table has 16 buckets and grows past 64 blocks: 24 held blocks keep it at 16.
    const held = 24;
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 1, capacityBlocksPerRank: held });
    const crowded = keysHomedAt(15, 16, 200);
    const elsewhere = keysHomedAt(0, 16, 40, 1_000_000);
    const order: number[] = []; // rank 0's blocks, least recent first
    const check = (asked: readonly number[]): void => {
      for (const k of asked) expect(index.matchBlocks([k])[0], `block key ${k}`).toBe(order.includes(k) ? 1 : 0);
    };
    for (let i = 0; i < crowded.length; i++) {
      const k = i % 5 === 4 ? elsewhere[i % elsewhere.length]! : crowded[i]!;
      index.insertBlocks(0, [k]);
      const at = order.indexOf(k);
      if (at >= 0) order.splice(at, 1);
      order.push(k);
      if (order.length > held) order.shift();
      expect(index.blockCount(0)).toBe(order.length);
      check(crowded.slice(Math.max(0, i - 40), i + 1));
    }
    check(crowded);
    check(elsewhere);
  });

  it("ends a search when every bucket's count is above 0 (it looped forever before): checked in a worker, so a hang fails instead of stalling the run", async () => {
    // 57 blocks homed at bucket 0 fill buckets 0-7 and put the 57th in bucket 8, counted in 0-7; it is
    // used again, then 56 blocks homed at bucket 8 evict the others and wrap into bucket 0, counted
    // in 8-15: 57 blocks held, every count above 0. A search for any other key then finds no bucket
    // whose count ends it.
    const first = keysHomedAt(0, 16, 57);
    const second = keysHomedAt(8, 16, 56, 1_000_000);
    const absent = keysHomedAt(5, 16, 1, 2_000_000)[0]!;
    // The worker loads the library with its test hook, bundled from the sources.
    const bundle = buildSync({
      stdin: { contents: 'export { init, createPrefixIndex } from "./src/index.ts";\nexport { setTableSaltForTests } from "./src/index-core.ts";', resolveDir: path.resolve("."), loader: "ts" },
      bundle: true, format: "esm", platform: "neutral", target: "es2022", write: false, logLevel: "silent",
    });
    const file = path.join(mkdtempSync(path.join(tmpdir(), "adp-table-")), "index.mjs");
    writeFileSync(file, bundle.outputFiles[0]!.contents);
    const dist = pathToFileURL(file).href;
    const code = `
      const { parentPort, workerData: w } = require("node:worker_threads");
      import(w.dist).then(async ({ init, createPrefixIndex, setTableSaltForTests }) => {
        await init();
        setTableSaltForTests([0, 0]);
        const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1, capacityBlocksPerRank: 58 });
        for (const k of w.first) index.insertBlocks(0, [k]);
        index.insertBlocks(0, [w.first[56]]);
        for (const k of w.second) index.insertBlocks(0, [k]);
        const held = [w.first[56], ...w.second].map((k) => index.matchBlocks([k])[0]);
        const missing = index.matchBlocks([w.absent])[0];
        index.insertBlocks(0, [w.absent]);
        parentPort.postMessage({ count: index.blockCount(0), held, missing, added: index.matchBlocks([w.absent])[0], evicted: index.matchBlocks([w.first[0]])[0] });
      });`;
    const worker = new Worker(code, { eval: true, workerData: { dist, first, second, absent } });
    const outcome = await new Promise<unknown>((resolve, reject) => {
      const timer = setTimeout(() => resolve("hung"), 10_000);
      worker.once("message", (m) => (clearTimeout(timer), resolve(m)));
      worker.once("error", (e) => (clearTimeout(timer), reject(e)));
    });
    await worker.terminate();
    expect(outcome).toEqual({ count: 58, held: Array(57).fill(1), missing: 0, added: 1, evicted: 0 });
  });

  it("finds, holds and exports the same under any salt: two randomly salted indexes and an unsalted one agree", () => {
    const unsalted = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 });
    setTableSaltForTests(null);
    try {
      // Blocks crafted to share bucket 0 of an unsalted table (under a random salt they spread).
      const crafted = keysHomedAt(0, 16, 60);
      const a = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 });
      const b = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 });
      for (const k of crafted) for (const index of [a, b, unsalted]) index.insertBlocks(0, [k]);
      for (const k of [...crafted, 7, 8]) {
        const want = crafted.includes(k) ? 1 : 0;
        expect([a, b, unsalted].map((index) => index.matchBlocks([k])[0])).toEqual([want, want, want]);
      }
      expect(a.snapshot()).toEqual(unsalted.snapshot());
      expect(b.snapshot()).toEqual(unsalted.snapshot());
    } finally {
      setTableSaltForTests([0, 0]);
    }
  });

  it("keeps finding blocks after growing several times with crowded buckets", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 });
    const keys = keysHomedAt(3, 16, 300);
    for (const k of keys) index.insertBlocks(0, [k]);
    expect(index.blockCount(0)).toBe(keys.length);
    for (const k of keys) expect(index.matchBlocks([k])).toEqual([1]);
    expect(index.matchBlocks([keysHomedAt(3, 16, 1, keys.at(-1)! + 1)[0]!])).toEqual([0]);
  });
});
