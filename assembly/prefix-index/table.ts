// Hashing blocks and chaining path keys, and the open-addressing table from path key to
// node.

import { mustAlloc, storageFree } from "../pages";
import { keyHi, keyLo, path, table, tableCap, tableSalt } from "./state";
import { step } from "../prefix-index";

// ---- hashing ----------------------------------------------------------------------------

/** 64-bit finalizer (murmur3 fmix64). */
// @ts-ignore: decorator
@inline export function fmix(h: u64): u64 {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccd;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53;
  h ^= h >> 33;
  return h;
}

/** xxh64 primes. */
// @ts-ignore: decorator
@inline export const P1: u64 = 0x9e3779b185ebca87;
// @ts-ignore: decorator
@inline export const P2: u64 = 0xc2b2ae3d27d4eb4f;
// @ts-ignore: decorator
@inline export const P3: u64 = 0x165667b19e3779f9;

/** One accumulator round: xor the input in, rotate, multiply (both bijections). */
// @ts-ignore: decorator
@inline export function round(acc: u64, v: u64): u64 { return rotl<u64>(acc ^ v, 29) * P1; }

/**
 * Hash of `count` token ids at `ptr`, each a `T` (u32, or u8 for a byte
 * tokenizer's ids, hashed as the u32 ids they are: the same hash either way):
 * four independent lanes, two ids per lane step and one multiply per step, so
 * the CPU overlaps the four chains. A block that differs in one lane's input
 * differs in that lane's state (every step is a bijection), hence in the
 * combined hash. Bytes are widened as they are read, eight a step (a vector
 * load widens them to four u64 words of two ids), never into an array.
 */
export function hashIds<T>(ptr: usize, count: i32): u64 {
  let a: u64 = P1 + <u64>count;
  let b: u64 = P2;
  let c: u64 = P3;
  let d: u64 = 0 - P1;
  let i = 0;
  for (; i + 8 <= count; i += 8) {
    if (sizeof<T>() == 4) {
      const at = ptr + (<usize>i << 2);
      a = round(a, load<u64>(at));
      b = round(b, load<u64>(at, 8));
      c = round(c, load<u64>(at, 16));
      d = round(d, load<u64>(at, 24));
    } else {
      const words = v128.load8x8_u(ptr + <usize>i);
      const low = i32x4.extend_low_i16x8_u(words);
      const high = i32x4.extend_high_i16x8_u(words);
      a = round(a, <u64>i64x2.extract_lane(low, 0));
      b = round(b, <u64>i64x2.extract_lane(low, 1));
      c = round(c, <u64>i64x2.extract_lane(high, 0));
      d = round(d, <u64>i64x2.extract_lane(high, 1));
    }
  }
  for (; i + 2 <= count; i += 2) a = round(a, <u64>idAt<T>(ptr, i) | (<u64>idAt<T>(ptr, i + 1) << 32));
  if (i < count) b = round(b, <u64>idAt<T>(ptr, i) | 0x100000000);
  return fmix(a + rotl<u64>(b, 17) + rotl<u64>(c, 31) + rotl<u64>(d, 47));
}

/** Id `i` of the `T` ids at `ptr`. */
// @ts-ignore: decorator
@inline function idAt<T>(ptr: usize, i: i32): u32 {
  return <u32>load<T>(ptr + (<usize>i << alignof<T>()));
}

/** Hash of `count` u32 token ids at `ptr` (see hashIds). */
export function hashTokens(ptr: usize, count: i32): u64 {
  return hashIds<u32>(ptr, count);
}

/**
 * The path key of a child block: a bijection of the parent's key xor the block's
 * hash. Keys are only compared for equality (the table mixes them again), and a
 * block hash is already well mixed, so one multiply per block keeps the walk's
 * serial chain short; two paths share a key only if their block hashes differ by
 * exactly the difference of their parents' images, a 2^-64 event for unrelated blocks.
 */
// @ts-ignore: decorator
@inline export function chain(parent: u64, block: u64): u64 {
  return rotl<u64>(parent, 23) * 0x9e3779b97f4a7c15 ^ block;
}

/** Hash of a caller-given block key (engine or trace block id), kept apart from token hashes. */
// @ts-ignore: decorator
@inline export function hashBlockKey(key: u64): u64 {
  return fmix(key ^ 0xd6e8feb86659fd93) ^ 0x2545f4914f6cdd1d;
}

// ---- hash table -------------------------------------------------------------------------
//
// Buckets of one cache line (64 bytes): words 0-6 the tags of seven entries
// (`tagOf`: the low 32 bits of the salted key's hash; their low bits give the home bucket),
// word 7 the bucket's overflow count, words 8-14 their node ids (0 = empty),
// word 15 unused (0). A key goes into the first bucket from its home with an
// empty slot, and each full bucket it passes counts it: a search ends at the
// first bucket whose count is 0, and a removal counts the entry out of the
// buckets it passed, so nothing ever moves (F14's scheme). A bucket is searched
// with two vector compares, not slot by slot: linear probing's branch per
// slot and backward shift were about a third of an insert into a full index
// (each new block evicts one). `tableCap` counts 8-byte words, 8 a bucket, so
// the table's bytes and the load bound (entries ≤ tableCap / 2, four of seven
// slots a bucket) read as they did with 8-byte slots.

/** log2 of a bucket's bytes. */
// @ts-ignore: decorator
@inline const BUCKET_SHIFT: u32 = 6;
/** Slots of a bucket. */
// @ts-ignore: decorator
@inline const BUCKET_SLOTS: u32 = 7;
/** Byte offset of a bucket's overflow count. */
// @ts-ignore: decorator
@inline const COUNT_AT: usize = 28;
/** Byte offset of a bucket's node ids. */
// @ts-ignore: decorator
@inline const IDS_AT: usize = 32;

/** The table's tag of path key `key`: its home bucket's index in its low bits, salted (see `tableSalt`). */
// @ts-ignore: decorator
@inline export function tagOf(key: u64): u32 {
  return <u32>fmix(key ^ tableSalt);
}

/** Address of the home bucket of `tag` in a table of `cap` words at `at`. */
// @ts-ignore: decorator
@inline export function homeBucket(at: usize, cap: u32, tag: u32): usize {
  return at + (<usize>(tag & ((cap >> 3) - 1)) << BUCKET_SHIFT);
}

/** The bucket after the one at `at` (the last wraps to the first). */
// @ts-ignore: decorator
@inline function nextBucket(at: usize): usize {
  const next = at + (1 << BUCKET_SHIFT);
  return next == table + (<usize>tableCap << 3) ? table : next;
}

/** Bits 0-6: the slots of the bucket at `at` whose word at `offset` (0: tags, IDS_AT: ids) is `value`. */
// @ts-ignore: decorator
@inline function slotsWith(at: usize, offset: usize, value: u32): u32 {
  const v = i32x4.splat(value);
  const low = i32x4.bitmask(i32x4.eq(v128.load(at + offset), v));
  const high = i32x4.bitmask(i32x4.eq(v128.load(at + offset, 16), v));
  return (low | (high << 4)) & 0x7f;
}

/**
 * The node with path key `key`, or 0. A search ends at the first bucket no
 * entry passed, or back at its home: counts above 0 in every bucket are
 * possible (entries that overflowed long ago keep theirs up while the
 * buckets between empty out), and then no bucket would end it.
 */
export function lookup(key: u64): u32 {
  const lo = <u32>key;
  const hi = <u32>(key >> 32);
  const tag = tagOf(key);
  const home = homeBucket(table, tableCap, tag);
  let at = home;
  while (true) {
    let m = slotsWith(at, 0, tag);
    while (m != 0) {
      const id = load<u32>(at + IDS_AT + (<usize>ctz(m) << 2));
      if (id != 0 && keyLo(id) == lo && keyHi(id) == hi) return id;
      m &= m - 1;
    }
    if (load<u32>(at + COUNT_AT) == 0) return 0;
    at = nextBucket(at);
    if (at == home) return 0;
  }
}

/** Puts (tag, id) in the first empty slot from the tag's home bucket, counting it in each full bucket it passes. */
export function tablePut(tag: u32, id: u32): void {
  let at = homeBucket(table, tableCap, tag);
  while (true) {
    const empty = slotsWith(at, IDS_AT, 0);
    if (empty != 0) {
      const k = <usize>ctz(empty) << 2;
      store<u32>(at + k, tag);
      store<u32>(at + IDS_AT + k, id);
      return;
    }
    store<u32>(at + COUNT_AT, load<u32>(at + COUNT_AT) + 1);
    at = nextBucket(at);
  }
}

/** Inserts node `id` (its key already set) unless the table holds its key; whether it did. */
export function tableInsertUnique(id: u32): bool {
  const lo = keyLo(id);
  const hi = keyHi(id);
  if (lookup((<u64>hi << 32) | <u64>lo) != 0) return false;
  tablePut(tagOf((<u64>hi << 32) | <u64>lo), id);
  return true;
}

/** Inserts node `id` (its key already set) into the table. */
export function tableInsert(id: u32): void {
  tablePut(tagOf((<u64>keyHi(id) << 32) | <u64>keyLo(id)), id);
}

/** Removes node `id` (in the table) from the table, counting it out of the buckets it passed. */
export function tableRemove(id: u32): void {
  const home = homeBucket(table, tableCap, tagOf((<u64>keyHi(id) << 32) | <u64>keyLo(id)));
  let at = home;
  let m = slotsWith(at, IDS_AT, id);
  while (m == 0) {
    at = nextBucket(at);
    if (at == home) return; // not in the table (never by contract): nothing to remove
    m = slotsWith(at, IDS_AT, id);
  }
  const k = <usize>ctz(m) << 2;
  store<u32>(at + k, 0);
  store<u32>(at + IDS_AT + k, 0);
  for (let passed = home; passed != at; passed = nextBucket(passed)) {
    store<u32>(passed + COUNT_AT, load<u32>(passed + COUNT_AT) - 1);
  }
}

/** Zeroed storage for a table of `cap` words (cap / 8 buckets). */
export function tableAlloc(cap: u32): usize {
  const bytes = <usize>cap << 3;
  const at = mustAlloc(bytes);
  memory.fill(at, 0, bytes);
  return at;
}

/** Doubles the table and re-places every entry by its tag. */
export function growTable(): void {
  const old = table;
  const oldCap = tableCap;
  tableCap = oldCap << 1;
  table = tableAlloc(tableCap);
  for (let at = old; at < old + (<usize>oldCap << 3); at += 1 << BUCKET_SHIFT) {
    for (let k: usize = 0; k < BUCKET_SLOTS; k++) {
      const id = load<u32>(at + IDS_AT + (k << 2));
      if (id != 0) tablePut(load<u32>(at + (k << 2)), id);
    }
  }
  storageFree(old, <usize>oldCap << 3);
}
