// What one process of the gateway may start on each upstream. The cap
// (limits.max_in_flight_per_upstream) is the gateway's: one process starts up
// to all of it; with `serve --workers N` each worker starts up to its share,
// and the workers lend each other what they leave unused
// (workers/in-flight-lending.ts), so that the engine has the cap's requests in
// flight whichever worker holds the clients, and never more.

import type { GatewayConfig } from "../config/config.js";
import type { Upstream } from "./upstream.js";

/**
 * How many requests this process may start on an upstream, and where it hears
 * of requests that wait for want of that alone. One process: the whole cap,
 * always (`fixedShares`); a worker of `--workers N`: its share, lent and borrowed
 * between the workers (workers/in-flight-lending.ts).
 */
export interface InFlightShares {
  /** Requests this process may have in flight on `u` now. */
  of(u: Upstream): number;
  /**
   * After each batch (and when the queue empties), the requests it left
   * waiting: how many the router had sent to an upstream with no room left in
   * this process's share, by upstream (`short`); how many it placed nowhere,
   * every upstream being full in the gateway as this process sees it
   * (`unplaced`); and since when this process has waited for room (`oldest`,
   * ms since the epoch: its oldest waiting request's arrival, or its last
   * start if later; Infinity when none waits).
   */
  waiting(short: ReadonlyMap<Upstream, number>, unplaced: number, oldest: number): void;
}

/** The shares of a process that lends nothing: its `inFlightShare` on every upstream (the whole cap in one process). */
export const fixedShares = (config: GatewayConfig): InFlightShares => ({ of: () => config.limits.inFlightShare, waiting: () => {} });
