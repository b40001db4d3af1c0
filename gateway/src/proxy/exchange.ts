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
// The exchange keeps its own timers (undici's tick once a second and fired up
// to half a second late): the first byte (`first_byte_ms`, from sending to the
// answer's head), idleness (`idle_ms`: no chunk from the upstream and none
// taken by a client that stopped reading) and the whole exchange
// (`max_stream_ms`). It also knows whether the request was provably never
// delivered: either client starts writing a request only once a connection is
// up, and says so (`onRequestStart`) right before its first byte, so a failure
// before that is one the upstream never saw.

import type { IncomingHttpHeaders } from "node:http";
import type { AnswerController, AnswerHandler, RequestDispatcher } from "../http1/http1-pool.js";
import type { Hangup } from "../fleet/scheduler.js";
import { ExchangeError, reasonOf, type ExchangeReason } from "../fleet/upstream-errors.js";

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
  /** Called once with the answer's final head (1xx heads are skipped); it writes the client's head. */
  readonly onHead: (status: number, headers: IncomingHttpHeaders) => void;
  /** Called with each body chunk; what it returns is written to the client in its place (SSE framing, token timing). */
  readonly onData?: ((chunk: Buffer) => Buffer) | undefined;
  /** Called once the answer ended: what it returns (bytes `onData` held back) is written before the end. */
  readonly onEnd?: (() => Buffer | null) | undefined;
  /** Called once, as the request's first byte goes out (from then on the upstream may have it). */
  readonly onWritten?: (() => void) | undefined;
}

/** A sent request: `head` settles with the answer's status, or with the error that came before any answer; `end` once the body is through. */
export interface Exchange {
  /** Resolves with the status once `onHead` ran; rejects with an ExchangeError when no answer came (nothing was written to the client). */
  readonly head: Promise<number>;
  /** Resolves once the whole body reached the client's response; rejects with an ExchangeError saying what cut it. */
  readonly end: Promise<void>;
}

/** Sends one POST over `dispatcher` and relays its answer into `res`. */
export function exchange(dispatcher: RequestDispatcher, res: AnswerSink, options: ExchangeOptions): Exchange {
  let settleHead!: { resolve: (status: number) => void; reject: (error: Error) => void };
  let settleEnd!: { resolve: () => void; reject: (error: Error) => void };
  const head = new Promise<number>((resolve, reject) => (settleHead = { resolve, reject }));
  const end = new Promise<void>((resolve, reject) => (settleEnd = { resolve, reject }));
  end.catch(() => {}); // awaited only once a head came; an exchange that never had one leaves it pending, never unhandled
  let controller: AnswerController | null = null;
  /** Whether the client began writing the request (the upstream may have it from then on). */
  let written = false;
  let answered = false;
  let finished = false;
  /** Whether the client's response is full and the upstream paused until it drains. */
  let paused = false;
  /** The reason our own abort gave (a timer or the client), read when the client reports the abort. */
  let cut: ExchangeReason | null = null;
  const hangup = options.hangup;
  const abort = (reason: ExchangeReason) => {
    cut ??= reason;
    if (controller !== null) controller.abort(new ExchangeError(reason, written));
    else finish(new ExchangeError(reason, false)); // still waiting for a connection: nothing was written, and onRequestStart stops it
  };
  const onHangup = () => abort("client_closed");
  const onDrain = () => {
    paused = false;
    timer?.refresh();
    controller?.resume();
  };
  // One timer at a time: the connection's (until the client starts writing), then the first byte's (from sending), then
  // (from the head on) idleness, refreshed on every chunk and drain. undici's own connect timeout ticks every
  // half second; it is left as a backstop past this one.
  const sentAt = performance.now();
  let timer: NodeJS.Timeout | null = options.connectMs < options.firstByteMs ? setTimeout(() => abort("connect_timeout"), options.connectMs) : setTimeout(() => abort("first_byte_timeout"), options.firstByteMs);
  let connecting = options.connectMs < options.firstByteMs;
  const longest = options.maxMs > 0 ? setTimeout(() => abort("max_duration"), options.maxMs) : null;
  const finish = (error?: Error) => {
    if (finished) return;
    finished = true;
    if (timer !== null) clearTimeout(timer);
    if (longest !== null) clearTimeout(longest);
    hangup.off("abort", onHangup);
    res.off("drain", onDrain);
    if (error === undefined) settleEnd.resolve();
    else {
      // undici's own timers are off (the pool's are 0), so its errors are the connection's.
      const reason = reasonOf(error);
      const failure = error instanceof ExchangeError ? error : new ExchangeError(cut ?? (reason === "timeout" ? "error" : reason), written, { cause: error });
      if (answered) settleEnd.reject(failure);
      else settleHead.reject(failure);
    }
  };
  hangup.once("abort", onHangup);
  const handler: AnswerHandler = {
    onRequestStart(c) {
      controller = c;
      // Aborted while it waited for a connection (a timer, the client): stopped here, before its first byte.
      if (cut !== null || hangup.aborted) {
        c.abort(new ExchangeError(cut ?? "client_closed", false));
        return;
      }
      written = true;
      options.onWritten?.();
      if (connecting) {
        connecting = false;
        clearTimeout(timer!);
        timer = setTimeout(() => abort("first_byte_timeout"), Math.max(0, options.firstByteMs - (performance.now() - sentAt)));
      }
    },
    onResponseStart(c, status, headers) {
      if (status < 200 || answered) return; // an informational head: the final one follows
      // A status HTTP does not have is no answer to pass on (the client gets a 502).
      if (status > 599) return void c.abort(new ExchangeError("invalid_answer", true));
      try {
        options.onHead(status, headers);
      } catch (error) {
        // Writing the client's head failed (a header value Node refuses): nothing went out; the exchange ends here.
        return void c.abort(new ExchangeError("invalid_answer", true, { cause: error }));
      }
      answered = true;
      clearTimeout(timer!);
      timer = setTimeout(() => abort(paused ? "client_stalled" : "idle_timeout"), options.idleMs);
      settleHead.resolve(status);
    },
    onResponseData(c, chunk) {
      timer?.refresh();
      const out = options.onData === undefined ? chunk : options.onData(chunk);
      if (out.length > 0 && !res.write(out)) {
        paused = true;
        c.pause();
        res.once("drain", onDrain);
      }
    },
    onResponseEnd() {
      const rest = options.onEnd?.() ?? null;
      if (rest !== null) res.end(rest);
      else res.end();
      finish();
    },
    onResponseError(_c, error) {
      finish(error);
    },
  };
  dispatcher.dispatch({ path: options.path, method: "POST", headers: options.headers, body: options.body }, handler);
  return { head, end };
}
