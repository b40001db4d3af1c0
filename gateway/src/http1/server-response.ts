// One answer on the gateway's own server path, written to the client's
// socket as node:http's ServerResponse would write it (the same head: the
// status line, the headers given, Date, Connection and Keep-Alive; a body
// framed by its Content-Length, or chunked when it has none), with the
// members of ServerResponse the gateway uses (edge-types.ts: EdgeResponse).
// A whole answer's head goes out with its body in one write, once the event
// loop's poll phase is over (corkUntilCheck).

import { STATUS_CODES } from "node:http";
import type { Socket } from "node:net";
import type { EdgeResponse } from "./edge-types.js";
import { isFieldValue, isToken } from "./grammar.js";
import { writeChunk, writeJoined } from "./joined-write.js";
import type { HeadLines } from "./answer-parser.js";

/** What an answer tells the connection it is written on. */
export interface ResponseOwner {
  /** The answer ended (its last bytes handed to the socket); `close`: the connection closes after it. */
  ended(response: Http1Response, close: boolean): void;
  /** The `Keep-Alive: timeout=N` an answer on a connection that stays open carries (null: none). */
  readonly keepAliveHeader: string | null;
  /** Whether the connection has served its last request (asked as the head goes out: then it says close). */
  readonly servedItsLast: boolean;
}

/** The `Date` header's value, made once a second (node:http's utcDate does the same). */
let dateText = "";
let dateUntil = 0;
/** Now as an HTTP date. */
function httpDate(): string {
  const now = Date.now();
  if (now >= dateUntil) {
    dateText = new Date(now).toUTCString();
    dateUntil = now - (now % 1000) + 1000;
  }
  return dateText;
}

/** The error node:http throws for a header name that is not a token, or a value with control characters. */
function invalidHeader(name: string, what: "name" | "value"): TypeError {
  const error = new TypeError(what === "name" ? `Header name must be a valid HTTP token ["${name}"]` : `Invalid character in header content ["${name}"]`);
  (error as TypeError & { code: string }).code = what === "name" ? "ERR_INVALID_HTTP_TOKEN" : "ERR_INVALID_CHAR";
  return error;
}

/** Whether `headers` has `lower` (a lower-case name) under any case (writeHead's win over setHeader's). */
function hasHeader(headers: Readonly<Record<string, unknown>>, lower: string): boolean {
  if (headers[lower] !== undefined) return true;
  for (const name in headers) if (headers[name] !== undefined && name.length === lower.length && name.toLowerCase() === lower) return true;
  return false;
}

/** Client sockets corked until the event loop's check phase (each once), and whether that phase's uncorking is scheduled. */
let corked = new Set<Socket>();
let uncorkScheduled = false;

/** Uncorks every socket corkUntilCheck corked (the check phase, after the poll phase's reads). */
function uncorkAll(): void {
  uncorkScheduled = false;
  const sockets = corked;
  corked = new Set();
  for (const socket of sockets) {
    try {
      socket.uncork();
    } catch {
      socket.destroy(); // never left corked: the others are uncorked all the same
    }
  }
}

/**
 * Corks `socket` until the event loop's check phase: the answers to the
 * upstream reads of one poll phase (whole answers, a stream's events) then
 * reach their clients together, after it, one write a client, and a client
 * process woken by the first finds the others waiting instead of sleeping
 * again between them (a wake-up of another process is most of a loopback
 * write's cost, docs/performance.md). A socket destroyed before then loses
 * what it held: only a client being cut off is destroyed.
 */
function corkUntilCheck(socket: Socket): void {
  if (corked.has(socket)) return;
  socket.cork();
  corked.add(socket);
  if (uncorkScheduled) return;
  uncorkScheduled = true;
  setImmediate(uncorkAll);
}

/**
 * Sends what `socket` holds now when `more` is false (it holds a high-water
 * mark's worth): a large body's bytes go to the kernel as they come, and its
 * 'drain' (which resumes a paused upstream) is not put off to the check phase.
 */
function flushWhenFull(socket: Socket, more: boolean): boolean {
  if (!more && corked.delete(socket)) socket.uncork();
  return more;
}

/** The line end after a chunk's size and after its data. */
const CRLF = "\r\n";
/** The last chunk of a chunked body. */
const LAST_CHUNK = "0\r\n\r\n";

/** An answer written to one client socket. */
export class Http1Response implements EdgeResponse {
  /** Whether the head was given (writeHead, or a write that implied it). */
  headersSent = false;
  /** Whether end() was called. */
  writableEnded = false;
  /** Whether its last bytes were handed to the socket. */
  writableFinished = false;
  readonly #socket: Socket;
  readonly #owner: ResponseOwner;
  /** Whether the connection closes after this answer (the client asked, or a header said so). */
  #close: boolean;
  /** The head, written but not sent: the status line and header lines, without the framing and the blank line. */
  #head: string | null = null;
  /** The status (for framing: 204 and 304 have no body). */
  #status = 200;
  /** Whether the head went out. */
  #sent = false;
  /** Whether the head carries a Content-Length. */
  #length = false;
  /** Whether the head carries a Date (an upstream's, passed on: not a second one). */
  #dated = false;
  /** Whether the body goes out chunked. */
  #chunked = false;
  /** Headers set before the head, as lower-case name and value pairs (writeHead's of the same name win). */
  #set: string[] | null = null;
  /** Called once the answer ends or its connection closes first (the first listener held apart: there is one, the service's). */
  #onClose: (() => void) | null = null;
  #moreOnClose: (() => void)[] | null = null;
  #closed = false;

  constructor(socket: Socket, owner: ResponseOwner, close: boolean) {
    this.#socket = socket;
    this.#owner = owner;
    this.#close = close;
  }

  /** Whether its socket was destroyed. */
  get destroyed(): boolean {
    return this.#socket.destroyed;
  }

  /** Sets a header written with the head (unless writeHead gives one of the same name). */
  setHeader(name: string, value: string): this {
    if (this.headersSent) throw Object.assign(new Error("Cannot set headers after they are sent to the client"), { code: "ERR_HTTP_HEADERS_SENT" });
    if (!isToken(name)) throw invalidHeader(name, "name");
    if (!isFieldValue(value)) throw invalidHeader(name, "value");
    const lower = name.toLowerCase();
    const set = (this.#set ??= []); // name, value, name, value, ...
    let i = 0;
    while (i < set.length && set[i] !== lower) i += 2;
    set[i] = lower;
    set[i + 1] = value;
    return this;
  }

  /** Writes the head (sent with the first body bytes, or by flushHeaders); throws as node:http does for a malformed header. */
  writeHead(status: number, headers?: Readonly<Record<string, string | readonly string[] | number | undefined>>): this {
    if (this.headersSent) throw Object.assign(new Error("Cannot write headers after they are sent to the client"), { code: "ERR_HTTP_HEADERS_SENT" });
    let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "unknown"}\r\n`;
    let length = false;
    let dated = false;
    if (headers !== undefined) {
      for (const name in headers) {
        const value = headers[name];
        if (value === undefined) continue;
        if (!isToken(name)) throw invalidHeader(name, "name");
        const lower = name.toLowerCase();
        if (lower === "content-length") length = true;
        else if (lower === "date") dated = true;
        else if (lower === "connection") {
          if (/(?:^|,)\s*close\s*(?:,|$)/i.test(String(value))) this.#close = true;
          continue; // written below, as the connection goes
        } else if (lower === "transfer-encoding") continue; // the framing is this file's
        if (typeof value === "string" || typeof value === "number") head += this.#line(name, String(value));
        else for (const v of value) head += this.#line(name, v);
      }
    }
    const set = this.#set;
    if (set !== null) for (let i = 0; i < set.length; i += 2) if (headers === undefined || !hasHeader(headers, set[i]!)) head += `${set[i]}: ${set[i + 1]}\r\n`;
    this.#status = status;
    this.#length = length;
    this.#dated = dated;
    this.#head = head;
    this.headersSent = true;
    return this;
  }

  /**
   * Writes the head from an upstream's head lines passed on as they came
   * (`kept`: each line's start and end in `lines.text`, two numbers a line;
   * lines a strict parser took, not checked again), then `own`'s headers
   * (checked). Headers set before are written unless `own` or a kept line
   * has their name. Otherwise as writeHead.
   */
  writeHeadPassing(status: number, lines: HeadLines, kept: readonly number[], keptNames: readonly string[], own: Readonly<Record<string, string>>): this {
    if (this.headersSent) throw Object.assign(new Error("Cannot write headers after they are sent to the client"), { code: "ERR_HTTP_HEADERS_SENT" });
    let head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "unknown"}\r\n`;
    const text = lines.text;
    for (let i = 0; i < kept.length; i += 2) head += text.slice(kept[i], kept[i + 1]);
    let length = keptNames.includes("content-length");
    for (const name in own) {
      if (name === "content-length") length = true;
      head += this.#line(name, own[name]!);
    }
    const set = this.#set;
    if (set !== null) for (let i = 0; i < set.length; i += 2) if (own[set[i]!] === undefined && !keptNames.includes(set[i]!)) head += `${set[i]}: ${set[i + 1]}\r\n`;
    this.#status = status;
    this.#length = length;
    this.#dated = keptNames.includes("date");
    this.#head = head;
    this.headersSent = true;
    return this;
  }

  /** A header line, its value checked. */
  #line(name: string, value: string): string {
    if (!isFieldValue(value)) throw invalidHeader(name, "value");
    return `${name}: ${value}\r\n`;
  }

  /**
   * Forgets a head written but not sent (no byte of this answer reached the
   * socket), so that another can be written in its place: true; false once
   * any went. A whole answer's head waits for its body: when the upstream
   * fails before the body, the gateway answers its failure instead.
   */
  unsend(): boolean {
    if (this.#sent || this.writableEnded) return false;
    this.#head = null;
    this.#status = 200;
    this.#length = false;
    this.#dated = false;
    this.headersSent = false;
    return true;
  }

  /** Sends the head now (a stream's: its chunks follow as they come). */
  flushHeaders(): void {
    if (!this.headersSent) this.writeHead(200);
    if (!this.#sent) this.#socket.write(this.#finalHead(-1), "latin1");
  }

  /** Writes a piece of the body (the head with it, when not sent yet), held with the others of this poll phase until its check phase; false: the socket's buffer is full, wait for 'drain'. */
  write(chunk: Buffer | string): boolean {
    if (this.writableEnded) return false;
    if (!this.headersSent) this.writeHead(200);
    const socket = this.#socket;
    const size = typeof chunk === "string" ? Buffer.byteLength(chunk) : chunk.length;
    if (!this.#sent) {
      const head = this.#finalHead(-1);
      // A whole answer's first bytes go with the head, in one write.
      if (!this.#chunked) {
        corkUntilCheck(socket);
        return flushWhenFull(socket, writeJoined(socket, head, typeof chunk === "string" ? Buffer.from(chunk) : chunk));
      }
      corkUntilCheck(socket);
      if (size === 0) return socket.write(head, "latin1");
      socket.write(head, "latin1");
    } else if (size === 0) return true;
    else corkUntilCheck(socket);
    return flushWhenFull(socket, this.#chunked ? writeChunk(socket, chunk, size, CRLF) : socket.write(chunk));
  }

  /** Ends the answer with `chunk` as its last bytes (a whole answer's head and body in one write). */
  end(chunk?: Buffer | string): this {
    if (this.writableEnded) return this;
    if (!this.headersSent) this.writeHead(200);
    const socket = this.#socket;
    const size = chunk === undefined ? 0 : typeof chunk === "string" ? Buffer.byteLength(chunk) : chunk.length;
    if (!socket.destroyed) {
      if (!this.#sent) {
        // Never written: its length is this chunk's (node:http does the same).
        const head = this.#finalHead(size);
        corkUntilCheck(socket);
        if (size === 0) socket.write(head, "latin1");
        // ASCII text (its UTF-8 size is its length) goes in one string with the head.
        else if (typeof chunk === "string" && size === chunk.length) socket.write(head + chunk, "latin1");
        else writeJoined(socket, head, typeof chunk === "string" ? Buffer.from(chunk) : chunk!);
      } else if (this.#chunked) {
        corkUntilCheck(socket); // with the chunks written since the last check phase
        if (size > 0) writeChunk(socket, chunk!, size, `${CRLF}${LAST_CHUNK}`);
        else socket.write(LAST_CHUNK, "latin1");
      } else if (size > 0) socket.write(chunk!);
    }
    this.writableEnded = true;
    this.writableFinished = !socket.destroyed;
    this.#owner.ended(this, this.#close);
    this.emitClose();
    return this;
  }

  /**
   * The head as sent, with its framing: `endSize` ≥ 0 is the whole body's
   * size (end() before any write: a Content-Length), -1 a body still to come
   * (chunked without a Content-Length).
   */
  #finalHead(endSize: number): string {
    let head = this.#head!;
    const bodiless = this.#status === 204 || this.#status === 304 || this.#status < 200;
    if (!this.#length && !bodiless) {
      if (endSize >= 0) head += `Content-Length: ${endSize}\r\n`;
      else {
        head += "Transfer-Encoding: chunked\r\n";
        this.#chunked = true;
      }
    }
    if (!this.#dated) head += `Date: ${httpDate()}\r\n`;
    const keepAlive = this.#owner.keepAliveHeader;
    if (!this.#close && this.#owner.servedItsLast) this.#close = true;
    head += this.#close ? "Connection: close\r\n" : keepAlive === null ? "Connection: keep-alive\r\n" : `Connection: keep-alive\r\n${keepAlive}`;
    this.#sent = true;
    return `${head}\r\n`;
  }

  /** Closes the connection now (what ServerResponse.destroy does): the client sees it cut. */
  destroy(): void {
    this.#socket.destroy();
  }

  /** Listens for the answer's end or its connection's close (`close`, once); 'drain' is the socket's. */
  on(event: "close", listener: () => void): this {
    if (event !== "close") throw new TypeError(`Http1Response emits close only, not ${String(event)}`);
    if (this.#closed) queueMicrotask(listener);
    else if (this.#onClose === null) this.#onClose = listener;
    else (this.#moreOnClose ??= []).push(listener);
    return this;
  }

  once(event: "drain", listener: () => void): this {
    this.#socket.once(event, listener);
    return this;
  }

  off(event: "drain", listener: () => void): this {
    this.#socket.off(event, listener);
    return this;
  }

  /** Tells the close listeners, once: after end(), or when the connection closed first (then writableFinished is false). */
  emitClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    const first = this.#onClose;
    const more = this.#moreOnClose;
    this.#onClose = null;
    this.#moreOnClose = null;
    first?.();
    if (more !== null) for (const l of more) l();
  }
}
