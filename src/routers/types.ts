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

/** Why a request went where it went. */
export type DecisionOutcome =
  | "explicit" // its attention_dp_rank had room
  | "warmup" // a cold-start warm-up rank (KV-cache-aware)
  | "scored" // the KV-cache-aware score (match against load) chose it
  | "balanced" // the default router's least-loaded rank
  | "sticky" // its conversation's rank (conversation affinity)
  | "overflow" // its conversation's rank was full; placed elsewhere, binding kept
  | "placed" // a new or id-less conversation, placed by the placement policy
  | "unassigned"; // no rank could take it

/** The KV-cache-aware router's scoring of one request (only built for `onDecision`). */
export interface ScoringExplanation {
  /** Ranks that were eligible (below the fair-share cap), ascending. */
  readonly eligibleRanks: number[];
  /** Ranks excluded by the fair-share cap at that point of the batch. */
  readonly excludedByCap: number[];
  /** Matched prefix tokens per eligible rank (raw, before the gate). */
  readonly matchedTokens: number[];
  /** Whether the best match rate was above the threshold, so matches counted. */
  readonly matchGateOpen: boolean;
  /** β · (load / max(total load, n) · n) per eligible rank. */
  readonly loadTerms: number[];
  /** (n − counted match) + load term per eligible rank; the lowest wins. */
  readonly scores: number[];
  /** Whether several ranks tied on (score, load) and the request's shuffle chose. */
  readonly tieBrokenByShuffle: boolean;
}

/** One request's decision, as the `onDecision` hook receives it. */
export interface DecisionRecord {
  readonly requestId: RequestId;
  readonly router: RouterKind;
  readonly outcome: DecisionOutcome;
  /** The rank chosen, or -1. */
  readonly rank: number;
  /** The conversation key, for conversation routing. */
  readonly conversation?: string;
  /** The conversation's bound rank, for an overflow. */
  readonly home?: number;
  /** The scoring, for outcome "scored". */
  readonly scoring?: ScoringExplanation;
}

/** A batch's result plus, per request by input position, its rank (-1 = unassigned) and outcome. */
export interface Decision {
  readonly result: RouteResult;
  readonly rankOf: readonly number[];
  readonly outcomes: readonly DecisionOutcome[];
  /** Extra per-request detail, built only when explanations were asked for. */
  readonly details?: readonly (Partial<DecisionRecord> | undefined)[];
  /** Prefix tokens already cached on the chosen rank, by input position (-1: not known); KV-cache-aware router only. */
  readonly matched?: readonly number[];
}

/** One router's decision procedure over a validated batch. */
export interface RoutingPolicy {
  /** The router's kind. */
  readonly kind: RouterKind;
  /** Decides a validated batch; never throws for a batch that passed validation. `explain` asks for details. */
  route(batch: Batch, explain: boolean): Decision;
}
