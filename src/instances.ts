// Two-phase routing over a fleet of engine instances, each with its own
// attention-DP ranks, as TensorRT-LLM's centralized KV-cache router does it
// (tensorrt_llm/serve/kv_cache_router/router_core.py, `select_worker`):
//
//   phase 1, per request in arrival order: the instance whose score
//     matched blocks − load_weight × workload
//   is highest, where an instance's matched blocks are its best rank's (the
//   combined trie: the union of its ranks' blocks) and its workload the sum of
//   its ranks' active and queued requests plus what this batch already placed
//   there; ties in instance order, broken by one round-robin counter;
//
//   phase 2, inside the instance (`rank_routing`):
//     adp: the instance's own ADP router (this library's router with that
//       engine's attention_dp_config: KV-cache aware, conversation affinity,
//       warm-up), the batch's requests on the instance as one route() call, so
//       the rank is the one the engine's router would pick;
//     instance: the centralized router's `_select_rank_in_instance` with
//       rank_routing_algo "instance": the same score over the instance's ranks,
//       no cap, ties broken by a round-robin counter per instance;
//     none: no rank; the engine's own balancer picks.
//
// Matches come with the requests (matched tokens per instance and rank), so the
// caller keeps its views however it likes (engine events, a prefix index, a
// simulator's true caches).

import type { RankState, RouteRequest } from "./batch.js";
import type { AttentionDpConfig, AttentionDpConfigInput } from "./config.js";
import { AdpInputError, readInput } from "./errors.js";
import { createRouter, type Router } from "./router.js";

/** Phase 2's algorithm: the engine's ADP router, the centralized router's rank score, or none. */
export type RankRoutingKind = "adp" | "instance" | "none";
/** The rank-routing kinds, in documentation order. */
export const RANK_ROUTING_KINDS: readonly RankRoutingKind[] = ["adp", "instance", "none"];

/** The centralized router's default `load_weight`. */
export const DEFAULT_LOAD_WEIGHT = 0.25;

/** One instance of {@link InstanceRouterOptions}. */
export interface InstanceOptions {
  /** Its attention-DP ranks. */
  readonly numRanks: number;
  /** Its engine's own `attention_dp_config` (phase 2 `adp`); default: the router's. */
  readonly attentionDp?: AttentionDpConfigInput | AttentionDpConfig;
}

/** Options of {@link createInstanceRouter}. */
export interface InstanceRouterOptions {
  /** The instances, in the order phase 1 considers them (its ties keep it). */
  readonly instances: readonly InstanceOptions[];
  /** Phase 2's algorithm. @default "adp" */
  readonly rankRouting?: RankRoutingKind;
  /** Every instance's `attention_dp_config` unless its own says otherwise. @default {} */
  readonly attentionDp?: AttentionDpConfigInput | AttentionDpConfig;
  /** Weight of a request of workload against a matched block. @default 0.25 */
  readonly loadWeight?: number;
  /** Tokens per KV-cache block: matched tokens become blocks in the score. @default 32 */
  readonly tokensPerBlock?: number;
}

/** One rank's load: TensorRT-LLM's `WorkerLoadReport` (active, queued, tokens). */
export interface InstanceRankState extends RankState {
  /** Requests waiting on the rank (counted in the workload with the active ones). @default 0 */
  readonly numQueuedRequests?: number;
}

/** One instance's state for a batch. */
export interface InstanceState {
  /** One state per rank, rank i at index i. */
  readonly ranks: readonly InstanceRankState[];
  /** False leaves the instance out of phase 1 (unhealthy, its load report stale). @default true */
  readonly available?: boolean;
}

/** A request of {@link InstancesInput}: a {@link RouteRequest} whose matches are per instance. */
export interface InstanceRequest extends Omit<RouteRequest, "prefixMatches" | "blockKeys"> {
  /** Matched prompt tokens per instance, then per rank (absent: nothing matched anywhere). */
  readonly instanceMatches?: readonly ArrayLike<number>[];
}

/** One call of {@link InstanceRouter.route}. */
export interface InstancesInput {
  /** One state per instance, in the router's instance order. */
  readonly instances: readonly InstanceState[];
  /** Phase 2 `adp`'s hard per-rank cap (`max_num_active_requests`). */
  readonly maxNumActiveRequests: number;
  /** New requests in arrival order. */
  readonly requests: readonly InstanceRequest[];
}

/** Where one request goes. */
export interface InstancePlacement {
  /** The instance (index), or -1 when none is available. */
  readonly instance: number;
  /** Its DP rank, or null: the engine picks (`none`, or its ADP router left the request unassigned). */
  readonly rank: number | null;
  /** Matched prompt tokens on the instance's best rank (phase 1's match). */
  readonly matchedTokens: number;
}

/** A stateful two-phase router over a fleet's instances and their ranks. */
export class InstanceRouter {
  /** Phase 2's algorithm. */
  readonly rankRouting: RankRoutingKind;
  /** Ranks per instance. */
  readonly ranksPerInstance: readonly number[];
  /** Per instance, its own ADP router (phase 2 `adp` only). */
  readonly routers: readonly (Router | null)[];
  readonly #loadWeight: number;
  readonly #tokensPerBlock: number;
  /** Phase 1's round-robin tie-break counter (one per namespace upstream; one namespace here). */
  #turn = 0;
  /** Phase 2 `instance`'s counters, one per instance. */
  readonly #rankTurns: number[];

  /** Use {@link createInstanceRouter}. */
  constructor(options: InstanceRouterOptions) {
    this.rankRouting = options.rankRouting ?? "adp";
    this.#loadWeight = options.loadWeight ?? DEFAULT_LOAD_WEIGHT;
    this.#tokensPerBlock = options.tokensPerBlock ?? 32;
    this.ranksPerInstance = options.instances.map((i) => i.numRanks);
    this.#rankTurns = options.instances.map(() => 0);
    this.routers = options.instances.map((i) =>
      this.rankRouting === "adp" ? createRouter({ numRanks: i.numRanks, attentionDp: i.attentionDp ?? options.attentionDp ?? {}, learnFromRouting: false }) : null,
    );
  }

  /** Routes one batch; throws {@link AdpInputError} on bad input, before any state changes. */
  route(input: InstancesInput): InstancePlacement[] {
    const { instances, requests } = readInput("instances input", () => this.#check(input));
    const blocks = (tokens: number) => Math.floor(tokens / this.#tokensPerBlock);
    const matchOf = (req: InstanceRequest, i: number, r: number) => req.instanceMatches?.[i]?.[r] ?? 0;
    // Workloads as the engines report them, plus what this batch sends (a fresh report would count it).
    const workload = instances.map((st) => st.ranks.reduce((t, r) => t + r.numActiveRequests + (r.numQueuedRequests ?? 0), 0));
    const rankLoad = instances.map((st) => st.ranks.map((r) => r.numActiveRequests + (r.numQueuedRequests ?? 0)));
    const placed: { instance: number; rank: number | null; matchedTokens: number }[] = [];
    for (const req of requests) {
      const scored = (req.tokens?.length ?? req.numTokens ?? 0) >= 2;
      let ties: number[] = [];
      let best = -Infinity;
      const matched: number[] = [];
      for (let i = 0; i < instances.length; i++) {
        let m = 0;
        for (let r = 0; r < this.ranksPerInstance[i]!; r++) m = Math.max(m, matchOf(req, i, r));
        matched.push(m);
        if (instances[i]!.available === false) continue;
        const score = (scored ? blocks(m) : 0) - this.#loadWeight * workload[i]!;
        if (score > best) {
          best = score;
          ties = [i];
        } else if (score === best) ties.push(i);
      }
      if (ties.length === 0) {
        placed.push({ instance: -1, rank: null, matchedTokens: 0 });
        continue;
      }
      // The counter turns only when some instance was a candidate (select_worker returns before it otherwise).
      const instance = ties[this.#turn++ % ties.length]!;
      workload[instance]!++;
      placed.push({ instance, rank: this.rankRouting === "instance" ? this.#rankByScore(req, instance, rankLoad[instance]!, matchOf) : null, matchedTokens: matched[instance]! });
    }
    if (this.rankRouting === "adp") this.#ranksByRouter(instances, input.maxNumActiveRequests, requests, placed);
    return placed;
  }

  /** `_select_rank_in_instance` ("instance"): matched blocks − load_weight × the rank's load, no cap, ties in turn. */
  #rankByScore(req: InstanceRequest, i: number, load: number[], matchOf: (req: InstanceRequest, i: number, r: number) => number): number {
    const scored = (req.tokens?.length ?? req.numTokens ?? 0) >= 2;
    let ties: number[] = [];
    let best = -Infinity;
    for (let r = 0; r < load.length; r++) {
      const score = (scored ? Math.floor(matchOf(req, i, r) / this.#tokensPerBlock) : 0) - this.#loadWeight * load[r]!;
      if (score > best) {
        best = score;
        ties = [r];
      } else if (score === best) ties.push(r);
    }
    const rank = ties[this.#rankTurns[i]!++ % ties.length]!;
    load[rank]!++;
    return rank;
  }

  /** Phase 2 `adp`: each instance's requests of the batch, in arrival order, as one route() of its own router. */
  #ranksByRouter(instances: readonly InstanceState[], cap: number, requests: readonly InstanceRequest[], placed: { instance: number; rank: number | null }[]): void {
    for (let i = 0; i < instances.length; i++) {
      const mine = requests.flatMap((req, at) => (placed[at]!.instance === i ? [at] : []));
      if (mine.length === 0) continue;
      const numRanks = this.ranksPerInstance[i]!;
      const result = this.routers[i]!.route({
        rankStates: instances[i]!.ranks.map((r) => ({ numActiveRequests: r.numActiveRequests + (r.numQueuedRequests ?? 0), numActiveTokens: r.numActiveTokens })),
        maxNumActiveRequests: cap,
        requests: mine.map((at) => {
          const { instanceMatches, ...req } = requests[at]!;
          return { ...req, prefixMatches: Array.from({ length: numRanks }, (_, r) => instanceMatches?.[i]?.[r] ?? 0) };
        }),
      });
      // Ids are unique within a batch (the router checks), so each maps back to its request.
      const at = new Map(mine.map((a) => [requests[a]!.id, a]));
      result.assignments.forEach((ids, rank) => {
        for (const id of ids) placed[at.get(id)!]!.rank = rank;
      });
    }
  }

  /** The input's shape checked against the fleet (the routers check the requests themselves). */
  #check(input: InstancesInput): InstancesInput {
    const instances = input.instances;
    if (!Array.isArray(instances) || instances.length !== this.ranksPerInstance.length) throw new AdpInputError("instances", `must list the router's ${this.ranksPerInstance.length} instances`, instances);
    instances.forEach((st, i) => {
      if (!Array.isArray(st?.ranks) || st.ranks.length !== this.ranksPerInstance[i]) throw new AdpInputError(`instances[${i}].ranks`, `must hold ${this.ranksPerInstance[i]} rank states`, st?.ranks);
      st.ranks.forEach((r: InstanceRankState, k: number) => {
        for (const key of ["numActiveRequests", "numActiveTokens", "numQueuedRequests"] as const) {
          const v = r[key];
          if (v === undefined && key === "numQueuedRequests") continue;
          if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new AdpInputError(`instances[${i}].ranks[${k}].${key}`, "must be a finite number ≥ 0", v);
        }
      });
    });
    if (!Array.isArray(input.requests)) throw new AdpInputError("requests", "must be an array", input.requests);
    input.requests.forEach((req, k) => {
      const m = req?.instanceMatches;
      if (m === undefined) return;
      if (!Array.isArray(m) || m.length !== instances.length) throw new AdpInputError(`requests[${k}].instanceMatches`, "must hold one list per instance", m);
      m.forEach((perRank, i) => {
        if (perRank?.length !== this.ranksPerInstance[i]) throw new AdpInputError(`requests[${k}].instanceMatches[${i}]`, `must hold ${this.ranksPerInstance[i]} matches`, perRank);
        for (let r = 0; r < perRank.length; r++) {
          const v = perRank[r];
          if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new AdpInputError(`requests[${k}].instanceMatches[${i}][${r}]`, "must be a finite number ≥ 0", v);
        }
      });
    });
    return input;
  }
}

/** A two-phase router over `options.instances` (see the module comment for the rules). */
export function createInstanceRouter(options: InstanceRouterOptions): InstanceRouter {
  return readInput("instance router options", () => {
    const kind = options.rankRouting ?? "adp";
    if (!RANK_ROUTING_KINDS.includes(kind)) throw new AdpInputError("rankRouting", `must be one of ${RANK_ROUTING_KINDS.join(", ")}`, kind);
    if (!Array.isArray(options.instances) || options.instances.length === 0) throw new AdpInputError("instances", "must list at least one instance", options.instances);
    options.instances.forEach((i, k) => {
      if (!Number.isInteger(i?.numRanks) || i.numRanks < 1) throw new AdpInputError(`instances[${k}].numRanks`, "must be an integer ≥ 1", i?.numRanks);
    });
    const lw = options.loadWeight ?? DEFAULT_LOAD_WEIGHT;
    if (typeof lw !== "number" || !Number.isFinite(lw) || lw < 0) throw new AdpInputError("loadWeight", "must be a finite number ≥ 0", lw);
    const tpb = options.tokensPerBlock ?? 32;
    if (!Number.isInteger(tpb) || tpb < 1) throw new AdpInputError("tokensPerBlock", "must be an integer ≥ 1", tpb);
    return new InstanceRouter(options);
  });
}
