// Types shared by the three routers and the public router facade.

import type { Batch, RequestId } from "../batch.js";

/** Which of TensorRT-LLM's routers makes the decisions. */
export type RouterKind = "default" | "kv_cache_aware" | "conversation";

/** The decisions for one batch. */
export interface RouteResult {
  /** The router that decided. */
  readonly router: RouterKind;
  /** Request ids per rank, in placement order; one list per rank, empty ones included. */
  readonly assignments: RequestId[][];
  /** The per-rank target the engine pads to (`expected_num_active_requests`). */
  readonly expectedNumActiveRequests: number;
  /** Requests no rank could take, in input order (upstream drops or crashes on these). */
  readonly unassigned: RequestId[];
}

/** A batch's result plus the rank of each request by input position (-1 = unassigned). */
export interface Decision {
  readonly result: RouteResult;
  readonly rankOf: readonly number[];
}

/** One router's decision procedure over a validated batch. */
export interface RoutingPolicy {
  /** The router's kind. */
  readonly kind: RouterKind;
  /** Decides a validated batch; never throws for a batch that passed validation. */
  route(batch: Batch): Decision;
}
