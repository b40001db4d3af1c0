// Residency blocks (which ranks hold a node, with their stamps) and the children counts
// of a residency past 254.

import { mustAlloc, mustTakePages, storageFree } from "../pages";
import {
  CLASSES, KIDS_OVERFLOW, SLOT_BYTES, budget, classSize, freeBlocks, grow, resCount, resStart,
  slotAt, slotCap, slotChunkCount, slotChunkShift, slotChunks, slotIn, slotRank, slotTop,
  slotsInUse, table, u32At,
} from "./state";
import { chain, fmix } from "./table";

// ---- residency blocks ---------------------------------------------------------------

/** Appends a chunk address to a chunk table of `count` entries; returns the (maybe moved) table. */
export function appendChunk(chunks: usize, count: u32, chunk: usize): usize {
  // Full at 0, 4, 8, 16, … entries (4 at least are allocated).
  if (count == 0 || (count >= 4 && (count & (count - 1)) == 0)) chunks = grow(chunks, <usize>count << 2, <usize>max<u32>(count << 1, 4) << 2);
  store<u32>(chunks + (<usize>count << 2), <u32>chunk);
  return chunks;
}

/** Pushes a free block of class `cls` on its class list (no accounting). */
export function pushFree(start: u32, cls: u32): void {
  store<u32>(slotAt(start), load<u32>(u32At(freeBlocks, cls)));
  store<u32>(u32At(freeBlocks, cls), start + 1);
}

/** Puts the `rest` free slots from `start` on the free lists as blocks of class at most `cls`, largest first. */
export function pushRest(start: u32, rest: u32, cls: u32): void {
  let c = cls;
  while (rest > 0) {
    while (classSize(c) > rest) c--;
    pushFree(start, c);
    start += classSize(c);
    rest -= classSize(c);
  }
}

/** Allocates a block of class `cls`; returns its first slot. */
export function allocBlock(cls: u32): u32 {
  const head = load<u32>(u32At(freeBlocks, cls));
  const size = classSize(cls);
  slotsInUse += size;
  if (head != 0) {
    const s = head - 1;
    store<u32>(u32At(freeBlocks, cls), load<u32>(slotAt(s)));
    return s;
  }
  // A free block of a larger class is cut: this block from its start, the rest
  // back on the free lists (largest classes first). Without this, blocks freed
  // as nodes grow through the classes would sit unused while new chunks are
  // taken, and fragmentation would push memory past the budget's bound.
  for (let big = cls + 1; big < <u32>CLASSES; big++) {
    const bigHead = load<u32>(u32At(freeBlocks, big));
    if (bigHead == 0) continue;
    const s = bigHead - 1;
    store<u32>(u32At(freeBlocks, big), load<u32>(slotAt(s)));
    pushRest(s + size, classSize(big) - size, big);
    return s;
  }
  // Bump-allocate; a block that would straddle two chunks starts the next one,
  // and the rest of this chunk goes to the free lists, largest classes first.
  const chunkSlots: u32 = <u32>1 << slotChunkShift;
  const offset = slotTop & (chunkSlots - 1);
  if (slotTop < slotCap && offset + size > chunkSlots) {
    pushRest(slotTop, chunkSlots - offset, cls);
    slotTop += chunkSlots - offset;
  }
  while (slotTop + size > slotCap) {
    slotChunks = appendChunk(slotChunks, slotChunkCount++, mustTakePages(<usize>chunkSlots * SLOT_BYTES));
    slotCap += chunkSlots;
  }
  const s = slotTop;
  slotTop += size;
  return s;
}

/** Returns a block of class `cls` to its free list. */
export function freeBlock(start: u32, cls: u32): void {
  pushFree(start, cls);
  slotsInUse -= classSize(cls);
}

// ---- children counts past 254 ---------------------------------------------------------

/** Overflow table (16-byte entries; key 0 = empty). */
export let overflow: usize = 0;
/** Overflow table entries (power of two, or 0 before first use). */
export let overflowCap: u32 = 0;
/** Overflow entries in use. */
export let overflowUsed: u32 = 0;

/** The overflow key of `rank`'s residency in node `id` (never 0: ids start at 1). */
// @ts-ignore: decorator
@inline export function overflowKey(id: u32, rank: i32): u64 { return (<u64>id << 16) | <u64><u32>rank; }

/** The overflow entry for `key` (present by contract). */
export function overflowFind(key: u64): usize {
  const mask = overflowCap - 1;
  let i = <u32>fmix(key) & mask;
  while (load<u64>(overflow + (<usize>i << 4)) != key) i = (i + 1) & mask;
  return overflow + (<usize>i << 4);
}

/** Adds `key` with `count` children. */
export function overflowPut(key: u64, count: u32): void {
  if ((overflowUsed + 1) * 2 > overflowCap) {
    const old = overflow;
    const oldCap = overflowCap;
    overflowCap = max<u32>(oldCap << 1, 16);
    overflow = mustAlloc(<usize>overflowCap << 4);
    memory.fill(overflow, 0, <usize>overflowCap << 4);
    overflowUsed = 0;
    for (let i: u32 = 0; i < oldCap; i++) {
      const k = load<u64>(old + (<usize>i << 4));
      if (k != 0) overflowPut(k, load<u32>(old + (<usize>i << 4), 8));
    }
    if (old != 0) storageFree(old, <usize>oldCap << 4);
  }
  const mask = overflowCap - 1;
  let i = <u32>fmix(key) & mask;
  while (load<u64>(overflow + (<usize>i << 4)) != 0) i = (i + 1) & mask;
  store<u64>(overflow + (<usize>i << 4), key);
  store<u32>(overflow + (<usize>i << 4), count, 8);
  overflowUsed++;
}

/**
 * Whether an entry with home slot `home`, found at slot j while backward-shift
 * deletion holds a hole at slot i, must stay: its home lies cyclically in (i, j].
 * Otherwise it moves back into the hole, which keeps its probe chain intact.
 */
// @ts-ignore: decorator
@inline function homeBetween(home: u32, i: u32, j: u32): bool {
  return i <= j ? (home > i && home <= j) : (home > i || home <= j);
}

/** Removes `key` (present by contract), backward-shifting its probe chain. */
export function overflowRemove(key: u64): void {
  const mask = overflowCap - 1;
  let i = <u32>((overflowFind(key) - overflow) >> 4);
  let j = i;
  while (true) {
    j = (j + 1) & mask;
    const k = load<u64>(overflow + (<usize>j << 4));
    if (k == 0) break;
    if (!homeBetween(<u32>fmix(k) & mask, i, j)) {
      store<u64>(overflow + (<usize>i << 4), k);
      store<u32>(overflow + (<usize>i << 4), load<u32>(overflow + (<usize>j << 4), 8), 8);
      i = j;
    }
  }
  store<u64>(overflow + (<usize>i << 4), 0);
  overflowUsed--;
}

/** Counts one more child of `rank`'s residency (slot at `ps`) in node `id`; returns the count before. */
export function childAdded(ps: usize, id: u32, rank: i32): u32 {
  const c = <u32>load<u8>(ps, 6);
  if (c < KIDS_OVERFLOW - 1) {
    store<u8>(ps, <u8>(c + 1), 6);
    return c;
  }
  const key = overflowKey(id, rank);
  if (c == KIDS_OVERFLOW - 1) {
    store<u8>(ps, <u8>KIDS_OVERFLOW, 6);
    overflowPut(key, KIDS_OVERFLOW);
    return c;
  }
  const e = overflowFind(key);
  const n = load<u32>(e, 8);
  store<u32>(e, n + 1, 8);
  return n;
}

/** Counts one child fewer of `rank`'s residency (slot at `ps`) in node `id`; returns the count after. */
export function childRemoved(ps: usize, id: u32, rank: i32): u32 {
  const c = <u32>load<u8>(ps, 6);
  if (c < KIDS_OVERFLOW) {
    store<u8>(ps, <u8>(c - 1), 6);
    return c - 1;
  }
  const key = overflowKey(id, rank);
  const e = overflowFind(key);
  const n = load<u32>(e, 8) - 1;
  if (n < KIDS_OVERFLOW) {
    overflowRemove(key);
    store<u8>(ps, <u8>n, 6);
  } else {
    store<u32>(e, n, 8);
  }
  return n;
}

/** Slot of `rank`'s residency in node `id`, or -1. */
export function findResidency(id: u32, rank: i32): i32 {
  const start = resStart(id);
  const n = resCount(id);
  if (n == 0) return -1;
  const base = slotAt(start); // a block never straddles chunks
  for (let k: u32 = 0; k < n; k++) {
    if (slotRank(slotIn(base, k)) == rank) return <i32>(start + k);
  }
  return -1;
}
