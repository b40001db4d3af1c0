// The default router's balancing loop (reference §3.3 steps 5–7).
//
// Layout (all caller-owned, written by the TypeScript shell):
//   counts  i32[numRanks]   active requests per rank, updated in place
//   tokens  f64[numRanks]   active prompt tokens per rank (exact integers), updated in place
//   sizes   u32[numRequests] prompt tokens of each request, already in processing order
//   out     i32[numRequests] chosen rank per request, or -1 when no rank had room
//   heap    i32[numRanks]   scratch for the candidate min-heap
// The heap orders candidate ranks by (tokens, count, rank); ranks are unique, so
// the minimum is unique and the result does not depend on heap shape.

/** Whether candidate `a` sorts before candidate `b` by (tokens, count, rank). */
// @ts-ignore: decorator
@inline function before(counts: usize, tokens: usize, a: i32, b: i32): bool {
  const ta = load<f64>(tokens + (<usize>a << 3));
  const tb = load<f64>(tokens + (<usize>b << 3));
  if (ta != tb) return ta < tb;
  const ca = load<i32>(counts + (<usize>a << 2));
  const cb = load<i32>(counts + (<usize>b << 2));
  if (ca != cb) return ca < cb;
  return a < b;
}

/** Restores the heap property below slot `i` of a heap of `size` ranks. */
function siftDown(heap: usize, size: i32, i: i32, counts: usize, tokens: usize): void {
  const rank = load<i32>(heap + (<usize>i << 2));
  while (true) {
    let child = 2 * i + 1;
    if (child >= size) break;
    let childRank = load<i32>(heap + (<usize>child << 2));
    if (child + 1 < size) {
      const right = load<i32>(heap + (<usize>(child + 1) << 2));
      if (before(counts, tokens, right, childRank)) { child++; childRank = right; }
    }
    if (!before(counts, tokens, childRank, rank)) break;
    store<i32>(heap + (<usize>i << 2), childRank);
    i = child;
  }
  store<i32>(heap + (<usize>i << 2), rank);
}

/**
 * Places each request on the least-loaded rank below `cap` and returns how many
 * were placed; requests left when no rank has room get -1.
 */
export function balanceDefault(
  numRanks: i32, counts: usize, tokens: usize,
  numRequests: i32, sizes: usize, out: usize, cap: i32, heap: usize,
): i32 {
  let size = 0;
  for (let r = 0; r < numRanks; r++) {
    if (load<i32>(counts + (<usize>r << 2)) < cap) {
      store<i32>(heap + (<usize>size << 2), r);
      size++;
    }
  }
  for (let i = size / 2 - 1; i >= 0; i--) siftDown(heap, size, i, counts, tokens);
  let placed = 0;
  for (let q = 0; q < numRequests; q++) {
    if (size == 0) {
      store<i32>(out + (<usize>q << 2), -1);
      continue;
    }
    const rank = load<i32>(heap);
    const countPtr = counts + (<usize>rank << 2);
    const tokenPtr = tokens + (<usize>rank << 3);
    store<f64>(tokenPtr, load<f64>(tokenPtr) + <f64>load<u32>(sizes + (<usize>q << 2)));
    const count = load<i32>(countPtr) + 1;
    store<i32>(countPtr, count);
    store<i32>(out + (<usize>q << 2), rank);
    placed++;
    if (count >= cap) {
      size--;
      store<i32>(heap, load<i32>(heap + (<usize>size << 2)));
    }
    if (size > 0) siftDown(heap, size, 0, counts, tokens);
  }
  return placed;
}
