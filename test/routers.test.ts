// The reference's own scenarios (§13), through the public API.
import { describe, expect, it } from "vitest";
import { createRouter } from "../src/index.js";
import { idle, req, states } from "./support/build.js";

const S = (rank: number) => ({ attentionDpRank: rank, attentionDpRelax: false });
const R = (rank: number) => ({ attentionDpRank: rank, attentionDpRelax: true });

describe("default router (§13.1, §13.3)", () => {
  const router = createRouter({ numRanks: 4 });
  const route = (rankStates: ReturnType<typeof states>, cap: number, requests: ReturnType<typeof req>[]) =>
    router.route({ rankStates, maxNumActiveRequests: cap, requests });

  it("splits evenly on idle ranks and honours strict pins", () => {
    const two = createRouter({ numRanks: 2 });
    expect(two.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [] }).assignments).toEqual([[], []]);
    const a = two.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [1, 2, 3, 4].map((i) => req(i, 10)) }).assignments;
    expect(a.map((l) => l.length)).toEqual([2, 2]);
    expect(two.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [req(1, 10, S(1))] }).assignments[1]).toEqual([1]);
    expect(two.route({ rankStates: states([0, 0], [2, 0]), maxNumActiveRequests: 2, requests: [req(1, 10, S(1))] }).assignments).toEqual([[1], []]);
  });

  it("E1: token loads 10,15,20,25 and seven 3-token requests, cap 3", () => {
    const r = route(states([0, 10], [0, 15], [0, 20], [0, 25]), 3, [0, 1, 2, 3, 4, 5, 6].map((i) => req(i, 3)));
    expect(r.assignments).toEqual([[0, 1], [2, 3], [4, 5], [6]]);
    expect(r.expectedNumActiveRequests).toBe(2);
  });

  it("E2: heap ties break by (tokens, count, rank)", () => {
    const three = createRouter({ numRanks: 3 });
    const r = three.route({ rankStates: states([2, 50], [1, 50], [1, 50]), maxNumActiveRequests: 8, requests: [req(10, 5), req(11, 7), req(12, 7)] });
    expect(r.assignments).toEqual([[10], [11], [12]]);
  });

  it("fixture states [(2,10),(1,5),(3,15),(0,8)] cap 8: pins, relaxed pins, mixed", () => {
    const st = states([2, 10], [1, 5], [3, 15], [0, 8]);
    expect(route(st, 8, [req(1, 4, S(0)), req(2, 4, S(0))]).assignments[0]).toEqual([1, 2]);
    const r = route(st, 8, [req(1, 4, R(0)), req(2, 4, R(1))]);
    expect(r.assignments[0]).toContain(1);
    expect(r.expectedNumActiveRequests).toBe(3);
    const mixed = route(st, 8, [req(1, 4, S(0)), req(2, 4, S(1)), req(3, 4, R(0)), req(4, 4, R(2))]);
    expect(mixed.assignments[0]).toEqual([1, 3]);
    const full = states([8, 10], [1, 5], [3, 15], [0, 8]);
    expect(route(full, 8, [req(1, 4, R(0))]).assignments[0]).toEqual([]);
    expect(route(states([7, 10], [1, 5], [3, 15], [0, 8]), 8, [req(1, 4, S(0)), req(2, 3, S(0))]).assignments[0]).toEqual([1]);
  });

  it("§13.1 pop+route: active [3,3,3,1], three relaxed pins to full ranks all fall to balancing", () => {
    const r = route(states([3, 10], [3, 15], [3, 20], [1, 25]), 3, [req(0, 3, R(0)), req(1, 3, R(1))]);
    expect(r.assignments).toEqual([[], [], [], [0, 1]]);
    expect(r.expectedNumActiveRequests).toBe(3);
  });

  it("more requests than the ranks can take: places what fits, lists the rest (reference: IndexError)", () => {
    const two = createRouter({ numRanks: 2 });
    const r = two.route({ rankStates: idle(2), maxNumActiveRequests: 1, requests: [req(1, 5), req(2, 9), req(3, 7)] });
    expect(r.assignments).toEqual([[2], [3]]);
    expect(r.unassigned).toEqual([1]);
  });
});

describe("KV-cache-aware router (§13.1, §13.2, §13.3)", () => {
  const kv = (numRanks: number, extra: Record<string, unknown> = {}) =>
    createRouter({ numRanks, attentionDp: { enable_kv_cache_aware_routing: true, ...extra } });

  it("worked example: cached 96 of 128 on a loaded rank loses to an idle rank", () => {
    const r = kv(2).route({ rankStates: states([1, 500], [0, 0]), maxNumActiveRequests: 8, requests: [req(9, 128, { prefixMatches: [96, 0] })] });
    expect(r.assignments).toEqual([[], [9]]);
  });

  it("threshold gate (§13.1 #16) and strictness (E4)", () => {
    const gate = (threshold: number) =>
      kv(2, { kv_cache_routing_load_balance_weight: 0.1, kv_cache_routing_match_rate_threshold: threshold }).route({
        rankStates: states([1, 100], [0, 0]), maxNumActiveRequests: 8, requests: [req(1, 100, { prefixMatches: [60, 0] })],
      }).assignments;
    expect(gate(0.5)).toEqual([[1], []]);
    expect(gate(0.7)).toEqual([[], [1]]);
    const e4 = (m: number) => kv(2).route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [req(1, 100, { prefixMatches: [m, 0] })] }).assignments;
    expect(e4(10)).toEqual([[], [1]]);
    expect(e4(11)).toEqual([[1], []]);
  });

  it("fair-share multiplier caps a hot rank (§13.1 #17)", () => {
    const run = (mult: number) =>
      kv(4, { kv_cache_routing_load_balance_weight: 0.1, kv_cache_routing_match_rate_threshold: 0, kv_cache_routing_fair_share_multiplier: mult })
        .route({ rankStates: idle(4), maxNumActiveRequests: 64, requests: [0, 1, 2, 3, 4, 5, 6, 7].map((i) => req(i, 100, { prefixMatches: [80, 0, 0, 0] })) })
        .assignments.map((l) => l.length);
    expect(run(4.0)).toEqual([8, 0, 0, 0]);
    expect(run(1.0)[0]).toBe(2);
  });

  it("E3: pure shuffle tie-break on idle ranks", () => {
    const r = kv(4).route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [0, 1, 2, 3, 4, 5, 6, 7].map((i) => req(i, 10)) });
    expect(r.assignments).toEqual([[3, 5], [2, 7], [0, 4], [1, 6]]);
    expect(r.expectedNumActiveRequests).toBe(4);
  });

  it("E5: multiplier 2.2 gives expected 56 (the double product 55.00000000000001)", () => {
    const r = kv(2, { kv_cache_routing_fair_share_multiplier: 2.2 }).route({
      rankStates: idle(2), maxNumActiveRequests: 100, requests: Array.from({ length: 50 }, (_, i) => req(i, 10)),
    });
    expect(r.expectedNumActiveRequests).toBe(56);
    expect(r.assignments.map((l) => l.length)).toEqual([25, 25]);
  });

  it("E6: fingerprint grouping orders [1,2] < [1,2,3,4] < [5,6,7]", () => {
    const r = kv(2).route({
      rankStates: idle(2), maxNumActiveRequests: 8,
      requests: [{ id: 1, tokens: [5, 6, 7] }, { id: 2, tokens: [1, 2] }, { id: 3, tokens: [1, 2, 3, 4] }],
    });
    expect(r.assignments).toEqual([[3], [2, 1]]);
  });

  it("E6c: a zero-token request with loads 7 and 3 goes to the lighter rank; on idle ranks it is placed, not a crash", () => {
    expect(kv(2).route({ rankStates: states([0, 7], [0, 3]), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: [] }] }).assignments).toEqual([[], [1]]);
    const idleCase = kv(2).route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: [] }] });
    expect(idleCase.assignments.flat()).toEqual([1]);
  });

  it("E7: multiplier 0.5 leaves requests unassigned, listed in input order", () => {
    const r = kv(2, { kv_cache_routing_fair_share_multiplier: 0.5 }).route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [0, 1, 2, 3].map((i) => req(i, 10)) });
    expect(r.expectedNumActiveRequests).toBe(1);
    expect(r.unassigned).toEqual([2, 3]);
  });

  it("warm-up (§13.2 #39, E10): first requests round-robin, then scoring", () => {
    const router = kv(4, { kv_cache_routing_cold_start_warmup: true });
    const r = router.route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [0, 1, 2, 3].map((i) => req(i, 10)) });
    expect(r.assignments).toEqual([[0], [1], [2], [3]]);
    const three = kv(3, { kv_cache_routing_cold_start_warmup: true });
    expect(three.route({ rankStates: idle(3), maxNumActiveRequests: 8, requests: [req(5, 10), req(6, 10)] }).assignments).toEqual([[5], [6], []]);
    const second = three.route({ rankStates: states([1, 10], [1, 10], [0, 0]), maxNumActiveRequests: 8, requests: [req(7, 10, { prefixMatches: [9, 0, 0] }), req(8, 10)] });
    expect(second.assignments[2]).toEqual([7, 8]);
  });

  it("ids above 2^32 and bigints seed the shuffle with two words", () => {
    const a = kv(4).route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [req(2 ** 32 + 5, 10)] }).assignments;
    const b = kv(4).route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [{ id: 2n ** 32n + 5n, tokens: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] }] }).assignments;
    expect(b.map((l) => l.map(Number))).toEqual(a);
  });
});

describe("conversation router (§13.1, §13.3)", () => {
  const conv = (numRanks: number, extra: Record<string, unknown> = {}) =>
    createRouter({ numRanks, attentionDp: { kv_cache_routing_conversation_affinity: true, ...extra } });

  it("first turns spread, second turns stick, for every placement", () => {
    for (const placement of ["round_robin", "least_queued", "least_tokens"]) {
      const router = conv(4, { kv_cache_routing_new_conv_placement: placement });
      const first = router.route({ rankStates: idle(4), maxNumActiveRequests: 64, requests: [0, 1, 2, 3].map((i) => req(i, 10, { conversationId: `conv${i}` })) });
      expect(first.assignments.map((l) => l.length)).toEqual([1, 1, 1, 1]);
      const home = new Map(first.assignments.flatMap((ids, rank) => ids.map((id) => [`conv${id}`, rank] as const)));
      const second = router.route({ rankStates: idle(4), maxNumActiveRequests: 64, requests: [0, 1, 2, 3].map((i) => req(100 + i, 10, { conversationId: `conv${i}` })) });
      second.assignments.forEach((ids, rank) => ids.forEach((id) => expect(home.get(`conv${Number(id) - 100}`)).toBe(rank)));
    }
  });

  it("placements on states (3,1000),(1,500),(2,10): round_robin → 0, least_queued → 1, least_tokens → 2", () => {
    const st = states([3, 1000], [1, 500], [2, 10]);
    const where = (placement: string) =>
      conv(3, { kv_cache_routing_new_conv_placement: placement }).route({ rankStates: st, maxNumActiveRequests: 64, requests: [req(1, 10, { conversationId: "a" })] })
        .assignments.findIndex((l) => l.length === 1);
    expect([where("round_robin"), where("least_queued"), where("least_tokens")]).toEqual([0, 1, 2]);
  });

  it("LRU with max_sessions 2 (E15): c0→0, c1→1, c2→0 evicts c0, c0 again is new → 1", () => {
    const router = conv(2, { kv_cache_routing_max_sessions: 2 });
    const ranks: number[] = [];
    ["c0", "c1", "c2", "c0"].forEach((c, i) => {
      const r = router.route({ rankStates: idle(2), maxNumActiveRequests: 64, requests: [req(i, 10, { conversationId: c })] });
      ranks.push(r.assignments.findIndex((l) => l.length === 1));
    });
    expect(ranks).toEqual([0, 1, 0, 1]);
  });

  it("E8: relax=false without a rank sorts first; a saturated home overflows without rebinding", () => {
    const router = conv(2);
    const b1 = router.route({ rankStates: idle(2), maxNumActiveRequests: 2, requests: [req(1, 10, { conversationId: "A" }), req(2, 10, { conversationId: "B", attentionDpRelax: false })] });
    expect(b1.assignments).toEqual([[2], [1]]);
    const b2 = router.route({ rankStates: states([2, 0], [0, 0]), maxNumActiveRequests: 2, requests: [req(3, 10, { conversationId: "B" }), req(4, 10, { conversationId: "A" })] });
    expect(b2.assignments).toEqual([[], [3, 4]]);
    const b3 = router.route({ rankStates: idle(2), maxNumActiveRequests: 2, requests: [req(5, 10, { conversationId: "B" })] });
    expect(b3.assignments).toEqual([[5], []]);
  });

  it("E9: round-robin skips a rank at the soft cap and keeps its cursor", () => {
    const router = conv(3, { kv_cache_routing_fair_share_multiplier: 1.0 });
    const r = router.route({ rankStates: states([3, 0], [0, 0], [0, 0]), maxNumActiveRequests: 64, requests: [1, 2, 3, 4].map((i) => req(i, 10)) });
    expect(r.assignments).toEqual([[], [1, 3], [2, 4]]);
  });

  it("least_tokens (§13.1 #28): 500,500,100,100,100 tokens on 4 idle ranks → ranks 0,1,2,3,2", () => {
    const router = conv(4, { kv_cache_routing_new_conv_placement: "least_tokens" });
    const r = router.route({ rankStates: idle(4), maxNumActiveRequests: 64, requests: [500, 500, 100, 100, 100].map((n, i) => req(i, n, { conversationId: `c${i}` })) });
    expect(r.assignments).toEqual([[0], [1], [2, 4], [3]]);
  });

  it("subagent affinity id wins over the conversation id (E16)", () => {
    const router = conv(4);
    const r = router.route({
      rankStates: idle(4), maxNumActiveRequests: 64,
      requests: [req(1, 10, { conversationId: "x", subagentAffinityId: "team" }), req(2, 10, { conversationId: "y", subagentAffinityId: "team" })],
    });
    expect(r.assignments.filter((l) => l.length > 0)).toEqual([[1, 2]]);
  });

  it("sticky storm (§13.1 #31): 40 turns of one conversation all placed; expected ≥ every rank's count", () => {
    const r = conv(8).route({ rankStates: idle(8), maxNumActiveRequests: 256, requests: Array.from({ length: 40 }, (_, i) => req(i, 10, { conversationId: "A" })) });
    expect(r.assignments.flat()).toHaveLength(40);
    for (const l of r.assignments) expect(r.expectedNumActiveRequests).toBeGreaterThanOrEqual(l.length);
  });

  it("keys such as __proto__ and constructor are ordinary conversations", () => {
    const router = conv(2);
    const first = router.route({ rankStates: idle(2), maxNumActiveRequests: 64, requests: [req(1, 10, { conversationId: "__proto__" }), req(2, 10, { conversationId: "constructor" })] });
    const again = router.route({ rankStates: idle(2), maxNumActiveRequests: 64, requests: [req(3, 10, { conversationId: "constructor" }), req(4, 10, { conversationId: "__proto__" })] });
    expect(again.assignments).toEqual([[4], [3]]);
    expect(first.assignments).toEqual([[1], [2]]);
  });
});

describe("factory", () => {
  it("picks conversation over KV-cache-aware over default", () => {
    expect(createRouter({ numRanks: 2 }).kind).toBe("default");
    expect(createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true } }).kind).toBe("kv_cache_aware");
    expect(createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_conversation_affinity: true } }).kind).toBe("conversation");
  });
});

describe("init()", () => {
  it("precompiles the core ahead of time; routers decide the same either way", async () => {
    const { init } = await import("../src/index.js");
    const before = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true } }).route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [req(3, 10)] });
    await expect(init()).resolves.toBeUndefined();
    await init();
    const after = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true } }).route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [req(3, 10)] });
    expect(after).toEqual(before);
  });
});
