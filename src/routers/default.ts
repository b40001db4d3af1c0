// TensorRT-LLM's DefaultADPRouter (reference §3.3): explicit placement, then a
// min-heap balance by (tokens, requests, rank) under the fair-share target. The
// balancing loop runs in the wasm core.

import type { Batch, BatchRequest } from "../batch.js";
import type { RoutingCore } from "../core.js";
import { expectedPerRank, Placements, relaxKeyA, strictFirst } from "./shared.js";
import type { Decision, RoutingPolicy } from "./types.js";

/** The load-balancing default router; stateless between batches. */
export class DefaultRouter implements RoutingPolicy {
  readonly kind = "default" as const;
  readonly #core: RoutingCore;

  constructor(core: RoutingCore) {
    this.#core = core;
  }

  route(batch: Batch, explain = false): Decision {
    const { counts, tokens, cap } = batch;
    const placements = new Placements(counts.length, batch.requests.length, explain);
    const remaining: BatchRequest[] = [];
    for (const req of strictFirst(batch.requests, relaxKeyA)) {
      const t = req.rank;
      if (t !== null && counts[t]! < cap) {
        counts[t]!++;
        placements.place(req, t, "explicit");
      } else {
        remaining.push(req);
      }
    }
    const expected = expectedPerRank(counts, remaining.length, 1.0, cap);
    if (remaining.length > 0) {
      remaining.sort((a, b) => b.numTokens - a.numTokens);
      const sizes = remaining.map((r) => r.numTokens);
      const chosen = this.#core.balanceDefault(counts, tokens, sizes, expected);
      for (let i = 0; i < remaining.length; i++) if (chosen[i]! >= 0) placements.place(remaining[i]!, chosen[i]!, "balanced");
    }
    return placements.decide(this.kind, expected, batch.requests);
  }
}
