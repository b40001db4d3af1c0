// Deadlines of many things in flight, checked by one sweep: what node:http
// does for its servers' head and request timeouts (connectionsCheckingInterval),
// here for the proxy's exchanges. A timer per exchange, re-armed at each of
// its phases, cost three Timeout objects and their list work per request; a
// sweep costs a slot in an array and a comparison per tick. A deadline is
// seen at most 1/8 of the shortest timeout in flight late (and within 250 ms).
//
// The things are kept in a plain array, each knowing its slot, and not in a
// Set: a Set that takes and drops an entry per request rehashes every few
// hundred requests, and each table it leaves behind points to the next one
// (for iterators) and still to the entries it held. Once one such table was
// old enough to be promoted, that dead table kept every later table, and each
// exchange they named with its whole request, alive through the scavenges
// until the next mark-compact: 2.2 MB promoted per scavenge on small requests
// against 5 KB with the array (docs/performance.md, "Where the heap went").

/** Something with a deadline. */
export interface Expiring {
  /** When it is due (performance.now()). */
  readonly dueAt: number;
  /** Its slot in the Deadlines that holds it (-1: none); that set's to keep. */
  deadlineSlot: number;
  /** Called by the sweep once `now` ≥ dueAt (it may leave the set from here, and others with it). */
  expire(now: number): void;
}

/** The sweep's shortest and longest tick, ms. */
const MIN_TICK_MS = 2;
const MAX_TICK_MS = 250;

/** A set of things with deadlines, swept while it is not empty. */
export class Deadlines<T extends Expiring> {
  /** What is in flight, each at its `deadlineSlot`. */
  readonly #items: T[] = [];
  #timer: NodeJS.Timeout | null = null;
  /** The sweep's tick now, ms. */
  #tick = Infinity;

  /** Adds `item` (once; it must not be in another Deadlines); `shortestMs` is its shortest timeout (the sweep ticks at least 8 times within it). */
  add(item: T, shortestMs: number): void {
    if (this.#has(item)) return;
    item.deadlineSlot = this.#items.length;
    this.#items.push(item);
    const tick = Math.max(MIN_TICK_MS, Math.min(MAX_TICK_MS, Math.floor(shortestMs / 8)));
    if (this.#timer !== null && tick >= this.#tick) return;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#tick = tick;
    this.#timer = setInterval(() => this.#sweep(), tick);
    this.#timer.unref(); // in-flight exchanges hold the process open through their sockets, not through this
  }

  /** Removes `item`, if it is here (the last item takes its slot; the sweep stops once none is left). */
  delete(item: T): void {
    if (!this.#has(item)) return;
    const items = this.#items;
    const slot = item.deadlineSlot;
    const last = items.pop()!; // pop, not a hole: no array slot keeps a finished request alive
    if (last !== item) {
      items[slot] = last;
      last.deadlineSlot = slot;
    }
    item.deadlineSlot = -1;
    if (items.length === 0 && this.#timer !== null) {
      clearInterval(this.#timer);
      this.#timer = null;
      this.#tick = Infinity;
    }
  }

  /** How many are in flight. */
  get size(): number {
    return this.#items.length;
  }

  #has(item: T): boolean {
    const slot = item.deadlineSlot;
    return slot >= 0 && slot < this.#items.length && this.#items[slot] === item;
  }

  /**
   * Expires what is due. Walked from the end: an item that leaves moves the
   * last one into its slot, which was already seen; one added meanwhile is
   * seen at the next tick; one moved down by another's leaving may be asked
   * twice, as it would be again at the next tick while it stays.
   */
  #sweep(): void {
    const now = performance.now();
    const items = this.#items;
    for (let i = items.length - 1; i >= 0; i--) {
      if (i >= items.length) continue; // several left at once
      const item = items[i]!;
      if (now >= item.dueAt) item.expire(now);
    }
  }
}
