// TensorRT-LLM's KVCacheAwareADPRouter (reference §4.3). The shell orders the
// batch, runs the explicit/warm-up phase and groups requests by prompt
// fingerprint; the wasm core runs the per-request scoring loop and the
// CPython-exact tie-break shuffle over all remaining requests in one call.

import type { Batch, BatchRequest } from "../batch.js";
import type { AttentionDpConfig } from "../config.js";
import type { KvBatchViews, RoutingCore } from "../core.js";
import { emptyAssignments, expectedPerRank, inInputOrder, relaxKeyA, strictFirst } from "./shared.js";
import type { RouteResult, RoutingPolicy } from "./types.js";

/** Tokens of the prompt fingerprint that groups similar requests (upstream: 64). */
const FINGERPRINT_TOKENS = 64;

/**
 * Fills match rows for requests that carry no `prefixMatches`: given the
 * request, writes one matched-token count per rank at `row` of `views.matches`
 * and returns true, or returns false to leave the request matching nothing.
 */
export type PrefixProbe = (req: BatchRequest, views: KvBatchViews, row: number) => boolean;

/** Orders by the first 64 token ids (a proper prefix first), then longer prompts first. */
function byFingerprint(a: BatchRequest, b: BatchRequest): number {
  const ta = a.tokens;
  const tb = b.tokens;
  const la = Math.min(ta ? ta.length : 0, FINGERPRINT_TOKENS);
  const lb = Math.min(tb ? tb.length : 0, FINGERPRINT_TOKENS);
  const common = Math.min(la, lb);
  for (let i = 0; i < common; i++) {
    const d = ta![i]! - tb![i]!;
    if (d !== 0) return d;
  }
  if (la !== lb) return la - lb;
  return (tb ? tb.length : b.numTokens) - (ta ? ta.length : a.numTokens);
}

/** The KV-cache-aware router; keeps the pending warm-up ranks between batches. */
export class KvCacheAwareRouter implements RoutingPolicy {
  readonly kind = "kv_cache_aware" as const;
  readonly #core: RoutingCore;
  readonly #beta: number;
  readonly #threshold: number;
  readonly #multiplier: number;
  /** pending[r] = 1 while rank r still awaits its warm-up request. */
  #pending: Uint8Array;
  #pendingCount: number;
  readonly #probe: PrefixProbe | undefined;

  constructor(core: RoutingCore, numRanks: number, config: AttentionDpConfig, probe?: PrefixProbe) {
    this.#core = core;
    this.#beta = config.kvCacheRoutingLoadBalanceWeight;
    this.#threshold = config.kvCacheRoutingMatchRateThreshold;
    this.#multiplier = config.kvCacheRoutingFairShareMultiplier;
    this.#pending = new Uint8Array(numRanks).fill(config.kvCacheRoutingColdStartWarmup ? 1 : 0);
    this.#pendingCount = config.kvCacheRoutingColdStartWarmup ? numRanks : 0;
    this.#probe = probe;
  }

  /** Ranks still waiting for their cold-start warm-up request, ascending. */
  get pendingWarmup(): number[] {
    const out: number[] = [];
    this.#pending.forEach((p, r) => p && out.push(r));
    return out;
  }

  /** Replaces the pending warm-up ranks (snapshot restore). */
  set pendingWarmup(ranks: readonly number[]) {
    this.#pending.fill(0);
    for (const r of ranks) this.#pending[r] = 1;
    this.#pendingCount = ranks.length;
  }

  route(batch: Batch): RouteResult {
    const { cap } = batch;
    const numRanks = batch.counts.length;
    const requests = batch.requests;
    const rowOf = new Uint32Array(requests.length);
    let rows = 1;
    for (const req of requests) if (req.prefixMatches !== null || this.#probe) rowOf[req.index] = rows++;
    const views = this.#core.reserveKvBatch(numRanks, requests.length, rows);
    for (const req of requests) {
      const row = rowOf[req.index]!;
      if (row === 0) continue;
      if (req.prefixMatches !== null) views.matches.set(req.prefixMatches, row * numRanks);
      else if (!this.#probe!(req, views, row)) rowOf[req.index] = 0;
    }
    const { counts, tokens, matches } = this.#core.kvViews();
    counts.set(batch.counts);
    tokens.set(batch.tokens);

    // Explicit and warm-up phase, on a working copy of the pending set.
    const pending = this.#pending.slice();
    let pendingCount = this.#pendingCount;
    let nextPending = 0;
    const assignments = emptyAssignments(numRanks);
    const remaining: BatchRequest[] = [];
    for (const req of strictFirst(requests, relaxKeyA)) {
      let t = req.hasParams ? req.rank : null;
      if (t === null && pendingCount > 0) {
        while (pending[nextPending] === 0) nextPending++;
        t = nextPending;
      }
      if (t !== null && counts[t]! < cap) {
        counts[t]!++;
        const matched = matches[rowOf[req.index]! * numRanks + t]!;
        tokens[t]! += Math.max(req.numTokens - matched, 0);
        assignments[t]!.push(req.id);
        if (pending[t] === 1) {
          pending[t] = 0;
          pendingCount--;
        }
      } else {
        remaining.push(req);
      }
    }

    remaining.sort(byFingerprint);
    const expected = expectedPerRank(counts, remaining.length, this.#multiplier, cap);
    const unassigned: BatchRequest[] = [];
    if (remaining.length > 0) {
      const records = this.#core.kvViews().requests;
      for (let i = 0; i < remaining.length; i++) {
        const req = remaining[i]!;
        records[4 * i] = req.numTokens;
        records[4 * i + 1] = req.idLo;
        records[4 * i + 2] = req.idHi;
        records[4 * i + 3] = rowOf[req.index]!;
      }
      this.#core.scoreKvAware(remaining.length, expected, this.#beta, this.#threshold);
      const chosen = this.#core.kvViews().out;
      for (let i = 0; i < remaining.length; i++) {
        const rank = chosen[i]!;
        if (rank >= 0) assignments[rank]!.push(remaining[i]!.id);
        else unassigned.push(remaining[i]!);
      }
    }
    this.#pending = pending;
    this.#pendingCount = pendingCount;
    return { router: this.kind, assignments, expectedNumActiveRequests: expected, unassigned: inInputOrder(unassigned) };
  }
}
