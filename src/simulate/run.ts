// `adp-router simulate`: the same arrivals through every policy, side by side.
// Platform-neutral (no node: imports) so a browser page can run it too.

import type { RouteRequest } from "../batch.js";
import type { AttentionDpConfigInput } from "../config.js";
import { AdpInputError, readOptions } from "../errors.js";
import { createPrefixIndex, type PrefixIndex } from "../prefix-index.js";
import { createRouter } from "../router.js";
import { DEFAULT_ENGINE, internPaths, runEngine, type EngineOptions, type RouterSide, type RunResult } from "./engine.js";
import { describeEventModel, EVENT_OPTION_KEYS, EventFeed, readEventModel, type EventFeedCounts, type EventModel, type EventOptions, type StreamStatus } from "./event-feed.js";
import { optimumHitRatio, type Trace } from "./trace.js";

/** How the router's prefix index learns. */
export type IndexUpdates = "routing" | "events";

/** Options of {@link simulate}. */
export interface SimulateOptions extends Partial<EngineOptions>, EventOptions {
  /** `attention_dp_config` overrides for the KV-cache-aware policy (snake_case). */
  readonly config?: AttentionDpConfigInput;
  /** How the KV-cache-aware router's index learns. @default "routing" */
  readonly indexUpdates?: IndexUpdates;
  /** Policies to run, by name. @default all */
  readonly policies?: readonly string[];
  /** Called with (policy, fraction done). */
  readonly onProgress?: (policy: string, fraction: number) => void;
}

/** Every option {@link simulate} knows: any other key is a mistake, reported rather than ignored. */
const OPTION_KEYS: ReadonlySet<string> = new Set([...Object.keys(DEFAULT_ENGINE), "ranks", "config", "indexUpdates", "policies", "onProgress", ...EVENT_OPTION_KEYS]);

/** One policy's figures. */
export interface PolicyResult {
  readonly policy: string;
  readonly prefix_hit_ratio: number;
  readonly prefill_tokens: number;
  readonly prefill_work_max_over_mean: number;
  readonly requests_max_over_mean: number;
  readonly ttft_ms: { readonly p50: number; readonly p90: number; readonly p99: number };
  readonly route_us_per_request: number;
  /** What happened on the engine's KV-event streams (`events` runs of a policy with a prefix index). */
  readonly event_feed?: EventReport;
}

/** What a run's event streams did, and what the two views held at its end. */
export interface EventReport extends EventFeedCounts {
  /** Stored events the engine view skipped: their parent block was not in it (lost, or stored before a rebuild). */
  readonly stored_events_skipped: number;
  /** Blocks in the engine view (from events), all ranks, at the end. */
  readonly engine_view_blocks_at_end: number;
  /** Blocks in the router's own view (from placements), all ranks, at the end. */
  readonly own_view_blocks_at_end: number;
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

/** The whole comparison (the `--json` output). */
export interface SimulationResult {
  readonly trace: string;
  readonly ranks: number;
  readonly requests: number;
  readonly optimum_prefix_hit_ratio: number;
  /** How the KV-cache-aware router's index learned. */
  readonly index_updates: IndexUpdatesReport;
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

/** A router side, and what its event feed did (null when it learns from routing alone). */
interface AdpSide extends RouterSide {
  readonly eventCounts: (() => EventReport) | null;
}

/**
 * One of TensorRT-LLM's routers as the engine's router side. With engine
 * events (`eventModel` set) the KV-cache-aware router works as the gateway
 * does: its prefix index is the engine view, fed by an {@link EventFeed}; it
 * also keeps its own view, learned from every placement; and a rank whose
 * stream is not live (gapped or stale) is matched on the router's own view.
 */
function adpRouter(policy: string, ranks: number, blockTokens: number, options: SimulateOptions, eventModel: EventModel | null): AdpSide {
  let attentionDp: AttentionDpConfigInput = {};
  if (policy === "kv_cache_aware") attentionDp = { ...options.config, enable_kv_cache_aware_routing: true, kv_cache_routing_conversation_affinity: false };
  else if (policy.startsWith("conversation:")) {
    attentionDp = { kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: policy.slice(13) as never };
  }
  const events = eventModel !== null;
  const router = createRouter({
    numRanks: ranks,
    attentionDp,
    ...(policy === "kv_cache_aware" ? { prefixIndex: { tokensPerBlock: blockTokens }, learnFromRouting: !events } : {}),
  });
  const routeBatch: RouterSide["route"] = (states, cap, requests) => {
    const result = router.route({ rankStates: states, maxNumActiveRequests: cap, requests });
    const rankOf = new Map<number, number>();
    result.assignments.forEach((ids, rank) => ids.forEach((id) => rankOf.set(Number(id), rank)));
    return requests.map((r) => rankOf.get(Number(r.id)) ?? -1);
  };
  const engineView = router.prefixIndex;
  const discountCached = router.kind === "kv_cache_aware";
  if (!events || engineView === null) return { discountCached, route: routeBatch, eventCounts: null };

  const ownView = createPrefixIndex({ numRanks: ranks, tokensPerBlock: blockTokens });
  const feed = new EventFeed(ranks, eventModel, { applyKvEvents: (e) => void engineView.applyKvEvents(e), clearRank: (r) => engineView.clearRank(r) });
  return {
    discountCached,
    eventCounts: () => ({
      ...feed.counts(),
      stored_events_skipped: engineView.stats().kvEvents.unknownParent,
      engine_view_blocks_at_end: sumBlocks(engineView, ranks),
      own_view_blocks_at_end: sumBlocks(ownView, ranks),
    }),
    route(states, cap, requests, nowMs) {
      feed.deliverDue(nowMs);
      const status = Array.from({ length: ranks }, (_, r) => feed.status(r, nowMs));
      // All live: the router probes the engine view itself. Otherwise each
      // request brings its matches, rank by rank from the view that rank is trusted on.
      const routed = status.every((s) => s === "live") ? requests : requests.map((req) => withMatches(req, status, engineView, ownView));
      const placed = routeBatch(states, cap, routed, nowMs);
      placed.forEach((rank, i) => {
        if (rank < 0) return;
        feed.placed(rank, status[rank]!);
        ownView.insertBlocks(rank, requests[i]!.blockKeys!); // the gateway learns every placement
      });
      return placed;
    },
    publish: (rank, e, atMs) => feed.publish(rank, e, atMs),
  };
}

/**
 * `req` with its matched tokens per rank: the engine view's for live ranks,
 * the router's own view's for the others, over the blocks the router's own
 * probe covers (every full block of the prompt but its last token).
 */
function withMatches(req: RouteRequest, status: readonly StreamStatus[], engineView: PrefixIndex, ownView: PrefixIndex): RouteRequest {
  const keys = req.blockKeys as readonly number[];
  const probe = keys.slice(0, Math.min(keys.length, Math.floor(((req.numTokens ?? 0) - 1) / engineView.tokensPerBlock)));
  if (probe.length === 0) return req;
  const engine = engineView.matchBlocks(probe);
  const own = ownView.matchBlocks(probe);
  return { ...req, prefixMatches: status.map((s, r) => (s === "live" ? engine[r]! : own[r]!)) };
}

/** Blocks held by all ranks of a view. */
const sumBlocks = (view: PrefixIndex, ranks: number): number => {
  let n = 0;
  for (let r = 0; r < ranks; r++) n += view.blockCount(r);
  return n;
};

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

/** One policy's figures from its run (and what its event streams did, when it had them). */
function summarize(policy: string, run: RunResult, events: EventReport | null): PolicyResult {
  const sorted = Float64Array.from(run.ttftMs).sort();
  return {
    policy,
    prefix_hit_ratio: round(run.totalBlocks === 0 ? 0 : run.hitBlocks / run.totalBlocks),
    prefill_tokens: run.prefillTokens,
    prefill_work_max_over_mean: round(maxOverMean(run.prefillPerRank)),
    requests_max_over_mean: round(maxOverMean(run.requestsPerRank)),
    ttft_ms: { p50: round(quantile(sorted, 0.5), 1), p90: round(quantile(sorted, 0.9), 1), p99: round(quantile(sorted, 0.99), 1) },
    route_us_per_request: round((run.routeMs * 1000) / Math.max(run.routed, 1), 3),
    ...(events ? { event_feed: events } : {}),
  };
}

/**
 * Replays `trace` through each policy on the same arrivals and engine. Throws
 * {@link AdpInputError} for an unknown option, an unknown `indexUpdates`, and
 * event options that are out of range or given without `indexUpdates: "events"`.
 */
export function simulate(trace: Trace, options: SimulateOptions = {}): SimulationResult {
  options = readOptions(options, "simulate", OPTION_KEYS, "simulate option") as SimulateOptions;
  const indexUpdates = options.indexUpdates ?? "routing";
  if (indexUpdates !== "routing" && indexUpdates !== "events") throw new AdpInputError("indexUpdates", 'must be "routing" or "events"', indexUpdates);
  const eventModel = readEventModel(options, indexUpdates === "events");
  const engine: EngineOptions = { ...DEFAULT_ENGINE, ranks: 8, ...stripUndefined(options) } as EngineOptions;
  const policies = options.policies ?? POLICIES;
  const paths = internPaths(trace.requests);
  const results: PolicyResult[] = [];
  const loadOverTime: Record<string, number[][]> = {};
  const ttftSorted: Record<string, Float64Array> = {};
  for (const policy of policies) {
    if (!(POLICIES as readonly string[]).includes(policy)) throw new Error(`unknown policy "${policy}" (expected one of ${POLICIES.join(", ")})`);
    const adp = policy === "round_robin" ? null : adpRouter(policy, engine.ranks, trace.blockTokens, options, eventModel);
    const run = runEngine(trace.requests, paths, trace.blockTokens, engine, adp ?? roundRobin(engine.ranks), (f) => options.onProgress?.(policy, f));
    results.push(summarize(policy, run, adp?.eventCounts?.() ?? null));
    loadOverTime[policy] = run.loadSamples;
    ttftSorted[policy] = Float64Array.from(run.ttftMs).sort();
    options.onProgress?.(policy, 1);
  }
  return {
    trace: trace.name,
    ranks: engine.ranks,
    requests: trace.requests.length,
    optimum_prefix_hit_ratio: round(optimumHitRatio(trace)),
    index_updates: eventModel === null
      ? { mode: "routing" }
      : { mode: "events", event_delay_ms: eventModel.delayMs, event_drop_rate: eventModel.dropRate, event_replay: eventModel.replay, event_seed: eventModel.seed, event_stale_ms: eventModel.staleAfterMs },
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
    ...eventLines(result),
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
