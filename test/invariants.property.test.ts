// Properties every router keeps on random configs, rank states and batches, and
// the conversation map against lru-cache as an oracle.
import fc from "fast-check";
import { LRUCache } from "lru-cache";
import { describe, expect, it } from "vitest";
import { ConversationMap, createRouter, type RouteInput, type RouteRequest } from "../src/index.js";

const KEYS = ["a", "b", "c", "d", "__proto__", "constructor", "toString", "e", "f"];

const configArb = fc.oneof(
  fc.constant({}),
  fc.record({
    enable_kv_cache_aware_routing: fc.constant(true),
    kv_cache_routing_load_balance_weight: fc.constantFrom(0, 0.5, 1, 3),
    kv_cache_routing_match_rate_threshold: fc.constantFrom(0, 0.1, 0.5),
    kv_cache_routing_fair_share_multiplier: fc.constantFrom(0.5, 1, 1.5, 2, 2.2),
    kv_cache_routing_cold_start_warmup: fc.boolean(),
  }),
  fc.record({
    kv_cache_routing_conversation_affinity: fc.constant(true),
    kv_cache_routing_fair_share_multiplier: fc.constantFrom(0.5, 1, 2),
    kv_cache_routing_max_sessions: fc.integer({ min: 1, max: 5 }),
    kv_cache_routing_new_conv_placement: fc.constantFrom("round_robin", "least_queued", "least_tokens"),
  }),
);

const scenarioArb = fc.record({ numRanks: fc.integer({ min: 1, max: 8 }), config: configArb }).chain(({ numRanks, config }) =>
  fc.record({
    numRanks: fc.constant(numRanks),
    config: fc.constant(config),
    batches: fc.array(
      fc.record({
        cap: fc.integer({ min: 0, max: 8 }),
        counts: fc.array(fc.integer({ min: 0, max: 10 }), { minLength: numRanks, maxLength: numRanks }),
        tokens: fc.array(fc.integer({ min: 0, max: 5000 }), { minLength: numRanks, maxLength: numRanks }),
        requests: fc.array(
          fc.record({
            len: fc.integer({ min: 0, max: 40 }),
            stem: fc.integer({ min: 0, max: 3 }),
            rank: fc.option(fc.integer({ min: 0, max: numRanks - 1 }), { nil: undefined }),
            relax: fc.option(fc.boolean(), { nil: undefined }),
            noParams: fc.boolean(),
            conv: fc.option(fc.constantFrom(...KEYS), { nil: undefined }),
            matches: fc.option(fc.array(fc.constantFrom(0, 8, 16, 32), { minLength: numRanks, maxLength: numRanks }), { nil: undefined }),
          }),
          { maxLength: 30 },
        ),
      }),
      { minLength: 1, maxLength: 4 },
    ),
  }),
);

type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

function inputs(s: Scenario): RouteInput[] {
  let id = 0;
  return s.batches.map((b) => ({
    rankStates: b.counts.map((c, r) => ({ numActiveRequests: c, numActiveTokens: b.tokens[r]! })),
    maxNumActiveRequests: b.cap,
    requests: b.requests.map((q): RouteRequest => {
      const noParams = q.noParams && q.rank === undefined && q.relax === undefined;
      return {
        id: id++ * 7919 + 2 ** 33,
        tokens: Array.from({ length: q.len }, (_, i) => q.stem * 50 + i),
        ...(noParams ? { schedulingParams: false } : {}),
        ...(q.rank !== undefined ? { attentionDpRank: q.rank } : {}),
        ...(q.relax !== undefined ? { attentionDpRelax: q.relax } : {}),
        ...(q.conv !== undefined ? { conversationId: q.conv } : {}),
        ...(q.matches !== undefined ? { prefixMatches: q.matches } : {}),
      };
    }),
  }));
}

describe("router invariants (random configs, rank states, batches)", () => {
  it("every request appears exactly once; caps hold as documented; replays are identical", () => {
    fc.assert(
      fc.property(scenarioArb, (s) => {
        const router = createRouter({ numRanks: s.numRanks, attentionDp: s.config as never });
        const twin = createRouter({ numRanks: s.numRanks, attentionDp: s.config as never });
        for (const input of inputs(s)) {
          const result = router.route(input);
          expect(twin.route(input)).toEqual(result);
          const seen = [...result.assignments.flat(), ...result.unassigned].map(Number).sort((a, b) => a - b);
          expect(seen).toEqual(input.requests.map((r) => Number(r.id)).sort((a, b) => a - b));
          result.assignments.forEach((ids, r) => {
            if (ids.length === 0) return;
            const final = input.rankStates[r]!.numActiveRequests + ids.length;
            expect(final, `rank ${r} above expected`).toBeLessThanOrEqual(result.expectedNumActiveRequests);
            // The conversation router's placement may exceed the hard cap when every
            // rank is at its soft cap (the reference does the same); the others never do.
            if (router.kind !== "conversation") expect(final, `rank ${r} above the hard cap`).toBeLessThanOrEqual(input.maxNumActiveRequests);
          });
          if (router.kind === "conversation") expect(result.unassigned).toEqual([]);
        }
      }),
      { seed: 4242, numRuns: 400 },
    );
  });
});

describe("conversation map against lru-cache", () => {
  it("holds the same entries in the same LRU order under random record / peek sequences", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 6 }),
        fc.array(fc.record({ op: fc.constantFrom("record", "record", "peek"), key: fc.constantFrom(...KEYS), rank: fc.integer({ min: 0, max: 7 }) }), { maxLength: 80 }),
        (max, ops) => {
          const mine = new ConversationMap(max);
          const oracle = new LRUCache<string, number>({ max });
          for (const op of ops) {
            if (op.op === "record") {
              mine.record(op.key, op.rank);
              oracle.set(op.key, op.rank);
            } else {
              expect(mine.peek(op.key)).toBe(oracle.peek(op.key));
            }
            expect(mine.entries()).toEqual([...oracle.rentries()]);
          }
        },
      ),
      { seed: 77, numRuns: 500 },
    );
  });

  it("stays exact past its first array growth and through restore, counting evictions", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 40 }),
        fc.array(fc.record({ key: fc.integer({ min: 0, max: 60 }), rank: fc.integer({ min: 0, max: 7 }) }), { minLength: 40, maxLength: 300, size: "max" }),
        fc.nat(),
        (max, ops, cut) => {
          let mine = new ConversationMap(max);
          const oracle = new LRUCache<string, number>({ max });
          let evicted = 0;
          ops.forEach((op, i) => {
            if (i === cut % (ops.length + 1)) {
              const copy = new ConversationMap(max);
              copy.restore(mine.entries());
              expect(copy.evictions).toBe(0);
              mine = copy;
              evicted = 0;
            }
            const key = `conv-${op.key}`;
            if (oracle.peek(key) === undefined && oracle.size === max) evicted++;
            mine.record(key, op.rank);
            oracle.set(key, op.rank);
          });
          expect(mine.entries()).toEqual([...oracle.rentries()]);
          expect(mine.size).toBe(oracle.size);
          expect(mine.evictions).toBe(evicted);
        },
      ),
      { seed: 78, numRuns: 300 },
    );
  });
});
