// The multi-rank prefix index: which full blocks of which prompts each rank holds.
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
//                cold 0 parent · 4 nextSibling · 8 prevSibling · 12 firstChild
//   table      open addressing, linear probing, backward-shift deletion:
//                per slot u32 tag (low bits of the key's hash), u32 node (0 = empty); load ≤ 1/2
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

import { idlePageBytes, storageAlloc, storageFree, takePages } from "./pages";

/** Bytes of one node. */
// @ts-ignore: decorator
@inline const NODE_BYTES: usize = 32;
/** Slots of a new index's hash table. */
// @ts-ignore: decorator
@inline const INITIAL_TABLE: u32 = 128;
/** Bytes of one residency slot. */
// @ts-ignore: decorator
@inline const SLOT_BYTES: u32 = 7;
/** Residency block classes (class 31 holds 2^16 slots, at least any rank count). */
// @ts-ignore: decorator
@inline const CLASSES: i32 = 32;
/** Slots in a block of class `cls`: 1, 2, 3, 4, 6, 8, 12, 16, 24, … (growth by 4/3 and 3/2, not 2). */
// @ts-ignore: decorator
@inline function classSize(cls: u32): u32 {
  return cls == 0 ? 1 : (cls & 1) != 0 ? <u32>1 << ((cls + 1) >> 1) : <u32>3 << ((cls >> 1) - 1);
}
/** Children count in a slot that means "look in the overflow table". */
// @ts-ignore: decorator
@inline const KIDS_OVERFLOW: u32 = 255;

/** Ranks. */
let numRanks: i32 = 0;
/** Tokens per block. */
let tokensPerBlock: i32 = 32;
/** Residency capacity per rank (0 = unbounded). */
let capacity: u32 = 0;
/** Accounted-byte budget (0 = unbounded). */
let budget: f64 = 0;

/** log2 of the nodes in one node chunk. */
// @ts-ignore: decorator
@inline const NODE_CHUNK_SHIFT: u32 = 10;
/** Node chunk addresses (u32 each); chunks never move, so growth copies nothing. */
let nodeChunks: usize = 0;
/** Node chunks allocated. */
let nodeChunkCount: u32 = 0;
/** Node capacity (ids below this have storage). */
let nodeCap: u32 = 0;
/** Highest node id ever used + 1. */
let nodeTop: u32 = 1;
/** Head of the free node list (linked through nextSibling). */
let freeNode: u32 = 0;
/** Live nodes. */
let liveNodes: u32 = 0;

/** Hash table. */
let table: usize = 0;
/** Table slots (power of two). */
let tableCap: u32 = 0;

/** log2 of the slots in one residency chunk (at least the largest residency block, and 14 so a chunk is whole 16 KiB pages). */
let slotChunkShift: u32 = 14;
/** Residency chunk addresses (u32 each). */
let slotChunks: usize = 0;
/** Residency chunks allocated. */
let slotChunkCount: u32 = 0;
/** Residency capacity in slots. */
let slotCap: u32 = 0;
/** Bump pointer in slots. */
let slotTop: u32 = 0;
/** Free block list heads per class (slot index + 1, 0 = empty). */
const freeBlocks: usize = memory.data(CLASSES * 4, 16);
/** Slots held by live residency blocks (by class size). */
let slotsInUse: u32 = 0;
/** Live residencies. */
let residencies: u32 = 0;

/** Per rank: residencies (blocks held). */
let rankBlocks: usize = 0;
/** Per rank: leaves. */
let rankLeaves: usize = 0;
/** Per rank: heap pointer, size, capacity (3 × u32). */
let heaps: usize = 0;
/** Heap entries across ranks (accounted bytes). */
let heapEntries: u32 = 0;
/** Entry slots the per-rank heaps hold, used or not (what they take from memory, accounted). */
let heapSlots: f64 = 0;
/** Match scratch: the nodes where a walk's rank set shrinks, with their depths in tokens (2 × u32 each, numRanks + 1 at most). */
let drops: usize = 0;
/** Path scratch (node ids) for insert. */
let path: usize = 0;
/** Path scratch capacity. */
let pathCap: u32 = 0;

/** Stamp counter, one per insert. */
let stamp: u32 = 0;
/** Residencies evicted (capacity or budget). */
let evictions: f64 = 0;

// ---- small accessors ----------------------------------------------------------------

/** The children bits of the kids byte (saturating count). */
// @ts-ignore: decorator
@inline const KIDS_MASK: u32 = 0x7f;
/** The kids-byte flag: node id+1 is a child of this node. */
// @ts-ignore: decorator
@inline const NEXT_IS_CHILD: u32 = 0x80;
/** Bytes of one half (hot or cold) of a node. */
// @ts-ignore: decorator
@inline const HALF: usize = NODE_BYTES / 2;
/** The hot half of node `id`: key, residency block, count and class, children. */
// @ts-ignore: decorator
@inline function nodeAt(id: u32): usize {
  return <usize>load<u32>(nodeChunks + (<usize>(id >> NODE_CHUNK_SHIFT) << 2)) + <usize>(id & ((1 << NODE_CHUNK_SHIFT) - 1)) * HALF;
}
/** The cold half of node `id`: parent, siblings, first child. */
// @ts-ignore: decorator
@inline function coldAt(id: u32): usize {
  return nodeAt(id) + (HALF << NODE_CHUNK_SHIFT);
}
// @ts-ignore: decorator
@inline function slotAt(i: u32): usize {
  return <usize>load<u32>(slotChunks + (<usize>(i >> slotChunkShift) << 2)) + <usize>(i & ((<u32>1 << slotChunkShift) - 1)) * SLOT_BYTES;
}
/** The `k`th slot of a block starting at address `base`. */
// @ts-ignore: decorator
@inline function slotIn(base: usize, k: u32): usize { return base + <usize>k * SLOT_BYTES; }
/** The rank of the slot at `at`. */
// @ts-ignore: decorator
@inline function slotRank(at: usize): i32 { return <i32>load<u16>(at); }
/** The stamp of the slot at `at`. */
// @ts-ignore: decorator
@inline function slotStamp(at: usize): u32 { return load<u32>(at, 2); }
/** Sets the stamp of the slot at `at`. */
// @ts-ignore: decorator
@inline function setSlotStamp(at: usize, s: u32): void { store<u32>(at, s, 2); }
/** Whether the residency at `at` has no children in its rank (a leaf of that rank). */
// @ts-ignore: decorator
@inline function slotIsLeaf(at: usize): bool { return load<u8>(at, 6) == 0; }
// @ts-ignore: decorator
@inline function u32At(base: usize, i: i32): usize { return base + (<usize>i << 2); }
// @ts-ignore: decorator
@inline function keyLo(id: u32): u32 { return load<u32>(nodeAt(id)); }
// @ts-ignore: decorator
@inline function keyHi(id: u32): u32 { return load<u32>(nodeAt(id), 4); }
// @ts-ignore: decorator
@inline function parentOf(id: u32): u32 { return load<u32>(coldAt(id)); }
// @ts-ignore: decorator
@inline function firstChild(id: u32): u32 { return load<u32>(coldAt(id), 12); }
// @ts-ignore: decorator
@inline function nextSibling(id: u32): u32 { return load<u32>(coldAt(id), 4); }
/** The sibling after which `id` was added, so before it in its parent's list (0 = first). */
// @ts-ignore: decorator
@inline function prevSibling(id: u32): u32 { return load<u32>(coldAt(id), 8); }
// @ts-ignore: decorator
@inline function resStart(id: u32): u32 { return load<u32>(nodeAt(id), 8); }
// @ts-ignore: decorator
@inline function resCount(id: u32): u32 { return <u32>load<u16>(nodeAt(id), 12); }
// @ts-ignore: decorator
@inline function resClass(id: u32): u32 { return <u32>load<u8>(nodeAt(id), 14); }

/** Grows a full buffer of `used` bytes to `bytes`, copying it; returns the new address. */
function grow(old: usize, used: usize, bytes: usize): usize {
  const fresh = storageAlloc(bytes);
  if (old != 0) {
    memory.copy(fresh, old, used);
    storageFree(old, used);
  }
  return fresh;
}

// ---- hashing ----------------------------------------------------------------------------

/** 64-bit finalizer (murmur3 fmix64). */
// @ts-ignore: decorator
@inline function fmix(h: u64): u64 {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccd;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53;
  h ^= h >> 33;
  return h;
}

/** xxh64 primes. */
// @ts-ignore: decorator
@inline const P1: u64 = 0x9e3779b185ebca87;
// @ts-ignore: decorator
@inline const P2: u64 = 0xc2b2ae3d27d4eb4f;
// @ts-ignore: decorator
@inline const P3: u64 = 0x165667b19e3779f9;

/** One accumulator round: xor the input in, rotate, multiply (both bijections). */
// @ts-ignore: decorator
@inline function round(acc: u64, v: u64): u64 { return rotl<u64>(acc ^ v, 29) * P1; }

/**
 * Hash of `count` u32 tokens at `ptr`: four independent lanes, two tokens per
 * lane step and one multiply per step, so the CPU overlaps the four chains. A
 * block that differs in one lane's input differs in that lane's state (every
 * step is a bijection), hence in the combined hash.
 */
function hashTokens(ptr: usize, count: i32): u64 {
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
@inline function chain(parent: u64, block: u64): u64 {
  return rotl<u64>(parent, 23) * 0x9e3779b97f4a7c15 ^ block;
}

/** Hash of a caller-given block key (engine or trace block id), kept apart from token hashes. */
// @ts-ignore: decorator
@inline function hashBlockKey(key: u64): u64 {
  return fmix(key ^ 0xd6e8feb86659fd93) ^ 0x2545f4914f6cdd1d;
}

// ---- hash table -------------------------------------------------------------------------

// Each slot holds the low 32 bits of fmix(key) (the "tag", which also gives the
// home slot) and the node id, so removal and growth never touch the nodes.

/** The node with path key `key`, or 0. */
function lookup(key: u64): u32 {
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
function tablePut(tag: u32, id: u32): void {
  const mask = tableCap - 1;
  let i = tag & mask;
  while (load<u32>(table + (<usize>i << 3), 4) != 0) i = (i + 1) & mask;
  store<u32>(table + (<usize>i << 3), tag);
  store<u32>(table + (<usize>i << 3), id, 4);
}

/** Inserts node `id` (its key already set) unless the table holds its key; whether it did. */
function tableInsertUnique(id: u32): bool {
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
function tableInsert(id: u32): void {
  tablePut(<u32>fmix((<u64>keyHi(id) << 32) | <u64>keyLo(id)), id);
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

/** Removes node `id` from the table (backward-shift deletion keeps probe chains intact). */
function tableRemove(id: u32): void {
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
function tableAlloc(cap: u32): usize {
  const bytes = <usize>cap << 3;
  const at = storageAlloc(bytes);
  memory.fill(at, 0, bytes);
  return at;
}

/** Doubles the table and re-places every entry by its tag. */
function growTable(): void {
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

// ---- residency blocks ---------------------------------------------------------------

/** Appends a chunk address to a chunk table of `count` entries; returns the (maybe moved) table. */
function appendChunk(chunks: usize, count: u32, chunk: usize): usize {
  // Full at 0, 4, 8, 16, … entries (4 at least are allocated).
  if (count == 0 || (count >= 4 && (count & (count - 1)) == 0)) chunks = grow(chunks, <usize>count << 2, <usize>max<u32>(count << 1, 4) << 2);
  store<u32>(chunks + (<usize>count << 2), <u32>chunk);
  return chunks;
}

/** Pushes a free block of class `cls` on its class list (no accounting). */
function pushFree(start: u32, cls: u32): void {
  store<u32>(slotAt(start), load<u32>(u32At(freeBlocks, cls)));
  store<u32>(u32At(freeBlocks, cls), start + 1);
}

/** Puts the `rest` free slots from `start` on the free lists as blocks of class at most `cls`, largest first. */
function pushRest(start: u32, rest: u32, cls: u32): void {
  let c = cls;
  while (rest > 0) {
    while (classSize(c) > rest) c--;
    pushFree(start, c);
    start += classSize(c);
    rest -= classSize(c);
  }
}

/** Allocates a block of class `cls`; returns its first slot. */
function allocBlock(cls: u32): u32 {
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
    slotChunks = appendChunk(slotChunks, slotChunkCount++, takePages(<usize>chunkSlots * SLOT_BYTES));
    slotCap += chunkSlots;
  }
  const s = slotTop;
  slotTop += size;
  return s;
}

/** Returns a block of class `cls` to its free list. */
function freeBlock(start: u32, cls: u32): void {
  pushFree(start, cls);
  slotsInUse -= classSize(cls);
}

// ---- children counts past 254 ---------------------------------------------------------

/** Overflow table (16-byte entries; key 0 = empty). */
let overflow: usize = 0;
/** Overflow table entries (power of two, or 0 before first use). */
let overflowCap: u32 = 0;
/** Overflow entries in use. */
let overflowUsed: u32 = 0;

/** The overflow key of `rank`'s residency in node `id` (never 0: ids start at 1). */
// @ts-ignore: decorator
@inline function overflowKey(id: u32, rank: i32): u64 { return (<u64>id << 16) | <u64><u32>rank; }

/** The overflow entry for `key` (present by contract). */
function overflowFind(key: u64): usize {
  const mask = overflowCap - 1;
  let i = <u32>fmix(key) & mask;
  while (load<u64>(overflow + (<usize>i << 4)) != key) i = (i + 1) & mask;
  return overflow + (<usize>i << 4);
}

/** Adds `key` with `count` children. */
function overflowPut(key: u64, count: u32): void {
  if ((overflowUsed + 1) * 2 > overflowCap) {
    const old = overflow;
    const oldCap = overflowCap;
    overflowCap = max<u32>(oldCap << 1, 16);
    overflow = storageAlloc(<usize>overflowCap << 4);
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

/** Removes `key` (present by contract), backward-shifting its probe chain. */
function overflowRemove(key: u64): void {
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
function childAdded(ps: usize, id: u32, rank: i32): u32 {
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
function childRemoved(ps: usize, id: u32, rank: i32): u32 {
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
function findResidency(id: u32, rank: i32): i32 {
  const start = resStart(id);
  const n = resCount(id);
  if (n == 0) return -1;
  const base = slotAt(start); // a block never straddles chunks
  for (let k: u32 = 0; k < n; k++) {
    if (slotRank(slotIn(base, k)) == rank) return <i32>(start + k);
  }
  return -1;
}

// ---- heaps of u64 entries --------------------------------------------------------------
//
// Both heaps below hold u64 entries (stamp << 32 | payload) ordered as integers,
// so the least recent stamp is on top; they share these two sift routines.

/** Moves `entry` up from slot `i` of the heap at `data`; returns its final slot. */
function siftUp(data: usize, i: u32, entry: u64): u32 {
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
function siftDown(data: usize, size: u32, i: u32, entry: u64): void {
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
@inline function heapBase(rank: i32): usize { return heaps + <usize>rank * 12; }

/** The stamp on top of `rank`'s heap (the heap must not be empty). */
// @ts-ignore: decorator
@inline function topStamp(rank: i32): u32 { return load<u32>(<usize>load<u32>(heapBase(rank)), 4); }

/** Pushes (s, id) onto `rank`'s heap. */
function heapPush(rank: i32, s: u32, id: u32): void {
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
let tops: usize = 0;
/** Entries in use. */
let topsSize: u32 = 0;
/** Entries allocated. */
let topsCap: u32 = 0;

/** Adds (s, rank). */
function topsPush(s: u32, rank: i32): void {
  if (topsSize == topsCap) {
    const cap = topsCap == 0 ? 16 : topsCap << 1;
    tops = grow(tops, <usize>topsSize << 3, <usize>cap << 3);
    topsCap = cap;
  }
  siftUp(tops, topsSize++, (<u64>s << 32) | <u64><u32>rank);
}

/** Removes the smallest entry. */
function topsPop(): void {
  const size = --topsSize;
  if (size > 0) siftDown(tops, size, 0, load<u64>(tops + (<usize>size << 3)));
}

/** Rebuilds the rank tops from each rank's current top, when stale entries pile up. */
function topsCompact(): void {
  topsSize = 0;
  for (let r = 0; r < numRanks; r++) {
    if (heapTop(r) != 0) topsPush(topStamp(r), r);
  }
}

/** Removes the top of `rank`'s heap. */
function heapPop(rank: i32): void {
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
function shrinkHeap(rank: i32): void {
  const h = heapBase(rank);
  const size = load<u32>(h, 4);
  const cap = load<u32>(h, 8);
  if (cap <= 16 || size * 4 >= cap) return;
  const half = cap >> 1;
  const data = <usize>load<u32>(h);
  const fresh = storageAlloc(<usize>half << 3);
  memory.copy(fresh, data, <usize>size << 3);
  storageFree(data, <usize>cap << 3);
  store<u32>(h, <u32>fresh);
  store<u32>(h, half, 8);
  heapSlots -= <f64>(cap - half);
}

/** Whether heap entry (s, id) still names a leaf of `rank` stamped s. */
function entryValid(rank: i32, s: u32, id: u32): bool {
  if (id >= nodeTop || resCount(id) == 0) return false;
  const slot = findResidency(id, rank);
  if (slot < 0) return false;
  const at = slotAt(<u32>slot);
  return slotIsLeaf(at) && slotStamp(at) == s;
}

/** Drops stale entries from the top of `rank`'s heap; returns the valid top node or 0. */
function heapTop(rank: i32): u32 {
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
function maybeCompact(rank: i32): void {
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

// ---- nodes ------------------------------------------------------------------------------

/** Nodes created by the insert in progress whose table entries are still to be made. */
let pending: usize = 0;
/** Pending node ids. */
let pendingCount: u32 = 0;
/** Pending capacity. */
let pendingCap: u32 = 0;

/**
 * Creates the node for path key `key` under `parent`. With `deferTable`, its
 * table entry waits for `flushPending`: an insert's new blocks are never looked
 * up while it runs (a new node has no next blocks, so the walk below it never
 * probes), and entering them together lets their random table slots be fetched
 * at once instead of one miss at a time.
 */
function newNode(key: u64, parent: u32, deferTable: bool): u32 {
  let id = freeNode;
  if (id != 0) {
    freeNode = nextSibling(id);
  } else {
    if (nodeTop == nodeCap) {
      nodeChunks = appendChunk(nodeChunks, nodeChunkCount++, takePages(<usize>NODE_BYTES << NODE_CHUNK_SHIFT));
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
  if (liveNodes * 2 > tableCap) growTable();
  if (deferTable) {
    if (pendingCount == pendingCap) {
      const cap = max<u32>(pendingCap << 1, 64);
      pending = grow(pending, <usize>pendingCap << 2, <usize>cap << 2);
      pendingCap = cap;
    }
    store<u32>(pending + (<usize>pendingCount << 2), id);
    pendingCount++;
  } else {
    tableInsert(id);
  }
  return id;
}

/**
 * Counts child `id` into (`added`) or out of `parent`'s kids byte: the count
 * saturates at KIDS_MASK and then stays "many", and the flag says whether
 * id = parent + 1 is the child.
 */
function countChild(parent: u32, id: u32, added: bool): void {
  const pa = nodeAt(parent);
  let kids = <u32>load<u8>(pa, 15);
  if ((kids & KIDS_MASK) < KIDS_MASK) kids = added ? kids + 1 : kids - 1;
  if (id == parent + 1) kids = added ? kids | NEXT_IS_CHILD : kids & ~NEXT_IS_CHILD;
  store<u8>(pa, <u8>kids, 15);
}

/** Parent of the first node the last `flushPending` undid (0: the root). */
let undoneParent: u32 = 0;
/** Whether the node being freed was never entered into the table (an undone pending node). */
let freeingPending = false;

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
function flushPending(): u32 {
  const count = pendingCount;
  pendingCount = 0;
  for (let i: u32 = 0; i < count; i++) {
    if (tableInsertUnique(load<u32>(pending + (<usize>i << 2)))) continue;
    undoneParent = parentOf(load<u32>(pending + (<usize>i << 2)));
    freeingPending = true;
    for (let k = count; k > i; k--) removeLeafResidency(load<u32>(pending + (<usize>(k - 1) << 2)), pathRank, 0);
    freeingPending = false;
    return count - i;
  }
  return 0;
}

/** Frees node `id`, which holds no residency and so has no live child. */
function freeNodeId(id: u32): void {
  if (!freeingPending) tableRemove(id);
  const at = nodeAt(id);
  const cold = coldAt(id);
  const parent = parentOf(id);
  const next = load<u32>(cold, 4);
  const prev = load<u32>(cold, 8);
  if (prev != 0) store<u32>(coldAt(prev), next, 4);
  else if (parent != 0) store<u32>(coldAt(parent), next, 12);
  if (next != 0) store<u32>(coldAt(next), prev, 8);
  if (parent != 0) countChild(parent, id, false);
  const cls = resClass(id);
  if (cls != 0xff) freeBlock(resStart(id), cls);
  store<u32>(at, 0);
  store<u32>(at, 0, 4);
  store<u16>(at, 0, 12);
  store<u8>(at, 0xff, 14);
  store<u8>(at, 0, 15);
  store<u32>(cold, freeNode, 4);
  freeNode = id;
  liveNodes--;
}

/** Adds `rank`'s residency to node `id` with stamp `s`; returns its slot. */
function addResidency(id: u32, rank: i32, s: u32): u32 {
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
function removeLeafResidency(id: u32, rank: i32, chain: u32): u32 {
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
function reservePath(n: u32): void {
  if (n <= pathCap) return;
  let cap = pathCap;
  while (cap < n) cap <<= 1;
  path = grow(path, <usize>pathCap << 2, <usize>cap << 2);
  pathCap = cap;
}

/** Removes `rank`'s residency of `id` and of every descendant holding it; returns how many. */
function removeSubtree(id: u32, rank: i32): u32 {
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
@inline function mustEvict(rank: i32, byBudget: bool, reserve: f64, extraNodes: u32): bool {
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
function evictFrom(rank: i32, byBudget: bool, reserve: f64, extraNodes: u32): bool {
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
function tableGrowth(extra: u32): f64 {
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
function fitBudget(reserve: f64, extraNodes: u32, protect: u32): void {
  if (budget == 0) return;
  if (topsSize > <u32>(4 * numRanks + 64)) topsCompact();
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

// ---- public ABI -----------------------------------------------------------------------

/** Sets the index up; returns 0, or -1 when the budget cannot hold one block. */
export function indexInit(ranks: i32, blockTokens: i32, capacityPerRank: u32, maxBytes: f64): i32 {
  numRanks = ranks;
  tokensPerBlock = blockTokens;
  capacity = capacityPerRank;
  budget = maxBytes;
  if (budget != 0 && budget < <f64>numRanks * 32 + <f64>INITIAL_TABLE * 8 + <f64>NODE_BYTES + 16 + 8) return -1;
  nodeChunks = appendChunk(0, 0, takePages(<usize>NODE_BYTES << NODE_CHUNK_SHIFT));
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
  slotChunks = appendChunk(0, 0, takePages(<usize>SLOT_BYTES << slotChunkShift));
  slotChunkCount = 1;
  slotCap = <u32>1 << slotChunkShift;
  const perRank = <usize>ranks << 2;
  rankBlocks = storageAlloc(perRank);
  memory.fill(rankBlocks, 0, perRank);
  rankLeaves = storageAlloc(perRank);
  memory.fill(rankLeaves, 0, perRank);
  drops = storageAlloc(<usize>(ranks + 1) << 3);
  heaps = storageAlloc(<usize>ranks * 12);
  memory.fill(heaps, 0, <usize>ranks * 12);
  pathCap = 64;
  path = storageAlloc(<usize>pathCap << 2);
  return 0;
}

/** Hashes `numTokens` tokens at `tokens` into the block hashes of its full blocks at `out`; returns the block count. */
export function hashBlocks(tokens: usize, numTokens: i32, out: usize): i32 {
  const n = numTokens / tokensPerBlock;
  for (let b = 0; b < n; b++) {
    store<u64>(out + (<usize>b << 3), hashTokens(tokens + (<usize>(b * tokensPerBlock) << 2), tokensPerBlock));
  }
  return n;
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
@inline function step(prev: u32, key: u64): u32 {
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
@inline function noteDrop(noted: i32, id: u32, tokens: u32): i32 {
  store<u32>(drops + (<usize>noted << 3), id);
  store<u32>(drops + (<usize>noted << 3), tokens, 4);
  return noted + 1;
}

/** Writes `tokens` matched tokens for every rank holding `id` (`count` residencies). */
// @ts-ignore: decorator
@inline function writeRanks(id: u32, count: u32, tokens: u32, out: usize): void {
  const base = slotAt(resStart(id)); // a block never straddles chunks
  for (let k: u32 = 0; k < count; k++) store<u32>(u32At(out, slotRank(slotIn(base, k))), tokens);
}

// ---- the match walk ----------------------------------------------------------------
//
// A walk may be fed a prompt in pieces (the shell's scratch holds a bounded
// piece of a long prompt), so its state lives in these globals between calls.

/** Path key of the last block fed. */
let walkKey: u64 = 0;
/** Node of the deepest block matched so far (0 = none). */
let walkPrev: u32 = 0;
/** Ranks holding `walkPrev` (numRanks before the first block). */
let walkPrevCount: u32 = 0;
/** Matched tokens every rank holds. */
let walkFull: u32 = 0;
/** Drops noted so far. */
let walkNoted: i32 = 0;
/** Tokens matched so far. */
let walkDepth: u32 = 0;
/** Whether the walk met a block no rank holds (later pieces change nothing). */
let walkEnded = true;

/** Starts a walk from the namespace seed. */
function walkBegin(seed: u64): void {
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
function walkFeed(tokens: usize, blocks: usize, count: i32): i32 {
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
function walkEnd(out: usize): void {
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
@inline const LAST_STAMP: u32 = 0xfffffff0;
/** Times the index was cleared because its stamps ran out. */
let stampResets: u32 = 0;

// ---- inserting a path ------------------------------------------------------------------
//
// Like a walk, an insert may arrive in pieces; its state lives here between
// calls. Nothing is evicted by capacity until it ends, and the budget never
// takes a block stamped with the insert's own stamp, so the path being built
// stays whole while it is fed.

/** Rank of the insert in progress. */
let pathRank: i32 = 0;
/** Path key of the last block added. */
let pathKey: u64 = 0;
/** Node of the last block added (0 = the namespace root). */
let pathPrev: u32 = 0;
/** The insert's stamp. */
let pathStamp: u32 = 0;
/** Blocks the rank holds along the path so far. */
let pathHeld: i32 = 0;
/** Whether the insert stopped early (the budget cannot hold more, or a block's key is held elsewhere: see flushPending), or no insert is open. */
let pathStopped = true;

/**
 * Most bytes one block of an insert adds to `indexBytes()` besides the table's
 * growth: a new node with its one-slot block, or a node's residency block
 * moving up a class (see `addCost`). Set by `indexInit`.
 */
let blockCostBound: f64 = 0;

/** Bytes that adding a residency to node `id` (0: a new node) adds to `indexBytes()`. */
function addCost(id: u32): f64 {
  if (id == 0) return <f64>NODE_BYTES + <f64>SLOT_BYTES + tableGrowth(1);
  const cls = resClass(id);
  if (cls == 0xff) return <f64>SLOT_BYTES;
  const n = resCount(id);
  return n < classSize(cls) ? 0 : <f64>(classSize(cls + 1) - classSize(cls)) * <f64>SLOT_BYTES;
}

/** Starts an insert of up to `count` blocks into `rank`'s view below `prev` (0 = the root with key `key`), stamped `s`. */
function pathBegin(rank: i32, key: u64, prev: u32, s: u32, count: i32): void {
  pathRank = rank;
  pathKey = key;
  pathPrev = prev;
  pathStamp = s;
  pathHeld = 0;
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
function pathFeed(blocks: usize, count: i32, keysOut: usize): i32 {
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
function pathEnd(): i32 {
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
function clearAll(): void {
  for (let r = 0; r < numRanks; r++) indexClearRank(r);
  stamp = 0;
  stampResets++;
}

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

/** Whether `rank` holds the node with path key (lo, hi). */
export function indexHolds(rank: i32, lo: u32, hi: u32): bool {
  const id = lookup((<u64>hi << 32) | <u64>lo);
  return id != 0 && findResidency(id, rank) >= 0;
}

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
@inline const RECORD_BYTES: u32 = 24;

/** Bytes `indexExport` writes in all. */
export function indexExportBytes(): f64 {
  return <f64>liveNodes * <f64>RECORD_BYTES + <f64>residencies * 8;
}

/** Next id to look at for a root. */
let exportScan: u32 = 1;
/** Root of the tree being walked. */
let exportRoot: u32 = 0;
/** Next node to write (0 = done). */
let exportNext: u32 = 0;

/**
 * The node after `id` in the depth-first order of the export (0 = none left).
 * Children are listed newest first, and an import adds each in front, so the
 * export visits them oldest first (from the end of the list): a restored
 * index lists them in the same order and snapshots byte for byte the same.
 */
function exportAfter(id: u32): u32 {
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

/** Starts an export. */
export function indexExportBegin(): void {
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
@inline const BAD_STAMP_NOW: i32 = -1;
// @ts-ignore: decorator
@inline const BAD_COUNT: i32 = -2;
// @ts-ignore: decorator
@inline const BAD_FLAG: i32 = -3;
// @ts-ignore: decorator
@inline const DUPLICATE_KEY: i32 = -4;
// @ts-ignore: decorator
@inline const UNKNOWN_PARENT: i32 = -5;
// @ts-ignore: decorator
@inline const BAD_RANK: i32 = -6;
// @ts-ignore: decorator
@inline const BAD_STAMP: i32 = -7;
// @ts-ignore: decorator
@inline const DUPLICATE_RANK: i32 = -8;
// @ts-ignore: decorator
@inline const PARENT_NOT_HELD: i32 = -9;
// @ts-ignore: decorator
@inline const OVER_BUDGET: i32 = -10;
// @ts-ignore: decorator
@inline const OVER_CAPACITY: i32 = -11;
// @ts-ignore: decorator
@inline const OUT_OF_MEMORY: i32 = -12;

/** Per rank, while importing: [node that last added the rank, node whose slot is noted, that slot]. */
let importMarks: usize = 0;

/** Starts an import into this freshly initialised index whose stamp counter is `stampNow`; 0, or a negative reason. */
export function indexImportBegin(stampNow: u32): i32 {
  if (stampNow >= LAST_STAMP) return BAD_STAMP_NOW;
  const bytes = <usize>numRanks * 12;
  importMarks = storageAlloc(bytes);
  if (importMarks == 0) return OUT_OF_MEMORY;
  memory.fill(importMarks, 0, bytes);
  stamp = stampNow;
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
