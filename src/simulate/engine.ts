// The serving model behind `adp-router simulate`: one attention-DP engine of
// `ranks` ranks that step together, as ADP ranks do (every iteration lasts as long
// as its slowest rank), each a simple continuous-batching scheduler with its own
// true prefix cache, fed by a router called once per iteration with everything
// that arrived since the last call.
//
// Per iteration and rank: every decoding request costs `decodeMsPerRequest` and one
// token of the `maxNumTokens` budget; the rest of the budget goes to prefill,
// oldest request first, in chunks; prefill costs `prefillMsPerToken` per token not
// found in the rank's cache. Iteration time = `iterationBaseMs` + the largest
// rank's work. A request's first token (TTFT) comes at the end of the iteration
// that finishes its prefill; it then decodes one token per iteration.
//
// Each rank's true cache is an LRU of block paths (unbounded unless `cacheBlocks`)
// and is separate from what the router believes. The router learns either from its
// own decisions or from the KV events these caches emit: each rank publishes its
// events of an iteration as one batch at the iteration's end (how they travel to
// the router is src/simulate/event-feed.ts).

import type { RouteRequest } from "../batch.js";
import type { TraceRequest } from "./trace.js";

/** Engine parameters; every one is documented in the README and settable on the command line. */
export interface EngineOptions {
  /** Attention-DP ranks. */
  readonly ranks: number;
  /** Per-rank token budget of one iteration (`max_num_tokens`). @default 8192 */
  readonly maxNumTokens: number;
  /** Per-rank cap on active requests (`max_num_active_requests`). @default 128 */
  readonly maxNumActiveRequests: number;
  /** Fixed cost of an iteration, ms. @default 4 */
  readonly iterationBaseMs: number;
  /** Prefill cost per uncached prompt token, ms. @default 0.02 */
  readonly prefillMsPerToken: number;
  /** Decode cost per running request per iteration, ms. @default 0.1 */
  readonly decodeMsPerRequest: number;
  /** True cache capacity per rank in blocks; 0 = unbounded. @default 0 */
  readonly cacheBlocks: number;
  /** Arrival-time divisor: 2 replays the trace twice as fast. @default 1 */
  readonly rateScale: number;
}

/** Engine defaults. */
export const DEFAULT_ENGINE: Omit<EngineOptions, "ranks"> = Object.freeze({
  maxNumTokens: 8192,
  maxNumActiveRequests: 128,
  iterationBaseMs: 4,
  prefillMsPerToken: 0.02,
  decodeMsPerRequest: 0.1,
  cacheBlocks: 0,
  rateScale: 1,
});

/** What the simulated engine tells the router each iteration. */
export interface RouterSide {
  /** Routes one batch at simulated time `nowMs`; returns the rank per request (-1 = not placed, retried next iteration). */
  route(states: { numActiveRequests: number; numActiveTokens: number }[], cap: number, requests: RouteRequest[], nowMs: number): number[];
  /** Whether rank loads should discount cached tokens (the KV-cache-aware router's rank state). */
  readonly discountCached: boolean;
  /**
   * One rank's KV events of one iteration, published at `atMs`, when the router
   * learns from them (how and when they reach it is the router side's business).
   */
  publish?(rank: number, events: unknown[], atMs: number): void;
}

/** Per-request outcome. */
interface Job {
  readonly index: number;
  readonly req: TraceRequest;
  readonly path: Int32Array;
  rank: number;
  cachedTokens: number;
  prefillLeft: number;
  decodeLeft: number;
  started: boolean;
}

/** Results of one simulated run. */
export interface RunResult {
  readonly hitBlocks: number;
  readonly totalBlocks: number;
  readonly prefillTokens: number;
  readonly prefillPerRank: number[];
  readonly requestsPerRank: number[];
  readonly ttftMs: Float64Array;
  readonly routeMs: number;
  readonly routed: number;
  /** Active requests per rank, sampled over time: [timeMs, ...counts]. */
  readonly loadSamples: number[][];
  readonly simulatedMs: number;
}

/** Interns block paths: (parent path, block key) → path id, so caches hold prefixes exactly. */
export function internPaths(requests: readonly TraceRequest[]): Int32Array[] {
  const ids = new Map<string, number>();
  return requests.map((r) => {
    const path = new Int32Array(r.blocks.length);
    let parent = -1;
    for (let i = 0; i < r.blocks.length; i++) {
      const k = `${parent}:${r.blocks[i]}`;
      let id = ids.get(k);
      if (id === undefined) ids.set(k, (id = ids.size));
      path[i] = parent = id;
    }
    return path;
  });
}

/** Runs the trace through the engine with one router; `progress` gets the fraction done. */
export function runEngine(
  requests: readonly TraceRequest[],
  paths: readonly Int32Array[],
  blockTokens: number,
  opts: EngineOptions,
  router: RouterSide,
  progress?: (fraction: number) => void,
): RunResult {
  const R = opts.ranks;
  const caches = Array.from({ length: R }, () => new Map<number, number>()); // path id → block key
  const waiting: Job[][] = Array.from({ length: R }, () => []); // assigned, prefill not finished (FIFO)
  const decoding: Job[][] = Array.from({ length: R }, () => []);
  const active = new Array<number>(R).fill(0);
  const activeTokens = new Array<number>(R).fill(0);
  const prefillPerRank = new Array<number>(R).fill(0);
  const requestsPerRank = new Array<number>(R).fill(0);
  const ttft = new Float64Array(requests.length);
  const queue: Job[] = [];
  const loadSamples: number[][] = [];
  /** Each rank's KV events of the current iteration, published together at its end. */
  const events: unknown[][] = Array.from({ length: R }, () => []);
  let queueHead = 0;
  let nextArrival = 0;
  let finished = 0;
  let hitBlocks = 0;
  let totalBlocks = 0;
  let prefillTokens = 0;
  let routeMs = 0;
  let routed = 0;
  let t = 0;
  let iteration = 0;
  let lastProgress = 0;
  const arrivalOf = (i: number) => requests[i]!.arrivalMs / opts.rateScale;
  const tokensOf = (job: Job) => (router.discountCached ? Math.max(job.req.inputLength - job.cachedTokens, 0) : job.req.inputLength);

  /** Inserts a finished prompt's blocks into the rank's cache, leaf first so eviction takes leaves first. */
  const store = (rank: number, job: Job) => {
    const cache = caches[rank]!;
    const blocks = job.req.blocks;
    let firstNew = -1;
    for (let i = job.path.length - 1; i >= 0; i--) {
      const id = job.path[i]!;
      if (cache.has(id)) cache.delete(id);
      else firstNew = i;
      cache.set(id, blocks[i]!);
    }
    if (router.publish && firstNew >= 0) {
      events[rank]!.push({
        event_id: 0,
        // Block keys are chained (a trace's hash_ids), so they serve as the engine's
        // block hashes; blocks without tokens are keyed by that hash.
        data: { type: "stored", parent_hash: firstNew === 0 ? null : blocks[firstNew - 1], blocks: blocks.slice(firstNew).map((block_hash) => ({ block_hash })) },
        attention_dp_rank: rank,
      });
    }
    if (opts.cacheBlocks > 0) {
      const removed: number[] = [];
      while (cache.size > opts.cacheBlocks) {
        const [oldest, key] = cache.entries().next().value as [number, number];
        cache.delete(oldest);
        removed.push(key);
      }
      if (router.publish && removed.length > 0) events[rank]!.push({ event_id: 0, data: { type: "removed", block_hashes: removed }, attention_dp_rank: rank });
    }
  };

  while (finished < requests.length) {
    const idle = queueHead === queue.length && active.every((a) => a === 0);
    if (idle && nextArrival < requests.length) t = Math.max(t, arrivalOf(nextArrival));
    while (nextArrival < requests.length && arrivalOf(nextArrival) <= t) {
      queue.push({ index: nextArrival, req: requests[nextArrival]!, path: paths[nextArrival]!, rank: -1, cachedTokens: 0, prefillLeft: 0, decodeLeft: 0, started: false });
      nextArrival++;
    }

    // Fetch and route: at most ranks × cap − active requests, in arrival order.
    if (queueHead < queue.length) {
      const room = R * opts.maxNumActiveRequests - active.reduce((a, b) => a + b, 0);
      const batch = queue.slice(queueHead, queueHead + Math.max(room, 0));
      if (batch.length > 0) {
        const states = active.map((a, r) => ({ numActiveRequests: a, numActiveTokens: activeTokens[r]! }));
        const t0 = performance.now();
        const ranks = router.route(states, opts.maxNumActiveRequests, batch.map((j) => ({
          id: j.index,
          numTokens: j.req.inputLength,
          blockKeys: j.req.blocks,
          conversationId: j.req.conversationId,
        })), t);
        routeMs += performance.now() - t0;
        const retry: Job[] = [];
        batch.forEach((job, i) => {
          const rank = ranks[i]!;
          if (rank < 0) return void retry.push(job);
          routed++;
          job.rank = rank;
          waiting[rank]!.push(job);
          active[rank]!++;
          activeTokens[rank]! += tokensOf(job);
          requestsPerRank[rank]!++;
        });
        queueHead += batch.length;
        // Unplaced requests go back to the front, in order.
        queue.splice(queueHead - retry.length, retry.length, ...retry);
        queueHead -= retry.length;
        if (queueHead > 4096) {
          queue.splice(0, queueHead);
          queueHead = 0;
        }
      }
    }

    // One iteration on every rank.
    let slowest = 0;
    const prefilled: Job[] = [];
    for (let r = 0; r < R; r++) {
      let budget = opts.maxNumTokens - decoding[r]!.length;
      let prefillNow = 0;
      for (const job of waiting[r]!) {
        if (budget <= 0) break;
        if (!job.started) {
          // Prefill starts: look the prompt up in this rank's true cache.
          const cache = caches[r]!;
          let hit = 0;
          while (hit < job.path.length && cache.has(job.path[hit]!)) hit++;
          hitBlocks += hit;
          totalBlocks += job.path.length;
          job.cachedTokens = Math.min(hit * blockTokens, job.req.inputLength - 1);
          job.prefillLeft = job.req.inputLength - job.cachedTokens;
          job.started = true;
          prefillTokens += job.prefillLeft;
          prefillPerRank[r]! += job.prefillLeft;
          if (router.discountCached) activeTokens[r]! -= job.cachedTokens;
        }
        const chunk = Math.min(job.prefillLeft, budget);
        job.prefillLeft -= chunk;
        budget -= chunk;
        prefillNow += chunk;
        if (job.prefillLeft === 0) prefilled.push(job);
      }
      const work = prefillNow * opts.prefillMsPerToken + decoding[r]!.length * opts.decodeMsPerRequest;
      if (work > slowest) slowest = work;
    }
    t += opts.iterationBaseMs + slowest;
    iteration++;

    // Decode one token for each running request; finish the done ones.
    for (let r = 0; r < R; r++) {
      const list = decoding[r]!;
      let keep = 0;
      for (const job of list) {
        if (--job.decodeLeft > 0) list[keep++] = job;
        else {
          active[r]!--;
          activeTokens[r]! -= tokensOf(job);
          finished++;
        }
      }
      list.length = keep;
    }
    for (const job of prefilled) {
      const r = job.rank;
      ttft[job.index] = t - arrivalOf(job.index);
      waiting[r]!.splice(waiting[r]!.indexOf(job), 1);
      store(r, job);
      if (job.req.outputLength <= 1) {
        active[r]!--;
        activeTokens[r]! -= tokensOf(job);
        finished++;
      } else {
        job.decodeLeft = job.req.outputLength - 1;
        decoding[r]!.push(job);
      }
    }
    // Each rank publishes what its cache did this iteration as one batch.
    if (router.publish) {
      for (let r = 0; r < R; r++) {
        if (events[r]!.length === 0) continue;
        router.publish(r, events[r]!, t);
        events[r] = [];
      }
    }
    if (iteration % 64 === 0) {
      loadSamples.push([t, ...active]);
      if (progress && finished - lastProgress > requests.length / 100) {
        lastProgress = finished;
        progress(finished / requests.length);
      }
    }
  }
  return { hitBlocks, totalBlocks, prefillTokens, prefillPerRank, requestsPerRank, ttftMs: ttft, routeMs, routed, loadSamples, simulatedMs: t };
}
