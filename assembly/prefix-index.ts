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
// an insert stamps a whole path, so a parent's stamp is never older than its
// child's and the least-recently-stamped leaf of a rank is its heap minimum.
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
  // Bump-allocate; a block that would straddle two chunks starts the next one,
  // and the rest of this chunk goes to the free lists, largest classes first.
  const chunkSlots: u32 = <u32>1 << slotChunkShift;
  const offset = slotTop & (chunkSlots - 1);
  if (slotTop < slotCap && offset + size > chunkSlots) {
    let rest = chunkSlots - offset;
    let c = cls;
    while (rest > 0) {
      while (classSize(c) > rest) c--;
      pushFree(slotTop, c);
      slotTop += classSize(c);
      rest -= classSize(c);
    }
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
    cap = cap == 0 ? 4 : cap << 1;
    data = grow(data, <usize>size << 3, <usize>cap << 3);
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

/** Makes the table entries of the nodes `newNode` deferred. */
function flushPending(): void {
  for (let i: u32 = 0; i < pendingCount; i++) tableInsert(load<u32>(pending + (<usize>i << 2)));
  pendingCount = 0;
}

/** Frees node `id`, which holds no residency and so has no live child. */
function freeNodeId(id: u32): void {
  tableRemove(id);
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
  memory.copy(slotAt(slot), slotAt(start + n - 1), SLOT_BYTES);
  store<u16>(nodeAt(id), <u16>(n - 1), 12);
  residencies--;
  store<u32>(u32At(rankBlocks, rank), load<u32>(u32At(rankBlocks, rank)) - 1);
  store<u32>(u32At(rankLeaves, rank), load<u32>(u32At(rankLeaves, rank)) - 1);
  const parent = parentOf(id);
  let next: u32 = 0;
  if (parent != 0) {
    const ps = slotAt(<u32>findResidency(parent, rank));
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
 * (by block class), heap entries and the per-rank arrays.
 */
export function indexBytes(): f64 {
  return <f64>liveNodes * <f64>NODE_BYTES + <f64>tableCap * 8 + <f64>slotsInUse * <f64>SLOT_BYTES + <f64>overflowCap * 16 +
    <f64>(heapEntries + topsSize) * 8 + <f64>numRanks * 32;
}

/** Bytes of the hash table. */
export function indexTableBytes(): f64 {
  return <f64>tableCap * 8;
}

/** Bytes the table must grow by to take `extra` more nodes (load ≤ 1/2). */
function tableGrowth(extra: u32): f64 {
  let cap = tableCap;
  while ((<u64>liveNodes + <u64>extra) * 2 > <u64>cap) cap <<= 1;
  return <f64>(cap - tableCap) * 8;
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
 * bytes and `extraNodes` more nodes (with the table growth they need) fit the budget.
 */
function fitBudget(reserve: f64, extraNodes: u32): void {
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
  while (classSize(top) < <u32>ranks) top++;
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
  return lookup(key);
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

/**
 * Writes, for every rank, the matched tokens of a prompt as u32 at `out`, from
 * one walk. With `tokens` != 0 the prompt is `count` token ids there, hashed a
 * block at a time as the walk goes (so nothing past the first unknown block is
 * hashed); otherwise `blocks` holds `count` block hashes. Changes nothing.
 *
 * The set of ranks holding a node only shrinks along a path, so a rank's match
 * is the depth of the last node before the set drops it. The walk only notes
 * the nodes where the count drops; then every rank is set to the depth of the
 * last node all ranks hold (often a shared system prompt, so no slot is read),
 * and each noted node, shallow to deep, overwrites its ranks with its depth.
 */
function matchWalk(seed: u64, tokens: usize, blocks: usize, count: i32, out: usize): void {
  const numBlocks = tokens != 0 ? count / tokensPerBlock : count;
  let key = seed;
  let prev: u32 = 0;
  let prevCount: u32 = <u32>numRanks;
  let full: u32 = 0; // matched tokens every rank holds
  let noted = 0;
  let d = 0;
  for (; d < numBlocks; d++) {
    const block = tokens != 0
      ? hashTokens(tokens + (<usize>(d * tokensPerBlock) << 2), tokensPerBlock)
      : load<u64>(blocks + (<usize>d << 3));
    key = chain(key, block);
    const id = step(prev, key);
    if (id == 0) break;
    const c = resCount(id);
    if (c < prevCount && prevCount < <u32>numRanks) noted = noteDrop(noted, prev, <u32>(d * tokensPerBlock)); // all ranks get `full` anyway
    if (c == <u32>numRanks) full = <u32>((d + 1) * tokensPerBlock);
    prev = id;
    prevCount = c;
  }
  if (prev != 0 && prevCount < <u32>numRanks) noted = noteDrop(noted, prev, <u32>(d * tokensPerBlock));
  const fill = v128.splat<u32>(full);
  let r = 0;
  for (; r + 4 <= numRanks; r += 4) v128.store(u32At(out, r), fill);
  for (; r < numRanks; r++) store<u32>(u32At(out, r), full);
  for (let i = 0; i < noted; i++) {
    const at = drops + (<usize>i << 3);
    const id = load<u32>(at);
    writeRanks(id, resCount(id), load<u32>(at, 4), out);
  }
}

/** Matched tokens per rank for `numTokens` token ids at `tokens` (see `matchWalk`). */
export function indexMatchTokens(seedLo: u32, seedHi: u32, tokens: usize, numTokens: i32, out: usize): void {
  matchWalk((<u64>seedHi << 32) | <u64>seedLo, tokens, 0, numTokens, out);
}

/** Matched tokens per rank for `count` block hashes at `blocks` (see `matchWalk`). */
export function indexMatch(seedLo: u32, seedHi: u32, blocks: usize, count: i32, out: usize): void {
  matchWalk((<u64>seedHi << 32) | <u64>seedLo, 0, blocks, count, out);
}

/** Stamps at which the index starts over (32-bit stamps; see `indexInsert`). */
// @ts-ignore: decorator
@inline const LAST_STAMP: u32 = 0xfffffff0;
/** Times the index was cleared because its stamps ran out. */
let stampResets: u32 = 0;

/**
 * Inserts the block path into `rank`'s view with a new stamp, then enforces
 * capacity and budget. Returns the blocks the rank now holds along the path
 * (fewer than `count` only when the hash table would have to grow past the budget).
 */
export function indexInsert(rank: i32, seedLo: u32, seedHi: u32, blocks: usize, count: i32): i32 {
  if (count == 0) return 0;
  if (stamp >= LAST_STAMP) clearAll();
  fitBudget(<f64>count * (<f64>NODE_BYTES + 16) + 16, <u32>count);
  return extendPath(rank, (<u64>seedHi << 32) | <u64>seedLo, 0, 0, blocks, count, ++stamp, 0);
}

/**
 * Adds the blocks below node `prev` (0 = the namespace root with key `key`; else
 * held by `rank` in residency `slot`) to `rank`'s view with stamp `s`, writing
 * each block's path key to `keysOut` unless it is 0; then pushes the new leaf,
 * enforces capacity and budget. Returns the blocks now held along the way.
 */
function extendPath(rank: i32, key: u64, prev: u32, slot: u32, blocks: usize, count: i32, s: u32, keysOut: usize): i32 {
  let held = 0;
  for (let d = 0; d < count; d++) {
    key = chain(key, load<u64>(blocks + (<usize>d << 3)));
    let id = step(prev, key);
    const found = id == 0 ? -1 : findResidency(id, rank);
    if (found >= 0) {
      slot = <u32>found;
      setSlotStamp(slotAt(slot), s);
    } else {
      // A table that must double past the budget ends the insert (it never shrinks).
      if (id == 0 && budget != 0) {
        const growth = tableGrowth(1);
        if (growth > 0 && indexBytes() + growth > budget) break;
      }
      if (id == 0) id = newNode(key, prev, true);
      slot = addResidency(id, rank, s);
    }
    if (keysOut != 0) store<u64>(keysOut + (<usize>d << 3), key);
    prev = id;
    held++;
  }
  flushPending();
  if (prev != 0 && slotIsLeaf(slotAt(slot))) heapPush(rank, s, prev);
  maybeCompact(rank);
  if (capacity != 0) {
    while (load<u32>(u32At(rankBlocks, rank)) > capacity) evictFrom(rank, false, 0, 0);
  }
  fitBudget(0, 0);
  return held;
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
 * Inserts blocks below the path with key (parentLo, parentHi), which `rank`
 * must hold (it and its ancestors are restamped, as for a whole-path insert),
 * and writes each new block's path key (u64) to `keysOut`. Returns the blocks
 * inserted, or -1 when `rank` does not hold the parent path.
 */
export function indexInsertBelow(rank: i32, parentLo: u32, parentHi: u32, blocks: usize, count: i32, keysOut: usize): i32 {
  const parentKey = (<u64>parentHi << 32) | <u64>parentLo;
  const parent = lookup(parentKey);
  if (parent == 0 || findResidency(parent, rank) < 0) return -1;
  if (stamp >= LAST_STAMP) return -1;
  // Eviction may not touch the parent path while we extend it: restamp it first,
  // so it is the newest in the rank, then make room.
  const s0 = ++stamp;
  let up = parent;
  while (up != 0) {
    setSlotStamp(slotAt(<u32>findResidency(up, rank)), s0);
    up = parentOf(up);
  }
  fitBudget(<f64>count * (<f64>NODE_BYTES + 16) + 16, <u32>count);
  const slot = findResidency(parent, rank);
  if (slot < 0) return -1;
  return extendPath(rank, parentKey, parent, <u32>slot, blocks, count, s0, keysOut);
}

/** Writes the path key (u64) of each prefix of the block path to `keysOut`. */
export function indexPathKeys(seedLo: u32, seedHi: u32, blocks: usize, count: i32, keysOut: usize): void {
  let key = (<u64>seedHi << 32) | <u64>seedLo;
  for (let d = 0; d < count; d++) {
    key = chain(key, load<u64>(blocks + (<usize>d << 3)));
    store<u64>(keysOut + (<usize>d << 3), key);
  }
}

/** Whether `rank` holds the node with path key (lo, hi). */
export function indexHolds(rank: i32, lo: u32, hi: u32): bool {
  const id = lookup((<u64>hi << 32) | <u64>lo);
  return id != 0 && findResidency(id, rank) >= 0;
}

// ---- snapshot -----------------------------------------------------------------------
//
// An index snapshot lists live nodes parents first, each as
//   u32 keyLo · u32 keyHi · i32 parent (position in the list, -1 for none) · u32 count
//   then `count` residencies {u32 rank, u32 stamp}
// Node ids, the table layout and the heaps are rebuilt on import; stamps, and so
// the eviction order, are kept exactly.

/** Bytes `indexExport` writes. */
export function indexExportBytes(): f64 {
  return <f64>liveNodes * 16 + <f64>residencies * 8;
}

/** Writes the snapshot to `out`; returns the number of nodes written. */
export function indexExport(out: usize): u32 {
  // Breadth-first from every root, through the child lists: parents come first.
  reservePath(liveNodes + 1);
  let length: u32 = 0;
  for (let id: u32 = 1; id < nodeTop; id++) {
    if (resCount(id) > 0 && parentOf(id) == 0) {
      store<u32>(path + (<usize>length << 2), id);
      length++;
    }
  }
  let at = out;
  for (let i: u32 = 0; i < length; i++) {
    const id = load<u32>(path + (<usize>i << 2));
    let child = firstChild(id);
    while (child != 0) {
      store<u32>(path + (<usize>length << 2), child);
      length++;
      child = nextSibling(child);
    }
  }
  // Node id → list position, so children can name their parent's position.
  const position = storageAlloc(<usize>nodeTop << 2);
  for (let i: u32 = 0; i < length; i++) store<u32>(position + (<usize>load<u32>(path + (<usize>i << 2)) << 2), i);
  for (let i: u32 = 0; i < length; i++) {
    const id = load<u32>(path + (<usize>i << 2));
    const parent = parentOf(id);
    const n = resCount(id);
    store<u32>(at, keyLo(id));
    store<u32>(at, keyHi(id), 4);
    store<i32>(at, parent == 0 ? -1 : <i32>load<u32>(position + (<usize>parent << 2)), 8);
    store<u32>(at, n, 12);
    at += 16;
    const start = resStart(id);
    for (let k: u32 = 0; k < n; k++) {
      const sa = slotAt(start + k);
      store<u32>(at, <u32>slotRank(sa));
      store<u32>(at, slotStamp(sa), 4);
      at += 8;
    }
  }
  storageFree(position, <usize>nodeTop << 2);
  return length;
}

/** Rebuilds the index (freshly initialised) from a snapshot of `count` nodes at `data`. */
export function indexImport(data: usize, count: u32, stampNow: u32, evicted: f64, resets: u32): void {
  const ids = storageAlloc(<usize>(count + 1) << 2);
  let at = data;
  for (let i: u32 = 0; i < count; i++) {
    const key = (<u64>load<u32>(at, 4) << 32) | <u64>load<u32>(at);
    const parentPos = load<i32>(at, 8);
    const n = load<u32>(at, 12);
    at += 16;
    const parent = parentPos < 0 ? 0 : load<u32>(ids + (<usize>parentPos << 2));
    const id = newNode(key, parent, false);
    store<u32>(ids + (<usize>i << 2), id);
    for (let k: u32 = 0; k < n; k++) {
      addResidency(id, <i32>load<u32>(at), load<u32>(at, 4));
      at += 8;
    }
  }
  // Every leaf residency is an eviction candidate.
  for (let i: u32 = 0; i < count; i++) {
    const id = load<u32>(ids + (<usize>i << 2));
    const start = resStart(id);
    const n = resCount(id);
    for (let k: u32 = 0; k < n; k++) {
      const slot = slotAt(start + k);
      if (slotIsLeaf(slot)) heapPush(slotRank(slot), slotStamp(slot), id);
    }
  }
  storageFree(ids, <usize>(count + 1) << 2);
  stamp = stampNow;
  evictions = evicted;
  stampResets = resets;
}

/** The stamp counter (for snapshots). */
export function indexStamp(): u32 { return stamp; }
