// Placing a routed request: its upstream's load counted, its DP rank chosen
// with the batch's others on that upstream (phase 2), and the routing state
// taught where its prompt went and where its conversation is bound, before
// its waiter hears where to send it.

import type { Fleet } from "./fleet.js";
import type { RankChoice } from "./rank-routing.js";
import type { Upstream } from "./upstream.js";
import type { Waiting } from "./waiting.js";

/** Hands each routed request its upstream and DP rank, and teaches the routing state where its prompt went. */
export class Placer {
  readonly #fleet: Fleet;
  /** Where a failure of the index or of rank routing is logged (the request is placed all the same). */
  readonly #onRouterError: (error: unknown) => void;

  constructor(fleet: Fleet, onRouterError: (error: unknown) => void) {
    this.#fleet = fleet;
    this.#onRouterError = onRouterError;
  }

  /**
   * Hands a waiting request its upstream, counting its load there, and
   * teaches the prefix index that the upstream now holds its prompt. The
   * router learns nothing itself (learnFromRouting: false): a request may be
   * placed elsewhere than the router chose, or held for later, and the index
   * must know where prompts really went.
   */
  place(w: Waiting, u: Upstream, ranked: Map<Upstream, Waiting[]>): void {
    if (w.done) return;
    u.inFlight++;
    u.inFlightTokens += w.tokens.length;
    u.events?.routed();
    u.promptTokens += w.tokens.length;
    u.placed++;
    if (u.rankRouting === null) {
      w.resolve({ upstream: u, matchedTokens: this.#record(w, u, null), rank: null });
      return;
    }
    // Its rank first (phase 2, with the batch's others on `u`): what is learned and bound names it.
    let list = ranked.get(u);
    if (list === undefined) ranked.set(u, (list = []));
    list.push(w);
  }

  /**
   * Phase 2 for the requests this batch placed on `u`: its DP ranks, chosen
   * together as the engine's own router would choose them (rank-routing.ts).
   */
  chooseRanks(u: Upstream, placed: readonly Waiting[]): void {
    const routing = u.rankRouting!;
    const requests = placed.map((w) => ({ id: w.id, tokens: w.tokens, conversationId: w.conversationId, subagentId: w.subagentId, namespace: w.namespace }));
    let choices: readonly RankChoice[];
    try {
      const report = u.load === null || u.loadConfig === null ? null : u.load.current(u.loadConfig.maxAgeMs);
      const engine = this.#fleet.state.engineRankMatcher(u.index, routing.ranks);
      choices = routing.choose(requests, (i) => engine?.(requests[i]!.tokens, requests[i]!.namespace) ?? null, report);
    } catch (error) {
      // A rank is a hint: without one the engine's balancer picks, and the request still goes.
      this.#onRouterError(error);
      choices = [];
    }
    placed.forEach((w, i) => {
      const choice = choices[i];
      const rank = choice?.rank ?? null;
      const matched = this.#record(w, u, rank);
      // What the rank it goes to holds (for its log line), not the upstream's best rank.
      w.resolve({ upstream: u, matchedTokens: rank === null ? matched : choice!.matchedTokens, rank });
    });
  }

  /**
   * Teaches the routing state where `w`'s prompt went (upstream `u`, DP rank
   * `rank` when phase 2 chose one), binds its conversation there, and returns
   * what its cache held of the prompt (for its log line and hit rate): by its
   * engine's own view while that is live, else by the gateway's, which learns
   * the prompt in the same walk either way.
   */
  #record(w: Waiting, u: Upstream, rank: number | null): number {
    const namespace = w.namespace;
    const engineMatched = this.#fleet.state.engineMatch(u.index, w.tokens, namespace);
    let held = 0;
    try {
      held = this.#fleet.state.learn(u.index, w.tokens, namespace, rank ?? undefined, w.hashes);
    } catch (error) {
      // The prefix index retired itself (AdpMemoryError: the host refused it memory): this request is placed all
      // the same, never lost in the flush, and from the next batch on routing answers 500 and logs why.
      this.#onRouterError(error);
    }
    // Where the conversation really went (the router's choice, unless the gateway had to place it elsewhere).
    const key = w.subagentId !== null && w.subagentId !== "" ? w.subagentId : w.conversationId;
    if (key !== null) this.#fleet.state.bind(key, u.index, rank ?? undefined);
    const matchedTokens = engineMatched ?? held;
    u.matchedTokens += matchedTokens;
    return matchedTokens;
  }
}
