// Router counters and gauges as a plain snapshot: no dependencies, bounded labels
// (router kind, outcome, rank) only; never request or conversation ids.

import type { DecisionOutcome, RouterKind } from "./routers/types.js";

/** Every decision outcome, in report order. */
export const OUTCOMES: readonly DecisionOutcome[] = ["explicit", "warmup", "scored", "balanced", "sticky", "overflow", "placed", "unassigned"];

/** A router's metrics at one moment. */
export interface RouterMetrics {
  /** The router kind (a label). */
  readonly router: RouterKind;
  /** Ranks. */
  readonly numRanks: number;
  /** Batches routed. */
  readonly batches: number;
  /** Batches rejected for bad input (state unchanged). */
  readonly rejectedBatches: number;
  /** Requests decided, by outcome. */
  readonly decisions: Readonly<Record<DecisionOutcome, number>>;
  /** Requests placed on each rank. */
  readonly selectionsPerRank: readonly number[];
  /** Conversation map, for the conversation router. */
  readonly conversations?: { readonly tracked: number; readonly maxSessions: number; readonly evictions: number };
  /** The prefix index, when the router has one. */
  readonly prefixIndex?: { readonly blocks: number; readonly residencies: number; readonly bytesInUse: number; readonly evictions: number };
  /**
   * How much of each placed prompt was already cached on the rank it went to
   * (as the router saw it: `prefixMatches` or its prefix index), for the
   * KV-cache-aware router: a histogram of the fraction per request, and the
   * token totals whose ratio is the router's prefix hit rate.
   */
  readonly prefixHits?: PrefixHitMetrics;
}

/** Prefix hits of placed requests (see {@link RouterMetrics.prefixHits}). */
export interface PrefixHitMetrics {
  /** Bucket upper bounds of the cached fraction of a prompt, ascending, the last 1. */
  readonly upperBounds: readonly number[];
  /** Requests per bucket: fraction ≤ upperBounds[i] and above the previous bound (not cumulative). */
  readonly counts: readonly number[];
  /** Requests counted (placed, with at least one prompt token). */
  readonly requests: number;
  /** Sum of their cached fractions. */
  readonly fractionSum: number;
  /** Prompt tokens already cached on the chosen rank, summed. */
  readonly matchedTokens: number;
  /** Prompt tokens, summed. */
  readonly promptTokens: number;
}

/** Bucket upper bounds of the cached fraction of a prompt. */
export const PREFIX_HIT_BOUNDS: readonly number[] = [0, 0.1, 0.25, 0.5, 0.75, 0.9, 1];

/** The mutable counters behind {@link RouterMetrics}. */
export class MetricsCounters {
  batches = 0;
  rejectedBatches = 0;
  readonly decisions: Record<DecisionOutcome, number> = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<DecisionOutcome, number>;
  readonly selectionsPerRank: number[];

  constructor(numRanks: number) {
    this.selectionsPerRank = new Array<number>(numRanks).fill(0);
  }

  /** Cached-fraction histogram and token totals (KV-cache-aware router). */
  readonly prefixHits = { counts: new Array<number>(PREFIX_HIT_BOUNDS.length).fill(0), requests: 0, fractionSum: 0, matchedTokens: 0, promptTokens: 0 };

  /** Counts the prefix tokens each placed request found cached on its rank (`matched` by input position, -1: unknown). */
  countMatches(matched: readonly number[], requests: readonly { readonly index: number; readonly numTokens: number }[]): void {
    const h = this.prefixHits;
    for (const req of requests) {
      const n = req.numTokens;
      const cached = matched[req.index]!;
      if (cached < 0 || n <= 0) continue;
      const m = Math.min(cached, n); // caller prefixMatches may claim more than the prompt
      const fraction = m / n;
      let b = 0;
      while (PREFIX_HIT_BOUNDS[b]! < fraction) b++;
      h.counts[b]!++;
      h.requests++;
      h.fractionSum += fraction;
      h.matchedTokens += m;
      h.promptTokens += n;
    }
  }

  /** Counts one decided batch. */
  count(outcomes: readonly DecisionOutcome[], rankOf: readonly number[]): void {
    this.batches++;
    for (let i = 0; i < outcomes.length; i++) {
      this.decisions[outcomes[i]!]++;
      const r = rankOf[i]!;
      if (r >= 0) this.selectionsPerRank[r]!++;
    }
  }
}
