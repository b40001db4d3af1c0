// Direct channels between the workers of `serve --workers N`: one connected
// socket for each pair of workers, over which each sends its batches of shared
// routing changes (sibling-log.ts) straight to the other, so the primary is not
// a hop of every batch. Relayed, a batch cost the primary a wake-up, a parse and
// a write for each receiver (170-200 µs a message however small: on the trace
// most of what `--workers 2` cost beyond one process; docs/performance.md).
//
// The primary (WorkerLinks) makes each pair once both workers listen: it
// listens on a Unix socket in a directory of its own (mode 0700, removed at
// once), connects to it, and sends the two ends to the two workers as handles
// over their IPC channels, keeping neither and reading neither (what a worker
// writes before its sibling holds the other end waits in the kernel). A worker
// (SiblingLinks) takes a link only as such a handle from its primary. While a
// worker has fewer links than siblings (one is starting, a link ended, or
// links cannot be made here: Windows), it also sends its batches through the
// primary, naming the siblings it has links to, and the primary passes each
// to the others. A link that ends is made again (RELINK_MS later) while both
// workers run; one the primary could not make is tried again.
//
// On a link, a batch is one line of JSON (JSON escapes every line break in a
// string) sent under its sender's number. A line longer than MAX_LINE_CHARS,
// one that is not JSON, or one under another number ends the link (counted),
// as does more than MAX_PENDING_BYTES (16 MiB) queued for a sibling that does not read:
// its batches then go through the primary until the link is made again.

import type { Worker } from "node:cluster";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, connect, Socket } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import type { StateMessage } from "./sibling-log.js";

/** The primary's message to a worker that comes with a link's end (`slot`: the worker at its other end); a worker's to the primary that its link to `lost` ended. */
export const LINK_MESSAGE = "adp-gateway-link";

/** Longest line a link takes (a batch is flushed at a quarter of this: sibling-log.ts; one prompt's entry is at most ~1.4 MB). */
export const MAX_LINE_CHARS = 16 * 1024 * 1024;
/** Most bytes queued on a link for a sibling that is not reading (what a stopped sibling costs each sender); past it the link ends. */
const MAX_PENDING_BYTES = 16 * 1024 * 1024;
/** How long after a link ended, or could not be made, the primary makes it again, ms. */
export const RELINK_MS = 1_000;

/** What LINK_MESSAGE carries: from the primary, a link's end to the worker `slot`; from a worker, that its link to `lost` ended. */
export interface LinkMessage {
  readonly type: typeof LINK_MESSAGE;
  readonly slot?: number;
  readonly lost?: number;
}

/** A worker number as link messages carry it. */
const isSlot = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) > 0;

/** Whether `v` is a link message (exactly one of `slot` and `lost`). */
export const isLinkMessage = (v: unknown): v is LinkMessage => {
  if (typeof v !== "object" || v === null || (v as LinkMessage).type !== LINK_MESSAGE) return false;
  const { slot, lost } = v as LinkMessage;
  return slot === undefined ? isSlot(lost) : isSlot(slot) && lost === undefined;
};

/**
 * In the primary: a connected pair of sockets, made through a Unix socket in a
 * fresh private directory that is removed once they are connected. Neither
 * reads (so nothing a worker writes is read here before its sibling holds the
 * other end), and neither is tracked as a server's connection (node would keep
 * a listener per handle sent). Rejects where that cannot be done.
 */
export async function socketPair(): Promise<[Socket, Socket]> {
  if (process.platform === "win32") throw new Error("worker links need Unix sockets");
  const dir = mkdtempSync(path.join(tmpdir(), "adp-gateway-link-"));
  const server = createServer({ pauseOnConnect: true });
  try {
    const where = path.join(dir, "s");
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(where, resolve);
    });
    const accepted = new Promise<Socket>((resolve) => server.once("connection", resolve));
    const client = connect(where).pause().on("error", () => {});
    await new Promise<void>((resolve, reject) => {
      client.once("error", reject);
      client.once("connect", resolve);
    });
    const other = (await accepted).on("error", () => {});
    (other as unknown as { server: unknown }).server = null;
    return [client, other];
  } finally {
    server.close();
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // A directory left in the temporary folder, with no socket listening in it.
    }
  }
}

/** The two slots of a pair, as one key ("a:b", a < b). */
const pairKey = (a: number, b: number): string => (a < b ? `${a}:${b}` : `${b}:${a}`);

/** In the primary: the links between its workers, each pair made once both listen. */
export class WorkerLinks {
  /** The workers and their slots (the primary's map: a worker leaves it when it exits). */
  readonly #slots: ReadonlyMap<Worker, number>;
  /** The slots whose workers listen. */
  readonly #started: ReadonlySet<number>;
  readonly #say: (text: string) => void;
  /** Pairs linked, or being linked: each pair is made once. */
  readonly #linked = new Set<string>();
  /** Ends sent to each worker whose send has not completed (closed here if that worker exits first). */
  readonly #sending = new Map<Worker, Set<Socket>>();
  /** Whether a failure to make a link was said (once). */
  #said = false;

  constructor(slots: ReadonlyMap<Worker, number>, started: ReadonlySet<number>, say: (text: string) => void) {
    this.#slots = slots;
    this.#started = started;
    this.#say = say;
  }

  /** Worker `slot` listens: links it with every other started worker. */
  started(slot: number): void {
    for (const other of this.#slots.values()) if (other !== slot) void this.#link(slot, other);
  }

  /** Worker `slot` says its link to `lost` ended: the pair is made again RELINK_MS later, while both run. */
  lost(slot: number, lost: number): void {
    if (!this.#linked.delete(pairKey(slot, lost))) return; // the other end said so first
    setTimeout(() => void this.#link(slot, lost), RELINK_MS).unref();
  }

  /** Worker `w` (slot `slot`) exited: its pairs are gone (its restart is linked anew), ends still queued to it closed. */
  exited(w: Worker, slot: number): void {
    for (const key of [...this.#linked]) if (key.split(":").includes(String(slot))) this.#linked.delete(key);
    for (const end of this.#sending.get(w) ?? []) end.destroy();
    this.#sending.delete(w);
  }

  /** The worker of `slot`, while it runs and listens. */
  #worker(slot: number): Worker | null {
    if (!this.#started.has(slot)) return null;
    for (const [w, s] of this.#slots) if (s === slot) return w;
    return null;
  }

  /** Makes the link between `a` and `b` unless it exists, is being made, or either is not running. */
  async #link(a: number, b: number): Promise<void> {
    const key = pairKey(a, b);
    if (this.#linked.has(key) || this.#worker(a) === null || this.#worker(b) === null) return;
    this.#linked.add(key);
    let ends: [Socket, Socket];
    try {
      ends = await socketPair();
    } catch (error) {
      this.#linked.delete(key);
      if (!this.#said) this.#say(`the workers cannot be linked directly (${(error as Error).message}): their routing changes go through the primary`);
      this.#said = true;
      if (process.platform !== "win32") setTimeout(() => void this.#link(a, b), 5 * RELINK_MS).unref();
      return;
    }
    // Either may have gone meanwhile: an end handed over is closed by Node once sent; the other is closed here,
    // so a link with one end sent ends at once, and that worker drops it.
    const wa = this.#worker(a);
    const wb = this.#worker(b);
    const toA = wa !== null && wb !== null && this.#send(wa, b, ends[0]);
    const toB = toA && this.#send(wb!, a, ends[1]);
    if (toB) return;
    this.#linked.delete(key);
    if (!toA) ends[0].destroy();
    ends[1].destroy();
  }

  /** Sends worker `w` its end of the link to `slot`; false when its channel is closing. */
  #send(w: Worker, slot: number, end: Socket): boolean {
    if (!w.isConnected()) return false;
    const sending = this.#sending.get(w) ?? new Set<Socket>();
    this.#sending.set(w, sending.add(end));
    // The primary's copy is closed once sent (keepOpen false), or here when it could not be.
    w.send({ type: LINK_MESSAGE, slot } satisfies LinkMessage, end, { keepOpen: false }, (error) => {
      sending.delete(end);
      if (error) end.destroy();
    });
    return true;
  }
}

/** Counters of a worker's links that ended. */
export interface LinkCounters {
  /** Ended here for a sibling that did not read (MAX_PENDING_BYTES queued). */
  overflowed: number;
  /** Ended here for a line too long, not JSON, or under another worker's number. */
  broken: number;
  /** Closed from the other end (the sibling exited, or ended the link). */
  closed: number;
}

/** What a worker's links tell it. */
export interface LinkEvents {
  /** A sibling's batch (parsed, sent under the link's number; Siblings.receive checks the rest). */
  deliver(message: unknown): void;
  /** A link to `slot` was added: the sibling there has none of this worker's loads yet. */
  added(slot: number): void;
  /** The link to `slot` ended: its batches stop here until a new one comes; the primary is told. */
  ended(slot: number): void;
}

/** In a worker: its links to its siblings, by their worker numbers. */
export class SiblingLinks {
  readonly counters: LinkCounters = { overflowed: 0, broken: 0, closed: 0 };
  /** The links, by the sibling's worker number. */
  readonly #links = new Map<number, Socket>();
  /** How many siblings this worker has (`--workers` less one). */
  readonly #siblings: number;
  readonly #events: LinkEvents;

  constructor(siblings: number, events: LinkEvents) {
    this.#siblings = siblings;
    this.#events = events;
  }

  /** Takes a link from the primary (the handle that came with its message); false when `message` is not one. */
  receive(message: unknown, handle: unknown): boolean {
    if (!isLinkMessage(message) || message.slot === undefined) return false;
    if (handle instanceof Socket) this.#add(message.slot, handle);
    return true;
  }

  /** How many siblings this worker has a link to. */
  get size(): number {
    return this.#links.size;
  }

  /** Whether batches must also go through the primary: a sibling has no link here. */
  get relay(): boolean {
    return this.#links.size < this.#siblings;
  }

  /** The siblings this worker has a link to. */
  slots(): number[] {
    return [...this.#links.keys()];
  }

  /** Sends `message` on every link (one line each); a link with MAX_PENDING_BYTES unread ends instead. */
  send(message: StateMessage): void {
    if (this.#links.size === 0) return;
    const line = `${JSON.stringify(message)}\n`;
    for (const [slot, socket] of [...this.#links]) {
      if (socket.writableLength + line.length <= MAX_PENDING_BYTES) socket.write(line);
      else {
        this.counters.overflowed++;
        this.#end(slot, socket);
      }
    }
  }

  /** Ends every link (the worker stops). */
  close(): void {
    for (const socket of this.#links.values()) socket.end();
  }

  /** Reads `socket` as the link to sibling `slot` (one that replaces an earlier link to it ends that one). */
  #add(slot: number, socket: Socket): void {
    this.#links.get(slot)?.destroy();
    this.#links.set(slot, socket);
    socket.setNoDelay(true);
    socket.setEncoding("utf8");
    let held = "";
    socket.on("data", (text: string) => {
      let start = 0;
      for (let end = text.indexOf("\n"); end >= 0; end = text.indexOf("\n", start)) {
        const line = held + text.slice(start, end);
        held = "";
        start = end + 1;
        let message: unknown;
        try {
          message = JSON.parse(line);
        } catch {
          return this.#break(slot, socket);
        }
        if (typeof message !== "object" || message === null || (message as { from?: unknown }).from !== slot) return this.#break(slot, socket);
        this.#events.deliver(message);
        if (socket.destroyed) return;
      }
      held += text.slice(start);
      if (held.length > MAX_LINE_CHARS) this.#break(slot, socket);
    });
    socket.on("error", () => {}); // 'close' follows
    socket.on("close", () => {
      if (this.#links.get(slot) === socket) this.counters.closed++; // not ended here first
      this.#end(slot, socket);
    });
    socket.resume();
    this.#events.added(slot);
  }

  /** Ends a link that sent what no sibling sends. */
  #break(slot: number, socket: Socket): void {
    this.counters.broken++;
    this.#end(slot, socket);
  }

  /** Ends the link `socket` to `slot`, and says so once, unless a newer link to `slot` replaced it. */
  #end(slot: number, socket: Socket): void {
    socket.destroy();
    if (this.#links.get(slot) !== socket) return;
    this.#links.delete(slot);
    this.#events.ended(slot);
  }
}
