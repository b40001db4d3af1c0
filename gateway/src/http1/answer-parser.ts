// An upstream's HTTP/1.1 answer, parsed incrementally from the bytes its
// connection delivers: the status line and headers (bounded, strict: CRLF
// only, no obs-fold, token names, one framing), then the body as
// Content-Length, chunked (decoded; trailers read and dropped) or
// close-delimited bytes, 1xx heads skipped. An upstream is untrusted: anything
// outside that grammar is an Http1Error, never a guess, and no part of an
// answer is held past MAX_HEAD_BYTES.
//
// Layout of the states (one answer at a time; a connection feeds the next
// answer only after `done`):
//
//   head ──► length ─────────────────────────────► done
//     │  └─► chunk-size ─► chunk-data ─► chunk-end ─┘  (0-size ─► trailers ─► done)
//     └──► close (until the connection ends)

import type { IncomingHttpHeaders } from "node:http";
import { HeaderRecord, isBlank, isFieldValue, lengthOf, nameColon, namesAfter, NO_NAMES, seenName, type SeenNames } from "./grammar.js";
import { Http1Error } from "./http1-error.js";

/**
 * A final head's lines as they came, on its headers object under this key
 * (a symbol: invisible to iteration): its latin1 text, each header's
 * lower-case name, and each line's start and end with its CRLF in the text,
 * two numbers a line. Lines a strict parser took, so a proxy may pass them
 * on as they are.
 */
export const HEAD_LINES: unique symbol = Symbol("adp.headLines");

/** What HEAD_LINES holds. */
export interface HeadLines {
  readonly text: string;
  readonly names: readonly string[];
  readonly lines: readonly number[];
}

/** The most bytes a head (status line and headers), a chunk-size line or the trailers may take. */
export const MAX_HEAD_BYTES = 16 * 1024;

/** Where the parser is in an answer. */
const enum State {
  Head,
  Length,
  Close,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  Done,
}

/** What an answer's parts are handed to. */
export interface AnswerParts {
  /** A head: the status and lower-cased headers (a name seen twice holds an array). 1xx heads come too. */
  head(status: number, headers: IncomingHttpHeaders): void;
  /** A piece of the (decoded) body; it may call {@link AnswerParser.pause}. */
  data(chunk: Buffer): void;
}

const CRLF = Buffer.from("\r\n");
const CRLF2 = Buffer.from("\r\n\r\n");
const CHUNK_SIZE = /^([0-9A-Fa-f]{1,12})[\t ]*(?:;[\t\x20-\x7e\x80-\xff]*)?$/;

/** The error for a head, chunk-size line or trailers past MAX_HEAD_BYTES. */
const tooLong = () => new Http1Error("ADP_ANSWER_INVALID", `an answer's head, chunk line or trailers exceed ${MAX_HEAD_BYTES} bytes`);

/** One connection's answers, parsed as its bytes come. */
export class AnswerParser {
  readonly #parts: AnswerParts;
  #state = State.Head;
  /** Bytes of an unfinished head, chunk-size line or trailers. */
  #held: Buffer | null = null;
  /** Body bytes left: of the answer (Length) or of the chunk (ChunkData); CRLF bytes seen (ChunkEnd). */
  #remaining = 0;
  /** Whether the connection may carry another request once this answer is done. */
  #reusable = true;
  #paused = false;
  /**
   * The last head's header names as they came, and lowercased: a connection's
   * answers repeat them in order, and a name read again is taken from here,
   * not scanned, sliced, lowercased and looked up as a property key anew.
   */
  #seen: SeenNames = NO_NAMES;

  constructor(parts: AnswerParts) {
    this.#parts = parts;
  }

  /** Whether the answer is complete. */
  get done(): boolean {
    return this.#state === State.Done;
  }

  /** Whether the answer ends with its connection (no length, no chunks). */
  get closeDelimited(): boolean {
    return this.#state === State.Close;
  }

  /** Whether the connection may carry another request after this answer. */
  get reusable(): boolean {
    return this.#reusable;
  }

  /** Whether the body's consumer asked to stop. */
  get paused(): boolean {
    return this.#paused;
  }

  /** Stops handing over data after the current piece (bytes left are the caller's to feed again). */
  pause(): void {
    this.#paused = true;
  }

  /** Lets data be handed over again. */
  resume(): void {
    this.#paused = false;
  }

  /** Parses `buf` from `from` until it is used up, the answer is done, or the consumer paused; returns where it stopped. */
  execute(buf: Buffer, from = 0): number {
    let at = from;
    while (at < buf.length && this.#state !== State.Done && !this.#paused) {
      switch (this.#state) {
        case State.Head:
          at = this.#line(buf, at, CRLF2, 2, (head) => this.#head(head));
          break;
        case State.Length:
          at = this.#counted(buf, at, State.Done);
          break;
        case State.Close:
          this.#parts.data(at === 0 ? buf : buf.subarray(at));
          at = buf.length;
          break;
        case State.ChunkSize:
          at = this.#line(buf, at, CRLF, 0, (line) => this.#chunkSize(line));
          break;
        case State.ChunkData:
          at = this.#counted(buf, at, State.ChunkEnd);
          break;
        case State.ChunkEnd:
          // The CRLF after a chunk's data, byte by byte (it may be split between reads).
          if (buf[at] !== CRLF[this.#remaining]) throw new Http1Error("ADP_ANSWER_INVALID", "a chunk's data is not followed by CRLF");
          at++;
          if (++this.#remaining === 2) this.#state = State.ChunkSize;
          break;
        case State.Trailers:
          at = this.#line(buf, at, CRLF, 0, (line) => this.#trailer(line));
          break;
      }
    }
    return at;
  }

  /** Hands over up to `#remaining` body bytes from `at` (the answer's, or the chunk's); moves to `next` once they are all through. */
  #counted(buf: Buffer, at: number, next: State): number {
    const n = Math.min(this.#remaining, buf.length - at);
    this.#remaining -= n;
    if (this.#remaining === 0) this.#state = next;
    this.#parts.data(buf.subarray(at, at + n));
    return at + n;
  }

  /**
   * Gathers bytes (held across reads, bounded) up to `end`; calls `take`
   * with them and the first `keep` bytes of `end` (a head keeps its last
   * line's CRLF: its lines are passed on as they came), and returns where
   * the bytes after `end` start.
   */
  #line(buf: Buffer, at: number, end: Buffer, keep: number, take: (text: string) => void): number {
    const held = this.#held;
    const start = held === null ? at : 0;
    const bytes = held === null ? buf : Buffer.concat([held, buf.subarray(at)]);
    // Search from just before the held part's end (the terminator may straddle the two).
    const found = bytes.indexOf(end, held === null ? start : Math.max(0, held.length - end.length + 1));
    if (found < 0) {
      if (bytes.length - start > MAX_HEAD_BYTES) throw tooLong();
      this.#held = Buffer.from(bytes.subarray(start)); // a copy: the read's buffer is not kept alive
      return buf.length;
    }
    if (found - start > MAX_HEAD_BYTES) throw tooLong();
    this.#held = null;
    take(bytes.toString("latin1", start, found + keep));
    // Where the rest starts in `buf`: past the terminator, less what was held before this read.
    return held === null ? found + end.length : found + end.length - held.length + at;
  }

  /**
   * Reads a head: status, headers, and how its body is framed. The status line
   * is `HTTP/1.0` or `HTTP/1.1`, a space, three digits, and a reason after a
   * space or none; each header line a token, a colon, and a value of visible
   * characters, spaces, tabs and obs-text (its surrounding spaces and tabs
   * dropped). Read a character at a time: no regular expression, no split.
   */
  #head(text: string): void {
    // `text` ends with its last line's CRLF.
    const statusEnd = text.indexOf("\r\n");
    const minor = text.charCodeAt(7);
    if (statusEnd < 12 || !text.startsWith("HTTP/1.") || (minor !== 0x30 && minor !== 0x31) || text.charCodeAt(8) !== 0x20 || (statusEnd > 12 && text.charCodeAt(12) !== 0x20) || !isFieldValue(text, 12, statusEnd)) {
      throw new Http1Error("ADP_ANSWER_INVALID", "an answer's status line is not HTTP/1.x");
    }
    let code = 0;
    for (let i = 9; i < 12; i++) {
      const d = text.charCodeAt(i) - 0x30;
      if (d < 0 || d > 9) throw new Http1Error("ADP_ANSWER_INVALID", "an answer's status line is not HTTP/1.x");
      code = code * 10 + d;
    }
    // Inheriting nothing: a header named __proto__ or constructor is a header like any other.
    const headers = new HeaderRecord() as IncomingHttpHeaders;
    const names: string[] = [];
    const spans: number[] = [];
    const seen = this.#seen;
    let same = true;
    for (let at = statusEnd + 2; at < text.length; ) {
      const end = text.indexOf("\r\n", at);
      // The name: the last head's name at this line when it is followed by the colon (it
      // holds token characters only, so it cannot run past the line), else token characters
      // up to the colon (a line starting with a space or tab, obs-fold, has none).
      let name = seenName(seen, names.length, text, at);
      let colon: number;
      if (name !== null) {
        colon = at + name.length;
      } else {
        same = false;
        colon = nameColon(text, at, end);
        if (colon < 0) throw new Http1Error("ADP_ANSWER_INVALID", "an answer has a malformed header line");
        name = text.slice(at, colon).toLowerCase();
      }
      let start = colon + 1;
      let stop = end;
      while (start < stop && isBlank(text.charCodeAt(start))) start++;
      while (stop > start && isBlank(text.charCodeAt(stop - 1))) stop--;
      if (!isFieldValue(text, start, stop)) throw new Http1Error("ADP_ANSWER_INVALID", "an answer's header value has control characters");
      const value = text.slice(start, stop);
      const before = headers[name];
      if (before === undefined) headers[name] = value;
      else if (Array.isArray(before)) before.push(value);
      else (headers as Record<string, string | string[]>)[name] = [before, value];
      names.push(name);
      spans.push(at, end + 2);
      at = end + 2;
    }
    this.#seen = namesAfter(seen, same, text, names, spans);
    if (code < 100) throw new Http1Error("ADP_ANSWER_INVALID", "an answer's status is below 100");
    if (code === 101) throw new Http1Error("ADP_ANSWER_INVALID", "an upstream switched protocols unasked");
    if (code < 200) {
      this.#parts.head(code, headers);
      return; // informational: the final head follows, in State.Head still
    }
    (headers as { [HEAD_LINES]?: HeadLines })[HEAD_LINES] = { text, names, lines: spans };
    const http10 = minor === 0x30;
    const connection = headers.connection as string | string[] | undefined;
    // The usual values compared as they are; anything else read as a list.
    const option = typeof connection === "string" ? connection.toLowerCase() : connection === undefined ? "" : connection.join(",").toLowerCase();
    this.#reusable = option === "" ? !http10 : option === "keep-alive" ? true : option === "close" ? false : http10 ? /(?:^|,)\s*keep-alive\s*(?:,|$)/.test(option) : !/(?:^|,)\s*close\s*(?:,|$)/.test(option);
    this.#frame(code, headers);
    // HTTP/1.0 has no chunked coding: such framing is faulty, and the connection is closed after it (RFC 9112 §6.1).
    if (http10 && this.#state === State.ChunkSize) this.#reusable = false;
    this.#parts.head(code, headers);
  }

  /** Sets how the body of an answer with `code` and `headers` ends (RFC 9112 §6.3). */
  #frame(code: number, headers: IncomingHttpHeaders): void {
    const te = headers["transfer-encoding"];
    const cl = headers["content-length"];
    if (code === 204 || code === 304) {
      this.#state = State.Done;
      return;
    }
    if (te !== undefined) {
      // Both framings at once is how responses are split: refused, as a proxy must (RFC 9112 §6.3, item 3).
      if (cl !== undefined) throw new Http1Error("ADP_ANSWER_INVALID", "an answer has both Transfer-Encoding and Content-Length");
      // Chunked alone: any other coding would have to be undone here (Transfer-Encoding is not passed on), and the
      // gateway decodes none (passing its bytes on as they are would give the client a body it cannot read).
      const codings = (Array.isArray(te) ? te.join(",") : te).split(",");
      if (codings.length !== 1 || codings[0]!.trim().toLowerCase() !== "chunked") throw new Http1Error("ADP_ANSWER_INVALID", "an answer's Transfer-Encoding is not chunked alone");
      this.#state = State.ChunkSize;
      return;
    }
    if (cl !== undefined) {
      // One plain number, as nearly every answer has it; else a list, each value the same.
      const plain = typeof cl === "string" ? lengthOf(cl) : -1;
      if (plain >= 0) {
        this.#remaining = plain;
        this.#state = plain === 0 ? State.Done : State.Length;
        return;
      }
      const values = (Array.isArray(cl) ? cl.join(",") : cl).split(",").map((v) => v.trim());
      if (!values.every((v) => /^\d{1,15}$/.test(v) && v === values[0])) throw new Http1Error("ADP_ANSWER_INVALID", "an answer's Content-Length is malformed");
      this.#remaining = Number(values[0]);
      // A list of one value (`5, 5`) is passed on as that value: a client's parser refuses the list.
      headers["content-length"] = values[0];
      this.#state = this.#remaining === 0 ? State.Done : State.Length;
      return;
    }
    this.#state = State.Close;
    this.#reusable = false;
  }

  /** Reads a chunk-size line (its extensions dropped). */
  #chunkSize(line: string): void {
    const m = CHUNK_SIZE.exec(line);
    if (m === null) throw new Http1Error("ADP_ANSWER_INVALID", "an answer's chunk-size line is malformed");
    this.#remaining = parseInt(m[1]!, 16);
    this.#state = this.#remaining === 0 ? State.Trailers : State.ChunkData;
  }

  /**
   * Reads (and drops) one trailer line after the last chunk; the blank line
   * ends the answer. `#remaining` (0 after the last chunk) counts the
   * trailers' bytes: together they stay within MAX_HEAD_BYTES.
   */
  #trailer(line: string): void {
    if (line === "") {
      this.#state = State.Done;
      return;
    }
    this.#remaining += line.length + 2;
    if (this.#remaining > MAX_HEAD_BYTES) throw tooLong();
  }

  /** Readies the parser for the connection's next answer. */
  reset(): void {
    this.#state = State.Head;
    this.#held = null;
    this.#remaining = 0;
    this.#reusable = true;
    this.#paused = false;
  }
}
