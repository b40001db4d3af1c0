// Every bound on what outside input can make the gateway hold, with its use,
// as two gauges an operator can alert on (used / limit): the learned index's
// and each engine view's memory, tracked conversations, queued requests, client
// connections, and, with replicas, entries waiting for NATS, the replicated
// fleet's size and the replicated state's memory. Clients, engines and other
// replicas fill these; none can grow past its limit.

import type { PrefixIndex } from "adp-router";

/** One bound: what it limits (in its unit, named by the suffix), its limit, and its use now. */
export interface Bound {
  /** `what_unit`, e.g. `engine_view_bytes`. */
  readonly bound: string;
  /** Further labels (the upstream, say), as `key="value"` text already escaped. */
  readonly labels?: string;
  readonly limit: number;
  readonly used: number;
}

/**
 * A prefix index's (or engine view's) memory bound (`budget`, the bytes it was
 * given) and use; one retired because its memory could not grow holds nothing,
 * and the page that lists it still answers.
 */
export function indexBound(bound: string, index: Pick<PrefixIndex, "stats" | "usable">, budget: number, labels?: string): Bound {
  return { bound, ...(labels === undefined ? {} : { labels }), limit: budget, used: index.usable ? index.stats().bytesInUse : 0 };
}

/** Prometheus text of `bounds`. */
export function formatBounds(bounds: readonly Bound[]): string {
  const p = "adp_gateway_bound";
  const series = (b: Bound) => `{bound="${b.bound}"${b.labels === undefined ? "" : `,${b.labels}`}}`;
  return [
    `# HELP ${p}_limit What outside input can make the gateway hold at most, by bound (its unit the name's suffix): the configured limit.`,
    `# TYPE ${p}_limit gauge`,
    ...bounds.map((b) => `${p}_limit${series(b)} ${b.limit}`),
    `# HELP ${p}_used What the gateway holds of that bound now (alert on used / limit).`,
    `# TYPE ${p}_used gauge`,
    ...bounds.map((b) => `${p}_used${series(b)} ${b.used}`),
    "",
  ].join("\n");
}
