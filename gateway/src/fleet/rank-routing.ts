// Phase 2: which of an upstream's own data-parallel (attention-DP) ranks a
// request goes to, once phase 1 (the gateway's router over its upstreams)
// picked the upstream. The choice is sent to the engine as
// `X-Data-Parallel-Rank` (vLLM's `_get_data_parallel_rank`, SGLang's data
// parallel controller), so the engine's own balancer does not place the
// request on a rank that holds none of its prefix.
//
//   adp: this library's router (the gateway's attention_dp_config: KV-cache
//     aware, conversation affinity, the balance gate) over the engine's ranks,
//     one batch at a time as the engine's own router runs: each rank's state
//     is what the gateway has in flight there, combined with what the engine's
//     fresh load report says of that rank; its match what the engine's events
//     say the rank holds (while live), else what the gateway placed.
//   instance: TensorRT-LLM's centralized router's rank score
//     (tensorrt_llm/serve/kv_cache_router.py, _select_rank_in_instance with
//     rank_routing_algo "instance"): matched blocks − load_weight (routing.load_weight, 0.25) ×
//     requests in flight, the best taken, ties in turn (a counter per upstream).

import { bindConversation, createRouter, type PrefixNamespace, type Router } from "adp-router";
import type { AttentionDpConfig, TokenIds } from "adp-router";
import type { RankRoutingKind } from "../config/config-types.js";
import { dpRankStateFromLoad } from "../load/engine-load-combine.js";
import type { EngineLoadReport } from "../load/engine-load-parse.js";

/** What phase 2 needs of one request placed on the upstream. */
export interface RankRequest {
  readonly id: number;
  readonly tokens: TokenIds;
  readonly conversationId: string | null;
  readonly subagentId: string | null;
  readonly namespace: PrefixNamespace;
}

/** Phase 2's answer for a request: its rank (null: the engine's balancer picks) and what that rank held of its prompt. */
export interface RankChoice {
  readonly rank: number | null;
  readonly matchedTokens: number;
}

/** No rank chosen. */
const NO_RANK: RankChoice = Object.freeze({ rank: null, matchedTokens: 0 });

/** Options of {@link RankRouting}. */
export interface RankRoutingOptions {
  readonly kind: Exclude<RankRoutingKind, "none">;
  readonly ranks: number;
  readonly attentionDp: AttentionDpConfig;
  readonly tokensPerBlock: number;
  readonly indexBytes: number;
  /** The most requests a rank takes at once (the upstream's cap: the gateway does not know the engine's per rank). */
  readonly cap: number;
  /** The `instance` score's load weight (routing.load_weight; TensorRT-LLM's default 0.25). */
  readonly loadWeight: number;
}

/** One upstream's phase 2: its ranks' load and counters, and the router over them. */
export class RankRouting {
  readonly kind: Exclude<RankRoutingKind, "none">;
  readonly ranks: number;
  /** Per rank: requests and prompt tokens the gateway has in flight there. */
  readonly inFlight: number[];
  readonly inFlightTokens: number[];
  /** Per rank: requests placed, their prompt tokens, and the tokens the rank held of them. */
  readonly placed: number[];
  readonly promptTokens: number[];
  readonly matchedTokens: number[];
  readonly #router: Router;
  readonly #tokensPerBlock: number;
  readonly #cap: number;
  readonly #loadWeight: number;
  /** The `instance` score's tie-break turn. */
  #turn = 0;
  /** Whether its upstream left the fleet. */
  #disposed = false;

  constructor(options: RankRoutingOptions) {
    this.kind = options.kind;
    this.ranks = options.ranks;
    this.#tokensPerBlock = options.tokensPerBlock;
    this.#cap = options.cap;
    this.#loadWeight = options.loadWeight;
    const zeros = () => new Array<number>(options.ranks).fill(0);
    this.inFlight = zeros();
    this.inFlightTokens = zeros();
    this.placed = zeros();
    this.promptTokens = zeros();
    this.matchedTokens = zeros();
    // Its own prefix index is where the gateway placed prompts on each rank (taught after each choice, as phase 1's is).
    this.#router = createRouter({ numRanks: options.ranks, attentionDp: options.attentionDp, learnFromRouting: false, prefixIndex: { tokensPerBlock: options.tokensPerBlock, maxMemoryBytes: options.indexBytes } });
  }

  /**
   * Each request's rank (null: none could take it, the engine then picks),
   * given per request the engine's own per-rank matches while its events are
   * live (`engineMatches(i)`, else null: the gateway's placements are used).
   */
  choose(requests: readonly RankRequest[], engineMatches: (i: number) => Uint32Array | null, report: EngineLoadReport | null = null): RankChoice[] {
    if (this.#disposed) return requests.map(() => NO_RANK);
    // Requests the engine reports but the gateway did not send count at the mean prompt placed here (else this batch's).
    const placed = this.placed.reduce((a, b) => a + b, 0);
    const meanPrompt = placed > 0 ? this.promptTokens.reduce((a, b) => a + b, 0) / placed : requests.reduce((t, r) => t + r.tokens.length, 0) / Math.max(1, requests.length);
    const states = this.#rankStates(report, meanPrompt);
    const learned = this.#router.prefixIndex!;
    const matches = requests.map((r, i) => {
      const m = engineMatches(i);
      if (m !== null) return m;
      const out = new Uint32Array(this.ranks);
      learned.matchInto(out, r.tokens.subarray(0, Math.max(0, r.tokens.length - 1)), r.namespace);
      return out;
    });
    // Every rank chosen first, then counted: a failure part way leaves the counts as they were.
    const ranks = this.kind === "instance" ? this.#byInstanceScore(matches, states) : this.#byRouter(requests, matches, states);
    return ranks.map((rank, i) => {
      if (rank === null) return NO_RANK;
      const r = requests[i]!;
      learned.insert(rank, r.tokens, r.namespace);
      this.inFlight[rank]!++;
      this.inFlightTokens[rank]! += r.tokens.length;
      this.placed[rank]!++;
      this.promptTokens[rank]! += r.tokens.length;
      this.matchedTokens[rank]! += matches[i]![rank]!;
      return { rank, matchedTokens: matches[i]![rank]! };
    });
  }

  /**
   * Each rank's state: what the gateway has in flight there, combined (as an
   * upstream's is, engine-load-combine.ts) with what its engine's fresh load
   * report says of that DP rank — requests others sent count too.
   */
  #rankStates(report: EngineLoadReport | null, meanPrompt: number): { numActiveRequests: number; numActiveTokens: number }[] {
    return this.inFlight.map((n, r) => dpRankStateFromLoad({ inFlight: n, inFlightTokens: this.inFlightTokens[r]! }, report, r, { tokensPerRequest: Math.round(meanPrompt) }));
  }

  /** This library's router over the ranks, the batch as one `route()`. */
  #byRouter(requests: readonly RankRequest[], matches: readonly Uint32Array[], states: readonly { numActiveRequests: number; numActiveTokens: number }[]): (number | null)[] {
    // The requests' own ids (unique in the gateway): the router seeds its tie-break shuffle from them, so a
    // batch's position would draw the same shuffle for every lone request and send them all to one rank.
    const at = new Map(requests.map((r, i) => [r.id, i]));
    const result = this.#router.route({
      rankStates: [...states],
      maxNumActiveRequests: this.#cap,
      requests: requests.map((r, i) => ({
        id: r.id,
        tokens: r.tokens,
        prefixMatches: matches[i]!,
        ...(r.conversationId !== null ? { conversationId: r.conversationId } : {}),
        ...(r.subagentId !== null && r.subagentId !== "" ? { subagentAffinityId: r.subagentId } : {}),
        ...(r.namespace.cacheSalt !== null ? { cacheSalt: r.namespace.cacheSalt } : {}),
        ...(r.namespace.loraTaskId !== null ? { loraTaskId: r.namespace.loraTaskId } : {}),
      })),
    });
    const ranks = new Array<number | null>(requests.length).fill(null);
    result.assignments.forEach((ids, rank) => {
      for (const id of ids) ranks[at.get(id as number)!] = rank;
    });
    return ranks;
  }

  /**
   * TensorRT-LLM's centralized router's `instance` rank score (its load:
   * requests active and queued on the rank), one request after another, with
   * no cap (as `_select_rank_in_instance`: the upstream's own cap bounds what
   * is in flight there).
   */
  #byInstanceScore(matches: readonly Uint32Array[], states: readonly { numActiveRequests: number }[]): (number | null)[] {
    const load = states.map((st) => st.numActiveRequests);
    return matches.map((m) => {
      let best: number[] = [];
      let bestScore = -Infinity;
      for (let r = 0; r < this.ranks; r++) {
        const score = Math.floor(m[r]! / this.#tokensPerBlock) - this.#loadWeight * load[r]!;
        if (score > bestScore) {
          bestScore = score;
          best = [r];
        } else if (score === bestScore) best.push(r);
      }
      if (best.length === 0) return null;
      const rank = best[this.#turn % best.length]!;
      this.#turn++;
      load[rank]!++;
      return rank;
    });
  }

  /** Another replica placed a prompt (as its block hashes, PrefixIndex.blockHashes) on `rank`: this rank's view holds it too. */
  learnBlocks(rank: number, hashes: Uint32Array, namespace: PrefixNamespace): void {
    if (this.#disposed || rank < 0 || rank >= this.ranks || hashes.length === 0) return;
    this.#router.prefixIndex!.insertBlockHashes(rank, hashes, namespace);
  }

  /** Another replica's conversation (or sub-agent) is on `rank`: its next turns go there too, when the ranks' router keeps conversations. */
  bind(key: string, rank: number): void {
    if (this.#disposed || rank < 0 || rank >= this.ranks) return;
    bindConversation(this.#router, key, rank);
  }

  /** A request placed on `rank` ended. */
  release(rank: number, tokens: number): void {
    if (rank < 0 || rank >= this.ranks) return;
    this.inFlight[rank] = Math.max(0, this.inFlight[rank]! - 1);
    this.inFlightTokens[rank] = Math.max(0, this.inFlightTokens[rank]! - tokens);
  }

  /** Frees its index; it chooses no rank after (a request then goes without one). */
  dispose(): void {
    this.#disposed = true;
    this.#router.prefixIndex?.dispose();
  }
}
