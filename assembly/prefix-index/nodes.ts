// Nodes: creating and freeing them, adding and removing residencies, eviction by
// capacity and by budget, and the budget's accounting.

import { idlePageBytes, mustAlloc, mustTakePages } from "../pages";
import {
  KIDS_MASK, NEXT_IS_CHILD, NODE_BYTES, NODE_CHUNK_SHIFT, SLOT_BYTES, budget, capacity, classSize,
  coldAt, evictions, firstChild, freeNode, grow, heapSlots, heaps, liveNodes, nextSibling, nodeAt,
  nodeCap, nodeChunkCount, nodeChunks, nodeTop, numRanks, parentOf, path, pathCap, rankBlocks,
  rankLeaves, resClass, resCount, resStart, residencies, setSlotStamp, slotAt, slotChunkCount,
  slotChunkShift, slotStamp, slotsInUse, stamp, table, tableCap, u32At, isTabled, keyedAll, keyless, markTabled,
  slotRank,
} from "./state";
import { chain, growTable, homeBucket, tableInsert, tableInsertUnique, tableRemove, tagOf } from "./table";
import { allocBlock, appendChunk, childAdded, childRemoved, findResidency, freeBlock, overflowCap } from "./residency";
import {
  heapBase, heapPop, heapPush, heapTop, maybeCompact, topStamp, tops, topsCap, topsCompact,
  topsPop, topsPush, topsSize,
} from "./heaps";
import { pathRank, step } from "../prefix-index";

// ---- nodes ------------------------------------------------------------------------------

/**
 * Nodes created by the insert in progress, in order, whose table entries are
 * still to be made; an entry with the KEYLESS bit gets none (see `keyless`)
 * but is listed, so that `flushPending` can undo any of them.
 */
export let pending: usize = 0;
/** The bit of a pending entry that says its node stays out of the table. */
// @ts-ignore: decorator
@inline const KEYLESS: u32 = 0x80000000;
/** Pending node ids. */
export let pendingCount: u32 = 0;
/** Pending capacity. */
export let pendingCap: u32 = 0;

/**
 * Creates the node for path key `key` under `parent`. With `deferTable`, its
 * table entry waits for `flushPending`: an insert's new blocks are never looked
 * up while it runs (a new node has no next blocks, so the walk below it never
 * probes), and entering them together lets their random table slots be fetched
 * at once instead of one miss at a time. A keyless node gets no entry.
 */
export function newNode(key: u64, parent: u32, deferTable: bool): u32 {
  let id = freeNode;
  if (id != 0) {
    freeNode = nextSibling(id);
  } else {
    if (nodeTop == nodeCap) {
      nodeChunks = appendChunk(nodeChunks, nodeChunkCount++, mustTakePages(<usize>NODE_BYTES << NODE_CHUNK_SHIFT));
      nodeCap += 1 << NODE_CHUNK_SHIFT;
    }
    id = nodeTop++;
  }
  const at = nodeAt(id);
  const cold = coldAt(id);
  store<u32>(at, <u32>key);
  store<u32>(at, <u32>(key >> 32), 4);
  store<u32>(at, 0, 8);
  store<u16>(at, 0, 12);
  store<u8>(at, 0xff, 14); // no residency block yet
  store<u8>(at, 0, 15);
  const sibling = parent != 0 ? firstChild(parent) : 0;
  store<u32>(cold, parent);
  store<u32>(cold, sibling, 4);
  store<u32>(cold, 0, 8);
  store<u32>(cold, 0, 12);
  if (sibling != 0) store<u32>(coldAt(sibling), id, 8);
  if (parent != 0) {
    store<u32>(coldAt(parent), id, 12);
    countChild(parent, id, true);
  }
  liveNodes++;
  // The table is sized by live nodes, entered or not, so the budget's accounting does not depend on which are.
  if (liveNodes * 2 > tableCap) growTable();
  const bare = keyless(id, parent);
  if (deferTable) {
    if (pendingCount == pendingCap) {
      const cap = max<u32>(pendingCap << 1, 64);
      pending = grow(pending, <usize>pendingCap << 2, <usize>cap << 2);
      pendingCap = cap;
    }
    store<u32>(pending + (<usize>pendingCount << 2), bare ? id | KEYLESS : id);
    pendingCount++;
  } else if (!bare) {
    tableInsert(id);
    markTabled(id);
  }
  return id;
}

/**
 * Counts child `id` into (`added`) or out of `parent`'s kids byte: the count
 * saturates at KIDS_MASK and then stays "many", and the flag says whether
 * id = parent + 1 is the child. A third child takes `step` off the child at
 * parent + 1, which then needs its table entry if it is keyless.
 */
export function countChild(parent: u32, id: u32, added: bool): void {
  const pa = nodeAt(parent);
  let kids = <u32>load<u8>(pa, 15);
  const before = kids & KIDS_MASK;
  if (before < KIDS_MASK) kids = added ? kids + 1 : kids - 1;
  if (id == parent + 1) kids = added ? kids | NEXT_IS_CHILD : kids & ~NEXT_IS_CHILD;
  store<u8>(pa, <u8>kids, 15);
  if (added && before == 2 && (kids & NEXT_IS_CHILD) != 0 && id != parent + 1) enterKeyless(parent + 1);
}

/**
 * Enters keyless node `id` into the table. A key the table already holds
 * belongs to another node (only crafted block hashes collide on 64 bits):
 * `id` then stays out of it, found by no lookup, and goes when it is evicted
 * or at the next `keyAll`.
 */
function enterKeyless(id: u32): void {
  if (!isTabled(id)) enter(id);
}

/**
 * Enters every live node not in the table, oldest id first; one whose key
 * another node holds (crafted block hashes: see `enterKeyless`) is removed
 * with its subtree in every rank, so that keys are unique again, as lookups
 * by key and snapshots need. With `forGood`, every later node is entered too.
 * Once every node is (`keyedAll`), there is nothing to do.
 */
export function keyAll(forGood: bool): void {
  if (keyedAll) return;
  if (forGood) keyedAll = true;
  for (let id: u32 = 1; id < nodeTop; id++) {
    if (resCount(id) == 0 || isTabled(id) || enter(id)) continue;
    while (resCount(id) != 0) removeSubtree(id, slotRank(slotAt(resStart(id))));
  }
}

/** Enters node `id` into the table unless the table holds its key (another node's); whether it did. */
function enter(id: u32): bool {
  if (!tableInsertUnique(id)) return false;
  markTabled(id);
  return true;
}

/** Parent of the first node the last `flushPending` undid (0: the root). */
export let undoneParent: u32 = 0;

/**
 * Enters the nodes `newNode` deferred into the table, in creation order: the
 * newest blocks of the path being inserted, each the child of the one before,
 * held by the inserting rank alone. A key the table already holds belongs to
 * another node (a crafted snapshot grafted it under another parent, or two
 * paths collide on 64 bits: `step` never enters such a node from here). A
 * path cannot hold a second node of one key, so the insert ends before it:
 * that node and the pending ones below it are undone, newest first. Checking
 * here, on the probe the entry takes anyway, costs nothing per new block.
 * Returns how many were undone (their parent in `undoneParent`).
 */
export function flushPending(): u32 {
  const count = pendingCount;
  pendingCount = 0;
  for (let i: u32 = 0; i < count; i++) {
    if (i % FETCH_BATCH == 0) fetchHomes(pending + (<usize>i << 2), min<u32>(FETCH_BATCH, count - i));
    const entry = load<u32>(pending + (<usize>i << 2));
    if ((entry & KEYLESS) != 0 || enter(entry)) continue;
    // Nodes from `i` on are in no table (not yet entered, or keyless).
    undoneParent = parentOf(entry);
    for (let k = count; k > i; k--) removeLeafResidency(load<u32>(pending + (<usize>(k - 1) << 2)) & ~KEYLESS, pathRank, 0);
    return count - i;
  }
  return 0;
}

/** Ids whose home buckets one `fetchHomes` touches at most (their lines fit the L1 cache). */
// @ts-ignore: decorator
@inline const FETCH_BATCH: u32 = 512;
/** Sum of the table words `fetchHomes` loaded (kept so the loads stay). */
let fetched: u32 = 0;

/**
 * Loads the home buckets of the `count` nodes whose ids are at `ids` (keys
 * set; pending entries marked keyless are skipped: they get no entry). Their
 * entries lie anywhere in the table, and entering or removing them one at a
 * time waits for each one's cache miss in turn; this loop's
 * loads are independent, so the CPU fetches their lines together first
 * (bench:peers' trace: entering an insert's new blocks 30 µs a request
 * without it, removing evicted ones 23 µs).
 */
function fetchHomes(ids: usize, count: u32): void {
  const cap = tableCap;
  let sum = fetched;
  for (let i: u32 = 0; i < count; i++) {
    const entry = load<u32>(ids + (<usize>i << 2));
    if ((entry & KEYLESS) == 0) sum += load<u32>(homeBucket(table, cap, tagOf(load<u64>(nodeAt(entry)))));
  }
  fetched = sum;
}

/** Whether freed nodes stay in the table until `flushRemovals` (during `fitBudget`'s evictions). */
let deferRemovals = false;
/** Freed node ids still in the table (FETCH_BATCH of them; 0 before first use). */
let removals: usize = 0;
/** Ids in `removals`. */
let removalCount: u32 = 0;

/** Removes the deferred nodes from the table, their home buckets fetched first. */
function flushRemovals(): void {
  fetchHomes(removals, removalCount);
  for (let i: u32 = 0; i < removalCount; i++) tableRemove(load<u32>(removals + (<usize>i << 2)));
  removalCount = 0;
}

/** Frees node `id`, which holds no residency and so has no live child. */
export function freeNodeId(id: u32): void {
  // The list is made at the first deferred free, entered or not, so the index's reserved bytes
  // do not depend on which nodes are in the table.
  if (deferRemovals && removals == 0) removals = mustAlloc(<usize>FETCH_BATCH << 2);
  if (!isTabled(id)) {
    // keyless, or an undone pending node: nothing to remove from the table
  } else if (deferRemovals) {
    if (removalCount == FETCH_BATCH) flushRemovals();
    store<u32>(removals + (<usize>removalCount << 2), id);
    removalCount++;
  } else tableRemove(id);
  const at = nodeAt(id);
  const cold = coldAt(id);
  const parent = parentOf(id);
  store<u32>(cold, parent); // out of the table now, or once the deferred removals are flushed
  const next = load<u32>(cold, 4);
  const prev = load<u32>(cold, 8);
  if (prev != 0) store<u32>(coldAt(prev), next, 4);
  else if (parent != 0) store<u32>(coldAt(parent), next, 12);
  if (next != 0) store<u32>(coldAt(next), prev, 8);
  if (parent != 0) countChild(parent, id, false);
  const cls = resClass(id);
  if (cls != 0xff) freeBlock(resStart(id), cls);
  // The key stays until the node is reused: a deferred removal starts its search at the key's home slot.
  store<u16>(at, 0, 12);
  store<u8>(at, 0xff, 14);
  store<u8>(at, 0, 15);
  store<u32>(cold, freeNode, 4);
  freeNode = id;
  liveNodes--;
}

/** Adds `rank`'s residency to node `id` with stamp `s`; returns its slot. */
export function addResidency(id: u32, rank: i32, s: u32): u32 {
  const at = nodeAt(id);
  const n = resCount(id);
  let cls = resClass(id);
  if (cls == 0xff || n == classSize(cls)) {
    const newCls: u32 = cls == 0xff ? 0 : cls + 1;
    const fresh = allocBlock(newCls);
    if (cls != 0xff) {
      memory.copy(slotAt(fresh), slotAt(resStart(id)), <usize>n * SLOT_BYTES);
      freeBlock(resStart(id), cls);
    }
    store<u32>(at, fresh, 8);
    store<u8>(at, <u8>newCls, 14);
  }
  const slot = resStart(id) + n;
  const sa = slotAt(slot);
  store<u16>(sa, <u16>rank);
  setSlotStamp(sa, s);
  store<u8>(sa, 0, 6);
  store<u16>(at, <u16>(n + 1), 12);
  residencies++;
  store<u32>(u32At(rankBlocks, rank), load<u32>(u32At(rankBlocks, rank)) + 1);
  store<u32>(u32At(rankLeaves, rank), load<u32>(u32At(rankLeaves, rank)) + 1);
  const parent = parentOf(id);
  if (parent != 0) {
    const ps = slotAt(<u32>findResidency(parent, rank));
    if (childAdded(ps, parent, rank) == 0) store<u32>(u32At(rankLeaves, rank), load<u32>(u32At(rankLeaves, rank)) - 1);
  }
  return slot;
}

/**
 * Removes `rank`'s residency (a leaf in that rank) from node `id`; frees the
 * node if it was the last. A parent left a leaf in `rank` becomes an eviction
 * candidate, except that one stamped `chain` (nonzero) is returned instead of
 * queued, for the caller to evict next; otherwise returns 0.
 */
export function removeLeafResidency(id: u32, rank: i32, chain: u32): u32 {
  const start = resStart(id);
  const n = resCount(id);
  const slot = <u32>findResidency(id, rank);
  const gone = slotStamp(slotAt(slot));
  memory.copy(slotAt(slot), slotAt(start + n - 1), SLOT_BYTES);
  store<u16>(nodeAt(id), <u16>(n - 1), 12);
  residencies--;
  store<u32>(u32At(rankBlocks, rank), load<u32>(u32At(rankBlocks, rank)) - 1);
  store<u32>(u32At(rankLeaves, rank), load<u32>(u32At(rankLeaves, rank)) - 1);
  const parent = parentOf(id);
  let next: u32 = 0;
  if (parent != 0) {
    const ps = slotAt(<u32>findResidency(parent, rank));
    if (slotStamp(ps) < gone) setSlotStamp(ps, gone); // the lazy restamp (see the header)
    if (childRemoved(ps, parent, rank) == 0) {
      store<u32>(u32At(rankLeaves, rank), load<u32>(u32At(rankLeaves, rank)) + 1);
      const ps4 = slotStamp(ps);
      if (chain != 0 && ps4 == chain) next = parent;
      else heapPush(rank, ps4, parent);
    }
  }
  if (n == 1) freeNodeId(id);
  return next;
}

/** Ensures the path scratch holds `n` node ids. */
export function reservePath(n: u32): void {
  if (n <= pathCap) return;
  let cap = pathCap;
  while (cap < n) cap <<= 1;
  path = grow(path, <usize>pathCap << 2, <usize>cap << 2);
  pathCap = cap;
}

/** Removes `rank`'s residency of `id` and of every descendant holding it; returns how many. */
export function removeSubtree(id: u32, rank: i32): u32 {
  // Breadth-first list of the rank's subtree, then removal from the end:
  // every node comes after its ancestors, so each is a leaf when removed.
  reservePath(1);
  store<u32>(path, id);
  let length: u32 = 1;
  for (let i: u32 = 0; i < length; i++) {
    let child = firstChild(load<u32>(path + (<usize>i << 2)));
    while (child != 0) {
      if (findResidency(child, rank) >= 0) {
        reservePath(length + 1);
        store<u32>(path + (<usize>length << 2), child);
        length++;
      }
      child = nextSibling(child);
    }
  }
  for (let i = <i32>length - 1; i >= 0; i--) removeLeafResidency(load<u32>(path + (<usize>i << 2)), rank, 0);
  return length;
}

/**
 * Whether eviction must go on: over the budget with `reserve` more bytes and
 * `extraNodes` more nodes to fit (`byBudget`), else over `rank`'s capacity.
 */
// @ts-ignore: decorator
@inline export function mustEvict(rank: i32, byBudget: bool, reserve: f64, extraNodes: u32): bool {
  return byBudget
    ? indexBytes() + reserve + tableGrowth(extraNodes) > budget
    : load<u32>(u32At(rankBlocks, rank)) > capacity;
}

/**
 * Evicts `rank`'s least recently stamped leaf, then, while eviction must go on
 * (see `mustEvict`), each parent it leaves a leaf with the same stamp. Stamps
 * are unique to one insert into one rank, and an insert stamps a whole path, so
 * such a parent is the least recent leaf of the rank and of the index: the next
 * victim either way, taken here without a trip through the heaps. Returns false
 * when the rank holds nothing.
 */
export function evictFrom(rank: i32, byBudget: bool, reserve: f64, extraNodes: u32): bool {
  const id = heapTop(rank);
  if (id == 0) return false;
  const s = topStamp(rank);
  heapPop(rank);
  let next = removeLeafResidency(id, rank, s);
  evictions++;
  while (next != 0 && mustEvict(rank, byBudget, reserve, extraNodes)) {
    next = removeLeafResidency(next, rank, s);
    evictions++;
  }
  if (next != 0) heapPush(rank, s, next);
  maybeCompact(rank);
  return true;
}

/**
 * Bytes in use: live nodes, the hash table at its real size, residency slots
 * (by block class), the eviction heaps' storage and the per-rank arrays.
 */
export function indexBytes(): f64 {
  return <f64>liveNodes * <f64>NODE_BYTES + <f64>tableCap * 8 + <f64>slotsInUse * <f64>SLOT_BYTES + <f64>overflowCap * 16 +
    (heapSlots + <f64>topsCap) * 8 + <f64>numRanks * 32;
}

/** Bytes of the hash table. */
export function indexTableBytes(): f64 {
  return <f64>tableCap * 8;
}

/** Bytes the table must grow by to take `extra` more nodes (load ≤ 1/2). */
export function tableGrowth(extra: u32): f64 {
  let cap = <u64>tableCap;
  while ((<u64>liveNodes + <u64>extra) * 2 > cap) cap <<= 1;
  return <f64>(cap - <u64>tableCap) * 8;
}

/** Bytes the index's pools hold, used or free: node and residency chunks, the table, the heaps, idle pages. */
export function indexReservedBytes(): f64 {
  let heapBytes: f64 = 0;
  for (let r = 0; r < numRanks; r++) heapBytes += <f64>load<u32>(heapBase(r), 8) * 8;
  return <f64>nodeChunkCount * <f64>(<u32>NODE_BYTES << NODE_CHUNK_SHIFT) + <f64>tableCap * 8 +
    <f64>slotChunkCount * <f64>(SLOT_BYTES << slotChunkShift) + <f64>overflowCap * 16 + heapBytes + <f64>numRanks * 32 + idlePageBytes();
}

/**
 * Evicts least-recently-stamped leaves across all ranks until `reserve` more
 * bytes and `extraNodes` more nodes (with the table growth they need) fit the
 * budget, but never a leaf stamped `protect` (nonzero: the insert in progress,
 * whose stamp is the newest, so once such a leaf is the least recent nothing
 * else is left to evict).
 */
export function fitBudget(reserve: f64, extraNodes: u32, protect: u32): void {
  if (budget == 0) return;
  if (topsSize > <u32>(4 * numRanks + 64)) topsCompact();
  deferRemovals = true;
  evictToBudget(reserve, extraNodes, protect);
  deferRemovals = false;
  flushRemovals();
}

/** `fitBudget`'s evictions (their nodes' table entries deferred). */
function evictToBudget(reserve: f64, extraNodes: u32, protect: u32): void {
  while (indexBytes() + reserve + tableGrowth(extraNodes) > budget) {
    if (topsSize == 0) return;
    const entry = load<u64>(tops);
    const s = <u32>(entry >> 32);
    const rank = <i32><u32>entry;
    topsPop();
    if (heapTop(rank) == 0) continue; // the rank holds nothing now
    const top = topStamp(rank);
    if (top != s) {
      topsPush(top, rank); // a stale entry: re-enter the rank at its real top
      continue;
    }
    if (s == protect) {
      topsPush(s, rank);
      return;
    }
    evictFrom(rank, true, reserve, extraNodes);
    if (heapTop(rank) != 0) topsPush(topStamp(rank), rank);
  }
}
