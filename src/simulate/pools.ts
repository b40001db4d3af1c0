// `adp-router simulate --prefill P --decode M`: a disaggregated deployment of
// P prefill (context) servers and M decode (generation) servers behind a
// gateway, each server an engine of `ranks` attention-DP ranks (lockstep.ts,
// each on its own clock), against an aggregated one of P + M servers that
// serve whole requests. The gateway routes each pool by its own router over
// the pool's ranks (all of them pinned, as the gateway's `rank_routing: adp`
// does): the prefill side by the policy of the row, the decode side by
// TensorRT-LLM's default (load-balancing) router.
//
// A request's life, disaggregated:
//   1. routed to a prefill rank when it arrives (or, when every rank is at its
//      cap, when one has room), which prefills it as an aggregated rank would
//      (its true prefix cache, chunked prefill in its token budget) and stops
//      at its first token;
//   2. its KV cache moves to the decode pool: `transferMsPerToken` × its prompt
//      tokens after the prefill's iteration ends;
//   3. routed to a decode rank then, which takes it with its KV cache (one
//      token of prefill work for the first token's step) and decodes the rest
//      of its output, one token an iteration.
// Its TTFT is the decode server's first token: prefill, transfer and one
// decode iteration. Aggregated, a request is steps 1 and 3 on one rank.

import { pathCount, type RouterSide, type RunResult } from "./engine.js";
import { LockstepEngine, newJob, sumFigures, routeRequestOf, type EngineOptions, type Job } from "./lockstep.js";
import type { TraceRequest } from "./trace.js";

/** The servers of a run: a disaggregated pair of pools, or one aggregated pool of `whole` servers. */
export type PoolLayout =
  | {
      readonly prefill: number;
      readonly decode: number;
      readonly transferMsPerToken: number;
      /**
       * The prefill router's kv_cache_routing_account_for_in_transfer: a prefill
       * rank's state counts the requests it handed over until their decode's
       * first token (their KV cache is still on it), as TensorRT-LLM's router does.
       */
      readonly accountForInTransfer?: boolean;
    }
  | { readonly whole: number };

/** What a pools run adds to a {@link RunResult}. */
export interface PoolsRunResult extends RunResult {
  /** Decode ranks' requests (empty aggregated). */
  readonly decodeRequestsPerRank: number[];
  /** Mean KV transfer time of a request, ms (0 aggregated). */
  readonly meanTransferMs: number;
  /** Each request's mean time between output tokens after its first, ms, sorted (requests of one output token left out). */
  readonly itlSorted: Float64Array;
}

/** One pool: its engines, how its router sees them, and the requests waiting for a rank. */
class Pool {
  readonly engines: LockstepEngine[];
  readonly waiting: Job[] = [];
  /** Per engine: the requests on it whose first token has not come (prefill pools watch them finish). */
  readonly outstanding: Set<number>[];
  /** The pool rank of each request it placed and watches. */
  readonly rankOf = new Map<number, number>();
  routeMs = 0;
  routed = 0;
  /** Per rank of the pool: requests (and their prompt tokens) counted in its state beyond its engine's own (in transfer). */
  readonly extraRequests: number[];
  readonly extraTokens: number[];
  constructor(
    servers: number,
    readonly ranks: number,
    numPaths: number,
    blockTokens: number,
    readonly opts: EngineOptions,
    readonly side: RouterSide,
    readonly ttft: Float64Array,
    arrivalOf: (i: number) => number,
    /** Whether it watches its requests' first tokens (a prefill pool hands them over then). */
    readonly watches: boolean,
  ) {
    this.engines = Array.from({ length: servers }, () => new LockstepEngine(numPaths, blockTokens, { ...opts, ranks }, side.discountCached, ttft, arrivalOf));
    this.outstanding = this.engines.map(() => new Set());
    this.extraRequests = new Array<number>(servers * ranks).fill(0);
    this.extraTokens = new Array<number>(servers * ranks).fill(0);
  }

  /** Routes the waiting requests at `now` over every rank of the pool; those no rank takes wait on. */
  route(now: number): void {
    if (this.waiting.length === 0) return;
    const R = this.ranks;
    const states = this.engines.flatMap((e, k) => e.active.map((a, r) => ({ numActiveRequests: a + this.extraRequests[k * R + r]!, numActiveTokens: e.activeTokens[r]! + this.extraTokens[k * R + r]! })));
    const room = this.engines.length * R * this.opts.maxNumActiveRequests - this.engines.reduce((t, e) => t + e.totalActive, 0);
    const batch = this.waiting.splice(0, Math.max(0, room));
    if (batch.length === 0) return;
    const t0 = performance.now();
    const ranks = this.side.route(states, this.opts.maxNumActiveRequests, batch.map(routeRequestOf), now);
    this.routeMs += performance.now() - t0;
    const left: Job[] = [];
    batch.forEach((job, i) => {
      const rank = ranks[i]!;
      if (rank < 0) return void left.push(job);
      const engine = this.engines[Math.floor(rank / R)]!;
      // An idle engine wakes when the request reaches it.
      if (engine.totalActive === 0) engine.t = Math.max(engine.t, now);
      engine.assign(job, rank % R);
      if (this.watches) {
        this.outstanding[Math.floor(rank / R)]!.add(job.index);
        this.rankOf.set(job.index, rank);
      }
      this.routed++;
    });
    this.waiting.unshift(...left);
  }

  /** The engine with work whose next iteration starts first, or -1. */
  next(): number {
    let e = -1;
    for (let k = 0; k < this.engines.length; k++) {
      const engine = this.engines[k]!;
      if (engine.totalActive > 0 && (e < 0 || engine.t < this.engines[e]!.t)) e = k;
    }
    return e;
  }
}

/** The decode pool's job for a request whose KV cache it receives: no prompt left to prefill but the step of its first token. */
const decodeJob = (index: number, req: TraceRequest): Job => newJob(index, { ...req, inputLength: 1, blocks: [] }, new Int32Array(0));

/**
 * Replays `requests` over `layout`'s servers of `opts.ranks` ranks each;
 * `prefillSide` routes the prefill pool (or the aggregated one), `decodeSide`
 * the decode pool. `progress` gets finished requests.
 */
export function runPools(
  requests: readonly TraceRequest[],
  paths: readonly Int32Array[],
  blockTokens: number,
  opts: EngineOptions,
  layout: PoolLayout,
  prefillSide: RouterSide,
  decodeSide: RouterSide | null,
  progress?: (finished: number) => void,
): PoolsRunResult {
  const n = requests.length;
  const R = opts.ranks;
  const numPaths = pathCount(paths);
  const arrivalOf = (i: number) => requests[i]!.arrivalMs / opts.rateScale;
  const split = "prefill" in layout;
  const first = new Float64Array(n);
  const front = new Pool(split ? layout.prefill : layout.whole, R, numPaths, blockTokens, opts, prefillSide, first, arrivalOf, split);
  // Disaggregated: when each request's KV cache reaches the decode pool, and its decode-side TTFT from then.
  const readyAt = new Float64Array(n);
  const decodeTtft = new Float64Array(n);
  const inTransfer = split && layout.accountForInTransfer === true;
  const back = split ? new Pool(layout.decode, R, numPaths, blockTokens, opts, decodeSide!, decodeTtft, (i) => readyAt[i]!, inTransfer) : null;
  // When each request's last token came: from the pool that decodes it.
  const endAt = new Float64Array(n);
  for (const e of (back ?? front).engines) e.endAt = endAt;
  /** Requests whose KV cache is moving, by the time it arrives (in order of arrival at the decode pool). */
  const transfers: number[] = [];
  let transferHead = 0;
  let transferMs = 0;
  let nextArrival = 0;
  let finished = 0;
  let maxQueued = 0;
  let maxQueuedAtMs = 0;
  let steps = 0;
  const loadSamples: number[][] = [];

  while (finished < n) {
    const fe = front.next();
    const be = back?.next() ?? -1;
    const frontT = fe < 0 ? Infinity : front.engines[fe]!.t;
    const backT = be < 0 ? Infinity : back!.engines[be]!.t;
    const arrival = nextArrival < n ? arrivalOf(nextArrival) : Infinity;
    const ready = transferHead < transfers.length ? readyAt[transfers[transferHead]!]! : Infinity;
    const engineT = Math.min(frontT, backT);
    if (Math.min(arrival, ready) <= engineT && Math.min(arrival, ready) < Infinity) {
      // The gateway routes what arrives (or reaches the decode pool) at this instant.
      if (arrival <= ready) {
        while (nextArrival < n && arrivalOf(nextArrival) === arrival) {
          const req = requests[nextArrival]!;
          front.waiting.push(newJob(nextArrival, split ? { ...req, outputLength: 1 } : req, paths[nextArrival]!));
          nextArrival++;
        }
        front.route(arrival);
      } else {
        while (transferHead < transfers.length && readyAt[transfers[transferHead]!] === ready) {
          const i = transfers[transferHead++]!;
          back!.waiting.push(decodeJob(i, requests[i]!));
        }
        back!.route(ready);
      }
      continue;
    }
    if (engineT === Infinity) break; // nothing left to arrive or run
    const onFront = frontT <= backT;
    const pool = onFront ? front : back!;
    const k = onFront ? fe : be;
    const engine = pool.engines[k]!;
    // What waits for room is retried as the engine that comes next runs (every other busy engine is at or past it).
    pool.route(engine.t);
    const queued = front.waiting.length + (back?.waiting.length ?? 0);
    if (queued > maxQueued) (maxQueued = queued), (maxQueuedAtMs = engine.t);
    const before = engine.finished;
    engine.iterate();
    if (!split) finished += engine.finished - before;
    else if (!onFront) {
      finished += engine.finished - before;
      // A decode's first token: its KV cache has left its prefill rank.
      if (inTransfer) {
        for (const i of pool.outstanding[k]!) {
          if (decodeTtft[i] === 0) continue;
          pool.outstanding[k]!.delete(i);
          pool.rankOf.delete(i);
          const r = front.rankOf.get(i)!;
          front.rankOf.delete(i);
          front.extraRequests[r]!--;
          front.extraTokens[r]! -= requests[i]!.inputLength;
        }
      }
    } else {
      // Prefills that ended this iteration hand their KV cache over.
      for (const i of pool.outstanding[k]!) {
        if (first[i] === 0) continue;
        pool.outstanding[k]!.delete(i);
        if (inTransfer) {
          const r = pool.rankOf.get(i)!;
          pool.extraRequests[r]!++;
          pool.extraTokens[r]! += requests[i]!.inputLength;
        } else pool.rankOf.delete(i);
        const ms = layout.transferMsPerToken * requests[i]!.inputLength;
        transferMs += ms;
        readyAt[i] = engine.t + ms;
        insertByReady(transfers, transferHead, i, readyAt);
      }
    }
    if (++steps % 64 === 0) {
      loadSamples.push([engine.t, ...front.engines.flatMap((x) => x.active)]);
      progress?.(finished);
    }
  }
  const ttft = split ? Float64Array.from(first, (_, i) => readyAt[i]! - arrivalOf(i) + decodeTtft[i]!) : first;
  const itl: number[] = [];
  for (let i = 0; i < n; i++) {
    const tokens = requests[i]!.outputLength;
    if (tokens > 1) itl.push((endAt[i]! - (arrivalOf(i) + ttft[i]!)) / (tokens - 1));
  }
  return {
    ...sumFigures(front.engines),
    ttftMs: ttft,
    routeMs: front.routeMs + (back?.routeMs ?? 0),
    routed: front.routed,
    loadSamples,
    simulatedMs: Math.max(...front.engines.map((x) => x.t), ...(back?.engines.map((x) => x.t) ?? [])),
    maxQueued,
    maxQueuedAtMs,
    decodeRequestsPerRank: back === null ? [] : back.engines.flatMap((e) => e.figures().requestsPerRank),
    meanTransferMs: n === 0 ? 0 : transferMs / n,
    itlSorted: Float64Array.from(itl).sort(),
  };
}

/** Inserts request `i` into `transfers` (from `head` on, ordered by `readyAt`; equal times keep their order). */
function insertByReady(transfers: number[], head: number, i: number, readyAt: Float64Array): void {
  let at = transfers.length;
  while (at > head && readyAt[transfers[at - 1]!]! > readyAt[i]!) at--;
  transfers.splice(at, 0, i);
}
