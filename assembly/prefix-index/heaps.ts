// The per-rank heaps of eviction candidates (leaves by stamp) and the rank tops that
// find the budget's victim across ranks.

import { storageAlloc, storageFree } from "../pages";
import {
  budget, capacity, grow, heapEntries, heapSlots, heaps, nodeTop, numRanks, rankLeaves, resCount,
  slotAt, slotIsLeaf, slotStamp, stamp, u32At,
} from "./state";
import { findResidency } from "./residency";

// ---- heaps of u64 entries --------------------------------------------------------------
//
// Both heaps below hold u64 entries (stamp << 32 | payload) ordered as integers,
// so the least recent stamp is on top; they share these two sift routines.

/** Moves `entry` up from slot `i` of the heap at `data`; returns its final slot. */
export function siftUp(data: usize, i: u32, entry: u64): u32 {
  while (i > 0) {
    const p = (i - 1) >> 1;
    const pv = load<u64>(data + (<usize>p << 3));
    if (pv <= entry) break;
    store<u64>(data + (<usize>i << 3), pv);
    i = p;
  }
  store<u64>(data + (<usize>i << 3), entry);
  return i;
}

/** Moves `entry` down from slot `i` of the heap at `data` holding `size` entries. */
export function siftDown(data: usize, size: u32, i: u32, entry: u64): void {
  while (true) {
    let c: u32 = 2 * i + 1;
    if (c >= size) break;
    let cv = load<u64>(data + (<usize>c << 3));
    if (c + 1 < size) {
      const rv = load<u64>(data + (<usize>(c + 1) << 3));
      if (rv < cv) { c++; cv = rv; }
    }
    if (cv >= entry) break;
    store<u64>(data + (<usize>i << 3), cv);
    i = c;
  }
  store<u64>(data + (<usize>i << 3), entry);
}

// ---- per-rank leaf heaps: entries (stamp << 32 | node) ------------------------------------

// @ts-ignore: decorator
@inline export function heapBase(rank: i32): usize { return heaps + <usize>rank * 12; }

/** The stamp on top of `rank`'s heap (the heap must not be empty). */
// @ts-ignore: decorator
@inline export function topStamp(rank: i32): u32 { return load<u32>(<usize>load<u32>(heapBase(rank)), 4); }

/** Pushes (s, id) onto `rank`'s heap. */
export function heapPush(rank: i32, s: u32, id: u32): void {
  const h = heapBase(rank);
  const size = load<u32>(h, 4);
  let cap = load<u32>(h, 8);
  let data = <usize>load<u32>(h);
  if (size == cap) {
    const grown = cap == 0 ? 4 : cap << 1;
    data = grow(data, <usize>size << 3, <usize>grown << 3);
    heapSlots += <f64>(grown - cap);
    cap = grown;
    store<u32>(h, <u32>data);
    store<u32>(h, cap, 8);
  }
  const slot = siftUp(data, size, (<u64>s << 32) | <u64>id);
  store<u32>(h, size + 1, 4);
  heapEntries++;
  if (slot == 0 && budget != 0) topsPush(s, rank);
}

// ---- rank tops: the budget's victim across ranks without scanning them ----------------
//
// A min-heap of (stamp << 32 | rank) entries. Invariant: every rank with a
// leaf has an entry whose stamp is at most that rank's current heap top, so the
// smallest entry, once checked against its rank's real top, names the least
// recently stamped leaf of the whole index.

/** Rank-top entries. */
export let tops: usize = 0;
/** Entries in use. */
export let topsSize: u32 = 0;
/** Entries allocated. */
export let topsCap: u32 = 0;

/** Adds (s, rank). */
export function topsPush(s: u32, rank: i32): void {
  if (topsSize == topsCap) {
    const cap = topsCap == 0 ? 16 : topsCap << 1;
    tops = grow(tops, <usize>topsSize << 3, <usize>cap << 3);
    topsCap = cap;
  }
  siftUp(tops, topsSize++, (<u64>s << 32) | <u64><u32>rank);
}

/** Removes the smallest entry. */
export function topsPop(): void {
  const size = --topsSize;
  if (size > 0) siftDown(tops, size, 0, load<u64>(tops + (<usize>size << 3)));
}

/** Rebuilds the rank tops from each rank's current top, when stale entries pile up. */
export function topsCompact(): void {
  topsSize = 0;
  for (let r = 0; r < numRanks; r++) {
    if (heapTop(r) != 0) topsPush(topStamp(r), r);
  }
}

/** Removes the top of `rank`'s heap. */
export function heapPop(rank: i32): void {
  const h = heapBase(rank);
  const data = <usize>load<u32>(h);
  const size = load<u32>(h, 4) - 1;
  store<u32>(h, size, 4);
  heapEntries--;
  if (size > 0) siftDown(data, size, 0, load<u64>(data + (<usize>size << 3)));
  shrinkHeap(rank);
}

/**
 * Halves `rank`'s heap storage once it is under a quarter full: the heaps'
 * capacity is accounted in the budget, so eviction must be able to give it back.
 */
export function shrinkHeap(rank: i32): void {
  const h = heapBase(rank);
  const size = load<u32>(h, 4);
  const cap = load<u32>(h, 8);
  if (cap <= 16 || size * 4 >= cap) return;
  const half = cap >> 1;
  const data = <usize>load<u32>(h);
  const fresh = storageAlloc(<usize>half << 3);
  if (fresh == 0) return; // memory cannot grow: keep the larger storage, accounted as it is
  memory.copy(fresh, data, <usize>size << 3);
  storageFree(data, <usize>cap << 3);
  store<u32>(h, <u32>fresh);
  store<u32>(h, half, 8);
  heapSlots -= <f64>(cap - half);
}

/** Whether heap entry (s, id) still names a leaf of `rank` stamped s. */
export function entryValid(rank: i32, s: u32, id: u32): bool {
  if (id >= nodeTop || resCount(id) == 0) return false;
  const slot = findResidency(id, rank);
  if (slot < 0) return false;
  const at = slotAt(<u32>slot);
  return slotIsLeaf(at) && slotStamp(at) == s;
}

/** Drops stale entries from the top of `rank`'s heap; returns the valid top node or 0. */
export function heapTop(rank: i32): u32 {
  const h = heapBase(rank);
  while (load<u32>(h, 4) > 0) {
    const data = <usize>load<u32>(h);
    const id = load<u32>(data);
    if (entryValid(rank, load<u32>(data, 4), id)) return id;
    heapPop(rank);
  }
  return 0;
}

/** Rebuilds `rank`'s heap from its valid entries when most are stale. */
export function maybeCompact(rank: i32): void {
  const h = heapBase(rank);
  const size = load<u32>(h, 4);
  if (size < 64 || size < 4 * load<u32>(u32At(rankLeaves, rank))) return;
  const data = <usize>load<u32>(h);
  let kept: u32 = 0;
  for (let i: u32 = 0; i < size; i++) {
    const e = load<u64>(data + (<usize>i << 3));
    if (entryValid(rank, <u32>(e >> 32), <u32>e)) {
      store<u64>(data + (<usize>kept << 3), e);
      kept++;
    }
  }
  heapEntries -= size - kept;
  store<u32>(h, kept, 4);
  for (let i = <i32>(kept >> 1) - 1; i >= 0; i--) siftDown(data, kept, <u32>i, load<u64>(data + (<usize>i << 3)));
  shrinkHeap(rank);
}
