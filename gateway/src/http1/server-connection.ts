// One client connection on the gateway's own server path: its requests read
// in request-head.ts's narrow grammar, their bodies whole, one at a time,
// each answered (server-response.ts) before the next is read. It exists for
// cost: node:http's server was half of what a small proxied request cost the
// gateway (docs/performance.md). It judges nothing it does not take: at the
// first request outside the grammar (another path or method, Expect,
// chunked, a head past 16 KiB, a body over the limit, ...) the connection
// goes to node:http from that request on, its bytes unread, and node:http
// (llhttp) answers it as before. Bounds: a head is read for at most
// `headers_ms`, a whole request for `request_ms`, an idle connection is kept
// `keep_alive_ms` (the edge's sweep calls check()), a connection closes
// after its answer to request `max_requests_per_connection` (servedItsLast);
// bytes a client sends ahead (pipelining) are held up to HOLD_BYTES, then
// not read until the answer before them is done and the client took it. A
// connection whose last answer went out lingers: it reads and drops what
// its client still sends until the client ends its side (LINGER_MS and
// LINGER_BYTES at most), since closing a socket with bytes unread sends a
// reset, which can take the answer from a client yet to read it. Its
// socket reads into the process's read buffer (read-buffer.ts), and what is
// kept of a read is copied out of it.
//
// Phases of a connection:
//
//   head ──► body ──► serving ──► head (keep-alive) ...
//     │        └─────────┴──► done (closed, timed out)
//     └──► handed to node:http

import type { IncomingHttpHeaders } from "node:http";
import type { Socket } from "node:net";
import type { EdgeRequest } from "./edge-types.js";
import { NO_NAMES, type SeenNames } from "./grammar.js";
import { MAX_REQUEST_HEAD_BYTES, mayBeTaken, parseRequestHead, type RequestHead } from "./request-head.js";
import { Http1Response, type ResponseOwner } from "./server-response.js";
import type { Slotted } from "../common/slot-array.js";
import { noteReceived } from "../common/young-buffers.js";
import { readIntoBuffer } from "./read-buffer.js";

/** The most bytes held that a client sent ahead of its answer; past it the socket is not read until the answer is done. */
const HOLD_BYTES = 64 * 1024;
/** What a body that did not come with its head is first given (it grows by doubling to its declared length as its bytes come). */
const BODY_START_BYTES = 64 * 1024;
/** How long a connection whose last answer was written waits for its client to end its side, reading and dropping what it sends. */
const LINGER_MS = 2000;
/** The most bytes dropped meanwhile: past them the connection is closed at once. */
const LINGER_BYTES = 1 << 20;
/** The end of a head. */
const CRLF2 = Buffer.from("\r\n\r\n");

/** `bytes` to keep past the read that brought them: copied when `transient` (a view of the read buffer), else as they are. */
const kept = (bytes: Buffer, transient: boolean): Buffer => (transient ? Buffer.from(bytes) : bytes);

/** What a connection needs of the server it belongs to (edge/edge.ts). */
export interface ServerPath {
  /** Whether requests to `path` are served here. */
  takes(path: string): boolean;
  /** The largest body read here (a larger one goes to node:http, which refuses it 413). */
  readonly maxBodyBytes: number;
  /** Requests a connection serves: the last one's answer closes it (limits.max_requests_per_connection; Infinity: no limit). */
  readonly maxRequests: number;
  /** The `Keep-Alive: timeout=N\r\n` line answers carry (null: none). */
  readonly keepAliveHeader: string | null;
  /** Serves a request read whole. */
  serve(req: Http1Request, res: Http1Response, body: Buffer): void;
  /** A request whose head came and whose body never did (its client left, or took too long). */
  abandoned(req: Http1Request): void;
  /** Gives `socket` to node:http, its unread bytes back in it; `served`: the requests answered on it here. */
  handOff(socket: Socket, served: number): void;
  /** The bytes for bodies being received (limits.max_receiving_bytes): take(n) is false when there are none to take. */
  readonly receiving: { take(n: number): boolean; give(n: number): void };
  /** The whole answer (head and body) to a body the bytes for which could not be taken: a 503 saying close. */
  readonly busyAnswer: string;
  /** Answers 408 and closes: a head or body not received in time. */
  timedOut(socket: Socket): void;
  /** The connection is no longer this path's (closed or handed off). */
  forget(connection: ServerConnection): void;
}

/** A request read by the server path: its head as parsed, and the head's bytes (its header lines can be passed on as they came). */
export class Http1Request implements EdgeRequest {
  readonly method = "POST";
  readonly complete = true;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly head: RequestHead;
  /** The head's bytes (what `head.lines` point into). */
  readonly headBytes: Buffer;

  constructor(head: RequestHead, headBytes: Buffer) {
    this.url = head.target;
    this.headers = head.headers as IncomingHttpHeaders;
    this.head = head;
    this.headBytes = headBytes;
  }
}

/** Where a connection is. */
const enum Phase {
  Head,
  Body,
  Serving,
  Done,
}

/** One client socket on the server path. */
export class ServerConnection implements ResponseOwner, Slotted {
  readonly socket: Socket;
  /** Its slot among the server path's connections (SlotArray keeps it). */
  slotIndex = -1;
  readonly #path: ServerPath;
  #phase = Phase.Head;
  /** Bytes read and not taken yet: the head so far (Head), or what came after the request being served. */
  #held: Buffer | null = null;
  /** Where held bytes that came in several reads are gathered (grown by doubling: a head trickled a byte a read costs linear time). */
  #store: Buffer | null = null;
  /** How far `#held` was searched for a head's end. */
  #scanned = 0;
  /** The request whose body is being read, and its head's bytes. */
  #head: RequestHead | null = null;
  #headBytes: Buffer | null = null;
  #body: Buffer | null = null;
  #bodyAt = 0;
  /** The body's declared length (what `#body` grows to as its bytes come, not what a head alone makes it take). */
  #bodyLength = 0;
  /** The bytes taken for `#body` from the server's receiving budget (given back once it is whole, or the connection ends). */
  #taken = 0;
  /** The last head's header names, which the next is read against. */
  #names: SeenNames = NO_NAMES;
  /** When the request being read began (its first byte; the connection's start for its first request), or the connection went idle. */
  #since = performance.now();
  /** Whether the connection went to node:http (see #onRead). */
  #handedOff = false;
  /** Whether a byte of the next request came (else the connection is idle between requests, or new). */
  #reading = true;
  /** The answer in progress. */
  #response: Http1Response | null = null;
  /** Whether the connection closes once the answer in progress ends (the server is closing). */
  #closing = false;
  /** Whether its last answer ended and the socket is ending after it. */
  #ending = false;
  /** Whether the client ended its side (while its last answer went out: the socket closes once that is written). */
  #clientEnded = false;
  /** Bytes the client sent after its last request, read and dropped. */
  #dropped = 0;
  /** Closes a lingering connection at LINGER_MS. */
  #linger: ReturnType<typeof setTimeout> | null = null;
  /** Requests it has served (answered or being answered). */
  #served = 0;
  readonly #onData = (d: Buffer) => this.#data(d, false);
  /**
   * A read into the process's read buffer: `view` is valid only during the
   * call. After a hand-off node:http reads the socket's handle itself (its
   * parser consumes it); should it stop, reads go into the socket's stream for
   * it, reading paused while that is full (false).
   */
  readonly #onRead = (view: Buffer): boolean => {
    if (this.#handedOff) return this.socket.push(Buffer.from(view));
    this.#data(view, true);
    return true;
  };
  readonly #onEnd = () => this.#end();
  readonly #onClose = () => this.#close();
  readonly #onError = () => {}; // 'close' follows

  constructor(socket: Socket, path: ServerPath) {
    this.socket = socket;
    this.#path = path;
    // Into the process's read buffer (read-buffer.ts), else from 'data' events.
    if (!readIntoBuffer(socket, this.#onRead)) socket.on("data", this.#onData);
    socket.on("end", this.#onEnd);
    socket.on("close", this.#onClose);
    socket.on("error", this.#onError);
  }

  get keepAliveHeader(): string | null {
    return this.#path.keepAliveHeader;
  }

  /**
   * Whether the request being answered is the connection's last (its answer
   * says close, asked as the head goes out): once it served
   * limits.max_requests_per_connection. A keep-alive client then comes back
   * on a new connection, which with --workers the primary hands to the next
   * worker (one started again included). Requests it sent ahead are not
   * served (RFC 9112 9.6: none after a close is processed; a pipelining
   * client sends them again on a new connection, as with nginx's and
   * node:http's limits), and the connection lingers for their bytes.
   */
  get servedItsLast(): boolean {
    return this.#served >= this.#path.maxRequests;
  }

  /** Bytes read; `transient`: a view of the read buffer, valid only during the call (what is kept is copied). */
  #data(d: Buffer, transient: boolean): void {
    noteReceived(d.length);
    switch (this.#phase) {
      case Phase.Head:
        if (!this.#reading) {
          this.#reading = true;
          this.#since = performance.now();
        }
        // A read that starts a head is read where it lies, and only what is kept of it copied.
        if (this.#held === null) return this.#readHead(d, transient);
        this.#hold(d, transient);
        this.#readHead(this.#held!, false);
        return;
      case Phase.Body: {
        const length = this.#bodyLength;
        const n = Math.min(length - this.#bodyAt, d.length);
        const body = this.#bodyAt + n <= this.#body!.length ? this.#body! : this.#growBody(this.#bodyAt + n);
        if (body === null) return;
        d.copy(body, this.#bodyAt, 0, n);
        this.#bodyAt += n;
        if (this.#bodyAt < length) return;
        if (n < d.length) this.#hold(d.subarray(n), transient);
        this.#dispatch(body);
        return;
      }
      case Phase.Serving:
        // Sent ahead of its answer: held, and the socket not read past HOLD_BYTES (its end or reset is seen once reading resumes).
        this.#hold(d, transient);
        if (this.#held!.length > HOLD_BYTES) this.socket.pause();
        return;
      case Phase.Done:
        // After the last answer: dropped, up to LINGER_BYTES.
        this.#dropped += d.length;
        if (this.#ending && this.#dropped > LINGER_BYTES) this.socket.destroy();
        return;
    }
  }

  /** Appends `d` to the held bytes (the first piece is kept as it came, not copied, unless `transient`: a view of the read buffer). */
  #hold(d: Buffer, transient: boolean): void {
    const held = this.#held;
    if (held === null) {
      this.#held = kept(d, transient);
      return;
    }
    const n = held.length + d.length;
    const store = this.#store;
    if (store !== null && held.buffer === store.buffer && held.byteOffset === store.byteOffset && n <= store.length) {
      d.copy(store, held.length);
      this.#held = store.subarray(0, n);
      return;
    }
    const grown = Buffer.allocUnsafeSlow(Math.max(n, 2 * held.length, 1024));
    held.copy(grown, 0);
    d.copy(grown, held.length);
    this.#store = grown;
    this.#held = grown.subarray(0, n);
  }

  /**
   * Reads the head once its end came: a request taken here, or the connection
   * handed to node:http. `bytes` are the held bytes, or a read's (`transient`:
   * a view of the read buffer, nothing held before it), of which what is kept is
   * copied, once: a head and body that came whole as one copy, else the head
   * apart and the body into its own buffer.
   */
  #readHead(bytes: Buffer, transient: boolean): void {
    const end = bytes.indexOf(CRLF2, Math.max(0, this.#scanned - 3));
    if (end < 0) {
      this.#held = kept(bytes, transient);
      if (bytes.length > MAX_REQUEST_HEAD_BYTES || !mayBeTaken(bytes, this.#scanned)) return this.#handOff();
      this.#scanned = bytes.length;
      return;
    }
    this.#scanned = 0;
    this.#store = null; // what is held from here is a view of it at most, let go with the view
    const head = end > MAX_REQUEST_HEAD_BYTES ? null : parseRequestHead(bytes.toString("latin1", 0, end), this.#path.takes, this.#names);
    if (head === null || head.contentLength > this.#path.maxBodyBytes) {
      this.#held = kept(bytes, transient);
      return this.#handOff();
    }
    this.#names = head.namesSeen;
    const start = end + 4;
    const stop = start + head.contentLength;
    this.#head = head;
    if (bytes.length >= stop) {
      // The whole request came: its head and body are views of what was read (copied once when transient).
      const own = kept(bytes.subarray(0, stop), transient);
      this.#headBytes = own.subarray(0, end + 2);
      this.#held = stop === bytes.length ? null : kept(bytes.subarray(stop), transient);
      this.#dispatch(own.subarray(start, stop));
      return;
    }
    this.#headBytes = kept(bytes.subarray(0, end + 2), transient);
    // Sized by what came, not by what the head declares: a head alone does not take a body's worth of memory.
    const have = bytes.length - start;
    const size = Math.min(head.contentLength, Math.max(BODY_START_BYTES, 2 * have));
    if (!this.#path.receiving.take(size)) return this.#refuse();
    this.#taken = size;
    const body = Buffer.allocUnsafe(size);
    noteReceived(body.length);
    bytes.copy(body, 0, start);
    this.#body = body;
    this.#bodyAt = have;
    this.#bodyLength = head.contentLength;
    this.#held = null;
    this.#phase = Phase.Body;
  }

  /** The body moved into a buffer of at least `needed` bytes: twice its size, at most its declared length (null: refused, no bytes to take). */
  #growBody(needed: number): Buffer | null {
    const body = this.#body!;
    const size = Math.min(this.#bodyLength, Math.max(needed, 2 * body.length));
    if (!this.#path.receiving.take(size - body.length)) {
      this.#refuse();
      return null;
    }
    this.#taken += size - body.length;
    const grown = Buffer.allocUnsafe(size);
    noteReceived(grown.length);
    body.copy(grown, 0, 0, this.#bodyAt);
    this.#body = grown;
    return grown;
  }

  /** Serves the request read. */
  #dispatch(body: Buffer): void {
    this.#giveBack();
    const head = this.#head!;
    const headBytes = this.#headBytes!;
    this.#head = null;
    this.#headBytes = null;
    this.#body = null;
    this.#phase = Phase.Serving;
    this.#reading = false;
    this.#served++;
    const res = new Http1Response(this.socket, this, head.close || this.#closing);
    this.#response = res;
    this.#path.serve(new Http1Request(head, headBytes), res, body);
  }

  /** An answer ended: the connection closes after it, or reads the next request. */
  ended(response: Http1Response, close: boolean): void {
    if (response !== this.#response) return;
    this.#response = null;
    if (this.#phase !== Phase.Serving) return; // closed meanwhile
    if (close || this.#closing) {
      this.#phase = Phase.Done;
      // Idle from here as between requests: a client that never reads its last answer is closed by check() as a
      // keep-alive one would be, not kept (with the answer's unsent bytes) until it reads.
      this.#held = null;
      this.#store = null;
      this.#endLingering();
      return;
    }
    this.#phase = Phase.Head;
    this.#since = performance.now();
    if (this.#held === null) {
      if (this.socket.isPaused()) this.socket.resume();
      return;
    }
    // Requests sent ahead: read once the client took this answer (a client that never reads holds one answer, not all).
    if (this.socket.writableNeedDrain) this.socket.once("drain", () => this.#next());
    else setImmediate(() => this.#next());
  }

  /** Reads the requests held while the last one was served. */
  #next(): void {
    if (this.#phase !== Phase.Head || this.#held === null) return;
    const held = this.#held;
    this.#held = null;
    this.#data(held, false);
    // Read on only once what is held is within HOLD_BYTES again: a client pipelining more gets one request's room an answer, not a read.
    const left = this.#held as Buffer | null;
    if ((this.#phase as Phase) !== Phase.Done && this.socket.isPaused() && (left === null || left.length <= HOLD_BYTES)) this.socket.resume();
  }

  /** The last answer is written: the connection closes when its client ended its side, else lingers for it. */
  readonly #written = () => {
    if (this.#clientEnded || this.socket.destroyed) {
      this.socket.destroy();
      return;
    }
    this.#linger = setTimeout(() => this.socket.destroy(), LINGER_MS);
    this.#linger.unref();
  };

  /**
   * The client ended its side: a request in progress is dropped (node:http
   * ends the socket too), an idle connection closes, and one whose last
   * answer is going out closes once it is written (a client that half-closes
   * after its request still reads the answer).
   */
  #end(): void {
    if (this.#ending) {
      this.#clientEnded = true;
      if (this.socket.writableFinished) this.socket.destroy();
    } else if (this.#phase === Phase.Head && !this.#reading) this.socket.end();
    else this.socket.destroy();
  }

  #close(): void {
    if (this.#linger !== null) clearTimeout(this.#linger);
    this.#giveBack();
    if (this.#phase === Phase.Body) this.#path.abandoned(new Http1Request(this.#head!, this.#headBytes!));
    this.#phase = Phase.Done;
    this.#held = null;
    this.#store = null;
    this.#body = null;
    this.#path.forget(this);
    // An answer still in progress: its client hung up.
    const res = this.#response;
    this.#response = null;
    res?.emitClose();
  }

  /** Gives the connection to node:http from the request being read, its bytes put back unread. */
  #handOff(): void {
    const socket = this.socket;
    socket.pause();
    this.#handedOff = true;
    socket.off("data", this.#onData); // nothing when reading into the buffer
    socket.off("end", this.#onEnd);
    socket.off("close", this.#onClose);
    socket.off("error", this.#onError);
    this.#phase = Phase.Done;
    const held = this.#held;
    this.#held = null;
    if (held !== null) socket.unshift(held);
    this.#path.forget(this);
    this.#path.handOff(socket, this.#served);
    socket.resume();
  }

  /**
   * Applies the time bounds at `now` (performance.now()): a head past
   * `headersMs` or a request past `requestMs` is answered 408; a connection
   * idle past `keepAliveMs` closes, one whose last answer is still unsent too.
   */
  check(now: number, headersMs: number, requestMs: number, keepAliveMs: number): void {
    const age = now - this.#since;
    if (this.#phase === Phase.Head) {
      if (!this.#reading) {
        if (age > keepAliveMs) this.socket.destroy();
      } else if (age > Math.min(headersMs, requestMs)) this.#timeOut();
    } else if (this.#phase === Phase.Body && age > requestMs) this.#timeOut();
    else if (this.#ending && age > keepAliveMs) this.socket.destroy();
  }

  #timeOut(): void {
    if (this.#phase === Phase.Body) this.#path.abandoned(new Http1Request(this.#head!, this.#headBytes!));
    this.#stopReading();
    this.#path.timedOut(this.socket);
  }

  /**
   * Refuses the body being read (no bytes for it in the receiving budget):
   * 503, and the connection closes, lingering as after any last answer (its
   * client is likely still sending the body).
   */
  #refuse(): void {
    this.#stopReading();
    this.#endLingering(this.#path.busyAnswer);
  }

  /** Ends the socket after `last` (nothing: the last answer is written already), lingering for its client's end (#written). */
  #endLingering(last?: string): void {
    this.#ending = true;
    this.#since = performance.now();
    if (last === undefined) this.socket.end(this.#written);
    else this.socket.end(last, this.#written);
    // What the client sends from here is read and dropped (reading paused at HOLD_BYTES resumes).
    if (this.socket.isPaused()) this.socket.resume();
  }

  /** Reads nothing more: what is held and the body are let go, their bytes given back. */
  #stopReading(): void {
    this.#phase = Phase.Done;
    this.#held = null;
    this.#body = null;
    this.#giveBack();
    this.socket.off("data", this.#onData);
  }

  /** Gives back the bytes taken for the body. */
  #giveBack(): void {
    if (this.#taken === 0) return;
    this.#path.receiving.give(this.#taken);
    this.#taken = 0;
  }

  /**
   * The server closes: an idle connection now, a busy one once its answer ends.
   * An idle one is ended, not destroyed: the answer it just gave may still be
   * held until the check phase (server-response.ts), and ending sends it first.
   */
  closeIdle(): void {
    this.#closing = true;
    if (this.#phase === Phase.Head && !this.#reading) this.socket.end(() => this.socket.destroy());
  }
}
