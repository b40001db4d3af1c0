// Hashing blocks and chaining path keys, and the open-addressing table from path key to
// node.

import { storageAlloc, storageFree } from "../pages";
import { keyHi, keyLo, path, table, tableCap } from "./state";
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
 * Hash of `count` u32 tokens at `ptr`: four independent lanes, two tokens per
 * lane step and one multiply per step, so the CPU overlaps the four chains. A
 * block that differs in one lane's input differs in that lane's state (every
 * step is a bijection), hence in the combined hash.
 */
export function hashTokens(ptr: usize, count: i32): u64 {
  let a: u64 = P1 + <u64>count;
  let b: u64 = P2;
  let c: u64 = P3;
  let d: u64 = 0 - P1;
  let i = 0;
  for (; i + 8 <= count; i += 8) {
    const at = ptr + (<usize>i << 2);
    a = round(a, load<u64>(at));
    b = round(b, load<u64>(at, 8));
    c = round(c, load<u64>(at, 16));
    d = round(d, load<u64>(at, 24));
  }
  for (; i + 2 <= count; i += 2) a = round(a, load<u64>(ptr + (<usize>i << 2)));
  if (i < count) b = round(b, <u64>load<u32>(ptr + (<usize>i << 2)) | 0x100000000);
  return fmix(a + rotl<u64>(b, 17) + rotl<u64>(c, 31) + rotl<u64>(d, 47));
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

// Each slot holds the low 32 bits of fmix(key) (the "tag", which also gives the
// home slot) and the node id, so removal and growth never touch the nodes.

/** The node with path key `key`, or 0. */
export function lookup(key: u64): u32 {
  const lo = <u32>key;
  const hi = <u32>(key >> 32);
  const tag = <u32>fmix(key);
  const mask = tableCap - 1;
  let i = tag & mask;
  while (true) {
    const slot = table + (<usize>i << 3);
    const id = load<u32>(slot, 4);
    if (id == 0) return 0;
    if (load<u32>(slot) == tag && keyLo(id) == lo && keyHi(id) == hi) return id;
    i = (i + 1) & mask;
  }
}

/** Puts (tag, id) in the first free slot from the tag's home. */
export function tablePut(tag: u32, id: u32): void {
  const mask = tableCap - 1;
  let i = tag & mask;
  while (load<u32>(table + (<usize>i << 3), 4) != 0) i = (i + 1) & mask;
  store<u32>(table + (<usize>i << 3), tag);
  store<u32>(table + (<usize>i << 3), id, 4);
}

/** Inserts node `id` (its key already set) unless the table holds its key; whether it did. */
export function tableInsertUnique(id: u32): bool {
  const lo = keyLo(id);
  const hi = keyHi(id);
  const tag = <u32>fmix((<u64>hi << 32) | <u64>lo);
  const mask = tableCap - 1;
  let i = tag & mask;
  while (true) {
    const slot = table + (<usize>i << 3);
    const other = load<u32>(slot, 4);
    if (other == 0) {
      store<u32>(slot, tag);
      store<u32>(slot, id, 4);
      return true;
    }
    if (load<u32>(slot) == tag && keyLo(other) == lo && keyHi(other) == hi) return false;
    i = (i + 1) & mask;
  }
}

/** Inserts node `id` (its key already set) into the table. */
export function tableInsert(id: u32): void {
  tablePut(<u32>fmix((<u64>keyHi(id) << 32) | <u64>keyLo(id)), id);
}

/**
 * Whether an entry with home slot `home`, found at slot j while backward-shift
 * deletion holds a hole at slot i, must stay: its home lies cyclically in (i, j].
 * Otherwise it moves back into the hole, which keeps its probe chain intact.
 */
// @ts-ignore: decorator
@inline export function homeBetween(home: u32, i: u32, j: u32): bool {
  return i <= j ? (home > i && home <= j) : (home > i || home <= j);
}

/** Removes node `id` from the table (backward-shift deletion keeps probe chains intact). */
export function tableRemove(id: u32): void {
  const mask = tableCap - 1;
  let i = <u32>fmix((<u64>keyHi(id) << 32) | <u64>keyLo(id)) & mask;
  while (load<u32>(table + (<usize>i << 3), 4) != id) i = (i + 1) & mask;
  let j = i;
  while (true) {
    j = (j + 1) & mask;
    const slot = table + (<usize>j << 3);
    if (load<u32>(slot, 4) == 0) break;
    if (!homeBetween(load<u32>(slot) & mask, i, j)) {
      store<u64>(table + (<usize>i << 3), load<u64>(slot));
      i = j;
    }
  }
  store<u64>(table + (<usize>i << 3), 0);
}

/** Zeroed storage for a table of `cap` slots. */
export function tableAlloc(cap: u32): usize {
  const bytes = <usize>cap << 3;
  const at = storageAlloc(bytes);
  memory.fill(at, 0, bytes);
  return at;
}

/** Doubles the table and re-places every entry by its tag. */
export function growTable(): void {
  const old = table;
  const oldCap = tableCap;
  tableCap = oldCap << 1;
  table = tableAlloc(tableCap);
  for (let i: u32 = 0; i < oldCap; i++) {
    const id = load<u32>(old + (<usize>i << 3), 4);
    if (id != 0) tablePut(load<u32>(old + (<usize>i << 3)), id);
  }
  storageFree(old, <usize>oldCap << 3);
}
