// `adp-router simulate --instances N --ranks R`: N engines of R attention-DP
// ranks each (lockstep.ts, every engine on its own clock) behind a gateway
// that routes in two phases (src/instances.ts): phase 1 picks the engine as
// TensorRT-LLM's centralized router does, phase 2 its rank:
//
//   adp: the engine's own ADP router (the config's: KV-cache-aware by
//     default) run by the gateway, and the rank pinned (X-Data-Parallel-Rank);
//   instance: the centralized router's rank score, pinned;
//   none: no pin; each engine's own balancer places the request when it
//     fetches it, TensorRT-LLM's default (load-balancing) ADP router.
//
// The gateway sees each rank's true cache as the engine's KV events tell it
// (delivered at once), and each rank's load as the engine reports it plus the
// pinned requests it sent there that the engine has not fetched yet (the
// unpinned ones count at the engine, on no rank). Requests arrive at
// the gateway in trace order; those sharing an arrival time are one batch.
// An engine fetches what the gateway sent it at the start of each iteration:
// pinned requests join their rank's queue, the others (and requests phase 2
// left unassigned) are placed by the engine's balancer within its ranks' cap.

import type { AttentionDpConfigInput } from "../config.js";
import { createInstanceRouter, type InstanceState, type RankRoutingKind } from "../instances.js";
import { createRouter, type Router } from "../router.js";
import { pathCount, type RunResult } from "./engine.js";
import { LockstepEngine, newJob, sumFigures, type EngineOptions, type Job } from "./lockstep.js";
import type { TraceRequest } from "./trace.js";

/** What a fleet run adds to a {@link RunResult}. */
export interface FleetRunResult extends RunResult {
  /** Requests each engine served. */
  readonly requestsPerInstance: number[];
  /** Requests sent with a rank pin. */
  readonly pinned: number;
}

/** A request the gateway sent to an engine, not yet fetched: its job and pinned rank (null: the engine places it). */
interface Sent {
  readonly job: Job;
  readonly rank: number | null;
}

/**
 * Replays `requests` over `instances` engines of `opts.ranks` ranks with phase
 * 2 `kind` (phase 2 `adp` runs `config`); `progress` gets finished requests.
 */
export function runFleet(
  requests: readonly TraceRequest[],
  paths: readonly Int32Array[],
  blockTokens: number,
  opts: EngineOptions,
  instances: number,
  kind: RankRoutingKind,
  config: AttentionDpConfigInput,
  loadWeight: number | undefined,
  progress?: (finished: number) => void,
): FleetRunResult {
  const R = opts.ranks;
  const n = requests.length;
  const ttft = new Float64Array(n);
  const arrivalOf = (i: number) => requests[i]!.arrivalMs / opts.rateScale;
  const gateway = createInstanceRouter({
    instances: Array.from({ length: instances }, () => ({ numRanks: R })),
    rankRouting: kind,
    attentionDp: config,
    tokensPerBlock: blockTokens,
    ...(loadWeight !== undefined ? { loadWeight } : {}),
  });
  // Active tokens net of cached ones when the ranks' router weighs them so (the KV-cache-aware router's rank state).
  const discount = kind === "adp" && gateway.routers[0]!.kind === "kv_cache_aware";
  const numPaths = pathCount(paths);
  const engines = Array.from({ length: instances }, () => new LockstepEngine(numPaths, blockTokens, opts, discount, ttft, arrivalOf));
  const balancers: Router[] = engines.map(() => createRouter({ numRanks: R, learnFromRouting: false }));
  const inbox: Sent[][] = engines.map(() => []);
  const requestsPerInstance = new Array<number>(instances).fill(0);
  const loadSamples: number[][] = [];
  let nextArrival = 0;
  let finished = 0;
  let routeMs = 0;
  let routed = 0;
  let pinned = 0;
  let maxQueued = 0;
  let maxQueuedAtMs = 0;
  let steps = 0;
  let now = 0;

  while (finished < n) {
    // The engine with work whose next iteration starts first.
    let e = -1;
    for (let k = 0; k < instances; k++) {
      const engine = engines[k]!;
      if (engine.totalActive === 0 && inbox[k]!.length === 0) continue;
      if (e < 0 || engine.t < engines[e]!.t) e = k;
    }
    const arrival = nextArrival < n ? arrivalOf(nextArrival) : Infinity;
    // (Tested on what is left to arrive, not on `arrival`: an engine whose clock ran to Infinity must still iterate.)
    if (nextArrival < n && (e < 0 || arrival <= engines[e]!.t)) {
      // The gateway routes every request arriving at this instant as one batch.
      now = arrival;
      const batch: Job[] = [];
      while (nextArrival < n && arrivalOf(nextArrival) === arrival) {
        batch.push(newJob(nextArrival, requests[nextArrival]!, paths[nextArrival]!));
        nextArrival++;
      }
      const t0 = performance.now();
      const placements = gateway.route({
        instances: engines.map((engine, k) => rankStates(engine, inbox[k]!, R)),
        maxNumActiveRequests: opts.maxNumActiveRequests,
        requests: batch.map((job) => ({ id: job.index, numTokens: job.req.inputLength, conversationId: job.req.conversationId, instanceMatches: engines.map((engine) => heldTokens(engine, job, R, blockTokens)) })),
      });
      routeMs += performance.now() - t0;
      placements.forEach((p, i) => {
        const engine = engines[p.instance]!;
        // An idle engine wakes when the request reaches it.
        if (engine.totalActive === 0 && inbox[p.instance]!.length === 0) engine.t = Math.max(engine.t, now);
        inbox[p.instance]!.push({ job: batch[i]!, rank: p.rank });
        requestsPerInstance[p.instance]!++;
        routed++;
        if (p.rank !== null) pinned++;
      });
      continue;
    }
    if (e < 0) break; // nothing left to arrive and no engine with work: every request was served
    const engine = engines[e]!;
    inbox[e] = fetch(engine, inbox[e]!, balancers[e]!, opts);
    const waitingNow = inbox.reduce((t, box) => t + box.length, 0);
    if (waitingNow > maxQueued) {
      maxQueued = waitingNow;
      maxQueuedAtMs = engine.t;
    }
    const before = engine.finished;
    engine.iterate();
    finished += engine.finished - before;
    if (++steps % (64 * instances) === 0) {
      loadSamples.push([engine.t, ...engines.flatMap((x) => x.active)]);
      progress?.(finished);
    }
  }
  return {
    ...sumFigures(engines),
    ttftMs: ttft,
    routeMs,
    routed,
    loadSamples,
    simulatedMs: Math.max(...engines.map((x) => x.t)),
    maxQueued,
    maxQueuedAtMs,
    requestsPerInstance,
    pinned,
  };
}

/**
 * One engine's state as the gateway sees it: what the engine reports (active
 * requests and their tokens per rank) plus what the gateway sent it that it
 * has not fetched: pinned ones on their rank, the others queued at the engine
 * (phase 1's workload, on no rank).
 */
function rankStates(engine: LockstepEngine, sent: readonly Sent[], R: number): InstanceState {
  const ranks = Array.from({ length: R }, (_, r) => ({ numActiveRequests: engine.active[r]!, numActiveTokens: engine.activeTokens[r]! }));
  let queued = 0;
  for (const s of sent) {
    if (s.rank === null) {
      queued++;
      continue;
    }
    ranks[s.rank]!.numActiveRequests++;
    ranks[s.rank]!.numActiveTokens += s.job.req.inputLength;
  }
  return { ranks, numQueuedRequests: queued };
}

/** Matched tokens per rank of `engine` for `job`: the blocks each rank's cache holds, over the prompt but its last token. */
function heldTokens(engine: LockstepEngine, job: Job, R: number, blockTokens: number): number[] {
  const probe = Math.min(job.path.length, Math.floor((job.req.inputLength - 1) / blockTokens));
  const path = probe === job.path.length ? job.path : job.path.subarray(0, Math.max(0, probe));
  return Array.from({ length: R }, (_, r) => engine.heldBlocks(r, path) * blockTokens);
}

/**
 * An engine's fetch at the start of an iteration: pinned requests join their
 * rank; the others are placed by its balancer within its ranks' cap (in
 * arrival order; what finds no room waits). Returns what still waits.
 */
function fetch(engine: LockstepEngine, sent: readonly Sent[], balancer: Router, opts: EngineOptions): Sent[] {
  const free: Sent[] = [];
  for (const s of sent) {
    if (s.rank === null) free.push(s);
    else engine.assign(s.job, s.rank);
  }
  if (free.length === 0) return [];
  const room = Math.max(0, opts.ranks * opts.maxNumActiveRequests - engine.totalActive);
  const batch = free.slice(0, room);
  if (batch.length === 0) return free;
  const result = balancer.route({
    rankStates: engine.active.map((a, r) => ({ numActiveRequests: a, numActiveTokens: engine.activeTokens[r]! })),
    maxNumActiveRequests: opts.maxNumActiveRequests,
    requests: batch.map((s) => ({ id: s.job.index, numTokens: s.job.req.inputLength })),
  });
  const rankOf = new Map<number, number>();
  result.assignments.forEach((ids, rank) => ids.forEach((id) => rankOf.set(Number(id), rank)));
  const left: Sent[] = [];
  for (const s of free) {
    const rank = rankOf.get(s.job.index);
    if (rank === undefined) left.push(s);
    else engine.assign(s.job, rank);
  }
  return left;
}
