// A competent plain-TypeScript multi-rank prefix index, the benchmark baseline
// (and checked against the naive model): chained two-lane block hashes folded
// into 53-bit Map keys, one entry per distinct block path, a rank bitset per
// entry, one walk of the prompt for all ranks. No eviction.

interface Entry {
  /** Bit r set when rank r holds this path. */
  readonly ranks: Uint32Array;
}

const NO_NS = 0x12345;

/** Plain-TS index with the same insert/match contract as createPrefixIndex (without capacity). */
export class PlainPrefixIndex {
  readonly #entries = new Map<number, Entry>();
  readonly #words: number;
  readonly #out: Uint32Array;

  constructor(
    readonly numRanks: number,
    readonly tokensPerBlock: number,
  ) {
    this.#words = Math.ceil(numRanks / 32);
    this.#out = new Uint32Array(numRanks);
  }

  /** Number of distinct block paths. */
  get size(): number {
    return this.#entries.size;
  }

  /** Chained key of the block starting at `at`, from the parent's two lanes. */
  static #chain(tokens: ArrayLike<number>, at: number, n: number, a: number, b: number): [number, number] {
    for (let i = at; i < at + n; i++) {
      const t = tokens[i]!;
      a = Math.imul(a ^ t, 0x9e3779b1);
      a ^= a >>> 15;
      b = Math.imul(b ^ t, 0x85ebca77);
      b ^= b >>> 13;
    }
    a = Math.imul(a ^ (a >>> 16), 0x7feb352d);
    b = Math.imul(b ^ (b >>> 16), 0x846ca68b);
    return [(a ^ (a >>> 15)) >>> 0, (b ^ (b >>> 16)) >>> 0];
  }

  insert(rank: number, tokens: ArrayLike<number>): void {
    let a = NO_NS;
    let b = ~NO_NS;
    const blocks = Math.floor(tokens.length / this.tokensPerBlock);
    for (let k = 0; k < blocks; k++) {
      [a, b] = PlainPrefixIndex.#chain(tokens, k * this.tokensPerBlock, this.tokensPerBlock, a, b);
      const key = a * 2097152 + (b & 0x1fffff);
      let e = this.#entries.get(key);
      if (e === undefined) {
        e = { ranks: new Uint32Array(this.#words) };
        this.#entries.set(key, e);
      }
      e.ranks[rank >>> 5]! |= 1 << (rank & 31);
    }
  }

  /** Matched tokens per rank (a view reused by the next call). */
  match(tokens: ArrayLike<number>): Uint32Array {
    const out = this.#out;
    out.fill(0);
    const words = this.#words;
    let prev: Uint32Array | null = null;
    let a = NO_NS;
    let b = ~NO_NS;
    const blocks = Math.floor(tokens.length / this.tokensPerBlock);
    let depth = 0;
    for (let k = 0; k < blocks; k++) {
      [a, b] = PlainPrefixIndex.#chain(tokens, k * this.tokensPerBlock, this.tokensPerBlock, a, b);
      const e = this.#entries.get(a * 2097152 + (b & 0x1fffff));
      const cur = e?.ranks;
      if (prev !== null) {
        // Ranks in prev but not in cur stop at depth k.
        for (let w = 0; w < words; w++) {
          let dropped = prev[w]! & ~(cur ? cur[w]! : 0);
          while (dropped !== 0) {
            const bit = 31 - Math.clz32(dropped & -dropped);
            out[w * 32 + bit] = k * this.tokensPerBlock;
            dropped &= dropped - 1;
          }
        }
      }
      if (cur === undefined || cur.every((x) => x === 0)) return out;
      prev = cur;
      depth = k + 1;
    }
    if (prev !== null) {
      for (let w = 0; w < words; w++) {
        let bits = prev[w]!;
        while (bits !== 0) {
          const bit = 31 - Math.clz32(bits & -bits);
          out[w * 32 + bit] = depth * this.tokensPerBlock;
          bits &= bits - 1;
        }
      }
    }
    return out;
  }
}
