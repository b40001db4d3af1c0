// `adp-router/prometheus`: a router metrics snapshot as Prometheus exposition text.
// A separate entry so the library carries no formatter it does not use.

import type { BalanceGateMetrics } from "./balance-gate.js";
import type { RouterMetrics } from "./metrics.js";

/** Options of {@link formatPrometheus}. */
export interface PrometheusOptions {
  /**
   * Metric name prefix.
   * @default "adp_router_"
   */
  readonly prefix?: string;
  /** A balance gate's `metrics()`, to export its holds and releases too. */
  readonly gate?: BalanceGateMetrics;
}

/** A label value escaped for the exposition format. */
export const escapeLabel = (v: string | number) => String(v).replace(/[\\"\n]/g, (c) => (c === "\n" ? "\\n" : `\\${c}`));

/**
 * Formats a `router.metrics()` snapshot as Prometheus text (version 0.0.4).
 *
 * @example
 * ```ts
 * import { formatPrometheus } from "adp-router/prometheus";
 * response.end(formatPrometheus(router.metrics()));
 * ```
 */
export function formatPrometheus(snapshot: RouterMetrics, options: PrometheusOptions = {}): string {
  const p = options.prefix ?? "adp_router_";
  const router = `router="${escapeLabel(snapshot.router)}"`;
  const out: string[] = [];
  const metric = (name: string, type: "counter" | "gauge", help: string, samples: [string, number][]) => {
    out.push(`# HELP ${p}${name} ${help}`, `# TYPE ${p}${name} ${type}`);
    for (const [labels, value] of samples) out.push(`${p}${name}{${labels}} ${value}`);
  };
  metric("batches_total", "counter", "Batches routed.", [[router, snapshot.batches]]);
  metric("rejected_batches_total", "counter", "Batches rejected for bad input (router state unchanged).", [[router, snapshot.rejectedBatches]]);
  metric("decisions_total", "counter", "Requests decided, by outcome.", Object.entries(snapshot.decisions).map(([o, v]) => [`${router},outcome="${o}"`, v]));
  metric("rank_selected_total", "counter", "Requests placed on each attention-DP rank.", snapshot.selectionsPerRank.map((v, r) => [`${router},dp_rank="${r}"`, v]));
  if (snapshot.conversations) {
    metric("conversations", "gauge", "Conversations bound to a rank.", [[router, snapshot.conversations.tracked]]);
    metric("conversation_evictions_total", "counter", "Conversations evicted from the LRU map.", [[router, snapshot.conversations.evictions]]);
  }
  if (snapshot.prefixIndex) {
    metric("prefix_index_blocks", "gauge", "Distinct block paths in the router's prefix index (predictions, not engine cache hits).", [[router, snapshot.prefixIndex.blocks]]);
    metric("prefix_index_residencies", "gauge", "(block, rank) residencies in the prefix index.", [[router, snapshot.prefixIndex.residencies]]);
    metric("prefix_index_bytes", "gauge", "Bytes the prefix index accounts for.", [[router, snapshot.prefixIndex.bytesInUse]]);
    metric("prefix_index_evictions_total", "counter", "Residencies evicted from the prefix index.", [[router, snapshot.prefixIndex.evictions]]);
  }
  if (snapshot.prefixHits) {
    const h = snapshot.prefixHits;
    const name = `${p}prefix_hit_fraction`;
    out.push(`# HELP ${name} Fraction of each placed prompt already cached on its chosen rank, as the router saw it.`, `# TYPE ${name} histogram`);
    let cumulative = 0;
    h.upperBounds.forEach((le, i) => {
      cumulative += h.counts[i]!;
      out.push(`${name}_bucket{${router},le="${le}"} ${cumulative}`);
    });
    out.push(`${name}_bucket{${router},le="+Inf"} ${h.requests}`, `${name}_sum{${router}} ${h.fractionSum}`, `${name}_count{${router}} ${h.requests}`);
    metric("prefix_matched_tokens_total", "counter", "Prompt tokens already cached on the chosen rank (the router's prefix hits).", [[router, h.matchedTokens]]);
    metric("prompt_tokens_total", "counter", "Prompt tokens of the placed requests counted in prefix_hit_fraction.", [[router, h.promptTokens]]);
  }
  if (options.gate) {
    metric("gate_iterations_total", "counter", "Context balance gate decisions, by outcome.", [
      [`${router},outcome="hold"`, options.gate.holds],
      [`${router},outcome="release"`, options.gate.releases],
    ]);
  }
  return out.join("\n") + "\n";
}
