// The simulator at scale: the O(1)-a-block engine gives exactly the figures of the
// engine it replaced (pinned below, measured before the change), flags overloaded
// runs, and reports progress without changing a result.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { simulate, type SimulateOptions, type SimulationResult } from "../src/simulate/run.js";
import { multiTurnWorkload } from "../src/simulate/workload.js";

/**
 * Figures of the engine before #14's rewrite (array-scanning queues, `Map` caches
 * in LRU order by delete-and-set), route times left out: per policy its JSON
 * figures, the sum of its TTFTs and of its load samples (every value of every
 * sample), and how many load samples it took.
 */
const BEFORE = {
  mt1000: {"optimum":0.8499,"requests":5515,"pols":{"round_robin":{"policy":"round_robin","prefix_hit_ratio":0.5455,"prefill_tokens":9177856,"prefill_work_max_over_mean":1.0244,"requests_max_over_mean":1.0009,"ttft_ms":{"p50":39.3,"p90":90.7,"p99":138.6},"ttftSum":257591.36094057953,"loadSamples":3205,"loadSum":1686403124.900314},"default":{"policy":"default","prefix_hit_ratio":0.5575,"prefill_tokens":8935936,"prefill_work_max_over_mean":1.1754,"requests_max_over_mean":1.1692,"ttft_ms":{"p50":38.2,"p90":88.1,"p99":139.8},"ttftSum":251157.8811855051,"loadSamples":3231,"loadSum":1702040531.2403998},"kv_cache_aware":{"policy":"kv_cache_aware","prefix_hit_ratio":0.8048,"prefill_tokens":3941184,"prefill_work_max_over_mean":1.4705,"requests_max_over_mean":1.513,"ttft_ms":{"p50":18.9,"p90":33.4,"p99":83.1},"ttftSum":121052.50099925563,"loadSamples":3521,"loadSum":1874847021.280408},"conversation:round_robin":{"policy":"conversation:round_robin","prefix_hit_ratio":0.8494,"prefill_tokens":3041216,"prefill_work_max_over_mean":1.0606,"requests_max_over_mean":1.0633,"ttft_ms":{"p50":17.8,"p90":24.7,"p99":34.5},"ttftSum":99396.30073489153,"loadSamples":3592,"loadSum":1910465984.440316},"conversation:least_queued":{"policy":"conversation:least_queued","prefix_hit_ratio":0.8494,"prefill_tokens":3041216,"prefill_work_max_over_mean":1.3994,"requests_max_over_mean":1.3969,"ttft_ms":{"p50":17.8,"p90":24.8,"p99":34.7},"ttftSum":99506.62093763743,"loadSamples":3589,"loadSum":1908714755.82041},"conversation:least_tokens":{"policy":"conversation:least_tokens","prefix_hit_ratio":0.8494,"prefill_tokens":3041216,"prefill_work_max_over_mean":1.0472,"requests_max_over_mean":1.056,"ttft_ms":{"p50":17.8,"p90":24.6,"p99":33.8},"ttftSum":98954.3608676686,"loadSamples":3598,"loadSum":1912124927.9003882}}},
  bounded: {"optimum":0.8506,"requests":1668,"pols":{"kv_cache_aware":{"policy":"kv_cache_aware","prefix_hit_ratio":0.8206,"prefill_tokens":1086144,"prefill_work_max_over_mean":1.3668,"requests_max_over_mean":1.3837,"ttft_ms":{"p50":17.6,"p90":27,"p99":68.5},"ttftSum":32075.579974675762,"loadSamples":3062,"loadSum":1511243359.8199577},"conversation:least_tokens":{"policy":"conversation:least_tokens","prefix_hit_ratio":0.8498,"prefill_tokens":909504,"prefill_work_max_over_mean":1.1,"requests_max_over_mean":1.0959,"ttft_ms":{"p50":16.9,"p90":23.3,"p99":28.5},"ttftSum":28343.899974451713,"loadSamples":3076,"loadSum":1517748518.9799592}}},
  events: {"optimum":0.8466,"requests":1088,"pols":{"kv_cache_aware":{"policy":"kv_cache_aware","prefix_hit_ratio":0.4829,"prefill_tokens":2007936,"prefill_work_max_over_mean":1.4159,"requests_max_over_mean":1.4449,"ttft_ms":{"p50":37.2,"p90":89.2,"p99":125.3},"event_feed":{"batches_published":1087,"batches_delivered":855,"batches_dropped":232,"batches_replayed":0,"batches_lost_unseen":2,"batches_in_flight_at_end":0,"gaps":176,"placements_while_gapped":373,"placements_while_stale":95,"stored_events_skipped":31,"engine_view_blocks_at_end":2051,"own_view_blocks_at_end":17024},"ttftSum":47786.75999091059,"loadSamples":2474,"loadSum":1128750742.7199771}}},
  small: {"optimum":0.8495,"requests":2187,"pols":{"round_robin":{"policy":"round_robin","prefix_hit_ratio":0.7506,"prefill_tokens":1975680,"prefill_work_max_over_mean":1.0013,"requests_max_over_mean":1.0059,"ttft_ms":{"p50":70892,"p90":146828.9,"p99":151488.6},"ttftSum":158118845.906742,"loadSamples":1460,"loadSum":323756951.7600512},"kv_cache_aware":{"policy":"kv_cache_aware","prefix_hit_ratio":0.7505,"prefill_tokens":1976704,"prefill_work_max_over_mean":1.0034,"requests_max_over_mean":1.0023,"ttft_ms":{"p50":71007.6,"p90":146746.6,"p99":151291.4},"ttftSum":158338483.52674478,"loadSamples":1460,"loadSum":323887872.853386}}},
} as const;

const CASES: Record<keyof typeof BEFORE, [seed: number, sessions: number, options: SimulateOptions]> = {
  mt1000: [1, 1000, { ranks: 8 }],
  bounded: [2, 300, { ranks: 4, cacheBlocks: 3000 }],
  events: [3, 200, { ranks: 4, cacheBlocks: 400, indexUpdates: "events", eventDelayMs: 250, eventDropRate: 0.2, eventSeed: 3, eventStaleMs: 5000 }],
  small: [5, 400, { ranks: 2, maxNumActiveRequests: 4, maxNumTokens: 512, rateScale: 3 }],
};

/** A run's figures in the shape of {@link BEFORE}. */
function figures(result: SimulationResult) {
  const pols: Record<string, object> = {};
  for (const { route_us_per_request: _r, overloaded: _o, overload_reason: _why, sync: _s, ...p } of result.policies) {
    pols[p.policy] = {
      ...p,
      ttftSum: result.ttftSorted[p.policy]!.reduce((a, x) => a + x, 0),
      loadSamples: result.loadOverTime[p.policy]!.length,
      loadSum: result.loadOverTime[p.policy]!.flat().reduce((a, x) => a + x, 0),
    };
  }
  return { optimum: result.optimum_prefix_hit_ratio, requests: result.requests, pols };
}

describe("simulate at scale", () => {
  for (const [name, [seed, sessions, options]] of Object.entries(CASES) as [keyof typeof BEFORE, (typeof CASES)[keyof typeof BEFORE]][]) {
    it(`gives exactly the figures of the engine before the rewrite: ${name}`, () => {
      const policies = Object.keys(BEFORE[name].pols);
      expect(figures(simulate(multiTurnWorkload({ seed, sessions }), { ...options, policies }))).toEqual(BEFORE[name]);
    });
  }

  it("flags an overloaded run with its reason, and not a run the engine keeps up with", () => {
    const [seed, sessions, options] = CASES.small;
    const small = simulate(multiTurnWorkload({ seed, sessions }), { ...options, policies: ["round_robin", "kv_cache_aware"] });
    for (const p of small.policies) {
      expect(p.overloaded).toBe(true);
      expect(p.overload_reason).toMatch(/^\d+ requests waited at once for a rank \(at [\d.]+ s\), more than the 8 the engine holds \(2 ranks × 4 active\)$/);
    }
    const fine = simulate(multiTurnWorkload({ seed: 1, sessions: 300 }), { ranks: 8, policies: ["round_robin", "kv_cache_aware"] });
    for (const p of fine.policies) expect([p.overloaded, p.overload_reason]).toEqual([false, null]);
  });

  it("flags a run whose requests mostly wait even when the engine admits them all (TTFT p50 against a prompt's prefill alone)", () => {
    // No cap on active requests: nothing queues for a rank, the ranks' own prefill queues grow.
    const result = simulate(multiTurnWorkload({ seed: 4, sessions: 300 }), { ranks: 1, maxNumActiveRequests: 100_000, rateScale: 50, policies: ["round_robin"] });
    const [p] = result.policies;
    expect(p!.overloaded).toBe(true);
    expect(p!.overload_reason).toMatch(/^TTFT p50 [\d.]+ s is \d+× the median prompt's prefill alone \([\d.]+ ms\)$/);
  });

  it("reports progress as (done, total) at most every 100 ms and once at the end, without changing a result", () => {
    const trace = multiTurnWorkload({ seed: 6, sessions: 400 });
    const options: SimulateOptions = { ranks: 4, policies: ["round_robin", "kv_cache_aware"] };
    const calls: [done: number, total: number, at: number][] = [];
    const withProgress = simulate(trace, { ...options, onProgress: (done, total) => calls.push([done, total, Date.now()]) });
    const total = trace.requests.length * 2;
    expect(calls.length).toBeGreaterThan(0);
    expect(calls.at(-1)!.slice(0, 2)).toEqual([total, total]);
    for (const [i, [done, t, at]] of calls.entries()) {
      expect(t).toBe(total);
      if (i > 0) expect(done).toBeGreaterThanOrEqual(calls[i - 1]![0]);
      // (99: the callback reads the clock a moment after the throttle did, maybe across a millisecond.)
      if (i > 0 && i < calls.length - 1) expect(at - calls[i - 1]![2]).toBeGreaterThanOrEqual(99);
    }
    const strip = (r: SimulationResult) => ({ ...r, policies: r.policies.map(({ route_us_per_request: _, ...p }) => p) });
    expect(strip(withProgress)).toEqual(strip(simulate(trace, options)));
  });
});

describe("the CLI says when the simulated engine is overloaded", () => {
  const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
  it("a warning on standard error for each overloaded policy (table or --json), none for an engine that keeps up", () => {
    const args = ["simulate", "--workload", "multi-turn", "--sessions", "200", "--ranks", "1", "--max-active", "2", "--policies", "round_robin"];
    for (const extra of [[], ["--json"]]) {
      const out = spawnSync(process.execPath, [cli, ...args, ...extra], { encoding: "utf8" });
      expect(out.status).toBe(0);
      expect(out.stderr).toMatch(/^warning: round_robin: the simulated engine is overloaded: \d+ requests waited at once/m);
    }
    const calm = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "50", "--policies", "round_robin"], { encoding: "utf8" });
    expect(calm.status).toBe(0);
    expect(calm.stderr).toBe("");
  });
});
