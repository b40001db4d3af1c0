// The gateway's HTTP edge: the server with its bounds on clients (a
// connection limit, head and whole-request read timeouts, the keep-alive
// time), reading a request body within its limit, answering errors
// OpenAI-style, request ids, and the `Via` hop that stops loops. Each bound
// has a counter in /metrics.

import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { GatewayConfig } from "../config/config.js";
import { HttpError } from "../requests/openai.js";

/** The edge's counters (metrics.ts prints them). */
export interface EdgeCounters {
  /** Client connections open now. */
  connections: number;
  /** Connections closed on arrival because `limits.max_connections` were open. */
  refusedConnections: number;
  /** Requests whose head or body was not received in time (408). */
  readTimeouts: number;
  /** Requests that carried this gateway's own `Via` entry back (508). */
  loops: number;
  /** Requests Node's parser refused: malformed (400) or with headers too large (431). */
  malformed: number;
  headersTooLarge: number;
}

/** How long a connection answered and closed by the edge may take to send the rest of what it was sending, at most. */
const LINGER_MS = 250;
/** How much of a refused body is read (and dropped) meanwhile, at most. */
const LINGER_BYTES = 1 << 20;

/** A request id taken from a client: visible ASCII, at most 128 characters (anything else is replaced). */
const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

/** The request's id: the client's `x-request-id` when it is a sane one, else a fresh UUID. */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers["x-request-id"];
  const text = Array.isArray(given) ? given[0] : given;
  return text !== undefined && REQUEST_ID.test(text) ? text : randomUUID();
}

/** The request body, at most `limit` bytes (413 past it); 499 when the client hangs up mid-body. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? NaN);
  if (declared > limit) return Promise.reject(new HttpError(413, `the request body is over limits.max_body_bytes (${limit} bytes)`, "invalid_request_error", "payload_too_large"));
  // Events, not async iteration: a promise per chunk costs measurably per request.
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (error: HttpError | null) => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
      if (error === null) resolve(Buffer.concat(chunks, size));
      else reject(error);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) finish(new HttpError(413, `the request body is over limits.max_body_bytes (${limit} bytes)`, "invalid_request_error", "payload_too_large"));
      else chunks.push(chunk);
    };
    const onEnd = () => finish(null);
    const onError = () => finish(new HttpError(499, "the client closed the request"));
    const onClose = () => {
      if (!req.complete) finish(new HttpError(499, "the client closed the request")); // it hung up mid-body
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

/**
 * Answers `error` OpenAI-style (when nothing was sent yet). A request whose
 * body was not read whole (refused by its size, key or method) also closes
 * its connection, so the rest of that body is never read.
 */
export function answerError(req: IncomingMessage, res: ServerResponse, error: HttpError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const unread = !req.complete;
  res.writeHead(error.status, { "content-type": "application/json", ...error.headers, ...(unread ? { connection: "close" } : {}) }).end(error.body());
  if (unread) res.once("finish", () => linger(req));
}

/**
 * Closes the connection of a request whose body was refused unread, once the
 * client had a moment to stop sending: destroyed at once, a client still
 * writing its body gets a reset in place of the answer. The rest is read and
 * dropped for at most LINGER_MS and LINGER_BYTES.
 */
function linger(req: IncomingMessage): void {
  const socket = req.socket;
  if (socket === null || socket.destroyed) return;
  let read = 0;
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  req.on("data", (chunk: Buffer) => {
    read += chunk.length;
    if (read > LINGER_BYTES) socket.destroy();
  });
  socket.once("close", () => clearTimeout(timer));
  req.resume();
}

/**
 * The HTTP server of the gateway, its client bounds set from `config` and
 * counted in `counters`; `handle` serves each request (an `Expect:
 * 100-continue` one too, once its declared body fits).
 */
export function createEdgeServer(config: GatewayConfig, counters: EdgeCounters, handle: (req: IncomingMessage, res: ServerResponse) => void): Server {
  const { headersMs, requestMs, keepAliveMs } = config.timeouts;
  const server: Server = createServer(
    {
      keepAliveTimeout: keepAliveMs,
      requestTimeout: requestMs,
      headersTimeout: headersMs,
      // Node checks those timeouts on this interval (30 s by default): a fraction of the shortest keeps them near their word.
      connectionsCheckingInterval: Math.max(50, Math.min(30_000, Math.floor(headersMs / 4))),
    },
    handle,
  );
  // Past the limit Node closes new connections as they arrive (a flood of half-sent requests cannot take every descriptor).
  server.maxConnections = config.limits.maxConnections;
  server.on("drop", () => counters.refusedConnections++);
  server.on("connection", (socket) => {
    counters.connections++;
    socket.once("close", () => counters.connections--);
  });
  // Expect: 100-continue: a body declared over the limit is refused before the client sends it.
  server.on("checkContinue", (req, res) => {
    if (Number(req.headers["content-length"] ?? 0) > config.limits.maxBodyBytes) {
      answerError(req, res, new HttpError(413, `the request body is over limits.max_body_bytes (${config.limits.maxBodyBytes} bytes)`, "invalid_request_error", "payload_too_large"));
      return;
    }
    res.writeContinue();
    handle(req, res);
  });
  // A request Node's parser refuses: a timeout is 408, oversized headers 431, anything else 400.
  server.on("clientError", (error: NodeJS.ErrnoException, socket) => {
    const timedOut = error.code === "ERR_HTTP_REQUEST_TIMEOUT";
    if (timedOut) counters.readTimeouts++;
    else if (error.code === "HPE_HEADER_OVERFLOW") counters.headersTooLarge++;
    else counters.malformed++;
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const [status, text, message] = timedOut
      ? [408, "Request Timeout", `the request was not received in time (timeouts.headers_ms ${headersMs} ms for its head, timeouts.request_ms ${requestMs} ms for all of it)`]
      : error.code === "HPE_HEADER_OVERFLOW"
        ? [431, "Request Header Fields Too Large", "the request headers are too large"]
        : [400, "Bad Request", "malformed HTTP request"];
    // Ended, then destroyed once written (or after a moment): a client that never closes its side must not keep
    // a half-closed socket, and with it a place under limits.max_connections, for ever.
    const linger = setTimeout(() => socket.destroy(), LINGER_MS);
    linger.unref();
    socket.end(`HTTP/1.1 ${status} ${text}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${new HttpError(status, message).body()}`, () => {
      clearTimeout(linger);
      socket.destroy();
    });
  });
  return server;
}
