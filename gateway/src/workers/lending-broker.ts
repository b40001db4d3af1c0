// The primary's side of the in-flight lending (in-flight-lending.ts): a
// reserve of units per upstream URL, the workers' wants with how long each has
// waited, and what each worker slot holds beyond (or short of) its share.
// Units a worker gives back go to the reserve, and from it to the wants, the
// longest-waiting first; while a want is unmet every worker is asked to give
// back what it leaves unused there (told how long the oldest unmet want has
// waited). A worker that exits leaves every unit it held to the reserve, its
// own share included, so that the others can use them until it is started
// again (for as long as its restarts fail): after DOWN_GRACE_MS, as its
// requests may still run at the engine until it sees their connections
// closed. The worker started again in its slot takes over what the slot holds
// (told when it asks for its start, config-relay.ts): within the grace, the
// units its predecessor held; after it, none of its share, which it borrows
// back like any other worker. (The primary starts a worker that exited only
// after the grace: taken over within it, units its predecessor's requests
// still used at the engine were lent at once.)

import { LENDING_MESSAGE, type LendingMessage } from "./in-flight-lending.js";

/** Most upstream URLs the broker keeps units for (a fleet's upstreams, reloads included). */
const MAX_URLS = 65_536;
/**
 * How long after a worker exits its units go to the reserve, ms: its requests
 * may still run at the engine, which frees them once it sees their
 * connections closed (vLLM, SGLang and trtllm-serve abort a request whose
 * client went); lent at once, they would let the engine hold twice the cap.
 */
export const DOWN_GRACE_MS = 1_000;

/** How the broker reaches the workers. */
export interface LendingPeers {
  /** Sends `message` to worker `slot` (dropped when it is not running). */
  post(slot: number, message: LendingMessage): void;
  /** The slots of the workers that serve now. */
  started(): readonly number[];
}

/** A worker's unmet want: how many units, for requests waiting since when (ms since the epoch). */
interface Want {
  /** Units still wanted (lowered by each grant). */
  n: number;
  /** When the oldest request they are for arrived (ms since the epoch). */
  readonly since: number;
}

/** The primary's reserve of in-flight units and the workers' wants. */
export class LendingBroker {
  readonly #peers: LendingPeers;
  /** Units held here, by URL. */
  readonly #reserve = new Map<string, number>();
  /** Unmet wants by URL and slot. */
  readonly #wants = new Map<string, Map<number, Want>>();
  /** URLs whose unused units every worker is asked to give back now, each with its oldest unmet want's time (as told). */
  readonly #owing = new Map<string, number>();
  /** Units granted minus units given back, by slot and URL: beyond (or, negative, short of) the slot's share. */
  readonly #held = new Map<number, Map<string, number>>();
  /** Each slot's share of an upstream's cap at its start (as limitsShare splits it). */
  readonly #shareOf: (slot: number) => number;
  /** Slots whose worker exited and is not started again, each with the URLs whose units of it went to the reserve (null: within DOWN_GRACE_MS, none yet). */
  readonly #down = new Map<number, Set<string> | null>();

  /** `peers` reach the workers; `shareOf` gives a slot's share of each upstream's cap. */
  constructor(peers: LendingPeers, shareOf: (slot: number) => number) {
    this.#peers = peers;
    this.#shareOf = shareOf;
  }

  /** Takes worker `slot`'s message (checked by the caller). */
  receive(slot: number, m: LendingMessage): void {
    // Bounded: a URL past the most the broker keeps is not lent (its workers keep their shares).
    if (!this.#reserve.has(m.url)) {
      if (this.#reserve.size >= MAX_URLS) return;
      this.#reserve.set(m.url, 0);
      // An upstream first named now: a down slot's units of it go to the reserve too.
      for (const down of this.#down.keys()) this.#release(down, m.url);
    }
    if (m.op === "want") {
      const wants = this.#wants.get(m.url) ?? new Map<number, Want>();
      if (m.n === 0) wants.delete(slot);
      else wants.set(slot, { n: m.n, since: m.since });
      if (wants.size === 0) this.#wants.delete(m.url);
      else this.#wants.set(m.url, wants);
    } else if (m.op === "return") {
      this.#reserve.set(m.url, (this.#reserve.get(m.url) ?? 0) + m.n);
      this.#count(slot, m.url, -m.n);
    } else return; // grant and owe go the other way
    this.#serve(m.url);
  }

  /** Units in the reserve for `url`. */
  reserve(url: string): number {
    return this.#reserve.get(url) ?? 0;
  }

  /** Worker `slot` started serving: it is asked to give back wherever every worker is. */
  started(slot: number): void {
    for (const [url, since] of this.#owing) this.#peers.post(slot, { type: LENDING_MESSAGE, op: "owe", url, on: true, since });
  }

  /**
   * Worker `slot` exited (or could not be started): its wants go; what it
   * holds waits for releaseDown (DOWN_GRACE_MS later); what it lent stays lent.
   */
  exited(slot: number): void {
    const urls = new Set<string>();
    for (const [url, wants] of this.#wants) if (wants.delete(slot)) urls.add(url);
    // Down again without a start between (a restart that failed): what went to the reserve stays there.
    if (!this.#down.has(slot)) this.#down.set(slot, null);
    for (const url of urls) {
      if (this.#wants.get(url)?.size === 0) this.#wants.delete(url);
      this.#serve(url);
    }
  }

  /** Down `slot`'s grace is over: every unit it holds comes to the reserve (of upstreams no message named yet, once one does). */
  releaseDown(slot: number): void {
    if (this.#down.get(slot) !== null) return; // started again meanwhile, or released already
    this.#down.set(slot, new Set());
    for (const url of this.#reserve.keys()) if (this.#release(slot, url)) this.#serve(url);
  }

  /** Units of `url` that down slots hold and the reserve has not taken yet (within their grace, or no message named `url` since). */
  downUnits(url: string): number {
    let n = 0;
    for (const [slot, released] of this.#down) if (released === null || !released.has(url)) n += Math.max(0, this.#shareOf(slot) + (this.#held.get(slot)?.get(url) ?? 0));
    return n;
  }

  /**
   * What worker `slot` starts with beyond (or, negative, short of) its share,
   * as [url, units] pairs: what its slot holds, borrowed, lent, or left to the
   * reserve after its grace. From here the slot is up: what it holds (of an
   * upstream no message named yet, its share) is its worker's.
   */
  carried(slot: number): [string, number][] {
    this.#down.delete(slot);
    return [...(this.#held.get(slot) ?? [])].filter(([, n]) => n !== 0);
  }

  /** Moves what down `slot` holds of `url` to the reserve, once (after its grace); whether any unit moved. */
  #release(slot: number, url: string): boolean {
    const released = this.#down.get(slot);
    if (released === undefined || released === null || released.has(url)) return false;
    released.add(url);
    const units = Math.max(0, this.#shareOf(slot) + (this.#held.get(slot)?.get(url) ?? 0));
    if (units === 0) return false;
    this.#reserve.set(url, (this.#reserve.get(url) ?? 0) + units);
    this.#count(slot, url, -units);
    return true;
  }

  /**
   * Grants `url`'s reserve to its wants, the longest-waiting first (then the
   * lowest slot); asks every worker for unused units while a want is unmet
   * (again when the oldest unmet want changes), and stops asking once none is.
   */
  #serve(url: string): void {
    const wants = this.#wants.get(url);
    let reserve = this.#reserve.get(url) ?? 0;
    let oldest = Infinity;
    if (wants !== undefined) {
      for (const [slot, want] of [...wants].sort(([a, x], [b, y]) => x.since - y.since || a - b)) {
        const granted = Math.min(want.n, reserve);
        if (granted > 0) {
          reserve -= granted;
          want.n -= granted;
          this.#count(slot, url, granted);
          this.#peers.post(slot, { type: LENDING_MESSAGE, op: "grant", url, n: granted });
        }
        if (want.n === 0) wants.delete(slot);
        else oldest = Math.min(oldest, want.since);
      }
      if (wants.size === 0) this.#wants.delete(url);
    }
    this.#reserve.set(url, reserve);
    // Told again whenever the oldest unmet want changes: a worker told of one older than any waiting would give
    // back units its own, older requests should have.
    const told = this.#owing.get(url);
    if (told === oldest || (told === undefined && oldest === Infinity)) return;
    const on = oldest !== Infinity;
    if (on) this.#owing.set(url, oldest);
    else this.#owing.delete(url);
    for (const slot of this.#peers.started()) this.#peers.post(slot, { type: LENDING_MESSAGE, op: "owe", url, on, since: on ? oldest : 0 });
  }

  /** Counts `n` units to (or, negative, from) `slot` on `url`. */
  #count(slot: number, url: string, n: number): void {
    const held = this.#held.get(slot) ?? new Map<string, number>();
    held.set(url, (held.get(url) ?? 0) + n);
    this.#held.set(slot, held);
  }
}
