// Snapshots: the node records written in pieces and read back in pieces, every record
// checked before it enters.

import { storageAlloc, storageFree } from "../pages";
import {
  NODE_BYTES, SLOT_BYTES, budget, capacity, classSize, drops, evictions, firstChild, heaps, keyHi,
  keyLo, liveNodes, nextSibling, nodeAt, nodeTop, numRanks, parentOf, prevSibling, rankBlocks,
  rankLeaves, resCount, resStart, residencies, setSlotStamp, slotAt, slotIn, slotIsLeaf, slotRank,
  slotStamp, stamp, table, u32At, keyedAll,
} from "./state";
import { lookup } from "./table";
import { allocBlock, childAdded } from "./residency";
import { heapPush } from "./heaps";
import { indexBytes, keyAll, newNode, tableGrowth } from "./nodes";
import { LAST_STAMP, stampResets } from "../prefix-index";

// ---- snapshot -----------------------------------------------------------------------
//
// An index snapshot lists live nodes parents first (a depth-first walk of the
// tree through its own links, so exporting needs no memory), each as
//   u32 keyLo · u32 keyHi · u32 parentLo · u32 parentHi · u32 hasParent · u32 count
//   then `count` residencies {u32 rank, u32 stamp}
// and is written and read in pieces of whole records. Node ids, the table
// layout and the heaps are rebuilt on import; stamps, and so the eviction
// order, are kept exactly. Import trusts nothing: every record is checked
// against the index built so far (see `indexImportPiece`).

/** Bytes of a record's fixed part. */
// @ts-ignore: decorator
@inline export const RECORD_BYTES: u32 = 24;

/** Bytes the export started by `indexExportBegin` writes in all. */
export function indexExportBytes(): f64 {
  return <f64>liveNodes * <f64>RECORD_BYTES + <f64>residencies * 8;
}

/** Next id to look at for a root. */
export let exportScan: u32 = 1;
/** Root of the tree being walked. */
export let exportRoot: u32 = 0;
/** Next node to write (0 = done). */
export let exportNext: u32 = 0;

/**
 * The node after `id` in the depth-first order of the export (0 = none left).
 * Children are listed newest first, and an import adds each in front, so the
 * export visits them oldest first (from the end of the list): a restored
 * index lists them in the same order and snapshots byte for byte the same.
 */
export function exportAfter(id: u32): u32 {
  if (id != 0) {
    let child = firstChild(id);
    if (child != 0) {
      while (nextSibling(child) != 0) child = nextSibling(child); // each list is walked once per export
      return child;
    }
    let up = id;
    while (up != exportRoot && prevSibling(up) == 0) up = parentOf(up);
    if (up != exportRoot) return prevSibling(up);
  }
  while (exportScan < nodeTop) {
    const root = exportScan++;
    if (resCount(root) > 0 && parentOf(root) == 0) {
      exportRoot = root;
      return root;
    }
  }
  return 0;
}

/**
 * Starts an export. Records name their parent by key, so every node enters
 * the table first, and one whose key another node holds is dropped (see
 * `keyAll`): a restored index then has exactly this one's nodes.
 */
export function indexExportBegin(): void {
  keyAll(false);
  exportScan = 1;
  exportRoot = 0;
  exportNext = exportAfter(0);
}

/** Writes the next whole records that fit in `room` bytes at `out`; returns the bytes written (0 once done). */
export function indexExportPiece(out: usize, room: u32): u32 {
  let at: u32 = 0;
  while (exportNext != 0) {
    const id = exportNext;
    const n = resCount(id);
    if (at + RECORD_BYTES + n * 8 > room) break;
    const rec = out + <usize>at;
    const parent = parentOf(id);
    store<u32>(rec, keyLo(id));
    store<u32>(rec, keyHi(id), 4);
    store<u32>(rec, parent == 0 ? 0 : keyLo(parent), 8);
    store<u32>(rec, parent == 0 ? 0 : keyHi(parent), 12);
    store<u32>(rec, parent == 0 ? 0 : 1, 16);
    store<u32>(rec, n, 20);
    const base = slotAt(resStart(id));
    for (let k: u32 = 0; k < n; k++) {
      const sa = slotIn(base, k);
      store<u32>(rec + RECORD_BYTES + (<usize>k << 3), <u32>slotRank(sa));
      store<u32>(rec + RECORD_BYTES + (<usize>k << 3), slotStamp(sa), 4);
    }
    at += RECORD_BYTES + n * 8;
    exportNext = exportAfter(id);
  }
  return at;
}

/** Why an import was refused (negative results of the import exports). */
// @ts-ignore: decorator
@inline export const BAD_STAMP_NOW: i32 = -1;
// @ts-ignore: decorator
@inline export const BAD_COUNT: i32 = -2;
// @ts-ignore: decorator
@inline export const BAD_FLAG: i32 = -3;
// @ts-ignore: decorator
@inline export const DUPLICATE_KEY: i32 = -4;
// @ts-ignore: decorator
@inline export const UNKNOWN_PARENT: i32 = -5;
// @ts-ignore: decorator
@inline export const BAD_RANK: i32 = -6;
// @ts-ignore: decorator
@inline export const BAD_STAMP: i32 = -7;
// @ts-ignore: decorator
@inline export const DUPLICATE_RANK: i32 = -8;
// @ts-ignore: decorator
@inline export const PARENT_NOT_HELD: i32 = -9;
// @ts-ignore: decorator
@inline export const OVER_BUDGET: i32 = -10;
// @ts-ignore: decorator
@inline export const OVER_CAPACITY: i32 = -11;
// @ts-ignore: decorator
@inline export const OUT_OF_MEMORY: i32 = -12;

/** Per rank, while importing: [node that last added the rank, node whose slot is noted, that slot]. */
export let importMarks: usize = 0;
/** `keyedAll` before the import (which enters every node: records name their parents by key). */
let keyedBefore = false;

/** Starts an import into this freshly initialised index whose stamp counter is `stampNow`; 0, or a negative reason. */
export function indexImportBegin(stampNow: u32): i32 {
  if (stampNow >= LAST_STAMP) return BAD_STAMP_NOW;
  const bytes = <usize>numRanks * 12;
  importMarks = storageAlloc(bytes);
  if (importMarks == 0) return OUT_OF_MEMORY;
  memory.fill(importMarks, 0, bytes);
  stamp = stampNow;
  keyedBefore = keyedAll;
  keyedAll = true;
  return 0;
}

/**
 * Imports the whole records among `bytes` bytes at `data`; returns the bytes
 * consumed (a record cut off at the end is left for the next piece), or a
 * negative reason. Each record is checked before it enters: a new key, a
 * parent already imported, 1..numRanks residencies of distinct ranks in
 * range that each hold the parent (views are prefix-closed), stamps in
 * 1..stampNow; then the index must stay within its budget and each rank
 * within its capacity. A refused import leaves a half-built index that the
 * shell drops.
 */
export function indexImportPiece(data: usize, bytes: u32): i32 {
  let at: u32 = 0;
  const marks = importMarks;
  while (bytes - at >= RECORD_BYTES) {
    const rec = data + <usize>at;
    const n = load<u32>(rec, 20);
    if (n == 0 || n > <u32>numRanks) return BAD_COUNT;
    if (bytes - at - RECORD_BYTES < n * 8) break;
    const key = (<u64>load<u32>(rec, 4) << 32) | <u64>load<u32>(rec);
    const flag = load<u32>(rec, 16);
    if (flag > 1) return BAD_FLAG;
    if (lookup(key) != 0) return DUPLICATE_KEY;
    let parent: u32 = 0;
    if (flag == 1) {
      parent = lookup((<u64>load<u32>(rec, 12) << 32) | <u64>load<u32>(rec, 8));
      if (parent == 0) return UNKNOWN_PARENT;
      // Note where the parent holds each of its ranks, for O(1) checks below.
      const pn = resCount(parent);
      const pbase = resStart(parent);
      for (let k: u32 = 0; k < pn; k++) {
        const r = <usize>slotRank(slotAt(pbase + k));
        store<u32>(marks + r * 12, parent, 4);
        store<u32>(marks + r * 12, pbase + k, 8);
      }
    }
    const res = rec + RECORD_BYTES;
    for (let k: u32 = 0; k < n; k++) {
      const r = load<u32>(res + (<usize>k << 3));
      const st = load<u32>(res + (<usize>k << 3), 4);
      if (r >= <u32>numRanks) return BAD_RANK;
      if (st == 0 || st > stamp) return BAD_STAMP;
      if (parent != 0 && load<u32>(marks + <usize>r * 12, 4) != parent) return PARENT_NOT_HELD;
    }
    // Room for the node and its block before anything is allocated.
    let cls: u32 = 0;
    while (classSize(cls) < n) cls++;
    if (budget != 0 && indexBytes() + <f64>NODE_BYTES + tableGrowth(1) + <f64>classSize(cls) * <f64>SLOT_BYTES > budget) return OVER_BUDGET;
    const id = newNode(key, parent, false);
    const block = allocBlock(cls);
    const node = nodeAt(id);
    store<u32>(node, block, 8);
    store<u8>(node, <u8>cls, 14);
    const base = slotAt(block);
    for (let k: u32 = 0; k < n; k++) {
      const r = <i32>load<u32>(res + (<usize>k << 3));
      if (load<u32>(marks + <usize>r * 12) == id) return DUPLICATE_RANK;
      store<u32>(marks + <usize>r * 12, id);
      const sa = slotIn(base, k);
      store<u16>(sa, <u16>r);
      setSlotStamp(sa, load<u32>(res + (<usize>k << 3), 4));
      store<u8>(sa, 0, 6);
      store<u16>(node, <u16>(k + 1), 12);
      residencies++;
      const blocksHeld = load<u32>(u32At(rankBlocks, r)) + 1;
      if (capacity != 0 && blocksHeld > capacity) return OVER_CAPACITY;
      store<u32>(u32At(rankBlocks, r), blocksHeld);
      store<u32>(u32At(rankLeaves, r), load<u32>(u32At(rankLeaves, r)) + 1);
      if (parent != 0) {
        const ps = slotAt(load<u32>(marks + <usize>r * 12, 8));
        if (childAdded(ps, parent, r) == 0) store<u32>(u32At(rankLeaves, r), load<u32>(u32At(rankLeaves, r)) - 1);
      }
    }
    at += RECORD_BYTES + n * 8;
  }
  return <i32>at;
}

/**
 * Ends an import: queues every leaf residency for eviction and takes the
 * counters. Returns the nodes imported, or a negative reason (over budget).
 */
export function indexImportEnd(evicted: f64, resets: u32): i32 {
  storageFree(importMarks, <usize>numRanks * 12);
  importMarks = 0;
  keyedAll = keyedBefore;
  for (let id: u32 = 1; id < nodeTop; id++) {
    const n = resCount(id);
    if (n == 0) continue;
    const base = slotAt(resStart(id));
    for (let k: u32 = 0; k < n; k++) {
      const sa = slotIn(base, k);
      if (slotIsLeaf(sa)) heapPush(slotRank(sa), slotStamp(sa), id);
    }
  }
  evictions = evicted;
  stampResets = resets;
  if (budget != 0 && indexBytes() > budget) return OVER_BUDGET;
  return <i32>liveNodes;
}

/** The stamp counter (for snapshots). */
export function indexStamp(): u32 { return stamp; }
