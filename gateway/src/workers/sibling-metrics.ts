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
    `# HELP ${p}relayed 1 while this worker lacks a link to a sibling (it is starting or being linked again, or links cannot be made here): its batches to it go through the primary.`,
    `# TYPE ${p}relayed gauge`,
    `${p}relayed ${links === null || links.relay ? 1 : 0}`,
    `# HELP ${p}entries_total Shared routing changes (learned prompts of at least one block, conversations bound): sent to the siblings, applied from them, skipped (naming an upstream this worker does not have).`,
    `# TYPE ${p}entries_total counter`,
    `${p}entries_total{outcome="sent"} ${c.sent}`,
    `${p}entries_total{outcome="applied"} ${c.applied}`,
    `${p}entries_total{outcome="skipped"} ${c.skipped}`,
    `# HELP ${p}rejected_batches_total Siblings' batches not taken (not a batch within the bounds).`,
    `# TYPE ${p}rejected_batches_total counter`,
    `${p}rejected_batches_total ${c.rejected}`,
    `# HELP ${p}links_ended_total Links to siblings that ended: closed (the sibling exited, or ended it), overflowed (the sibling left 16 MiB unread), broken (a line too long, not JSON, or under another worker's number). The primary links them again.`,
    `# TYPE ${p}links_ended_total counter`,
    `${p}links_ended_total{reason="closed"} ${links?.counters.closed ?? 0}`,
    `${p}links_ended_total{reason="overflowed"} ${links?.counters.overflowed ?? 0}`,
    `${p}links_ended_total{reason="broken"} ${links?.counters.broken ?? 0}`,
    "",
  ].join("\n");
}
