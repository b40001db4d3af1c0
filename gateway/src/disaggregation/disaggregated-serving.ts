// Disaggregated serving: a request's prompt on a prefill (context) server of
// one pool, its generation on a decode (generation) server of the other, each
// pool placed by its own scheduler and router, the hand-over between them in
// the engines' protocol (protocols.ts). Both phases go through the proxy, so
// each keeps the one delivery rule: a phase goes to another server of its pool
// only when it provably never reached the first.
//
// Context first (trtllm, vllm), as TensorRT-LLM's and vLLM's front ends run it:
//   1. (trtllm, max_local_prefill_length) place on the decode pool first; a
//      prompt that server holds with at most that many tokens left is served
//      whole there;
//   2. place on the prefill pool and send the context request; its answer is
//      held (captured-answer.ts). A failure there is the client's answer
//      (a prefill server's 4xx passed through), and no decode server is ever
//      contacted;
//   3. place on the decode pool (unless step 1 did) and proxy the generation
//      request, streamed or not as the client asked.
// Paired (sglang), as SGLang's mini load balancer runs it: both placed first,
// the same body with one bootstrap room sent to both; decode goes out once
// the prefill request is on the wire. A prefill that fails before the decode
// server answered aborts the decode, and its failure is the client's; a decode
// that fails aborts the prefill. A client that leaves aborts both.

import type { ServerResponse } from "node:http";
import type { DisaggregationConfig, UpstreamRole } from "../config/config-types.js";
import type { Fleet } from "../fleet/fleet.js";
import { Hangup, type GatewayCounters, type Placement, type Scheduler } from "../fleet/scheduler.js";
import type { Upstream } from "../fleet/upstream.js";
import { proxy, type ProxyCall, type ProxyContext, type ProxyOutcome } from "../proxy/proxy.js";
import { HttpError, type RoutedRequest } from "../requests/openai.js";
import { CapturedAnswer } from "./captured-answer.js";
import { finishedAsStream, HandOffError, sglangBody, trtllmContextBody, trtllmHandOff, vllmHandOff, vllmPrefillBody, withoutHandOff, type HandOff } from "./protocols.js";
import { RequestIds } from "./request-ids.js";
import { withMembers } from "./json-members.js";

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

/** How a disaggregated request ended: what its log line and counters say, and the pool that answered last. */
export interface DisaggregatedOutcome {
  readonly status: number;
  readonly upstream: string | null;
  readonly outcome: string;
  readonly matched: number | null;
  readonly pool: Pool;
}

/** A disaggregated request as the service hands it over. */
export interface DisaggregatedCall extends Omit<ProxyCall, "res"> {
  readonly res: ServerResponse;
  readonly request: RoutedRequest;
}

/** Bytes a prefill answer may have beyond its prompt's token ids (an answer of one token, usage, the hand-over). */
const ANSWER_BASE_BYTES = 1 << 20;
/** Bytes per prompt token a prefill answer may add (TensorRT-LLM's `prompt_token_ids`: up to 10 digits and a comma). */
const ANSWER_BYTES_PER_TOKEN = 12;

/** A hang-up of its own for one phase, which the client's also signals; `done` stops listening. */
function phaseHangup(client: Hangup): { hangup: Hangup; done: () => void } {
  const hangup = new Hangup();
  const abort = () => hangup.abort();
  if (client.aborted) hangup.abort();
  else client.once("abort", abort);
  return { hangup, done: () => client.off("abort", abort) };
}

/** The host name in `url`, as SGLang's balancer sends it (`urlparse(...).hostname`: no brackets, lower case). */
function hostOf(url: string): string {
  return new URL(url).hostname.replace(/^\[(.*)\]$/, "$1");
}

/** The answer to a phase's failure the proxy did not throw: its status, and the upstream it names. */
const at = (u: Upstream) => ({ "x-adp-upstream": String(u.index), "x-adp-upstream-name": u.name });

/** Serves requests over a prefill pool and a decode pool. */
export class DisaggregatedServing {
  readonly prefill: Pool;
  readonly decode: Pool;
  readonly #config: DisaggregationConfig;
  readonly #ids: RequestIds;
  readonly #release: (tokens: Uint32Array) => void;

  /** `release` hands a request's token ids back to its reader once both phases are placed. */
  constructor(config: DisaggregationConfig, prefill: Pool, decode: Pool, release: (tokens: Uint32Array) => void) {
    this.#config = config;
    this.prefill = prefill;
    this.decode = decode;
    this.#ids = new RequestIds(config.nodeId);
    this.#release = release;
  }

  /** Serves one request; resolves with how it ended, or throws the HttpError to answer. */
  async serve(call: DisaggregatedCall): Promise<DisaggregatedOutcome> {
    try {
      const client = withoutHandOff(call.raw.toString("utf8"));
      return this.#config.protocol === "sglang" ? await this.#paired(call, client) : await this.#contextFirst(call, client);
    } finally {
      this.#release(call.request.tokens);
    }
  }

  /** trtllm and vllm: the prefill's answer first, then the decode request made from it. */
  async #contextFirst(call: DisaggregatedCall, client: string): Promise<DisaggregatedOutcome> {
    const { request, hangup, tokens } = call;
    let decodeAt: Placement | null = null;
    const maxLocal = this.#config.maxLocalPrefillLength;
    if (maxLocal !== null) {
      // TensorRT-LLM's conditional disaggregation: the generation server the decode router picks is reserved first.
      decodeAt = await this.decode.scheduler.acquire(request, hangup);
      if (decodeAt.matchedTokens > 0 && request.tokens.length - decodeAt.matchedTokens <= maxLocal) {
        const whole = Buffer.from(client);
        return this.#outcome(await proxy(this.decode.proxying, { ...call, body: () => whole }, decodeAt.upstream, decodeAt.rank), this.decode, decodeAt.matchedTokens);
      }
    }
    let prefillAt: Placement;
    try {
      prefillAt = await this.prefill.scheduler.acquire(request, hangup);
    } catch (error) {
      if (decodeAt !== null) this.decode.fleet.release(decodeAt.upstream, tokens, decodeAt.rank);
      throw error;
    }
    const id = this.#ids.next();
    const trtllm = this.#config.protocol === "trtllm";
    const context = Buffer.from(trtllm ? trtllmContextBody(client, id, request.conversationId) : vllmPrefillBody(client));
    const phase = phaseHangup(hangup);
    const captured = new CapturedAnswer(ANSWER_BASE_BYTES + ANSWER_BYTES_PER_TOKEN * request.tokens.length + 2 * call.raw.length, () => phase.hangup.abort());
    let first: ProxyOutcome;
    try {
      first = await proxy(this.prefill.proxying, { ...call, res: captured, hangup: phase.hangup, body: () => context }, prefillAt.upstream, prefillAt.rank);
    } catch (error) {
      if (decodeAt !== null) this.decode.fleet.release(decodeAt.upstream, tokens, decodeAt.rank);
      throw error;
    } finally {
      phase.done();
    }
    const prefilled = first.upstream;
    let handOff: HandOff;
    try {
      handOff = this.#handOff(first, captured, call, id);
    } catch (error) {
      if (decodeAt !== null) this.decode.fleet.release(decodeAt.upstream, tokens, decodeAt.rank);
      if (error instanceof PassedThrough) return { ...error.outcome, matched: prefillAt.matchedTokens, pool: this.prefill };
      throw error;
    }
    if (handOff.kind === "finished") {
      if (decodeAt !== null) this.decode.fleet.release(decodeAt.upstream, tokens, decodeAt.rank);
      const stream = request.stream;
      const body = stream ? finishedAsStream(request.kind, handOff.answer) : handOff.answer;
      call.res.writeHead(200, { "content-type": stream ? "text/event-stream" : "application/json", "content-length": String(Buffer.byteLength(body)), ...at(prefilled), "x-request-id": call.requestId }).end(body);
      return { status: 200, upstream: prefilled.name, outcome: "ok", matched: prefillAt.matchedTokens, pool: this.prefill };
    }
    // The prefill server holds the request's KV cache until the decode server has it: its load, when the pool counts that.
    const holding = this.prefill.accountForInTransfer;
    if (holding) this.prefill.fleet.inTransfer(prefilled, tokens);
    let held = holding;
    const transferred = () => {
      if (held) (held = false), this.prefill.fleet.transferred(prefilled, tokens);
    };
    try {
      decodeAt ??= await this.decode.scheduler.acquire(request, hangup);
      const generation = Buffer.from(withMembers(client, handOff.members));
      const last = await proxy(this.decode.proxying, { ...call, body: () => generation, onFirstChunk: transferred }, decodeAt.upstream, decodeAt.rank);
      return this.#outcome(last, this.decode, prefillAt.matchedTokens);
    } finally {
      transferred();
    }
  }

  /**
   * The hand-over a prefill answer carries; throws the HttpError the client
   * gets when there is none (a PassedThrough once the prefill server's own
   * error answer was written to the client).
   */
  #handOff(first: ProxyOutcome, captured: CapturedAnswer, call: DisaggregatedCall, id: bigint): HandOff {
    const u = first.upstream;
    if (captured.overflowed) throw new HttpError(502, "the prefill server's answer is larger than a hand-over can be", "server_error", "prefill_answer_too_large", at(u));
    if (first.outcome === "client_closed" || call.hangup.aborted) throw new HttpError(499, "the client closed the request");
    if (first.outcome !== "ok" || !captured.writableEnded) throw new HttpError(502, `the prefill server's answer was cut short (${first.outcome})`, "server_error", "prefill_failed", at(u));
    if (captured.status >= 300) {
      // Its own error (a prompt it refuses, say): the client's answer as the engine wrote it; no decode server is contacted.
      call.res.writeHead(captured.status, { ...captured.headers, "content-length": String(captured.body().length) }).end(captured.body());
      throw new PassedThrough({ status: captured.status, upstream: u.name, outcome: "ok" });
    }
    try {
      return this.#config.protocol === "trtllm" ? trtllmHandOff(call.request.kind, captured.text(), id, call.request.conversationId) : vllmHandOff(captured.text());
    } catch (error) {
      if (!(error instanceof HandOffError)) throw error;
      this.prefill.proxying.log.warn({ request_id: call.requestId, upstream: u.name, reason: error.message }, "the prefill server's answer carries no usable hand-over: answered 502, no decode sent");
      throw new HttpError(502, error.message, "server_error", "prefill_invalid_answer", at(u));
    }
  }

  /** sglang: one body with one bootstrap room to both servers, decode once the prefill request is on the wire. */
  async #paired(call: DisaggregatedCall, client: string): Promise<DisaggregatedOutcome> {
    const { request, hangup, tokens, res } = call;
    const prefillAt = await this.prefill.scheduler.acquire(request, hangup);
    let decodeAt: Placement;
    try {
      decodeAt = await this.decode.scheduler.acquire(request, hangup);
    } catch (error) {
      this.prefill.fleet.release(prefillAt.upstream, tokens, prefillAt.rank);
      throw error;
    }
    const room = this.#ids.next();
    const bodies = new Map<Upstream, Buffer>();
    const bodyFor = (u: Upstream) => {
      let body = bodies.get(u);
      if (body === undefined) bodies.set(u, (body = Buffer.from(sglangBody(client, hostOf(u.url), u.bootstrapPort, room))));
      return body;
    };
    const prefillPhase = phaseHangup(hangup);
    const decodePhase = phaseHangup(hangup);
    let decodeRun: Promise<ProxyOutcome> | null = null;
    /** Set once the decode phase ended, as it ended (a failure thrown). */
    let decodeEnded: { outcome: ProxyOutcome } | { error: unknown } | null = null;
    const startDecode = (prefilled: Upstream) => {
      if (decodeRun !== null) return;
      decodeRun = proxy(this.decode.proxying, { ...call, hangup: decodePhase.hangup, body: () => bodyFor(prefilled) }, decodeAt.upstream, decodeAt.rank);
      decodeRun.then(
        (outcome) => {
          decodeEnded = { outcome };
          // A decode that failed takes its prefill with it (nothing will take that KV cache).
          if (outcome.outcome !== "ok") prefillPhase.hangup.abort();
        },
        (error: unknown) => {
          decodeEnded = { error };
          prefillPhase.hangup.abort();
        },
      );
    };
    const captured = new CapturedAnswer(ANSWER_BASE_BYTES + ANSWER_BYTES_PER_TOKEN * request.tokens.length + 2 * call.raw.length, () => prefillPhase.hangup.abort());
    try {
      let failure: HttpError | null = null;
      let first: ProxyOutcome | null = null;
      try {
        first = await proxy(this.prefill.proxying, { ...call, res: captured, hangup: prefillPhase.hangup, body: bodyFor, onSent: startDecode }, prefillAt.upstream, prefillAt.rank);
      } catch (error) {
        if (!(error instanceof HttpError)) throw error;
        failure = error;
      }
      const running = decodeRun as Promise<ProxyOutcome> | null;
      if (running === null) {
        // The prefill never went out: neither did the decode.
        this.decode.fleet.release(decodeAt.upstream, tokens, decodeAt.rank);
        throw failure ?? new HttpError(499, "the client closed the request");
      }
      const ended = decodeEnded as { outcome: ProxyOutcome } | { error: unknown } | null;
      if (ended !== null) {
        // The decode phase is over (it answered, or failed and took the prefill with it): its end is the request's.
        if ("error" in ended) throw ended.error;
        return this.#outcome(ended.outcome, this.decode, prefillAt.matchedTokens);
      }
      const prefillFailed = failure !== null || first === null || (first.outcome !== "ok" && !hangup.aborted) || captured.status >= 300;
      if (prefillFailed && !res.headersSent) {
        // The decode server has not answered yet: it is stopped, and the prefill's failure is the client's answer.
        decodePhase.hangup.abort();
        await running.catch(() => undefined);
        if (failure !== null) throw failure;
        const u = first!.upstream;
        if (captured.status >= 300 && captured.writableEnded && !captured.overflowed) {
          res.writeHead(captured.status, { ...captured.headers, "content-length": String(captured.body().length) }).end(captured.body());
          return { status: captured.status, upstream: u.name, outcome: "ok", matched: prefillAt.matchedTokens, pool: this.prefill };
        }
        throw new HttpError(502, `the prefill server failed (${first!.outcome})`, "server_error", "prefill_failed", at(u));
      }
      return this.#outcome(await running, this.decode, prefillAt.matchedTokens);
    } finally {
      prefillPhase.done();
      decodePhase.done();
    }
  }

  /** A phase's proxy outcome as the request's. */
  #outcome(r: ProxyOutcome, pool: Pool, matched: number): DisaggregatedOutcome {
    return { status: r.status, upstream: r.upstream.name, outcome: r.outcome, matched, pool };
  }
}

/** The prefill server's own error answer, already written to the client. */
class PassedThrough extends Error {
  constructor(readonly outcome: { status: number; upstream: string; outcome: string }) {
    super("passed through");
  }
}
