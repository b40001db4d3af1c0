// Array inputs (token ids, per-rank counts, block keys), each read exactly once
// into a plain typed array and validated as it is read. A caller's array-like
// may be a Proxy, carry getters, or lie about its length; once copied here its
// values cannot change between the check and the use, and nothing later reads
// the caller's object again; whatever its getters or Proxy traps throw while it
// is read becomes AdpInputError naming the field. A genuine Uint32Array is
// taken as is: its elements are u32 by construction and cannot be intercepted.

import { AdpInputError, asInputError } from "./errors.js";

/** Most token ids one prompt may hold as an array (2^28: a 1 GiB Uint32Array). */
export const MAX_TOKEN_IDS = 2 ** 28;
/** Most block keys one prompt may hold. */
export const MAX_BLOCK_KEYS = 2 ** 27;

/**
 * Token ids taken as they are: a Uint32Array, or a Uint8Array, whose elements
 * are ids below 256 by construction (a byte-level tokenizer's: the prompt's
 * UTF-8 bytes are its ids). Both name the same prompt for the same ids; a
 * Uint8Array is copied into the core's scratch as bytes and hashed there as
 * the ids they are, so a byte tokenizer never holds its ids at four bytes each.
 */
export type TokenIds = Uint32Array | Uint8Array;

/** A getter of the typed arrays' own prototype: it reads internal slots, which no subclass, prototype or own property can shadow. */
const typedGetter = (key: string | symbol) => Object.getOwnPropertyDescriptor(Object.getPrototypeOf(Uint32Array.prototype) as object, key)!.get!;
/** A typed array's true length, type name, memory and offset. */
const typedLength = typedGetter("length");
const typedTag = typedGetter(Symbol.toStringTag);
const typedBuffer = typedGetter("buffer");
const typedByteOffset = typedGetter("byteOffset");

/** The length of `v` when it is a genuine Uint32Array whose `length` is its true length, else -1. */
function trueLength(v: unknown): number {
  if (!(v instanceof Uint32Array) || !ArrayBuffer.isView(v)) return -1; // a Proxy is no view
  const n = typedLength.call(v) as number;
  return v.length === n ? n : -1;
}

/**
 * A plain view of `v`'s memory when `v` is truly a Uint32Array or a Uint8Array
 * (by its internal type, whatever its prototype: a subclass or a Buffer too)
 * whose `length` is its true length, else null. The view is made here from
 * the internal slots, so nothing the caller's object carries (an own
 * `subarray` or `buffer`, a species constructor) is read or called after
 * this; the ids are not copied.
 */
function tokenView(v: unknown): TokenIds | null {
  const tag = typedTag.call(v) as string | undefined; // undefined for anything but a typed array (a Proxy, a primitive too)
  if (tag !== "Uint32Array" && tag !== "Uint8Array") return null;
  const buffer = typedBuffer.call(v) as ArrayBufferLike;
  const offset = typedByteOffset.call(v) as number;
  const n = typedLength.call(v) as number;
  if ((v as TokenIds).length !== n) return null; // a length that lies: read as the array-like it claims to be
  return tag === "Uint8Array" ? new Uint8Array(buffer, offset, n) : new Uint32Array(buffer, offset, n);
}

/** Reads an array-like's `length` once and checks it is a safe non-negative integer at most `max`. */
function lengthOf(v: unknown, field: string, what: string, max: number): number {
  if (typeof v !== "object" || v === null) throw new AdpInputError(field, `must be ${what}`, v);
  const length = (v as { length?: unknown }).length;
  if (typeof length !== "number" || !Number.isSafeInteger(length) || length < 0) {
    throw new AdpInputError(`${field}.length`, "must be a non-negative safe integer", length);
  }
  if (length > max) throw new AdpInputError(`${field}.length`, `must be at most ${max}`, length);
  return length;
}

/**
 * Element `i` of `src`, checked to be an integer in [0, 2^32). It returns the
 * `>>> 0` form, already a u32, so the typed-array store after it needs no
 * conversion (a fifth faster per element than storing the value read).
 */
function u32At(src: ArrayLike<unknown>, i: number, field: string, rule: string): number {
  const t = src[i];
  if (typeof t !== "number") throw new AdpInputError(`${field}[${i}]`, rule, t);
  const u = t >>> 0;
  if (u !== t) throw new AdpInputError(`${field}[${i}]`, rule, t);
  return u;
}

/**
 * Token ids: a Uint32Array or a Uint8Array as a plain view of its memory
 * ({@link typedTokens}), any other array-like read once and checked (integers
 * in [0, 2^32)) into a Uint32Array. The copy grows as elements pass, so a huge
 * `length` with nothing behind it fails at its first element without
 * allocating for the length.
 */
export function readTokens(v: unknown, field: string): TokenIds {
  const typed = typedTokens(v);
  if (typed !== null) return typed;
  try {
    return copyTokens(v, field);
  } catch (error) {
    throw asInputError(error, field);
  }
}

/**
 * A plain view of `v` when it is a Uint32Array or a Uint8Array (TokenIds,
 * see tokenView) within the token limit, else null: the common case of
 * {@link readTokens}, which needs no field name (the caller builds one only
 * to read anything else).
 */
export function typedTokens(v: unknown): TokenIds | null {
  try {
    const view = tokenView(v);
    return view !== null && view.length <= MAX_TOKEN_IDS ? view : null;
  } catch {
    return null; // a detached buffer: readTokens reads it again, and names the field
  }
}

/**
 * `v` itself when it is a genuine Uint32Array of exactly `count` elements,
 * else null (never throws: anything else goes through {@link readCountsInto},
 * which names the problem).
 */
export function typedCounts(v: unknown, count: number): Uint32Array | null {
  try {
    return trueLength(v) === count ? (v as Uint32Array) : null;
  } catch {
    return null;
  }
}

/** The true length of a genuine Uint32Array (0 once its buffer is detached). */
export const lengthOfTyped = (v: Uint32Array): number => typedLength.call(v) as number;

/** {@link readTokens} without the guard that types what the caller's getters throw. */
function copyTokens(v: unknown, field: string): Uint32Array {
  const length = lengthOf(v, field, "an array of token ids or a Uint32Array", MAX_TOKEN_IDS);
  const src = v as ArrayLike<unknown>;
  let out = new Uint32Array(Math.min(length, 1 << 16));
  for (let i = 0; i < length; i++) {
    const t = u32At(src, i, field, "must be an integer token id in [0, 2^32)");
    if (i === out.length) {
      const grown = new Uint32Array(Math.min(length, out.length * 2));
      grown.set(out);
      out = grown;
    }
    out[i] = t;
  }
  return out;
}

/**
 * Exactly `row.length` integers in [0, 2^32) (per-rank matched tokens), read
 * once into `out` at `offset`: a Uint32Array is copied whole, anything else
 * element by element as it is checked, into `row` (the caller's, reused: it
 * stays in the CPU cache) and then copied in bulk, which costs half as much
 * as storing each element straight into a batch-sized buffer. `field` names
 * the field, called only for a message.
 */
export function readCountsInto(v: unknown, out: Uint32Array, offset: number, row: Uint32Array, field: () => string, rule: string): void {
  const count = row.length;
  const typedAs = trueLength(v);
  const length = typedAs >= 0 ? typedAs : typeof v === "object" && v !== null ? (v as { length?: unknown }).length : undefined;
  if (length !== count) throw new AdpInputError(field(), rule, v);
  if (typedAs >= 0) {
    out.set(v as Uint32Array, offset);
    return;
  }
  // No typeof test per element: `>>> 0` throws for a bigint or a Symbol, and
  // any other non-number (a string, null, an object) differs from its u32.
  const src = v as ArrayLike<unknown>;
  let i = 0;
  let t: unknown;
  try {
    for (; i < count; i++) {
      t = src[i];
      const u = (t as number) >>> 0;
      if (u !== t) break;
      row[i] = u;
    }
  } catch (error) {
    if (typeof t !== "bigint" && typeof t !== "symbol") throw error; // a getter or trap of the caller's
  }
  if (i < count) throw new AdpInputError(`${field()}[${i}]`, "must be an integer in [0, 2^32)", t);
  out.set(row, offset);
}

/** Block keys that must be non-negative safe integers (a request's `blockKeys`), read once. */
export function readSafeKeys(v: unknown, field: string): Float64Array {
  const length = lengthOf(v, field, "an array of block keys", MAX_BLOCK_KEYS);
  const src = v as ArrayLike<unknown>;
  let keys = new Float64Array(Math.min(length, 1 << 16));
  for (let i = 0; i < length; i++) {
    const k = src[i];
    if (typeof k !== "number" || !Number.isSafeInteger(k) || k < 0) throw new AdpInputError(`${field}[${i}]`, "must be a non-negative safe integer", k);
    if (i === keys.length) {
      const grown = new Float64Array(Math.min(length, keys.length * 2));
      grown.set(keys);
      keys = grown;
    }
    keys[i] = k;
  }
  return keys;
}

/**
 * Block keys as u64 words (lo, hi per key) from non-negative safe integers or
 * bigints below 2^64, read once.
 */
export function readKeyWords(v: unknown, field: string): Uint32Array {
  try {
    return copyKeyWords(v, field);
  } catch (error) {
    throw asInputError(error, field);
  }
}

/** {@link readKeyWords} without the guard that types what the caller's getters throw. */
function copyKeyWords(v: unknown, field: string): Uint32Array {
  const length = lengthOf(v, field, "an array of block keys", MAX_BLOCK_KEYS);
  const src = v as ArrayLike<unknown>;
  let words = new Uint32Array(2 * Math.min(length, 1 << 16));
  for (let i = 0; i < length; i++) {
    const k = src[i];
    let lo: number;
    let hi: number;
    if (typeof k === "number" && Number.isSafeInteger(k) && k >= 0) {
      lo = k % 2 ** 32;
      hi = Math.floor(k / 2 ** 32);
    } else if (typeof k === "bigint" && k >= 0n && k < 1n << 64n) {
      lo = Number(k & 0xffffffffn);
      hi = Number(k >> 32n);
    } else {
      throw new AdpInputError(`${field}[${i}]`, "must be a block key: a non-negative safe integer or a bigint below 2^64", k);
    }
    if (2 * i === words.length) {
      const grown = new Uint32Array(2 * Math.min(length, words.length));
      grown.set(words);
      words = grown;
    }
    words[2 * i] = lo;
    words[2 * i + 1] = hi;
  }
  return words;
}

/** u64 words (lo, hi per key) of safe-integer keys `keys[from, from + n)`, written into `out` from index 0. */
export function keyWordsInto(out: Uint32Array, keys: Float64Array | Uint32Array, from: number, n: number): void {
  if (keys instanceof Uint32Array) {
    out.set(keys.subarray(2 * from, 2 * (from + n)));
    return;
  }
  for (let i = 0; i < n; i++) {
    const k = keys[from + i]!;
    out[2 * i] = k % 2 ** 32;
    out[2 * i + 1] = Math.floor(k / 2 ** 32);
  }
}
