// The prefix index's state: its constants, the globals every part shares, and the
// accessors of a node's hot and cold halves and of residency slots (layout:
// assembly/prefix-index.ts).

import { mustAlloc, storageFree } from "../pages";
import { overflow } from "./residency";

/** Bytes of one node. */
// @ts-ignore: decorator
@inline export const NODE_BYTES: usize = 32;
/** Slots of a new index's hash table. */
// @ts-ignore: decorator
@inline export const INITIAL_TABLE: u32 = 128;
/** Bytes of one residency slot. */
// @ts-ignore: decorator
@inline export const SLOT_BYTES: u32 = 7;
/** Residency block classes (class 31 holds 2^16 slots, at least any rank count). */
// @ts-ignore: decorator
@inline export const CLASSES: i32 = 32;
/** Slots in a block of class `cls`: 1, 2, 3, 4, 6, 8, 12, 16, 24, … (growth by 4/3 and 3/2, not 2). */
// @ts-ignore: decorator
@inline export function classSize(cls: u32): u32 {
  return cls == 0 ? 1 : (cls & 1) != 0 ? <u32>1 << ((cls + 1) >> 1) : <u32>3 << ((cls >> 1) - 1);
}
/** Children count in a slot that means "look in the overflow table". */
// @ts-ignore: decorator
@inline export const KIDS_OVERFLOW: u32 = 255;

/** Ranks. */
export let numRanks: i32 = 0;
/** Tokens per block. */
export let tokensPerBlock: i32 = 32;
/** Residency capacity per rank (0 = unbounded). */
export let capacity: u32 = 0;
/** Accounted-byte budget (0 = unbounded). */
export let budget: f64 = 0;

/** log2 of the nodes in one node chunk. */
// @ts-ignore: decorator
@inline export const NODE_CHUNK_SHIFT: u32 = 10;
/** Node chunk addresses (u32 each); chunks never move, so growth copies nothing. */
export let nodeChunks: usize = 0;
/** Node chunks allocated. */
export let nodeChunkCount: u32 = 0;
/** Node capacity (ids below this have storage). */
export let nodeCap: u32 = 0;
/** Highest node id ever used + 1. */
export let nodeTop: u32 = 1;
/** Head of the free node list (linked through nextSibling). */
export let freeNode: u32 = 0;
/** Live nodes. */
export let liveNodes: u32 = 0;

/** Hash table. */
export let table: usize = 0;
/**
 * This index's secret for the table's homes (`tagOf`), set by `indexInit` from
 * the caller's random words: keys follow from prompts anyone can write, and
 * homes they could compute would let them crowd a few buckets on purpose.
 */
export let tableSalt: u64 = 0;
/** Table slots (power of two). */
export let tableCap: u32 = 0;
/**
 * Whether every node must be in the table: set for good once a caller names a
 * node by its key (KV events, `holds`, removing a path) and while a snapshot
 * is imported. Until then the table holds only the nodes `step` cannot reach
 * from their parent without it (see `keyless`).
 */
export let keyedAll = false;

/** log2 of the slots in one residency chunk (at least the largest residency block, and 14 so a chunk is whole 16 KiB pages). */
export let slotChunkShift: u32 = 14;
/** Residency chunk addresses (u32 each). */
export let slotChunks: usize = 0;
/** Residency chunks allocated. */
export let slotChunkCount: u32 = 0;
/** Residency capacity in slots. */
export let slotCap: u32 = 0;
/** Bump pointer in slots. */
export let slotTop: u32 = 0;
/** Free block list heads per class (slot index + 1, 0 = empty). */
export const freeBlocks: usize = memory.data(CLASSES * 4, 16);
/** Slots held by live residency blocks (by class size). */
export let slotsInUse: u32 = 0;
/** Live residencies. */
export let residencies: u32 = 0;

/** Per rank: residencies (blocks held). */
export let rankBlocks: usize = 0;
/** Per rank: leaves. */
export let rankLeaves: usize = 0;
/** Per rank: heap pointer, size, capacity (3 × u32). */
export let heaps: usize = 0;
/** Heap entries across ranks (accounted bytes). */
export let heapEntries: u32 = 0;
/** Entry slots the per-rank heaps hold, used or not (what they take from memory, accounted). */
export let heapSlots: f64 = 0;
/** Match scratch: the nodes where a walk's rank set shrinks, with their depths in tokens (2 × u32 each, numRanks + 1 at most). */
export let drops: usize = 0;
/** Path scratch (node ids) for insert. */
export let path: usize = 0;
/** Path scratch capacity. */
export let pathCap: u32 = 0;

/** Stamp counter, one per insert. */
export let stamp: u32 = 0;
/** Residencies evicted (capacity or budget). */
export let evictions: f64 = 0;

// ---- small accessors ----------------------------------------------------------------

/** The children bits of the kids byte (saturating count). */
// @ts-ignore: decorator
@inline export const KIDS_MASK: u32 = 0x7f;
/** The kids-byte flag: node id+1 is a child of this node. */
// @ts-ignore: decorator
@inline export const NEXT_IS_CHILD: u32 = 0x80;
/** The bit of a node's parent word that says the node is in the table (node ids stay below 2^27). */
// @ts-ignore: decorator
@inline export const TABLED: u32 = 0x80000000;
/** Bytes of one half (hot or cold) of a node. */
// @ts-ignore: decorator
@inline export const HALF: usize = NODE_BYTES / 2;
/** The hot half of node `id`: key, residency block, count and class, children. */
// @ts-ignore: decorator
@inline export function nodeAt(id: u32): usize {
  return <usize>load<u32>(nodeChunks + (<usize>(id >> NODE_CHUNK_SHIFT) << 2)) + <usize>(id & ((1 << NODE_CHUNK_SHIFT) - 1)) * HALF;
}
/** The cold half of node `id`: parent, siblings, first child. */
// @ts-ignore: decorator
@inline export function coldAt(id: u32): usize {
  return nodeAt(id) + (HALF << NODE_CHUNK_SHIFT);
}
// @ts-ignore: decorator
@inline export function slotAt(i: u32): usize {
  return <usize>load<u32>(slotChunks + (<usize>(i >> slotChunkShift) << 2)) + <usize>(i & ((<u32>1 << slotChunkShift) - 1)) * SLOT_BYTES;
}
/** The `k`th slot of a block starting at address `base`. */
// @ts-ignore: decorator
@inline export function slotIn(base: usize, k: u32): usize { return base + <usize>k * SLOT_BYTES; }
/** The rank of the slot at `at`. */
// @ts-ignore: decorator
@inline export function slotRank(at: usize): i32 { return <i32>load<u16>(at); }
/** The stamp of the slot at `at`. */
// @ts-ignore: decorator
@inline export function slotStamp(at: usize): u32 { return load<u32>(at, 2); }
/** Sets the stamp of the slot at `at`. */
// @ts-ignore: decorator
@inline export function setSlotStamp(at: usize, s: u32): void { store<u32>(at, s, 2); }
/** Whether the residency at `at` has no children in its rank (a leaf of that rank). */
// @ts-ignore: decorator
@inline export function slotIsLeaf(at: usize): bool { return load<u8>(at, 6) == 0; }
// @ts-ignore: decorator
@inline export function u32At(base: usize, i: i32): usize { return base + (<usize>i << 2); }
// @ts-ignore: decorator
@inline export function keyLo(id: u32): u32 { return load<u32>(nodeAt(id)); }
// @ts-ignore: decorator
@inline export function keyHi(id: u32): u32 { return load<u32>(nodeAt(id), 4); }
// @ts-ignore: decorator
@inline export function parentOf(id: u32): u32 { return load<u32>(coldAt(id)) & ~TABLED; }
/** Whether node `id` is in the table. */
// @ts-ignore: decorator
@inline export function isTabled(id: u32): bool { return (load<u32>(coldAt(id)) & TABLED) != 0; }
/** Notes that node `id` is in the table (freeNodeId clears it, with the parent word). */
// @ts-ignore: decorator
@inline export function markTabled(id: u32): void {
  const cold = coldAt(id);
  store<u32>(cold, load<u32>(cold) | TABLED);
}
/**
 * Whether node `id`, new under `parent`, can stay out of the table: a child
 * at `parent + 1` of a parent with at most two children, which `step` checks
 * before it looks in the table, while not every node must be in it. A path
 * inserted in one go has consecutive ids, so most blocks are such, and an
 * insert's new blocks and the ones it evicts skip a table miss each.
 */
// @ts-ignore: decorator
@inline export function keyless(id: u32, parent: u32): bool {
  return !keyedAll && parent != 0 && id == parent + 1 && (<u32>load<u8>(nodeAt(parent), 15) & KIDS_MASK) <= 2;
}
// @ts-ignore: decorator
@inline export function firstChild(id: u32): u32 { return load<u32>(coldAt(id), 12); }
// @ts-ignore: decorator
@inline export function nextSibling(id: u32): u32 { return load<u32>(coldAt(id), 4); }
/** The sibling after which `id` was added, so before it in its parent's list (0 = first). */
// @ts-ignore: decorator
@inline export function prevSibling(id: u32): u32 { return load<u32>(coldAt(id), 8); }
// @ts-ignore: decorator
@inline export function resStart(id: u32): u32 { return load<u32>(nodeAt(id), 8); }
// @ts-ignore: decorator
@inline export function resCount(id: u32): u32 { return <u32>load<u16>(nodeAt(id), 12); }
// @ts-ignore: decorator
@inline export function resClass(id: u32): u32 { return <u32>load<u8>(nodeAt(id), 14); }

/** Grows a full buffer of `used` bytes to `bytes`, copying it; returns the new address. */
export function grow(old: usize, used: usize, bytes: usize): usize {
  const fresh = mustAlloc(bytes);
  if (old != 0) {
    memory.copy(fresh, old, used);
    storageFree(old, used);
  }
  return fresh;
}
