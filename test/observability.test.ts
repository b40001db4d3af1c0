// metrics(), the onDecision hook and the Prometheus formatter.
import { describe, expect, it } from "vitest";
import { createRouter, runScenario, toRouteInput, type DecisionRecord } from "../src/index.js";
import { formatPrometheus } from "../src/prometheus.js";
import { idle, req, states } from "./support/build.js";
import { readJsonLines } from "./support/fixtures.js";

describe("onDecision", () => {
  it("explains the KV-cache-aware score: matched tokens, gate, load terms, scores, ties", () => {
    const records: DecisionRecord[] = [];
    const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, onDecision: (r) => records.push(r) });
    router.route({ rankStates: states([1, 500], [0, 0]), maxNumActiveRequests: 8, requests: [req(9, 128, { prefixMatches: [96, 0] })] });
    const [r] = records;
    expect(r).toMatchObject({ requestId: 9, router: "kv_cache_aware", outcome: "scored", rank: 1 });
    expect(r!.scoring).toEqual({
      eligibleRanks: [0, 1], excludedByCap: [], matchedTokens: [96, 0], matchGateOpen: true,
      loadTerms: [128, 0], scores: [160, 128], tieBrokenByShuffle: false,
    });
    records.length = 0;
    router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [req(1, 10)] });
    expect(records[0]!.scoring!.tieBrokenByShuffle).toBe(true);
  });

  it("names explicit, warm-up, sticky, overflow, placed and unassigned decisions", () => {
    const seen: string[] = [];
    const kv = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true, kv_cache_routing_fair_share_multiplier: 0.5 }, onDecision: (r) => seen.push(`${r.requestId}:${r.outcome}:${r.rank}`) });
    kv.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [req(1, 10, { attentionDpRank: 1, attentionDpRelax: false }), req(2, 10), req(3, 10), req(4, 10)] });
    expect(seen).toEqual(["1:explicit:1", "2:warmup:0", "3:unassigned:-1", "4:unassigned:-1"]);
    const conv: DecisionRecord[] = [];
    const c = createRouter({ numRanks: 2, attentionDp: { kv_cache_routing_conversation_affinity: true }, onDecision: (r) => conv.push(r) });
    c.route({ rankStates: idle(2), maxNumActiveRequests: 2, requests: [req(1, 10, { conversationId: "A" })] });
    c.route({ rankStates: states([2, 0], [0, 0]), maxNumActiveRequests: 2, requests: [req(2, 10, { conversationId: "A" })] });
    c.route({ rankStates: idle(2), maxNumActiveRequests: 2, requests: [req(3, 10, { conversationId: "A" })] });
    expect(conv.map((r) => [r.outcome, r.rank, r.conversation, r.home])).toEqual([["placed", 0, "A", undefined], ["overflow", 1, "A", 0], ["sticky", 0, "A", undefined]]);
  });

  it("does not change decisions: every conformance scenario routes identically with the hook set", () => {
    const scenarios = readJsonLines<Record<string, unknown>>("conformance.jsonl").filter((s) => s.mode === "route");
    for (const s of scenarios.slice(0, 200)) {
      const batches = s.batches as { rank_states: { num_active_requests: number; num_active_tokens: number }[]; max_num_active_requests: number; requests: Record<string, unknown>[]; prefix_matches?: Record<string, number>[]; cached_prefixes?: unknown }[];
      if (batches.some((b) => b.cached_prefixes !== undefined)) continue;
      const records: DecisionRecord[] = [];
      const router = createRouter({ numRanks: s.tp_size as number, attentionDp: s.config as never, onDecision: (r) => records.push(r) });
      const results = batches.map((b) => router.route(toRouteInput(b, s.tp_size as number)));
      const expected = runScenario(s) as { batches: { assignments: Record<string, number[]> }[] };
      results.forEach((res, i) => expect(Object.fromEntries(res.assignments.map((ids, r) => [String(r), ids]))).toEqual(expected.batches[i]!.assignments));
      // Every scored record's rank has the lowest score among its eligible ranks.
      for (const r of records.filter((x) => x.scoring)) {
        const { eligibleRanks, scores } = r.scoring!;
        expect(scores[eligibleRanks.indexOf(r.rank)]).toBe(Math.min(...scores));
      }
    }
  });
});

describe("metrics() and formatPrometheus", () => {
  it("counts decisions by outcome, selections per rank, conversations and rejected batches", () => {
    const router = createRouter({ numRanks: 3, attentionDp: { kv_cache_routing_conversation_affinity: true, kv_cache_routing_max_sessions: 2 } });
    router.route({ rankStates: idle(3), maxNumActiveRequests: 8, requests: [req(1, 5, { conversationId: "a" }), req(2, 5, { conversationId: "b" }), req(3, 5, { conversationId: "c" }), req(4, 5)] });
    router.route({ rankStates: idle(3), maxNumActiveRequests: 8, requests: [req(5, 5, { conversationId: "c" })] });
    expect(() => router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [] })).toThrow();
    const m = router.metrics();
    expect(m.batches).toBe(2);
    expect(m.rejectedBatches).toBe(1);
    expect(m.decisions.placed).toBe(4);
    expect(m.decisions.sticky).toBe(1);
    expect(m.selectionsPerRank.reduce((a, b) => a + b, 0)).toBe(5);
    expect(m.conversations).toEqual({ tracked: 2, maxSessions: 2, evictions: 1 });
    const text = formatPrometheus(m);
    expect(text).toContain('adp_router_decisions_total{router="conversation",outcome="sticky"} 1');
    expect(text).toContain('adp_router_rank_selected_total{router="conversation",dp_rank="0"}');
    expect(text).toContain("# TYPE adp_router_conversation_evictions_total counter");
    expect(text).not.toMatch(/conversation_id|"a"|"c"/);
    expect(formatPrometheus(m, { gate: { holds: 4, releases: 9 } })).toContain('adp_router_gate_iterations_total{router="conversation",outcome="hold"} 4');
  });

  it("reports the prefix index when the router has one", () => {
    const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 4 } });
    router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [req(1, 17)] });
    expect(router.metrics().prefixIndex).toMatchObject({ blocks: 4, residencies: 4 });
    expect(formatPrometheus(router.metrics(), { prefix: "x_" })).toContain('x_prefix_index_blocks{router="kv_cache_aware"} 4');
  });

  it("histograms how much of each placed prompt was cached on its rank, as the router saw it", () => {
    const requests = [
      req(1, 100, { schedulingParams: true, attentionDpRank: 1, attentionDpRelax: false, prefixMatches: [0, 30] }), // explicit: 0.3 on rank 1
      req(2, 100, { prefixMatches: [80, 0] }),
      req(3, 0), // no prompt tokens: not counted
      req(4, 100, { prefixMatches: [0, 0] }),
      req(5, 50, { prefixMatches: [500, 500] }), // claims more than the prompt: counts as all of it
    ];
    const input = { rankStates: idle(2), maxNumActiveRequests: 8, requests };
    const results = [false, true].map((hooked) => {
      const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, ...(hooked ? { onDecision: () => {} } : {}) });
      return { result: router.route(input), metrics: router.metrics() };
    });
    const { result, metrics } = results[0]!;
    expect(results[1]!.metrics.prefixHits).toEqual(metrics.prefixHits); // the explained path counts alike
    // Expected from the placements themselves: each request's prefixMatches on the rank it got.
    const rankOf = new Map<number, number>();
    result.assignments.forEach((ids, rank) => ids.forEach((id) => rankOf.set(Number(id), rank)));
    expect(rankOf.get(1)).toBe(1);
    const size = (r: (typeof requests)[number]) => r.tokens!.length;
    const fractions = requests.filter((r) => size(r) > 0).map((r) => Math.min(r.prefixMatches?.[rankOf.get(Number(r.id))!] ?? 0, size(r)) / size(r));
    const h = metrics.prefixHits!;
    expect(h.upperBounds).toEqual([0, 0.1, 0.25, 0.5, 0.75, 0.9, 1]);
    expect(h.counts).toEqual(h.upperBounds.map((le, i) => fractions.filter((f) => f <= le && (i === 0 || f > h.upperBounds[i - 1]!)).length));
    expect(h.counts[3]).toBeGreaterThanOrEqual(1); // request 1's 0.3
    expect(h.counts[6]).toBeGreaterThanOrEqual(1); // request 5, clamped to 1
    expect(h.requests).toBe(4);
    expect(h.fractionSum).toBeCloseTo(fractions.reduce((a, b) => a + b, 0), 12);
    expect(h.promptTokens).toBe(350);
    expect(h.matchedTokens).toBe(fractions.reduce((a, f, i) => a + f * [100, 100, 100, 50][i]!, 0));
    const text = formatPrometheus(metrics);
    let cumulative = 0;
    h.upperBounds.forEach((le, i) => {
      cumulative += h.counts[i]!;
      expect(text).toContain(`adp_router_prefix_hit_fraction_bucket{router="kv_cache_aware",le="${le}"} ${cumulative}`);
    });
    expect(text).toContain('adp_router_prefix_hit_fraction_count{router="kv_cache_aware"} 4');
    expect(text).toContain(`adp_router_prefix_matched_tokens_total{router="kv_cache_aware"} ${h.matchedTokens}`);
    // Routers that do not look at prefixes have no such metric.
    expect(createRouter({ numRanks: 2 }).metrics().prefixHits).toBeUndefined();
  });
});
