// Two-phase routing over a fleet of engine instances, each with its own
// attention-DP ranks, as TensorRT-LLM's centralized KV-cache router does it
// (tensorrt_llm/serve/kv_cache_router/router_core.py, `select_worker`):
//
//   phase 1, per request in arrival order: the instance whose score
//     matched blocks − load_weight × workload
//   is highest, where an instance's matched blocks are its best rank's (the
//   combined trie, the union of its ranks' blocks, matches the same when each
//   rank holds whole prefixes, as engines do) and its workload the sum of its
//   ranks' active and queued requests plus what this batch already placed
//   there; ties in instance order, broken by one round-robin counter that
//   turns on every request placed;
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

import { typedTokens } from "./arrays.js";
import { validateBatch, type RankState, type RouteRequest } from "./batch.js";
import type { AttentionDpConfig, AttentionDpConfigInput } from "./config.js";
import { AdpInputError, readInput, readOptions } from "./errors.js";
import { createRouter, type Router } from "./router.js";

/** Phase 2's algorithm: the engine's ADP router, the centralized router's rank score, or none. */
export type RankRoutingKind = "adp" | "instance" | "none";
/** The rank-routing kinds, in documentation order. */
export const RANK_ROUTING_KINDS: readonly RankRoutingKind[] = ["adp", "instance", "none"];

/** The options {@link createInstanceRouter} accepts. */
const OPTION_KEYS: ReadonlySet<string> = new Set(["instances", "rankRouting", "attentionDp", "loadWeight", "tokensPerBlock"]);

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
  /** Requests waiting at the instance on no rank yet (its engine places them): phase 1's workload only. @default 0 */
  readonly numQueuedRequests?: number;
  /** False leaves the instance out of phase 1 (unhealthy, its load report stale). @default true */
  readonly available?: boolean;
  /**
   * The most requests of this batch phase 1 may place on it (a caller's cap:
   * past it the instance is no candidate for the rest of the batch; the
   * centralized router itself has none). @default no limit
   */
  readonly room?: number;
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

  /**
   * Routes one batch; throws {@link AdpInputError} on bad input, before any
   * state changes: the whole batch is read once and checked first (its
   * requests as one `route()` batch over the smallest instance's ranks, so an
   * explicit rank must exist on every instance), then placed.
   */
  route(input: InstancesInput): InstancePlacement[] {
    const { instances, cap, requests } = readInput("instances input", () => this.#read(input));
    const blocks = (tokens: number) => Math.floor(tokens / this.#tokensPerBlock);
    // Workloads as the engines report them, plus what this batch sends (a fresh report would count it).
    const workload = instances.map((st) => st.ranks.reduce((t, r) => t + r.numActiveRequests, st.queued));
    const room = instances.map((st) => st.room);
    const rankLoad = instances.map((st) => st.ranks.map((r) => r.numActiveRequests));
    const placed: { instance: number; rank: number | null; matchedTokens: number }[] = [];
    for (const { numTokens, matches } of requests) {
      const scored = numTokens >= 2;
      let ties: number[] = [];
      let best = -Infinity;
      const matched = matches.map((perRank) => perRank.reduce((a, b) => Math.max(a, b), 0));
      for (let i = 0; i < instances.length; i++) {
        if (!instances[i]!.available || room[i]! <= 0) continue;
        const score = (scored ? blocks(matched[i]!) : 0) - this.#loadWeight * workload[i]!;
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
      room[instance]!--;
      const rank = this.rankRouting === "instance" ? this.#rankByScore(scored, matches[instance]!, rankLoad[instance]!, instance) : null;
      placed.push({ instance, rank, matchedTokens: matched[instance]! });
    }
    if (this.rankRouting === "adp") this.#ranksByRouter(instances, cap, requests, placed);
    return placed;
  }

  /** `_select_rank_in_instance` ("instance"): matched blocks − load_weight × the rank's load, no cap, ties in turn. */
  #rankByScore(scored: boolean, matches: readonly number[], load: number[], i: number): number {
    let ties: number[] = [];
    let best = -Infinity;
    for (let r = 0; r < load.length; r++) {
      const score = (scored ? Math.floor(matches[r]! / this.#tokensPerBlock) : 0) - this.#loadWeight * load[r]!;
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
  #ranksByRouter(instances: readonly ReadInstance[], cap: number, requests: readonly ReadRequest[], placed: { instance: number; rank: number | null }[]): void {
    for (let i = 0; i < instances.length; i++) {
      const mine = requests.flatMap((_, at) => (placed[at]!.instance === i ? [at] : []));
      if (mine.length === 0) continue;
      // Checked as one batch already: ids unique, fields valid, explicit ranks within every instance.
      const result = this.routers[i]!.route({
        rankStates: instances[i]!.ranks,
        maxNumActiveRequests: cap,
        requests: mine.map((at) => ({ ...requests[at]!.request, prefixMatches: requests[at]!.matches[i]! })),
      });
      const at = new Map(mine.map((a) => [requests[a]!.request.id, a]));
      result.assignments.forEach((ids, rank) => {
        for (const id of ids) placed[at.get(id)!]!.rank = rank;
      });
    }
  }

  /** The input read once into copies and checked whole against the fleet (see {@link route}). */
  #read(input: InstancesInput): { instances: ReadInstance[]; cap: number; requests: ReadRequest[] } {
    if (typeof input !== "object" || input === null) throw new AdpInputError("route()", "takes { instances, maxNumActiveRequests, requests }", input);
    const { instances: rawInstances, maxNumActiveRequests, requests: rawRequests } = input;
    const sizes = this.ranksPerInstance;
    if (!Array.isArray(rawInstances) || rawInstances.length !== sizes.length) throw new AdpInputError("instances", `must list the router's ${sizes.length} instances`, rawInstances);
    const instances = sizes.map((n, i): ReadInstance => {
      const st: unknown = rawInstances[i];
      if (typeof st !== "object" || st === null) throw new AdpInputError(`instances[${i}]`, "must be an object", st);
      const { ranks, available, numQueuedRequests: queued = 0, room = Infinity } = st as InstanceState;
      if (available !== undefined && typeof available !== "boolean") throw new AdpInputError(`instances[${i}].available`, "must be true or false", available);
      if (!Number.isInteger(queued) || queued < 0 || queued > 2 ** 30) throw new AdpInputError(`instances[${i}].numQueuedRequests`, "must be an integer in [0, 2^30]", queued);
      if (room !== Infinity && (!Number.isInteger(room) || room < 0)) throw new AdpInputError(`instances[${i}].room`, "must be an integer ≥ 0", room);
      if (!Array.isArray(ranks) || ranks.length !== n) throw new AdpInputError(`instances[${i}].ranks`, `must hold ${n} rank states`, ranks);
      const states = ranks.map((raw: unknown, r): RankState => {
        if (typeof raw !== "object" || raw === null) throw new AdpInputError(`instances[${i}].ranks[${r}]`, "must be an object", raw);
        const { rank, numActiveRequests, numQueuedRequests = 0, numActiveTokens } = raw as InstanceRankState;
        if (!Number.isInteger(numQueuedRequests) || numQueuedRequests < 0 || numQueuedRequests > 2 ** 30) throw new AdpInputError(`instances[${i}].ranks[${r}].numQueuedRequests`, "must be an integer ≥ 0", numQueuedRequests);
        // Active and queued together are the rank's load in both phases.
        return { rank: rank ?? r, numActiveRequests: typeof numActiveRequests === "number" ? numActiveRequests + numQueuedRequests : numActiveRequests, numActiveTokens };
      });
      // The library's own checks of rank states and the cap (integers within the routers' bounds), named as given here.
      try {
        validateBatch({ rankStates: states, maxNumActiveRequests, requests: [] }, n);
      } catch (error) {
        if (!(error instanceof AdpInputError) || !error.field.startsWith("rankStates")) throw error;
        throw new AdpInputError(error.field.replace("rankStates", `instances[${i}].ranks`), error.field.endsWith("numActiveRequests") ? `${error.rule} (active and queued together)` : error.rule, error.received);
      }
      return { ranks: states, available: available !== false, queued, room };
    });
    if (!Array.isArray(rawRequests)) throw new AdpInputError("requests", "must be an array", rawRequests);
    const requests = rawRequests.map((raw: unknown, k): ReadRequest => {
      if (typeof raw !== "object" || raw === null) throw new AdpInputError(`requests[${k}]`, "must be an object", raw);
      const { instanceMatches, prefixMatches, blockKeys, ...fields } = raw as InstanceRequest & Pick<RouteRequest, "prefixMatches" | "blockKeys">;
      if (prefixMatches !== undefined || blockKeys !== undefined) throw new AdpInputError(`requests[${k}]`, "takes its matches as instanceMatches (per instance, per rank)", raw);
      // A copy of the token ids (the routers read them after this check); anything else goes on for the check to refuse.
      const given: unknown = fields.tokens;
      const typed = typedTokens(given);
      const tokens = typed !== null ? typed.slice() : Array.isArray(given) ? given.slice() : given;
      const request = { ...fields, ...(tokens === undefined ? {} : { tokens }) } as RouteRequest;
      const matches = sizes.map((n, i) => readMatches(instanceMatches, sizes.length, i, n, k));
      const length = typed !== null || Array.isArray(tokens) ? (tokens as ArrayLike<number>).length : 0;
      return { request, matches, numTokens: typeof fields.numTokens === "number" ? fields.numTokens : length };
    });
    // Every request checked as the routers check them (ids unique across the whole batch, explicit ranks within the smallest instance).
    const smallest = Math.min(...sizes);
    validateBatch({ rankStates: Array.from({ length: smallest }, () => ({ numActiveRequests: 0, numActiveTokens: 0 })), maxNumActiveRequests, requests: requests.map((r) => r.request) }, smallest);
    return { instances, cap: maxNumActiveRequests, requests };
  }
}

/** An instance's state as read: its ranks' loads (active plus queued), its own queue, whether it is a candidate and for how many. */
interface ReadInstance {
  readonly ranks: RankState[];
  readonly available: boolean;
  readonly queued: number;
  readonly room: number;
}

/** A request as read: its fields (a copy), its matched tokens per instance and rank, its prompt length. */
interface ReadRequest {
  readonly request: RouteRequest;
  readonly matches: number[][];
  readonly numTokens: number;
}

/** Request `k`'s matched tokens on instance `i`'s `n` ranks (zeros when it brought none), each an integer in [0, 2^32). */
function readMatches(all: readonly ArrayLike<number>[] | undefined, instances: number, i: number, n: number, k: number): number[] {
  if (all === undefined) return new Array<number>(n).fill(0);
  if (!Array.isArray(all) || all.length !== instances) throw new AdpInputError(`requests[${k}].instanceMatches`, "must hold one list per instance", all);
  const perRank: unknown = all[i];
  const length = (perRank as ArrayLike<number> | null)?.length;
  if (typeof perRank !== "object" || perRank === null || length !== n) throw new AdpInputError(`requests[${k}].instanceMatches[${i}]`, `must hold ${n} matches`, perRank);
  return Array.from({ length: n }, (_, r) => {
    const v = (perRank as ArrayLike<unknown>)[r];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v >= 2 ** 32) throw new AdpInputError(`requests[${k}].instanceMatches[${i}][${r}]`, "must be an integer in [0, 2^32)", v);
    return v;
  });
}

/** A two-phase router over `options.instances` (see the module comment for the rules). */
export function createInstanceRouter(input: InstanceRouterOptions): InstanceRouter {
  const options = readOptions(input, "createInstanceRouter()", OPTION_KEYS, "createInstanceRouter option") as unknown as InstanceRouterOptions;
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
