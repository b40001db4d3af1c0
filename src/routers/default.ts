// TensorRT-LLM's DefaultADPRouter (reference §3.3): explicit placement, then a
// min-heap balance by (tokens, requests, rank) under the fair-share target. The
// balancing loop runs in the wasm core.

import type { Batch, BatchRequest } from "../batch.js";
import type { RoutingCore } from "../core.js";
import { emptyAssignments, expectedPerRank, inInputOrder, relaxKeyA, strictFirst } from "./shared.js";
import type { RouteResult, RoutingPolicy } from "./types.js";

/** The load-balancing default router; stateless between batches. */
export class DefaultRouter implements RoutingPolicy {
  readonly kind = "default" as const;
  readonly #core: RoutingCore;

  constructor(core: RoutingCore) {
    this.#core = core;
  }

  route(batch: Batch): RouteResult {
    const { counts, tokens, cap } = batch;
    const assignments = emptyAssignments(counts.length);
    const remaining: BatchRequest[] = [];
    for (const req of strictFirst(batch.requests, relaxKeyA)) {
      const t = req.rank;
      if (t !== null && counts[t]! < cap) {
        counts[t]!++;
        assignments[t]!.push(req.id);
      } else {
        remaining.push(req);
      }
    }
    const expected = expectedPerRank(counts, remaining.length, 1.0, cap);
    const unassigned: BatchRequest[] = [];
    if (remaining.length > 0) {
      remaining.sort((a, b) => b.numTokens - a.numTokens);
      const sizes = new Uint32Array(remaining.length);
      for (let i = 0; i < remaining.length; i++) sizes[i] = remaining[i]!.numTokens;
      const chosen = this.#core.balanceDefault(counts, tokens, sizes, expected);
      for (let i = 0; i < remaining.length; i++) {
        const rank = chosen[i]!;
        if (rank >= 0) assignments[rank]!.push(remaining[i]!.id);
        else unassigned.push(remaining[i]!);
      }
    }
    return { router: this.kind, assignments, expectedNumActiveRequests: expected, unassigned: inInputOrder(unassigned) };
  }
}
