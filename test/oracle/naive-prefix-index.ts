// The prefix-index contract as a deliberately naive model: each rank's view is
// a Map from "namespace | block path" to its stamp. Slow and obviously right;
// the oracle of the property tests.

export interface NaiveNamespace {
  loraTaskId?: number | null;
  cacheSalt?: string | null;
}

const nsKey = (ns?: NaiveNamespace | null) => JSON.stringify([ns?.loraTaskId ?? null, ns?.cacheSalt ?? null]);

export class NaivePrefixIndex {
  readonly views: Map<string, number>[];
  #stamp = 0;

  constructor(
    readonly numRanks: number,
    readonly tokensPerBlock: number,
    readonly capacity?: number,
  ) {
    this.views = Array.from({ length: numRanks }, () => new Map());
  }

  #paths(tokens: readonly number[], ns?: NaiveNamespace | null): string[] {
    const out: string[] = [];
    for (let k = 1; k * this.tokensPerBlock <= tokens.length; k++) out.push(`${nsKey(ns)}|${tokens.slice(0, k * this.tokensPerBlock).join(",")}`);
    return out;
  }

  insert(rank: number, tokens: readonly number[], ns?: NaiveNamespace | null): void {
    const stamp = ++this.#stamp;
    const view = this.views[rank]!;
    for (const p of this.#paths(tokens, ns)) view.set(p, stamp);
    if (this.capacity === undefined) return;
    while (view.size > this.capacity) {
      let victim: string | null = null;
      let oldest = Infinity;
      for (const [p, s] of view) {
        const isLeaf = ![...view.keys()].some((q) => q.length > p.length && q.startsWith(p + ",") && q.slice(p.length + 1).split(",").length === this.tokensPerBlock);
        if (isLeaf && s < oldest) {
          oldest = s;
          victim = p;
        }
      }
      view.delete(victim!);
    }
  }

  match(tokens: readonly number[], ns?: NaiveNamespace | null): number[] {
    const paths = this.#paths(tokens, ns);
    return this.views.map((view) => {
      let k = 0;
      while (k < paths.length && view.has(paths[k]!)) k++;
      return k * this.tokensPerBlock;
    });
  }

  /** Removes `path` (given as its tokens) and every longer path extending it from `rank`'s view. */
  removeSubtree(rank: number, tokens: readonly number[], ns?: NaiveNamespace | null): void {
    const p = `${nsKey(ns)}|${tokens.join(",")}`;
    for (const q of [...this.views[rank]!.keys()]) if (q === p || q.startsWith(p + ",")) this.views[rank]!.delete(q);
  }

  clearRank(rank: number): void {
    this.views[rank]!.clear();
  }

  blockCount(rank: number): number {
    return this.views[rank]!.size;
  }
}
