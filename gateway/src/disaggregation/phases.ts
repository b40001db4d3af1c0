// What both flows of disaggregated serving share (context-first.ts for
// TensorRT-LLM and vLLM, paired.ts for SGLang): the pools, a request as the
// service hands it over, how it ended, and the small steps each phase takes.

import type { EdgeResponse } from "../http1/edge-types.js";
import type { DisaggregationConfig, UpstreamRole } from "../config/config-types.js";
import type { Fleet } from "../fleet/fleet.js";
import { Hangup } from "../fleet/hangup.js";
import type { GatewayCounters, Scheduler } from "../fleet/scheduler.js";
import type { Placement } from "../fleet/waiting.js";
import type { Upstream } from "../fleet/upstream.js";
import { namingUpstream, type ProxyCall, type ProxyContext, type ProxyOutcome } from "../proxy/proxy.js";
import type { RoutedRequest } from "../requests/openai.js";
import { CapturedAnswer } from "./captured-answer.js";
import type { RequestIds } from "./request-ids.js";

/** One pool of a disaggregated gateway: its upstreams (a fleet), its scheduler, its counters, its proxying. */
export interface Pool {
  readonly role: UpstreamRole;
  readonly fleet: Fleet;
  readonly scheduler: Scheduler;
  readonly counters: GatewayCounters;
  readonly proxying: ProxyContext;
  /** Whether a prefill server's load counts its requests until their decode begins (kv_cache_routing_account_for_in_transfer). */
  readonly accountForInTransfer: boolean;
}

/** What a flow serves with: both pools, the section's settings, the ids it makes, TensorRT-LLM's internal key. */
export interface Serving {
  readonly prefill: Pool;
  readonly decode: Pool;
  readonly config: DisaggregationConfig;
  readonly ids: RequestIds;
  /** auth.internal_request_auth_key (TensorRT-LLM's), or null. */
  readonly authKey: string | null;
}

/** A disaggregated request as the service hands it over. */
export interface DisaggregatedCall extends Omit<ProxyCall, "res"> {
  readonly res: EdgeResponse;
  readonly request: RoutedRequest;
}

/** How a disaggregated request ended: what its log line and counters say, and the pool that answered last. */
export interface DisaggregatedOutcome {
  readonly status: number;
  readonly upstream: string | null;
  readonly outcome: string;
  readonly matched: number | null;
  readonly pool: Pool;
}

/** Where a request is, for its caller: the pool its phase runs on now (its failure is counted there), and the end of its placements. */
export interface Track {
  pool: Pool;
  /** Called once no placement is left to make (its token ids can go back to the reader). */
  readonly placed: () => void;
}

/** Bytes a prefill answer may have beyond its prompt's token ids (an answer of one token, usage, the hand-over). */
const ANSWER_BASE_BYTES = 1 << 20;
/** Bytes per prompt token a prefill answer may add (TensorRT-LLM's `prompt_token_ids`: up to 10 digits and a comma). */
const ANSWER_BYTES_PER_TOKEN = 12;

/** The buffer a prefill's answer is held in, bounded by its request's size; past the bound it calls `onOverflow`. */
export const captureFor = (call: DisaggregatedCall, onOverflow: () => void) => new CapturedAnswer(ANSWER_BASE_BYTES + ANSWER_BYTES_PER_TOKEN * call.request.tokens.length + 2 * call.raw.length, onOverflow);

/** A hang-up of its own for one phase, which the client's also signals; `done` stops listening. */
export function phaseHangup(client: Hangup): { hangup: Hangup; done: () => void } {
  const hangup = new Hangup();
  const abort = () => hangup.abort();
  if (client.aborted) hangup.abort();
  else client.once("abort", abort);
  return { hangup, done: () => client.off("abort", abort) };
}

/** The headers naming the upstream an answer is about. */
export const at = namingUpstream;

/** A phase's proxy outcome as the request's. */
export const outcomeOf = (r: ProxyOutcome, pool: Pool, matched: number): DisaggregatedOutcome => ({ status: r.status, upstream: r.upstream.name, outcome: r.outcome, matched, pool });

/** Ends a placement no request will be proxied on (the load it counted on its upstream). */
export const unplace = (pool: Pool, placement: Placement | null, tokens: number): void => {
  if (placement !== null) pool.fleet.release(placement.upstream, tokens, placement.rank);
};

/** Writes a prefill server's own error answer (captured whole) to the client, as the engine wrote it; returns how it ended. */
export function passThrough(res: EdgeResponse, captured: CapturedAnswer, u: Upstream, pool: Pool, matched: number): DisaggregatedOutcome {
  const body = captured.body();
  res.writeHead(captured.status, { ...captured.headers, "content-length": String(body.length) }).end(body);
  return { status: captured.status, upstream: u.name, outcome: "ok", matched, pool };
}
