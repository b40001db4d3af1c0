// `adp-router simulate`: the same arrivals through every policy, side by side.
// Platform-neutral (no node: imports) so a browser page can run it too.

import type { AttentionDpConfigInput } from "../config.js";
import { createRouter } from "../router.js";
import { DEFAULT_ENGINE, internPaths, runEngine, type EngineOptions, type RouterSide, type RunResult } from "./engine.js";
import { optimumHitRatio, type Trace } from "./trace.js";

/** How the router's prefix index learns. */
export type IndexUpdates = "routing" | "events";

/** Options of {@link simulate}. */
export interface SimulateOptions extends Partial<EngineOptions> {
  /** `attention_dp_config` overrides for the KV-cache-aware policy (snake_case). */
  readonly config?: AttentionDpConfigInput;
  /** How the KV-cache-aware router's index learns. @default "routing" */
  readonly indexUpdates?: IndexUpdates;
  /** Policies to run, by name. @default all */
  readonly policies?: readonly string[];
  /** Called with (policy, fraction done). */
  readonly onProgress?: (policy: string, fraction: number) => void;
}

/** One policy's figures. */
export interface PolicyResult {
  readonly policy: string;
  readonly prefix_hit_ratio: number;
  readonly prefill_tokens: number;
  readonly prefill_work_max_over_mean: number;
  readonly requests_max_over_mean: number;
  readonly ttft_ms: { readonly p50: number; readonly p90: number; readonly p99: number };
  readonly route_us_per_request: number;
}

/** The whole comparison (the `--json` output). */
export interface SimulationResult {
  readonly trace: string;
  readonly ranks: number;
  readonly requests: number;
  readonly optimum_prefix_hit_ratio: number;
  readonly policies: PolicyResult[];
  /** Per policy: active requests per rank over time ([ms, rank0, rank1, ...]); for reports. */
  readonly loadOverTime: Record<string, number[][]>;
  /** Per policy: sorted TTFTs (ms), for reports. */
  readonly ttftSorted: Record<string, Float64Array>;
}

/** Every policy the simulator knows, in report order. */
export const POLICIES = [
  "round_robin",
  "default",
  "kv_cache_aware",
  "conversation:round_robin",
  "conversation:least_queued",
  "conversation:least_tokens",
] as const;

/** The floor: rotate over ranks with room, ignoring load and cache. */
function roundRobin(ranks: number): RouterSide {
  let cursor = 0;
  return {
    discountCached: false,
    route(states, cap, requests) {
      const counts = states.map((s) => s.numActiveRequests);
      return requests.map(() => {
        for (let k = 0; k < ranks; k++) {
          const r = (cursor + k) % ranks;
          if (counts[r]! < cap) {
            counts[r]!++;
            cursor = (r + 1) % ranks;
            return r;
          }
        }
        return -1;
      });
    },
  };
}

/** One of TensorRT-LLM's routers as the engine's router side. */
function adpRouter(policy: string, ranks: number, blockTokens: number, options: SimulateOptions): RouterSide {
  let attentionDp: AttentionDpConfigInput = {};
  if (policy === "kv_cache_aware") attentionDp = { ...options.config, enable_kv_cache_aware_routing: true, kv_cache_routing_conversation_affinity: false };
  else if (policy.startsWith("conversation:")) {
    attentionDp = { kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: policy.slice(13) as never };
  }
  const events = options.indexUpdates === "events";
  const router = createRouter({
    numRanks: ranks,
    attentionDp,
    ...(policy === "kv_cache_aware" ? { prefixIndex: { tokensPerBlock: blockTokens }, learnFromRouting: !events } : {}),
  });
  const index = router.prefixIndex;
  return {
    discountCached: router.kind === "kv_cache_aware",
    route(states, cap, requests) {
      const result = router.route({ rankStates: states, maxNumActiveRequests: cap, requests });
      const rankOf = new Map<number, number>();
      result.assignments.forEach((ids, rank) => ids.forEach((id) => rankOf.set(Number(id), rank)));
      return requests.map((r) => rankOf.get(Number(r.id)) ?? -1);
    },
    ...(events && index ? { onEvents: (e: unknown[]) => void index.applyKvEvents(e) } : {}),
  };
}

/** The q-quantile of sorted values. */
const quantile = (sorted: Float64Array, q: number): number =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
/** max / mean of `xs` (1 when all are 0). */
const maxOverMean = (xs: number[]): number => {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  return mean === 0 ? 1 : Math.max(...xs) / mean;
};
/** `x` rounded to `digits` decimals. */
const round = (x: number, digits = 4) => Number(x.toFixed(digits));

/** One policy's figures from its run. */
function summarize(policy: string, run: RunResult): PolicyResult {
  const sorted = Float64Array.from(run.ttftMs).sort();
  return {
    policy,
    prefix_hit_ratio: round(run.totalBlocks === 0 ? 0 : run.hitBlocks / run.totalBlocks),
    prefill_tokens: run.prefillTokens,
    prefill_work_max_over_mean: round(maxOverMean(run.prefillPerRank)),
    requests_max_over_mean: round(maxOverMean(run.requestsPerRank)),
    ttft_ms: { p50: round(quantile(sorted, 0.5), 1), p90: round(quantile(sorted, 0.9), 1), p99: round(quantile(sorted, 0.99), 1) },
    route_us_per_request: round((run.routeMs * 1000) / Math.max(run.routed, 1), 3),
  };
}

/** Replays `trace` through each policy on the same arrivals and engine. */
export function simulate(trace: Trace, options: SimulateOptions = {}): SimulationResult {
  const engine: EngineOptions = { ...DEFAULT_ENGINE, ranks: 8, ...stripUndefined(options) } as EngineOptions;
  const policies = options.policies ?? POLICIES;
  const paths = internPaths(trace.requests);
  const results: PolicyResult[] = [];
  const loadOverTime: Record<string, number[][]> = {};
  const ttftSorted: Record<string, Float64Array> = {};
  for (const policy of policies) {
    if (!(POLICIES as readonly string[]).includes(policy)) throw new Error(`unknown policy "${policy}" (expected one of ${POLICIES.join(", ")})`);
    const side = policy === "round_robin" ? roundRobin(engine.ranks) : adpRouter(policy, engine.ranks, trace.blockTokens, options);
    const run = runEngine(trace.requests, paths, trace.blockTokens, engine, side, (f) => options.onProgress?.(policy, f));
    results.push(summarize(policy, run));
    loadOverTime[policy] = run.loadSamples;
    ttftSorted[policy] = Float64Array.from(run.ttftMs).sort();
    options.onProgress?.(policy, 1);
  }
  return {
    trace: trace.name,
    ranks: engine.ranks,
    requests: trace.requests.length,
    optimum_prefix_hit_ratio: round(optimumHitRatio(trace)),
    policies: results,
    loadOverTime,
    ttftSorted,
  };
}

/** `o` without its undefined fields. */
function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** The comparison as a terminal table. */
export function formatTable(result: SimulationResult): string {
  const head = ["policy", "hit ratio", "% of optimum", "prefill tokens", "prefill max/mean", "requests max/mean", "TTFT p50 ms", "p90", "p99", "route µs/req"];
  const rows = result.policies.map((p) => [
    p.policy,
    p.prefix_hit_ratio.toFixed(3),
    `${((100 * p.prefix_hit_ratio) / (result.optimum_prefix_hit_ratio || 1)).toFixed(1)}%`,
    p.prefill_tokens.toLocaleString("en-US"),
    p.prefill_work_max_over_mean.toFixed(3),
    p.requests_max_over_mean.toFixed(3),
    p.ttft_ms.p50.toFixed(0),
    p.ttft_ms.p90.toFixed(0),
    p.ttft_ms.p99.toFixed(0),
    p.route_us_per_request.toFixed(2),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  return [
    `trace ${result.trace}: ${result.requests} requests on ${result.ranks} ranks; optimum prefix hit ratio (one infinite cache) ${result.optimum_prefix_hit_ratio.toFixed(3)}`,
    "",
    line(head),
    line(widths.map((w) => "-".repeat(w))),
    ...rows.map(line),
  ].join("\n");
}

/** The `--json` object (without the report-only series). */
export function toJson(result: SimulationResult): object {
  const { loadOverTime: _l, ttftSorted: _t, ...rest } = result;
  return rest;
}
