// The multi-rank prefix index: which full blocks of which prompts each rank holds.
// This file is its ABI (setup, match, insert, events' paths, queries); the
// machinery lives in assembly/prefix-index/ by part: state (constants, shared
// globals, accessors), table (hashing, path keys, the key table), residency
// (which ranks hold a node), heaps (eviction candidates), nodes (creation,
// removal, eviction, the budget) and snapshot (export and checked import).
//
// One tree shared by all ranks, one node per block path. A node is identified by
// the chained 64-bit hash of its path (namespace seed, then each block's hash),
// so a prompt is walked block by block without storing its tokens.
//
// Layout (unmanaged memory from pages.ts, never shrunk):
//   nodes      1-based ids (0 = none), in chunks of 1,024; each chunk holds the
//                nodes' hot halves (what a match walk reads), then their cold halves:
//                hot  0 keyLo u32 · 4 keyHi u32 · 8 residencies (slot index) · 12 count u16
//                     · 14 class u8 · 15 kids u8 (bit 7: node id+1 is a child; bits 0-6:
//                     children, saturating at 127, after which they are never counted down)
//                cold 0 parent (bit 31: the node is in the table) · 4 nextSibling
//                     · 8 prevSibling · 12 firstChild
//   table      buckets of one cache line: 7 u32 tags (low bits of the key's hash) · u32
//                overflow count · 7 u32 nodes (0 = empty) · 0; an entry in the first bucket
//                from its home with room, counted in each full one it passed; ≤ 4 a bucket.
//                It holds every node `step` cannot reach from its parent without it; the
//                rest (`keyless`) enter it once a caller names a node by key, and before
//                a snapshot. Its size follows the live nodes, entered or not
//   residency  7-byte slots {0 rank u16 · 2 stamp u32 · 6 children in rank u8, 255 =
//                see the overflow table}; a node's residencies are one block of
//                1, 2, 3, 4, 6, 8, 12, 16, … slots (the class), unsorted, never
//                straddling a chunk; free blocks are kept on one list per class
//   overflow   open addressing: {key u64 (node << 16 | rank), children u32} for the
//                few residencies with 255 or more children in their rank
//   heaps      per rank, a binary min-heap of u64 (stamp << 32 | node) candidate
//                leaves; stale entries (restamped, grown a child, evicted) are
//                dropped when they surface, and the heap is rebuilt when mostly stale
//
// Views are prefix-closed (a rank holds a path only with all its prefixes), and
// an insert stamps a whole path. A stored event below a known parent stamps the
// parent and the new blocks only; its older ancestors take the stamp lazily, when
// a child leaves them (a parent's stamp becomes the larger of its own and the
// departing child's). Only leaves are eviction candidates, and a node becomes a
// leaf only once its last child has left, so every leaf's stamp is what a
// whole-path restamp would have given it, and the least-recently-stamped leaf of
// a rank is its heap minimum.
// `match` walks the prompt once for all ranks: the set of ranks holding a node
// only shrinks along a path, so ranks are written only from the nodes where the
// count drops. Eviction takes a leaf, then the rest of its insert's path upward.

import { mustAlloc, mustTakePages } from "./pages";
import {
  INITIAL_TABLE, KIDS_MASK, NEXT_IS_CHILD, NODE_BYTES, NODE_CHUNK_SHIFT, SLOT_BYTES, budget,
  capacity, classSize, drops, evictions, heapEntries, heaps, keyHi, keyLo, liveNodes, nodeAt,
  nodeCap, nodeChunkCount, nodeChunks, numRanks, parentOf, path, pathCap, rankBlocks, rankLeaves,
  resClass, resCount, resStart, residencies, setSlotStamp, slotAt, slotCap, slotChunkCount,
  slotChunkShift, slotChunks, slotIn, slotIsLeaf, slotRank, stamp, table, tableCap, tableSalt, tokensPerBlock,
  u32At,
} from "./prefix-index/state";
import { chain, hashBlockKey, hashIds, hashTokens, lookup, tableAlloc } from "./prefix-index/table";
import { appendChunk, findResidency } from "./prefix-index/residency";
import { heapBase, heapPop, heapPush, heapTop, maybeCompact, shrinkHeap } from "./prefix-index/heaps";
import {
  addResidency, evictFrom, fitBudget, flushPending, indexBytes, keyAll, newNode, removeLeafResidency,
  removeSubtree, tableGrowth, undoneParent,
} from "./prefix-index/nodes";

// ---- public ABI -----------------------------------------------------------------------

/** Sets the index up, its table salted with (saltLo, saltHi); returns 0, or -1 when the budget cannot hold one block. */
export function indexInit(ranks: i32, blockTokens: i32, capacityPerRank: u32, maxBytes: f64, saltLo: u32, saltHi: u32): i32 {
  numRanks = ranks;
  tableSalt = (<u64>saltHi << 32) | <u64>saltLo;
  tokensPerBlock = blockTokens;
  capacity = capacityPerRank;
  budget = maxBytes;
  if (budget != 0 && budget < <f64>numRanks * 32 + <f64>INITIAL_TABLE * 8 + <f64>NODE_BYTES + 16 + 8) return -1;
  nodeChunks = appendChunk(0, 0, mustTakePages(<usize>NODE_BYTES << NODE_CHUNK_SHIFT));
  nodeChunkCount = 1;
  nodeCap = 1 << NODE_CHUNK_SHIFT;
  tableCap = INITIAL_TABLE;
  table = tableAlloc(tableCap);
  // A chunk holds at least the largest residency block: the class that holds all ranks.
  let top: u32 = 0;
  let growth: u32 = 1;
  while (classSize(top) < <u32>ranks) {
    growth = max<u32>(growth, classSize(top + 1) - classSize(top));
    top++;
  }
  blockCostBound = max<f64>(<f64>NODE_BYTES + <f64>SLOT_BYTES, <f64>growth * <f64>SLOT_BYTES);
  slotChunkShift = max<u32>(14, 32 - clz<u32>(classSize(top) - 1));
  slotChunks = appendChunk(0, 0, mustTakePages(<usize>SLOT_BYTES << slotChunkShift));
  slotChunkCount = 1;
  slotCap = <u32>1 << slotChunkShift;
  const perRank = <usize>ranks << 2;
  rankBlocks = mustAlloc(perRank);
  memory.fill(rankBlocks, 0, perRank);
  rankLeaves = mustAlloc(perRank);
  memory.fill(rankLeaves, 0, perRank);
  drops = mustAlloc(<usize>(ranks + 1) << 3);
  heaps = mustAlloc(<usize>ranks * 12);
  memory.fill(heaps, 0, <usize>ranks * 12);
  pathCap = 64;
  path = mustAlloc(<usize>pathCap << 2);
  return 0;
}

/** Hashes `numTokens` ids of type `T` at `tokens` into the block hashes of their full blocks at `out`; returns the block count. */
// @ts-ignore: decorator
@inline function hashBlocksOf<T>(tokens: usize, numTokens: i32, out: usize): i32 {
  const n = numTokens / tokensPerBlock;
  for (let b = 0; b < n; b++) {
    store<u64>(out + (<usize>b << 3), hashIds<T>(tokens + (<usize>(b * tokensPerBlock) << alignof<T>()), tokensPerBlock));
  }
  return n;
}

/** Hashes `numTokens` u32 token ids at `tokens` into the block hashes of their full blocks at `out`; returns the block count. */
export function hashBlocks(tokens: usize, numTokens: i32, out: usize): i32 {
  return hashBlocksOf<u32>(tokens, numTokens, out);
}

/** `hashBlocks` of `numTokens` byte token ids at `tokens` (each byte the id of its value): the same hashes. */
export function hashByteBlocks(tokens: usize, numTokens: i32, out: usize): i32 {
  return hashBlocksOf<u8>(tokens, numTokens, out);
}

/** Turns `count` caller block keys (u64 at `keys`) into block hashes in place. */
export function hashBlockKeys(keys: usize, count: i32): void {
  for (let b = 0; b < count; b++) {
    const at = keys + (<usize>b << 3);
    store<u64>(at, hashBlockKey(load<u64>(at)));
  }
}

/**
 * The node with path key `key` one block below `prev` (0 = at the namespace root).
 * The children count in the hot half settles most steps without the table: a
 * node without children ends the walk, and a path inserted in one go has
 * consecutive ids, so an only child (or one of two) is usually `prev + 1`,
 * whose address needs no load. Path keys are unique, so a key match is the node.
 */
// @ts-ignore: decorator
@inline export function step(prev: u32, key: u64): u32 {
  if (prev != 0) {
    const kids = <u32>load<u8>(nodeAt(prev), 15);
    const n = kids & KIDS_MASK;
    if (n == 0) return 0;
    if ((kids & NEXT_IS_CHILD) != 0 && n <= 2) {
      const next = prev + 1;
      if (keyLo(next) == <u32>key && keyHi(next) == <u32>(key >> 32)) return next;
      if (n == 1) return 0;
    }
  }
  // Chained keys make a key's parent implicit, so a node found under another
  // parent exists only in a crafted snapshot; the walk treats it as absent.
  const id = lookup(key);
  return id != 0 && parentOf(id) == prev ? id : 0;
}

/** Notes node `id` at `tokens` matched tokens as drop `noted` of a walk; returns the drops noted. */
// @ts-ignore: decorator
@inline export function noteDrop(noted: i32, id: u32, tokens: u32): i32 {
  store<u32>(drops + (<usize>noted << 3), id);
  store<u32>(drops + (<usize>noted << 3), tokens, 4);
  return noted + 1;
}

/** Writes `tokens` matched tokens for every rank holding `id` (`count` residencies). */
// @ts-ignore: decorator
@inline export function writeRanks(id: u32, count: u32, tokens: u32, out: usize): void {
  const base = slotAt(resStart(id)); // a block never straddles chunks
  for (let k: u32 = 0; k < count; k++) store<u32>(u32At(out, slotRank(slotIn(base, k))), tokens);
}

// ---- the match walk ----------------------------------------------------------------
//
// A walk may be fed a prompt in pieces (the shell's scratch holds a bounded
// piece of a long prompt), so its state lives in these globals between calls.

/** Path key of the last block fed. */
export let walkKey: u64 = 0;
/** Node of the deepest block matched so far (0 = none). */
export let walkPrev: u32 = 0;
/** Ranks holding `walkPrev` (numRanks before the first block). */
export let walkPrevCount: u32 = 0;
/** Matched tokens every rank holds. */
export let walkFull: u32 = 0;
/** Drops noted so far. */
export let walkNoted: i32 = 0;
/** Tokens matched so far. */
export let walkDepth: u32 = 0;
/** Whether the walk met a block no rank holds (later pieces change nothing). */
export let walkEnded = true;

/** Starts a walk from the namespace seed. */
export function walkBegin(seed: u64): void {
  walkKey = seed;
  walkPrev = 0;
  walkPrevCount = <u32>numRanks;
  walkFull = 0;
  walkNoted = 0;
  walkDepth = 0;
  walkEnded = false;
}

/**
 * Walks the next blocks of the prompt: `count` token ids at `tokens` (a whole
 * number of blocks, hashed a block at a time as the walk goes, so nothing past
 * the first unknown block is hashed), or else `count` block hashes at `blocks`.
 * Returns 1 while the walk goes on, 0 once it has ended.
 *
 * The set of ranks holding a node only shrinks along a path, so a rank's match
 * is the depth of the last node before the set drops it. The walk only notes
 * the nodes where the count drops (see `walkEnd`).
 */
export function walkFeed(tokens: usize, blocks: usize, count: i32): i32 {
  if (walkEnded) return 0;
  const numBlocks = tokens != 0 ? count / tokensPerBlock : count;
  let key = walkKey;
  let prev = walkPrev;
  let prevCount = walkPrevCount;
  let full = walkFull;
  let noted = walkNoted;
  let depth = walkDepth;
  for (let d = 0; d < numBlocks; d++) {
    const block = tokens != 0
      ? hashTokens(tokens + (<usize>(d * tokensPerBlock) << 2), tokensPerBlock)
      : load<u64>(blocks + (<usize>d << 3));
    key = chain(key, block);
    const id = step(prev, key);
    if (id == 0) {
      walkEnded = true;
      break;
    }
    const c = resCount(id);
    if (c < prevCount && prevCount < <u32>numRanks) noted = noteDrop(noted, prev, depth); // all ranks get `full` anyway
    depth += <u32>tokensPerBlock;
    if (c == <u32>numRanks) full = depth;
    prev = id;
    prevCount = c;
  }
  walkKey = key;
  walkPrev = prev;
  walkPrevCount = prevCount;
  walkFull = full;
  walkNoted = noted;
  walkDepth = depth;
  return walkEnded ? 0 : 1;
}

/**
 * Ends the walk: writes, for every rank, its matched tokens as u32 at `out`.
 * Every rank is set to the depth of the last node all ranks hold (often a
 * shared system prompt, so no slot is read), then each noted node, shallow to
 * deep, overwrites its ranks with its depth.
 */
export function walkEnd(out: usize): void {
  let noted = walkNoted;
  if (walkPrev != 0 && walkPrevCount < <u32>numRanks) noted = noteDrop(noted, walkPrev, walkDepth);
  walkEnded = true;
  const fill = v128.splat<u32>(walkFull);
  let r = 0;
  for (; r + 4 <= numRanks; r += 4) v128.store(u32At(out, r), fill);
  for (; r < numRanks; r++) store<u32>(u32At(out, r), walkFull);
  for (let i = 0; i < noted; i++) {
    const at = drops + (<usize>i << 3);
    const id = load<u32>(at);
    writeRanks(id, resCount(id), load<u32>(at, 4), out);
  }
}

/** Matched tokens per rank for `numTokens` token ids at `tokens`, written to `out`, in one call. Changes nothing. */
export function indexMatchTokens(seedLo: u32, seedHi: u32, tokens: usize, numTokens: i32, out: usize): void {
  walkBegin((<u64>seedHi << 32) | <u64>seedLo);
  walkFeed(tokens, 0, numTokens);
  walkEnd(out);
}

/** Matched tokens per rank for `count` block hashes at `blocks`, in one call. */
export function indexMatch(seedLo: u32, seedHi: u32, blocks: usize, count: i32, out: usize): void {
  walkBegin((<u64>seedHi << 32) | <u64>seedLo);
  walkFeed(0, blocks, count);
  walkEnd(out);
}

/** Starts a match fed in pieces (`indexMatchFeed`, then `indexMatchEnd`). */
export function indexMatchBegin(seedLo: u32, seedHi: u32): void {
  walkBegin((<u64>seedHi << 32) | <u64>seedLo);
}

/** Feeds a piece: `count` tokens at `tokens` (whole blocks), or with `tokens` 0 block hashes at `blocks`; 1 while the walk goes on. */
export function indexMatchFeed(tokens: usize, blocks: usize, count: i32): i32 {
  return walkFeed(tokens, blocks, count);
}

/** Ends a match fed in pieces, writing matched tokens per rank to `out`. */
export function indexMatchEnd(out: usize): void {
  walkEnd(out);
}

/** Stamps at which the index starts over (32-bit stamps; see `indexInsert`). */
// @ts-ignore: decorator
@inline export const LAST_STAMP: u32 = 0xfffffff0;
/** Times the index was cleared because its stamps ran out. */
export let stampResets: u32 = 0;

// ---- inserting a path ------------------------------------------------------------------
//
// Like a walk, an insert may arrive in pieces; its state lives here between
// calls. Nothing is evicted by capacity until it ends, and the budget never
// takes a block stamped with the insert's own stamp, so the path being built
// stays whole while it is fed.

/** Rank of the insert in progress. */
export let pathRank: i32 = 0;
/** Path key of the last block added. */
export let pathKey: u64 = 0;
/** Node of the last block added (0 = the namespace root). */
export let pathPrev: u32 = 0;
/** The insert's stamp. */
export let pathStamp: u32 = 0;
/** Blocks the rank holds along the path so far. */
export let pathHeld: i32 = 0;
/** Blocks of the path the rank held before the insert (a prefix: views are prefix-closed). */
export let pathFound: i32 = 0;
/** Whether the insert stopped early (the budget cannot hold more, or a block's key is held elsewhere: see flushPending), or no insert is open. */
export let pathStopped = true;

/**
 * Most bytes one block of an insert adds to `indexBytes()` besides the table's
 * growth: a new node with its one-slot block, or a node's residency block
 * moving up a class (see `addCost`). Set by `indexInit`.
 */
export let blockCostBound: f64 = 0;

/** Bytes that adding a residency to node `id` (0: a new node) adds to `indexBytes()`. */
export function addCost(id: u32): f64 {
  if (id == 0) return <f64>NODE_BYTES + <f64>SLOT_BYTES + tableGrowth(1);
  const cls = resClass(id);
  if (cls == 0xff) return <f64>SLOT_BYTES;
  const n = resCount(id);
  return n < classSize(cls) ? 0 : <f64>(classSize(cls + 1) - classSize(cls)) * <f64>SLOT_BYTES;
}

/** Starts an insert of up to `count` blocks into `rank`'s view below `prev` (0 = the root with key `key`), stamped `s`. */
export function pathBegin(rank: i32, key: u64, prev: u32, s: u32, count: i32): void {
  pathRank = rank;
  pathKey = key;
  pathPrev = prev;
  pathStamp = s;
  pathHeld = 0;
  pathFound = 0;
  pathStopped = false;
  // Make room for the whole path at once (cheaper than block by block).
  fitBudget(<f64>count * (<f64>NODE_BYTES + 16) + 16, <u32>count, s);
}

/**
 * Adds the next `count` blocks (hashes at `blocks`) to the path, writing each
 * block's path key to `keysOut` unless it is 0. Returns 1 while the insert goes
 * on, 0 once it stopped: the budget cannot hold another block, or a block's
 * key is held by another node (see flushPending).
 */
export function pathFeed(blocks: usize, count: i32, keysOut: usize): i32 {
  if (pathStopped) return 0;
  const rank = pathRank;
  const s = pathStamp;
  let key = pathKey;
  let prev = pathPrev;
  // Block by block checks only when the budget could run out within this
  // piece: far from it (the 2 GiB default, say), no block can pass it.
  const checked = budget != 0 && indexBytes() + tableGrowth(<u32>count) + <f64>count * blockCostBound > budget;
  for (let d = 0; d < count; d++) {
    const next = chain(key, load<u64>(blocks + (<usize>d << 3)));
    let id = step(prev, next);
    const found = id == 0 ? -1 : findResidency(id, rank);
    if (found >= 0) {
      setSlotStamp(slotAt(<u32>found), s);
      pathFound++;
    } else {
      if (checked) {
        const cost = addCost(id);
        if (indexBytes() + cost > budget) {
          fitBudget(cost, 0, s);
          // Eviction never frees a node on the path, but it may have freed `id`
          // itself (held by other ranks only), so look it up again.
          if (id != 0) id = step(prev, next);
          if (indexBytes() + addCost(id) > budget) {
            pathStopped = true;
            break;
          }
        }
      }
      if (id == 0) id = newNode(next, prev, true);
      addResidency(id, rank, s);
    }
    if (keysOut != 0) store<u64>(keysOut + (<usize>d << 3), next);
    key = next;
    prev = id;
    pathHeld++;
  }
  const undone = flushPending();
  if (undone != 0) {
    // The path ends before its first block whose key another node holds.
    pathStopped = true;
    pathHeld -= <i32>undone;
    prev = undoneParent;
  }
  pathKey = key;
  pathPrev = prev;
  return pathStopped ? 0 : 1;
}

/** Ends the insert: queues the new leaf, enforces capacity and budget; returns the blocks held along the path. */
export function pathEnd(): i32 {
  pathStopped = true;
  const rank = pathRank;
  const prev = pathPrev;
  if (prev != 0) {
    const slot = findResidency(prev, rank);
    if (slot >= 0 && slotIsLeaf(slotAt(<u32>slot))) heapPush(rank, pathStamp, prev);
  }
  maybeCompact(rank);
  if (capacity != 0) {
    while (load<u32>(u32At(rankBlocks, rank)) > capacity) evictFrom(rank, false, 0, 0);
  }
  fitBudget(0, 0, 0);
  return pathHeld;
}


/**
 * Starts inserting a path of up to `count` blocks into `rank`'s view with a new
 * stamp; feed it with `indexInsertFeed`, end it with `indexInsertEnd`.
 */
export function indexInsertBegin(rank: i32, seedLo: u32, seedHi: u32, count: i32): void {
  if (stamp >= LAST_STAMP) clearAll();
  pathBegin(rank, (<u64>seedHi << 32) | <u64>seedLo, 0, ++stamp, count);
}

/** Adds the next `count` block hashes at `blocks` (path keys to `keysOut` unless 0); 1 while the insert goes on. */
export function indexInsertFeed(blocks: usize, count: i32, keysOut: usize): i32 {
  return pathFeed(blocks, count, keysOut);
}

/** Ends the insert (capacity and budget enforced); returns the blocks the rank holds along the path. */
export function indexInsertEnd(): i32 {
  return pathEnd();
}

/**
 * Inserts the block path into `rank`'s view with a new stamp, then enforces
 * capacity and budget, in one call. Returns the blocks the rank now holds
 * along the path (fewer than `count` only when the budget cannot hold it).
 */
export function indexInsert(rank: i32, seedLo: u32, seedHi: u32, blocks: usize, count: i32): i32 {
  if (count == 0) return 0;
  indexInsertBegin(rank, seedLo, seedHi, count);
  pathFeed(blocks, count, 0);
  return pathEnd();
}

/** Empties every rank's view (used when the 32-bit stamps run out, after ~4 billion inserts). */
export function clearAll(): void {
  for (let r = 0; r < numRanks; r++) indexClearRank(r);
  stamp = 0;
  stampResets++;
}

/** Blocks of the last insert's path its rank held before it (what a match of the prompt in that rank would have found). */
export function indexInsertFound(): i32 { return pathFound; }

/** Times the index started over because its stamps ran out. */
export function indexStampResets(): u32 { return stampResets; }

/** Empties `rank`'s view. */
export function indexClearRank(rank: i32): void {
  while (true) {
    const id = heapTop(rank);
    if (id == 0) break;
    heapPop(rank);
    removeLeafResidency(id, rank, 0);
  }
  const h = heapBase(rank);
  heapEntries -= load<u32>(h, 4);
  store<u32>(h, 0, 4);
  shrinkHeap(rank);
}

/** Blocks (paths) in `rank`'s view. */
export function indexBlockCount(rank: i32): u32 {
  return load<u32>(u32At(rankBlocks, rank));
}

/** Live nodes (distinct block paths across ranks). */
export function indexNodeCount(): u32 { return liveNodes; }
/** Live residencies ((block, rank) pairs). */
export function indexResidencyCount(): u32 { return residencies; }
/** Residencies evicted so far. */
export function indexEvictions(): f64 { return evictions; }

/**
 * Removes `rank`'s residency of the node at path key (lo, hi) and of all its
 * descendants in that rank; returns how many were removed (0 if not held).
 */
export function indexRemovePath(rank: i32, lo: u32, hi: u32): u32 {
  keyAll(true);
  const id = lookup((<u64>hi << 32) | <u64>lo);
  if (id == 0 || findResidency(id, rank) < 0) return 0;
  return removeSubtree(id, rank);
}

/**
 * Starts inserting up to `count` blocks below the path with key (parentLo,
 * parentHi), which `rank` must hold; feed with `indexInsertFeed` (each new
 * block's path key to `keysOut`), end with `indexInsertEnd`. Only the parent
 * is restamped; its ancestors take the stamp lazily (see the header), so a
 * chain of n single-block events costs O(n), not O(n²). Returns 0, or -1 when
 * `rank` does not hold the parent path (nothing changes then).
 */
export function indexInsertBelowBegin(rank: i32, parentLo: u32, parentHi: u32, count: i32): i32 {
  const parentKey = (<u64>parentHi << 32) | <u64>parentLo;
  keyAll(true);
  const parent = lookup(parentKey);
  if (parent == 0 || stamp >= LAST_STAMP) return -1;
  const slot = findResidency(parent, rank);
  if (slot < 0) return -1;
  // The parent gets the newest stamp, so the budget's eviction never takes it
  // while the blocks below it are added (its ancestors are not leaves).
  const s = ++stamp;
  setSlotStamp(slotAt(<u32>slot), s);
  pathBegin(rank, parentKey, parent, s, count);
  return 0;
}

/** Enters every node into the table, now and from now on, as a lookup by key does (an index fed KV events; tests' twins). */
export function indexKeyAll(): void {
  keyAll(true);
}

/** Whether `rank` holds the node with path key (lo, hi). */
export function indexHolds(rank: i32, lo: u32, hi: u32): bool {
  keyAll(true);
  const id = lookup((<u64>hi << 32) | <u64>lo);
  return id != 0 && findResidency(id, rank) >= 0;
}

export { indexExportBytes, indexExportBegin, indexExportPiece, indexImportBegin, indexImportPiece, indexImportEnd, indexStamp } from "./prefix-index/snapshot";
export { indexBytes, indexReservedBytes, indexTableBytes } from "./prefix-index/nodes";
