// The conversation→rank map of conversation-affinity routing: an exact LRU
// bounded by `kv_cache_routing_max_sessions`.
//
// Entries live in slots of parallel arrays (key, rank, previous, next) linked
// from least to most recent, with a `Map` from key to slot; keys are arbitrary
// strings (`__proto__` included), never object properties. Taking the least
// recent entry from the list is O(1). (Taking it from the front of a `Map`,
// as `map.keys().next()`, walks over every entry deleted since the `Map` last
// rehashed: 30 µs an eviction at 65,536 entries in V8.) The arrays grow by
// doubling up to `maxSize`, so a large bound costs nothing until it is used.

/** "No slot" in the links. */
const NONE = -1;

/** An exact LRU map from conversation key to rank. */
export class ConversationMap {
  readonly #slots = new Map<string, number>();
  readonly #maxSize: number;
  /** Entries kept: `maxSize` as a whole number, 0 if below one. */
  readonly #capacity: number;
  #keys: string[] = [];
  #ranks = new Int32Array(0);
  #prev = new Int32Array(0);
  #next = new Int32Array(0);
  /** Least recent slot. */
  #head = NONE;
  /** Most recent slot. */
  #tail = NONE;
  #evictions = 0;

  /**
   * @param maxSize Most conversations kept; the least recently recorded go first.
   * @example
   * ```ts
   * const map = new ConversationMap(2);
   * map.record("a", 0); map.record("b", 1); map.record("c", 0); // evicts "a"
   * ```
   */
  constructor(maxSize: number) {
    this.#maxSize = maxSize;
    this.#capacity = maxSize >= 1 ? Math.floor(maxSize) : 0;
  }

  /** Most conversations kept. */
  get maxSize(): number {
    return this.#maxSize;
  }

  /** Conversations currently bound. */
  get size(): number {
    return this.#slots.size;
  }

  /** Conversations evicted since creation. */
  get evictions(): number {
    return this.#evictions;
  }

  /** The rank bound to `key`, without touching its recency. */
  peek(key: string): number | undefined {
    const slot = this.#slots.get(key);
    return slot === undefined ? undefined : this.#ranks[slot];
  }

  /** Binds `key` to `rank` as the most recent entry, evicting the least recent beyond the bound. */
  record(key: string, rank: number): void {
    if (this.#capacity === 0) {
      this.#evictions++; // recorded and at once the least recent beyond the bound
      return;
    }
    let slot = this.#slots.get(key);
    if (slot !== undefined) {
      this.#unlink(slot);
    } else if (this.#slots.size >= this.#capacity) {
      // Full: the least recent entry's slot is reused for the new key.
      slot = this.#head;
      this.#unlink(slot);
      this.#slots.delete(this.#keys[slot]!);
      this.#evictions++;
    } else {
      slot = this.#slots.size;
      if (slot === this.#ranks.length) this.#grow();
    }
    this.#keys[slot] = key;
    this.#ranks[slot] = rank;
    this.#slots.set(key, slot);
    this.#append(slot);
  }

  /** Entries from least to most recent. */
  entries(): [string, number][] {
    const out: [string, number][] = [];
    for (let s = this.#head; s !== NONE; s = this.#next[s]!) out.push([this.#keys[s]!, this.#ranks[s]!]);
    return out;
  }

  /** Replaces every entry (given least recent first) without counting evictions. */
  restore(entries: readonly (readonly [string, number])[]): void {
    this.#slots.clear();
    this.#keys = [];
    this.#head = this.#tail = NONE;
    const evictions = this.#evictions;
    for (const [k, v] of entries) this.record(k, v);
    this.#evictions = evictions;
  }

  /** Doubles the slot arrays (up to the capacity). */
  #grow(): void {
    const size = Math.min(this.#capacity, Math.max(16, this.#ranks.length * 2));
    const grow = (a: Int32Array): Int32Array<ArrayBuffer> => {
      const b = new Int32Array(size);
      b.set(a);
      return b;
    };
    this.#ranks = grow(this.#ranks);
    this.#prev = grow(this.#prev);
    this.#next = grow(this.#next);
  }

  /** Takes `slot` out of the recency list. */
  #unlink(slot: number): void {
    const p = this.#prev[slot]!;
    const n = this.#next[slot]!;
    if (p === NONE) this.#head = n;
    else this.#next[p] = n;
    if (n === NONE) this.#tail = p;
    else this.#prev[n] = p;
  }

  /** Puts `slot` at the most recent end of the list. */
  #append(slot: number): void {
    this.#prev[slot] = this.#tail;
    this.#next[slot] = NONE;
    if (this.#tail === NONE) this.#head = slot;
    else this.#next[this.#tail] = slot;
    this.#tail = slot;
  }
}
