// Differential tests: the wasm core's two routing loops against the
// plain-TypeScript oracles on random inputs built to produce many ties.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { RoutingCore } from "../src/core.js";
import { oracleBalanceDefault, oracleScoreKvAware } from "./oracle/routing-loops.js";

const core = new RoutingCore();

const rankStates = (numRanks: number) =>
  fc.record({
    counts: fc.array(fc.integer({ min: 0, max: 6 }), { minLength: numRanks, maxLength: numRanks }),
    tokens: fc.array(fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 3 }).map((x) => x * 50), fc.integer({ min: 0, max: 5000 })), { minLength: numRanks, maxLength: numRanks }),
  });

const kvCase = fc.integer({ min: 1, max: 40 }).chain((numRanks) =>
  fc.record({
    numRanks: fc.constant(numRanks),
    state: rankStates(numRanks),
    cap: fc.integer({ min: 0, max: 12 }),
    beta: fc.constantFrom(0, 0.1, 0.5, 1, 2.5, 10, -1),
    threshold: fc.constantFrom(0, 0.1, 0.5, 0.9),
    requests: fc.array(
      fc.record({
        id: fc.oneof(fc.bigInt({ min: 0n, max: 100n }), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n })),
        numTokens: fc.oneof(fc.integer({ min: 0, max: 8 }).map((x) => x * 16), fc.integer({ min: 0, max: 3000 })),
        matches: fc.array(fc.constantFrom(0, 0, 0, 16, 32, 64, 96), { minLength: numRanks, maxLength: numRanks }),
      }),
      { maxLength: 60 },
    ),
  }),
);

describe("wasm routing loops agree with the plain-TypeScript oracles", () => {
  it("KV-cache-aware scoring, shuffle tie-break included", () => {
    fc.assert(
      fc.property(kvCase, ({ numRanks, state, cap, beta, threshold, requests }) => {
        const views = core.reserveKvBatch(numRanks, requests.length, requests.length + 1);
        views.counts.set(state.counts);
        views.tokens.set(state.tokens);
        requests.forEach((r, i) => {
          views.matches.set(r.matches, (i + 1) * numRanks);
          views.requests.set([r.numTokens, Number(r.id & 0xffffffffn), Number(r.id >> 32n), i + 1], 4 * i);
        });
        core.scoreKvAware(requests.length, cap, beta, threshold);
        const after = core.kvViews();
        const counts = Int32Array.from(state.counts);
        const tokens = Float64Array.from(state.tokens);
        const expected = oracleScoreKvAware(counts, tokens, requests, cap, beta, threshold);
        expect([...after.out]).toEqual(expected);
        expect([...after.counts]).toEqual([...counts]);
        expect([...after.tokens]).toEqual([...tokens]);
      }),
      { seed: 7, numRuns: 400 },
    );
  });

  it("all-tie batches long enough to use every seeding lane, several passes over", () => {
    // Each tied request draws from its own generator lane; a batch of 100 idle
    // requests fills all lanes three times over and part of a fourth.
    const ids = Array.from({ length: 100 }, (_, i) => (i % 3 === 0 ? BigInt(i) : (BigInt(i) * 0x9e3779b97f4a7c15n) & ((1n << 64n) - 1n)));
    for (const numRanks of [2, 8, 72]) {
      const requests = ids.map((id) => ({ id, numTokens: 0, matches: new Array<number>(numRanks).fill(0) }));
      const views = core.reserveKvBatch(numRanks, requests.length, requests.length + 1);
      views.counts.fill(0);
      views.tokens.fill(0);
      requests.forEach((r, i) => {
        views.matches.set(r.matches, (i + 1) * numRanks); // only row 0 comes zeroed
        views.requests.set([0, Number(r.id & 0xffffffffn), Number(r.id >> 32n), i + 1], 4 * i);
      });
      core.scoreKvAware(requests.length, 1000, 1, 0.1);
      const expected = oracleScoreKvAware(new Int32Array(numRanks), new Float64Array(numRanks), requests, 1000, 1, 0.1);
      expect([...core.kvViews().out]).toEqual(expected);
      expect(new Set(expected).size).toBeGreaterThan(1); // the shuffles did spread them
    }
  });

  it("default min-heap balance", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }).chain((n) => fc.tuple(rankStates(n), fc.array(fc.integer({ min: 0, max: 400 }), { maxLength: 80 }), fc.integer({ min: 0, max: 10 }))),
        ([state, sizes, cap]) => {
          const counts = [...state.counts];
          const tokens = [...state.tokens];
          const got = core.balanceDefault(counts, tokens, sizes, cap);
          const oCounts = Int32Array.from(state.counts);
          const oTokens = Float64Array.from(state.tokens);
          expect(got).toEqual(oracleBalanceDefault(oCounts, oTokens, sizes, cap));
          expect(counts).toEqual([...oCounts]);
          expect(tokens).toEqual([...oTokens]);
        },
      ),
      { seed: 11, numRuns: 400 },
    );
  });
});
