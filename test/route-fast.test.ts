// Issue #15's fast paths keep every promise of the slow ones: prefixMatches as
// Uint32Arrays decide exactly as plain arrays; rows given as Uint32Arrays are
// copied after the batch is read, so one detached meanwhile is refused before
// any state changes; duplicate ids are found by value (5 and 5n are one id, 5
// and -5 two) in batches of any size, also when a getter routes another
// router's batch while one is read.
import { describe, expect, it } from "vitest";
import { AdpInputError, createRouter, type RouteInput, type RouteRequest } from "../src/index.js";
import { mulberry32 } from "../src/simulate/workload.js";
import { thrown } from "./support/thrown.js";

/** Idle rank states. */
const idle = (n: number) => Array.from({ length: n }, () => ({ numActiveRequests: 0, numActiveTokens: 0 }));
/** A KV-cache-aware router over `numRanks` ranks. */
const kv = (numRanks: number) => createRouter({ numRanks, attentionDp: { enable_kv_cache_aware_routing: true } });


/** A shared-prefix batch (the bench's shape, small): typed token ids, typed prefixMatches on every rank. */
function sharedPrefix(numRanks: number, seed: number, count: number): RouteInput {
  const rand = mulberry32(seed);
  const systems = [0, 1, 2].map((s) => Uint32Array.from({ length: 80 }, (_, i) => 10 + s * 977 + i));
  const requests = Array.from({ length: count }, (_, i): RouteRequest => {
    const n = 60 + Math.floor(rand() * 200);
    const tokens = new Uint32Array(n);
    tokens.set(systems[Math.floor(rand() * 3)]!.subarray(0, Math.min(n, 80)));
    for (let k = 80; k < n; k++) tokens[k] = Math.floor(rand() * 50);
    const prefixMatches = Uint32Array.from({ length: numRanks }, () => (rand() < 0.3 ? 16 * Math.floor(rand() * 6) : 0));
    return { id: i % 3 === 0 ? BigInt(i) + 2n ** 40n : i, tokens, prefixMatches };
  });
  const rankStates = Array.from({ length: numRanks }, () => {
    const c = Math.floor(rand() * 4);
    return { numActiveRequests: c, numActiveTokens: c * 100 + Math.floor(rand() * 50) };
  });
  return { rankStates, maxNumActiveRequests: 64, requests };
}

describe("route() fast paths (issue #15)", () => {
  it("prefixMatches as Uint32Arrays decide exactly as the same values in plain arrays, batch after batch", () => {
    const typed = kv(9);
    const plain = kv(9);
    for (let seed = 1; seed <= 40; seed++) {
      const input = sharedPrefix(9, seed, 1 + (seed * 7) % 60);
      const asPlain = { ...input, requests: input.requests.map((q) => ({ ...q, prefixMatches: Array.from(q.prefixMatches!) })) };
      expect(typed.route(input)).toEqual(plain.route(asPlain));
    }
  });

  it("a Uint32Array row detached by a later request's getter is refused, and the router is unchanged", () => {
    const router = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true } });
    const twin = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true } });
    const row = Uint32Array.of(0, 16, 0, 0);
    const second = {
      id: 2,
      numTokens: 8,
      get prefixMatches() {
        structuredClone(row.buffer, { transfer: [row.buffer] }); // detaches the first request's row
        return [0, 0, 0, 0];
      },
    };
    const error = thrown(() => router.route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [{ id: 1, numTokens: 8, prefixMatches: row }, second] }));
    expect(error).toBeInstanceOf(AdpInputError);
    expect((error as AdpInputError).field).toBe("requests[0].prefixMatches");
    const next: RouteInput = { rankStates: idle(4), maxNumActiveRequests: 8, requests: [{ id: 3, numTokens: 8, prefixMatches: [0, 0, 8, 0] }] };
    expect(router.route(next)).toEqual(twin.route(next));
    expect(router.metrics().rejectedBatches).toBe(1);
  });

  it("finds duplicate ids by value in batches of every size, and only those", () => {
    const router = kv(3);
    const batch = (ids: readonly (number | bigint)[]): RouteInput => ({ rankStates: idle(3), maxNumActiveRequests: 1 << 20, requests: ids.map((id) => ({ id, numTokens: 4 })) });
    // Distinct by value: signs, words that differ in one half, bigints past 2^53.
    const distinct: (number | bigint)[] = [0, 5, -5, 2 ** 32, -(2 ** 32), 2 ** 32 + 5, 5n + 2n ** 53n, -(5n + 2n ** 53n), 2n ** 64n - 1n, -(2n ** 64n - 1n), 7];
    expect(router.route(batch(distinct)).unassigned).toEqual([]);
    for (const [a, b] of [[5, 5n], [-0, 0], [0n, -0], [2 ** 40, 2n ** 40n], [-(2n ** 63n), -(2n ** 63n)]] as const) {
      const error = thrown(() => router.route(batch([1, a, 2, b])));
      expect(error).toBeInstanceOf(AdpInputError);
      expect((error as AdpInputError).field).toBe("requests[3].id");
    }
    // Many ids (the table grows), then a duplicate far apart.
    const many = Array.from({ length: 5000 }, (_, i) => i * 2 ** 20 + (i % 7));
    expect(router.route(batch(many)).assignments.flat()).toHaveLength(5000);
    expect((thrown(() => router.route(batch([...many, many[17]!]))) as AdpInputError).field).toBe("requests[5000].id");
    expect(router.route(batch([1, 2, 3])).assignments.flat()).toHaveLength(3); // the table starts afresh each batch
  });

  it("a getter that routes another router's batch while one is read leaves both duplicate checks whole", () => {
    const outer = kv(2);
    const inner = kv(2);
    let innerResult: unknown;
    const sneaky = {
      id: 2,
      get numTokens() {
        innerResult = inner.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: 1, numTokens: 4 }, { id: 2, numTokens: 4 }] });
        return 4;
      },
    };
    const error = thrown(() => outer.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: 1, numTokens: 4 }, sneaky, { id: 1, numTokens: 4 }] }));
    expect((error as AdpInputError).field).toBe("requests[2].id");
    expect(innerResult).toMatchObject({ unassigned: [] });
  });
});
