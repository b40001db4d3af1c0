// The attention-DP context balance gate (reference §8): each iteration it sees
// every rank's scheduled context and generation counts and either releases the
// context requests or holds them for this iteration, so that ranks run context
// work together instead of one rank's prefill stalling the others' decode.

import { parseAttentionDpConfig, type AttentionDpConfig } from "./config.js";
import { AdpInputError, readOptions } from "./errors.js";

/** One rank's scheduled work in an iteration. */
export interface RankIterationLoad {
  /** Context (prefill) requests scheduled on the rank. */
  readonly numCtx: number;
  /** Generation (decode) requests scheduled on the rank. */
  readonly numGen: number;
}

/** Settings of the gate (TensorRT-LLM copies the last two from `attention_dp_config`). */
export interface BalanceGateOptions {
  /** The engine's max batch size: a rank with this many generation requests has no free slot. */
  readonly maxBatchSize: number;
  /** Iterations an imbalanced gate may hold before it releases anyway. */
  readonly timeoutIters: number;
  /** Iterations a balanced gate waits to batch more context work. */
  readonly batchingWaitIters: number;
}

/** Whether `v` is an integer number. */
const isInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v);
/** The options a BalanceGate takes, all required. */
const GATE_OPTION_KEYS = new Set(["maxBatchSize", "timeoutIters", "batchingWaitIters"] as const);

/** Counters of a balance gate. */
export interface BalanceGateMetrics {
  /** Iterations whose context requests were held. */
  readonly holds: number;
  /** Iterations whose context requests were released. */
  readonly releases: number;
}

/** The context balance state machine. */
export class BalanceGate {
  readonly #maxBatchSize: number;
  readonly #timeoutIters: number;
  readonly #batchingWaitIters: number;
  #waiting = 0;
  #batching = 0;
  #holds = 0;
  #releases = 0;

  /**
   * @example
   * ```ts
   * const gate = new BalanceGate({ maxBatchSize: 8, timeoutIters: 2, batchingWaitIters: 1 });
   * gate.step([{ numCtx: 1, numGen: 2 }, { numCtx: 0, numGen: 3 }]); // false: hold
   * ```
   */
  constructor(input: BalanceGateOptions) {
    const options = readOptions(input, "BalanceGate()", GATE_OPTION_KEYS as ReadonlySet<string>, "balance gate option") as Partial<BalanceGateOptions>;
    for (const k of GATE_OPTION_KEYS) {
      if (!isInt(options[k])) throw new AdpInputError(k, "must be an integer", options[k]);
    }
    this.#maxBatchSize = options.maxBatchSize!;
    this.#timeoutIters = options.timeoutIters!;
    this.#batchingWaitIters = options.batchingWaitIters!;
  }

  /** Iterations held so far while imbalanced. */
  get waitingIters(): number {
    return this.#waiting;
  }

  /** Iterations held so far while balanced, waiting to batch. */
  get batchingIters(): number {
    return this.#batching;
  }

  /** Holds and releases so far. */
  metrics(): BalanceGateMetrics {
    return { holds: this.#holds, releases: this.#releases };
  }

  /** Feeds one iteration; returns true to release the context requests, false to hold them. */
  step(ranks: readonly RankIterationLoad[]): boolean {
    const release = this.#decide(ranks);
    if (release) this.#releases++;
    else this.#holds++;
    return release;
  }

  #decide(ranks: readonly RankIterationLoad[]): boolean {
    if (!Array.isArray(ranks) || ranks.length === 0) throw new AdpInputError("ranks", "must be a non-empty array of { numCtx, numGen }", ranks);
    ranks.forEach((r, i) => {
      for (const k of ["numCtx", "numGen"] as const) {
        const v = r?.[k];
        if (!isInt(v) || v < 0) throw new AdpInputError(`ranks[${i}].${k}`, "must be a non-negative integer", v);
      }
    });
    const freeSlots = ranks.every((r) => r.numGen < this.#maxBatchSize);
    const allCtx = ranks.every((r) => r.numCtx > 0);
    const allGen = ranks.every((r) => r.numGen > 0);
    if (freeSlots && allCtx) {
      this.#waiting = 0;
      if (!allGen) return true;
      if (this.#batching < this.#batchingWaitIters) {
        this.#batching++;
        return false;
      }
      this.#batching = 0;
      return true;
    }
    this.#waiting++;
    if (this.#waiting >= this.#timeoutIters || !allGen) {
      this.#waiting = 0;
      return true;
    }
    return false;
  }
}

/**
 * The gate TensorRT-LLM runs for a config: the state machine when
 * `enable_balance` is true, otherwise a gate that always releases.
 */
export function createBalanceGate(input: AttentionDpConfig, maxBatchSize: number): Pick<BalanceGate, "step" | "metrics"> {
  const config = parseAttentionDpConfig(input); // a parsed config as is
  if (config.enableBalance) {
    return new BalanceGate({ maxBatchSize, timeoutIters: config.timeoutIters, batchingWaitIters: config.batchingWaitIters });
  }
  let releases = 0;
  return { step: () => (releases++, true), metrics: () => ({ holds: 0, releases }) };
}
