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
import { LockstepEngine, newJob, routeRequestOf, type EngineOptions, type Job } from "./lockstep.js";
import type { TraceRequest } from "./trace.js";

export { DEFAULT_ENGINE, type EngineOptions } from "./lockstep.js";

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
  /** The most requests that waited at once for a rank (arrived, not yet placed: every rank full, or the router refusing them). */
  readonly maxQueued: number;
  /** Simulated time of that moment, ms. */
  readonly maxQueuedAtMs: number;
}

/**
 * Interns block paths: (parent path, block key) → path id, so caches hold prefixes
 * exactly. Ids count from 0 in order of first appearance; a path's ids grow along it.
 */
export function internPaths(requests: readonly TraceRequest[]): Int32Array[] {
  // Every pair is in a map: integer keys below 2^32 under a parent below 2^20 by
  // one number (exact below 2^53), any other pair by its text. Most paths have one
  // child (a conversation's next block), so each path's first child is also kept
  // beside it in typed arrays, checked before the map.
  const byNumber = new Map<number, number>();
  const byText = new Map<string, number>();
  let firstKey = new Float64Array(1 << 16);
  let firstId = new Int32Array(1 << 16).fill(-1);
  let next = 0;
  return requests.map((r) => {
    const path = new Int32Array(r.blocks.length);
    let parent = -1;
    for (let i = 0; i < r.blocks.length; i++) {
      const key = r.blocks[i]!;
      const slot = parent + 1;
      let id: number | undefined = firstId[slot]! >= 0 && firstKey[slot] === key ? firstId[slot]! : undefined;
      if (id === undefined) {
        if (Number.isInteger(key) && key >= 0 && key < 2 ** 32 && parent < 2 ** 20 - 1) {
          const k = (parent + 1) * 2 ** 32 + key;
          id = byNumber.get(k);
          if (id === undefined) byNumber.set(k, (id = next++));
        } else {
          const k = `${parent}:${key}`;
          id = byText.get(k);
          if (id === undefined) byText.set(k, (id = next++));
        }
        if (firstId[slot]! < 0) {
          firstId[slot] = id;
          firstKey[slot] = key;
        }
        if (next + 1 >= firstId.length) {
          const ids = new Int32Array(firstId.length * 2).fill(-1);
          ids.set(firstId);
          firstId = ids;
          const keys = new Float64Array(firstKey.length * 2);
          keys.set(firstKey);
          firstKey = keys;
        }
      }
      path[i] = parent = id;
    }
    return path;
  });
}

/** {@link internPaths} per request list, kept while the list lives. */
const internedByRequests = new WeakMap<readonly TraceRequest[], readonly Int32Array[]>();

/**
 * The interned paths of `requests`, interned once per list: every run on one
 * trace (a simulation's policies, the optimum, each of a tune search's
 * simulations) reads the same paths, and interning costs about a fifth of a
 * run on the bundled trace. A trace's requests are read-only, so the paths stay true.
 */
export function pathsOf(requests: readonly TraceRequest[]): readonly Int32Array[] {
  let paths = internedByRequests.get(requests);
  if (paths === undefined) internedByRequests.set(requests, (paths = internPaths(requests)));
  return paths;
}

/** The prefix hit ratio of one infinite cache over interned paths (see `optimumHitRatio`). */
export function optimumHitRatioOfPaths(paths: readonly Int32Array[]): number {
  const seen = new Uint8Array(pathCount(paths));
  let hits = 0;
  let total = 0;
  for (const path of paths) {
    let i = 0;
    while (i < path.length && seen[path[i]!] === 1) i++;
    hits += i;
    total += path.length;
    for (const id of path) seen[id] = 1;
  }
  return total === 0 ? 0 : hits / total;
}

/** Path ids in `paths` (a path's ids grow along it: its last is its largest). */
export function pathCount(paths: readonly Int32Array[]): number {
  let max = -1;
  for (const path of paths) if (path.length > 0 && path[path.length - 1]! > max) max = path[path.length - 1]!;
  return max + 1;
}

/**
 * Runs the trace through the engine with one router; `progress` gets the number of
 * finished requests every 64 iterations.
 *
 * Cost: every per-iteration step is O(ranks + requests the step touches): the
 * arrivals wait in a queue read from its head, each rank's prefill queue is read
 * from its head (the requests an iteration prefills are always a prefix of it),
 * decoding requests are bucketed by the iteration of their last token, and the true
 * caches are O(1) a block. Nothing scans the requests that wait.
 */
export function runEngine(
  requests: readonly TraceRequest[],
  paths: readonly Int32Array[],
  blockTokens: number,
  opts: EngineOptions,
  router: RouterSide,
  progress?: (finished: number) => void,
): RunResult {
  const R = opts.ranks;
  const n = requests.length;
  const ttft = new Float64Array(n);
  const arrivalOf = (i: number) => requests[i]!.arrivalMs / opts.rateScale;
  const engine = new LockstepEngine(pathCount(paths), blockTokens, opts, router.discountCached, ttft, arrivalOf, router.publish?.bind(router));
  const queue: Job[] = [];
  const loadSamples: number[][] = [];
  let queueHead = 0;
  let nextArrival = 0;
  let maxQueued = 0;
  let maxQueuedAtMs = 0;
  let routeMs = 0;
  let routed = 0;

  while (engine.finished < n) {
    const idle = queueHead === queue.length && engine.totalActive === 0;
    if (idle && nextArrival < n) engine.t = Math.max(engine.t, arrivalOf(nextArrival));
    while (nextArrival < n && arrivalOf(nextArrival) <= engine.t) {
      queue.push(newJob(nextArrival, requests[nextArrival]!, paths[nextArrival]!));
      nextArrival++;
    }

    // Fetch and route: at most ranks × cap − active requests, in arrival order.
    if (queueHead < queue.length) {
      const room = R * opts.maxNumActiveRequests - engine.totalActive;
      const batch = queue.slice(queueHead, queueHead + Math.max(room, 0));
      if (batch.length > 0) {
        const states = engine.active.map((a, r) => ({ numActiveRequests: a, numActiveTokens: engine.activeTokens[r]! }));
        const t0 = performance.now();
        const ranks = router.route(states, opts.maxNumActiveRequests, batch.map(routeRequestOf), engine.t);
        routeMs += performance.now() - t0;
        const retry: Job[] = [];
        for (let i = 0; i < batch.length; i++) {
          const job = batch[i]!;
          const rank = ranks[i]!;
          if (rank < 0) {
            retry.push(job);
            continue;
          }
          routed++;
          engine.assign(job, rank);
        }
        // Unplaced requests go back to the front, in order.
        queueHead += batch.length - retry.length;
        for (let i = 0; i < retry.length; i++) queue[queueHead + i] = retry[i]!;
        if (queueHead > 4096 && queueHead * 2 > queue.length) {
          queue.splice(0, queueHead);
          queueHead = 0;
        }
      }
      if (queue.length - queueHead > maxQueued) {
        maxQueued = queue.length - queueHead;
        maxQueuedAtMs = engine.t;
      }
    }

    engine.iterate();
    if (engine.iteration % 64 === 0) {
      loadSamples.push([engine.t, ...engine.active]);
      progress?.(engine.finished);
    }
  }
  return { ...engine.figures(), ttftMs: ttft, routeMs, routed, loadSamples, simulatedMs: engine.t, maxQueued, maxQueuedAtMs };
}

/** Whether a run's offered load exceeded what the simulated engine serves, and why (null when it did not). */
export interface Overload {
  readonly overloaded: boolean;
  readonly reason: string | null;
}

/** TTFT p50 beyond this many times a median prompt's prefill alone on an idle rank marks an overloaded run. */
export const OVERLOAD_TTFT_FACTOR = 10;

/**
 * Judges a run overloaded when requests queued for a rank outnumbered what the
 * whole engine holds at once (ranks × `maxNumActiveRequests`: the queue outran
 * the engine), or when its TTFT p50 exceeds {@link OVERLOAD_TTFT_FACTOR} times
 * the prefill of the median prompt alone on an idle rank, uncached (requests
 * mostly waited, however large `maxNumActiveRequests` is).
 */
export function judgeOverload(run: RunResult, ttftP50: number, requests: readonly TraceRequest[], opts: EngineOptions): Overload {
  const holds = opts.ranks * opts.maxNumActiveRequests;
  const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  if (run.maxQueued > holds) {
    return {
      overloaded: true,
      reason: `${run.maxQueued} requests waited at once for a rank (at ${seconds(run.maxQueuedAtMs)}), more than the ${holds} the engine holds (${opts.ranks} ranks × ${opts.maxNumActiveRequests} active)`,
    };
  }
  const alone = requests.map((r) => Math.ceil(r.inputLength / opts.maxNumTokens) * opts.iterationBaseMs + r.inputLength * opts.prefillMsPerToken).sort((a, b) => a - b);
  const yardstick = alone.length === 0 ? 0 : alone[alone.length >> 1]!;
  if (yardstick > 0 && ttftP50 > OVERLOAD_TTFT_FACTOR * yardstick) {
    return {
      overloaded: true,
      reason: `TTFT p50 ${seconds(ttftP50)} is ${Math.round(ttftP50 / yardstick)}× the median prompt's prefill alone (${yardstick.toFixed(1)} ms)`,
    };
  }
  return { overloaded: false, reason: null };
}
