// One attention-DP engine of the serving model behind `adp-router simulate`:
// `ranks` ranks that step together, as ADP ranks do (an iteration lasts as long
// as its slowest rank), each a continuous-batching scheduler with its own true
// prefix cache. Whoever drives it (engine.ts: one engine and its router;
// fleet.ts: several engines behind a gateway) assigns requests to ranks and
// calls `iterate()`; the rules of an iteration are in engine.ts's header.

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


/** A request in the engine: its trace entry, interned path, rank and prefill progress. */
export interface Job {
  readonly index: number;
  readonly req: TraceRequest;
  readonly path: Int32Array;
  rank: number;
  cachedTokens: number;
  prefillLeft: number;
  started: boolean;
}

/** A new job for request `index` (not yet on a rank). */
export const newJob = (index: number, req: TraceRequest, path: Int32Array): Job => ({ index, req, path, rank: -1, cachedTokens: 0, prefillLeft: 0, started: false });

/** What a router is asked about a job: the trace's id, length, block keys and conversation. */
export const routeRequestOf = (j: Job): RouteRequest => ({ id: j.index, numTokens: j.req.inputLength, blockKeys: j.req.blocks, conversationId: j.req.conversationId });

/** Where an engine publishes one rank's KV events of an iteration, at the iteration's end. */
export type EventSink = (rank: number, events: unknown[], atMs: number) => void;

/** The counters of one engine's run (the rest of a RunResult is its driver's). */
export interface EngineFigures {
  readonly hitBlocks: number;
  readonly totalBlocks: number;
  readonly prefillTokens: number;
  readonly prefillPerRank: number[];
  readonly requestsPerRank: number[];
}

/** The counters of several engines as one: sums, and their ranks' lists end to end. */
export function sumFigures(engines: readonly LockstepEngine[]): EngineFigures {
  const figures = engines.map((e) => e.figures());
  const sum = (pick: (f: EngineFigures) => number) => figures.reduce((t, f) => t + pick(f), 0);
  return {
    hitBlocks: sum((f) => f.hitBlocks),
    totalBlocks: sum((f) => f.totalBlocks),
    prefillTokens: sum((f) => f.prefillTokens),
    prefillPerRank: figures.flatMap((f) => f.prefillPerRank),
    requestsPerRank: figures.flatMap((f) => f.requestsPerRank),
  };
}

/** One lockstep engine: its ranks' queues, true caches and clock. */
export class LockstepEngine {
  /** Its clock: when its next iteration starts, simulated ms. */
  t = 0;
  /** Iterations run. */
  iteration = 0;
  /** Requests on its ranks (prefilling or decoding). */
  totalActive = 0;
  /** Requests it finished. */
  finished = 0;
  /** When each request's last token came (by request index), when its driver asks (set before the first iteration); null: not kept. */
  endAt: Float64Array | null = null;
  /** Per rank: active requests, and their prompt tokens (less cached ones when the router discounts them). */
  readonly active: number[];
  readonly activeTokens: number[];
  readonly #R: number;
  readonly #opts: EngineOptions;
  readonly #blockTokens: number;
  readonly #discountCached: boolean;
  readonly #caches: TrueCache[];
  /** A path id's block key (for the events of evictions). */
  readonly #keyOf: Float64Array | null;
  /** Per rank: assigned, prefill not finished (FIFO from #waitingHead). */
  readonly #waiting: Job[][];
  readonly #waitingHead: number[];
  readonly #decodingCount: number[];
  /** Decoding requests by the iteration that produces their last token. */
  readonly #ending = new Map<number, Job[]>();
  /** Each rank's KV events of the current iteration, published together at its end. */
  #events: unknown[][];
  readonly #publish: EventSink | undefined;
  readonly #ttft: Float64Array;
  readonly #arrivalOf: (i: number) => number;
  #hitBlocks = 0;
  #totalBlocks = 0;
  #prefillTokens = 0;
  readonly #prefillPerRank: number[];
  readonly #requestsPerRank: number[];

  /**
   * An engine of `opts.ranks` ranks over `numPaths` interned paths, writing each
   * request's TTFT into `ttft` (indexed by request) from its arrival `arrivalOf(i)`.
   */
  constructor(numPaths: number, blockTokens: number, opts: EngineOptions, discountCached: boolean, ttft: Float64Array, arrivalOf: (i: number) => number, publish?: EventSink) {
    const R = (this.#R = opts.ranks);
    this.#opts = opts;
    this.#blockTokens = blockTokens;
    this.#discountCached = discountCached;
    const bounded = opts.cacheBlocks > 0;
    this.#caches = Array.from({ length: R }, () => new TrueCache(numPaths, bounded));
    this.#keyOf = bounded ? new Float64Array(numPaths) : null;
    this.#waiting = Array.from({ length: R }, () => []);
    this.#waitingHead = new Array<number>(R).fill(0);
    this.#decodingCount = new Array<number>(R).fill(0);
    this.active = new Array<number>(R).fill(0);
    this.activeTokens = new Array<number>(R).fill(0);
    this.#prefillPerRank = new Array<number>(R).fill(0);
    this.#requestsPerRank = new Array<number>(R).fill(0);
    this.#events = Array.from({ length: R }, () => []);
    this.#publish = publish;
    this.#ttft = ttft;
    this.#arrivalOf = arrivalOf;
  }

  /** The blocks of `path` rank `rank`'s true cache holds, from the start (what its engine's events tell a gateway). */
  heldBlocks(rank: number, path: Int32Array): number {
    const cache = this.#caches[rank]!;
    let hit = 0;
    while (hit < path.length && cache.has(path[hit]!)) hit++;
    return hit;
  }

  /** Puts `job` on `rank`'s prefill queue. */
  assign(job: Job, rank: number): void {
    job.rank = rank;
    this.#waiting[rank]!.push(job);
    this.active[rank]!++;
    this.totalActive++;
    this.activeTokens[rank]! += this.#tokensOf(job);
    this.#requestsPerRank[rank]!++;
  }

  /** Its counters so far. */
  figures(): EngineFigures {
    return { hitBlocks: this.#hitBlocks, totalBlocks: this.#totalBlocks, prefillTokens: this.#prefillTokens, prefillPerRank: this.#prefillPerRank, requestsPerRank: this.#requestsPerRank };
  }

  /** A job's load on its rank's token count. */
  #tokensOf(job: Job): number {
    return this.#discountCached ? Math.max(job.req.inputLength - job.cachedTokens, 0) : job.req.inputLength;
  }

  /** A job leaves its rank. */
  #finish(job: Job): void {
    const r = job.rank;
    if (this.endAt !== null) this.endAt[job.index] = this.t;
    this.active[r]!--;
    this.totalActive--;
    this.activeTokens[r]! -= this.#tokensOf(job);
    this.finished++;
  }

  /** Inserts a finished prompt's blocks into the rank's cache, leaf first so eviction takes leaves first. */
  #store(rank: number, job: Job): void {
    const cache = this.#caches[rank]!;
    const keyOf = this.#keyOf;
    const publish = this.#publish !== undefined;
    const blocks = job.req.blocks;
    const path = job.path;
    let firstNew = -1;
    for (let i = path.length - 1; i >= 0; i--) {
      const id = path[i]!;
      if (cache.touch(id)) firstNew = i;
      if (keyOf !== null) keyOf[id] = blocks[i]!;
    }
    if (publish && firstNew >= 0) {
      this.#events[rank]!.push({
        event_id: 0,
        // Block keys are chained (a trace's hash_ids), so they serve as the engine's
        // block hashes; blocks without tokens are keyed by that hash.
        data: { type: "stored", parent_hash: firstNew === 0 ? null : blocks[firstNew - 1], blocks: blocks.slice(firstNew).map((block_hash) => ({ block_hash })) },
        attention_dp_rank: rank,
      });
    }
    if (keyOf !== null) {
      const removed: number[] = [];
      while (cache.size > this.#opts.cacheBlocks) removed.push(keyOf[cache.evictOldest()]!);
      if (publish && removed.length > 0) this.#events[rank]!.push({ event_id: 0, data: { type: "removed", block_hashes: removed }, attention_dp_rank: rank });
    }
  }

  /** One iteration on every rank: prefill in chunks, one decode token each, finishes; then its events. */
  iterate(): void {
    const opts = this.#opts;
    let slowest = 0;
    const prefilled: Job[] = [];
    for (let r = 0; r < this.#R; r++) {
      let budget = opts.maxNumTokens - this.#decodingCount[r]!;
      let prefillNow = 0;
      const list = this.#waiting[r]!;
      for (let w = this.#waitingHead[r]!; w < list.length; w++) {
        if (budget <= 0) break;
        const job = list[w]!;
        if (!job.started) {
          // Prefill starts: look the prompt up in this rank's true cache.
          const hit = this.heldBlocks(r, job.path);
          this.#hitBlocks += hit;
          this.#totalBlocks += job.path.length;
          job.cachedTokens = Math.min(hit * this.#blockTokens, job.req.inputLength - 1);
          job.prefillLeft = job.req.inputLength - job.cachedTokens;
          job.started = true;
          this.#prefillTokens += job.prefillLeft;
          this.#prefillPerRank[r]! += job.prefillLeft;
          if (this.#discountCached) this.activeTokens[r]! -= job.cachedTokens;
        }
        const chunk = Math.min(job.prefillLeft, budget);
        job.prefillLeft -= chunk;
        budget -= chunk;
        prefillNow += chunk;
        // A request that does not finish its prefill takes the rest of the budget:
        // the ones that finish are a prefix of the rank's queue.
        if (job.prefillLeft === 0) {
          prefilled.push(job);
          this.#waitingHead[r]!++;
        }
      }
      if (this.#waitingHead[r]! > 1024 && this.#waitingHead[r]! * 2 > list.length) {
        list.splice(0, this.#waitingHead[r]!);
        this.#waitingHead[r] = 0;
      }
      const work = prefillNow * opts.prefillMsPerToken + this.#decodingCount[r]! * opts.decodeMsPerRequest;
      if (work > slowest) slowest = work;
    }
    this.t += opts.iterationBaseMs + slowest;
    const iteration = ++this.iteration;

    // Decode one token for each running request; finish the ones whose last token this was.
    const done = this.#ending.get(iteration);
    if (done !== undefined) {
      this.#ending.delete(iteration);
      for (const job of done) {
        this.#decodingCount[job.rank]!--;
        this.#finish(job);
      }
    }
    for (const job of prefilled) {
      const r = job.rank;
      this.#ttft[job.index] = this.t - this.#arrivalOf(job.index);
      this.#store(r, job);
      if (job.req.outputLength <= 1) this.#finish(job);
      else {
        // It decodes one token an iteration from the next one: its last comes outputLength − 1 iterations on.
        // (an uneven length ends on the iteration a per-token countdown from outputLength − 1 would).
        const steps = Math.ceil(job.req.outputLength - 1);
        const last = iteration + (steps >= 1 ? steps : 1);
        const bucket = this.#ending.get(last);
        if (bucket === undefined) this.#ending.set(last, [job]);
        else bucket.push(job);
        this.#decodingCount[r]!++;
      }
    }
    // Each rank publishes what its cache did this iteration as one batch.
    if (this.#publish !== undefined) {
      for (let r = 0; r < this.#R; r++) {
        if (this.#events[r]!.length === 0) continue;
        this.#publish(r, this.#events[r]!, this.t);
        this.#events[r] = [];
      }
    }
  }
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
