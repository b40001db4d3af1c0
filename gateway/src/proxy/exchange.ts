// One proxied request to an upstream, on a dispatch API (the gateway's own
// HTTP/1.1 client, http1/, for http:// upstreams; undici's for https://; both
// take the same handler): the answer's head and body chunks go straight from
// the client's parser to the client's response, with backpressure both ways
// and no stream in between (undici's `request()` wraps each answer in a
// Readable). Measured side by side in
// bench:serve's harness, a pass-through proxy built this way (and reading the
// client's body with events) used 0.73-0.78x the CPU per request of one built
// on `request()` and async iteration.
//
// The exchange keeps its own deadlines (undici's timers tick once a second and
// fired up to half a second late): the connection (`connect_ms`), the first
// byte (`first_byte_ms`, from sending to the answer's head), idleness
// (`idle_ms`: no chunk from the upstream and none taken by a client that
// stopped reading) and the whole exchange (`max_stream_ms`). One sweep checks
// every exchange in flight (deadlines.ts), as node:http checks its servers'
// timeouts, in place of a timer or three per request. It also knows whether
// the request was provably never delivered: either client starts writing a
// request only once a connection is up, and says so (`onRequestStart`) right
// before its first byte, so a failure before that is one the upstream never saw.
//
// One object per exchange (its handler and its deadline), which tells its
// listener how it ended (no promise: proxy.ts's call object hears it): a
// proxied request allocates little, which is most of what it costs.

import type { IncomingHttpHeaders } from "node:http";
import type { AnswerController, AnswerHandler, ForwardedLines, RequestDispatcher } from "../http1/http1-pool.js";
import type { Hangup } from "../fleet/hangup.js";
import { ExchangeError, reasonOf, type ExchangeReason } from "../fleet/upstream-errors.js";
import { Deadlines, type Expiring } from "./deadlines.js";

/**
 * Where an answer goes: the client's response (a ServerResponse), or a
 * buffer that holds it for the gateway (a prefill server's answer, which the
 * gateway reads before the decode request goes out).
 */
export interface AnswerSink {
  writeHead(status: number, headers: Record<string, string | string[]>): unknown;
  flushHeaders(): void;
  write(chunk: Buffer): boolean;
  end(chunk?: Buffer | string): unknown;
  once(event: "drain", listener: () => void): unknown;
  off(event: "drain", listener: () => void): unknown;
  destroy(): unknown;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
}

/** What sending one request needs. */
export interface ExchangeOptions {
  readonly path: string;
  readonly headers: Record<string, string | string[]>;
  /** The client's header lines passed on as they came, before `headers` (the own pool only); null: `headers` are all. */
  readonly forward: ForwardedLines | null;
  readonly body: Buffer;
  /** The client's hang-up: it aborts the exchange whenever it comes. */
  readonly hangup: Hangup;
  /** From sending until a connection is up and the request's first byte goes out, ms (then it was never delivered). */
  readonly connectMs: number;
  /** From sending to the answer's head at most, ms. */
  readonly firstByteMs: number;
  /** No progress in either direction at most, ms. */
  readonly idleMs: number;
  /** The whole exchange at most, ms; 0: no bound. */
  readonly maxMs: number;
}

/** What an exchange tells its caller as the answer comes. */
export interface ExchangeListener {
  /** The request's first byte goes out (from then on the upstream may have it). */
  written(): void;
  /** The answer's final head (1xx heads are skipped): it writes the client's head; a throw ends the exchange (invalid_answer). */
  head(status: number, headers: IncomingHttpHeaders): void;
  /** A body chunk: what it returns is written to the client in its place (SSE framing, token timing). */
  data(chunk: Buffer): Buffer;
  /** The answer ended: what it returns (bytes `data` held back) is written before the end. */
  end(): Buffer | null;
  /** The exchange is over (called once, last): the answer went through whole, or what cut it. */
  settled(result: ExchangeResult): void;
}

/** How an exchange ended: the answer's status (0: no answer came, nothing was written to the client) and what cut it (null: whole). */
export interface ExchangeResult {
  readonly status: number;
  readonly error: ExchangeError | null;
}

/** Every exchange in flight, their deadlines checked by one sweep. */
const deadlines = new Deadlines<UpstreamExchange>();

/** One request to an upstream and its answer relayed into the sink. */
class UpstreamExchange implements AnswerHandler, Expiring {
  readonly #res: AnswerSink;
  /** The options' few that matter once it is sent (not the options: their headers and body need not live as long). */
  readonly #hangup: Hangup;
  readonly #firstByteMs: number;
  readonly #idleMs: number;
  readonly #listener: ExchangeListener;
  #controller: AnswerController | null = null;
  /** Whether the client began writing the request (the upstream may have it from then on). */
  #written = false;
  /** The answer's status, once its head came (0 before). */
  #status = 0;
  #finished = false;
  /** Whether the client's response is full and the upstream paused until it drains. */
  #paused = false;
  /** The reason our own abort gave (a deadline or the client), read when the client reports the abort. */
  #cut: ExchangeReason | null = null;
  /** When it was sent (performance.now()). */
  readonly #sentAt: number;
  /** The deadline now (performance.now()), and what passing it means. */
  dueAt: number;
  /** Its slot among the deadlines swept (Deadlines keeps it). */
  slotIndex = -1;
  #due: "connect" | "first_byte" | "idle";
  /** When the whole exchange must end (Infinity: no bound). */
  readonly #maxAt: number;
  readonly #onHangup = () => this.#abort("client_closed");
  /** Resumes the upstream once a stalled client drained (made the first time a client stalls: most never do). */
  #onDrain: (() => void) | null = null;

  constructor(res: AnswerSink, options: ExchangeOptions, listener: ExchangeListener) {
    this.#res = res;
    this.#hangup = options.hangup;
    this.#firstByteMs = options.firstByteMs;
    this.#idleMs = options.idleMs;
    this.#listener = listener;
    const now = performance.now();
    this.#sentAt = now;
    const connecting = options.connectMs < options.firstByteMs;
    this.#due = connecting ? "connect" : "first_byte";
    this.dueAt = now + (connecting ? options.connectMs : options.firstByteMs);
    this.#maxAt = options.maxMs > 0 ? now + options.maxMs : Infinity;
    if (this.#maxAt < this.dueAt) this.dueAt = this.#maxAt;
    options.hangup.once("abort", this.#onHangup);
    deadlines.add(this, Math.min(options.connectMs, options.firstByteMs, options.idleMs, options.maxMs > 0 ? options.maxMs : Infinity));
  }

  /** Past a deadline at `now`: aborted with what that deadline means. */
  expire(now: number): void {
    if (now >= this.#maxAt) return this.#abort("max_duration");
    if (now < this.dueAt) return;
    this.#abort(this.#due === "connect" ? "connect_timeout" : this.#due === "first_byte" ? "first_byte_timeout" : this.#paused ? "client_stalled" : "idle_timeout");
  }

  /** Sets the next deadline, `ms` from now (never past the whole exchange's). */
  #dueIn(ms: number, due: "first_byte" | "idle", from = performance.now()): void {
    this.#due = due;
    this.dueAt = Math.min(from + ms, this.#maxAt);
  }

  #abort(reason: ExchangeReason): void {
    this.#cut ??= reason;
    if (this.#controller !== null) this.#controller.abort(new ExchangeError(reason, this.#written));
    else this.#finish(new ExchangeError(reason, false)); // still waiting for a connection: nothing was written, and onRequestStart stops it
  }

  #finish(error?: Error): void {
    if (this.#finished) return;
    this.#finished = true;
    deadlines.delete(this);
    this.#hangup.off("abort", this.#onHangup);
    if (this.#onDrain !== null) this.#res.off("drain", this.#onDrain);
    if (error === undefined) return this.#listener.settled({ status: this.#status, error: null });
    // undici's own timers are off (the pool's are 0), so its errors are the connection's.
    const reason = reasonOf(error);
    const failure = error instanceof ExchangeError ? error : new ExchangeError(this.#cut ?? (reason === "timeout" ? "error" : reason), this.#written, { cause: error });
    this.#listener.settled({ status: this.#status, error: failure });
  }

  onRequestStart(c: AnswerController): void {
    this.#controller = c;
    // Aborted while it waited for a connection (a deadline, the client): stopped here, before its first byte.
    if (this.#cut !== null || this.#hangup.aborted) {
      c.abort(new ExchangeError(this.#cut ?? "client_closed", false));
      return;
    }
    this.#written = true;
    this.#listener.written();
    if (this.#due === "connect") this.#dueIn(this.#firstByteMs, "first_byte", this.#sentAt);
  }

  onResponseStart(c: AnswerController, status: number, headers: IncomingHttpHeaders): void {
    if (status < 200 || this.#status !== 0) return; // an informational head: the final one follows
    // A status HTTP does not have is no answer to pass on (the client gets a 502).
    if (status > 599) return void c.abort(new ExchangeError("invalid_answer", true));
    try {
      this.#listener.head(status, headers);
    } catch (error) {
      // Writing the client's head failed (a header value Node refuses): nothing went out; the exchange ends here.
      return void c.abort(new ExchangeError("invalid_answer", true, { cause: error }));
    }
    this.#status = status;
    this.#dueIn(this.#idleMs, "idle");
  }

  onResponseData(c: AnswerController, chunk: Buffer): void {
    this.#dueIn(this.#idleMs, "idle");
    const out = this.#listener.data(chunk);
    if (out.length > 0 && !this.#res.write(out)) {
      this.#paused = true;
      c.pause();
      this.#res.once("drain", (this.#onDrain ??= () => this.#drained()));
    }
  }

  /** The stalled client drained: the upstream goes on. */
  #drained(): void {
    this.#paused = false;
    this.dueAt = performance.now() + this.#idleMs;
    this.#controller?.resume();
  }

  onResponseEnd(): void {
    const rest = this.#listener.end();
    if (rest !== null) this.#res.end(rest);
    else this.#res.end();
    this.#finish();
  }

  onResponseError(_c: AnswerController, error: Error): void {
    this.#finish(error);
  }
}

/**
 * Sends one POST over `dispatcher` and relays its answer into `res`; tells
 * `listener` once it is over (`settled`): with the answer's status and null
 * when the answer went through whole, with the ExchangeError that cut it
 * otherwise (status 0: no answer came, nothing was written to the client).
 */
export function exchange(dispatcher: RequestDispatcher, res: AnswerSink, options: ExchangeOptions, listener: ExchangeListener): void {
  const handler = new UpstreamExchange(res, options, listener);
  const forward = options.forward;
  dispatcher.dispatch(forward === null ? { path: options.path, method: "POST", headers: options.headers, body: options.body } : { path: options.path, method: "POST", headers: options.headers, body: options.body, forward }, handler);
}
