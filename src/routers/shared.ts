// Helpers every router shares (reference §2): the ceil fair share, the expected
// per-rank count, the two relax sort keys and the per-rank result lists.

import type { BatchRequest, RequestId } from "../batch.js";

/** `ceil((Σ counts + numNew) / numRanks)` in integer arithmetic. */
export function fairShare(counts: Int32Array, numNew: number): number {
  let sum = 0;
  for (let r = 0; r < counts.length; r++) sum += counts[r]!;
  return Math.floor((sum + numNew + counts.length - 1) / counts.length);
}

/**
 * The per-rank target: `min(max(ceil(multiplier · fairShare), max(counts)), hardCap)`.
 * The product is an IEEE-754 double before `ceil`, as upstream (2.2 · 25 → 56).
 */
export function expectedPerRank(counts: Int32Array, numNew: number, multiplier: number, hardCap: number): number {
  let most = counts[0]!;
  for (let r = 1; r < counts.length; r++) if (counts[r]! > most) most = counts[r]!;
  // `+ 0` turns ceil's -0 (from a negative product) into 0, as Python's int.
  return Math.min(Math.max(Math.ceil(multiplier * fairShare(counts, numNew)) + 0, most), hardCap);
}

/**
 * Relax sort key A (default and KV-cache-aware routers): relaxed when the
 * request has no scheduling params or no target rank, else its relax flag.
 */
export const relaxKeyA = (r: BatchRequest): boolean => !r.hasParams || r.rank === null || r.relax;

/** Relax sort key B (conversation router): relaxed when no scheduling params, else the raw relax flag. */
export const relaxKeyB = (r: BatchRequest): boolean => !r.hasParams || r.relax;

/** A stable sort of `requests` putting those whose key is false first. */
export function strictFirst(requests: readonly BatchRequest[], key: (r: BatchRequest) => boolean): BatchRequest[] {
  const strict: BatchRequest[] = [];
  const relaxed: BatchRequest[] = [];
  for (const r of requests) (key(r) ? relaxed : strict).push(r);
  return strict.concat(relaxed);
}

/** Empty per-rank lists of request ids. */
export const emptyAssignments = (numRanks: number): RequestId[][] => Array.from({ length: numRanks }, () => []);

/** Ids of `unplaced` in input order. */
export const inInputOrder = (unplaced: BatchRequest[]): RequestId[] =>
  unplaced.sort((a, b) => a.index - b.index).map((r) => r.id);
