// The conversation→rank map of conversation-affinity routing: an exact LRU
// bounded by `kv_cache_routing_max_sessions`. A JavaScript `Map` iterates in
// insertion order, so re-inserting on touch keeps the least recent entry first;
// keys are arbitrary strings (`__proto__` included), never object properties.

/** An exact LRU map from conversation key to rank. */
export class ConversationMap {
  readonly #entries = new Map<string, number>();
  readonly #maxSize: number;
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
  }

  /** Most conversations kept. */
  get maxSize(): number {
    return this.#maxSize;
  }

  /** Conversations currently bound. */
  get size(): number {
    return this.#entries.size;
  }

  /** Conversations evicted since creation. */
  get evictions(): number {
    return this.#evictions;
  }

  /** The rank bound to `key`, without touching its recency. */
  peek(key: string): number | undefined {
    return this.#entries.get(key);
  }

  /** Binds `key` to `rank` as the most recent entry, evicting the least recent beyond the bound. */
  record(key: string, rank: number): void {
    this.#entries.delete(key);
    this.#entries.set(key, rank);
    while (this.#entries.size > this.#maxSize) {
      this.#entries.delete(this.#entries.keys().next().value as string);
      this.#evictions++;
    }
  }

  /** Entries from least to most recent. */
  entries(): [string, number][] {
    return [...this.#entries];
  }

  /** Replaces every entry (given least recent first) without counting evictions. */
  restore(entries: readonly (readonly [string, number])[]): void {
    this.#entries.clear();
    for (const [k, v] of entries) this.#entries.set(k, v);
  }
}
