// Snapshot and restore: a restored router (or index) continues with identical decisions.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AdpInputError, createPrefixIndex, createRouter, restorePrefixIndex, restoreRouter, runScenario, toRouteInput, type RouteInput } from "../src/index.js";
import { decodeSnapshot, encodeSnapshot, SNAPSHOT_KINDS } from "../src/snapshot-format.js";
import { idle } from "./support/build.js";
import { readJsonLines } from "./support/fixtures.js";

interface RouteScenario {
  name: string;
  mode: string;
  config?: Record<string, unknown>;
  tp_size: number;
  batches: { rank_states: { num_active_requests: number; num_active_tokens: number }[]; max_num_active_requests: number; requests: Record<string, unknown>[]; prefix_matches?: Record<string, number>[]; cached_prefixes?: unknown }[];
}

describe("router snapshot / restore", () => {
  const scenarios = readJsonLines<RouteScenario>("conformance.jsonl").filter((s) => s.mode === "route" && s.batches.length > 1 && !s.batches.some((b) => b.cached_prefixes !== undefined));

  it(`continues with identical decisions over the remaining conformance batches (${scenarios.length} scenarios, every split)`, () => {
    for (const s of scenarios) {
      const expected = runScenario(s) as { batches: { assignments: Record<string, number[]>; unassigned: number[] }[] };
      for (let split = 1; split < s.batches.length; split++) {
        const original = createRouter({ numRanks: s.tp_size, attentionDp: (s.config ?? {}) as never });
        for (const b of s.batches.slice(0, split)) original.route(toRouteInput(b, s.tp_size));
        const restored = restoreRouter(original.snapshot());
        expect(restored.kind).toBe(original.kind);
        s.batches.slice(split).forEach((b, i) => {
          const a = original.route(toRouteInput(b, s.tp_size));
          const r = restored.route(toRouteInput(b, s.tp_size));
          expect(r, `${s.name} split ${split}`).toEqual(a);
          expect(Object.fromEntries(r.assignments.map((ids, rank) => [String(rank), ids]))).toEqual(expected.batches[split + i]!.assignments);
        });
      }
    }
  });

  it("carries the learned prefix index: restored and original keep deciding alike", () => {
    const make = () => createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true }, prefixIndex: { tokensPerBlock: 4, capacityBlocksPerRank: 40 } });
    fc.assert(
      fc.property(fc.array(fc.array(fc.record({ stem: fc.integer({ min: 0, max: 5 }), len: fc.integer({ min: 1, max: 40 }) }), { maxLength: 8 }), { minLength: 2, maxLength: 10 }), fc.nat(), (batches, cut) => {
        const original = make();
        let id = 0;
        const input = (batch: { stem: number; len: number }[]): RouteInput => ({
          rankStates: idle(4),
          maxNumActiveRequests: 64,
          requests: batch.map((q) => ({ id: id++, tokens: Array.from({ length: q.len }, (_, i) => q.stem * 1000 + i) })),
        });
        const split = 1 + (cut % (batches.length - 1));
        for (const b of batches.slice(0, split)) original.route(input(b));
        const restored = restoreRouter(original.snapshot());
        expect(restored.snapshot()).toEqual(original.snapshot());
        for (const b of batches.slice(split)) {
          const start = id;
          const a = original.route(input(b));
          id = start;
          expect(restored.route(input(b))).toEqual(a);
        }
        expect(restored.prefixIndex!.stats().residencies).toBe(original.prefixIndex!.stats().residencies);
      }),
      { seed: 17, numRuns: 60 },
    );
  });

  it("a rejected batch leaves the snapshot byte-identical", () => {
    const router = createRouter({ numRanks: 3, attentionDp: { kv_cache_routing_conversation_affinity: true } });
    router.route({ rankStates: idle(3), maxNumActiveRequests: 8, requests: [{ id: 1, numTokens: 5, conversationId: "a" }] });
    const before = router.snapshot();
    expect(() => router.route({ rankStates: idle(3), maxNumActiveRequests: 8, requests: [{ id: 2, numTokens: 5, conversationId: "b" }, { id: 2, numTokens: 5 }] })).toThrow(AdpInputError);
    expect(router.snapshot()).toEqual(before);
  });

  it("rejects bytes that are not a snapshot", () => {
    expect(() => restoreRouter(new Uint8Array([1, 2, 3]))).toThrow(/not a valid snapshot/);
    expect(() => restoreRouter("x" as never)).toThrow(AdpInputError);
    const index = createPrefixIndex({ numRanks: 2 });
    expect(() => restoreRouter(index.snapshot())).toThrow(/holds a prefix index, not a router/);
    const cut = createRouter({ numRanks: 2 }).snapshot().subarray(0, 20);
    expect(() => restoreRouter(cut)).toThrow(/truncated|corrupt/);
  });
});

describe("prefix index snapshot / restore", () => {
  it("restores views, stamps (eviction order), engine maps and counters", () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ rank: fc.integer({ min: 0, max: 2 }), stem: fc.integer({ min: 0, max: 3 }), len: fc.integer({ min: 0, max: 16 }) }), { minLength: 1, maxLength: 40 }),
        fc.array(fc.record({ rank: fc.integer({ min: 0, max: 2 }), stem: fc.integer({ min: 0, max: 3 }), len: fc.integer({ min: 0, max: 16 }) }), { maxLength: 20 }),
        (before, after) => {
          const a = createPrefixIndex({ numRanks: 3, tokensPerBlock: 2, capacityBlocksPerRank: 6 });
          const tokens = (q: { stem: number; len: number }) => Array.from({ length: q.len }, (_, i) => q.stem * 100 + i);
          for (const q of before) a.insert(q.rank, tokens(q));
          a.applyKvEvents({ event_id: 7, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 42, tokens: [{ token_id: 9 }, { token_id: 9 }] }] }, attention_dp_rank: 1 });
          const b = restorePrefixIndex(a.snapshot());
          // Byte figures may differ (the restored heaps hold no stale entries); the contents may not.
          const contents = (x: typeof a) => {
            const { bytesInUse: _b, tableBytes: _t, reservedBytes: _r, wasmMemoryBytes: _w, ...rest } = x.stats();
            return rest;
          };
          expect(contents(b)).toEqual(contents(a));
          for (const q of after) {
            a.insert(q.rank, tokens(q));
            b.insert(q.rank, tokens(q));
            for (const probe of before.concat(after)) expect(b.match(tokens(probe))).toEqual(a.match(tokens(probe)));
          }
          const removal = { event_id: 8, data: { type: "removed", block_hashes: [42] }, attention_dp_rank: 1 };
          expect(b.applyKvEvents(removal)).toEqual(a.applyKvEvents(removal));
          expect(contents(b)).toEqual(contents(a));
        },
      ),
      { seed: 23, numRuns: 100 },
    );
  });

  it("refuses a snapshot whose block-path keys come from another key scheme", () => {
    const a = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    a.insert(1, [1, 2, 3, 4]);
    const kind = SNAPSHOT_KINDS.prefixIndex;
    const { state, sections } = decodeSnapshot(a.snapshot(), kind);
    expect(restorePrefixIndex(encodeSnapshot(kind, state, sections)).match([1, 2, 3, 4, 5])).toEqual([0, 4]);
    const { pathKeys: _scheme, ...older } = state;
    expect(() => restorePrefixIndex(encodeSnapshot(kind, older, sections))).toThrowError(/snapshot.*another scheme.*scheme 2.*got 1/s);
    expect(() => restorePrefixIndex(encodeSnapshot(kind, { ...state, pathKeys: 3 }, sections))).toThrowError(AdpInputError);
  });
});
