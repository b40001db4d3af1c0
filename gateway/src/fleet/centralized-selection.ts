// Phase 1 as TensorRT-LLM's centralized KV-cache router picks an instance
// (`policy: centralized`; tensorrt_llm/serve/kv_cache_router/router_core.py,
// `select_worker`): each request in arrival order goes to the upstream whose
//   matched blocks − load_weight × workload
// is highest (its match its best DP rank's, its workload its requests in
// flight or reported running and waiting, plus what this batch sent it),
// ties in upstream order broken by one round-robin counter. The scoring is
// the library's (createInstanceRouter, conformance-checked against a model of
// router_core.py); what the gateway adds is its own: an upstream that is
// ejected or unhealthy is no candidate, nor one at its in-flight cap (for
// the rest of a batch too, once the batch fills it), and the conversation
// map is not consulted (the centralized router has none).

import { createInstanceRouter, type InstanceRouter, type TokenIds } from "adp-router";
import type { RoutedRequest } from "../requests/openai.js";
import type { Fleet } from "./fleet.js";
import type { InFlightShares } from "./in-flight-shares.js";

/** What phase 1 needs of a waiting request. */
export interface CentralizedRequest {
  readonly id: number;
  readonly tokens: TokenIds;
  /** Its prompt's namespace in the prefix index. */
  readonly namespace: Pick<RoutedRequest, "cacheSalt" | "loraTaskId">;
}

/** The centralized router's phase 1 over the fleet's upstreams (its counter kept while the fleet keeps its size). */
export class CentralizedSelection {
  readonly #loadWeight: number;
  readonly #tokensPerBlock: number;
  #router: InstanceRouter | null = null;

  constructor(loadWeight: number, tokensPerBlock: number) {
    this.#loadWeight = loadWeight;
    this.#tokensPerBlock = tokensPerBlock;
  }

  /** Each upstream's requests of `waiting` (ids in arrival order), `cap` the gateway's in-flight cap and `shares` this process's; requests no upstream can take are left out. */
  route(fleet: Fleet, waiting: readonly CentralizedRequest[], cap: number, shares: InFlightShares, meanPrompt: number): { assignments: number[][] } {
    const upstreams = fleet.upstreams;
    if (this.#router === null || this.#router.ranksPerInstance.length !== upstreams.length) {
      // A fleet of another size starts the turn over (the centralized router's counter belongs to its namespace's workers).
      this.#router = createInstanceRouter({ instances: upstreams.map(() => ({ numRanks: 1 })), rankRouting: "none", loadWeight: this.#loadWeight, tokensPerBlock: this.#tokensPerBlock });
    }
    const placements = this.#router.route({
      instances: upstreams.map((u) => {
        const siblingsAtMost = cap - shares.of(u);
        const load = u.rankLoad(meanPrompt, siblingsAtMost);
        // Its room this batch, the gateway's (once full it is no candidate for the batch's later requests): past this
        // process's share, the scheduler holds the request back and its worker borrows (workers/in-flight-lending.ts).
        const room = cap - u.inFlight - Math.min(u.siblingInFlight, siblingsAtMost);
        return { ranks: [{ numActiveRequests: load.numActiveRequests, numActiveTokens: load.numActiveTokens }], available: fleet.available(u), room: Math.max(0, room) };
      }),
      maxNumActiveRequests: cap,
      requests: waiting.map((w) => ({
        id: w.id,
        numTokens: w.tokens.length,
        instanceMatches: Array.from(fleet.state.upstreamMatches(w.tokens, w.namespace), (m) => [m]),
      })),
    });
    const assignments = upstreams.map((): number[] => []);
    placements.forEach((p, i) => {
      if (p.instance >= 0) assignments[p.instance]!.push(waiting[i]!.id);
    });
    return { assignments };
  }
}
