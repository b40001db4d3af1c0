// The gateway's own HTTP/1.1 client for plain-HTTP upstreams: a keep-alive
// pool of `net` sockets, one request on a connection at a time, its head and
// body in one corked write, its answer parsed by answer-parser.ts and handed
// to the same handler shape undici's dispatch API takes (so proxy/exchange.ts
// drives either). Answers are read into one buffer of the process and copied
// out (net's `onread`), not into a fresh buffer per read. It exists for cost:
// in bench/peers.bench.ts's harness a node:http relay whose upstream side was
// this design used 0.07 s of CPU per 1,000 small requests against 0.106 s for
// the same relay on undici's Pool.
//
// Delivery is exact, as the exchange needs it: `onRequestStart` runs right
// before the request's first byte is written, and a request aborted before it
// leaves its connection clean for the next one. An answer is untrusted: its
// head is bounded, its framing strict, and a connection that carried anything
// odd (extra bytes, a close-delimited body, an error) is never reused.
// https:// upstreams stay on undici (fleet/upstream.ts picks).

import { connect, type Socket } from "node:net";
import type { IncomingHttpHeaders } from "node:http";
import { AnswerParser } from "./answer-parser.js";
import { isFieldValue, isToken } from "./grammar.js";
import { Http1Error } from "./http1-error.js";
import { writeRequest, type ForwardedLines } from "./joined-write.js";
import { SlotArray, type Slotted } from "../common/slot-array.js";
import { noteReceived } from "../common/young-buffers.js";
import { READ_BUFFER } from "./read-buffer.js";

export type { ForwardedLines } from "./joined-write.js";

/** One request for {@link RequestDispatcher.dispatch}. */
export interface RequestOptions {
  readonly path: string;
  readonly method: string;
  readonly headers: Readonly<Record<string, string | string[]>>;
  readonly body?: Buffer | null | undefined;
  /**
   * Header lines passed on as they came, before `headers`' (this pool only):
   * `lines` holds each line's start and its end with its CRLF in `bytes`, two
   * numbers a line. The caller vouches for them: lines a strict parser took
   * (http1/request-head.ts), none of them framing.
   */
  readonly forward?: ForwardedLines | undefined;
}

/** What a handler may do to its request while it runs. */
export interface AnswerController {
  abort(reason: Error): void;
  pause(): void;
  resume(): void;
}

/** A request's handler: undici's DispatchHandler callbacks this client calls (each at most once, but data). */
export interface AnswerHandler {
  onRequestStart?(controller: AnswerController, context: unknown): void;
  onResponseStart?(controller: AnswerController, status: number, headers: IncomingHttpHeaders, statusMessage?: string): void;
  onResponseData?(controller: AnswerController, chunk: Buffer): void;
  onResponseEnd?(controller: AnswerController, trailers: IncomingHttpHeaders): void;
  onResponseError?(controller: AnswerController, error: Error): void;
}

/** What sends requests: this pool, or undici's (for https:// upstreams). */
export interface RequestDispatcher {
  dispatch(options: RequestOptions, handler: AnswerHandler): unknown;
}

/** A dispatcher its holder closes: this pool, or undici's. */
export interface OwnedDispatcher extends RequestDispatcher {
  /** Takes no new requests; resolves once those in flight ended. */
  close(): Promise<void>;
  /** Fails the requests in flight and closes now. */
  destroy(): Promise<void>;
}

/** How a pool connects and keeps connections. */
export interface Http1PoolOptions {
  /** Connecting at most, ms (a backstop: the exchange times connecting itself). */
  readonly connectTimeoutMs: number;
  /** An idle connection is closed after this long, ms (under the engines' own keep-alive, uvicorn's 5 s). */
  readonly keepAliveMs: number;
}


/** A request target: visible bytes only. */
const TARGET = /^[\x21-\x7e\x80-\xff]+$/;

/** Headers the pool writes itself (a caller's would duplicate or contradict them). */
const FRAMING = new Set(["host", "content-length", "transfer-encoding", "connection"]);

/** The request's head as latin1 text; throws an Http1Error for a name, value or target that would break it. */
function requestHead(options: RequestOptions, host: string, bodyLength: number): string {
  if (!isToken(options.method) || !TARGET.test(options.path)) throw new Http1Error("ADP_REQUEST_INVALID", "a request's method or target is malformed");
  let head = `${options.method} ${options.path} HTTP/1.1\r\nhost: ${host}\r\n`;
  const headers = options.headers;
  for (const name in headers) {
    const value = headers[name]!;
    if (!isToken(name)) throw new Http1Error("ADP_REQUEST_INVALID", "a request header's name is malformed");
    if (FRAMING.has(name.toLowerCase())) continue; // the pool frames the request itself: one Host, one length
    if (typeof value === "string") head += headerLine(name, value);
    else for (const v of value) head += headerLine(name, v);
  }
  return head;
}

/** The head's end: its length (a GET without a body has none) and the blank line. */
const headEnd = (method: string, bodyLength: number) => (method === "GET" && bodyLength === 0 ? "\r\n" : `content-length: ${bodyLength}\r\n\r\n`);

/** One header line; throws an Http1Error for a value that would break the head. */
function headerLine(name: string, value: string): string {
  if (!isFieldValue(value)) throw new Http1Error("ADP_REQUEST_INVALID", `request header ${name} has control characters`);
  return `${name}: ${value}\r\n`;
}

/** One request in a pool: its handler and where it is. */
class Call implements AnswerController {
  readonly handler: AnswerHandler;
  /**
   * Its head up to the lines passed on, those lines, its end and its body,
   * until they are written (then let go: nothing reads them again, and a
   * request in flight should not keep them through the engine's answer).
   */
  head: string;
  forward: ForwardedLines | null;
  end: string;
  body: Buffer | null;
  connection: Connection | null = null;
  /** Whether its first byte was written. */
  written = false;
  /** Whether its handler heard its end, error or abort (nothing more is said to it). */
  ended = false;

  constructor(handler: AnswerHandler, head: string, forward: ForwardedLines | null, end: string, body: Buffer | null) {
    this.handler = handler;
    this.head = head;
    this.forward = forward;
    this.end = end;
    this.body = body;
  }

  abort(reason: Error): void {
    if (this.ended) return;
    if (this.connection !== null) this.connection.abort(this, reason);
    else this.fail(reason);
  }

  pause(): void {
    if (!this.ended) this.connection?.pause();
  }

  resume(): void {
    if (!this.ended) this.connection?.resume();
  }

  /** Tells the handler it failed, once. */
  fail(error: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.handler.onResponseError?.(this, error);
  }
}

/** One socket to the upstream, carrying one request at a time. */
class Connection implements Slotted {
  readonly #pool: Http1Pool;
  /** Its slot among the pool's connections (SlotArray keeps it). */
  slotIndex = -1;
  readonly socket: Socket;
  readonly #parser: AnswerParser;
  #connected = false;
  #call: Call | null = null;
  /** Whether the current call's bytes were all handed to the kernel (a connection with some still queued is not reused). */
  #flushed = false;
  /** Why the socket failed (its 'close' follows). */
  #error: Error | null = null;
  /** Whether the socket closed while bytes it read were still held for a paused handler. */
  #closedBehind = false;
  /** Bytes read but not yet parsed (the handler paused), and where they start. */
  #pending: Buffer | null = null;
  #pendingAt = 0;
  /** Whether a resume's parse is queued. */
  #resuming = false;
  /** When it last became idle (performance.now()). */
  idleSince = 0;
  /** The call whose bytes were written last (its write's callback marks the connection flushed while it is still the current call). */
  #writing: Call | null = null;
  readonly #onFlushed = () => {
    if (this.#writing === this.#call) this.#flushed = true;
  };

  constructor(pool: Http1Pool, host: string, port: number, connectTimeoutMs: number) {
    this.#pool = pool;
    this.#parser = new AnswerParser({
      head: (status, headers) => {
        const call = this.#call!;
        if (status >= 200) call.handler.onResponseStart?.(call, status, headers);
      },
      data: (chunk) => {
        const call = this.#call!;
        call.handler.onResponseData?.(call, chunk);
      },
    });
    // Read into the process's one read buffer (read-buffer.ts) and copied out at once (`onread`): a small
    // answer's bytes then come from Buffer's shared slab, not a 64 KiB allocation shrunk to size per read
    // (wrk against bench:peers' engines, 3 pairs: 67-72 against 70-88 µs of CPU per small request).
    this.socket = connect({ host, port, noDelay: true, onread: { buffer: READ_BUFFER, callback: this.#onRead } });
    this.socket.setTimeout(connectTimeoutMs, () => {
      if (!this.#connected) this.socket.destroy(new Http1Error("UND_ERR_CONNECT_TIMEOUT", `connecting took over ${connectTimeoutMs} ms`));
    });
    this.socket.once("connect", () => {
      this.#connected = true;
      this.socket.setTimeout(0);
      if (this.#call !== null) this.#write(this.#call);
      else this.#pool.release(this);
    });
    this.socket.on("error", (e: Error) => (this.#error ??= e));
    this.socket.once("close", () => this.#onClose());
  }

  /** Lets go of the current call: nothing of a finished request stays reachable from its connection (an idle one would keep its whole request alive into the old generation). */
  #clear(): void {
    this.#call = null;
    this.#writing = null;
  }

  /** Takes `call`: writes it now when connected, else once connected. */
  start(call: Call): void {
    this.#call = call;
    call.connection = this;
    if (this.#connected) this.#write(call);
  }

  /** Writes `call`'s head and body in one go, right after telling its handler. */
  #write(call: Call): void {
    call.handler.onRequestStart?.(call, null);
    if (call.ended) return; // aborted as it started: nothing written (abort() released the connection)
    call.written = true;
    this.#flushed = false;
    this.#writing = call;
    const { head, forward, end, body } = call;
    call.head = call.end = "";
    call.forward = null;
    call.body = null;
    writeRequest(this.socket, head, forward, end, body, this.#onFlushed);
  }

  /** `onread`'s callback: the `n` bytes read into READ_BUFFER, copied before anything else can read into it (true: go on reading). */
  readonly #onRead = (n: number): boolean => {
    noteReceived(n);
    this.#onData(Buffer.from(READ_BUFFER.subarray(0, n)));
    return true;
  };

  #onData(d: Buffer): void {
    const call = this.#call;
    // Bytes with no request waiting for them: the connection is out of step, never reused.
    if (call === null || !call.written) return void this.socket.destroy();
    this.#parse(call, d, 0);
  }

  /** Parses `d` from `from` for `call`; holds what is left when the handler paused. */
  #parse(call: Call, d: Buffer, from: number): void {
    let at: number;
    try {
      at = this.#parser.execute(d, from);
    } catch (error) {
      this.#clear();
      this.socket.destroy();
      call.fail(error as Error);
      return;
    }
    if (call.ended) return; // aborted from a callback
    if (this.#parser.done) return this.#finish(call, at < d.length);
    if (this.#parser.paused) {
      this.#pending = d;
      this.#pendingAt = at;
      this.socket.pause();
    }
  }

  /** Ends `call` whole; the connection goes back to the pool when nothing about it is odd. */
  #finish(call: Call, extraBytes: boolean): void {
    // Not reused: after bytes past the answer, a close-delimited body or Connection: close, a socket that is
    // closing, or while the request's body is still queued (an early answer: its rest would read as the next request).
    const reusable = this.#parser.reusable && !extraBytes && this.#flushed && !this.#closedBehind && !this.socket.destroyed;
    this.#clear();
    this.#pending = null;
    this.#parser.reset();
    if (reusable) this.#pool.release(this);
    else this.socket.destroy();
    call.ended = true;
    call.handler.onResponseEnd?.(call, {});
  }

  pause(): void {
    this.#parser.pause();
    this.socket.pause();
  }

  resume(): void {
    if (!this.#parser.paused) return;
    this.#parser.resume();
    if (this.#resuming) return;
    this.#resuming = true;
    // Parsed on a microtask: resume() may come from inside the handler's own callback.
    queueMicrotask(() => {
      this.#resuming = false;
      if (this.#parser.paused) return; // paused again before this ran: the held bytes stay held
      const call = this.#call;
      const pending = this.#pending;
      this.#pending = null;
      if (call !== null && pending !== null) this.#parse(call, pending, this.#pendingAt);
      if (this.#parser.paused || this.#pending !== null) return;
      if (this.#closedBehind) this.#settleClosed();
      else this.socket.resume();
    });
  }

  /** Aborts `call`: a request never written leaves the connection clean; one written closes it. */
  abort(call: Call, reason: Error): void {
    if (this.#call !== call) return call.fail(reason);
    this.#clear();
    this.#pending = null;
    if (!call.written && this.#connected && !this.socket.destroyed) {
      this.#parser.reset();
      this.#pool.release(this);
    } else {
      this.#parser.pause(); // no part of an answer already read reaches the handler
      this.socket.destroy();
    }
    call.fail(reason);
  }

  /** The socket closed; what was read and held for a paused handler is handed over first. */
  #onClose(): void {
    this.#pool.forget(this);
    const call = this.#call;
    if (call === null || call.ended) return this.#clear();
    if (this.#error === null && call.written && (this.#pending !== null || this.#parser.paused)) {
      this.#closedBehind = true; // settled once the handler resumes and the held bytes are parsed
      return;
    }
    this.#settleClosed();
  }

  /** After the close: a close-delimited answer ends here, any other call in flight fails. */
  #settleClosed(): void {
    const call = this.#call;
    this.#clear();
    if (call === null || call.ended) return;
    if (this.#error === null && call.written && this.#parser.closeDelimited) {
      call.ended = true;
      call.handler.onResponseEnd?.(call, {});
      return;
    }
    call.fail(this.#error ?? new Http1Error("ADP_UPSTREAM_CLOSED", "the upstream closed the connection before its answer ended"));
  }

  /** Whether it holds a request. */
  get busy(): boolean {
    return this.#call !== null;
  }
}

/** A keep-alive pool of HTTP/1.1 connections to one upstream (host and port of a plain http:// origin). */
export class Http1Pool implements RequestDispatcher {
  readonly #host: string;
  readonly #port: number;
  readonly #hostHeader: string;
  readonly #options: Http1PoolOptions;
  /** Connected and waiting, the most recently used last. */
  readonly #idle: Connection[] = [];
  /** Every connection open (a SlotArray, not a Set: upstream connections that close churn it; common/slot-array.ts). */
  readonly #all = new SlotArray<Connection>();
  #closed = false;
  /** Resolves once the last connection closed, after close(). */
  #closing: Promise<void> | null = null;
  #drained: (() => void) | null = null;
  #sweep: NodeJS.Timeout | null = null;

  constructor(origin: string, options: Http1PoolOptions) {
    const url = new URL(origin);
    if (url.protocol !== "http:") throw new TypeError(`Http1Pool speaks plain HTTP only, not ${url.protocol}`);
    this.#host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    this.#port = url.port === "" ? 80 : Number(url.port);
    this.#hostHeader = url.host;
    this.#options = options;
  }

  /** Sends one request; its handler hears how it goes (an error at once when the pool is closed or the request malformed). */
  dispatch(options: RequestOptions, handler: AnswerHandler): boolean {
    const body = options.body ?? null;
    let head: string;
    try {
      if (this.#closed) throw new Http1Error("ADP_POOL_CLOSED", "the upstream's connection pool is closed");
      head = requestHead(options, this.#hostHeader, body === null ? 0 : body.length);
    } catch (error) {
      new Call(handler, "", null, "", null).fail(error as Error);
      return false;
    }
    const call = new Call(handler, head, options.forward ?? null, headEnd(options.method, body === null ? 0 : body.length), body);
    (this.#take() ?? this.#open()).start(call);
    return true;
  }

  /** The most recently idle connection still usable, if any. */
  #take(): Connection | null {
    const now = performance.now();
    for (let c = this.#idle.pop(); c !== undefined; c = this.#idle.pop()) {
      // One the upstream has closed (its FIN read) or kept too long is not used again.
      if (c.socket.writable && !c.socket.readableEnded && now - c.idleSince < this.#options.keepAliveMs) return c;
      c.socket.destroy();
    }
    return null;
  }

  #open(): Connection {
    const c = new Connection(this, this.#host, this.#port, this.#options.connectTimeoutMs);
    this.#all.add(c);
    return c;
  }

  /** Takes back a connection between requests (closed instead when the pool is). @internal */
  release(c: Connection): void {
    if (this.#closed) return void c.socket.destroy();
    if (c.socket.isPaused()) c.socket.resume(); // its last handler paused it: the next request's answer must flow
    c.idleSince = performance.now();
    this.#idle.push(c);
    // One timer per pool closes what stayed idle too long (never holding the process open).
    this.#sweep ??= setInterval(() => this.#closeStale(), Math.max(250, this.#options.keepAliveMs / 4)).unref();
  }

  /** Drops a connection whose socket closed. @internal */
  forget(c: Connection): void {
    this.#all.delete(c);
    const i = this.#idle.indexOf(c);
    if (i >= 0) this.#idle.splice(i, 1);
    if (this.#all.size === 0) this.#drained?.();
  }

  #closeStale(): void {
    const now = performance.now();
    for (const c of [...this.#idle]) if (now - c.idleSince >= this.#options.keepAliveMs) c.socket.destroy();
    if (this.#idle.length === 0 && this.#sweep !== null) {
      clearInterval(this.#sweep);
      this.#sweep = null;
    }
  }

  /** How many connections it holds, and how many of them are idle. */
  get connections(): { open: number; idle: number } {
    return { open: this.#all.size, idle: this.#idle.length };
  }

  /** Takes no new requests, closes idle connections now and the others once their answers end. */
  close(): Promise<void> {
    if (this.#closing !== null) return this.#closing; // one promise for every caller
    this.#closed = true;
    if (this.#sweep !== null) clearInterval(this.#sweep);
    this.#sweep = null;
    this.#closing = this.#all.size === 0 ? Promise.resolve() : new Promise((resolve) => (this.#drained = resolve));
    for (const c of this.#idle.splice(0)) c.socket.destroy();
    for (const c of this.#all.toArray()) if (!c.busy) c.socket.destroy();
    return this.#closing;
  }

  /** Closes every connection now: requests in flight fail. */
  destroy(): Promise<void> {
    const done = this.close();
    for (const c of this.#all.toArray()) c.socket.destroy(new Http1Error("ADP_POOL_CLOSED", "the upstream's connection pool was destroyed"));
    return done;
  }
}
