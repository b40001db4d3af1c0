// A set of objects that come and go with requests or connections, kept in a
// plain array where each object knows its slot: adding is a push, removing
// moves the last object into the freed slot. Not a Set, for memory's sake: a
// V8 Set that takes and drops entries all day rehashes every few hundred, and
// each table it leaves behind points to the next one (for iterators) and
// still to the entries it held. Once one such table was old enough to be
// promoted, that dead table kept every later table, and everything their
// entries reach, alive through the scavenges until the next mark-compact:
// the proxy's exchanges in flight took 1.75–2.2 MB a scavenge into the old
// generation that way (docs/performance.md#footprint).

/** What a SlotArray holds: its slot there, -1 while in none (an object is in one SlotArray at most). */
export interface Slotted {
  slotIndex: number;
}

/** Objects held in an array, each at its `slotIndex`. */
export class SlotArray<T extends Slotted> {
  readonly #items: T[] = [];

  /** Adds `item`; false when it is held already. */
  add(item: T): boolean {
    if (this.has(item)) return false;
    item.slotIndex = this.#items.length;
    this.#items.push(item);
    return true;
  }

  /** Removes `item` (the last one takes its slot); false when it is not held here. */
  delete(item: T): boolean {
    if (!this.has(item)) return false;
    const items = this.#items;
    const slot = item.slotIndex;
    const last = items.pop()!; // pop, not a hole: no slot keeps a finished object alive
    if (last !== item) {
      items[slot] = last;
      last.slotIndex = slot;
    }
    item.slotIndex = -1;
    return true;
  }

  /** Whether `item` is held here (its slot points into this array, at it). */
  has(item: T): boolean {
    const slot = item.slotIndex;
    return slot >= 0 && slot < this.#items.length && this.#items[slot] === item;
  }

  /** How many are held. */
  get size(): number {
    return this.#items.length;
  }

  /**
   * Calls `visit` on each object held, from the last slot to the first.
   * `visit` may remove any objects and add new ones: one that leaves moves
   * the last into its slot, so none held from start to end is missed, none
   * is visited after it left, and one may be visited twice; one added
   * meanwhile may be visited (moved down into a slot not reached yet) or not.
   */
  forEachBackward(visit: (item: T) => void): void {
    const items = this.#items;
    for (let i = items.length - 1; i >= 0; i--) {
      if (i >= items.length) continue; // several left at once
      visit(items[i]!);
    }
  }

  /** The objects held now, as a new array. */
  toArray(): T[] {
    return this.#items.slice();
  }
}
