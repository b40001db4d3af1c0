// Helpers every router shares (reference §2): the ceil fair share, the expected
// per-rank count, the two relax sort keys and the per-rank result lists.

import type { BatchRequest, RequestId } from "../batch.js";
import type { Decision, DecisionOutcome, DecisionRecord, RouterKind } from "./types.js";

/** `ceil((Σ counts + numNew) / numRanks)` in integer arithmetic. */
export function fairShare(counts: ArrayLike<number>, numNew: number): number {
  let sum = 0;
  for (let r = 0; r < counts.length; r++) sum += counts[r]!;
  return Math.floor((sum + numNew + counts.length - 1) / counts.length);
}

/**
 * The per-rank target: `min(max(ceil(multiplier · fairShare), max(counts)), hardCap)`.
 * The product is an IEEE-754 double before `ceil`, as upstream (2.2 · 25 → 56).
 */
export function expectedPerRank(counts: ArrayLike<number>, numNew: number, multiplier: number, hardCap: number): number {
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

/** Where each request of a batch went: per-rank id lists and the rank of each request. */
export class Placements {
  /** Request ids per rank, in placement order. */
  readonly assignments: RequestId[][];
  /** Rank of each request by input position, -1 while unplaced. */
  readonly rankOf: number[];
  /** Outcome of each request by input position. */
  readonly outcomes: DecisionOutcome[];
  /** Details per request, when explaining. */
  readonly details: (Partial<DecisionRecord> | undefined)[] | undefined;
  /** Prefix tokens cached on the chosen rank, by input position, once any is recorded. */
  #matched: number[] | undefined;

  constructor(numRanks: number, numRequests: number, explain = false) {
    this.assignments = Array.from({ length: numRanks }, () => []);
    this.rankOf = new Array<number>(numRequests).fill(-1);
    this.outcomes = new Array<DecisionOutcome>(numRequests).fill("unassigned");
    this.details = explain ? new Array(numRequests) : undefined;
  }

  /** Appends `req` to `rank`'s list, for `outcome`. */
  place(req: BatchRequest, rank: number, outcome: DecisionOutcome, detail?: Partial<DecisionRecord>): void {
    this.assignments[rank]!.push(req.id);
    this.rankOf[req.index] = rank;
    this.outcomes[req.index] = outcome;
    if (this.details !== undefined && detail !== undefined) this.details[req.index] = detail;
  }

  /** Records the prefix tokens `req` finds cached on the rank it was placed on. */
  recordMatch(req: BatchRequest, tokens: number): void {
    (this.#matched ??= new Array<number>(this.rankOf.length).fill(-1))[req.index] = tokens;
  }

  /** The decision: unplaced requests are listed as unassigned, in input order. */
  decide(router: RouterKind, expected: number, requests: readonly BatchRequest[]): Decision {
    // A loop, not filter().map(): TurboFan's inlined array builtins make arrays of
    // another elements kind than the builtins themselves, and optimized code that
    // saw only one kind is deoptimized when the other comes.
    const unassigned: RequestId[] = [];
    for (const r of requests) if (this.rankOf[r.index] === -1) unassigned.push(r.id);
    return {
      result: { router, assignments: this.assignments, expectedNumActiveRequests: expected, unassigned },
      rankOf: this.rankOf,
      outcomes: this.outcomes,
      ...(this.details ? { details: this.details } : {}),
      ...(this.#matched ? { matched: this.#matched } : {}),
    };
  }
}
