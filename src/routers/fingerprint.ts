// The KV-cache-aware router's order of the remaining requests (reference §4.3
// step 4): TensorRT-LLM's stable sort by `(fingerprint, -len(tokens))`, where
// the fingerprint is the tuple of the first 64 token ids, compared as integer
// tuples (a proper prefix first), then longer prompts first.
//
// A comparison sort pays the shared part of two fingerprints on every
// comparison: requests that share a system prompt compare all 64 tokens each
// time, about log2(n) times per request. This is a multikey quicksort
// (Bentley and Sedgewick): it partitions by one token position at a time and
// moves to the next position only within the group equal so far, so each
// token of a fingerprint is read about once however much the prompts share
// (n · 64 reads at most, plus n · log n for the partitions). Fingerprints that
// end compare below any token, so a proper prefix sorts first; equal
// fingerprints are ordered by length, longer first, then by position, which
// is what a stable sort keeps.

import type { BatchRequest } from "../batch.js";
import type { TokenIds } from "../arrays.js";

/** Tokens of the prompt fingerprint that groups similar requests (upstream: 64). */
export const FINGERPRINT_TOKENS = 64;

/** The symbol of a fingerprint that has ended: below every token id and block key. */
const END = -1;

/** Positions a packed size key holds (2^22: a request's position in a batch of up to 4M). */
const POSITIONS = 2 ** 22;
/** Above every size (prompt lengths are at most 2^31 - 1). */
const MAX_SIZE = 2 ** 31 - 1;

/** Ranges at most this long are insertion-sorted (comparing from the current position). */
const SMALL = 12;

/**
 * Orders by the first 64 token ids (a proper prefix first), then longer
 * prompts first. A request with block keys and no token ids is fingerprinted
 * by its keys. The comparator the sort below is equivalent to (with
 * stability); kept as the specification and for tests.
 */
export function byFingerprint(a: BatchRequest, b: BatchRequest): number {
  const ta = a.tokens ?? a.blockKeys;
  const tb = b.tokens ?? b.blockKeys;
  const la = Math.min(ta ? ta.length : 0, FINGERPRINT_TOKENS);
  const lb = Math.min(tb ? tb.length : 0, FINGERPRINT_TOKENS);
  const common = Math.min(la, lb);
  for (let i = 0; i < common; i++) {
    const d = ta![i]! - tb![i]!;
    if (d !== 0) return d;
  }
  if (la !== lb) return la - lb;
  return (tb ? tb.length : b.numTokens) - (ta ? ta.length : a.numTokens);
}

/**
 * The first position in [from, stop) where token ids `a` and `b` differ, else
 * `stop`: the common case, kept monomorphic, four tokens a step (a third
 * faster than one: prompts that share a system prompt agree on all 64).
 */
function agreeTokens(a: Uint32Array, b: Uint32Array, from: number, stop: number): number {
  let k = from;
  for (; k + 4 <= stop; k += 4) {
    if (a[k] !== b[k] || a[k + 1] !== b[k + 1] || a[k + 2] !== b[k + 2] || a[k + 3] !== b[k + 3]) break;
  }
  while (k < stop && a[k] === b[k]) k++;
  return k;
}

/** {@link agreeTokens} where either side is block keys. */
function agreeKeys(a: TokenIds | Float64Array, b: TokenIds | Float64Array, from: number, stop: number): number {
  let k = from;
  while (k < stop && a[k] === b[k]) k++;
  return k;
}

/**
 * Sorts batches of requests by fingerprint, reusing its scratch between
 * batches: one instance per router, no allocation per request.
 */
export class FingerprintSort {
  /** Per request (by position in the input list): its fingerprint source, or null. */
  #source: (TokenIds | Float64Array | null)[] = [];
  /** Per request: its fingerprint length (at most 64). */
  #length = new Int32Array(0);
  /** Per request: the length that orders equal fingerprints (longer first). */
  #size = new Float64Array(0);
  /** The order being built: positions in the input list. */
  #perm = new Int32Array(0);
  /** Requests in the batch being sorted. */
  #count = 0;
  /** What the touch loop read (kept so that it is not optimized away). */
  #touched = 0;
  /** Partitions a range may go through at one position (see `sort`). */
  #limit = 0;
  /** Scratch for ordering a group of equal fingerprints by packed keys. */
  #keys = new Float64Array(0);
  /** Compares positions `a` and `b` of equal fingerprints: longer first, then earlier. */
  readonly #bySize = (a: number, b: number): number => this.#size[b]! - this.#size[a]! || a - b;

  /**
   * Sorts `requests` in place, exactly as `requests.sort(byFingerprint)`
   * (a stable sort) would.
   */
  sort(requests: BatchRequest[]): void {
    const n = requests.length;
    if (n < 2) return;
    this.#count = n;
    // Grown for a huge batch, the scratch is let go once a batch needs less than a sixteenth of it (above 16 K requests' worth: 384 KiB).
    if (this.#perm.length < n || (this.#perm.length > 1 << 14 && 16 * n < this.#perm.length)) {
      const room = this.#perm.length < n ? Math.max(n, 2 * this.#perm.length) : Math.max(n, 1 << 14);
      this.#length = new Int32Array(room);
      this.#size = new Float64Array(room);
      this.#perm = new Int32Array(room);
      this.#keys = new Float64Array(room);
    }
    const source = this.#source;
    const length = this.#length;
    const size = this.#size;
    const perm = this.#perm;
    for (let q = 0; q < n; q++) {
      const req = requests[q]!;
      const s = req.tokens ?? req.blockKeys;
      source[q] = s;
      const len = s === null ? 0 : Math.min(s.length, FINGERPRINT_TOKENS);
      length[q] = len;
      size[q] = s === null ? req.numTokens : s.length;
      perm[q] = q;
    }
    // Touch each fingerprint's cache lines in a loop of independent loads
    // (the memory system fetches them all at once) before the sort reads them
    // one request at a time: a caller's prompts are rarely still in the cache.
    let touched = 0;
    for (let q = 0; q < n; q++) {
      const s = source[q]!;
      const len = length[q]!;
      for (let k = 0; k < len; k += 16) touched += s![k]!;
    }
    this.#touched = touched;
    // How many partitions at one position a range may go through before it is
    // sorted by comparison (an introsort guard: an input that defeats the
    // pivots costs n log n comparisons, not n²).
    this.#limit = 2 * Math.ceil(Math.log2(n)) + 8;
    this.#sortRange(0, n, 0, this.#limit);
    const sorted = requests.slice(0, n);
    for (let i = 0; i < n; i++) requests[i] = sorted[perm[i]!]!;
    source.fill(null, 0, n); // drop the batch's arrays
  }

  /** Symbol `d` of request `q`'s fingerprint: its token or key, END past its end. */
  #symbol(q: number, d: number): number {
    return d < this.#length[q]! ? this.#source[q]![d]! : END;
  }

  /** Compares requests `a` and `b`, equal before position `d`, as `byFingerprint` with stability. */
  #compareFrom(a: number, b: number, d: number): number {
    for (; d < FINGERPRINT_TOKENS; d++) {
      const sa = this.#symbol(a, d);
      const sb = this.#symbol(b, d);
      if (sa !== sb) return sa - sb;
      if (sa === END) break;
    }
    return this.#bySize(a, b);
  }

  /**
   * Sorts `perm[lo, hi)`, whose fingerprints are equal before position `d`,
   * with `budget` partitions left at this position (the equal group starts
   * afresh at the next). Recurses on the two smaller of the three partitions
   * (each at most half the range) and loops on the largest, so the stack stays
   * within log2(n) frames.
   */
  #sortRange(lo: number, hi: number, d: number, budget: number): void {
    const perm = this.#perm;
    while (hi - lo > 1) {
      if (hi - lo <= SMALL) {
        this.#insertionSort(lo, hi, d);
        return;
      }
      // Skip the positions where the whole range agrees, reading each prompt
      // in order (its tokens lie together in memory; a partition reads one
      // token of each). A range of equal fingerprints is ordered by length.
      const same = this.#agreeFrom(lo, hi, d);
      if (same < 0) {
        this.#sortBySize(lo, hi);
        return;
      }
      if (same > d) {
        d = same;
        budget = this.#limit;
      }
      if (budget-- <= 0) {
        perm.subarray(lo, hi).sort((a, b) => this.#compareFrom(a, b, d));
        return;
      }
      const pivot = this.#medianSymbol(perm[lo]!, perm[(lo + hi) >>> 1]!, perm[hi - 1]!, d);
      // Three-way partition on symbol d: [lo, lt) below, [lt, gt) equal, [gt, hi) above.
      let lt = lo;
      let gt = hi;
      let i = lo;
      while (i < gt) {
        const q = perm[i]!;
        const s = this.#symbol(q, d);
        if (s < pivot) {
          perm[i++] = perm[lt]!;
          perm[lt++] = q;
        } else if (s > pivot) {
          perm[i] = perm[--gt]!;
          perm[gt] = q;
        } else {
          i++;
        }
      }
      // The equal group goes on at d + 1, or, when its fingerprints all ended
      // here, is ordered by length; the other two stay at d.
      const below = lt - lo;
      const equal = gt - lt;
      const above = hi - gt;
      if (pivot === END) {
        if (equal > 1) this.#sortBySize(lt, gt);
        if (below >= above) {
          this.#sortRange(gt, hi, d, budget);
          hi = lt;
        } else {
          this.#sortRange(lo, lt, d, budget);
          lo = gt;
        }
      } else if (equal >= below && equal >= above) {
        this.#sortRange(lo, lt, d, budget);
        this.#sortRange(gt, hi, d, budget);
        lo = lt;
        hi = gt;
        d++;
        budget = this.#limit;
      } else if (below >= above) {
        this.#sortRange(lt, gt, d + 1, this.#limit);
        this.#sortRange(gt, hi, d, budget);
        hi = lt;
      } else {
        this.#sortRange(lo, lt, d, budget);
        this.#sortRange(lt, gt, d + 1, this.#limit);
        lo = gt;
      }
    }
  }

  /**
   * The first position from `d` on where the fingerprints of `perm[lo, hi)`
   * differ, or -1 when they are all equal (same tokens, same length). Each is
   * compared with the first, only as far as all before it agreed.
   */
  #agreeFrom(lo: number, hi: number, d: number): number {
    const perm = this.#perm;
    const length = this.#length;
    const first = perm[lo]!;
    const head = this.#source[first]!;
    const headLength = length[first]!;
    let end = headLength; // positions [d, end) agree so far
    let equalLengths = true;
    for (let i = lo + 1; i < hi; i++) {
      const q = perm[i]!;
      const n = length[q]!;
      if (n !== headLength) equalLengths = false;
      const stop = n < end ? n : end;
      let k = d;
      if (k < stop) {
        const s = this.#source[q]!;
        k = s instanceof Uint32Array && head instanceof Uint32Array ? agreeTokens(s, head, d, stop) : agreeKeys(s, head, d, stop);
      }
      end = k;
      if (end === d && !equalLengths) return d; // nothing to skip
    }
    return end === headLength && equalLengths ? -1 : end;
  }

  /**
   * Orders `perm[lo, hi)`, whose fingerprints are all equal, longer first,
   * then by position. Each becomes one double, (2^31 - 1 - size) · 2^22 +
   * position, exact below 2^53, sorted without a comparator call per pair;
   * batches past 2^22 requests use the comparator.
   */
  #sortBySize(lo: number, hi: number): void {
    const perm = this.#perm;
    if (hi - lo <= SMALL || this.#count > POSITIONS) {
      this.#insertionOrComparator(lo, hi);
      return;
    }
    const keys = this.#keys;
    const size = this.#size;
    for (let i = lo; i < hi; i++) {
      const q = perm[i]!;
      keys[i] = (MAX_SIZE - size[q]!) * POSITIONS + q;
    }
    keys.subarray(lo, hi).sort();
    for (let i = lo; i < hi; i++) {
      const key = keys[i]!;
      perm[i] = key - Math.floor(key / POSITIONS) * POSITIONS;
    }
  }

  /** {@link #sortBySize} by comparisons: insertion for a few, else the comparator. */
  #insertionOrComparator(lo: number, hi: number): void {
    const perm = this.#perm;
    if (hi - lo > SMALL) {
      perm.subarray(lo, hi).sort(this.#bySize);
      return;
    }
    for (let i = lo + 1; i < hi; i++) {
      const q = perm[i]!;
      let j = i;
      while (j > lo && this.#bySize(perm[j - 1]!, q) > 0) {
        perm[j] = perm[j - 1]!;
        j--;
      }
      perm[j] = q;
    }
  }

  /** The median of the three requests' symbols at `d`. */
  #medianSymbol(a: number, b: number, c: number, d: number): number {
    const x = this.#symbol(a, d);
    const y = this.#symbol(b, d);
    const z = this.#symbol(c, d);
    if (x < y) return y < z ? y : x < z ? z : x;
    return x < z ? x : y < z ? z : y;
  }

  /** Insertion-sorts `perm[lo, hi)`, equal before position `d`. */
  #insertionSort(lo: number, hi: number, d: number): void {
    const perm = this.#perm;
    for (let i = lo + 1; i < hi; i++) {
      const q = perm[i]!;
      let j = i;
      while (j > lo && this.#compareFrom(perm[j - 1]!, q, d) > 0) {
        perm[j] = perm[j - 1]!;
        j--;
      }
      perm[j] = q;
    }
  }
}
