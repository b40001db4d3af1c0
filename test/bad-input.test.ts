// Bad input gets a typed error naming the field and value, raised before any
// router state changes: a router that rejected a batch decides the next ones
// exactly as a twin that never saw it.
import { describe, expect, it } from "vitest";
import { AdpInputError, createRouter, type RouteInput, type RouteRequest } from "../src/index.js";
import { idle, req } from "./support/build.js";

const configs = {
  default: {},
  kv: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true },
  conversation: { kv_cache_routing_conversation_affinity: true, kv_cache_routing_max_sessions: 3 },
};

const good = (base: number): RouteInput => ({
  rankStates: idle(4),
  maxNumActiveRequests: 6,
  requests: [0, 1, 2, 3, 4].map((i) => req(base + i, 10 + i, { conversationId: `c${(base + i) % 7}` })),
});

const bad: [string, (r: RouteInput) => RouteInput, string][] = [
  ["rank out of range", (r) => ({ ...r, requests: [...r.requests, req(99, 3, { attentionDpRank: 4 })] }), "requests[5].attentionDpRank"],
  ["negative rank", (r) => ({ ...r, requests: [...r.requests, req(99, 3, { attentionDpRank: -1 })] }), "requests[5].attentionDpRank"],
  ["duplicate id", (r) => ({ ...r, requests: [...r.requests, r.requests[0]!] }), "requests[5].id"],
  ["5 and 5n are the same id", (r) => ({ ...r, requests: [req(5, 3), { id: 5n, numTokens: 3 }] }), "requests[1].id"],
  ["non-integer id", (r) => ({ ...r, requests: [...r.requests, req(1.5, 3)] }), "requests[5].id"],
  ["unsafe id", (r) => ({ ...r, requests: [...r.requests, req(2 ** 53, 3)] }), "requests[5].id"],
  ["bigint id beyond u64", (r) => ({ ...r, requests: [...r.requests, { id: 1n << 64n, numTokens: 1 }] }), "requests[5].id"],
  ["no tokens", (r) => ({ ...r, requests: [...r.requests, { id: 99 } as RouteRequest] }), "requests[5]"],
  ["token id out of range", (r) => ({ ...r, requests: [...r.requests, { id: 99, tokens: [1, 2 ** 32] }] }), "requests[5].tokens[1]"],
  ["NaN token", (r) => ({ ...r, requests: [...r.requests, { id: 99, tokens: [NaN] }] }), "requests[5].tokens[0]"],
  ["wrong number of rank states", (r) => ({ ...r, rankStates: idle(3) }), "rankStates"],
  ["rank state out of place", (r) => ({ ...r, rankStates: r.rankStates.map((s, i) => ({ ...s, rank: i === 2 ? 3 : i })) }), "rankStates[2].rank"],
  ["negative load", (r) => ({ ...r, rankStates: r.rankStates.map((s, i) => ({ ...s, numActiveTokens: i === 1 ? -5 : 0 })) }), "rankStates[1].numActiveTokens"],
  ["infinite cap", (r) => ({ ...r, maxNumActiveRequests: Infinity }), "maxNumActiveRequests"],
  ["conversation id of the wrong type", (r) => ({ ...r, requests: [...r.requests, req(99, 3, { conversationId: 7 as unknown as string })] }), "requests[5].conversationId"],
  ["empty conversation id", (r) => ({ ...r, requests: [...r.requests, req(99, 3, { conversationId: "" })] }), "requests[5].conversationId"],
  ["megabyte conversation id", (r) => ({ ...r, requests: [...r.requests, req(99, 3, { conversationId: "x".repeat(1 << 20) })] }), "requests[5].conversationId"],
  ["prefixMatches of the wrong length", (r) => ({ ...r, requests: [...r.requests, req(99, 3, { prefixMatches: [1, 2] })] }), "requests[5].prefixMatches"],
  ["rank without scheduling params", (r) => ({ ...r, requests: [...r.requests, req(99, 3, { schedulingParams: false, attentionDpRank: 1 })] }), "requests[5].attentionDpRank"],
];

describe.each(Object.entries(configs))("%s router rejects bad batches atomically", (_, attentionDp) => {
  it.each(bad)("%s", (_name, corrupt, field) => {
    const router = createRouter({ numRanks: 4, attentionDp });
    const twin = createRouter({ numRanks: 4, attentionDp });
    router.route(good(0));
    twin.route(good(0));
    let error: unknown;
    try {
      router.route(corrupt(good(100)));
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(AdpInputError);
    expect((error as AdpInputError).field).toBe(field);
    expect((error as AdpInputError).message).toContain(field);
    for (const base of [200, 300]) expect(router.route(good(base))).toEqual(twin.route(good(base)));
  });
});

describe("createRouter options", () => {
  it("rejects unknown options by name and bad rank counts", () => {
    expect(() => createRouter({ numRanks: 2, ranks: 3 } as never)).toThrow(/ranks: is not a createRouter option/);
    expect(() => createRouter({ numRanks: 0 })).toThrow(/numRanks: must be an integer in \[1, 65536\], got 0/);
    expect(() => createRouter({ numRanks: 2, attentionDp: { enable_balance: 1 } as never })).toThrow(/enable_balance: must be a boolean/);
  });
});

describe("more bad input, each rejected before any state changes", () => {
  const kv = () => createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 16 } });
  const base = (requests: RouteRequest[]): RouteInput => ({ rankStates: idle(2), maxNumActiveRequests: 8, requests });
  it.each([
    ["NaN load", { ...base([]), rankStates: [{ numActiveRequests: 0, numActiveTokens: NaN }, { numActiveRequests: 0, numActiveTokens: 0 }] }, "rankStates[0].numActiveTokens"],
    ["fractional request count", { ...base([]), rankStates: [{ numActiveRequests: 0.5, numActiveTokens: 0 }, { numActiveRequests: 0, numActiveTokens: 0 }] }, "rankStates[0].numActiveRequests"],
    ["negative cap", { ...base([]), maxNumActiveRequests: -1 }, "maxNumActiveRequests"],
    ["missing id", base([{ tokens: [1] } as unknown as RouteRequest]), "requests[0].id"],
    ["bigint id below -2^64", base([{ id: -(1n << 64n), numTokens: 1 }]), "requests[0].id"],
    ["numTokens NaN", base([{ id: 1, numTokens: NaN }]), "requests[0].numTokens"],
    ["numTokens as a string", base([{ id: 1, numTokens: "5" as unknown as number }]), "requests[0].numTokens"],
    ["Infinity token id", base([{ id: 1, tokens: [1, Infinity] }]), "requests[0].tokens[1]"],
    ["tokens not an array", base([{ id: 1, tokens: "abc" as unknown as number[] }]), "requests[0].tokens"],
    ["requests not an array", { ...base([]), requests: {} as unknown as RouteRequest[] }, "requests"],
    ["a request that is null", base([null as unknown as RouteRequest]), "requests[0]"],
    ["block key negative", base([{ id: 1, numTokens: 40, blockKeys: [1, -1] }]), "requests[0].blockKeys[1]"],
    ["relax as a number", base([{ id: 1, numTokens: 4, attentionDpRelax: 0 as unknown as boolean }]), "requests[0].attentionDpRelax"],
  ])("%s", (_name, input, field) => {
    const router = kv();
    const before = router.snapshot();
    expect(() => router.route(input as RouteInput)).toThrow(expect.objectContaining({ field }));
    expect(router.snapshot()).toEqual(before);
  });

  it("a million-token prompt is routed and learned, not rejected", () => {
    const router = kv();
    const tokens = new Uint32Array(1_000_000).map((_, i) => i % 50_000);
    const r = router.route(base([{ id: 1, tokens }]));
    expect(r.assignments.flat()).toEqual([1]);
    expect(router.prefixIndex!.stats().residencies).toBe(62_500);
  });

  it("engine events out of order are applied and counted, never thrown", () => {
    const index = createRouter({ numRanks: 1, prefixIndex: { tokensPerBlock: 1 } }).prefixIndex!;
    const ev = (id: number) => ({ event_id: id, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: id, tokens: [{ token_id: id }] }] }, attention_dp_rank: 0 });
    expect(index.applyKvEvents([ev(5), ev(3), ev(9)])).toMatchObject({ applied: 3, outOfOrder: 1 });
  });
});
