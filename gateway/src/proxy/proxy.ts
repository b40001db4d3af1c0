// Proxying a placed request to its upstream, and the one delivery rule the
// gateway keeps: a request goes to another upstream only when it provably
// never reached the first (no connection was made, or the connection failed
// before any byte of the request was written: exchange.ts knows which); every
// other failure is answered with that upstream's failure, so a request that
// reached an engine is never sent to a second one (a request that kills
// engines kills one). Answers carry `x-adp-upstream` (the index),
// `x-adp-upstream-name` and `x-request-id`; a stream the upstream cuts short
// ends with an OpenAI-style SSE error event rather than a dropped connection.

import { ServerResponse, validateHeaderName, validateHeaderValue, type IncomingHttpHeaders } from "node:http";
import type { EdgeRequest, EdgeResponse } from "../http1/edge-types.js";
import { Http1Pool, type ForwardedLines } from "../http1/http1-pool.js";
import { Http1Request } from "../http1/server-connection.js";
import { Http1Response } from "../http1/server-response.js";
import { HEAD_LINES, type HeadLines } from "../http1/answer-parser.js";
import type { Logger } from "pino";
import type { GatewayConfig } from "../config/config.js";
import { viaFor } from "../requests/via.js";
import { exchange, type AnswerSink, type ExchangeListener, type ExchangeResult } from "./exchange.js";
import type { ExchangeError, ExchangeReason } from "../fleet/upstream-errors.js";
import type { Fleet } from "../fleet/fleet.js";
import { HttpError } from "../requests/openai.js";
import type { Hangup } from "../fleet/hangup.js";
import type { Scheduler } from "../fleet/scheduler.js";
import { TokenTiming } from "./token-timing.js";
import type { Upstream } from "../fleet/upstream.js";

/** Headers never forwarded: those of one connection (hop-by-hop), and those the proxy sets itself (host, length, expect). */
export const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length", "expect"]);

/** Reasons that are the upstream's failure (they count toward its outlier ejection); the others are the client's or the gateway's bound. */
const UPSTREAM_FAULTS: ReadonlySet<ExchangeReason> = new Set(["refused", "connect_timeout", "dns", "unreachable", "reset", "closed", "first_byte_timeout", "idle_timeout", "invalid_answer", "error"]);

/** What proxying needs from the gateway. */
export interface ProxyContext {
  readonly fleet: Fleet;
  readonly scheduler: Scheduler;
  readonly log: Logger;
  readonly timeouts: GatewayConfig["timeouts"];
  /** Whether clients authenticate to the gateway (their key then never reaches an upstream without one). */
  readonly clientKeys: boolean;
  /** This gateway's `Via` entry, added to every proxied request (a request that carries it back is a loop). */
  readonly via: string;
  /** Teaches `u`'s cache view a request retried onto it (its prompt is read again from the body). */
  readonly relearn: (u: Upstream, call: ProxyCall) => void;
}

/** One proxied request. */
export interface ProxyCall {
  readonly kind: "chat" | "completion";
  readonly req: EdgeRequest;
  /** Where the answer goes: the client's response, or (a prefill's) a buffer the gateway reads. */
  readonly res: AnswerSink;
  /** The client's body as it came (what a retried prompt is read again from). */
  readonly raw: Buffer;
  /** The body sent to upstream `u`, when it is not `raw` (a disaggregated request's phase, which can name its server). */
  readonly body?: ((u: Upstream) => Buffer) | undefined;
  /** Called once the request's first byte went out to `u` (disaggregation starts a paired request then). */
  readonly onSent?: ((u: Upstream) => void) | undefined;
  /** Called once, at the answer's first body chunk, its end, or its failure (a KV transfer is over by then). */
  readonly onFirstChunk?: (() => void) | undefined;
  /** Headers set on the request upstream over the client's (null: removed): a disaggregated phase's own signatures. */
  readonly headers?: Readonly<Record<string, string | null>> | undefined;
  /** Its prompt's tokens (its load on the upstream). */
  readonly tokens: number;
  readonly requestId: string;
  readonly hangup: Hangup;
}

/** How a proxied request ended: the status the client got, the upstream that answered (or failed) last, the outcome's word. */
export interface ProxyOutcome {
  readonly status: number;
  readonly upstream: Upstream;
  readonly outcome: string;
}

/** The usual `Connection` values' lists, made once. */
const KEEP_ALIVE: readonly string[] = ["keep-alive"];
const CLOSE: readonly string[] = ["close"];

/** The names a `Connection` header lists (hop-by-hop too, RFC 9110 §7.6.1), lower-case. */
function connectionNames(value: string | string[] | undefined): readonly string[] | null {
  if (value === undefined) return null;
  if (typeof value === "string") {
    const lower = value.toLowerCase();
    if (lower === "keep-alive") return KEEP_ALIVE;
    if (lower === "close") return CLOSE;
  }
  return (Array.isArray(value) ? value.join(",") : value).toLowerCase().split(",").map((t) => t.trim());
}

/** The headers sent upstream: the client's, less hop-by-hop ones, with the upstream's key, the request id and this hop. */
function upstreamHeaders(ctx: ProxyContext, call: ProxyCall, u: Upstream, rank: number | null): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const headers = call.req.headers;
  const named = connectionNames(headers.connection);
  // The upstream's own key replaces the client's; else, when clients authenticate to the gateway, their key is the gateway's and stays here.
  const ownKey = u.apiKey !== null || ctx.clientKeys;
  for (const name in headers) {
    const value = headers[name];
    // The DP rank is the gateway's to choose (phase 2): a client's header never reaches the engine.
    if (value === undefined || HOP_BY_HOP.has(name) || (named !== null && named.includes(name)) || name === RANK_HEADER || (ownKey && name === "authorization")) continue;
    out[name] = value;
  }
  if (rank !== null) out[RANK_HEADER] = String(rank);
  if (u.apiKey !== null) out.authorization = `Bearer ${u.apiKey}`;
  out["x-request-id"] = call.requestId;
  out.via = viaFor(call.req, ctx.via);
  if (call.headers !== undefined) {
    for (const name in call.headers) {
      const value = call.headers[name];
      if (value === null || value === undefined) delete out[name];
      else out[name] = value;
    }
  }
  return out;
}

/**
 * The client's header lines passed on as they came (no header object to
 * rebuild, no head to re-check): for a request the own server path read
 * (its lines a strict parser took) going to an upstream on the own HTTP/1.1
 * pool, with no header a disaggregated phase sets. The lines dropped are
 * upstreamHeaders' (hop-by-hop ones, the rank, the client's key where the
 * gateway keeps it) and those the gateway sets below (its request id, Via);
 * test/gateway/http1-server.test.ts compares the two. Null otherwise.
 */
function forwardedLines(ctx: ProxyContext, call: ProxyCall, u: Upstream): ForwardedLines | null {
  const req = call.req;
  if (!(req instanceof Http1Request) || call.headers !== undefined || !(u.exchanges instanceof Http1Pool)) return null;
  const { names, lines } = req.head;
  const ownKey = u.apiKey !== null || ctx.clientKeys;
  return { bytes: req.headBytes, lines: passedLines(names, lines, connectionNames(req.headers.connection), ownKey ? SET_WITH_KEY : SET_BY_GATEWAY, null) };
}

/**
 * The spans (a line's start and end, two numbers a line) of the head lines a
 * proxy passes on: not hop-by-hop, not named by the head's `Connection`
 * (`named`), not in `also`; their names pushed onto `keptNames` when given.
 */
function passedLines(names: readonly string[], spans: readonly number[], named: readonly string[] | null, also: ReadonlySet<string> | null, keptNames: string[] | null): number[] {
  const kept: number[] = [];
  for (let i = 0; i < names.length; i++) {
    const name = names[i]!;
    if (HOP_BY_HOP.has(name) || (named !== null && named.includes(name)) || (also !== null && also.has(name))) continue;
    kept.push(spans[2 * i]!, spans[2 * i + 1]!);
    keptNames?.push(name);
  }
  return kept;
}

/** The headers the gateway sets beside forwarded lines: the rank, the upstream's key, the request id, this hop. */
function gatewayHeaders(ctx: ProxyContext, call: ProxyCall, u: Upstream, rank: number | null): Record<string, string> {
  const out: Record<string, string> = { "x-request-id": call.requestId, via: viaFor(call.req, ctx.via) };
  if (rank !== null) out[RANK_HEADER] = String(rank);
  if (u.apiKey !== null) out.authorization = `Bearer ${u.apiKey}`;
  return out;
}

/** The answer's headers for the client: the upstream's, less hop-by-hop ones and those its `Connection` names, with the gateway's own. */
function answerHeaders(answer: IncomingHttpHeaders, status: number, u: Upstream, requestId: string): Record<string, string | string[]> {
  // No prototype: an upstream's header named __proto__ is a header like others.
  const headers: Record<string, string | string[]> = Object.create(null) as Record<string, string | string[]>;
  const named = connectionNames(answer.connection);
  for (const name in answer) {
    const value = answer[name];
    if (value !== undefined && !HOP_BY_HOP.has(name) && !named?.includes(name)) headers[name] = value;
  }
  // The body is passed on byte for byte, so the upstream's length stands: the answer then goes out
  // unchunked, headers and body in one write (undici refuses a body that does not match its length).
  // (Never on a 204, which has no body and must not say a length: RFC 9110 8.6.)
  const length = answer["content-length"];
  if (typeof length === "string" && answer["transfer-encoding"] === undefined && status !== 204) headers["content-length"] = length;
  headers["x-adp-upstream"] = String(u.index);
  headers["x-adp-upstream-name"] = u.name;
  headers["x-request-id"] = requestId;
  return headers;
}

/**
 * Writes the client's head from the upstream's lines as they came (the own
 * pool's answer to the own server path's request): answerHeaders' choice of
 * lines, kept as they are instead of rebuilt (test/gateway/http1-server.test.ts
 * compares the two).
 */
function passHead(res: Http1Response, status: number, answer: IncomingHttpHeaders, lines: HeadLines, u: Upstream, requestId: string): void {
  const keptNames: string[] = [];
  const kept = passedLines(lines.names, lines.lines, connectionNames(answer.connection), null, keptNames);
  const own: Record<string, string> = { "x-adp-upstream": String(u.index), "x-adp-upstream-name": u.name, "x-request-id": requestId };
  // The body is passed on byte for byte, so the upstream's length stands (as answerHeaders keeps it).
  const length = answer["content-length"];
  if (typeof length === "string" && answer["transfer-encoding"] === undefined && status !== 204) own["content-length"] = length;
  res.writeHeadPassing(status, lines, kept, keptNames, own);
}

/** The SSE error event ending a stream cut short, then `[DONE]` (what vLLM's servers send when a stream fails). */
function streamErrorEvent(reason: ExchangeReason, atBoundary: boolean): string {
  const message = reason === "max_duration" ? "the stream reached the gateway's timeouts.max_stream_ms" : reason === "idle_timeout" ? "the upstream sent nothing for timeouts.idle_ms" : "the upstream's stream ended early (its connection broke)";
  const code = reason === "max_duration" ? "stream_max_duration" : reason === "idle_timeout" ? "upstream_idle_timeout" : "upstream_stream_error";
  const event = `data: ${JSON.stringify({ error: { message, type: "server_error", param: null, code } })}\n\ndata: [DONE]\n\n`;
  return atBoundary ? event : `\n\n${event}`; // a cut event is ended first, so the error is an event of its own
}

/** The headers naming the upstream an answer (or an error about it) is about. */
export const namingUpstream = (u: Upstream): { "x-adp-upstream": string; "x-adp-upstream-name": string } => ({ "x-adp-upstream": String(u.index), "x-adp-upstream-name": u.name });

/** The header vLLM (`_get_data_parallel_rank`) and SGLang take a request's DP rank from (case-insensitive). */
export const RANK_HEADER = "x-data-parallel-rank";

/** Request headers the gateway sets itself beside forwarded lines (gatewayHeaders), so the client's are dropped; with the key when the gateway keeps the client's. */
const SET_BY_GATEWAY: ReadonlySet<string> = new Set([RANK_HEADER, "x-request-id", "via"]);
const SET_WITH_KEY: ReadonlySet<string> = new Set([...SET_BY_GATEWAY, "authorization"]);

/**
 * Proxies a placed request to `first` (on its DP rank `rank` when phase 2
 * chose one), retrying on another upstream only while it was never delivered
 * (there without a rank: that engine's balancer picks); resolves with how it
 * ended (or rejects with the HttpError to answer when no answer came).
 */
export function proxy(ctx: ProxyContext, call: ProxyCall, first: Upstream, rank: number | null = null): Promise<ProxyOutcome> {
  return new Promise<ProxyOutcome>((resolve, reject) => new ProxyRun(ctx, call, first, rank, resolve, reject).send(first));
}

/**
 * One proxied call: its tries on the upstreams it may use, and what each
 * exchange tells it (the client's head written from the upstream's, token
 * timing on a stream, the first chunk reported, how the try ended). While the
 * engine answers, a request holds this object and its exchange, not an async
 * function's frame and a promise a try: those cost a few hundred bytes each,
 * which every young-generation collection copies while requests are in
 * flight (docs/performance.md).
 */
class ProxyRun implements ExchangeListener {
  readonly #ctx: ProxyContext;
  readonly #call: ProxyCall;
  readonly #first: Upstream;
  readonly #rank: number | null;
  readonly #resolve: (outcome: ProxyOutcome) => void;
  readonly #reject: (error: unknown) => void;
  /** The upstreams a try failed on before any byte reached them (null: none yet). */
  #tried: Set<Upstream> | null = null;
  /** Whether the call's onFirstChunk was called (once: at the answer's first chunk, its end, or the call's end). */
  #told = false;
  /** How the try in progress ended, until the microtask that takes it (where an awaited exchange's continuation ran). */
  #result: ExchangeResult | null = null;
  /** Whether the call ended (an exchange that settles after it, left from a send that threw, is not heard). */
  #ended = false;
  /** The try in progress: its upstream. */
  upstream: Upstream;
  /** When the try in progress was sent (performance.now()). */
  started = 0;
  /** A stream's token timing (null: a whole answer). */
  timing: TokenTiming | null = null;
  /** A whole answer's head for node:http's response, held until its first body bytes (null: none held). */
  #heldHead: { status: number; headers: Record<string, string | string[]> } | null = null;

  constructor(ctx: ProxyContext, call: ProxyCall, first: Upstream, rank: number | null, resolve: (outcome: ProxyOutcome) => void, reject: (error: unknown) => void) {
    this.#ctx = ctx;
    this.#call = call;
    this.#first = first;
    this.#rank = rank;
    this.#resolve = resolve;
    this.#reject = reject;
    this.upstream = first;
  }

  /** Sends the call to `u` (its rank only on the first upstream); a throw ends the call with it. */
  send(u: Upstream): void {
    const ctx = this.#ctx;
    const call = this.#call;
    this.upstream = u;
    this.started = performance.now();
    this.timing = null;
    try {
      const forward = forwardedLines(ctx, call, u);
      const rank = this.#rankOn(u);
      exchange(
        u.exchanges,
        call.res,
        {
          path: u.basePath === "" ? (call.req.url ?? "/") : `${u.basePath}${call.req.url}`,
          headers: forward === null ? upstreamHeaders(ctx, call, u, rank) : gatewayHeaders(ctx, call, u, rank),
          forward,
          body: call.body === undefined ? call.raw : call.body(u),
          hangup: call.hangup,
          connectMs: ctx.timeouts.connectMs,
          firstByteMs: ctx.timeouts.firstByteMs,
          idleMs: ctx.timeouts.idleMs,
          maxMs: ctx.timeouts.maxStreamMs,
        },
        this,
      );
    } catch (error) {
      // Not sent (a body or header that could not be made): its upstream's slot is given back, the call ends with the error.
      this.#ctx.fleet.release(u, call.tokens, this.#rankOn(u));
      this.#end(null, error);
    }
  }

  written(): void {
    this.#call.onSent?.(this.upstream);
  }

  head(status: number, answer: IncomingHttpHeaders): void {
    const upstream = this.upstream;
    upstream.firstByte.observe((performance.now() - this.started) / 1000);
    this.#ctx.fleet.answered(upstream, status);
    upstream.countStatus(status);
    const res = this.#call.res;
    const lines = (answer as { [HEAD_LINES]?: HeadLines })[HEAD_LINES];
    // A stream's head goes out at once; a whole answer's goes with its body, in one write (until then it can be
    // taken back: see takeBackHead).
    const type = answer["content-type"];
    const stream = typeof type === "string" && type.startsWith("text/event-stream");
    if (lines !== undefined && res instanceof Http1Response) passHead(res, status, answer, lines, upstream, this.#call.requestId);
    else if (!stream && res instanceof ServerResponse) {
      // node:http's writeHead commits the head (nothing else can be answered after it): held, checked now as writeHead would.
      const headers = answerHeaders(answer, status, upstream, this.#call.requestId);
      for (const name in headers) {
        validateHeaderName(name);
        const value = headers[name]!;
        if (typeof value === "string") validateHeaderValue(name, value);
        else for (const v of value) validateHeaderValue(name, v);
      }
      this.#heldHead = { status, headers };
      HEADS_HELD.add(res);
    } else res.writeHead(status, answerHeaders(answer, status, upstream, this.#call.requestId));
    if (stream) {
      res.flushHeaders();
      this.timing = new TokenTiming(this.started, (gap) => upstream.itl.observe(gap));
    }
  }

  data(chunk: Buffer): Buffer {
    this.#tell();
    if (this.#heldHead !== null) this.#writeHeldHead();
    return this.timing === null ? chunk : this.timing.chunk(chunk);
  }

  end(): Buffer | null {
    this.#tell();
    if (this.#heldHead !== null) this.#writeHeldHead();
    return this.timing === null ? null : this.timing.flush();
  }

  settled(result: ExchangeResult): void {
    if (this.#ended) return;
    this.#result = result;
    if (TRIES_ENDED.push(this) === 1) queueMicrotask(takeTriesEnded);
  }

  /** Writes node:http's held head, as its body's first bytes go. */
  #writeHeldHead(): void {
    const { status, headers } = this.#heldHead!;
    this.#heldHead = null;
    const res = this.#call.res as ServerResponse;
    HEADS_HELD.delete(res);
    res.writeHead(status, headers);
  }

  /**
   * Forgets the answer's head when none of it reached the client (a whole
   * answer's head waits for its body): true, and an error can be answered
   * in its place; false once any byte went. A captured answer (a prefill's)
   * is never taken back.
   */
  takeBackHead(): boolean {
    const res = this.#call.res;
    if (this.#heldHead !== null) {
      this.#heldHead = null;
      HEADS_HELD.delete(res);
      return true;
    }
    return res instanceof Http1Response && res.unsend();
  }

  /** Calls the call's onFirstChunk, the first time only. */
  #tell(): void {
    if (this.#told) return;
    this.#told = true;
    this.#call.onFirstChunk?.();
  }

  /** Ends the call: with its outcome, or (`outcome` null) with `error` (or what onFirstChunk threw, as an awaited call's `finally` would). */
  #end(outcome: ProxyOutcome | null, error?: unknown): void {
    this.#ended = true;
    try {
      this.#tell();
    } catch (thrown) {
      outcome = null;
      error = thrown;
    }
    if (outcome !== null) this.#resolve(outcome);
    else this.#reject(error);
  }

  /** The DP rank the call goes to on `u`: phase 2's on the upstream it placed the call on, none (the engine's balancer) on another. */
  #rankOn(u: Upstream): number | null {
    return u === this.#first ? this.#rank : null;
  }

  /** Takes how the try ended: its upstream's slot given back, then the call ends or goes to another upstream. @internal */
  tryEnded(): void {
    const result = this.#result;
    this.#result = null;
    if (result === null || this.#ended) return;
    const { status, error } = result;
    this.#ctx.fleet.release(this.upstream, this.#call.tokens, this.#rankOn(this.upstream));
    let outcome: ProxyOutcome | null;
    try {
      outcome = status === 0 ? this.#unanswered(error!) : this.#answered(status, error);
    } catch (thrown) {
      return this.#end(null, thrown);
    }
    if (outcome !== null) this.#end(outcome);
  }

  /** A try that got an answer: how the call ended (the client's answer is written, whole or cut short). */
  #answered(status: number, error: ExchangeError | null): ProxyOutcome {
    const upstream = this.upstream;
    const seconds = (performance.now() - this.started) / 1000;
    upstream.e2e.observe(seconds);
    if (error !== null) return cutShort(this.#ctx, this.#call, this, status, error.reason);
    // A whole answer's first token is its end; a stream without tokens likewise; an error answer has no tokens.
    if (status < 300) upstream.ttft.observe(this.timing?.ttftSeconds ?? seconds);
    return { status, upstream, outcome: "ok" };
  }

  /**
   * A try with no answer (nothing reached the client): the call ends 499 when
   * its client left; a request that never reached the upstream goes to the
   * least loaded other one (null: sent on); else the HttpError to answer is thrown.
   */
  #unanswered(failure: ExchangeError): ProxyOutcome | null {
    const { fleet, scheduler, log } = this.#ctx;
    const call = this.#call;
    const upstream = this.upstream;
    if (call.hangup.aborted || failure.reason === "client_closed") {
      upstream.countStatus("aborted");
      return { status: 499, upstream, outcome: "client_closed" };
    }
    upstream.countStatus(failure.reason === "first_byte_timeout" || failure.reason === "connect_timeout" ? "timeout" : failure.reason);
    fleet.gatewayFailure(upstream, failure.reason);
    const at = namingUpstream(upstream);
    if (!failure.delivered) {
      const tried = (this.#tried ??= new Set());
      tried.add(upstream);
      const next = scheduler.leastLoaded(tried);
      if (next !== null) {
        upstream.retriedAway++;
        next.inFlight++;
        next.inFlightTokens += call.tokens;
        if (call.tokens > 0) this.#ctx.relearn(next, call);
        log.warn({ request_id: call.requestId, upstream: upstream.name, reason: failure.reason, retried_on: next.name }, "the request never reached its upstream: sent to another");
        this.send(next);
        return null;
      }
      if (failure.reason === "connect_timeout" || failure.reason === "first_byte_timeout") throw new HttpError(504, "the upstream could not be connected to in time", "server_error", "upstream_connect_timeout", at);
      throw new HttpError(502, "no upstream could be reached", "server_error", "upstream_unreachable", at);
    }
    // It may have reached the engine: answered with this upstream's failure, never sent on.
    log.warn({ request_id: call.requestId, upstream: upstream.name, reason: failure.reason }, "the upstream failed after the request was sent: answered with its failure, not retried");
    throw upstreamFailure(this.#ctx, upstream, failure.reason);
  }
}

/** Calls whose try ended since the microtask that takes them was queued (one microtask for all, not a closure and a task each). */
const TRIES_ENDED: ProxyRun[] = [];

/** Tells each call in TRIES_ENDED how its try ended, in the order they ended (those ending meanwhile too). */
function takeTriesEnded(): void {
  // A call taken may end another try at once (a retry whose dispatch fails): it joins this round, in order.
  for (let i = 0; i < TRIES_ENDED.length; i++) TRIES_ENDED[i]!.tryEnded();
  TRIES_ENDED.length = 0;
}

/** node:http's responses whose whole answer's head came and is held until its body (see ProxyRun.head). */
const HEADS_HELD = new WeakSet<AnswerSink>();

/** Whether an answer's head came for `res`: written (perhaps not yet sent), or held until its body. */
export function headGiven(res: EdgeResponse): boolean {
  return res.headersSent || HEADS_HELD.has(res);
}

/** The error answering a request that reached `upstream` (it may have reached the engine) and failed there for `reason`. */
function upstreamFailure(ctx: ProxyContext, upstream: Upstream, reason: ExchangeReason): HttpError {
  const at = namingUpstream(upstream);
  if (reason === "first_byte_timeout") return new HttpError(504, `the upstream did not answer within timeouts.first_byte_ms (${ctx.timeouts.firstByteMs} ms)`, "server_error", "upstream_timeout", at);
  if (reason === "idle_timeout") return new HttpError(504, `the upstream sent nothing for timeouts.idle_ms (${ctx.timeouts.idleMs} ms)`, "server_error", "upstream_idle_timeout", at);
  if (reason === "max_duration") return new HttpError(504, `the upstream did not answer within timeouts.max_stream_ms (${ctx.timeouts.maxStreamMs} ms)`, "server_error", "stream_max_duration", at);
  return new HttpError(502, `the upstream failed (${reason})`, "server_error", "upstream_error", at);
}

/**
 * An answer cut after its head came: a stream the upstream cut (or that ran
 * too long) ends with an error event its client can read; a whole answer of
 * which nothing reached the client is answered with the upstream's failure
 * (thrown, as when no answer came); a client that stopped reading, or a
 * whole answer cut midway (its JSON would be broken), loses its connection.
 */
function cutShort(ctx: ProxyContext, call: ProxyCall, run: ProxyRun, status: number, reason: ExchangeReason): ProxyOutcome {
  const { upstream, timing } = run;
  const { res, hangup } = call;
  if (hangup.aborted || reason === "client_closed") return { status, upstream, outcome: "client_closed" };
  upstream.countCut(reason === "reset" || reason === "closed" || reason === "error" ? "upstream_died" : reason);
  if (reason !== "client_stalled" && UPSTREAM_FAULTS.has(reason)) ctx.fleet.gatewayFailure(upstream, reason);
  if (timing === null && reason !== "client_stalled" && !res.destroyed && run.takeBackHead()) {
    ctx.log.warn({ request_id: call.requestId, upstream: upstream.name, reason }, "the upstream failed after its answer's head, before its body: answered with its failure, not retried");
    throw upstreamFailure(ctx, upstream, reason);
  }
  if (timing !== null && reason !== "client_stalled" && !res.destroyed && !res.writableEnded) {
    res.end(streamErrorEvent(reason, timing.atBoundary));
    ctx.log.warn({ request_id: call.requestId, upstream: upstream.name, reason }, "stream cut short: ended with an SSE error event");
  } else {
    if (!res.writableEnded) res.destroy();
    ctx.log.warn({ request_id: call.requestId, upstream: upstream.name, reason }, reason === "client_stalled" ? "the client stopped reading: its stream was cut and its upstream slot released" : "answer cut short: the client's connection was closed");
  }
  return { status, upstream, outcome: reason === "reset" || reason === "closed" || reason === "error" ? "stream_error" : reason };
}
