// The numeric ABI of the wasm core, wrapped: one scratch arena in the module's
// own memory, typed views over it, one export call per batch.
//
// A batch reserves all its regions at once (`reserve`), the shell writes inputs
// through the views, the export runs, and the shell reads results through the
// same views. Views are re-created whenever the arena moves or `memory.grow`
// detaches the old buffer; pointers come back as i32 and are read `>>> 0`.

import { AdpInputError } from "./errors.js";
import { instantiateCore, type CoreExports } from "./wasm.js";

/** Most scratch bytes one batch may take (the core refuses allocations above 1 GiB). */
export const MAX_SCRATCH_BYTES = 2 ** 30 - 64;

/** Byte offset of each region of a KV-cache-aware batch inside the arena (its match rows live in their own block). */
interface KvLayout {
  counts: number;
  tokens: number;
  requests: number;
  out: number;
  work: number;
  end: number;
}

/** `n` rounded up to a multiple of 8. */
const align8 = (n: number): number => Math.ceil(n / 8) * 8; // not `& ~7`: sizes past 2^31 must not wrap

/** Views over one KV-cache-aware batch's regions; valid until the next reserve. */
export interface KvBatchViews {
  /** Active requests per rank. */
  readonly counts: Int32Array;
  /** Active tokens per rank. */
  readonly tokens: Float64Array;
  /** Per request, in processing order: [promptTokens, idLo, idHi, matchRow]. */
  readonly requests: Uint32Array;
  /** Matched prefix tokens, row-major: row · numRanks + rank; row 0 is all zeros. */
  readonly matches: Uint32Array;
  /** Chosen rank per request, or -1. */
  readonly out: Int32Array;
}

/**
 * One wasm instance, its scratch arena and its match block. The match block
 * holds a KV-cache-aware batch's rows of matched tokens (row 0 all zeros, then
 * a row per request that has matches): validation reads a caller's
 * `prefixMatches` straight into it (see `matchRows`), so they are read once
 * and copied nowhere else.
 */
export class RoutingCore {
  readonly #ex: CoreExports;
  #arena = 0;
  #arenaBytes = 0;
  #rowsAt = 0;
  #rowsBytes = 0;
  #kv: KvLayout | undefined;
  #kvNumRanks = 0;
  #kvNumRequests = 0;
  #kvRows = 0;
  #kvViews: KvBatchViews | undefined;
  #kvViewsBuffer: ArrayBuffer | undefined;

  constructor(exports: CoreExports = instantiateCore()) {
    this.#ex = exports;
  }

  /** The raw exports, for the prefix index that shares this instance's memory. */
  get exports(): CoreExports {
    return this.#ex;
  }

  /**
   * Ensures the arena holds `bytes` bytes and returns its address. Sizes are
   * computed as doubles and checked here, before the core sees them, so none
   * can wrap at 2^32; the old arena is released only once the new one exists.
   * @throws AdpInputError naming `requests` when a batch needs more than MAX_SCRATCH_BYTES.
   */
  #reserve(bytes: number): number {
    if (bytes > this.#arenaBytes) {
      const { at, size } = this.#take(bytes, this.#arenaBytes, "routing scratch");
      if (this.#arena !== 0) this.#ex.release(this.#arena);
      this.#arena = at;
      this.#arenaBytes = size;
    }
    return this.#arena;
  }

  /**
   * A new block for `bytes` bytes (doubling `have`, at least 4 KiB), checked
   * as a double first so no size can wrap at 2^32.
   * @throws AdpInputError naming `requests` past MAX_SCRATCH_BYTES, or when memory cannot grow.
   */
  #take(bytes: number, have: number, what: string): { at: number; size: number } {
    if (!(bytes <= MAX_SCRATCH_BYTES)) {
      throw new AdpInputError("requests", `need ${bytes} bytes of ${what} (requests × ranks); at most ${MAX_SCRATCH_BYTES}: split the batch`, bytes);
    }
    const size = Math.min(Math.max(bytes, have * 2, 4096), MAX_SCRATCH_BYTES);
    const at = this.#ex.allocate(size) >>> 0;
    if (at === 0) throw new AdpInputError("requests", `need ${size} bytes of ${what}, more than this platform's wasm memory can grow to: split the batch`, bytes);
    return { at, size };
  }

  /**
   * Ensures the match block holds `rows` rows of `numRanks` u32 (row 0
   * included), keeping the rows already written, and returns its address.
   * @throws AdpInputError naming `requests` when the rows need more than MAX_SCRATCH_BYTES.
   */
  #reserveRows(numRanks: number, rows: number): number {
    const bytes = rows * numRanks * 4;
    if (bytes > this.#rowsBytes) {
      const { at, size } = this.#take(bytes, this.#rowsBytes, "match rows");
      if (this.#rowsAt !== 0) {
        new Uint8Array(this.#ex.memory.buffer).copyWithin(at, this.#rowsAt, this.#rowsAt + this.#rowsBytes);
        this.#ex.release(this.#rowsAt);
      }
      this.#rowsAt = at;
      this.#rowsBytes = size;
    }
    return this.#rowsAt;
  }

  /**
   * The match block past row 0, holding at least `rows` rows of `numRanks`:
   * where a batch's caller `prefixMatches` are read to, row k at k · numRanks
   * (the block's row k + 1). The rows written since the batch began are kept
   * when it grows. The view is valid until the next call, or until the
   * memory grows (then it is detached: its length reads 0).
   */
  matchRows(numRanks: number, rows: number): Uint32Array {
    const at = this.#reserveRows(numRanks, rows + 1);
    return new Uint32Array(this.#ex.memory.buffer, at + numRanks * 4, this.#rowsBytes / 4 - numRanks);
  }

  /**
   * Places requests with the default router's min-heap balance (reference §3.3
   * step 7). `sizes` are prompt tokens in processing order; returns the chosen
   * rank per request (-1 where no rank had room). `counts` and `tokens` are
   * updated in place.
   */
  balanceDefault(counts: number[], tokens: number[], sizes: readonly number[], cap: number): number[] {
    const numRanks = counts.length;
    const numRequests = sizes.length;
    const oCounts = 0;
    const oTokens = align8(numRanks * 4);
    const oSizes = oTokens + numRanks * 8;
    const oOut = align8(oSizes + numRequests * 4);
    const oHeap = align8(oOut + numRequests * 4);
    const base = this.#reserve(oHeap + numRanks * 4);
    const buffer = this.#ex.memory.buffer;
    const vCounts = new Int32Array(buffer, base + oCounts, numRanks);
    const vTokens = new Float64Array(buffer, base + oTokens, numRanks);
    const vOut = new Int32Array(buffer, base + oOut, numRequests);
    vCounts.set(counts);
    vTokens.set(tokens);
    new Uint32Array(buffer, base + oSizes, numRequests).set(sizes);
    this.#ex.balanceDefault(numRanks, base + oCounts, base + oTokens, numRequests, base + oSizes, base + oOut, cap, base + oHeap);
    for (let r = 0; r < numRanks; r++) {
      counts[r] = vCounts[r]!;
      tokens[r] = vTokens[r]!;
    }
    const out = new Array<number>(numRequests);
    for (let i = 0; i < numRequests; i++) out[i] = vOut[i]!;
    return out;
  }

  /**
   * Reserves a KV-cache-aware batch of `numRequests` requests over `numRanks`
   * ranks with `rows` match rows and returns views over it. Row 0 is zeroed;
   * rows written through `matchRows` since are kept, the others hold whatever
   * the block held until the caller writes them (it writes every row it
   * assigns to a request). Nothing may allocate in this instance until
   * `scoreKvAware` runs.
   */
  reserveKvBatch(numRanks: number, numRequests: number, rows: number): KvBatchViews {
    const l: KvLayout = { counts: 0, tokens: 0, requests: 0, out: 0, work: 0, end: 0 };
    l.tokens = align8(numRanks * 4);
    l.requests = l.tokens + numRanks * 8;
    l.out = l.requests + numRequests * 16;
    l.work = align8(l.out + numRequests * 4);
    l.end = l.work + this.#ex.kvWorkBytes(numRanks);
    this.#reserveRows(numRanks, rows);
    this.#reserve(l.end);
    this.#kv = l;
    this.#kvNumRanks = numRanks;
    this.#kvNumRequests = numRequests;
    this.#kvRows = rows;
    this.#kvViews = undefined;
    const views = this.kvViews();
    views.matches.fill(0, 0, numRanks);
    return views;
  }

  /** The current KV batch's views, re-created when the batch or the live buffer changed. */
  kvViews(): KvBatchViews {
    const b = this.#ex.memory.buffer;
    if (this.#kvViews !== undefined && this.#kvViewsBuffer === b) return this.#kvViews;
    const l = this.#kv!;
    const base = this.#arena;
    this.#kvViewsBuffer = b;
    const numRanks = this.#kvNumRanks;
    const numRequests = this.#kvNumRequests;
    return (this.#kvViews = {
      counts: new Int32Array(b, base + l.counts, numRanks),
      tokens: new Float64Array(b, base + l.tokens, numRanks),
      requests: new Uint32Array(b, base + l.requests, numRequests * 4),
      matches: new Uint32Array(b, this.#rowsAt, this.#kvRows * numRanks),
      out: new Int32Array(b, base + l.out, numRequests),
    });
  }

  /**
   * Scores request `q` of the reserved batch alone and returns what it saw:
   * the tie count, whether the match gate was open, the denominator of the load
   * term and the score of each eligible rank (ascending rank order).
   */
  scoreKvAwareOne(q: number, eligible: number, cap: number, beta: number, threshold: number): { ties: number; affinity: boolean; denom: number; scores: number[] } {
    const l = this.#kv!;
    const base = this.#arena;
    const ex = this.#ex;
    ex.scoreKvAware(this.#kvNumRanks, base + l.counts, base + l.tokens, 1, base + l.requests + 16 * q, this.#rowsAt, base + l.out + 4 * q, cap, beta, threshold, base + l.work);
    const trailer = ex.kvTrailer(this.#kvNumRanks, base + l.work) >>> 0;
    const view = new DataView(ex.memory.buffer);
    const scoresAt = base + l.work + this.#kvNumRanks * 4;
    const scores = Array.from({ length: eligible }, (_, k) => view.getFloat64(scoresAt + 8 * k, true));
    return { ties: view.getInt32(trailer, true), affinity: view.getInt32(trailer + 4, true) === 1, denom: view.getFloat64(trailer + 8, true), scores };
  }

  /**
   * Runs the KV-cache-aware scoring loop over the reserved batch (reference
   * §4.3 step 6) and returns how many requests were placed.
   */
  scoreKvAware(numRequests: number, cap: number, beta: number, threshold: number): number {
    const l = this.#kv!;
    const base = this.#arena;
    return this.#ex.scoreKvAware(
      this.#kvNumRanks, base + l.counts, base + l.tokens,
      numRequests, base + l.requests, this.#rowsAt, base + l.out,
      cap, beta, threshold, base + l.work,
    );
  }
}
