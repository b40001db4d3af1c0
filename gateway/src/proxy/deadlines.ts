// Deadlines of many things in flight, checked by one sweep: what node:http
// does for its servers' head and request timeouts (connectionsCheckingInterval),
// here for the proxy's exchanges. A timer per exchange, re-armed at each of
// its phases, cost three Timeout objects and their list work per request; a
// sweep costs a set insertion and a comparison per tick. A deadline is seen
// at most 1/8 of the shortest timeout in flight late (and within 250 ms).

/** Something with a deadline. */
export interface Expiring {
  /** When it is due (performance.now()). */
  readonly dueAt: number;
  /** Called by the sweep once `now` ≥ dueAt (it may leave the set from here). */
  expire(now: number): void;
}

/** The sweep's shortest and longest tick, ms. */
const MIN_TICK_MS = 2;
const MAX_TICK_MS = 250;

/** A set of things with deadlines, swept while it is not empty. */
export class Deadlines<T extends Expiring> {
  readonly #items = new Set<T>();
  #timer: NodeJS.Timeout | null = null;
  /** The sweep's tick now, ms. */
  #tick = Infinity;

  /** Adds `item`; `shortestMs` is its shortest timeout (the sweep ticks at least 8 times within it). */
  add(item: T, shortestMs: number): void {
    this.#items.add(item);
    const tick = Math.max(MIN_TICK_MS, Math.min(MAX_TICK_MS, Math.floor(shortestMs / 8)));
    if (this.#timer !== null && tick >= this.#tick) return;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#tick = tick;
    this.#timer = setInterval(() => this.#sweep(), tick);
    this.#timer.unref(); // in-flight exchanges hold the process open through their sockets, not through this
  }

  /** Removes `item` (the sweep stops once none is left). */
  delete(item: T): void {
    this.#items.delete(item);
    if (this.#items.size === 0 && this.#timer !== null) {
      clearInterval(this.#timer);
      this.#timer = null;
      this.#tick = Infinity;
    }
  }

  /** How many are in flight. */
  get size(): number {
    return this.#items.size;
  }

  #sweep(): void {
    const now = performance.now();
    for (const item of this.#items) if (now >= item.dueAt) item.expire(now);
  }
}
