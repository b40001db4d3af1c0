// TensorRT-LLM's KVCacheAwareADPRouter (reference §4.3). The shell orders the
// batch, runs the explicit/warm-up phase and groups requests by prompt
// fingerprint; the wasm core runs the per-request scoring loop and the
// CPython-exact tie-break shuffle over all remaining requests in one call.

import type { Batch, BatchRequest } from "../batch.js";
import type { AttentionDpConfig } from "../config.js";
import type { RoutingCore } from "../core.js";
import type { PrefixIndex } from "../prefix-index.js";
import { FingerprintSort } from "./fingerprint.js";
import { expectedPerRank, Placements, relaxKeyA, strictFirst } from "./shared.js";
import type { Decision, RoutingPolicy } from "./types.js";

/** Full blocks of the probe `tokens[:-1]`: from the token ids, else from the count and block keys. */
function probeBlocks(req: BatchRequest, tokensPerBlock: number): number {
  if (req.tokens !== null) return Math.floor((req.tokens.length - 1) / tokensPerBlock);
  if (req.blockKeys === null || req.numTokens === 0) return 0;
  return Math.min(req.blockKeys.length, Math.floor((req.numTokens - 1) / tokensPerBlock));
}

/** The KV-cache-aware router; keeps the pending warm-up ranks between batches. */
export class KvCacheAwareRouter implements RoutingPolicy {
  readonly kind = "kv_cache_aware" as const;
  readonly #core: RoutingCore;
  readonly #beta: number;
  readonly #threshold: number;
  readonly #multiplier: number;
  /** pending[r] = 1 while rank r still awaits its warm-up request. */
  #pending: number[];
  #pendingCount: number;
  /** Orders the remaining requests by fingerprint (its scratch is kept between batches). */
  readonly #order = new FingerprintSort();
  /** The index probed for requests without `prefixMatches` (reference §10), or null. */
  prefixIndex: PrefixIndex | null = null;

  constructor(core: RoutingCore, numRanks: number, config: AttentionDpConfig) {
    this.#core = core;
    this.#beta = config.kvCacheRoutingLoadBalanceWeight;
    this.#threshold = config.kvCacheRoutingMatchRateThreshold;
    this.#multiplier = config.kvCacheRoutingFairShareMultiplier;
    this.#pending = new Array<number>(numRanks).fill(config.kvCacheRoutingColdStartWarmup ? 1 : 0);
    this.#pendingCount = config.kvCacheRoutingColdStartWarmup ? numRanks : 0;
  }

  /** Ranks still waiting for their cold-start warm-up request, ascending. */
  get pendingWarmup(): number[] {
    const out: number[] = [];
    this.#pending.forEach((p, r) => p === 1 && out.push(r));
    return out;
  }

  /** Replaces the pending warm-up ranks (snapshot restore). */
  set pendingWarmup(ranks: readonly number[]) {
    this.#pending.fill(0);
    for (const r of ranks) this.#pending[r] = 1;
    this.#pendingCount = ranks.length;
  }

  route(batch: Batch, explain = false): Decision {
    const { cap } = batch;
    const numRanks = batch.counts.length;
    const requests = batch.requests;
    const index = this.prefixIndex;
    // Row 0 of the match matrix is all zeros; the batch's caller prefixMatches
    // follow as one block (row 1 + matchesRow), then a row per request the
    // index can be probed for with its tokens.
    const callerRows = batch.matchRows;
    const rowOf = new Array<number>(requests.length).fill(0);
    let rows = 1 + callerRows;
    for (const req of requests) {
      if (req.matchesRow >= 0) rowOf[req.index] = 1 + req.matchesRow;
      else if (index !== null && probeBlocks(req, index.tokensPerBlock) > 0) rowOf[req.index] = rows++;
    }
    this.#core.reserveKvBatch(numRanks, requests.length, rows);
    if (index !== null) {
      // The probe is tokens[:-1] in the request's namespace; it writes through a
      // fresh view each time since probing may grow memory.
      const matches = (): Uint32Array => this.#core.kvViews().matches;
      for (const req of requests) {
        if (rowOf[req.index] === 0 || req.matchesRow >= 0) continue;
        const seed = req.namespace;
        if (req.tokens !== null) index.probeInto(req.tokens, req.tokens.length - 1, seed, matches, rowOf[req.index]! * numRanks);
        else index.probeBlocksInto(req.blockKeys!, probeBlocks(req, index.tokensPerBlock), seed, matches, rowOf[req.index]! * numRanks);
      }
    }
    const { counts, tokens, matches } = this.#core.kvViews();
    // Validation read the caller rows into the core's match block, in place
    // (its view of them may be detached since; it is not read).
    if (batch.matchesStore !== this.#core) matches.set(batch.prefixMatches, numRanks);
    counts.set(batch.counts);
    tokens.set(batch.tokens);

    // Explicit and warm-up phase, on a working copy of the pending set.
    const pending = this.#pending.slice();
    let pendingCount = this.#pendingCount;
    let nextPending = 0;
    const placements = new Placements(numRanks, requests.length, explain);
    const remaining: BatchRequest[] = [];
    for (const req of strictFirst(requests, relaxKeyA)) {
      let t = req.hasParams ? req.rank : null;
      const warmup = t === null && pendingCount > 0;
      if (warmup) {
        while (pending[nextPending] === 0) nextPending++;
        t = nextPending;
      }
      if (t !== null && counts[t]! < cap) {
        counts[t]!++;
        const matched = matches[rowOf[req.index]! * numRanks + t]!;
        tokens[t]! += Math.max(req.numTokens - matched, 0);
        placements.place(req, t!, warmup ? "warmup" : "explicit");
        placements.recordMatch(req, matched);
        if (pending[t] === 1) {
          pending[t] = 0;
          pendingCount--;
        }
      } else {
        remaining.push(req);
      }
    }

    this.#order.sort(remaining);
    const expected = expectedPerRank(counts, remaining.length, this.#multiplier, cap);
    if (remaining.length > 0) {
      const records = this.#core.kvViews().requests;
      for (let i = 0; i < remaining.length; i++) {
        const req = remaining[i]!;
        records[4 * i] = req.numTokens;
        records[4 * i + 1] = req.idLo;
        records[4 * i + 2] = req.idHi;
        records[4 * i + 3] = rowOf[req.index]!;
      }
      if (explain) this.#scoreExplained(remaining, rowOf, expected, placements);
      else {
        this.#core.scoreKvAware(remaining.length, expected, this.#beta, this.#threshold);
        const { out: chosen, matches: cached } = this.#core.kvViews();
        for (let i = 0; i < remaining.length; i++) {
          const rank = chosen[i]!;
          if (rank < 0) continue;
          const req = remaining[i]!;
          placements.place(req, rank, "scored");
          placements.recordMatch(req, cached[rowOf[req.index]! * numRanks + rank]!);
        }
      }
    }
    this.#pending = pending;
    this.#pendingCount = pendingCount;
    return placements.decide(this.kind, expected, requests);
  }

  /**
   * The scoring loop one request at a time, recording what each request saw.
   * Each one-request call rebuilds the eligible list from the counts and re-sums
   * the loads, which is exactly the state the batched loop carries, so the
   * decisions are the same as without explanations.
   */
  #scoreExplained(remaining: readonly BatchRequest[], rowOf: readonly number[], cap: number, placements: Placements): void {
    const views = this.#core.kvViews();
    const numRanks = views.counts.length;
    for (let i = 0; i < remaining.length; i++) {
      const req = remaining[i]!;
      const eligibleRanks: number[] = [];
      const excludedByCap: number[] = [];
      for (let r = 0; r < numRanks; r++) (views.counts[r]! < cap ? eligibleRanks : excludedByCap).push(r);
      const loads = eligibleRanks.map((r) => views.tokens[r]!);
      const row = rowOf[req.index]! * numRanks;
      const matchedTokens = eligibleRanks.map((r) => views.matches[row + r]!);
      const trailer = this.#core.scoreKvAwareOne(i, eligibleRanks.length, cap, this.#beta, this.#threshold);
      const rank = this.#core.kvViews().out[i]!;
      if (rank < 0) break;
      const n = req.numTokens;
      placements.recordMatch(req, views.matches[row + rank]!);
      placements.place(req, rank, "scored", {
        scoring: {
          eligibleRanks,
          excludedByCap,
          matchedTokens,
          matchGateOpen: trailer.affinity,
          loadTerms: loads.map((load) => (trailer.denom !== 0 ? this.#beta * ((load / trailer.denom) * n) : 0)),
          scores: trailer.scores,
          tieBrokenByShuffle: trailer.ties > 1,
        },
      });
    }
  }
}
