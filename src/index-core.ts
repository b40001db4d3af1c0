// The prefix index's wasm boundary: one instance of the core, one scratch
// region of fixed size allocated with the index and counted in its budget, and
// the loops that feed it a prompt, an event or a snapshot in pieces that fit.
//
// Every size that crosses into wasm is known here before the call: a piece
// never holds more than the scratch was sized for, so nothing the caller
// passes (a million-token prompt, an event of 100,000 blocks, a snapshot of
// any size) can make the core allocate or write beyond its budget.
//
// Scratch layout (bytes from its start):
//   0             per-rank result, u32 × numRanks
//   tokensAt      a piece of token ids, u32 × pieceTokens (pieceBlocks whole blocks)
//   hashesAt      a piece's block hashes or keys, u64 × pieceBlocks
//   keysAt        a piece's path keys out, u64 × pieceBlocks
// From tokensAt on, the same bytes carry snapshot records in pieces (at
// least one record of every rank: 24 + 8 × numRanks bytes).

import { keyWordsInto, type TokenIds } from "./arrays.js";
import { AdpInputError, AdpMemoryError } from "./errors.js";
import { instantiateCore, isTrap, trapError, type CoreExports } from "./wasm.js";

/** Most bytes a scratch takes beyond its per-rank result (a piece of 16,384 tokens of 32-token blocks fits). */
const PIECE_BYTES = 1 << 17;
/** Blocks of byte ids a match hashes at a time (see matchTokens). */
const BYTE_PIECE_BLOCKS = 64;
/** The core's `allocate` header, part of what a scratch takes. */
const ALLOC_HEADER = 16;

/** `n` rounded up to a multiple of 8. */
const align8 = (n: number): number => Math.ceil(n / 8) * 8;
/** The power of two at least `n` (the core's block sizes). */
const pow2 = (n: number): number => 2 ** Math.ceil(Math.log2(Math.max(n, 16)));

/** Where the regions of a scratch lie and how much a piece holds. */
export interface ScratchLayout {
  readonly pieceBlocks: number;
  readonly pieceTokens: number;
  readonly tokensAt: number;
  readonly hashesAt: number;
  readonly keysAt: number;
  /** Bytes from `tokensAt` on (a snapshot piece). */
  readonly dataBytes: number;
  /** Bytes the scratch takes from the core's memory (its allocation block). */
  readonly takes: number;
}

/**
 * The scratch layout for `numRanks` ranks, blocks of `tokensPerBlock` tokens
 * and a budget of `budget` bytes: at least one block and one snapshot record
 * of every rank, at most PIECE_BYTES of pieces or a sixteenth of the budget,
 * filling the power-of-two block the core allocates for it.
 */
export function scratchLayout(numRanks: number, tokensPerBlock: number, budget: number): ScratchLayout {
  const tokensAt = align8(numRanks * 4);
  const perBlock = align8(tokensPerBlock * 4) + 16; // its tokens, its hash, its path key
  const least = tokensAt + Math.max(perBlock, 24 + 8 * numRanks) + ALLOC_HEADER;
  const takes = pow2(Math.max(least, Math.min(tokensAt + PIECE_BYTES, budget / 16)));
  const pieceBlocks = Math.max(1, Math.floor((takes - ALLOC_HEADER - tokensAt) / perBlock));
  const pieceTokens = pieceBlocks * tokensPerBlock;
  const hashesAt = tokensAt + align8(pieceTokens * 4);
  const keysAt = hashesAt + pieceBlocks * 8;
  const dataBytes = takes - ALLOC_HEADER - tokensAt;
  return { pieceBlocks, pieceTokens, tokensAt, hashesAt, keysAt, dataBytes, takes };
}

/** The import result for memory that could not grow (assembly/prefix-index/snapshot.ts). */
const OUT_OF_MEMORY = -12;

/** Why the core refused a snapshot's index records (its negative import results; OUT_OF_MEMORY is AdpMemoryError). */
const IMPORT_ERRORS: Record<number, string> = {
  [-1]: "its stamp counter is out of range",
  [-2]: "a node holds no residency or more than one per rank",
  [-3]: "a node's parent flag is neither 0 nor 1",
  [-4]: "a block path appears twice",
  [-5]: "a node names a parent that does not precede it",
  [-6]: "a residency names a rank out of range",
  [-7]: "a stamp is 0 or beyond the stamp counter",
  [-8]: "a node holds one rank twice",
  [-9]: "a rank holds a block without its parent (views must be prefix-closed)",
  [-10]: "it holds more than the index's memory budget",
  [-11]: "a rank holds more blocks than its capacity",
};

/**
 * Two random words for an index's table salt: its key table's homes are then
 * unknown outside the process, so crafted prompts cannot crowd its buckets
 * (keys follow from token ids anyone can send). The salt changes where
 * entries sit, never what a lookup finds: no decision, snapshot or figure
 * depends on it.
 */
function randomSalt(): readonly [number, number] {
  const words = globalThis.crypto.getRandomValues(new Uint32Array(2));
  return [words[0]!, words[1]!];
}

/** Where new indexes take their salt (see setTableSaltForTests). */
let saltSource: () => readonly [number, number] = randomSalt;

/**
 * Makes every index created after it salt its table with `salt` (tests that
 * craft blocks crowding one bucket need the homes known), or with random words
 * again when `salt` is null. Not part of the public API.
 */
export function setTableSaltForTests(salt: readonly [number, number] | null): void {
  saltSource = salt === null ? randomSalt : () => salt;
}

/** Pages new cores may grow to (see setPageLimitForTests), or null: the core's own limit. */
let pageLimit: number | null = null;

/**
 * Caps the wasm memory of every index created after it at `pages` 64 KiB
 * pages (null: no cap), as a host that refuses to grow memory would: how
 * tests reach the out-of-memory paths. Not part of the public API.
 */
export function setPageLimitForTests(pages: number | null): void {
  pageLimit = pages;
}

/** Whether new cores enter every node into their table from the start (see setKeyAllForTests). */
let keyAllNodes = false;

/**
 * Makes every index created after it keep every node in its key table, as
 * one does once a caller names a node by key (`on`), or not (the default):
 * a twin that tests compare the keyless table against. Not part of the public API.
 */
export function setKeyAllForTests(on: boolean): void {
  keyAllNodes = on;
}

/** A wasm instance of the core with its fixed scratch. */
export class IndexCore {
  readonly ex: CoreExports;
  readonly #numRanks: number;
  readonly #tpb: number;
  readonly #layout: ScratchLayout;
  /** Address of the scratch. */
  readonly #at: number;
  /** A u32 view of the whole linear memory, re-created when memory grows. */
  #memory: Uint32Array | null = null;
  /** A byte view of the whole linear memory, re-created when memory grows. */
  #memoryBytes: Uint8Array | null = null;
  /** A view of the per-rank result, re-created when memory grows. */
  #result: Uint32Array | null = null;

  /**
   * @param budget bytes the index may take in all, scratch included.
   * @throws AdpInputError when the budget cannot hold the scratch and one block;
   *   AdpMemoryError when memory cannot grow to hold them.
   */
  constructor(numRanks: number, tokensPerBlock: number, capacity: number, budget: number, budgetField: string) {
    const layout = scratchLayout(numRanks, tokensPerBlock, budget);
    const ex = instantiateCore();
    if (pageLimit !== null) ex.setPageLimit(pageLimit);
    const at = ex.allocate(layout.takes - ALLOC_HEADER) >>> 0;
    const [saltLo, saltHi] = saltSource();
    if (at === 0) throw new AdpMemoryError(null); // the scratch: memory cannot grow that far
    let init: number;
    try {
      init = ex.indexInit(numRanks, tokensPerBlock, capacity, budget - layout.takes, saltLo, saltHi);
      if (keyAllNodes && init === 0) ex.indexKeyAll();
    } catch (error) {
      throw isTrap(error) ? trapError(ex, error) : error; // this instance is dropped
    }
    if (init !== 0) {
      throw new AdpInputError(budgetField, `must hold at least one block and the index's ${layout.takes}-byte scratch (${layout.takes + numRanks * 32 + 1080} bytes for ${numRanks} ranks)`, budget);
    }
    this.ex = ex;
    this.#numRanks = numRanks;
    this.#tpb = tokensPerBlock;
    this.#layout = layout;
    this.#at = at;
  }

  /** Bytes the scratch takes (counted in the budget, outside `indexBytes`). */
  get scratchBytes(): number {
    return this.#layout.takes;
  }

  /** The u32 view of linear memory, current after any growth (growth detaches the old buffer, emptying its views). */
  #u32(): Uint32Array {
    if (this.#memory === null || this.#memory.length === 0) this.#memory = new Uint32Array(this.ex.memory.buffer);
    return this.#memory;
  }

  /** The byte view of linear memory, current after any growth. */
  #u8(): Uint8Array {
    if (this.#memoryBytes === null || this.#memoryBytes.length === 0) this.#memoryBytes = new Uint8Array(this.ex.memory.buffer);
    return this.#memoryBytes;
  }

  /** The per-rank result of the last match, as a view into the scratch (valid until the next call). */
  result(): Uint32Array {
    if (this.#result === null || this.#result.length === 0) this.#result = new Uint32Array(this.ex.memory.buffer, this.#at, this.#numRanks);
    return this.#result;
  }

  /**
   * The last match's result as a plain array, copied element by element
   * (`Array.from` on a typed array goes through its iterator: a third of a
   * 2,000-token match at 72 ranks).
   */
  resultArray(): number[] {
    const result = this.result();
    const out = new Array<number>(result.length);
    for (let r = 0; r < result.length; r++) out[r] = result[r]!;
    return out;
  }

  /** Copies tokens[from, from + n) into the scratch's token piece as u32 ids (byte ids widened as they are copied). */
  #putTokens(tokens: TokenIds, from: number, n: number): void {
    const at = (this.#at + this.#layout.tokensAt) >>> 2;
    if (from === 0 && n === tokens.length) this.#u32().set(tokens, at);
    else this.#u32().set(tokens.subarray(from, from + n), at);
  }

  /**
   * Hashes the full blocks of tokens[from, from + n) into the scratch's hash
   * piece; returns their count. Byte ids are copied as bytes and hashed as the
   * ids they are (hashByteBlocks: the same hashes): widening them into the
   * scratch first cost as much as hashing them (bench:peers' trace, ~55 KB a
   * prompt: 12 µs each).
   */
  #hashPiece(tokens: TokenIds, from: number, n: number): number {
    const { tokensAt, hashesAt } = this.#layout;
    if (tokens.BYTES_PER_ELEMENT === 4) {
      this.#putTokens(tokens, from, n);
      return this.ex.hashBlocks(this.#at + tokensAt, n, this.#at + hashesAt);
    }
    this.#u8().set(from === 0 && n === tokens.length ? tokens : tokens.subarray(from, from + n), this.#at + tokensAt);
    return this.ex.hashByteBlocks(this.#at + tokensAt, n, this.#at + hashesAt);
  }

  /** Copies keys[from, from + n) as u64 words into the scratch's hash piece and hashes them there. */
  #putKeys(keys: Float64Array | Uint32Array, from: number, n: number): void {
    const words = this.#u32().subarray((this.#at + this.#layout.hashesAt) >>> 2, ((this.#at + this.#layout.hashesAt) >>> 2) + 2 * n);
    keyWordsInto(words, keys, from, n);
    this.ex.hashBlockKeys(this.#at + this.#layout.hashesAt, n);
  }

  /** Matches the first `length` tokens; the per-rank result is then in `result()`. */
  matchTokens(tokens: TokenIds, length: number, seed: readonly [number, number]): void {
    const ex = this.ex;
    const { pieceTokens, tokensAt } = this.#layout;
    const usable = length - (length % this.#tpb);
    const bytes = tokens.BYTES_PER_ELEMENT === 1;
    if (tokens.length <= pieceTokens && !bytes) {
      this.#putTokens(tokens, 0, tokens.length);
      ex.indexMatchTokens(seed[0], seed[1], this.#at + tokensAt, usable, this.#at);
      return;
    }
    ex.indexMatchBegin(seed[0], seed[1]);
    // u32 ids are hashed by the walk as it goes (nothing past the first unknown block); byte ids are
    // hashed before it, BYTE_PIECE_BLOCKS blocks a piece, so a walk that ends early hashes little more.
    const piece = bytes ? Math.min(pieceTokens, BYTE_PIECE_BLOCKS * this.#tpb) : pieceTokens;
    for (let from = 0; from < usable; from += piece) {
      const n = Math.min(piece, usable - from);
      if (bytes) {
        if (ex.indexMatchFeed(0, this.#at + this.#layout.hashesAt, this.#hashPiece(tokens, from, n)) === 0) break;
      } else {
        this.#putTokens(tokens, from, n);
        if (ex.indexMatchFeed(this.#at + tokensAt, 0, n) === 0) break;
      }
    }
    ex.indexMatchEnd(this.#at);
  }

  /** Matches the first `count` block keys (safe integers, or u64 words); the result is then in `result()`. */
  matchKeys(keys: Float64Array | Uint32Array, count: number, seed: readonly [number, number]): void {
    this.#matchPieces(count, seed, (from, n) => this.#putKeys(keys, from, n));
  }

  /** Matches the first `count` blocks given by their hashes (from blockHashes): matchTokens without hashing again. */
  matchHashes(words: Uint32Array, count: number, seed: readonly [number, number]): void {
    this.#matchPieces(count, seed, (from, n) => this.#putHashes(words, from, n));
  }

  /** Matches `count` blocks piece by piece, `put(from, n)` writing each piece's block hashes into the scratch. */
  #matchPieces(count: number, seed: readonly [number, number], put: (from: number, n: number) => void): void {
    const ex = this.ex;
    const { pieceBlocks, hashesAt } = this.#layout;
    ex.indexMatchBegin(seed[0], seed[1]);
    for (let from = 0; from < count; from += pieceBlocks) {
      const n = Math.min(pieceBlocks, count - from);
      put(from, n);
      if (ex.indexMatchFeed(0, this.#at + hashesAt, n) === 0) break;
    }
    ex.indexMatchEnd(this.#at);
  }

  /** Copies the hashes of blocks [from, from + n) of `words` into the scratch's hash piece. */
  #putHashes(words: Uint32Array, from: number, n: number): void {
    this.#u32().set(words.subarray(2 * from, 2 * (from + n)), (this.#at + this.#layout.hashesAt) >>> 2);
  }

  /** Inserts the full blocks of the first `length` tokens into `rank`'s view; returns the tokens of them it held before. */
  insertTokens(rank: number, tokens: TokenIds, length: number, seed: readonly [number, number]): number {
    const ex = this.ex;
    const { pieceTokens, hashesAt } = this.#layout;
    const blocks = Math.floor(length / this.#tpb);
    if (blocks === 0) return 0;
    const usable = blocks * this.#tpb;
    if (tokens.length <= pieceTokens) {
      this.#hashPiece(tokens, 0, usable);
      ex.indexInsert(rank, seed[0], seed[1], this.#at + hashesAt, blocks);
      return ex.indexInsertFound() * this.#tpb;
    }
    ex.indexInsertBegin(rank, seed[0], seed[1], blocks);
    for (let from = 0; from < usable; from += pieceTokens) {
      const count = this.#hashPiece(tokens, from, Math.min(pieceTokens, usable - from));
      if (ex.indexInsertFeed(this.#at + hashesAt, count, 0) === 0) break;
    }
    ex.indexInsertEnd();
    return ex.indexInsertFound() * this.#tpb;
  }

  /**
   * The block hashes (two u32 words each) of the full blocks of `tokens`: what
   * an insert chains into path keys. Byte ids (a Uint8Array) are hashed as
   * bytes (see #hashPiece), never widened into an array of their own.
   */
  blockHashes(tokens: TokenIds): Uint32Array {
    const ex = this.ex;
    const { pieceTokens, hashesAt } = this.#layout;
    const usable = tokens.length - (tokens.length % this.#tpb);
    const out = new Uint32Array(2 * (usable / this.#tpb));
    let written = 0;
    for (let from = 0; from < usable; from += pieceTokens) {
      const count = this.#hashPiece(tokens, from, Math.min(pieceTokens, usable - from));
      const at = (this.#at + hashesAt) >>> 2;
      out.set(this.#u32().subarray(at, at + 2 * count), written);
      written += 2 * count;
    }
    return out;
  }

  /** Inserts `count` blocks given by their hashes (from blockHashes) into `rank`'s view: the same change as inserting their tokens, and the same return. */
  insertHashes(rank: number, words: Uint32Array, count: number, seed: readonly [number, number]): number {
    this.#insertPieces(rank, count, seed, (from, n) => this.#putHashes(words, from, n));
    return count && this.ex.indexInsertFound() * this.#tpb;
  }

  /** Inserts `count` block keys (safe integers, or u64 words) into `rank`'s view. */
  insertKeys(rank: number, keys: Float64Array | Uint32Array, count: number, seed: readonly [number, number]): void {
    this.#insertPieces(rank, count, seed, (from, n) => this.#putKeys(keys, from, n));
  }

  /** Inserts `count` blocks piece by piece, `put(from, n)` writing each piece's block hashes into the scratch. */
  #insertPieces(rank: number, count: number, seed: readonly [number, number], put: (from: number, n: number) => void): void {
    if (count === 0) return;
    const ex = this.ex;
    const { pieceBlocks, hashesAt } = this.#layout;
    ex.indexInsertBegin(rank, seed[0], seed[1], count);
    for (let from = 0; from < count; from += pieceBlocks) {
      const n = Math.min(pieceBlocks, count - from);
      put(from, n);
      if (ex.indexInsertFeed(this.#at + hashesAt, n, 0) === 0) break;
    }
    ex.indexInsertEnd();
  }

  /**
   * Inserts a stored event's blocks into `rank`'s view: below the path with key
   * `parent` (which the rank must hold) or from the namespace root `seed`.
   * Blocks are given by token ids (`tokens[i]`, one block each) or, when
   * `tokens` is null, by `keys` (u64 words). Returns the path key (lo, hi) of
   * each block the rank now holds, or null when it does not hold the parent.
   */
  insertStored(rank: number, parent: readonly [number, number] | null, seed: readonly [number, number], count: number, tokens: readonly (readonly number[])[] | null, keys: Uint32Array | null): [number, number][] | null {
    const ex = this.ex;
    const { pieceBlocks, tokensAt, hashesAt, keysAt } = this.#layout;
    if (parent === null) ex.indexInsertBegin(rank, seed[0], seed[1], count);
    else if (ex.indexInsertBelowBegin(rank, parent[0], parent[1], count) < 0) return null;
    const pathKeys: [number, number][] = [];
    for (let from = 0; from < count; from += pieceBlocks) {
      const n = Math.min(pieceBlocks, count - from);
      if (tokens !== null) {
        const view = this.#u32();
        const base = (this.#at + tokensAt) >>> 2;
        for (let i = 0; i < n; i++) view.set(tokens[from + i]!, base + i * this.#tpb);
        ex.hashBlocks(this.#at + tokensAt, n * this.#tpb, this.#at + hashesAt);
      } else {
        this.#putKeys(keys!, from, n);
      }
      const goesOn = ex.indexInsertFeed(this.#at + hashesAt, n, this.#at + keysAt);
      const view = this.#u32();
      const base = (this.#at + keysAt) >>> 2;
      for (let i = 0; i < n; i++) pathKeys.push([view[base + 2 * i]!, view[base + 2 * i + 1]!]);
      if (goesOn === 0) break;
    }
    const held = ex.indexInsertEnd();
    pathKeys.length = Math.min(pathKeys.length, held);
    return pathKeys;
  }

  /** The index's nodes as snapshot records (see assembly/prefix-index.ts), read out in pieces. */
  exportRecords(): Uint8Array {
    const ex = this.ex;
    const { tokensAt, dataBytes } = this.#layout;
    ex.indexExportBegin(); // first: it may drop nodes whose keys collide (see the core)
    const out = new Uint8Array(ex.indexExportBytes());
    let at = 0;
    for (;;) {
      const n = ex.indexExportPiece(this.#at + tokensAt, dataBytes) >>> 0;
      if (n === 0) break;
      out.set(new Uint8Array(ex.memory.buffer, this.#at + tokensAt, n), at);
      at += n;
    }
    if (at !== out.length) throw new Error(`adp-router: index export wrote ${at} of ${out.length} bytes`);
    return out;
  }

  /**
   * Loads snapshot records into this fresh index, in pieces, each record
   * checked by the core; returns the nodes loaded.
   * @throws AdpInputError naming `snapshot` for any record the core refuses.
   */
  importRecords(records: Uint8Array, stamp: number, evictions: number, stampResets: number): number {
    const ex = this.ex;
    const { tokensAt, dataBytes } = this.#layout;
    const refuse = (code: number): never => {
      if (code === OUT_OF_MEMORY) throw new AdpMemoryError(null); // the snapshot may be good: this host cannot hold it
      throw new AdpInputError("snapshot", `is not a valid snapshot (prefix index: ${IMPORT_ERRORS[code] ?? `error ${code}`})`, `${records.length} bytes of index records`);
    };
    const begun = ex.indexImportBegin(stamp);
    if (begun < 0) refuse(begun);
    let at = 0;
    while (at < records.length) {
      const n = Math.min(dataBytes, records.length - at);
      new Uint8Array(ex.memory.buffer, this.#at + tokensAt, n).set(records.subarray(at, at + n));
      const used = ex.indexImportPiece(this.#at + tokensAt, n);
      if (used < 0) refuse(used);
      if (used === 0) throw new AdpInputError("snapshot", "is not a valid snapshot (prefix index: its last node record is cut off)", `${records.length} bytes of index records`);
      at += used;
    }
    const nodes = ex.indexImportEnd(evictions, stampResets);
    if (nodes < 0) refuse(nodes);
    return nodes;
  }
}
