// Restoring a router onto another set of ranks (a gateway's fleet changed):
// the ranks that remain keep their cache views, conversations and warm-up
// under their new numbers, dropped ranks take their state with them, and new
// ranks start empty.
import { describe, expect, it } from "vitest";
import { AdpInputError, createRouter, restoreRouter, type RouteInput } from "../src/index.js";
import { idle } from "./support/build.js";

const prompt = (seed: number) => Array.from({ length: 64 }, (_, i) => seed * 1000 + i);
const batch = (numRanks: number, requests: RouteInput["requests"]): RouteInput => ({ rankStates: idle(numRanks), maxNumActiveRequests: 64, requests });

describe("restoreRouter with ranks", () => {
  it("the identity mapping restores the same router, byte for byte", () => {
    const router = createRouter({ numRanks: 3, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 8 } });
    router.route(batch(3, [0, 1, 2].map((r) => ({ id: r, tokens: prompt(r), attentionDpRank: r }))));
    const bytes = router.snapshot();
    expect(restoreRouter(bytes, { ranks: [0, 1, 2] }).snapshot()).toEqual(bytes);
  });

  it("dropping a rank drops its cache view; the others keep theirs under their new numbers", () => {
    const router = createRouter({ numRanks: 3, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 8 } });
    router.route(batch(3, [0, 1, 2].map((r) => ({ id: r, tokens: prompt(r), attentionDpRank: r }))));
    const moved = restoreRouter(router.snapshot(), { ranks: [2, 0] }); // old 2 → 0, old 0 → 1, old 1 dropped
    const index = moved.prefixIndex!;
    expect(index.numRanks).toBe(2);
    expect(index.match(prompt(2))).toEqual([64, 0]);
    expect(index.match(prompt(0))).toEqual([0, 64]);
    expect(index.match(prompt(1))).toEqual([0, 0]);
    // A prompt sharing old rank 2's cached prefix now goes to new rank 0.
    const result = moved.route(batch(2, [{ id: 9, tokens: [...prompt(2), 7, 7, 7] }]));
    expect(result.assignments[0]).toEqual([9]);
  });

  it("conversations follow their ranks, and those of a dropped rank are forgotten", () => {
    const router = createRouter({ numRanks: 3, attentionDp: { kv_cache_routing_conversation_affinity: true } });
    router.route(batch(3, [0, 1, 2].map((r) => ({ id: r, numTokens: 8, conversationId: `c${r}`, attentionDpRank: r }))));
    const moved = restoreRouter(router.snapshot(), { ranks: [null, 2, 0] }); // a new rank 0; old 2 → 1; old 0 → 2; old 1 dropped
    expect(moved.metrics().conversations!.tracked).toBe(2); // c1 went with its rank
    const again = moved.route(batch(3, [0, 2].map((r) => ({ id: 10 + r, numTokens: 8, conversationId: `c${r}` }))));
    expect(again.assignments[2]).toEqual([10]); // c0 stayed with its rank, now 2
    expect(again.assignments[1]).toEqual([12]); // c2, now 1
    expect(moved.metrics().decisions.sticky).toBe(2);
  });

  it("a new rank gets a cold-start warm-up request when warm-up is on", () => {
    const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true } });
    router.route(batch(2, [{ id: 1, numTokens: 8 }, { id: 2, numTokens: 8 }])); // both warmed up
    const moved = restoreRouter(router.snapshot(), { ranks: [0, 1, null] });
    const result = moved.route(batch(3, [{ id: 3, numTokens: 8 }]));
    expect(result.assignments[2]).toEqual([3]);
    expect(moved.metrics().decisions.warmup).toBe(1);
  });

  it("a revoked Proxy or a length that lies as ranks is a typed error", () => {
    const router = createRouter({ numRanks: 3 });
    const { proxy, revoke } = Proxy.revocable([0, 1], {});
    revoke();
    expect(() => restoreRouter(router.snapshot(), { ranks: proxy })).toThrow(AdpInputError);
    const liar = new Proxy([0], { get: (t, k) => (k === "length" ? 5e8 : Reflect.get(t, k)) });
    expect(() => restoreRouter(router.snapshot(), { ranks: liar })).toThrow(AdpInputError);
  });

  it.each([
    [[0, 0], "ranks[1]"],
    [[3], "ranks[0]"],
    [[1.5], "ranks[0]"],
    [[], "ranks"],
    ["0,1", "ranks"],
  ])("ranks %j is refused by name", (ranks, field) => {
    const router = createRouter({ numRanks: 3 });
    try {
      restoreRouter(router.snapshot(), { ranks: ranks as never });
      throw new Error("expected a throw");
    } catch (error) {
      expect(error).toBeInstanceOf(AdpInputError);
      expect((error as AdpInputError).field).toBe(field);
    }
  });
});
