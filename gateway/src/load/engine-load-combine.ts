// Combining an engine's own account of its load with the gateway's in-flight
// counts into the router's rank state for that upstream (see engine-load.ts).

import type { RankState } from "adp-router";
import type { EngineLoad, EngineLoadReport } from "./engine-load-parse.js";

/** The gateway's own load on an upstream: what it routed there and has not seen end. */
export interface OwnLoad {
  /** Requests in flight there (Upstream.inFlight). */
  readonly inFlight: number;
  /** Their prompt tokens, in the gateway tokenizer's unit (Upstream.inFlightTokens). */
  readonly inFlightTokens: number;
}

/** Options of {@link rankStateFromLoad}. */
export interface CombineOptions {
  /** Gateway tokens per engine token, to bring an engine's active tokens into the gateway tokenizer's unit. @default 1 */
  readonly tokenScale?: number;
  /** Prompt tokens assumed per request the engine has beyond the gateway's, when the gateway has none there to average. @default 0 */
  readonly tokensPerRequest?: number;
}

/**
 * The router's rank state for an upstream, from the gateway's own in-flight
 * counts and the engine's last report (null: not scraped, or not fresh, and
 * the own counts stand alone). Deterministic and pure.
 *
 * Requests: max(own in flight, engine running + waiting). The engine's
 * count already includes the gateway's requests that reached it, so a sum
 * would count them twice; the engine's alone is as old as its scrape and
 * misses what was placed since; the larger is the least load both
 * observations allow.
 *
 * Tokens: when the engine reports active tokens (TensorRT-LLM's
 * `num_active_tokens`, the sum of its active prompts, the same unit as
 * RankState), max(own tokens, engine tokens × tokenScale), for the same
 * reason. When it does not (vLLM, iteration statistics), the own tokens
 * plus the requests the engine has beyond the gateway's, each counted at
 * the gateway's own mean prompt there (or `tokensPerRequest` when it has
 * none): token load then grows with load that did not come through the
 * gateway, which a KV-cache-aware router balancing on tokens would
 * otherwise not see at all.
 *
 * Both are non-negative integers within the router's bounds; the caller
 * still caps requests at `maxNumActiveRequests` as for its own counts.
 */
export function rankStateFromLoad(own: OwnLoad, report: EngineLoadReport | null, options: CombineOptions = {}): Pick<RankState, "numActiveRequests" | "numActiveTokens"> {
  return combine(own, report?.total ?? null, options);
}

/**
 * The same for one DP rank of the engine (phase 2, fleet/rank-routing.ts): the
 * gateway's in-flight counts on that rank combined, by the same rules, with
 * what the report says of that rank (its entries summed over the models it
 * serves; none: the own counts stand alone).
 */
export function dpRankStateFromLoad(own: OwnLoad, report: EngineLoadReport | null, rank: number, options: CombineOptions = {}): Pick<RankState, "numActiveRequests" | "numActiveTokens"> {
  const entries = report?.ranks.filter((l) => l.rank === rank) ?? [];
  if (entries.length === 0) return combine(own, null, options);
  let running = 0;
  let waiting = 0;
  let tokens: number | null = 0;
  for (const l of entries) {
    running += l.running;
    waiting += l.waiting;
    // A partial sum would understate, as for the engine's total.
    tokens = tokens === null || l.activeTokens === null ? null : tokens + l.activeTokens;
  }
  return combine(own, { running, waiting, activeTokens: tokens }, options);
}

/** {@link rankStateFromLoad}'s rules over a load (the engine's total, or one rank's). */
function combine(own: OwnLoad, load: Pick<EngineLoad, "running" | "waiting" | "activeTokens"> | null, options: CombineOptions): Pick<RankState, "numActiveRequests" | "numActiveTokens"> {
  const count = (v: number) => (Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);
  const ownRequests = count(own.inFlight);
  const ownTokens = count(own.inFlightTokens);
  if (load === null) return bounded(ownRequests, ownTokens);
  const engineRequests = count(load.running) + count(load.waiting);
  const requests = Math.max(ownRequests, engineRequests);
  const scale = options.tokenScale !== undefined && Number.isFinite(options.tokenScale) && options.tokenScale > 0 ? options.tokenScale : 1;
  if (load.activeTokens !== null) return bounded(requests, Math.max(ownTokens, Math.round(count(load.activeTokens) * scale)));
  const perRequest = ownRequests > 0 ? ownTokens / ownRequests : count(options.tokensPerRequest ?? 0);
  return bounded(requests, ownTokens + Math.round(Math.max(0, engineRequests - ownRequests) * perRequest));
}

/** Counts clamped to what the router accepts (2^30 requests, safe-integer tokens). */
function bounded(requests: number, tokens: number): Pick<RankState, "numActiveRequests" | "numActiveTokens"> {
  return { numActiveRequests: Math.min(requests, 2 ** 30), numActiveTokens: Math.min(tokens, Number.MAX_SAFE_INTEGER) };
}
