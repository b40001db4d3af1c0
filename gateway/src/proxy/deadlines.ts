// Deadlines of many things in flight, checked by one sweep: what node:http
// does for its servers' head and request timeouts (connectionsCheckingInterval),
// here for the proxy's exchanges. A timer per exchange, re-armed at each of
// its phases, cost three Timeout objects and their list work per request; a
// sweep costs a slot in an array and a comparison per tick. A deadline is
// seen at most 1/8 of the shortest timeout in flight late (and within 250 ms).
//
// The things are kept in a SlotArray (common/slot-array.ts), not a Set: a Set
// that took and dropped an exchange per request kept finished requests alive
// into the old generation through its abandoned hash tables.

import { SlotArray, type Slotted } from "../common/slot-array.js";

/** Something with a deadline (its slot the Deadlines' to keep). */
export interface Expiring extends Slotted {
  /** When it is due (performance.now()). */
  readonly dueAt: number;
  /** Called by the sweep once `now` ≥ dueAt (it may leave the set from here, and others with it). */
  expire(now: number): void;
}

/** The sweep's shortest and longest tick, ms. */
const MIN_TICK_MS = 2;
const MAX_TICK_MS = 250;

/** A set of things with deadlines, swept while it is not empty. */
export class Deadlines<T extends Expiring> {
  /** What is in flight. */
  readonly #items = new SlotArray<T>();
  #timer: NodeJS.Timeout | null = null;
  /** The sweep's tick now, ms. */
  #tick = Infinity;

  /** Adds `item` (once); `shortestMs` is its shortest timeout (the sweep ticks at least 8 times within it). */
  add(item: T, shortestMs: number): void {
    if (!this.#items.add(item)) return;
    const tick = Math.max(MIN_TICK_MS, Math.min(MAX_TICK_MS, Math.floor(shortestMs / 8)));
    if (this.#timer !== null && tick >= this.#tick) return;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#tick = tick;
    this.#timer = setInterval(() => this.#sweep(), tick);
    this.#timer.unref(); // in-flight exchanges hold the process open through their sockets, not through this
  }

  /** Removes `item`, if it is here (the sweep stops once none is left). */
  delete(item: T): void {
    if (!this.#items.delete(item) || this.#items.size > 0 || this.#timer === null) return;
    clearInterval(this.#timer);
    this.#timer = null;
    this.#tick = Infinity;
  }

  /** How many are in flight. */
  get size(): number {
    return this.#items.size;
  }

  /** Expires what is due; an expire() may remove any items or add some (those may wait for the next tick). */
  #sweep(): void {
    const now = performance.now();
    this.#items.forEachBackward((item) => {
      if (now >= item.dueAt) item.expire(now);
    });
  }
}
