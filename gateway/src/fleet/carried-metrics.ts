// The router's counters across reloads. A reload that changes the upstreams
// rebuilds the router from its snapshot, and a new router counts from zero;
// Prometheus copes with a reset counter, but a dashboard of decisions per
// upstream would jump. So the fleet carries what retired routers counted
// (each kept upstream's share moved to its new rank, a removed one's dropped)
// and adds it to the live router's counters; gauges come from the live one.

import type { RouterMetrics } from "adp-router";

/** Counters of `a` plus those of `b` (b's per-rank counts already on a's ranks); gauges are `a`'s. */
export function addCounters(a: RouterMetrics, b: RouterMetrics | null): RouterMetrics {
  if (b === null) return a;
  const decisions = { ...a.decisions };
  for (const k of Object.keys(decisions) as (keyof typeof decisions)[]) decisions[k] += b.decisions[k] ?? 0;
  return {
    ...a,
    batches: a.batches + b.batches,
    rejectedBatches: a.rejectedBatches + b.rejectedBatches,
    decisions,
    selectionsPerRank: a.selectionsPerRank.map((n, i) => n + (b.selectionsPerRank[i] ?? 0)),
    ...(a.conversations ? { conversations: { ...a.conversations, evictions: a.conversations.evictions + (b.conversations?.evictions ?? 0) } } : {}),
    ...(a.prefixIndex ? { prefixIndex: { ...a.prefixIndex, evictions: a.prefixIndex.evictions + (b.prefixIndex?.evictions ?? 0) } } : {}),
    ...(a.prefixHits
      ? {
          prefixHits: {
            ...a.prefixHits,
            counts: a.prefixHits.counts.map((n, i) => n + (b.prefixHits?.counts[i] ?? 0)),
            requests: a.prefixHits.requests + (b.prefixHits?.requests ?? 0),
            fractionSum: a.prefixHits.fractionSum + (b.prefixHits?.fractionSum ?? 0),
            matchedTokens: a.prefixHits.matchedTokens + (b.prefixHits?.matchedTokens ?? 0),
            promptTokens: a.prefixHits.promptTokens + (b.prefixHits?.promptTokens ?? 0),
          },
        }
      : {}),
  };
}

/**
 * What a retiring router counted, moved onto the next router's ranks:
 * `ranks[i]` is the old rank that becomes rank `i` (null for a new one),
 * so rank i's selections carry over and a removed rank's are dropped.
 */
export function carryOver(retiring: RouterMetrics, ranks: readonly (number | null)[]): RouterMetrics {
  return { ...retiring, numRanks: ranks.length, selectionsPerRank: ranks.map((r) => (r === null ? 0 : (retiring.selectionsPerRank[r] ?? 0))) };
}
