// Model-based tests: random insert / match / clearRank / blockCount sequences
// against the naive model, with and without a per-rank capacity.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { createPrefixIndex } from "../src/index.js";
import { NaivePrefixIndex } from "./oracle/naive-prefix-index.js";

const namespaces = [undefined, { loraTaskId: 7 }, { cacheSalt: "tenant-a" }, { loraTaskId: 7, cacheSalt: "tenant-a" }];

const scenario = fc
  .record({
    numRanks: fc.integer({ min: 1, max: 6 }),
    tokensPerBlock: fc.integer({ min: 1, max: 4 }),
    capacity: fc.option(fc.integer({ min: 1, max: 12 }), { nil: undefined }),
  })
  .chain((cfg) =>
    fc.record({
      cfg: fc.constant(cfg),
      // A few shared stems so prompts branch and share prefixes.
      stems: fc.array(fc.array(fc.integer({ min: 0, max: 3 }), { minLength: 0, maxLength: 12 }), { minLength: 1, maxLength: 4 }),
      ops: fc.array(
        fc.record({
          kind: fc.constantFrom("insert", "insert", "insert", "match", "match", "clearRank", "blockCount"),
          rank: fc.integer({ min: 0, max: cfg.numRanks - 1 }),
          stem: fc.nat(),
          tail: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 10 }),
          ns: fc.integer({ min: 0, max: namespaces.length - 1 }),
        }),
        { maxLength: 40 },
      ),
    }),
  );

describe("prefix index vs the naive model", () => {
  it("agrees on every match and block count after random operation sequences", () => {
    fc.assert(
      fc.property(scenario, ({ cfg, stems, ops }) => {
        const index = createPrefixIndex({ numRanks: cfg.numRanks, tokensPerBlock: cfg.tokensPerBlock, ...(cfg.capacity ? { capacityBlocksPerRank: cfg.capacity } : {}) });
        const model = new NaivePrefixIndex(cfg.numRanks, cfg.tokensPerBlock, cfg.capacity);
        for (const op of ops) {
          const tokens = [...stems[op.stem % stems.length]!, ...op.tail];
          const ns = namespaces[op.ns];
          if (op.kind === "insert") {
            index.insert(op.rank, tokens, ns);
            model.insert(op.rank, tokens, ns);
          } else if (op.kind === "match") {
            expect([...index.match(tokens, ns)]).toEqual(model.match(tokens, ns));
          } else if (op.kind === "clearRank") {
            index.clearRank(op.rank);
            model.clearRank(op.rank);
          }
          for (let r = 0; r < cfg.numRanks; r++) expect(index.blockCount(r)).toBe(model.blockCount(r));
        }
        const stats = index.stats();
        expect(stats.residencies).toBe(model.views.reduce((a, v) => a + v.size, 0));
        index.dispose();
      }),
      { seed: 20261129, numRuns: 300 },
    );
  });

  it("match changes nothing: eviction order is the same with or without matches in between", () => {
    const a = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2, capacityBlocksPerRank: 3 });
    const b = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2, capacityBlocksPerRank: 3 });
    for (const t of [[1, 2, 3, 4], [5, 6]]) {
      a.insert(0, t);
      b.insert(0, t);
    }
    a.match([1, 2, 3, 4]);
    a.insert(0, [7, 8]);
    b.insert(0, [7, 8]);
    expect([...a.match([1, 2, 3, 4])]).toEqual([...b.match([1, 2, 3, 4])]);
    expect([...a.match([1, 2, 3, 4])]).toEqual([2, 0]);
  });
});

describe("the plain-TypeScript benchmark baseline", () => {
  it("agrees with the naive model on match (no capacity, no namespaces)", async () => {
    const { PlainPrefixIndex } = await import("./oracle/prefix-index.js");
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 70 }),
        fc.integer({ min: 1, max: 3 }),
        fc.array(fc.record({ rank: fc.nat(), tokens: fc.array(fc.integer({ min: 0, max: 2 }), { maxLength: 12 }) }), { maxLength: 30 }),
        (numRanks, tpb, ops) => {
          const plain = new PlainPrefixIndex(numRanks, tpb);
          const model = new NaivePrefixIndex(numRanks, tpb);
          for (const op of ops) {
            plain.insert(op.rank % numRanks, op.tokens);
            model.insert(op.rank % numRanks, op.tokens);
          }
          for (const op of ops) expect([...plain.match(op.tokens)]).toEqual(model.match(op.tokens));
        },
      ),
      { seed: 5, numRuns: 200 },
    );
  });
});

describe("prefix index under a memory budget", () => {
  // Disjoint prompts make the budget's order observable: a (prompt, rank) view
  // loses blocks only from its tail, and least recently stamped leaves go first
  // across all ranks, so in order of last insert the views must read
  // [gone, …, gone, partly kept, whole, …, whole].
  it("evicts whole views in least-recently-inserted order across ranks, tails first", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 1_500, max: 12_000 }),
        fc.array(fc.record({ again: fc.boolean(), pick: fc.nat(), rank: fc.nat(), blocks: fc.integer({ min: 1, max: 12 }) }), { minLength: 1, maxLength: 120 }),
        (numRanks, headroom, ops) => {
          const tpb = 2;
          const budget = numRanks * 32 + 1024 + 56 + headroom;
          const index = createPrefixIndex({ numRanks, tokensPerBlock: tpb, maxMemoryBytes: budget });
          const prompts: number[][] = [];
          const order: { prompt: number; rank: number }[] = []; // least recently inserted first
          for (const op of ops) {
            const rank = op.rank % numRanks;
            let prompt: number;
            if (op.again && prompts.length > 0) prompt = op.pick % prompts.length;
            else {
              prompt = prompts.length;
              prompts.push(Array.from({ length: op.blocks * tpb }, (_, t) => prompt * 1000 + t));
            }
            index.insert(rank, prompts[prompt]!);
            const at = order.findIndex((u) => u.prompt === prompt && u.rank === rank);
            if (at >= 0) order.splice(at, 1);
            order.push({ prompt, rank });
            expect(index.stats().bytesInUse).toBeLessThanOrEqual(budget);
            const kept = order.map((u) => index.match(prompts[u.prompt]!)[u.rank]! / tpb);
            const whole = order.map((u) => prompts[u.prompt]!.length / tpb);
            const firstKept = kept.findIndex((k) => k > 0);
            const from = firstKept < 0 ? kept.length : firstKept;
            expect(kept.slice(0, from).every((k) => k === 0)).toBe(true);
            for (let i = from + 1; i < kept.length; i++) expect(kept[i]).toBe(whole[i]);
            expect(kept.at(-1)).toBe(whole.at(-1)); // the newest insert is whole
          }
        },
      ),
      { seed: 99, numRuns: 150 },
    );
  });
});
