// `limits.max_connections` under `serve --workers N` is the gateway's: each
// worker holds up to its share (the N shares add up to the limit), and a
// connection that arrives at a worker holding its share is passed, through
// the primary, to a sibling with room; only one that no worker has room for
// is closed. Without this a worker refused connections while its sibling had
// room: with `connection_balance: kernel` whichever worker is awake accepts a
// burst (one took all four of four connections under max_connections 4, and
// closed two), and with `round_robin` node:cluster hands a connection a worker
// refuses to the next one, and back, for as long as every worker is full (its
// primary spun at 60% of a core while excess clients waited unanswered).
//
// A connection is passed as its bare descriptor before anything is read from
// it (the worker's server has not started on it), so the worker that takes it
// serves it as one it accepted. Each hop is a message with a descriptor (about
// 25 µs of the primary's CPU: 0.57 s for 11,180 connections of a flood, two
// hops each, before the pause below), paid only past a share. Work and
// descriptors stay bounded under a flood: a worker has at most MAX_PASSING
// connections on their way, the primary at most MAX_PASSING offers queued to
// each worker (node sends a channel's descriptors one at a time, each
// acknowledged), and a worker told that every worker was full closes what
// arrives past its share at once for FULL_PAUSE_MS, before any hop.

import type { Server, Socket } from "node:net";

/** The type of every overflow message between a worker and the primary. */
export const OVERFLOW_MESSAGE = "adp-gateway-overflow";
/**
 * Connections a worker is passing on at once, and offers the primary has
 * queued to one worker, at most: above a burst one worker may accept in a
 * poll (256 was not: 51-243 of 500-550 burst connections were closed with
 * room left), below what a process's descriptors allow.
 */
export const MAX_PASSING = 1024;
/**
 * How long a worker told that every worker was full closes a connection past
 * its share at once: a flood at a full gateway then costs the primary a hop
 * each FULL_PAUSE_MS a worker, and a connection that closes meanwhile leaves
 * room that a new one finds this much later at most.
 */
export const FULL_PAUSE_MS = 10;

/**
 * An overflow message: a worker hands a connection to the primary (`pass`,
 * with its descriptor), the primary offers it to a worker that has not had it
 * (`take`, with its descriptor), or one that none could take is reported to
 * the worker that first passed it (`refused`, no descriptor: that worker
 * counts it, and with `full`, every worker having had no room, closes what
 * arrives past its share at once for a moment). `tried` names the workers that
 * had it, the first first.
 */
export interface OverflowMessage {
  readonly type: typeof OVERFLOW_MESSAGE;
  readonly op: "pass" | "take" | "refused";
  readonly tried: readonly number[];
  readonly full?: boolean;
}

/** Whether `m` is an overflow message (checked whole: the channel is the primary's, but a message is data). */
export function isOverflowMessage(m: unknown): m is OverflowMessage {
  if (typeof m !== "object" || m === null || (m as { type?: unknown }).type !== OVERFLOW_MESSAGE) return false;
  const x = m as Record<string, unknown>;
  return (x.op === "pass" || x.op === "take" || x.op === "refused") && Array.isArray(x.tried) && x.tried.length >= 1 && x.tried.length <= 1024 && x.tried.every((n) => Number.isSafeInteger(n)) && (x.full === undefined || typeof x.full === "boolean");
}

/** A connection's descriptor as libuv holds it (node's TCP handle): what a message can carry. */
export interface NativeHandle {
  readStop(): number;
  close(callback?: () => void): void;
}

/** Whether `h` is a descriptor a message brought. */
export const isNativeHandle = (h: unknown): h is NativeHandle => typeof h === "object" && h !== null && typeof (h as NativeHandle).close === "function" && typeof (h as NativeHandle).readStop === "function";

/** Sends a message, with a descriptor or none, to the primary or a worker; `done` is called once it was written (null) or could not be (the error). */
export type SendMessage = (message: OverflowMessage, handle: NativeHandle | undefined, done: (error: Error | null) => void) => void;

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
  _handle: (NativeHandle & { reading?: boolean }) | null;
}
interface NodeServer {
  _handle: { onconnection?: (status: number, handle: NativeHandle) => void } | null;
}

/** A worker's side: the gate on its server, and what it does with a connection the primary offers it. */
export class ConnectionOverflow implements ConnectionGate {
  readonly #send: SendMessage;
  readonly #self: number;
  readonly #workers: number;
  readonly #now: () => number;
  #server: Server | null = null;
  #counts: ConnectionCounts = { connections: 0, refusedConnections: 0, passedConnections: 0 };
  #limit = Infinity;
  /** Connections handed to the primary and not yet written to it. */
  #passing = 0;
  /** While a connection the primary offered is being accepted: the workers that had it before. */
  #offered: readonly number[] | null = null;
  /** Until when (#now) a connection past the share is closed at once: none had room a moment ago. */
  #fullUntil = -Infinity;

  /** `send` reaches the primary; `self` is this worker's number, of `workers`; `now` is the clock in ms (performance.now). */
  constructor(send: SendMessage, self: number, workers: number, now: () => number = () => performance.now()) {
    this.#send = send;
    this.#self = self;
    this.#workers = workers;
    this.#now = now;
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

  /** Whether `socket` is served here; if not, its descriptor was passed on or closed. */
  #admits(socket: Socket): boolean {
    if (this.#counts.connections < this.#limit) return true;
    const handle = (socket as unknown as NodeSocket)._handle;
    // The descriptor leaves the socket unread: the socket closes without it (node's count of the server's connections
    // with it), and the descriptor is passed on or closed.
    (socket as unknown as NodeSocket)._handle = null;
    socket.destroy();
    if (handle !== null) {
      // node's socket started reading it (in this tick: nothing was read); stopped, as a socket made on it expects.
      handle.readStop();
      handle.reading = false;
      this.#passOn(handle, this.#offered ?? []);
    }
    return false;
  }

  /** Passes `handle` (had by the workers `before`, not this one) to the primary for another worker, or closes it as none has room. */
  #passOn(handle: NativeHandle, before: readonly number[]): void {
    const tried = [...before, this.#self];
    const everyWorker = tried.length >= this.#workers;
    if (everyWorker || this.#passing >= MAX_PASSING || this.#now() < this.#fullUntil) {
      handle.close();
      this.#refused(tried, everyWorker);
      return;
    }
    this.#passing++;
    this.#counts.passedConnections++;
    this.#send({ type: OVERFLOW_MESSAGE, op: "pass", tried }, handle, (error) => {
      this.#passing--;
      // node closes no bare descriptor it sent: this copy goes once the message holds its own (or it was not sent).
      handle.close();
      if (error !== null) this.#refused(tried, false);
    });
  }

  /**
   * Counts a closed connection where it arrived first: here, or by telling the
   * primary which worker that was (`full`: every worker had no room, and that
   * worker closes what arrives past its share at once for a moment).
   */
  #refused(tried: readonly number[], full: boolean): void {
    if (tried[0] !== this.#self) return this.#send({ type: OVERFLOW_MESSAGE, op: "refused", tried, full }, undefined, () => {});
    this.#counts.refusedConnections++;
    if (full) this.#fullUntil = this.#now() + FULL_PAUSE_MS;
  }

  /**
   * Handles a message from the primary: a connection offered (`take`: accepted
   * as if this server had, then served or passed on again) or one this worker
   * passed that none could take (`refused`). Returns whether it was one; a
   * descriptor that came with another message is closed.
   */
  receive(m: unknown, handle: unknown): boolean {
    if (!isOverflowMessage(m)) return false;
    const descriptor = isNativeHandle(handle) ? handle : null;
    if (m.op === "refused" && m.tried[0] === this.#self) this.#refused(m.tried, m.full === true);
    if (descriptor === null) return true;
    const accept = (this.#server as unknown as NodeServer | null)?._handle?.onconnection;
    if (m.op !== "take" || m.tried.includes(this.#self)) {
      descriptor.close();
      return true;
    }
    // A worker that no longer listens (it is stopping) has no room: the connection goes on, as from a full one.
    if (accept === undefined) {
      this.#passOn(descriptor, m.tried);
      return true;
    }
    this.#offered = m.tried;
    try {
      // node's own accept path (net's onconnection): the socket, its server's count and 'connection', as for one accepted here.
      accept.call((this.#server as unknown as NodeServer)._handle, 0, descriptor);
    } finally {
      this.#offered = null;
    }
    return true;
  }
}

/** A worker as the primary reaches it: its number, and how to send it a message. */
export interface OverflowTarget {
  readonly slot: number;
  readonly send: SendMessage;
}

/**
 * The primary's side: offers a connection a worker passed to the next
 * listening worker after the sender that has not had it (in worker order,
 * wrapping), at most MAX_PASSING queued to each; a connection with no worker
 * to go to is closed and reported to the worker that first had it (as `full`
 * when every listening worker had it). An offer still queued to a worker that
 * exits is closed and reported the same way.
 */
export class OverflowRelay {
  readonly #listening: () => readonly OverflowTarget[];
  /** Each worker's offers written to its channel's queue and not yet sent, by slot. */
  readonly #queued = new Map<number, Set<NativeHandle>>();
  /** The first worker of each queued offer, to report it to if it is never sent. */
  readonly #origin = new Map<NativeHandle, readonly number[]>();

  /** `listening`: the workers that listen now (the primary's own list). */
  constructor(listening: () => readonly OverflowTarget[]) {
    this.#listening = listening;
  }

  /** Handles a worker's overflow message (`from`, with the descriptor it brought, if any); `stopping`: the gateway stops, none is offered. */
  receive(m: OverflowMessage, handle: NativeHandle | undefined, from: number, stopping: boolean): void {
    if (m.op === "refused") return this.#report(m.tried, m.full === true);
    if (handle === undefined) return;
    if (m.op !== "pass" || stopping || m.tried[m.tried.length - 1] !== from) return this.#refuse(handle, m.tried, false);
    const targets = [...this.#listening()].sort((a, b) => a.slot - b.slot);
    const start = targets.findIndex((t) => t.slot > from);
    const order = start < 0 ? targets : [...targets.slice(start), ...targets.slice(0, start)];
    const untried = order.filter((t) => !m.tried.includes(t.slot));
    const next = untried.find((t) => (this.#queued.get(t.slot)?.size ?? 0) < MAX_PASSING);
    if (next === undefined) return this.#refuse(handle, m.tried, untried.length === 0);
    const queued = this.#queued.get(next.slot) ?? new Set<NativeHandle>();
    this.#queued.set(next.slot, queued);
    queued.add(handle);
    this.#origin.set(handle, m.tried);
    next.send({ type: OVERFLOW_MESSAGE, op: "take", tried: m.tried }, handle, (error) => {
      // Settled already when its worker exited first.
      if (!queued.delete(handle)) return;
      this.#origin.delete(handle);
      if (error !== null) return this.#refuse(handle, m.tried, false);
      handle.close(); // the message holds its own copy
    });
  }

  /** Worker `slot` exited: its queued offers will never be sent (node drops them with the channel); each is closed and reported. */
  exited(slot: number): void {
    const queued = [...(this.#queued.get(slot) ?? [])];
    // Emptied (not only dropped): a send that settles after all finds its offer settled.
    this.#queued.get(slot)?.clear();
    this.#queued.delete(slot);
    for (const handle of queued) this.#refuse(handle, this.#origin.get(handle) ?? [], false);
  }

  /** Closes `handle` and reports it to the first worker that had it (`full`: every worker was full). */
  #refuse(handle: NativeHandle, tried: readonly number[], full: boolean): void {
    this.#origin.delete(handle);
    handle.close();
    this.#report(tried, full);
  }

  /** Tells the first worker of `tried` (when it still listens) that its connection was closed (`full`: none had room). */
  #report(tried: readonly number[], full: boolean): void {
    const origin = this.#listening().find((t) => t.slot === tried[0]);
    origin?.send({ type: OVERFLOW_MESSAGE, op: "refused", tried, full }, undefined, () => {});
  }
}
