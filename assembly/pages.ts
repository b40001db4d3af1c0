// The core's storage, taken from `memory.grow` directly instead of the TLSF
// heap, whose growth at least doubles linear memory each time it runs out:
// linear memory then tracks what the core holds, so the prefix index's memory
// budget bounds the whole module. Nothing in the core uses the TLSF heap; it
// is started (it claims the memory the module begins with) before the first
// page is grown, so anything that ever did use it would add what it grows as a
// separate region and never touch these pages.
//
// Pages: a bump region [bumpAt, bumpEnd) inside the pages grown last (memory
// grows by at least a sixteenth at a time), and up to MAX_RUNS free runs
// {start u32, bytes u32} in static data. A request is served first-fit from the
// runs, then from the bump region, then by growing memory; what is given back
// (an outgrown table) becomes a run. Every size is a multiple of 16 KiB, so
// runs never fragment below that.
//
// Arrays (`storageAlloc`): whole pages past 8 KiB, smaller ones power-of-two
// blocks cut from 16 KiB slabs (see below).

/**
 * Most bytes one allocation may take (1 GiB). Larger requests are refused
 * (0), so the rounding below, done in 32-bit `usize`, can never wrap.
 */
export const MAX_ALLOC: usize = 1 << 30;
/** Most pages linear memory may hold: one page short of 4 GiB keeps every address and end in u32. */
// @ts-ignore: decorator
@inline const MAX_PAGES: i32 = 65535;
/** Whether a `mustTakePages` or `mustAlloc` trapped: memory could not grow (the shell tells this trap from a bug's). */
let refused = false;

/** 1 once memory could not grow for storage the core cannot do without (its trap followed), else 0. */
export function memoryRefused(): i32 {
  return refused ? 1 : 0;
}

/** Most pages this instance grows to: MAX_PAGES, or less to make a host that refuses growth (tests). */
let pageLimit: i32 = MAX_PAGES;

/**
 * Caps linear memory at `pages` pages (at most MAX_PAGES), as a host that
 * refuses to grow memory would: how tests reach the out-of-memory paths.
 */
export function setPageLimit(pages: i32): void {
  pageLimit = min(max(pages, 0), MAX_PAGES);
}

/** Free runs kept at most. */
// @ts-ignore: decorator
@inline const MAX_RUNS: i32 = 64;
/** Free runs: start u32 · bytes u32. */
const runs: usize = memory.data(MAX_RUNS * 8, 8);
/** Free runs in use. */
let runCount: i32 = 0;
/** Next free byte of the bump region. */
let bumpAt: usize = 0;
/** End of the bump region. */
let bumpEnd: usize = 0;
/** Bytes held in runs. */
let runBytes: f64 = 0;
/** Whether the TLSF heap has claimed the memory it starts with. */
let heapStarted = false;

/**
 * `bytes` bytes (a multiple of 16 KiB, at most MAX_ALLOC) of page-backed
 * storage, 16 KiB aligned; 0 when memory cannot grow that far.
 */
export function takePages(bytes: usize): usize {
  if (bytes > MAX_ALLOC) return 0;
  for (let i = 0; i < runCount; i++) {
    const run = runs + (<usize>i << 3);
    const size = <usize>load<u32>(run, 4);
    if (size < bytes) continue;
    const at = <usize>load<u32>(run);
    if (size == bytes) {
      runCount--;
      store<u64>(run, load<u64>(runs + (<usize>runCount << 3)));
    } else {
      store<u32>(run, <u32>(at + bytes));
      store<u32>(run, <u32>(size - bytes), 4);
    }
    runBytes -= <f64>bytes;
    return at;
  }
  if (bumpEnd - bumpAt < bytes) {
    // The TLSF heap claims all of memory when it first runs: let it do so
    // before growing, or it would claim these pages too.
    if (!heapStarted) {
      heap.free(heap.alloc(16));
      heapStarted = true;
    }
    // Grow by a sixteenth of memory at least: each grow costs the engine a
    // remap, and a sixteenth bounds the pages held ahead of need (an eighth
    // left too little of the budget's 1.125 × bound for fragmentation at
    // thousands of ranks). Never past
    // the page limit, and a failed grow changes nothing.
    const need = <i32>((bytes + 0xffff) >> 16);
    const room = pageLimit - memory.size();
    if (need > room) return 0;
    const pages = min(max(need, memory.size() >> 4), room);
    const before = memory.grow(pages);
    if (before < 0) return 0;
    if (bumpEnd > bumpAt) givePages(bumpAt, bumpEnd - bumpAt);
    bumpAt = <usize>before << 16;
    bumpEnd = bumpAt + (<usize>pages << 16);
  }
  const at = bumpAt;
  bumpAt += bytes;
  return at;
}

/**
 * `takePages(bytes)` where the core has no way to fail: it traps when memory
 * cannot grow (a host's refusal: the budget's bound keeps memory under
 * MAX_PAGES), never hands out address 0 to be written over. The trap ends
 * the change half made; the shell retires the instance (src/index-core.ts).
 */
export function mustTakePages(bytes: usize): usize {
  return orTrap(takePages(bytes));
}

/** `at`, unless it is 0 (memory could not grow): then the refusal is noted and the core traps. */
// @ts-ignore: decorator
@inline function orTrap(at: usize): usize {
  if (at == 0) {
    refused = true;
    unreachable();
  }
  return at;
}

/** Gives `bytes` bytes at `at` (from `takePages`) back for reuse. */
export function givePages(at: usize, bytes: usize): void {
  if (runCount == MAX_RUNS) {
    // Keep the larger runs; a dropped one stays allocated but unused.
    let smallest = 0;
    for (let i = 1; i < runCount; i++) {
      if (load<u32>(runs + (<usize>i << 3), 4) < load<u32>(runs + (<usize>smallest << 3), 4)) smallest = i;
    }
    const run = runs + (<usize>smallest << 3);
    if (<usize>load<u32>(run, 4) >= bytes) return;
    runBytes -= <f64>load<u32>(run, 4);
    runCount--;
    store<u64>(run, load<u64>(runs + (<usize>runCount << 3)));
  }
  const run = runs + (<usize>runCount << 3);
  store<u32>(run, <u32>at);
  store<u32>(run, <u32>bytes, 4);
  runCount++;
  runBytes += <f64>bytes;
}

/** Bytes taken from memory but not in use: free runs, the rest of the bump region, free small blocks. */
export function idlePageBytes(): f64 {
  return runBytes + <f64>(bumpEnd - bumpAt) + smallFreeBytes;
}

// ---- arrays of any size ---------------------------------------------------------------
//
// Every array the core allocates (and the shell's scratch, through `allocate`)
// is either whole 16 KiB pages (past 8 KiB: a power-of-two block there would
// waste up to half of a per-rank array at 65,535 ranks) or a power-of-two
// block of 16 bytes to 8 KiB, cut from 16 KiB slabs and kept on one free list
// per size (next pointer in the block's first word), never merged: they are few.

/** Smallest block size class (16 bytes). */
// @ts-ignore: decorator
@inline const MIN_CLASS: u32 = 4;
/** Smallest class served by whole pages (16 KiB). */
// @ts-ignore: decorator
@inline const PAGE_CLASS: u32 = 14;
/** Bytes of one slab of small blocks: one page, so each size holds at most a page's worth idle. */
// @ts-ignore: decorator
@inline const SLAB_BYTES: usize = 0x4000;
/** Free list heads of the small classes (address, 0 = empty). */
const smallFree: usize = memory.data(PAGE_CLASS * 4, 16);
/** Bytes on the small free lists. */
let smallFreeBytes: f64 = 0;

/** The size class of a `bytes`-byte array: log2 of its block size. */
// @ts-ignore: decorator
@inline function classOf(bytes: usize): u32 {
  return bytes <= (<usize>1 << MIN_CLASS) ? MIN_CLASS : 32 - clz<u32>(<u32>bytes - 1);
}

/** Pushes the free small block at `at` on the list whose head is at `head`. */
// @ts-ignore: decorator
@inline function pushSmall(head: usize, at: usize): void {
  store<u32>(at, load<u32>(head));
  store<u32>(head, <u32>at);
}

/** Storage for an array of `bytes` bytes, 16-byte aligned; 0 when refused (see MAX_ALLOC) or out of memory. */
export function storageAlloc(bytes: usize): usize {
  if (bytes > MAX_ALLOC) return 0;
  const cls = classOf(bytes);
  if (cls >= PAGE_CLASS) return takePages(pagesFor(bytes));
  const size = <usize>1 << cls;
  const head = smallFree + (<usize>cls << 2);
  let at = <usize>load<u32>(head);
  if (at == 0) {
    // A new slab: all its blocks but the first go on the free list.
    at = takePages(SLAB_BYTES);
    if (at == 0) return 0;
    for (let b = at + size; b < at + SLAB_BYTES; b += size) pushSmall(head, b);
    smallFreeBytes += <f64>(SLAB_BYTES - size);
    return at;
  }
  store<u32>(head, load<u32>(at));
  smallFreeBytes -= <f64>size;
  return at;
}

/** `storageAlloc(bytes)` where the core has no way to fail: traps instead of returning 0 (see mustTakePages). */
export function mustAlloc(bytes: usize): usize {
  return orTrap(storageAlloc(bytes));
}

/** Frees storage from `storageAlloc(bytes)`, given the same `bytes`. */
export function storageFree(at: usize, bytes: usize): void {
  const cls = classOf(bytes);
  if (cls >= PAGE_CLASS) {
    givePages(at, pagesFor(bytes));
    return;
  }
  const size = <usize>1 << cls;
  pushSmall(smallFree + (<usize>cls << 2), at);
  smallFreeBytes += <f64>size;
}

/** Bytes of a block of `bytes` bytes, as `storageAlloc` rounds it. */
export function storageSize(bytes: usize): usize {
  const cls = classOf(bytes);
  return cls >= PAGE_CLASS ? pagesFor(bytes) : <usize>1 << cls;
}

/** `bytes` (at most MAX_ALLOC, so this cannot wrap) rounded up to whole 16 KiB pages. */
// @ts-ignore: decorator
@inline function pagesFor(bytes: usize): usize {
  return (bytes + 0x3fff) & ~<usize>0x3fff;
}

