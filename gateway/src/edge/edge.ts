// The gateway's HTTP edge: the server with its bounds on clients (a
// connection limit, head and whole-request read timeouts, the keep-alive
// time), reading a request body within its limit, answering errors
// OpenAI-style, request ids, and the `Via` hop that stops loops. Each bound
// has a counter in /metrics. Connections start on the gateway's own server
// path (http1/server-connection.ts), which serves the completion routes in a
// narrow grammar and hands anything else, unread, to node:http.

import { randomUUID } from "node:crypto";
import { createServer, IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { GatewayConfig } from "../config/config.js";
import { HttpError } from "../requests/openai.js";
import type { EdgeRequest, EdgeResponse } from "../http1/edge-types.js";
import { ServerConnection, type ServerPath } from "../http1/server-connection.js";
import { SlotArray } from "../common/slot-array.js";
import type { ConnectionGate } from "../workers/connection-overflow.js";
import { RequestCounts } from "./request-counts.js";
import { ReceivingBudget } from "./receiving-budget.js";

/** The edge's counters (metrics.ts prints them). */
export interface EdgeCounters {
  /** Client connections open now. */
  connections: number;
  /** Connections closed on arrival because `limits.max_connections` were open. */
  refusedConnections: number;
  /** Connections past this worker's share of `limits.max_connections` passed to another worker (`--workers`). */
  passedConnections: number;
  /** Requests whose head or body was not received in time (408). */
  readTimeouts: number;
  /** Requests that carried this gateway's own `Via` entry back (508). */
  loops: number;
  /** Requests refused as malformed (400: by Node's parser, or an HTTP/1.1 one without Host) or with headers too large (431). */
  malformed: number;
  headersTooLarge: number;
  /** Bytes of request bodies being received now (limits.max_receiving_bytes). */
  receivingBytes: number;
  /** Bodies refused because those bytes were at their limit (503). */
  bodiesRefused: number;
}

/** How long a connection answered and closed by the edge may take to send the rest of what it was sending, at most. */
const LINGER_MS = 250;
/** How much of a refused body is read (and dropped) meanwhile, at most. */
const LINGER_BYTES = 1 << 20;
/** How long a refusal on node:http's path waits, at most, for the answers before it to be written and read. */
const REFUSAL_PATIENCE_MS = 30_000;

/** A request id taken from a client: visible ASCII, at most 128 characters (anything else is replaced). */
const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

/**
 * The ids this process gives requests: UUID-shaped, a random prefix drawn at
 * start and a 48-bit count (unique per process and across processes, as
 * x-request-id needs; no entropy drawn per request: an id correlates log lines
 * and is no secret).
 */
const ID_PREFIX = randomUUID().slice(0, 24);
let idCount = 0;

/** The request's id: the client's `x-request-id` when it is a sane one, else a fresh one. */
export function requestIdOf(req: EdgeRequest): string {
  const given = req.headers["x-request-id"];
  const text = Array.isArray(given) ? given[0] : given;
  if (text !== undefined && REQUEST_ID.test(text)) return text;
  idCount = (idCount + 1) % 2 ** 48;
  return ID_PREFIX + idCount.toString(16).padStart(12, "0");
}

/**
 * The request body, at most `limit` bytes (413 past it); 499 when the client
 * hangs up mid-body. Its bytes are taken from `budget` as they come, and
 * given back once it is whole or failed (503 when the budget has none).
 */
export function readBody(req: IncomingMessage, limit: number, budget: ReceivingBudget | null = null): Promise<Buffer> {
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
      budget?.give(size);
      if (error === null) resolve(Buffer.concat(chunks, size));
      else reject(error);
    };
    const onData = (chunk: Buffer) => {
      if (size + chunk.length > limit) return finish(new HttpError(413, `the request body is over limits.max_body_bytes (${limit} bytes)`, "invalid_request_error", "payload_too_large"));
      if (budget !== null && !budget.take(chunk.length)) return finish(busyReceiving());
      size += chunk.length;
      chunks.push(chunk);
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

/** The answer to a body refused for want of receiving bytes (limits.max_receiving_bytes). */
const busyReceiving = () => new HttpError(503, "the gateway is receiving as many request bodies as limits.max_receiving_bytes allows: send it again shortly", "server_error", "server_busy", { "retry-after": "1" });

/**
 * Answers `error` OpenAI-style (when nothing was sent yet). A request whose
 * body was not read whole (refused by its size, key or method) also closes
 * its connection, so the rest of that body is never read.
 */
export function answerError(req: EdgeRequest, res: EdgeResponse, error: HttpError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  // Only node:http's requests can be answered unread (the own server path reads a body whole first), and only one
  // that declares a body (node:http runs handlers before it marks a bodiless request complete).
  const unread = req instanceof IncomingMessage && !req.complete && (req.headers["transfer-encoding"] !== undefined || Number(req.headers["content-length"] ?? 0) > 0);
  res.writeHead(error.status, { "content-type": "application/json", ...error.headers, ...(unread ? { connection: "close" } : {}) }).end(error.body());
  if (unread) (res as ServerResponse).once("finish", () => linger(req));
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

/** The gateway's HTTP server, and the connections of its own server path beside node:http's. */
export interface EdgeServer {
  readonly server: Server;
  /** Closes idle connections (both paths'); busy ones close once their answer ends. */
  closeIdleConnections(): void;
  /** Closes every connection now. */
  closeAllConnections(): void;
}

/** What serves the edge's requests. */
export interface EdgeHandler {
  /** Serves one request: `body` is its body when the own server path read it, null for node:http's (read it with readBody). */
  serve(req: EdgeRequest, res: EdgeResponse, body: Buffer | null): void;
  /** A request the own server path read the head of, whose body never came (counted as node:http's would be: its client closed it). */
  abandoned(req: EdgeRequest): void;
  /** The bytes of request bodies being received (limits.max_receiving_bytes), both server paths together. */
  readonly receiving: ReceivingBudget;
}

/** The paths the own server path serves (every other request goes to node:http). */
const OWN_PATHS: ReadonlySet<string> = new Set(["/v1/chat/completions", "/v1/completions"]);

/**
 * The HTTP server of the gateway, its client bounds set from `config` and
 * counted in `counters`; `handle` serves each request (an `Expect:
 * 100-continue` one too, once its declared body fits). `own`: connections
 * start on the gateway's own server path (false: node:http serves them all).
 * `gate` (a worker's): decides each new connection past the connection limit.
 */
export function createEdgeServer(config: GatewayConfig, counters: EdgeCounters, handle: EdgeHandler, own = true, gate: ConnectionGate | null = null): EdgeServer {
  const { headersMs, requestMs, keepAliveMs } = config.timeouts;
  const requests = new RequestCounts(config.limits.maxRequestsPerConnection);
  const server: Server = createServer(
    {
      keepAliveTimeout: keepAliveMs,
      requestTimeout: requestMs,
      headersTimeout: headersMs,
      // Node checks those timeouts on this interval (30 s by default): a fraction of the shortest keeps them near their word.
      connectionsCheckingInterval: checkingInterval(headersMs),
      // Checked by hostless() below: node:http's own check answers an empty 400 that no metric or log line sees.
      requireHostHeader: false,
    },
    (req, res) => {
      const refused = requests.admit(req, res) ?? hostless(req, counters);
      if (refused === null) handle.serve(req, res, null);
      else answerError(req, res, refused);
    },
  );
  // Counted by `requests` (request-counts.ts); node:http's own count, which cannot run ahead of it, says the limit in
  // each answer's Keep-Alive header (a property: createServer takes no such option on Node 20).
  server.maxRequestsPerSocket = config.limits.maxRequestsPerConnection;
  // Past the limit Node closes new connections as they arrive (a flood of half-sent requests cannot take every descriptor);
  // a worker's gate first passes them to a sibling with room (attached below, once every connection listener is on).
  if (gate === null) server.maxConnections = config.limits.maxConnections;
  server.on("drop", () => counters.refusedConnections++);
  server.on("connection", (socket) => {
    counters.connections++;
    socket.once("close", () => counters.connections--);
  });
  // Expect: 100-continue: a body declared over the limit is refused before the client sends it.
  server.on("checkContinue", (req, res) => {
    const refused = requests.admit(req, res) ?? hostless(req, counters);
    if (refused !== null) return answerError(req, res, refused);
    if (Number(req.headers["content-length"] ?? 0) > config.limits.maxBodyBytes) {
      answerError(req, res, new HttpError(413, `the request body is over limits.max_body_bytes (${config.limits.maxBodyBytes} bytes)`, "invalid_request_error", "payload_too_large"));
      return;
    }
    res.writeContinue();
    handle.serve(req, res, null);
  });
  // Any other expectation: 417, as node:http would answer it (counted, so the connection closes when it is its last).
  server.on("checkExpectation", (req, res) => {
    answerError(req, res, requests.admit(req, res) ?? hostless(req, counters) ?? new HttpError(417, "the gateway meets no expectation but 100-continue", "invalid_request_error", "expectation_failed"));
  });
  // CONNECT (node:http would destroy the connection unanswered): no tunnels here.
  // node:http lets go of the socket as it emits 'connect' (its error listener and its place among the server's
  // connections): an error is ignored here ('close' follows), and closing the server destroys it.
  const tunnels = new Set<Duplex>();
  server.on("connect", (_req, socket: Duplex) => {
    socket.on("error", () => {});
    tunnels.add(socket);
    socket.once("close", () => tunnels.delete(socket));
    refuseAfterAnswers(socket, 405, "CONNECT is not served", REFUSAL_PATIENCE_MS);
  });
  // A request Node's parser refuses: a timeout is 408, oversized headers 431, anything else 400 (bytes after a request
  // that said close too).
  server.on("clientError", (error: NodeJS.ErrnoException, socket) => {
    const timedOut = error.code === "ERR_HTTP_REQUEST_TIMEOUT";
    const [status, message] = timedOut ? [408, readTimeoutMessage(config)] : error.code === "HPE_HEADER_OVERFLOW" ? [431, "the request headers are too large"] : [400, "malformed HTTP request"];
    if (!refuseAfterAnswers(socket, status, message, REFUSAL_PATIENCE_MS)) return;
    if (timedOut) counters.readTimeouts++;
    else if (status === 431) counters.headersTooLarge++;
    else counters.malformed++;
  });
  const ownPath = own ? attachOwnPath(server, config, counters, handle, requests) : null;
  gate?.attach(server, counters, config.limits.connectionShare);
  return {
    server,
    closeIdleConnections() {
      server.closeIdleConnections();
      ownPath?.closeIdle();
    },
    closeAllConnections() {
      server.closeAllConnections();
      ownPath?.closeAll();
      for (const socket of tunnels) socket.destroy();
    },
  };
}

/** How often the read timeouts are checked: a fraction of the shortest keeps them near their word. */
const checkingInterval = (headersMs: number) => Math.max(50, Math.min(30_000, Math.floor(headersMs / 4)));

/** What a 408 says. */
const readTimeoutMessage = (config: GatewayConfig) =>
  `the request was not received in time (timeouts.headers_ms ${config.timeouts.headersMs} ms for its head, timeouts.request_ms ${config.timeouts.requestMs} ms for all of it)`;

/** The reason phrases of the statuses a connection is refused with. */
const REFUSALS: Readonly<Record<number, string>> = { 400: "Bad Request", 405: "Method Not Allowed", 408: "Request Timeout", 431: "Request Header Fields Too Large" };

/** The refusal of an HTTP/1.1 request without a Host header (RFC 9112 3.2: a server answers 400), counted as malformed; null when it has one. */
function hostless(req: IncomingMessage, counters: EdgeCounters): HttpError | null {
  if (req.headers.host !== undefined || req.httpVersionMajor !== 1 || req.httpVersionMinor < 1) return null;
  counters.malformed++;
  return new HttpError(400, "an HTTP/1.1 request must carry a Host header", "invalid_request_error", "invalid_request");
}

/**
 * Answers a connection whose request cannot be read (malformed, too large,
 * too slow) and closes it: ended, then destroyed when the client ends its
 * side, or LINGER_MS after the refusal was written, or `patienceMs` after
 * this call, whichever is first. What the client still sends meanwhile is
 * read and dropped: destroyed with bytes unread, the socket would send a
 * reset, which can take the refusal (and an answer before it) from a client
 * yet to read them. A client that never closes its side does not keep a
 * half-closed socket, and with it a place under limits.max_connections.
 */
function refuseConnection(socket: Duplex, status: number, message: string, patienceMs: number): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const destroy = () => socket.destroy();
  const patience = setTimeout(destroy, patienceMs);
  patience.unref();
  let linger: ReturnType<typeof setTimeout> | null = null;
  socket.once("close", () => {
    clearTimeout(patience);
    if (linger !== null) clearTimeout(linger);
  });
  socket.once("end", destroy);
  socket.end(`HTTP/1.1 ${status} ${REFUSALS[status]}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${new HttpError(status, message).body()}`, () => {
    linger = setTimeout(destroy, LINGER_MS);
    linger.unref();
  });
  socket.resume();
}

/** Sockets whose refusal is decided (node:http's parser, in error, reports each later read of theirs again). */
const refusing = new WeakSet<Duplex>();

/**
 * Refuses a connection once the answers to the requests node:http read whole
 * before the refused bytes went out (a client that pipelined them): answering
 * at once would put the refusal where the client reads the first of those
 * answers, and closing would cut them, though their requests reached an
 * engine. The request the refusal is about (its body cut by a bad chunk or
 * late) is never waited for: its answer cannot come; nor are answers past
 * `patienceMs` (a client that does not read them). A refusal after an answer
 * that said close (bytes sent after a request saying close) is not sent:
 * node:http closes the connection after that answer. False when the
 * connection's refusal was decided already (then nothing is done or counted).
 */
function refuseAfterAnswers(socket: Duplex, status: number, message: string, patienceMs: number): boolean {
  if (refusing.has(socket)) return false;
  refusing.add(socket);
  const waitUntil = performance.now() + patienceMs;
  const next = () => {
    // node:http's answer on the socket now (the next one it queued takes its place when it ends).
    const answering = (socket as { _httpMessage?: ServerResponse | null })._httpMessage;
    const left = waitUntil - performance.now();
    if (answering === undefined || answering === null || socket.destroyed || !answering.req.complete || left <= 0) return refuseConnection(socket, status, message, Math.max(left, LINGER_MS));
    const give = setTimeout(next, left);
    give.unref();
    answering.once("close", () => {
      clearTimeout(give);
      setImmediate(next);
    });
  };
  next();
  return true;
}

/** The own server path's connections: what closing the server does to them. */
interface OwnPath {
  closeIdle(): void;
  closeAll(): void;
}

/**
 * Puts new connections on the gateway's own server path: node:http's
 * connection listener is taken off the server and called for a connection
 * only when the own path hands it over (or null, changing nothing, on a Node
 * whose server has no such listener).
 */
function attachOwnPath(server: Server, config: GatewayConfig, counters: EdgeCounters, handle: EdgeHandler, requests: RequestCounts): OwnPath | null {
  const nodeListener = server.listeners("connection").find((l) => l.name === "connectionListener") as ((this: Server, socket: Socket) => void) | undefined;
  if (nodeListener === undefined) return null;
  server.removeListener("connection", nodeListener);
  const { headersMs, requestMs } = config.timeouts;
  // A configuration file gives at least 1,000 ms; a GatewayConfig built in code with 0 keeps an idle connection as
  // long as it stays open, as node:http's keepAliveTimeout 0 does.
  const keepAliveMs = config.timeouts.keepAliveMs > 0 ? config.timeouts.keepAliveMs : Infinity;
  const maxRequests = config.limits.maxRequestsPerConnection;
  // A SlotArray, not a Set: a client without keep-alive brings one connection a request (common/slot-array.ts).
  const connections = new SlotArray<ServerConnection>();
  const path: ServerPath = {
    takes: (p) => OWN_PATHS.has(p),
    maxBodyBytes: config.limits.maxBodyBytes,
    maxRequests: maxRequests > 0 ? maxRequests : Infinity,
    // As node:http words it: its limit of requests a connection, not those left (0: none said).
    keepAliveHeader: keepAliveMs < Infinity ? `Keep-Alive: timeout=${Math.floor(keepAliveMs / 1000)}${maxRequests > 0 ? `, max=${maxRequests}` : ""}\r\n` : null,
    serve: (req, res, body) => handle.serve(req, res, body),
    abandoned: (req) => handle.abandoned(req),
    handOff: (socket, served) => {
      requests.handedOff(socket, served);
      nodeListener.call(server, socket);
    },
    timedOut: (socket) => {
      counters.readTimeouts++;
      // Nothing is being answered on the own path while a request is read: nothing to wait for but the refusal's write.
      refuseConnection(socket, 408, readTimeoutMessage(config), LINGER_MS);
    },
    receiving: handle.receiving,
    busyAnswer: `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n\r\n${busyReceiving().body()}`,
    forget: (c) => connections.delete(c),
  };
  server.on("connection", (socket: Socket) => void connections.add(new ServerConnection(socket, path)));
  // One sweep applies every connection's read and keep-alive bounds (as node:http's own check does), not a timer each.
  const sweep = setInterval(() => {
    const now = performance.now();
    connections.forEachBackward((c) => c.check(now, headersMs, requestMs, keepAliveMs));
  }, checkingInterval(headersMs));
  sweep.unref();
  server.once("close", () => clearInterval(sweep));
  return {
    closeIdle: () => {
      for (const c of connections.toArray()) c.closeIdle();
    },
    closeAll: () => {
      for (const c of connections.toArray()) c.socket.destroy();
    },
  };
}
