// One in-flight cap per upstream across the workers of `serve --workers N`.
// limits.max_in_flight_per_upstream is the gateway's: each worker starts up to
// its share of it, and the shares move to where the clients are. A worker whose
// requests wait for want of its share alone (the router chose an upstream
// with room in the gateway) asks the primary for more; the primary grants
// units from its reserve and, while some are wanted, asks every worker to
// give back what its share leaves unused on that upstream (now, and as its
// requests there end), so long as it has no request waiting for it itself.
// Units only move (a worker lowers its share before it sends units back, and
// raises it when a grant arrives), so per upstream, at every moment,
//
//   the workers' shares + the primary's reserve + units on their way = the cap
//
// and the engine never has more than the cap in flight from the gateway. A
// worker that exits takes its units with it: the primary puts back in its
// reserve the units it had been granted beyond its share, and one started
// again in its slot starts short of the units it had lent (lending-broker.ts).
// Units are counted per upstream URL (workers name upstreams by URL; the cap
// is read once, at start, as the other limits are).
//
// Messages (on the worker's IPC channel to its primary):
//   worker → primary   want(url, n): n requests wait for want of units (0: none now)
//                      return(url, n): n units back
//   primary → worker   grant(url, n): n units more
//                      owe(url, on): give back unused units (on), or stop (off)

import type { InFlightShares } from "../fleet/in-flight-shares.js";
import type { Upstream } from "../fleet/upstream.js";

/** The message kind lending travels as (both ways). */
export const LENDING_MESSAGE = "adp-gateway-lending";
/** The environment variable a worker started again finds the units it owes in (JSON: [url, units] pairs). */
export const LENDING_DEBTS_ENV = "ADP_GATEWAY_IN_FLIGHT_DEBTS";
/** Most units one message moves (the cap's own bound). */
export const MAX_UNITS = 1 << 20;
/** Longest URL a message names. */
const MAX_URL = 8192;
/** Most upstreams a debt list names. */
const MAX_DEBTS = 65_536;

/** A lending message, as it crosses. */
export type LendingMessage =
  | { readonly type: typeof LENDING_MESSAGE; readonly op: "want" | "return" | "grant"; readonly url: string; readonly n: number }
  | { readonly type: typeof LENDING_MESSAGE; readonly op: "owe"; readonly url: string; readonly on: boolean };

/** Whether `v` is a lending message within the bounds (anything else is dropped). */
export function isLendingMessage(v: unknown): v is LendingMessage {
  if (typeof v !== "object" || v === null) return false;
  const m = v as Record<string, unknown>;
  if (m.type !== LENDING_MESSAGE || typeof m.url !== "string" || m.url.length === 0 || m.url.length > MAX_URL) return false;
  if (m.op === "owe") return typeof m.on === "boolean";
  return (m.op === "want" || m.op === "return" || m.op === "grant") && Number.isSafeInteger(m.n) && (m.n as number) >= 0 && (m.n as number) <= MAX_UNITS;
}

/** The debts a worker started again owes, from its environment's text (nothing when unset or malformed: the primary wrote it). */
export function debtsFromEnv(text: string | undefined): Map<string, number> {
  const debts = new Map<string, number>();
  if (text === undefined) return debts;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return debts;
  }
  if (!Array.isArray(parsed) || parsed.length > MAX_DEBTS) return debts;
  for (const pair of parsed) {
    if (!Array.isArray(pair) || typeof pair[0] !== "string" || pair[0].length > MAX_URL || !Number.isSafeInteger(pair[1]) || pair[1] <= 0 || pair[1] > MAX_UNITS) continue;
    debts.set(pair[0], pair[1]);
  }
  return debts;
}

/** What the lending reads of the worker's gateway, bound once it is built. */
export interface LendingView {
  /** This worker's requests in flight on the upstream at `url` (0 when it has none such). */
  inFlight(url: string): number;
  /** The upstreams' URLs. */
  urls(): readonly string[];
  /** Routes the waiting requests again (a grant may let some start). */
  wake(): void;
}

/** A worker's shares of the in-flight caps: the scheduler's InFlightShares, lent and borrowed through the primary. */
export class InFlightLending implements InFlightShares {
  readonly #send: (message: LendingMessage) => void;
  /** Its share of every upstream's cap as the configuration splits it (limits.inFlightShare). */
  readonly #static: number;
  /** Units held beyond (or, negative, short of) the static share, by upstream URL. */
  readonly #delta = new Map<string, number>();
  /** The last want sent, by URL (absent: none outstanding). */
  readonly #wanted = new Map<string, number>();
  /** Requests waiting for want of units at the last batch, by URL. */
  #short: ReadonlyMap<string, number> = new Map();
  /** Requests the last batch placed nowhere, every upstream being full in the gateway. */
  #unplaced = 0;
  /** Upstreams whose unused units the primary asks back. */
  readonly #owed = new Set<string>();
  #view: LendingView | null = null;

  /** `send` reaches the primary; `debts` are the units this slot lent before it was started again (they stay lent). */
  constructor(send: (message: LendingMessage) => void, staticShare: number, debts: ReadonlyMap<string, number> = new Map()) {
    this.#send = send;
    this.#static = staticShare;
    for (const [url, n] of debts) this.#delta.set(url, -n);
  }

  /** Binds the gateway it lends for. */
  start(view: LendingView): void {
    this.#view = view;
  }

  /** Units held on the upstream at `url` now. */
  shareOf(url: string): number {
    return Math.max(0, this.#static + (this.#delta.get(url) ?? 0));
  }

  of(u: Upstream): number {
    return this.shareOf(u.url);
  }

  waiting(short: ReadonlyMap<Upstream, number>, unplaced: number): void {
    const now = new Map<string, number>();
    for (const [u, n] of short) now.set(u.url, Math.min(MAX_UNITS, n));
    // With every upstream full in the gateway, a worker that lent units wants them back (up to its share) for
    // the requests it placed nowhere: each worker is sure of its share while its requests wait.
    if (unplaced > 0 && this.#view !== null) {
      for (const url of this.#view.urls()) {
        const lent = this.#static - this.shareOf(url);
        if (lent > 0) now.set(url, Math.min(MAX_UNITS, (now.get(url) ?? 0) + Math.min(lent, unplaced)));
      }
    }
    this.#short = new Map([...short].map(([u, n]) => [u.url, n]));
    this.#unplaced = unplaced;
    for (const [url, n] of now) {
      if (this.#wanted.get(url) === n) continue;
      this.#wanted.set(url, n);
      this.#send({ type: LENDING_MESSAGE, op: "want", url, n });
    }
    for (const url of [...this.#wanted.keys()]) {
      if (now.has(url)) continue;
      this.#wanted.delete(url);
      this.#send({ type: LENDING_MESSAGE, op: "want", url, n: 0 });
    }
    for (const url of this.#owed) this.#giveBack(url);
  }

  /** A request of this worker ended: unused units the primary asks back go now. */
  ended(): void {
    for (const url of this.#owed) this.#giveBack(url);
  }

  /** Takes a message from the primary; false when it is not a lending message. */
  receive(message: unknown): boolean {
    if (!isLendingMessage(message)) return false;
    if (message.op === "grant") {
      this.#delta.set(message.url, (this.#delta.get(message.url) ?? 0) + message.n);
      this.#view?.wake();
      // Wanted by requests that have gone meanwhile (placed elsewhere, timed out): back, when asked for.
      if (this.#owed.has(message.url)) this.#giveBack(message.url);
    } else if (message.op === "owe") {
      if (!message.on) this.#owed.delete(message.url);
      else {
        this.#owed.add(message.url);
        this.#giveBack(message.url);
      }
    }
    return true;
  }

  /**
   * Sends back the units unused on `url`: none while requests here wait for
   * units there (what it was granted is theirs), only those borrowed beyond
   * its share while requests here wait for a gateway that is full (it keeps
   * its share for them, and a worker whose requests wait longest does not keep
   * another's share from it), else all of them.
   */
  #giveBack(url: string): void {
    if (this.#view === null || (this.#short.get(url) ?? 0) > 0) return;
    const share = this.shareOf(url);
    const unused = share - this.#view.inFlight(url);
    const spare = this.#unplaced > 0 ? Math.min(unused, share - this.#static) : unused;
    if (spare <= 0) return;
    this.#delta.set(url, (this.#delta.get(url) ?? 0) - spare);
    this.#send({ type: LENDING_MESSAGE, op: "return", url, n: spare });
  }
}
