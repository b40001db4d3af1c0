// A control request (a health check, a model list, a load scrape, a KV-event
// poll) sent over any dispatcher, the gateway's own pool or undici's, its
// answer read whole into memory under a bound. It exists so that a gateway
// whose upstreams are all http:// never loads undici (19.7 MiB of a bare
// process's RSS, 6 MiB of V8 heap for every mark-compact to walk), and so the
// gateway has one bounded reader of answers rather than one per caller. An
// answer is untrusted: a declared length past the bound is refused before a
// byte of its body is read, a body that runs past it is cut at the bound, and
// either way the request is aborted, so its connection is never reused.

import type { IncomingHttpHeaders } from "node:http";
import type { AnswerController, AnswerHandler, RequestDispatcher } from "./http1-pool.js";
import { lengthOf } from "./grammar.js";

/** A body's first buffer, at most (then doubled as more arrives). */
const FIRST_BYTES = 64 * 1024;

/** One control request. */
export interface ControlRequestOptions {
  /** The upstream's origin (undici's Agent needs it; a pool ignores it). */
  readonly origin?: string;
  readonly path: string;
  readonly method: "GET" | "POST";
  readonly headers: Readonly<Record<string, string>>;
  /** Aborting it fails the request with the signal's reason (a timeout's is a `TimeoutError`). */
  readonly signal?: AbortSignal;
  /** The most bytes of body read; past it the request fails with {@link AnswerTooLargeError}. */
  readonly maxBytes: number;
  /**
   * Whether the caller reads the body of an answer with this status (default:
   * always). One it does not read resolves with an empty body whatever its
   * length: its bytes are not kept, and past `maxBytes` its connection is closed.
   */
  readonly readsBody?: (statusCode: number) => boolean;
}

/** A control request's answer, read whole. */
export interface ControlAnswer {
  readonly statusCode: number;
  readonly headers: IncomingHttpHeaders;
  /** The body's bytes, in memory of their own (never Buffer's shared slab nor a socket's read: a caller may transfer them to a worker). */
  readonly body: Buffer;
}

/** An answer whose body is over the bound: `declared` is its Content-Length when that said so, else null (it ran past while read). */
export class AnswerTooLargeError extends Error {
  readonly code = "ADP_ANSWER_TOO_LARGE";
  constructor(
    /** The answer's status. */
    readonly statusCode: number,
    readonly limit: number,
    readonly declared: number | null,
  ) {
    super(declared === null ? `the answer's body runs past ${limit} bytes` : `the answer declares ${declared} bytes, over ${limit}`);
    this.name = "AnswerTooLargeError";
  }
}

/** Sends `options` over `dispatcher` and reads its answer whole; rejects with the transport's error, the signal's reason or an AnswerTooLargeError. */
export function controlRequest(dispatcher: RequestDispatcher, options: ControlRequestOptions): Promise<ControlAnswer> {
  return new Promise<ControlAnswer>((resolve, reject) => {
    const call = new ControlCall(options.maxBytes, options.readsBody ?? null, options.signal ?? null, resolve, reject);
    if (call.settled) return;
    try {
      const request = { path: options.path, method: options.method, headers: options.headers, ...(options.origin === undefined ? {} : { origin: options.origin }) };
      dispatcher.dispatch(request, call);
    } catch (error) {
      call.onResponseError(null, error as Error);
    }
  });
}

/** One control request's handler: gathers the body under the bound and settles once. */
class ControlCall implements AnswerHandler {
  readonly #maxBytes: number;
  readonly #readsBody: ((statusCode: number) => boolean) | null;
  readonly #signal: AbortSignal | null;
  readonly #resolve: (answer: ControlAnswer) => void;
  readonly #reject: (error: unknown) => void;
  /** The request's controller, once the dispatcher started it. */
  #controller: AnswerController | null = null;
  #statusCode = 0;
  #headers: IncomingHttpHeaders = {};
  /** The body so far: `#size` bytes of `#buffer` (grown by doubling as bytes arrive, up to `#cap`). */
  #buffer: Buffer | null = null;
  #size = 0;
  /** The most the body may take: its declared length, else the bound. */
  #cap = 0;
  /** Whether the body is kept (else only counted, and the answer resolves without it). */
  #keep = true;
  settled = false;
  readonly #onAbort = () => this.#fail(this.#signal!.reason);

  constructor(maxBytes: number, readsBody: ((statusCode: number) => boolean) | null, signal: AbortSignal | null, resolve: (answer: ControlAnswer) => void, reject: (error: unknown) => void) {
    this.#maxBytes = maxBytes;
    this.#readsBody = readsBody;
    this.#signal = signal;
    this.#resolve = resolve;
    this.#reject = reject;
    if (signal === null) return;
    if (signal.aborted) this.#fail(signal.reason);
    else signal.addEventListener("abort", this.#onAbort, { once: true });
  }

  onRequestStart(controller: AnswerController): void {
    this.#controller = controller;
    // Failed before it started (aborted while connecting): it is not sent.
    if (this.settled) controller.abort(new Error("the control request was abandoned"));
  }

  onResponseStart(controller: AnswerController, statusCode: number, headers: IncomingHttpHeaders): void {
    this.#controller = controller;
    this.#statusCode = statusCode;
    this.#headers = headers;
    // Its first value (absent, or not 1 to 15 digits: no length declared).
    const value = headers["content-length"];
    const text = Array.isArray(value) ? value[0] : value;
    const length = text === undefined ? -1 : lengthOf(text);
    const declared = length < 0 ? null : length;
    this.#keep = this.#readsBody === null || this.#readsBody(statusCode);
    if (declared !== null && declared > this.#maxBytes) return this.#overBound(declared);
    // What the body may grow to: its declared length, else the bound. Memory is taken as bytes
    // arrive (a declared length is the upstream's word, not bytes it sent).
    this.#cap = declared ?? this.#maxBytes;
  }

  onResponseData(_controller: AnswerController, chunk: Buffer): void {
    if (this.settled) return;
    const size = this.#size + chunk.length;
    if (size > this.#maxBytes) return this.#overBound(null);
    if (!this.#keep) {
      this.#size = size;
      return;
    }
    let buffer = this.#buffer;
    if (buffer === null || size > buffer.length) {
      // Doubling from FIRST_BYTES, never past the cap, so a body of its declared length fills its buffer exactly.
      const grown = Buffer.allocUnsafeSlow(Math.max(size, Math.min(this.#cap, Math.max(FIRST_BYTES, 2 * (buffer?.length ?? 0)))));
      buffer?.copy(grown, 0, 0, this.#size);
      buffer = grown;
    }
    chunk.copy(buffer, this.#size);
    this.#buffer = buffer;
    this.#size = size;
  }

  onResponseEnd(): void {
    if (this.settled) return;
    this.#settle();
    const buffer = this.#buffer;
    const size = this.#keep ? this.#size : 0;
    // Exact memory: a buffer the body fills is the body; else its bytes are copied (an answer kept in a cache keeps no slack).
    const body = buffer !== null && size === buffer.length ? buffer : Buffer.allocUnsafeSlow(size);
    if (body !== buffer && size > 0) buffer!.copy(body, 0, 0, size);
    this.#resolve({ statusCode: this.#statusCode, headers: this.#headers, body });
  }

  onResponseError(_controller: AnswerController | null, error: Error): void {
    if (this.settled) return;
    this.#settle();
    this.#reject(error);
  }

  /**
   * A body past the bound (`declared` long, or null: it ran past while read):
   * one the caller reads fails the request; one it does not resolves it as it
   * is, without its body. Either way the request is aborted, so its connection
   * is not reused.
   */
  #overBound(declared: number | null): void {
    if (this.#keep) return this.#fail(new AnswerTooLargeError(this.#statusCode, this.#maxBytes, declared));
    this.#settle();
    this.#resolve({ statusCode: this.#statusCode, headers: this.#headers, body: Buffer.alloc(0) });
    this.#controller?.abort(new Error("the answer's unread body runs past the bound"));
  }

  /** Fails the request with `error`: aborts it (its connection is then not reused) and rejects. */
  #fail(error: unknown): void {
    if (this.settled) return;
    this.#settle();
    this.#reject(error);
    this.#controller?.abort(error instanceof Error ? error : new Error(String(error)));
  }

  #settle(): void {
    this.settled = true;
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }
}
