// The `/metrics` lines of a worker's share of the one routing state
// (sibling-log.ts) and its links to its siblings (sibling-links.ts): whether
// its changes reach the others directly, and what it sent, applied and refused.

import type { Siblings } from "./sibling-log.js";

/** Prometheus text for `siblings` (a worker of `serve --workers N`). */
export function formatSiblingMetrics(siblings: Siblings): string {
  const p = "adp_gateway_siblings_";
  const c = siblings.counters;
  const links = siblings.links;
  return [
    `# HELP ${p}links Direct links from this worker to its siblings (one each, made by the primary).`,
    `# TYPE ${p}links gauge`,
    `${p}links ${links?.size ?? 0}`,
    `# HELP ${p}relayed 1 while this worker's batches also go through the primary (no link yet, or links cannot be made here).`,
    `# TYPE ${p}relayed gauge`,
    `${p}relayed ${links === null || links.relay ? 1 : 0}`,
    `# HELP ${p}entries_total Shared routing changes: sent to the siblings, applied from them, skipped (naming an upstream this worker does not have).`,
    `# TYPE ${p}entries_total counter`,
    `${p}entries_total{outcome="sent"} ${c.sent}`,
    `${p}entries_total{outcome="applied"} ${c.applied}`,
    `${p}entries_total{outcome="skipped"} ${c.skipped}`,
    `# HELP ${p}batches_total Batches not taken: rejected (not a batch within the bounds), dropped (a sibling's link held too much unread), links broken (a line too long or not JSON).`,
    `# TYPE ${p}batches_total counter`,
    `${p}batches_total{outcome="rejected"} ${c.rejected}`,
    `${p}batches_total{outcome="dropped"} ${links?.counters.dropped ?? 0}`,
    `${p}batches_total{outcome="link_broken"} ${links?.counters.broken ?? 0}`,
    "",
  ].join("\n");
}
