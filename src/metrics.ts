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
}

/** The mutable counters behind {@link RouterMetrics}. */
export class MetricsCounters {
  batches = 0;
  rejectedBatches = 0;
  readonly decisions: Record<DecisionOutcome, number> = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<DecisionOutcome, number>;
  readonly selectionsPerRank: number[];

  constructor(numRanks: number) {
    this.selectionsPerRank = new Array<number>(numRanks).fill(0);
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
