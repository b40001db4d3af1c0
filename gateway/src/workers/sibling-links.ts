// Direct channels between the workers of `serve --workers N`: one connected
// socket for each pair of workers, over which each sends its batches of shared
// routing changes (sibling-log.ts) straight to the other, so the primary is not
// a hop of every batch. Relayed, a batch cost the primary a wake-up, a parse and
// a write for each receiver (170-200 µs a message however small: on the trace
// most of what `--workers 2` cost beyond one process; docs/performance.md).
//
// The primary makes each pair once both workers listen: it listens on a Unix
// socket in a directory of its own (mode 0700, removed at once), connects to
// it, and sends the two ends to the two workers as handles over their IPC
// channels, keeping neither. A worker takes a link only as such a handle from
// its primary. Where links cannot be made (Windows, or the directory cannot be
// created), the primary says so once and goes on relaying: a worker that was
// told so (`relay`) or has no link yet sends its batches through the primary
// too, naming the siblings it has links to, and the primary passes each to
// the others.
//
// On a link, a batch is one line of JSON (JSON escapes every line break in a
// string). A line longer than MAX_LINE_CHARS, or one that is not JSON, ends the
// link (counted); a sibling that does not read has at most MAX_PENDING_BYTES
// queued, past which batches to it are dropped (counted) rather than held.

import { mkdtempSync, rmSync } from "node:fs";
import { createServer, connect, Socket } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import type { StateMessage } from "./sibling-log.js";

/** The primary's message to a worker that comes with a link's end (`slot`: the worker at its other end), or that says batches must also go through the primary (`relay`). */
export const LINK_MESSAGE = "adp-gateway-link";

/** Longest line a link takes (a batch is flushed at a quarter of this: sibling-log.ts). */
export const MAX_LINE_CHARS = 64 * 1024 * 1024;
/** Most bytes queued on a link for a sibling that is not reading; past it, batches to that sibling are dropped. */
const MAX_PENDING_BYTES = 64 * 1024 * 1024;

/** What LINK_MESSAGE carries. */
export interface LinkMessage {
  readonly type: typeof LINK_MESSAGE;
  /** The worker at the other end of the link sent with this message (absent: no link, see `relay`). */
  readonly slot?: number;
  /** Batches must also go through the primary: some sibling has no link to this worker. */
  readonly relay?: boolean;
}

/** Whether `v` is a link message from the primary. */
export const isLinkMessage = (v: unknown): v is LinkMessage => {
  if (typeof v !== "object" || v === null || (v as LinkMessage).type !== LINK_MESSAGE) return false;
  const { slot, relay } = v as LinkMessage;
  return (slot === undefined || (Number.isSafeInteger(slot) && slot > 0)) && (relay === undefined || typeof relay === "boolean");
};

/**
 * In the primary: a connected pair of sockets, made through a Unix socket in a
 * fresh private directory that is removed once they are connected. Rejects
 * where that cannot be done (the caller then relays).
 */
export async function socketPair(): Promise<[Socket, Socket]> {
  if (process.platform === "win32") throw new Error("worker links need Unix sockets");
  const dir = mkdtempSync(path.join(tmpdir(), "adp-gateway-link-"));
  const server = createServer();
  try {
    const where = path.join(dir, "s");
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(where, resolve);
    });
    const accepted = new Promise<Socket>((resolve) => server.once("connection", resolve));
    const client = connect(where);
    await new Promise<void>((resolve, reject) => {
      client.once("error", reject);
      client.once("connect", resolve);
    });
    return [client, await accepted];
  } finally {
    server.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Counters of a worker's links. */
export interface LinkCounters {
  /** Batches not sent to a sibling whose link held MAX_PENDING_BYTES already. */
  dropped: number;
  /** Links ended for a line that was too long or not JSON. */
  broken: number;
}

/** In a worker: its links to its siblings, by their worker numbers. */
export class SiblingLinks {
  readonly counters: LinkCounters = { dropped: 0, broken: 0 };
  readonly #links = new Map<number, Socket>();
  /** Where a sibling's batch goes (parsed, not yet checked: Siblings.receive checks it). */
  readonly #deliver: (message: unknown) => void;
  /** Called when the link to sibling `slot` ended (its batches stop: its loads are dropped). */
  readonly #gone: (slot: number) => void;
  /** Whether batches also go through the primary (some sibling has no link here). */
  #relay = false;

  constructor(deliver: (message: unknown) => void, gone: (slot: number) => void) {
    this.#deliver = deliver;
    this.#gone = gone;
  }

  /** Takes a link message from the primary and the handle that came with it; false when `message` is not one. */
  receive(message: unknown, handle: unknown): boolean {
    if (!isLinkMessage(message)) return false;
    if (message.relay === true) this.#relay = true;
    if (message.slot !== undefined && handle instanceof Socket) this.#add(message.slot, handle);
    return true;
  }

  /** Whether batches must (also) go through the primary: no link yet, or a sibling without one. */
  get relay(): boolean {
    return this.#relay || this.#links.size === 0;
  }

  /** Sends `message` on every link (one line each). */
  send(message: StateMessage): void {
    if (this.#links.size === 0) return;
    const line = `${JSON.stringify(message)}\n`;
    for (const socket of this.#links.values()) {
      if (socket.writableLength > MAX_PENDING_BYTES) this.counters.dropped++;
      else socket.write(line);
    }
  }

  /** How many siblings this worker has a link to. */
  get size(): number {
    return this.#links.size;
  }

  /** The siblings this worker has a link to. */
  slots(): number[] {
    return [...this.#links.keys()];
  }

  /** Ends every link. */
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
          return this.#break(socket);
        }
        this.#deliver(message);
        if (socket.destroyed) return;
      }
      held += text.slice(start);
      if (held.length > MAX_LINE_CHARS) this.#break(socket);
    });
    socket.on("error", () => {}); // 'close' follows
    socket.on("close", () => {
      if (this.#links.get(slot) !== socket) return; // replaced
      this.#links.delete(slot);
      this.#gone(slot);
    });
  }

  /** Ends a link that sent what no sibling sends. */
  #break(socket: Socket): void {
    this.counters.broken++;
    socket.destroy();
  }
}
