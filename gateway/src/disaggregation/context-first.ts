// TensorRT-LLM's and vLLM's flow: the prefill's answer first, then the decode
// request made from its hand-over (disaggregated-serving.ts says the steps).
// TensorRT-LLM's as `_send_disagg_request_ctx_first` runs it
// (tensorrt_llm/serve/openai_disagg_service.py), vLLM's as its NIXL proxy does.

import type { Placement } from "../fleet/waiting.js";
import type { Upstream } from "../fleet/upstream.js";
import { proxy, type ProxyOutcome } from "../proxy/proxy.js";
import { HttpError } from "../requests/openai.js";
import type { CapturedAnswer } from "./captured-answer.js";
import { memberText, withMembers } from "./json-members.js";
import { at, captureFor, outcomeOf, passThrough, phaseHangup, unplace, type DisaggregatedCall, type DisaggregatedOutcome, type Serving, type Track } from "./phases.js";
import { finishedAsStream, HandOffError, trtllmContextBody, trtllmHandOff, trtllmRefusal, vllmHandOff, vllmPrefillBody, type HandOff } from "./protocols.js";
import { DISAGG_AUTH_HEADER, disaggAuth, NO_HINT } from "./trtllm-auth.js";

/** Serves `call` (its body `client`, less the client's own hand-over fields) context first; `track` follows where it is. */
export async function contextFirst(s: Serving, call: DisaggregatedCall, client: string, track: Track): Promise<DisaggregatedOutcome> {
  const { request, hangup, tokens } = call;
  if (s.config.protocol === "trtllm") {
    const refusal = trtllmRefusal(request.kind, client);
    if (refusal !== null) throw new HttpError(400, refusal.message, "invalid_request_error", "unsupported_with_disaggregation", {}, refusal.param);
  }
  let decodeAt: Placement | null = null;
  const maxLocal = s.config.maxLocalPrefillLength;
  if (maxLocal !== null) {
    // TensorRT-LLM's conditional disaggregation: the generation server the decode router picks is reserved first.
    track.pool = s.decode;
    decodeAt = await s.decode.scheduler.acquire(request, hangup);
    if (decodeAt.matchedTokens > 0 && request.tokens.length - decodeAt.matchedTokens <= maxLocal) {
      track.placed();
      const whole = Buffer.from(client);
      return outcomeOf(await proxy(s.decode.proxying, { ...call, body: () => whole, headers: NO_HINT }, decodeAt.upstream, decodeAt.rank), s.decode, decodeAt.matchedTokens);
    }
  }
  // No generation server to take it: the prefill would be work (and KV blocks) no one collects.
  if (decodeAt === null && !s.decode.fleet.upstreams.some((u) => s.decode.fleet.available(u))) {
    track.pool = s.decode;
    throw new HttpError(503, "no healthy decode upstream", "server_error", "no_healthy_upstream", { "retry-after": "1" });
  }
  track.pool = s.prefill;
  let prefillAt: Placement;
  try {
    prefillAt = await s.prefill.scheduler.acquire(request, hangup);
  } catch (error) {
    unplace(s.decode, decodeAt, tokens);
    throw error;
  }
  if (decodeAt !== null) track.placed();
  const id = s.ids.next();
  let handOff: HandOff | null;
  let first: ProxyOutcome;
  let captured: CapturedAnswer;
  try {
    ({ first, captured } = await prefillPhase(s, call, client, prefillAt, id));
    handOff = readHandOff(s, first, captured, call, id);
  } catch (error) {
    unplace(s.decode, decodeAt, tokens);
    throw error;
  }
  if (handOff === null || handOff.kind === "finished") {
    unplace(s.decode, decodeAt, tokens);
    track.placed();
    // The prefill server's own error answer, or (TensorRT-LLM) a context phase that ended the request: either is the client's.
    if (handOff === null) return passThrough(call.res, captured, first.upstream, s.prefill, prefillAt.matchedTokens);
    return answerFinished(s, call, client, handOff.answer, first.upstream, prefillAt.matchedTokens);
  }
  return decodePhase(s, call, client, handOff, first.upstream, prefillAt.matchedTokens, decodeAt, track);
}

/** Sends the prefill (context) request to `prefillAt` and holds its answer. */
async function prefillPhase(s: Serving, call: DisaggregatedCall, client: string, prefillAt: Placement, id: bigint): Promise<{ first: ProxyOutcome; captured: CapturedAnswer }> {
  const trtllm = s.config.protocol === "trtllm";
  let context: Buffer;
  try {
    context = Buffer.from(trtllm ? trtllmContextBody(client, id, call.request.conversationId) : vllmPrefillBody(client));
  } catch (error) {
    unplace(s.prefill, prefillAt, call.tokens); // never proxied: its placement ends here
    throw error;
  }
  const phase = phaseHangup(call.hangup);
  const captured = captureFor(call, () => phase.hangup.abort());
  const headers = trtllm ? NO_HINT : undefined;
  try {
    const first = await proxy(s.prefill.proxying, { ...call, res: captured, hangup: phase.hangup, body: () => context, headers }, prefillAt.upstream, prefillAt.rank);
    return { first, captured };
  } finally {
    phase.done();
  }
}

/**
 * The hand-over a prefill answer carries; null when the answer is the prefill
 * server's own error (the client's answer as it is); throws the HttpError the
 * client gets when the answer was cut, too large or carries no hand-over.
 */
function readHandOff(s: Serving, first: ProxyOutcome, captured: CapturedAnswer, call: DisaggregatedCall, id: bigint): HandOff | null {
  const u = first.upstream;
  if (captured.overflowed) throw new HttpError(502, "the prefill server's answer is larger than a hand-over can be", "server_error", "prefill_answer_too_large", at(u));
  if (first.outcome === "client_closed" || call.hangup.aborted) throw new HttpError(499, "the client closed the request");
  if (first.outcome !== "ok" || !captured.writableEnded) throw new HttpError(502, `the prefill server's answer was cut short (${first.outcome})`, "server_error", "prefill_failed", at(u));
  if (captured.status >= 300) return null;
  try {
    return s.config.protocol === "trtllm" ? trtllmHandOff(call.request.kind, captured.text(), id, call.request.conversationId) : vllmHandOff(captured.text());
  } catch (error) {
    if (!(error instanceof HandOffError)) throw error;
    s.prefill.proxying.log.warn({ request_id: call.requestId, upstream: u.name, reason: error.message }, "the prefill server's answer carries no usable hand-over: answered 502, no decode sent");
    throw new HttpError(502, error.message, "server_error", "prefill_invalid_answer", at(u));
  }
}

/** A context answer that ended the request, as the client asked for it (whole, or streamed). */
function answerFinished(s: Serving, call: DisaggregatedCall, client: string, answer: string, prefilled: Upstream, matched: number): DisaggregatedOutcome {
  const { request, res } = call;
  const optionsText = memberText(client, "stream_options");
  const options = optionsText === null ? null : (JSON.parse(optionsText) as { include_usage?: unknown } | null);
  let body: string;
  try {
    body = request.stream ? finishedAsStream(request.kind, answer, options?.include_usage === true) : answer;
  } catch {
    // An answer JSON.parse took but JSON.stringify cannot write again (nested past its stack): no answer to stream.
    throw new HttpError(502, "the context server's answer cannot be streamed", "server_error", "prefill_invalid_answer", at(prefilled));
  }
  res.writeHead(200, { "content-type": request.stream ? "text/event-stream" : "application/json", "content-length": String(Buffer.byteLength(body)), ...at(prefilled), "x-request-id": call.requestId }).end(body);
  return { status: 200, upstream: prefilled.name, outcome: "ok", matched, pool: s.prefill };
}

/**
 * Places the decode request (unless conditional disaggregation did) and
 * proxies it, with TensorRT-LLM's signatures. With the prefill pool's
 * kv_cache_routing_account_for_in_transfer, the prefill server's load counts
 * the request until the decode answer's first chunk: a streamed answer's
 * first token comes once the KV cache has moved; a whole answer shows no such
 * moment, and counts there until it ends.
 */
async function decodePhase(s: Serving, call: DisaggregatedCall, client: string, handOff: Extract<HandOff, { kind: "decode" }>, prefilled: Upstream, matched: number, reserved: Placement | null, track: Track): Promise<DisaggregatedOutcome> {
  const { request, hangup, tokens } = call;
  let held = s.prefill.accountForInTransfer;
  if (held) s.prefill.fleet.inTransfer(prefilled, tokens);
  const transferred = () => {
    if (held) (held = false), s.prefill.fleet.transferred(prefilled, tokens);
  };
  try {
    // Body and signature first: what throws before the proxy owns a placement must not keep it.
    let generation: Buffer;
    let headers: Record<string, string | null> | undefined;
    try {
      generation = Buffer.from(withMembers(client, handOff.members));
      headers = s.config.protocol === "trtllm" ? { ...NO_HINT, [DISAGG_AUTH_HEADER]: disaggAuth(s.authKey, handOff.params ?? {}) } : undefined;
    } catch (error) {
      unplace(s.decode, reserved, tokens);
      throw error;
    }
    track.pool = s.decode;
    const decodeAt = reserved ?? (await s.decode.scheduler.acquire(request, hangup));
    track.placed();
    const last = await proxy(s.decode.proxying, { ...call, body: () => generation, onFirstChunk: transferred, headers }, decodeAt.upstream, decodeAt.rank);
    return outcomeOf(last, s.decode, matched);
  } finally {
    transferred();
  }
}
