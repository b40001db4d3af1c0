// `limits.max_connections` under `serve --workers N` is the gateway's: each
// worker holds up to its share (1/N, rounded up), and a connection that
// arrives at a worker holding its share is passed, through the primary, to a
// sibling with room; only one that no worker has room for is closed. Without
// this a worker refused connections while its sibling had room: with
// `connection_balance: kernel` whichever worker is awake accepts a burst (one
// took all four of four connections under max_connections 4, and closed two),
// and with `round_robin` node:cluster hands a connection a worker refuses to
// the next one, and back, for as long as every worker is full (its primary
// spun at 60% of a core while excess clients waited unanswered).
//
// A connection is passed as its bare descriptor before anything is read from
// it (the worker's server has not started on it), so the worker that takes it
// serves it as one it accepted. Each hop is a message with a descriptor (a few
// hundred µs of the primary's CPU), paid only past a share; a worker has at
// most MAX_PASSING connections on their way at once and closes any further
// one over its share at once, so a flood past the limit costs bounded work.

import type { Server, Socket } from "node:net";

/** The type of every overflow message between a worker and the primary. */
export const OVERFLOW_MESSAGE = "adp-gateway-overflow";
/** Connections a worker is passing on at once, at most (past it, one over its share is closed at once). */
export const MAX_PASSING = 32;

/**
 * An overflow message: a worker hands a connection to the primary (`pass`,
 * with its descriptor), the primary offers it to a worker that has not had it
 * (`take`, with its descriptor), or tells the worker that last passed it that
 * no other could take it (`refused`: that worker counts it). `tried` names the
 * workers that had it, in order.
 */
export interface OverflowMessage {
  readonly type: typeof OVERFLOW_MESSAGE;
  readonly op: "pass" | "take" | "refused";
  readonly tried: readonly number[];
}

/** Whether `m` is an overflow message (checked whole: the channel is the primary's, but a message is data). */
export function isOverflowMessage(m: unknown): m is OverflowMessage {
  if (typeof m !== "object" || m === null || (m as { type?: unknown }).type !== OVERFLOW_MESSAGE) return false;
  const x = m as Record<string, unknown>;
  return (x.op === "pass" || x.op === "take" || x.op === "refused") && Array.isArray(x.tried) && x.tried.length <= 1024 && x.tried.every((n) => Number.isSafeInteger(n));
}

/** A connection's descriptor as libuv holds it (node's TCP handle): what a message can carry. */
export interface NativeHandle {
  readStop(): number;
  close(callback?: () => void): void;
}

/** Sends a message with a descriptor to the primary; `done` is called once it was written (null) or could not be (the error). */
export type SendToPrimary = (message: OverflowMessage, handle: NativeHandle, done: (error: Error | null) => void) => void;

/** The edge's counts a gate reads and adds to (edge.ts's EdgeCounters). */
export interface ConnectionCounts {
  /** Client connections open now. */
  readonly connections: number;
  /** Connections closed on arrival: no worker had room. */
  refusedConnections: number;
  /** Connections past this worker's share handed on to be offered to another. */
  passedConnections: number;
}

/** What a worker's server edge needs of the overflow (edge.ts calls attach once its connection listeners are on). */
export interface ConnectionGate {
  /** Puts the gate before `server`'s connection listeners: a connection arriving at `limit` open ones is passed on or closed. */
  attach(server: Server, counts: ConnectionCounts, limit: number): void;
}

/** node's own view of a socket and a server, read to take a connection's descriptor and to accept a passed one. */
interface NodeSocket {
  _handle: NativeHandle | null;
}
interface NodeServer {
  _handle: { onconnection?: (status: number, handle: NativeHandle) => void } | null;
}

/** A worker's side: the gate on its server, and what it does with a connection the primary offers it. */
export class ConnectionOverflow implements ConnectionGate {
  readonly #send: SendToPrimary;
  readonly #self: number;
  readonly #workers: number;
  #server: Server | null = null;
  #counts: ConnectionCounts = { connections: 0, refusedConnections: 0, passedConnections: 0 };
  #limit = Infinity;
  /** Connections handed to the primary and not yet sent. */
  #passing = 0;
  /** While a connection the primary offered is being accepted: the workers that had it before. */
  #offered: readonly number[] | null = null;

  /** `send` reaches the primary; `self` is this worker's number, of `workers`. */
  constructor(send: SendToPrimary, self: number, workers: number) {
    this.#send = send;
    this.#self = self;
    this.#workers = workers;
  }

  attach(server: Server, counts: ConnectionCounts, limit: number): void {
    this.#server = server;
    this.#counts = counts;
    this.#limit = limit;
    // One listener in place of them all, so that a connection passed on reaches none of them (node:http's or the own
    // path's would start reading it).
    const listeners = server.listeners("connection") as ((this: Server, socket: Socket) => void)[];
    server.removeAllListeners("connection");
    server.on("connection", (socket: Socket) => {
      if (this.#admits(socket)) for (const listener of listeners) listener.call(server, socket);
    });
  }

  /** Whether `socket` is served here; if not, it was passed on or closed. */
  #admits(socket: Socket): boolean {
    const before = this.#offered;
    if (this.#counts.connections < this.#limit) return true;
    const tried = [...(before ?? []), this.#self];
    const handle = (socket as unknown as NodeSocket)._handle;
    if (tried.length >= this.#workers || this.#passing >= MAX_PASSING || handle === null) {
      socket.destroy();
      this.#counts.refusedConnections++;
      return false;
    }
    // The descriptor leaves this socket unread: the socket closes without it (node's count of the server's
    // connections with it) and the message closes this process's copy once sent.
    handle.readStop();
    (socket as unknown as NodeSocket)._handle = null;
    socket.destroy();
    this.#passing++;
    this.#counts.passedConnections++;
    this.#send({ type: OVERFLOW_MESSAGE, op: "pass", tried }, handle, (error) => {
      this.#passing--;
      // node closes no bare descriptor it sent: this copy goes once the message holds its own (or it was not sent).
      handle.close();
      if (error !== null) this.#counts.refusedConnections++;
    });
    return false;
  }

  /**
   * Handles a message from the primary: a connection offered (`take`: accepted
   * as if this server had, then served or passed on again) or one this worker
   * passed that no other could take (`refused`: the worker that closes a
   * connection counts it). Returns whether it was one.
   */
  receive(m: unknown, handle: unknown): boolean {
    if (!isOverflowMessage(m)) return false;
    if (m.op === "refused") {
      this.#counts.refusedConnections++;
      return true;
    }
    if (!isNativeHandle(handle)) return true;
    const accept = (this.#server as unknown as NodeServer | null)?._handle?.onconnection;
    if (m.op !== "take" || accept === undefined) {
      // Not an offer (a descriptor is only ever offered), or this worker no longer listens (it is stopping).
      handle.close();
      this.#counts.refusedConnections++;
      return true;
    }
    this.#offered = m.tried;
    try {
      // node's own accept path (net's onconnection): the socket, its server's count and 'connection', as for one accepted here.
      accept.call((this.#server as unknown as NodeServer)._handle, 0, handle);
    } finally {
      this.#offered = null;
    }
    return true;
  }
}

/** Whether `h` is a descriptor a message brought. */
export const isNativeHandle = (h: unknown): h is NativeHandle => typeof h === "object" && h !== null && typeof (h as NativeHandle).close === "function" && typeof (h as NativeHandle).readStop === "function";

/** A worker as the primary reaches it: its number, and how to send it a message with a descriptor. */
export interface OverflowTarget {
  readonly slot: number;
  send(message: OverflowMessage, handle: NativeHandle | undefined, done: (error: Error | null) => void): void;
}

/**
 * The primary's side: offers a connection `from` passed to the next listening
 * worker after it that has not had it (in worker order, wrapping); with none,
 * or when the offer cannot be sent, it closes the descriptor and tells `from`,
 * which counts the refusal.
 */
export function relayOverflow(m: OverflowMessage, handle: NativeHandle, from: OverflowTarget, listening: readonly OverflowTarget[]): void {
  const after = [...listening].sort((a, b) => a.slot - b.slot);
  const start = after.findIndex((t) => t.slot > from.slot);
  const order = start < 0 ? after : [...after.slice(start), ...after.slice(0, start)];
  const next = order.find((t) => t.slot !== from.slot && !m.tried.includes(t.slot));
  const refuse = () => {
    handle.close();
    from.send({ type: OVERFLOW_MESSAGE, op: "refused", tried: m.tried }, undefined, () => {});
  };
  if (m.op !== "pass" || next === undefined) return refuse();
  next.send({ type: OVERFLOW_MESSAGE, op: "take", tried: m.tried }, handle, (error) => {
    if (error !== null) return refuse();
    handle.close(); // the message holds its own copy
  });
}
