// `adp-router tune`: a seeded coarse-to-fine search over TensorRT-LLM's router
// kinds and their attention_dp_config parameters, scoring each candidate with
// the simulator on the user's trace. Platform-neutral: the evaluator is given
// (inline here; a worker_threads pool in src/cli/tune-pool.ts).
//
// Why coarse-to-fine on the whole trace, not successive halving on prefixes:
// one whole-trace evaluation of the bundled trace costs ~0.4 s, so a budget of
// 64 takes well under a minute on two cores; and a prefix of a trace ranks
// configs by a cache that has not warmed up yet (README "Choosing a search"
// measures both). Every candidate is scored on exactly what `simulate --config`
// reports for it, so the recommendation reproduces to the digit.

import type { AttentionDpConfigInput, NewConversationPlacement } from "../config.js";
import { NEW_CONVERSATION_PLACEMENTS, parseAttentionDpConfig } from "../config.js";
import { AdpInputError } from "../errors.js";
import { routerKindFor } from "../router.js";
import type { EngineOptions } from "./engine.js";
import { CONFIG_POLICY, simulate, type PolicyResult } from "./run.js";
import { optimumHitRatio, type Trace } from "./trace.js";
import { mulberry32 } from "./workload.js";
import { TUNE_OBJECTIVES, type TuneConstraints, type TunedConfig, type TuneMetrics, type TuneObjective, type TunePoint, type TuneResult } from "./tune-types.js";

/**
 * What a config is tuned for: one engine (its ranks and serving model, as
 * `simulate` takes it), or with `instances` a fleet of such engines whose
 * ranks the gateway pins, where the config is phase 2 `adp`'s (every engine's
 * own ADP router; simulate --instances N --rank-routing adp).
 */
export type TuneShape = Partial<EngineOptions> & {
  readonly instances?: number;
  readonly loadWeight?: number;
  /**
   * A disaggregated deployment (simulate --prefill P --decode M, its
   * disaggregated row): the config tuned is `pool`'s, the other pool's is
   * `other` ({}: TensorRT-LLM's defaults). See {@link tunePools}.
   */
  readonly prefill?: number;
  readonly decode?: number;
  readonly transferMsPerToken?: number;
  readonly pool?: "prefill" | "decode";
  readonly other?: AttentionDpConfigInput;
};

/** Scores configs: one metrics object per config, in order. */
export type TuneEvaluator = (configs: readonly AttentionDpConfigInput[]) => Promise<TuneMetrics[]>;

/** Options of {@link tune}. */
export interface TuneOptions {
  /** What to optimise. @default "ttft_p90" */
  readonly objective?: TuneObjective;
  /** Limits a recommendation must respect. */
  readonly constraints?: TuneConstraints;
  /** Simulations to run at most, the baseline included. @default 64 */
  readonly budget?: number;
  /** Seed of the search's sampling. @default 1 */
  readonly seed?: number;
  /** The simulated engine (ranks and serving model), as `simulate` takes it, or a fleet of them. */
  readonly engine?: TuneShape;
  /**
   * How to spend the budget: "coarse-to-fine" (a coarse sample, then rounds of
   * refinement around the best), or "random" (the whole budget as one coarse
   * sample: the yardstick the README measures coarse-to-fine against).
   * @default "coarse-to-fine"
   */
  readonly strategy?: "coarse-to-fine" | "random";
  /**
   * The config the user runs now (snake_case, as in extra_llm_api_options.yaml):
   * simulated right after the baseline and reported as `current`, so the answer
   * says what changing it would buy. Checked like any attention_dp_config.
   */
  readonly current?: AttentionDpConfigInput;
  /** Called after every stage with simulations done and the budget (and, when the search stops short of the budget, once more with done === total). */
  readonly onProgress?: (done: number, budget: number) => void;
}

/** Objectives where a higher value is better. */
const MAXIMISED: ReadonlySet<TuneObjective> = new Set(["hit_ratio"]);

/** The largest budget accepted (a million simulations is days of work: a typo). */
export const MAX_TUNE_BUDGET = 100_000;

/** TensorRT-LLM's defaults: an empty attention_dp_config (the load-balancing default router). */
const BASELINE: AttentionDpConfigInput = Object.freeze({});

/** The three new-conversation placements, in TensorRT-LLM's order. */
const PLACEMENTS = NEW_CONVERSATION_PLACEMENTS;

// ── The parameter space ────────────────────────────────────────────────────
// KV-cache-aware: load-balance weight β (log scale), match-rate threshold,
// fair-share multiplier, cold-start warm-up. Conversation affinity: placement
// and fair-share multiplier. In-transfer accounting is left at its default:
// only a disaggregated run (simulate --prefill) has transfers, where simulate
// --config models it but the search does not move it;
// the balance gate (enable_balance) holds requests the simulator does not model.

/** Range of the load-balance weight β, searched on a log scale. */
const WEIGHT_RANGE = [0.05, 20] as const;
/** Range of the match-rate threshold (above 0.6 the cache hardly ever counts). */
const THRESHOLD_RANGE = [0, 0.6] as const;
/** Range of the fair-share multiplier (1 is strict fair share). */
const MULTIPLIER_RANGE = [1, 4] as const;

/** A KV-cache-aware candidate, as numbers. */
interface KvPoint {
  readonly weight: number;
  readonly threshold: number;
  readonly multiplier: number;
  readonly warmup: boolean;
}

/** `x` rounded to `digits` significant digits (so candidates print short and deduplicate). */
const significant = (x: number, digits: number) => Number(x.toPrecision(digits));
/** `x` rounded to a multiple of `step`, clamped to [lo, hi]. */
const snap = (x: number, step: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, Number((Math.round(x / step) * step).toFixed(6))));

/** The attention_dp_config of a KV-cache-aware point: only what differs from TensorRT-LLM's defaults. */
function kvConfig(p: KvPoint): AttentionDpConfigInput {
  const weight = significant(Math.min(WEIGHT_RANGE[1], Math.max(WEIGHT_RANGE[0], p.weight)), 2);
  const threshold = snap(p.threshold, 0.01, THRESHOLD_RANGE[0], THRESHOLD_RANGE[1]);
  const multiplier = snap(p.multiplier, 0.05, MULTIPLIER_RANGE[0], MULTIPLIER_RANGE[1]);
  return {
    enable_kv_cache_aware_routing: true,
    ...(weight !== 1 ? { kv_cache_routing_load_balance_weight: weight } : {}),
    ...(threshold !== 0.1 ? { kv_cache_routing_match_rate_threshold: threshold } : {}),
    ...(multiplier !== 2 ? { kv_cache_routing_fair_share_multiplier: multiplier } : {}),
    ...(p.warmup ? { kv_cache_routing_cold_start_warmup: true } : {}),
  };
}

/** The attention_dp_config of a conversation-affinity point: only what differs from the defaults. */
function conversationConfig(placement: NewConversationPlacement, multiplier: number): AttentionDpConfigInput {
  const m = snap(multiplier, 0.05, MULTIPLIER_RANGE[0], MULTIPLIER_RANGE[1]);
  return {
    kv_cache_routing_conversation_affinity: true,
    ...(placement !== "round_robin" ? { kv_cache_routing_new_conv_placement: placement } : {}),
    ...(m !== 2 ? { kv_cache_routing_fair_share_multiplier: m } : {}),
  };
}

/** A KV-cache-aware config read back as numbers (defaults filled in). */
function kvPointOf(config: AttentionDpConfigInput): KvPoint {
  const c = parseAttentionDpConfig(config);
  return { weight: c.kvCacheRoutingLoadBalanceWeight, threshold: c.kvCacheRoutingMatchRateThreshold, multiplier: c.kvCacheRoutingFairShareMultiplier, warmup: c.kvCacheRoutingColdStartWarmup };
}

/** A config's identity, whatever its key order: its fields in a fixed order (the search builds configs with only non-default fields). */
export const configKey = (config: AttentionDpConfigInput): string => JSON.stringify(Object.entries(config).sort(([a], [b]) => (a < b ? -1 : 1)));

/**
 * The configs every search starts from: the KV-cache-aware router and each
 * conversation placement with TensorRT-LLM's default parameters, so the
 * report can say what tuning adds beyond picking a router.
 */
const ANCHORS: readonly AttentionDpConfigInput[] = [
  { enable_kv_cache_aware_routing: true },
  ...PLACEMENTS.map((p) => conversationConfig(p, 2)),
];

// ── Sampling ───────────────────────────────────────────────────────────────

/** A random permutation of 0..n-1 (Fisher–Yates). */
function permutation(n: number, random: () => number): number[] {
  const p = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [p[i], p[j]] = [p[j]!, p[i]!];
  }
  return p;
}

/**
 * `n` points of a Latin hypercube over `dims` unit dimensions: each dimension's
 * n strata hit once, so a small coarse sample still covers every range.
 */
function latinHypercube(n: number, dims: number, random: () => number): number[][] {
  const columns = Array.from({ length: dims }, () => permutation(n, random));
  return Array.from({ length: n }, (_, i) => columns.map((col) => (col[i]! + random()) / n));
}

/** The coarse sample: `n` configs over both tunable routers, about three KV-cache-aware ones to each conversation one. */
function coarseSample(n: number, random: () => number): AttentionDpConfigInput[] {
  const nConversation = Math.floor(n / 4);
  const kv = latinHypercube(n - nConversation, 4, random).map(([w, t, m, u]) =>
    kvConfig({
      weight: WEIGHT_RANGE[0] * (WEIGHT_RANGE[1] / WEIGHT_RANGE[0]) ** w!,
      threshold: THRESHOLD_RANGE[0] + t! * (THRESHOLD_RANGE[1] - THRESHOLD_RANGE[0]),
      multiplier: MULTIPLIER_RANGE[0] + m! * (MULTIPLIER_RANGE[1] - MULTIPLIER_RANGE[0]),
      warmup: u! < 0.5,
    }),
  );
  const conversation = latinHypercube(nConversation, 2, random).map(([p, m]) =>
    conversationConfig(PLACEMENTS[Math.min(PLACEMENTS.length - 1, Math.floor(p! * PLACEMENTS.length))]!, MULTIPLIER_RANGE[0] + m! * (MULTIPLIER_RANGE[1] - MULTIPLIER_RANGE[0])),
  );
  // Interleaved, so a budget cut short still samples both routers.
  const out: AttentionDpConfigInput[] = [];
  for (let i = 0; i < Math.max(kv.length, conversation.length); i++) {
    if (i < kv.length) out.push(kv[i]!);
    if (i < conversation.length) out.push(conversation[i]!);
  }
  return out;
}

/**
 * The neighbours of `config` at refinement round `round` (1, 2, ...): one
 * parameter moved at a time, by a step that halves every round (β by a factor
 * 2^(1/2^(round-1)), threshold by 0.1/2^(round-1), multiplier by 0.5/2^(round-1)),
 * and warm-up toggled in the first round.
 */
function neighbours(config: AttentionDpConfigInput, round: number): AttentionDpConfigInput[] {
  const shrink = 2 ** (round - 1);
  const c = parseAttentionDpConfig(config);
  const kind = routerKindFor(c);
  if (kind === "conversation") {
    const m = c.kvCacheRoutingFairShareMultiplier;
    const moves = [m + 0.5 / shrink, m - 0.5 / shrink].map((x) => conversationConfig(c.kvCacheRoutingNewConvPlacement, x));
    if (round === 1) for (const p of PLACEMENTS) if (p !== c.kvCacheRoutingNewConvPlacement) moves.push(conversationConfig(p, m));
    return moves;
  }
  if (kind !== "kv_cache_aware") return [];
  const p = kvPointOf(config);
  const factor = 2 ** (1 / shrink);
  const moves: KvPoint[] = [
    { ...p, weight: p.weight * factor },
    { ...p, weight: p.weight / factor },
    { ...p, threshold: p.threshold + 0.1 / shrink },
    { ...p, threshold: p.threshold - 0.1 / shrink },
    { ...p, multiplier: p.multiplier + 0.5 / shrink },
    { ...p, multiplier: p.multiplier - 0.5 / shrink },
  ];
  if (round === 1) moves.push({ ...p, warmup: !p.warmup });
  return moves.map(kvConfig);
}

// ── Judging ────────────────────────────────────────────────────────────────

/** The figures `tune` judges by, from `simulate`'s row (wall-clock timings left out: they differ run to run). */
export function metricsOf(row: PolicyResult): TuneMetrics {
  return {
    ttft_p50: row.ttft_ms.p50,
    ttft_p90: row.ttft_ms.p90,
    ttft_p99: row.ttft_ms.p99,
    hit_ratio: row.prefix_hit_ratio,
    prefill_imbalance: row.prefill_work_max_over_mean,
    requests_imbalance: row.requests_max_over_mean,
    overloaded: row.overloaded,
  };
}

/**
 * Why no evaluated config is feasible, in a sentence a user can act on: the
 * engine overloaded under every config, or a constraint no config met (a hit
 * ratio above what one infinite cache gets is named as unreachable).
 */
function infeasibleReason(points: readonly TunePoint[], constraints: TuneConstraints, optimum: number): string {
  if (points.every((p) => p.metrics.overloaded)) return "the simulated engine is overloaded under every config evaluated: lower the rate (--rate-scale) or add ranks";
  const parts: string[] = [];
  const { min_hit_ratio: minHit, max_prefill_imbalance: maxImbalance } = constraints;
  if (minHit !== undefined && minHit > optimum) parts.push(`min_hit_ratio ${minHit} is above the trace's optimum hit ratio ${optimum.toFixed(4)} (one infinite cache): no router can reach it`);
  else if (minHit !== undefined) parts.push(`min_hit_ratio ${minHit}: the best evaluated was ${Math.max(...points.map((p) => p.metrics.hit_ratio))}`);
  if (maxImbalance !== undefined) parts.push(`max_prefill_imbalance ${maxImbalance}: the lowest evaluated was ${Math.min(...points.map((p) => p.metrics.prefill_imbalance))}`);
  return `no evaluated config met the constraints (${parts.join("; ")}); loosen them, or raise the budget`;
}

/** Whether `m` meets every constraint and the engine kept up. */
function feasible(m: TuneMetrics, constraints: TuneConstraints): boolean {
  if (m.overloaded) return false;
  if (constraints.max_prefill_imbalance !== undefined && m.prefill_imbalance > constraints.max_prefill_imbalance) return false;
  if (constraints.min_hit_ratio !== undefined && m.hit_ratio < constraints.min_hit_ratio) return false;
  return true;
}

/** Every figure in the order ties on the objective are broken, each with its better direction. */
const TIE_BREAKS: readonly [keyof TuneMetrics, 1 | -1][] = [["ttft_p90", 1], ["ttft_p99", 1], ["ttft_p50", 1], ["prefill_imbalance", 1], ["requests_imbalance", 1], ["hit_ratio", -1]];

/**
 * Orders points best first: feasible before infeasible, then by the objective,
 * then (the simulator's figures often tie on one percentile) by the other
 * figures in {@link TIE_BREAKS} order, then by evaluation order. Balance comes
 * before hit ratio: on a light load, a config that puts every request on one
 * rank can tie on latency and win on reuse, and that is not a config to deploy.
 */
export function compareTunePoints(objective: TuneObjective, direction: "min" | "max"): (a: TunePoint, b: TunePoint) => number {
  const sign = direction === "min" ? 1 : -1;
  return (a, b) => {
    const first = Number(b.feasible) - Number(a.feasible) || sign * (a.objective - b.objective);
    if (first !== 0) return first;
    for (const [key, s] of TIE_BREAKS) {
      if (key === objective) continue;
      const d = s * ((a.metrics[key] as number) - (b.metrics[key] as number));
      if (d !== 0) return d;
    }
    return a.id - b.id;
  };
}

// ── The search ─────────────────────────────────────────────────────────────

/** The evaluator that runs each config through {@link simulate} in this thread. */
export function inlineEvaluator(trace: Trace, engine: TuneShape = {}): TuneEvaluator {
  return async (configs) => configs.map((config) => evaluateConfig(trace, engine, config));
}

/** One config's metrics: exactly `simulate`'s row for policy "config" with that config (for a fleet: its row "adp"). */
export function evaluateConfig(trace: Trace, engine: TuneShape, config: AttentionDpConfigInput): TuneMetrics {
  if (engine.prefill !== undefined) {
    const { pool, other, ...shape } = engine;
    const [prefillConfig, decodeConfig] = pool === "decode" ? [other ?? {}, config] : [config, other ?? {}];
    return metricsOf(simulate(trace, { ...shape, config: prefillConfig, decodeConfig, policies: [CONFIG_POLICY], layouts: ["disaggregated"] }).policies[0]!);
  }
  if (engine.instances !== undefined) return metricsOf(simulate(trace, { ...engine, config, rankRouting: ["adp"] }).policies[0]!);
  return metricsOf(simulate(trace, { ...engine, config, policies: [CONFIG_POLICY] }).policies[0]!);
}

/** The evaluated point of the user's `current` config (the same config, found by its fields), or null when the budget ran out first. */
function currentOf(points: readonly TunePoint[], current: AttentionDpConfigInput): TunedConfig | null {
  const point = points.find((p) => configKey(p.config) === configKey(current));
  return point === undefined ? null : { config: current, metrics: point.metrics };
}

/** Reads and checks {@link TuneOptions}; throws {@link AdpInputError}. */
function readTuneOptions(options: TuneOptions) {
  const objective = options.objective ?? "ttft_p90";
  if (!(TUNE_OBJECTIVES as readonly string[]).includes(objective)) throw new AdpInputError("objective", `must be one of ${TUNE_OBJECTIVES.join(", ")}`, objective);
  const budget = options.budget ?? 64;
  if (!Number.isInteger(budget) || budget < 1 || budget > MAX_TUNE_BUDGET) throw new AdpInputError("budget", `must be an integer in [1, ${MAX_TUNE_BUDGET}]`, budget);
  const seed = options.seed ?? 1;
  // The generator keeps 32 bits: a wider seed would silently equal another.
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new AdpInputError("seed", "must be an integer in [0, 4294967295]", seed);
  const constraints = options.constraints ?? {};
  for (const key of ["max_prefill_imbalance", "min_hit_ratio"] as const) {
    const v = constraints[key];
    if (v !== undefined && (typeof v !== "number" || !Number.isFinite(v) || v < 0)) throw new AdpInputError(`constraints.${key}`, "must be a non-negative number", v);
  }
  return { objective, budget, seed, constraints, direction: MAXIMISED.has(objective) ? ("max" as const) : ("min" as const) };
}

/**
 * Searches attention_dp_configs for the best `objective` on `trace` within
 * `budget` simulations: TensorRT-LLM's defaults (the baseline), each router
 * with default parameters, a Latin-hypercube coarse sample of about 45% of
 * what is left, then rounds of one-parameter moves around the three best with
 * steps halving each round. Deterministic for a seed whatever the evaluator's
 * parallelism: each stage's candidates depend only on earlier stages' results.
 */
export async function tune(trace: Trace, options: TuneOptions = {}, evaluate: TuneEvaluator = inlineEvaluator(trace, options.engine)): Promise<TuneResult> {
  const { objective, budget, seed, constraints, direction } = readTuneOptions(options);
  if (options.current !== undefined) parseAttentionDpConfig(options.current); // an AttentionDpConfigError before anything runs
  if (options.strategy !== undefined && options.strategy !== "coarse-to-fine" && options.strategy !== "random") throw new AdpInputError("strategy", 'must be "coarse-to-fine" or "random"', options.strategy);
  const random = mulberry32(seed); // the search's only source of randomness, seeded by the user
  const points: TunePoint[] = [];
  const seen = new Set<string>();
  const order = compareTunePoints(objective, direction);

  /** Evaluates the first `limit` configs not seen yet, as far as the budget goes; returns how many. */
  const stage = async (name: string, configs: readonly AttentionDpConfigInput[], limit = configs.length) => {
    const fresh: AttentionDpConfigInput[] = [];
    for (const config of configs) {
      const key = configKey(config);
      if (seen.has(key) || fresh.length >= limit || points.length + fresh.length >= budget) continue;
      seen.add(key);
      fresh.push(config);
    }
    if (fresh.length === 0) return 0;
    const metrics = await evaluate(fresh);
    fresh.forEach((config, i) => {
      const m = metrics[i]!;
      points.push({ id: points.length, config, kind: routerKindFor(parseAttentionDpConfig(config)), stage: name, metrics: m, objective: m[objective] as number, feasible: feasible(m, constraints) });
    });
    options.onProgress?.(points.length, budget);
    return fresh.length;
  };

  await stage("baseline", [BASELINE]);
  if (options.current !== undefined) await stage("current", [options.current]);
  await stage("defaults", ANCHORS);
  const left = budget - points.length;
  await stage("coarse", coarseSample(options.strategy === "random" ? left : Math.floor(left * 0.45), random));
  const refineBudget = budget - points.length;
  const perRound = Math.max(2, Math.ceil(refineBudget / 4));
  for (let round = 1, idle = 0; points.length < budget && idle < 3; round++) {
    const top = [...points].filter((p) => p.kind !== "default").sort(order).slice(0, 3);
    // Neighbours of the best first, then the second's, ...; random jumps after them keep a round whose neighbours were all seen moving.
    const candidates = top.flatMap((p) => neighbours(p.config, round));
    const added = await stage(`refine ${round}`, [...candidates, ...coarseSample(perRound, random)], perRound);
    idle = added === 0 ? idle + 1 : 0;
  }
  if (points.length < budget) options.onProgress?.(points.length, points.length); // stopped early: the end, as a progress callback knows it
  const baseline = points[0]!;
  const best = [...points].sort(order)[0]!;
  return {
    objective,
    direction,
    constraints,
    trace: trace.name,
    requests: trace.requests.length,
    ranks: options.engine?.ranks ?? 8,
    ...(options.engine?.instances !== undefined ? { instances: options.engine.instances } : {}),
    baseline: { config: baseline.config, metrics: baseline.metrics },
    best: best.feasible ? { config: best.config, metrics: best.metrics } : null,
    constraints_met: best.feasible,
    infeasible_reason: best.feasible ? null : infeasibleReason(points, constraints, optimumHitRatio(trace)),
    ...(options.current === undefined ? {} : { current: currentOf(points, options.current) }),
    evaluated: points.length,
    points,
  };
}

/** What {@link tunePools} found: the prefill pool's search, then the decode pool's with the prefill pool on its best. */
export interface PoolsTuneResult {
  readonly prefill: TuneResult;
  readonly decode: TuneResult;
}

/**
 * Tunes a disaggregated deployment's two pools (`options.engine` with
 * `prefill` and `decode`): first the prefill pool's attention_dp_config with
 * the decode pool on TensorRT-LLM's defaults (half the budget), then the
 * decode pool's with the prefill pool on the best found (the rest). Each
 * search is {@link tune}'s, scored on simulate's disaggregated row.
 * `evaluatorFor` makes the evaluator of one pool's search (inline by default).
 */
export async function tunePools(trace: Trace, options: TuneOptions, evaluatorFor: (shape: TuneShape) => TuneEvaluator = (shape) => inlineEvaluator(trace, shape)): Promise<PoolsTuneResult> {
  const engine = options.engine ?? {};
  if (engine.prefill === undefined || engine.decode === undefined) throw new AdpInputError("engine", "tunePools needs engine.prefill and engine.decode", engine);
  const budget = options.budget ?? 64;
  if (!Number.isInteger(budget) || budget < 2 || budget > MAX_TUNE_BUDGET) throw new AdpInputError("budget", `must be an integer in [2, ${MAX_TUNE_BUDGET}] (half for each pool)`, budget);
  const half = Math.ceil(budget / 2);
  const { current: _current, ...rest } = options;
  const prefillShape: TuneShape = { ...engine, pool: "prefill", other: {} };
  const prefill = await tune(trace, { ...rest, budget: half, engine: prefillShape }, evaluatorFor(prefillShape));
  const decodeShape: TuneShape = { ...engine, pool: "decode", other: (prefill.best ?? prefill.baseline).config };
  const decode = await tune(trace, { ...rest, budget: budget - half, engine: decodeShape }, evaluatorFor(decodeShape));
  return { prefill, decode };
}
