// A prefill server's answer, held for the gateway rather than written to the
// client: the proxy (and its delivery rule, timeouts and accounting) sends the
// prefill request as it sends any other, into this sink. It keeps at most
// `maxBytes`; past them it keeps nothing, says so, and tells its owner (who
// aborts the exchange when an answer that large cannot be a hand-over).

import type { AnswerSink } from "../proxy/exchange.js";

/** An answer captured in memory, up to a bound. */
export class CapturedAnswer implements AnswerSink {
  /** The answer's status, once its head came (0 before). */
  status = 0;
  /** Its headers as the proxy would send them to a client. */
  headers: Record<string, string | string[]> = {};
  /** Whether it was larger than the bound (its bytes were dropped). */
  overflowed = false;
  destroyed = false;
  writableEnded = false;
  readonly #maxBytes: number;
  readonly #onOverflow: () => void;
  #chunks: Buffer[] = [];
  #bytes = 0;

  /** Holds up to `maxBytes`; calls `onOverflow` once past them. */
  constructor(maxBytes: number, onOverflow: () => void) {
    this.#maxBytes = maxBytes;
    this.#onOverflow = onOverflow;
  }

  writeHead(status: number, headers: Record<string, string | string[]>): this {
    this.status = status;
    this.headers = headers;
    return this;
  }

  flushHeaders(): void {}

  write(chunk: Buffer): boolean {
    if (this.overflowed) return true;
    this.#bytes += chunk.length;
    if (this.#bytes > this.#maxBytes) {
      this.overflowed = true;
      this.#chunks = [];
      this.#onOverflow();
      return true;
    }
    this.#chunks.push(chunk);
    return true;
  }

  end(chunk?: Buffer | string): this {
    if (chunk !== undefined) this.write(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
    this.writableEnded = true;
    return this;
  }

  // Nothing drains: every write is taken at once.
  once(): this {
    return this;
  }

  off(): this {
    return this;
  }

  destroy(): this {
    this.destroyed = true;
    return this;
  }

  /** The answer's body as text (UTF-8). */
  text(): string {
    return Buffer.concat(this.#chunks).toString("utf8");
  }

  /** The answer's body. */
  body(): Buffer {
    return Buffer.concat(this.#chunks);
  }
}
