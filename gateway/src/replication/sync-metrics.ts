// A replica's sharing as Prometheus text: whether it is connected and synced,
// the stream sequence its replicated state applied, entries waiting, and its
// entries by outcome.

import type { Replication } from "./replication.js";

/** Prometheus text of a replica's sharing. */
export function formatSyncMetrics(r: Replication): string {
  const p = "adp_gateway_sync_";
  const c = r.counters;
  return [
    `# HELP ${p}connected 1 while the replica reaches NATS.`,
    `# TYPE ${p}connected gauge`,
    `${p}connected ${r.connected ? 1 : 0}`,
    `# HELP ${p}synced 1 while connected with nothing waiting to be published (else routing on local state).`,
    `# TYPE ${p}synced gauge`,
    `${p}synced ${r.synced ? 1 : 0}`,
    `# HELP ${p}applied_sequence The stream sequence of the last entry the replicated state applied.`,
    `# TYPE ${p}applied_sequence gauge`,
    `${p}applied_sequence ${r.applied}`,
    `# HELP ${p}pending_entries This replica's entries waiting for NATS.`,
    `# TYPE ${p}pending_entries gauge`,
    `${p}pending_entries ${r.pending}`,
    `# HELP ${p}entries_total Entries by outcome: published by this replica, dropped from its full buffer, too large (over the server's max_payload: not published), truncated (a learned prompt shared up to the blocks that fit max_payload), applied from the stream, rejected (not an entry, or not applicable here), duplicate deliveries skipped, missed (dropped by the stream before this replica applied them, with no snapshot to cover them).`,
    `# TYPE ${p}entries_total counter`,
    `${p}entries_total{outcome="published"} ${c.published}`,
    `${p}entries_total{outcome="dropped"} ${c.dropped}`,
    `${p}entries_total{outcome="too_large"} ${c.tooLarge}`,
    `${p}entries_total{outcome="truncated"} ${c.truncated}`,
    `${p}entries_total{outcome="applied"} ${c.applied}`,
    `${p}entries_total{outcome="rejected"} ${c.rejected}`,
    `${p}entries_total{outcome="duplicate"} ${c.duplicates}`,
    `${p}entries_total{outcome="missed"} ${c.missed}`,
    `# HELP ${p}rejected_entries_total Stream messages not applied, by reason: not an entry, unsigned, unknown key, bad signature (sync.signing), over the local bounds (sync.max_fleet, the longest prompt, the engines' batch limits), not applicable (an upstream this fleet lacks).`,
    `# TYPE ${p}rejected_entries_total counter`,
    ...["not an entry", "unsigned", "unknown key", "bad signature", "over the local bounds", "not applicable"].map((reason) => `${p}rejected_entries_total{reason="${reason}"} ${c.rejectedBy.get(reason) ?? 0}`),
    `# HELP ${p}snapshots_total Snapshots of the replicated state this replica stored, and loaded to catch up.`,
    `# TYPE ${p}snapshots_total counter`,
    `${p}snapshots_total{op="stored"} ${c.snapshotsStored}`,
    `${p}snapshots_total{op="loaded"} ${c.snapshotsLoaded}`,
    "",
  ].join("\n");
}
