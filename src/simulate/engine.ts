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
function pathCount(paths: readonly Int32Array[]): number {
  let max = -1;
  for (const path of paths) if (path.length > 0 && path[path.length - 1]! > max) max = path[path.length - 1]!;
  return max + 1;
}

/**
 * One rank's true prefix cache over interned path ids: membership in a byte per
 * path id, and (when bounded) recency in an intrusive doubly linked list, least
 * recent first. O(1) per block: it behaves exactly as a `Map` kept in LRU order
 * by delete-and-set, which it replaced (that `Map` was most of the run time).
 */
class TrueCache {
  readonly #has: Uint8Array;
  readonly #prev: Int32Array | null;
  readonly #next: Int32Array | null;
  #head = -1;
  #tail = -1;
  size = 0;

  constructor(paths: number, bounded: boolean) {
    this.#has = new Uint8Array(paths);
    this.#prev = bounded ? new Int32Array(paths) : null;
    this.#next = bounded ? new Int32Array(paths) : null;
  }

  has(id: number): boolean {
    return this.#has[id] === 1;
  }

  /** Makes `id` the most recent entry, adding it if absent; returns whether it was absent. */
  touch(id: number): boolean {
    const added = this.#has[id] !== 1;
    const prev = this.#prev;
    const next = this.#next;
    if (added) {
      this.#has[id] = 1;
      this.size++;
    } else if (prev !== null && next !== null && this.#tail !== id) {
      // Unlink (not the tail, so it has a successor).
      const p = prev[id]!;
      const n = next[id]!;
      if (p < 0) this.#head = n;
      else next[p] = n;
      prev[n] = p;
    } else return false;
    if (prev !== null && next !== null) {
      prev[id] = this.#tail;
      next[id] = -1;
      if (this.#tail < 0) this.#head = id;
      else next[this.#tail] = id;
      this.#tail = id;
    }
    return added;
  }

  /** Removes the least recent entry and returns it (bounded caches only, not empty). */
  evictOldest(): number {
    const id = this.#head;
    const n = this.#next![id]!;
    this.#head = n;
    if (n < 0) this.#tail = -1;
    else this.#prev![n] = -1;
    this.#has[id] = 0;
    this.size--;
    return id;
  }
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
  const numPaths = pathCount(paths);
  const bounded = opts.cacheBlocks > 0;
  const caches = Array.from({ length: R }, () => new TrueCache(numPaths, bounded));
  /** A path id's block key (for the events of evictions). */
  const keyOf = bounded ? new Float64Array(numPaths) : null;
  const waiting: Job[][] = Array.from({ length: R }, () => []); // assigned, prefill not finished (FIFO from waitingHead)
  const waitingHead = new Array<number>(R).fill(0);
  const decodingCount = new Array<number>(R).fill(0);
  /** Decoding requests by the iteration that produces their last token. */
  const ending = new Map<number, Job[]>();
  const active = new Array<number>(R).fill(0);
  const activeTokens = new Array<number>(R).fill(0);
  const prefillPerRank = new Array<number>(R).fill(0);
  const requestsPerRank = new Array<number>(R).fill(0);
  const ttft = new Float64Array(n);
  const queue: Job[] = [];
  const loadSamples: number[][] = [];
  /** Each rank's KV events of the current iteration, published together at its end. */
  const events: unknown[][] = Array.from({ length: R }, () => []);
  let queueHead = 0;
  let nextArrival = 0;
  let maxQueued = 0;
  let maxQueuedAtMs = 0;
  let totalActive = 0;
  let finished = 0;
  let hitBlocks = 0;
  let totalBlocks = 0;
  let prefillTokens = 0;
  let routeMs = 0;
  let routed = 0;
  let t = 0;
  let iteration = 0;
  const arrivalOf = (i: number) => requests[i]!.arrivalMs / opts.rateScale;
  const tokensOf = (job: Job) => (router.discountCached ? Math.max(job.req.inputLength - job.cachedTokens, 0) : job.req.inputLength);
  const finish = (job: Job) => {
    const r = job.rank;
    active[r]!--;
    totalActive--;
    activeTokens[r]! -= tokensOf(job);
    finished++;
  };

  /** Inserts a finished prompt's blocks into the rank's cache, leaf first so eviction takes leaves first. */
  const store = (rank: number, job: Job) => {
    const cache = caches[rank]!;
    const blocks = job.req.blocks;
    const path = job.path;
    let firstNew = -1;
    for (let i = path.length - 1; i >= 0; i--) {
      const id = path[i]!;
      if (cache.touch(id)) firstNew = i;
      if (keyOf !== null) keyOf[id] = blocks[i]!;
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
    if (keyOf !== null) {
      const removed: number[] = [];
      while (cache.size > opts.cacheBlocks) removed.push(keyOf[cache.evictOldest()]!);
      if (router.publish && removed.length > 0) events[rank]!.push({ event_id: 0, data: { type: "removed", block_hashes: removed }, attention_dp_rank: rank });
    }
  };

  while (finished < n) {
    const idle = queueHead === queue.length && totalActive === 0;
    if (idle && nextArrival < n) t = Math.max(t, arrivalOf(nextArrival));
    while (nextArrival < n && arrivalOf(nextArrival) <= t) {
      queue.push({ index: nextArrival, req: requests[nextArrival]!, path: paths[nextArrival]!, rank: -1, cachedTokens: 0, prefillLeft: 0, started: false });
      nextArrival++;
    }

    // Fetch and route: at most ranks × cap − active requests, in arrival order.
    if (queueHead < queue.length) {
      const room = R * opts.maxNumActiveRequests - totalActive;
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
        for (let i = 0; i < batch.length; i++) {
          const job = batch[i]!;
          const rank = ranks[i]!;
          if (rank < 0) {
            retry.push(job);
            continue;
          }
          routed++;
          job.rank = rank;
          waiting[rank]!.push(job);
          active[rank]!++;
          totalActive++;
          activeTokens[rank]! += tokensOf(job);
          requestsPerRank[rank]!++;
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
        maxQueuedAtMs = t;
      }
    }

    // One iteration on every rank.
    let slowest = 0;
    const prefilled: Job[] = [];
    for (let r = 0; r < R; r++) {
      let budget = opts.maxNumTokens - decodingCount[r]!;
      let prefillNow = 0;
      const list = waiting[r]!;
      for (let w = waitingHead[r]!; w < list.length; w++) {
        if (budget <= 0) break;
        const job = list[w]!;
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
        // A request that does not finish its prefill takes the rest of the budget:
        // the ones that finish are a prefix of the rank's queue.
        if (job.prefillLeft === 0) {
          prefilled.push(job);
          waitingHead[r]!++;
        }
      }
      if (waitingHead[r]! > 1024 && waitingHead[r]! * 2 > list.length) {
        list.splice(0, waitingHead[r]!);
        waitingHead[r] = 0;
      }
      const work = prefillNow * opts.prefillMsPerToken + decodingCount[r]! * opts.decodeMsPerRequest;
      if (work > slowest) slowest = work;
    }
    t += opts.iterationBaseMs + slowest;
    iteration++;

    // Decode one token for each running request; finish the ones whose last token this was.
    const done = ending.get(iteration);
    if (done !== undefined) {
      ending.delete(iteration);
      for (const job of done) {
        decodingCount[job.rank]!--;
        finish(job);
      }
    }
    for (const job of prefilled) {
      const r = job.rank;
      ttft[job.index] = t - arrivalOf(job.index);
      store(r, job);
      if (job.req.outputLength <= 1) finish(job);
      else {
        // It decodes one token an iteration from the next one: its last comes outputLength − 1 iterations on.
        // (an uneven length ends on the iteration a per-token countdown from outputLength − 1 would).
        const steps = Math.ceil(job.req.outputLength - 1);
        const last = iteration + (steps >= 1 ? steps : 1);
        const bucket = ending.get(last);
        if (bucket === undefined) ending.set(last, [job]);
        else bucket.push(job);
        decodingCount[r]!++;
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
      progress?.(finished);
    }
  }
  return { hitBlocks, totalBlocks, prefillTokens, prefillPerRank, requestsPerRank, ttftMs: ttft, routeMs, routed, loadSamples, simulatedMs: t, maxQueued, maxQueuedAtMs };
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
