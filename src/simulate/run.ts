// `adp-router simulate`: the same arrivals through every policy, side by side.
// Platform-neutral (no node: imports) so a browser page can run it too.

import { parseAttentionDpConfig, type AttentionDpConfigInput } from "../config.js";
import { AdpInputError, readOptions } from "../errors.js";
import { DEFAULT_ENGINE, judgeOverload, optimumHitRatioOfPaths, pathsOf, runEngine, type EngineOptions, type Overload, type RunResult } from "./engine.js";
import { describeEventModel, EVENT_OPTION_KEYS, readEventModel, type EventModel, type EventOptions } from "./event-feed.js";
import { describeReplicaModel, REPLICA_OPTION_KEYS, readReplicaModel, ReplicatedSide, SINGLE_REPLICA, type ReplicaModel, type ReplicaOptions, type SyncMode, type SyncReport } from "./replicas.js";
import { adpRouter, roundRobin, type EventReport, type ReplicaRouter } from "./router-sides.js";
import { runFleet } from "./fleet.js";
import { runPools, type PoolLayout } from "./pools.js";
import { DEFAULT_LOAD_WEIGHT, RANK_ROUTING_KINDS, type RankRoutingKind } from "../instances.js";
import type { Trace } from "./trace.js";

export type { EventReport } from "./router-sides.js";

/** How the router's prefix index learns. */
export type IndexUpdates = "routing" | "events";

/** Options of {@link simulate}. */
export interface SimulateOptions extends Partial<EngineOptions>, EventOptions, ReplicaOptions {
  /** `attention_dp_config` overrides for the KV-cache-aware policy (snake_case), and the config of policy {@link CONFIG_POLICY}. */
  readonly config?: AttentionDpConfigInput;
  /** How the KV-cache-aware router's index learns. @default "routing" */
  readonly indexUpdates?: IndexUpdates;
  /** Policies to run, by name ({@link POLICIES}, and {@link CONFIG_POLICY} given a config). @default all of POLICIES */
  readonly policies?: readonly string[];
  /**
   * Engines behind the gateway: with it, the run is of N engines of `ranks`
   * ranks each, routed in two phases (src/simulate/fleet.ts), one row per
   * `rankRouting` kind. Not with replicas, events or `policies`.
   */
  readonly instances?: number;
  /** Phase 2's kinds to compare (with `instances`). @default ["adp", "instance", "none"] */
  readonly rankRouting?: readonly RankRoutingKind[];
  /** Phase 1's (and `instance`'s) load weight (with `instances`). @default 0.25 */
  readonly loadWeight?: number;
  /**
   * Disaggregated serving (src/simulate/pools.ts): `prefill` prefill servers and
   * `decode` decode servers of `ranks` ranks each, against an aggregated pool
   * of as many servers; one row per layout and prefill-side policy. Both or neither.
   */
  readonly prefill?: number;
  readonly decode?: number;
  /** KV transfer time per prompt token from a prefill to a decode server, ms (with `prefill`). @default 0.01 */
  readonly transferMsPerToken?: number;
  /** The decode pool's attention_dp_config (with `prefill`), as the router it selects. @default TensorRT-LLM's defaults (the load-balancing router) */
  readonly decodeConfig?: AttentionDpConfigInput;
  /** The layouts to run (with `prefill`), in this order. @default ["aggregated", "disaggregated"] */
  readonly layouts?: readonly ("aggregated" | "disaggregated")[];
  /**
   * Progress: `done` of `total` units (a request finished by a policy's run: the
   * total is requests × policies). Called at most every 100 ms of wall-clock time,
   * and once more with `done === total` at the end; it never changes a result.
   */
  readonly onProgress?: (done: number, total: number) => void;
}

/** Every option {@link simulate} knows: any other key is a mistake, reported rather than ignored. */
const OPTION_KEYS: ReadonlySet<string> = new Set([...Object.keys(DEFAULT_ENGINE), "ranks", "config", "indexUpdates", "policies", "onProgress", "instances", "rankRouting", "loadWeight", "prefill", "decode", "transferMsPerToken", "decodeConfig", "layouts", ...EVENT_OPTION_KEYS, ...REPLICA_OPTION_KEYS]);

/** One policy's figures. */
export interface PolicyResult {
  readonly policy: string;
  readonly prefix_hit_ratio: number;
  readonly prefill_tokens: number;
  readonly prefill_work_max_over_mean: number;
  readonly requests_max_over_mean: number;
  readonly ttft_ms: { readonly p50: number; readonly p90: number; readonly p99: number };
  readonly route_us_per_request: number;
  /**
   * Whether the offered load exceeded what the simulated engine serves: requests
   * queued for a rank outnumbered what the engine holds at once (ranks ×
   * `maxNumActiveRequests`), or the TTFT p50 exceeds 10× the median prompt's prefill
   * alone on an idle rank. Its figures then describe a queue, not the router.
   */
  readonly overloaded: boolean;
  /** Why it is overloaded, in a sentence with the numbers (null when it is not). */
  readonly overload_reason: string | null;
  /**
   * What happened on the engine's KV-event streams (`events` runs of a policy
   * with a prefix index). With several replicas, each subscribes itself: the
   * counts are summed over their subscriptions, the blocks are their views' mean.
   */
  readonly event_feed?: EventReport;
  /** What the replicas put on their stream (runs given replica options). */
  readonly sync?: SyncReport;
  /** Runs of prefill and decode pools: the mean time between output tokens after the first (decode interference), and the KV transfer. */
  readonly pools?: { readonly itl_ms: { readonly p50: number; readonly p90: number; readonly p99: number }; readonly mean_transfer_ms: number };
  /** Runs over several engines: how evenly they were used, and how many requests went pinned to a rank. */
  readonly fleet?: { readonly instance_requests_max_over_mean: number; readonly pinned_share: number };
}

/** The engines of a run given `instances`, as the JSON output states them. */
export interface FleetReport {
  readonly instances: number;
  readonly ranks_per_instance: number;
  /** Phase 1's load weight. */
  readonly load_weight: number;
  /** The attention_dp_config phase 2 `adp` runs on every engine. */
  readonly adp_config: AttentionDpConfigInput;
}

/** The servers of a run given `prefill` and `decode`, as the JSON output states them. */
export interface PoolsReport {
  readonly prefill_servers: number;
  readonly decode_servers: number;
  /** The aggregated rows' servers: prefill + decode. */
  readonly aggregated_servers: number;
  readonly ranks_per_server: number;
  readonly transfer_ms_per_token: number;
  /** The decode pool's attention_dp_config (every disaggregated row): {} is TensorRT-LLM's default router. */
  readonly decode_config: AttentionDpConfigInput;
}

/** How the index learned, as the JSON output states it. */
export type IndexUpdatesReport =
  | { readonly mode: "routing" }
  | {
      readonly mode: "events";
      readonly event_delay_ms: number;
      readonly event_drop_rate: number;
      readonly event_replay: boolean;
      readonly event_seed: number;
      readonly event_stale_ms: number;
    };

/** The gateway replicas of a run, as the JSON output states them. */
export interface ReplicasReport {
  /** Gateway replicas, each with its own router. */
  readonly replicas: number;
  /** How client requests reach the replicas: round-robin in arrival order. */
  readonly spread: "round-robin";
  /** Whether they share entries through one stream. */
  readonly sync: SyncMode;
  /** Ms before the others apply a replica's entry (0 with sync "none"). */
  readonly sync_delay_ms: number;
}

/** The whole comparison (the `--json` output). */
export interface SimulationResult {
  readonly trace: string;
  readonly ranks: number;
  readonly requests: number;
  readonly optimum_prefix_hit_ratio: number;
  /** How the KV-cache-aware router's index learned. */
  readonly index_updates: IndexUpdatesReport;
  /** The gateway replicas (runs given replica options). */
  readonly replicas?: ReplicasReport;
  /** The engines (runs given `instances`); `ranks` is then their ranks in all. */
  readonly fleet?: FleetReport;
  /** The pools (runs given `prefill` and `decode`); `ranks` is then each server's. */
  readonly pools?: PoolsReport;
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

/**
 * The policy that routes with `config` as it is: the router TensorRT-LLM builds
 * from that attention_dp_config (conversation affinity first, then KV-cache-aware
 * routing, else the default router), where `kv_cache_aware` forces KV-cache-aware
 * routing on with the config's parameters. What `adp-router tune` evaluates.
 */
export const CONFIG_POLICY = "config";

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

/** One policy's figures from its run (what its event streams did, and what its replicas shared, when the run had them). */
function summarize(policy: string, run: RunResult, sorted: Float64Array, overload: Overload, events: EventReport | null, sync: SyncReport | null): PolicyResult {
  return {
    policy,
    prefix_hit_ratio: round(run.totalBlocks === 0 ? 0 : run.hitBlocks / run.totalBlocks),
    prefill_tokens: run.prefillTokens,
    prefill_work_max_over_mean: round(maxOverMean(run.prefillPerRank)),
    requests_max_over_mean: round(maxOverMean(run.requestsPerRank)),
    ttft_ms: { p50: round(quantile(sorted, 0.5), 1), p90: round(quantile(sorted, 0.9), 1), p99: round(quantile(sorted, 0.99), 1) },
    route_us_per_request: round((run.routeMs * 1000) / Math.max(run.routed, 1), 3),
    overloaded: overload.overloaded,
    overload_reason: overload.reason,
    ...(events ? { event_feed: events } : {}),
    ...(sync ? { sync } : {}),
  };
}

/** The event reports of every replica's subscription as one: counts summed, view sizes their mean. */
function mergeEventReports(reports: readonly EventReport[]): EventReport {
  if (reports.length === 1) return reports[0]!;
  const merged: Record<string, number> = {};
  for (const report of reports) for (const [key, value] of Object.entries(report)) merged[key] = (merged[key] ?? 0) + value;
  for (const key of ["engine_view_blocks_at_end", "own_view_blocks_at_end"]) merged[key] = Math.round(merged[key]! / reports.length);
  return merged as unknown as EventReport;
}

/**
 * Replica k's event link: its own subscription, losing its own batches
 * (seed + k; replica 0 draws as a lone gateway does).
 */
const eventModelOf = (model: EventModel | null, k: number): EventModel | null => (model === null || k === 0 ? model : { ...model, seed: model.seed + k });

/** The replicas of `policy`, one router each. */
function replicaRouters(policy: string, replicas: ReplicaModel, ranks: number, blockTokens: number, config: AttentionDpConfigInput | undefined, eventModel: EventModel | null): ReplicaRouter[] {
  return Array.from({ length: replicas.replicas }, (_, k) => (policy === "round_robin" ? roundRobin(ranks) : adpRouter(policy, ranks, blockTokens, config, eventModelOf(eventModel, k))));
}

/**
 * Replays `trace` through each policy on the same arrivals and engine. Throws
 * {@link AdpInputError} for an unknown option, an unknown `indexUpdates`, event
 * options that are out of range or given without `indexUpdates: "events"`, and
 * replica options that are out of range (or a delay with `sync: "none"`).
 */
export function simulate(trace: Trace, options: SimulateOptions = {}): SimulationResult {
  options = readOptions(options, "simulate", OPTION_KEYS, "simulate option") as SimulateOptions;
  const indexUpdates = options.indexUpdates ?? "routing";
  if (indexUpdates !== "routing" && indexUpdates !== "events") throw new AdpInputError("indexUpdates", 'must be "routing" or "events"', indexUpdates);
  const eventModel = readEventModel(options, indexUpdates === "events");
  const replicaModel = readReplicaModel(options);
  const replicas = replicaModel ?? SINGLE_REPLICA;
  const engine: EngineOptions = { ...DEFAULT_ENGINE, ranks: 8, ...stripUndefined(pickEngine(options)) } as EngineOptions;
  const policies = options.policies ?? POLICIES;
  const paths = pathsOf(trace.requests);
  const requests = trace.requests;
  const spanMs = requests.length === 0 ? 0 : (requests[requests.length - 1]!.arrivalMs - requests[0]!.arrivalMs) / engine.rateScale;
  const results: PolicyResult[] = [];
  const loadOverTime: Record<string, number[][]> = {};
  const ttftSorted: Record<string, Float64Array> = {};
  for (const policy of policies) {
    if (policy === CONFIG_POLICY && options.config === undefined) throw new AdpInputError("policies", `"${CONFIG_POLICY}" runs the router options.config selects: give config`, policy);
    if (policy !== CONFIG_POLICY && !(POLICIES as readonly string[]).includes(policy)) throw new AdpInputError("policies", `must name policies among ${POLICIES.join(", ")} (or ${CONFIG_POLICY}, given a config)`, policy);
  }
  if (options.instances !== undefined) return simulateFleet(trace, options, engine, paths);
  if (options.prefill !== undefined || options.decode !== undefined) return simulatePools(trace, options, engine, paths);
  const progress = progressReporter(options.onProgress, requests.length * policies.length);
  for (const [k, policy] of policies.entries()) {
    const routers = replicaRouters(policy, replicas, engine.ranks, trace.blockTokens, options.config, eventModel);
    const side = new ReplicatedSide(routers, replicas);
    const run = runEngine(requests, paths, trace.blockTokens, engine, side, progress && ((finished) => progress(k * requests.length + finished)));
    const events = routers[0]!.eventCounts === null ? null : mergeEventReports(routers.map((r) => r.eventCounts!()));
    const sorted = Float64Array.from(run.ttftMs).sort();
    const overload = judgeOverload(run, quantile(sorted, 0.5), requests, engine);
    results.push(summarize(policy, run, sorted, overload, events, replicaModel === null ? null : side.report(run.routed, spanMs)));
    loadOverTime[policy] = run.loadSamples;
    ttftSorted[policy] = sorted;
    progress?.(requests.length * (k + 1));
  }
  return {
    trace: trace.name,
    ranks: engine.ranks,
    requests: requests.length,
    optimum_prefix_hit_ratio: round(optimumHitRatioOfPaths(paths)),
    index_updates: eventModel === null
      ? { mode: "routing" }
      : { mode: "events", event_delay_ms: eventModel.delayMs, event_drop_rate: eventModel.dropRate, event_replay: eventModel.replay, event_seed: eventModel.seed, event_stale_ms: eventModel.staleAfterMs },
    ...(replicaModel === null ? {} : { replicas: { replicas: replicaModel.replicas, spread: "round-robin" as const, sync: replicaModel.sync, sync_delay_ms: replicaModel.delayMs } }),
    policies: results,
    loadOverTime,
    ttftSorted,
  };
}

/** The rows of a comparison over several engines, as they are run: each row's figures, load over time and sorted TTFTs. */
class Rows {
  readonly policies: PolicyResult[] = [];
  readonly loadOverTime: Record<string, number[][]> = {};
  readonly ttftSorted: Record<string, Float64Array> = {};
  /** `fleet` holds every rank of the run: the overload yardstick. */
  constructor(readonly requests: readonly Trace["requests"][number][], readonly fleet: EngineOptions) {}

  /** Adds row `name` of `run`, with `extra` fields of its kind of run. */
  add(name: string, run: RunResult, extra: Partial<PolicyResult>): void {
    const sorted = Float64Array.from(run.ttftMs).sort();
    const overload = judgeOverload(run, quantile(sorted, 0.5), this.requests, this.fleet);
    this.policies.push({ ...summarize(name, run, sorted, overload, null, null), ...extra });
    this.loadOverTime[name] = run.loadSamples;
    this.ttftSorted[name] = sorted;
  }

  /** The result: `head`'s fields, then the rows. */
  result(head: Omit<SimulationResult, "policies" | "loadOverTime" | "ttftSorted">): SimulationResult {
    return { ...head, policies: this.policies, loadOverTime: this.loadOverTime, ttftSorted: this.ttftSorted };
  }
}

/** What phase 2 `adp` runs on every engine unless `config` says otherwise: TensorRT-LLM's KV-cache-aware ADP router. */
const FLEET_ADP_CONFIG: AttentionDpConfigInput = Object.freeze({ enable_kv_cache_aware_routing: true });

/** {@link simulate} over `options.instances` engines: one row per phase-2 kind. */
function simulateFleet(trace: Trace, options: SimulateOptions, engine: EngineOptions, paths: readonly Int32Array[]): SimulationResult {
  const instances = options.instances!;
  if (!Number.isInteger(instances) || instances < 1 || instances > 1024) throw new AdpInputError("instances", "must be an integer in [1, 1024]", instances);
  for (const key of ["policies", "replicas", "sync", "syncDelayMs"] as const) {
    if (options[key] !== undefined) throw new AdpInputError(key, "does not apply with instances (its rows are the rank-routing kinds)", options[key]);
  }
  if ((options.indexUpdates ?? "routing") !== "routing") throw new AdpInputError("indexUpdates", "does not apply with instances (the gateway sees each rank's cache as its events tell it, at once)", options.indexUpdates);
  const kinds = options.rankRouting ?? RANK_ROUTING_KINDS;
  if (!Array.isArray(kinds) || kinds.length === 0 || kinds.some((k) => !RANK_ROUTING_KINDS.includes(k))) throw new AdpInputError("rankRouting", `must list kinds among ${RANK_ROUTING_KINDS.join(", ")}`, kinds);
  const config = options.config ?? FLEET_ADP_CONFIG;
  const requests = trace.requests;
  const progress = progressReporter(options.onProgress, requests.length * kinds.length);
  // The whole fleet holds instances × ranks × cap requests at once: the overload yardstick.
  const rows = new Rows(requests, { ...engine, ranks: engine.ranks * instances });
  for (const [k, kind] of kinds.entries()) {
    const run = runFleet(requests, paths, trace.blockTokens, engine, instances, kind, config, options.loadWeight, progress && ((finished) => progress(k * requests.length + finished)));
    rows.add(kind, run, { fleet: { instance_requests_max_over_mean: round(maxOverMean(run.requestsPerInstance)), pinned_share: round(run.pinned / Math.max(run.routed, 1)) } });
    progress?.(requests.length * (k + 1));
  }
  return rows.result({
    trace: trace.name,
    ranks: engine.ranks * instances,
    requests: requests.length,
    optimum_prefix_hit_ratio: round(optimumHitRatioOfPaths(paths)),
    index_updates: { mode: "routing" },
    fleet: { instances, ranks_per_instance: engine.ranks, load_weight: options.loadWeight ?? DEFAULT_LOAD_WEIGHT, adp_config: config },
  });
}

/** The prefill-side policies a pools run compares by default. */
const POOL_POLICIES = ["kv_cache_aware", "round_robin"] as const;

/** {@link simulate} over a prefill and a decode pool, against an aggregated pool of as many servers: one row per layout and prefill-side policy. */
function simulatePools(trace: Trace, options: SimulateOptions, engine: EngineOptions, paths: readonly Int32Array[]): SimulationResult {
  const { prefill, decode } = options;
  for (const [key, v] of [["prefill", prefill], ["decode", decode]] as const) {
    if (v === undefined) throw new AdpInputError(key, "is needed with prefill and decode both: a disaggregated deployment has both pools", v);
    if (!Number.isInteger(v) || v < 1 || v > 1024) throw new AdpInputError(key, "must be an integer in [1, 1024]", v);
  }
  const transfer = options.transferMsPerToken ?? 0.01;
  if (typeof transfer !== "number" || !Number.isFinite(transfer) || transfer < 0 || transfer > 1000) throw new AdpInputError("transferMsPerToken", "must be a number in [0, 1000]", transfer);
  for (const key of ["replicas", "sync", "syncDelayMs", "rankRouting", "loadWeight"] as const) {
    if (options[key] !== undefined) throw new AdpInputError(key, "does not apply with prefill and decode", options[key]);
  }
  if ((options.indexUpdates ?? "routing") !== "routing") throw new AdpInputError("indexUpdates", "does not apply with prefill and decode (the prefill pool's router learns from its own placements)", options.indexUpdates);
  const policies = options.policies ?? POOL_POLICIES;
  const requests = trace.requests;
  const names = options.layouts ?? (["aggregated", "disaggregated"] as const);
  if (!Array.isArray(names) || names.length === 0 || names.some((l) => l !== "aggregated" && l !== "disaggregated")) throw new AdpInputError("layouts", 'must list layouts among "aggregated", "disaggregated"', names);
  const decodeConfig = options.decodeConfig ?? {};
  parseAttentionDpConfig(decodeConfig); // an AttentionDpConfigError before anything runs
  // The KV-cache-aware prefill router's own setting (TensorRT-LLM's KV rank state): the other routers have none.
  const inTransfer = parseAttentionDpConfig(options.config ?? {}).kvCacheRoutingAccountForInTransfer;
  const layouts = names.map((name): { name: string; layout: PoolLayout } => ({ name, layout: name === "aggregated" ? { whole: prefill! + decode! } : { prefill: prefill!, decode: decode!, transferMsPerToken: transfer } }));
  const progress = progressReporter(options.onProgress, requests.length * policies.length * layouts.length);
  const rows = new Rows(requests, { ...engine, ranks: engine.ranks * (prefill! + decode!) });
  let k = 0;
  for (const { name, layout } of layouts) {
    const ranks = engine.ranks * ("whole" in layout ? layout.whole : layout.prefill);
    for (const policy of policies) {
      const side = policy === "round_robin" ? roundRobin(ranks) : adpRouter(policy, ranks, trace.blockTokens, options.config, null);
      const decodeSide = "whole" in layout ? null : adpRouter(CONFIG_POLICY, engine.ranks * layout.decode, trace.blockTokens, decodeConfig, null);
      const base = k * requests.length;
      const withTransfer = "whole" in layout || !side.discountCached ? layout : { ...layout, accountForInTransfer: inTransfer };
      const run = runPools(requests, paths, trace.blockTokens, engine, withTransfer, side, decodeSide, progress && ((finished) => progress(base + finished)));
      const itl = run.itlSorted;
      rows.add(`${name}:${policy}`, run, { pools: { itl_ms: { p50: round(quantile(itl, 0.5), 2), p90: round(quantile(itl, 0.9), 2), p99: round(quantile(itl, 0.99), 2) }, mean_transfer_ms: round(run.meanTransferMs, 1) } });
      progress?.(requests.length * ++k);
    }
  }
  return rows.result({
    trace: trace.name,
    ranks: engine.ranks,
    requests: requests.length,
    optimum_prefix_hit_ratio: round(optimumHitRatioOfPaths(paths)),
    index_updates: { mode: "routing" },
    pools: { prefill_servers: prefill!, decode_servers: decode!, aggregated_servers: prefill! + decode!, ranks_per_server: engine.ranks, transfer_ms_per_token: transfer, decode_config: decodeConfig },
  });
}

/** Minimum wall-clock ms between two progress calls (the last one, at the end, always comes). */
const PROGRESS_INTERVAL_MS = 100;

/** `onProgress` throttled to one call per {@link PROGRESS_INTERVAL_MS}, plus the final one (undefined without it). */
function progressReporter(onProgress: ((done: number, total: number) => void) | undefined, total: number): ((done: number) => void) | undefined {
  if (onProgress === undefined) return undefined;
  let last = -Infinity;
  return (done) => {
    const now = Date.now();
    if (done < total && now - last < PROGRESS_INTERVAL_MS) return;
    last = now;
    onProgress(done, total);
  };
}

/** The engine's options among `options` (the rest are the router's, the events' and the replicas'). */
function pickEngine(options: SimulateOptions): Partial<EngineOptions> {
  const engine: Record<string, unknown> = {};
  for (const key of [...Object.keys(DEFAULT_ENGINE), "ranks"]) engine[key] = options[key as keyof SimulateOptions];
  return engine as Partial<EngineOptions>;
}

/** `o` without its undefined fields. */
function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * A policy's figures as the table cells after its name, in the columns of
 * {@link formatTable} (hit ratio, % of optimum, prefill tokens and max/mean,
 * requests max/mean, TTFT p50/p90/p99, route µs): the terminal table and the
 * HTML report print the same text.
 */
export function figureCells(p: PolicyResult, optimum: number): string[] {
  return [
    p.prefix_hit_ratio.toFixed(3),
    `${((100 * p.prefix_hit_ratio) / (optimum || 1)).toFixed(1)}%`,
    p.prefill_tokens.toLocaleString("en-US"),
    p.prefill_work_max_over_mean.toFixed(3),
    p.requests_max_over_mean.toFixed(3),
    p.ttft_ms.p50.toFixed(0),
    p.ttft_ms.p90.toFixed(0),
    p.ttft_ms.p99.toFixed(0),
    p.route_us_per_request.toFixed(2),
  ];
}

/** The comparison as a terminal table. */
export function formatTable(result: SimulationResult): string {
  const head = ["policy", "hit ratio", "% of optimum", "prefill tokens", "prefill max/mean", "requests max/mean", "TTFT p50 ms", "p90", "p99", "route µs/req"];
  const rows = result.policies.map((p) => [p.policy, ...figureCells(p, result.optimum_prefix_hit_ratio)]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ");
  return [
    `trace ${result.trace}: ${result.requests} requests on ${result.fleet ? `${result.fleet.instances} engines × ${result.fleet.ranks_per_instance} ranks` : result.pools ? `${result.pools.aggregated_servers} servers × ${result.ranks} ranks` : `${result.ranks} ranks`}; optimum prefix hit ratio (one infinite cache) ${result.optimum_prefix_hit_ratio.toFixed(3)}`,
    "",
    line(head),
    line(widths.map((w) => "-".repeat(w))),
    ...rows.map(line),
    ...eventLines(result),
    ...replicaLines(result),
    ...fleetLines(result),
    ...poolLines(result),
  ].join("\n");
}

/** The event model and each policy's stream counts, under the table of an `events` run (nothing for `routing`). */
function eventLines(result: SimulationResult): string[] {
  const u = result.index_updates;
  if (u.mode !== "events") return [];
  const n = (x: number) => x.toLocaleString("en-US");
  const lines = ["", `index updates: ${describeIndexUpdates(u)}`];
  for (const p of result.policies) {
    const f = p.event_feed;
    if (!f) continue;
    lines.push(
      `${p.policy} event batches: ${n(f.batches_published)} published, ${n(f.batches_delivered)} delivered, ${n(f.batches_dropped)} dropped ` +
        `(${n(f.batches_lost_unseen)} before their stream's first batch, unseen), ${n(f.batches_replayed)} replayed, ${n(f.batches_in_flight_at_end)} in flight at the end; ${n(f.gaps)} gaps`,
      `${p.policy} placements matched on the router's own view: ${n(f.placements_while_gapped)} while gapped, ${n(f.placements_while_stale)} while stale; ` +
        `stored events skipped (parent not in the engine view): ${n(f.stored_events_skipped)}; blocks at the end: engine view ${n(f.engine_view_blocks_at_end)}, own view ${n(f.own_view_blocks_at_end)}`,
    );
  }
  return lines;
}

/** The replicas and what each policy's put on their stream, under the table of a run given replica options. */
function replicaLines(result: SimulationResult): string[] {
  const r = result.replicas;
  if (r === undefined) return [];
  const n = (x: number, digits = 0) => x.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  const lines = ["", `replicas: ${describeReplicas(r)}`];
  if (r.sync === "none") return lines;
  for (const p of result.policies) {
    const s = p.sync;
    if (!s || s.entries === 0) continue;
    const kinds = [s.learn_entries && `${n(s.learn_entries)} learn`, s.binding_entries && `${n(s.binding_entries)} binding`, s.kv_event_entries && `${n(s.kv_event_entries)} kv-events`].filter(Boolean).join(", ");
    lines.push(
      `${p.policy} stream: ${n(s.entries)} entries (${kinds}), ${n(s.entries_per_routed_request, 3)} a routed request, ${n(s.entries_per_second, 2)}/s at the trace's rate; ` +
        `${n(s.bytes_per_routed_request)} bytes a routed request, ${s.bytes_per_second >= 10_000 ? `${n(s.bytes_per_second / 1000, 1)} kB/s` : `${n(s.bytes_per_second)} B/s`}` +
        (s.binding_entries > 0 ? `; bindings that moved a conversation at a replica ${n(s.bindings_moved)}` : ""),
    );
  }
  return lines;
}

/** What the rows of a run over several engines mean, and how each spread its requests. */
function fleetLines(result: SimulationResult): string[] {
  const f = result.fleet;
  if (f === undefined) return [];
  const lines = ["", `phase 1: TensorRT-LLM's centralized router (matched blocks − ${f.load_weight} × requests, ties in turn); phase 2 per row: adp = the engines' ADP router ${JSON.stringify(f.adp_config)} pinned, instance = the centralized router's rank score pinned, none = each engine's own load balancer`];
  for (const p of result.policies) {
    if (p.fleet) lines.push(`${p.policy}: requests per engine max/mean ${p.fleet.instance_requests_max_over_mean.toFixed(3)}, pinned ${(100 * p.fleet.pinned_share).toFixed(1)}%`);
  }
  return lines;
}

/** What the rows of a pools run mean. */
function poolLines(result: SimulationResult): string[] {
  const p = result.pools;
  if (p === undefined) return [];
  return [
    "",
    `aggregated: ${p.aggregated_servers} servers serve whole requests; disaggregated: ${p.prefill_servers} prefill + ${p.decode_servers} decode servers, KV transfer ${p.transfer_ms_per_token} ms a prompt token, decode routed by ${Object.keys(p.decode_config).length === 0 ? "TensorRT-LLM's default router" : `the router of ${JSON.stringify(p.decode_config)}`}; the policy after the colon routes the prefill (or aggregated) pool`,
    "hit ratio and prefill figures are the prefill (or aggregated) pool's; TTFT is the client's first token (prefill, transfer and the decode server's first step when disaggregated)",
    ...result.policies.map((r) => `${r.policy}: time between output tokens p50 ${r.pools!.itl_ms.p50.toFixed(2)} ms, p90 ${r.pools!.itl_ms.p90.toFixed(2)}, p99 ${r.pools!.itl_ms.p99.toFixed(2)}; KV transfer ${r.pools!.mean_transfer_ms.toFixed(1)} ms a request`),
  ];
}

/** The replicas of a run, in words (the text and HTML reports). */
export function describeReplicas(r: ReplicasReport): string {
  return describeReplicaModel({ replicas: r.replicas, sync: r.sync, delayMs: r.sync_delay_ms });
}

/** How the index learned, in words (the text and HTML reports). */
export function describeIndexUpdates(u: IndexUpdatesReport): string {
  if (u.mode === "routing") return "the router's own placements";
  return describeEventModel({ delayMs: u.event_delay_ms, dropRate: u.event_drop_rate, replay: u.event_replay, seed: u.event_seed, staleAfterMs: u.event_stale_ms });
}

/** The `--json` object (without the report-only series). */
export function toJson(result: SimulationResult): object {
  const { loadOverTime: _l, ttftSorted: _t, ...rest } = result;
  return rest;
}
