// One in-flight cap per upstream across the workers of `serve --workers N`.
// limits.max_in_flight_per_upstream is the gateway's: each worker starts with
// its share of it (its units), and units move to where requests wait, the
// workers that wait taking turns. A worker whose requests wait for want of
// units (the router chose an upstream with no room left in its share, or found
// none with room in the gateway) asks the primary, saying since when it has
// waited (the scheduler's `oldest`); the primary grants units from its reserve
// to the oldest want and, while a want is unmet, asks every worker to give
// back what it leaves unused on that upstream, now and as its requests there
// end. A worker gives back unless it has waited at least as long itself.
// Units only move (a worker lowers its share before it sends units back, and
// raises it when a grant arrives), so per upstream, while every worker runs,
//
//   the workers' shares + the primary's reserve + units on their way = the cap
//
// and the engine never has more than the cap in flight from the gateway. A
// worker that exits leaves every unit it held, its own share too, to the
// primary's reserve, a grace period later (its requests may still run at the
// engine), and one started again in its slot takes over what the slot holds
// (within the grace, its predecessor's units; after it, none of its share: the
// primary starts it again only after it, cluster-primary.ts),
// told when it asks its primary for its start (lending-broker.ts, config-relay.ts). Units are counted per upstream URL
// (workers name upstreams by URL; the cap is the one the gateway started with).
//
// Messages (on the worker's IPC channel to its primary):
//   worker → primary   want(url, n, since): n requests wait for units, the oldest since `since` (ms
//                        since the epoch); n = 0: none now
//                      return(url, n): n units back
//   primary → worker   grant(url, n): n units more
//                      owe(url, on, since): give back unused units to a want waiting since `since`
//                        (on), or stop (off)

import type { InFlightShares } from "../fleet/in-flight-shares.js";
import type { Upstream } from "../fleet/upstream.js";

/** The message kind lending travels as (both ways). */
export const LENDING_MESSAGE = "adp-gateway-lending";
/** Most units one message moves (the cap's own bound). */
const MAX_UNITS = 1 << 20;
/** Longest URL a message names. */
const MAX_URL = 8192;
/** Most upstreams a carried list names. */
const MAX_CARRIED = 65_536;

/** A lending message, as it crosses. */
export type LendingMessage =
  | { readonly type: typeof LENDING_MESSAGE; readonly op: "want"; readonly url: string; readonly n: number; readonly since: number }
  | { readonly type: typeof LENDING_MESSAGE; readonly op: "return" | "grant"; readonly url: string; readonly n: number }
  | { readonly type: typeof LENDING_MESSAGE; readonly op: "owe"; readonly url: string; readonly on: boolean; readonly since: number };

/** Whether `v` is a lending message within the bounds (anything else is dropped). */
export function isLendingMessage(v: unknown): v is LendingMessage {
  if (typeof v !== "object" || v === null) return false;
  const m = v as Record<string, unknown>;
  if (m.type !== LENDING_MESSAGE || typeof m.url !== "string" || m.url.length === 0 || m.url.length > MAX_URL) return false;
  const since = typeof m.since === "number" && Number.isFinite(m.since);
  if (m.op === "owe") return typeof m.on === "boolean" && since;
  const units = Number.isSafeInteger(m.n) && (m.n as number) >= 0 && (m.n as number) <= MAX_UNITS;
  return m.op === "want" ? units && since : (m.op === "return" || m.op === "grant") && units;
}

/** What a worker started again holds beyond (or, negative, short of) its share, from its primary's [url, units] pairs (nothing of a malformed list). */
export function carriedFrom(parsed: unknown): Map<string, number> {
  const carried = new Map<string, number>();
  if (!Array.isArray(parsed) || parsed.length > MAX_CARRIED) return carried;
  for (const pair of parsed) {
    if (!Array.isArray(pair) || typeof pair[0] !== "string" || pair[0].length > MAX_URL || !Number.isSafeInteger(pair[1]) || pair[1] === 0 || Math.abs(pair[1]) > MAX_UNITS) continue;
    carried.set(pair[0], pair[1]);
  }
  return carried;
}

/** What the lending reads of the worker's gateway, bound once it is built. */
export interface LendingView {
  /** This worker's requests in flight on the upstream at `url`, a removed one's still finishing included (0 when none). */
  inFlight(url: string): number;
  /** The URLs of the upstreams that take requests now. */
  urls(): readonly string[];
  /** Routes the waiting requests again (a grant may let some start). */
  wake(): void;
  /** Requests taken since the last batch began, which the next batch places on units held now (none are given back from under them). */
  unbatched(): number;
}

/** A want as last sent: how many units, for requests waiting since when. */
interface Want {
  /** Units wanted. */
  readonly n: number;
  /** When the oldest request they are for arrived (ms since the epoch). */
  readonly since: number;
}

/** A worker's shares of the in-flight caps: the scheduler's InFlightShares, lent and borrowed through the primary. */
export class InFlightLending implements InFlightShares {
  readonly #send: (message: LendingMessage) => void;
  /** Its share of every upstream's cap at its start, as the configuration splits it (limits.inFlightShare). */
  readonly #startShare: number;
  /** Units held beyond (or, negative, short of) the starting share, by upstream URL. */
  readonly #delta = new Map<string, number>();
  /** The want outstanding at the primary as this worker counts it, by URL (absent: none). */
  readonly #wanted = new Map<string, Want>();
  /** Requests the last batch left waiting for want of units on an upstream the router chose, by URL. */
  #short: ReadonlyMap<string, number> = new Map();
  /** Requests the last batch placed nowhere (every upstream full in the gateway, as this worker sees it). */
  #unplaced = 0;
  /** Since when this worker has waited for units, as its last batch said (ms since the epoch; Infinity: nothing waits). */
  #oldest = Infinity;
  /** Upstreams whose unused units the primary asks back, each for a want waiting since when. */
  readonly #owed = new Map<string, number>();
  /** The gateway it lends for (null until bound). */
  #view: LendingView | null = null;

  /** `send` reaches the primary; `carried` is what its slot held beyond (or, negative, short of) its share when it was started again. */
  constructor(send: (message: LendingMessage) => void, startShare: number, carried: ReadonlyMap<string, number> = new Map()) {
    this.#send = send;
    this.#startShare = startShare;
    for (const [url, n] of carried) this.#delta.set(url, n);
  }

  /** Binds the gateway it lends for. */
  start(view: LendingView): void {
    this.#view = view;
  }

  /** Units held on the upstream at `url` now. */
  shareOf(url: string): number {
    return Math.max(0, this.#startShare + (this.#delta.get(url) ?? 0));
  }

  /** Units held on `u` now: the requests this worker may have in flight there. */
  of(u: Upstream): number {
    return this.shareOf(u.url);
  }

  /**
   * After a batch: sends the wants that changed (requests short of units on
   * the upstream the router chose, one want a unit each; requests placed
   * nowhere, one unit on each upstream that takes requests: any would do, and
   * the next batch asks again), then gives back what is owed.
   */
  waiting(short: ReadonlyMap<Upstream, number>, unplaced: number, oldest: number): void {
    // The usual batch: nothing waits, nothing wanted or owed (each batch calls this).
    if (short.size === 0 && unplaced === 0 && this.#wanted.size === 0 && this.#owed.size === 0) {
      if (this.#short.size > 0) this.#short = new Map();
      this.#unplaced = 0;
      this.#oldest = Infinity;
      return;
    }
    const byUrl = new Map<string, number>();
    for (const [u, n] of short) byUrl.set(u.url, Math.min(MAX_UNITS, n));
    this.#short = byUrl;
    this.#unplaced = unplaced;
    this.#oldest = oldest;
    const wants = new Map(byUrl);
    if (unplaced > 0 && this.#view !== null) for (const url of this.#view.urls()) wants.set(url, Math.min(MAX_UNITS, (wants.get(url) ?? 0) + 1));
    // A want goes again when its count or its oldest request changed: the primary serves the oldest want first,
    // and a worker asked for units keeps them for its own requests only if they have waited longer.
    const since = Number.isFinite(oldest) ? oldest : performance.timeOrigin + performance.now();
    for (const [url, n] of wants) {
      const sent = this.#wanted.get(url);
      if (sent !== undefined && sent.n === n && sent.since === since) continue;
      this.#wanted.set(url, { n, since });
      this.#send({ type: LENDING_MESSAGE, op: "want", url, n, since });
    }
    for (const url of [...this.#wanted.keys()]) {
      if (wants.has(url)) continue;
      this.#wanted.delete(url);
      this.#send({ type: LENDING_MESSAGE, op: "want", url, n: 0, since: 0 });
    }
    for (const url of this.#owed.keys()) this.#giveBack(url);
  }

  /** A request of this worker ended: unused units the primary asks back go now. */
  ended(): void {
    for (const url of this.#owed.keys()) this.#giveBack(url);
  }

  /** Takes a message from the primary; false when it is not a lending message. */
  receive(message: unknown): boolean {
    if (!isLendingMessage(message)) return false;
    const url = message.url;
    if (message.op === "grant") {
      this.#delta.set(url, (this.#delta.get(url) ?? 0) + message.n);
      // The primary's count of the want is lower by the grant: so is this one (a batch short by as many again says so).
      const sent = this.#wanted.get(url);
      if (sent !== undefined) {
        if (sent.n > message.n) this.#wanted.set(url, { n: sent.n - message.n, since: sent.since });
        else this.#wanted.delete(url);
      }
      this.#view?.wake();
      // Wanted by requests that have gone meanwhile (placed elsewhere, timed out): back, when asked for.
      if (this.#owed.has(url)) this.#giveBack(url);
    } else if (message.op === "owe") {
      if (!message.on) this.#owed.delete(url);
      else {
        this.#owed.set(url, message.since);
        this.#giveBack(url);
      }
    }
    return true;
  }

  /**
   * Sends back the units unused on `url` that the primary asks for, unless
   * this worker's requests have waited at least as long as the want they
   * would go to (the primary's record of this worker's own want may be that
   * oldest one: then its units are this worker's to use).
   */
  #giveBack(url: string): void {
    if (this.#view === null) return;
    const owed = this.#owed.get(url)!;
    const waitingHere = this.#unplaced > 0 || (this.#short.get(url) ?? 0) > 0;
    if (waitingHere && !(owed < this.#oldest)) return;
    const mine = this.#wanted.get(url);
    if (mine !== undefined && mine.since <= owed) return;
    // A request taken on a unit this turn counts as using it: given back before its batch, the unit left it waiting
    // with no room (with queue_size 0, past what one process takes). The batch's waiting() gives back what is left.
    const spare = this.shareOf(url) - this.#view.inFlight(url) - this.#view.unbatched();
    if (spare <= 0) return;
    this.#delta.set(url, (this.#delta.get(url) ?? 0) - spare);
    this.#send({ type: LENDING_MESSAGE, op: "return", url, n: spare });
  }
}
