// What `adp-router tune` reports: the shapes its search, its JSON output and its
// HTML report share. Platform-neutral.

import type { AttentionDpConfigInput } from "../config.js";
import type { RouterKind } from "../routers/types.js";

export type { RouterKind } from "../routers/types.js";

/** The objectives `tune` can optimise. */
export const TUNE_OBJECTIVES = ["ttft_p50", "ttft_p90", "ttft_p99", "hit_ratio", "prefill_imbalance"] as const;

/** An objective `tune` can optimise. */
export type TuneObjective = (typeof TUNE_OBJECTIVES)[number];

/** What one simulation of a config measured (every figure deterministic: no wall-clock timings). */
export interface TuneMetrics {
  /** Time to first token, ms: the median request's. */
  readonly ttft_p50: number;
  /** Time to first token, ms: the 90th percentile. */
  readonly ttft_p90: number;
  /** Time to first token, ms: the 99th percentile. */
  readonly ttft_p99: number;
  /** Share of prompt blocks found in the rank's cache. */
  readonly hit_ratio: number;
  /** Prefill work of the busiest rank over the mean rank's. */
  readonly prefill_imbalance: number;
  /** Requests of the busiest rank over the mean rank's. */
  readonly requests_imbalance: number;
  /** Whether the offered load exceeded what the simulated engine serves. */
  readonly overloaded: boolean;
}

/** Optional limits a recommended config must respect. */
export interface TuneConstraints {
  /** Highest prefill_imbalance allowed. */
  readonly max_prefill_imbalance?: number;
  /** Lowest hit_ratio allowed. */
  readonly min_hit_ratio?: number;
}

/** One evaluated config. */
export interface TunePoint {
  /** Evaluation order, from 0 (the baseline is 0). */
  readonly id: number;
  /** The attention_dp_config block (snake_case, only the fields that differ from TensorRT-LLM's defaults). */
  readonly config: AttentionDpConfigInput;
  /** The router it selects. */
  readonly kind: RouterKind;
  /** The search stage that proposed it ("baseline", "coarse", "refine 1", ...). */
  readonly stage: string;
  /** What its simulation measured. */
  readonly metrics: TuneMetrics;
  /** The objective's value for it. */
  readonly objective: number;
  /** Whether it meets every constraint (and is not overloaded). */
  readonly feasible: boolean;
}

/** A config with its metrics. */
export interface TunedConfig {
  readonly config: AttentionDpConfigInput;
  readonly metrics: TuneMetrics;
}

/** The whole result (the `--json` output is this without `points`' order changed). */
export interface TuneResult {
  readonly objective: TuneObjective;
  /** Whether a lower or a higher objective is better. */
  readonly direction: "min" | "max";
  readonly constraints: TuneConstraints;
  /** The trace's name, its requests and the engine's ranks. */
  readonly trace: string;
  readonly requests: number;
  readonly ranks: number;
  /** The engines of a fleet tuned for (its config is their ADP router's, their ranks pinned), absent for one engine. */
  readonly instances?: number;
  /** TensorRT-LLM's defaults (the load-balancing default router). */
  readonly baseline: TunedConfig;
  /** The best feasible config found (the baseline itself when nothing beat it); null when no evaluated config is feasible. */
  readonly best: TunedConfig | null;
  /** The user's current config (`--config`) and its metrics, when one was given (null: the budget ran out before it). */
  readonly current?: TunedConfig | null;
  /** Whether some evaluated config is feasible (false: `best` is null, and `infeasible_reason` says why). */
  readonly constraints_met: boolean;
  /** Why nothing is feasible (every config overloaded the engine, or which constraint no config met); null when something is. */
  readonly infeasible_reason: string | null;
  /** Simulations run, the baseline included (never more than the budget). */
  readonly evaluated: number;
  /** Every evaluated config, in evaluation order. */
  readonly points: readonly TunePoint[];
}
