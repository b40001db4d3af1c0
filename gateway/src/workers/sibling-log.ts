// One routing state across the worker processes of `serve --workers N`: each
// worker routes at once on its own state, as a replica does (replication.ts),
// and sends the changes the others need — the prompts it taught an upstream
// (as block hashes, 8 bytes a block) and the conversations it bound — to the
// primary, which relays them to every other worker in the order it got them.
// Each worker ingests its engines' KV events and scrapes their load itself, as
// replicas do, so those are not relayed. Entries name upstreams by URL: a
// worker that has not yet reloaded a changed fleet skips what it lacks.
//
// The channel is batched: a worker sends at most one message each FLUSH_MS,
// holding what it changed meanwhile and its loads, however many requests it
// placed (each LOADS_MS when only its loads changed). Messages cross as JSON
// (block hashes as base64 text) on a direct link to each sibling
// (sibling-links.ts), and through the primary to those it has no link to.
// Each carries its sender's process id and sequence number: a load report
// older than one already taken (a batch relayed by the primary may arrive
// after a later one on a link), or from a process known to be gone (its link
// ended, or the primary said it exited), is not taken.

import type { PrefixNamespace } from "adp-router";
import type { RoutingState, StateEntry, StateLog } from "../fleet/routing-state.js";
import { MAX_LINE_CHARS, type SiblingLinks } from "./sibling-links.js";

/** The message kind a worker's batch of shared entries travels as (both ways). */
export const STATE_MESSAGE = "adp-gateway-state";
/** Most entries one relayed batch may hold (a turn places far fewer; the rest wait for the next turn). */
export const MAX_BATCH_ENTRIES = 4096;
/** Most upstreams a load report may name. */
const MAX_LOADS = 65_536;
/**
 * Least time between two messages of a worker, ms. A change goes out at once
 * when the last message is older than this (a quiet gateway shares every
 * placement and every ended request before the next arrives); a busy one
 * gathers what changed meanwhile into the next message. A message costs the
 * sender, the primary and each sibling tens of microseconds whatever it holds
 * (a wake-up of each process): sent once an event-loop turn, messages cost
 * more than the routing they share (bench:peers).
 */
const FLUSH_MS = 10;
/**
 * Least time before a message that carries loads alone (no prompt learned,
 * no conversation bound meanwhile), ms. A busy worker's loads change with
 * every request that ends, so such a message would go every FLUSH_MS however
 * little it tells; a sibling's in-flight counts 50 ms old against requests
 * that last hundreds of milliseconds misplace nothing, and a gateway gone
 * quiet still sends its last loads at once (loadsChanged). Against every
 * FLUSH_MS: 0.94–0.96 of the CPU per small request, two `--workers 2`
 * gateways side by side (bench:peers' small chats, whose prompts fill no block).
 */
const LOADS_MS = 50;
/** Most u32 words of block hashes one entry may carry (a 1M-token prompt in 16-token blocks is 131,072). */
const MAX_HASH_WORDS = 1 << 18;
/** Longest URL, conversation key or cache salt taken from a sibling. */
const MAX_TEXT = 8192;
/** A batch whose entries' text reaches this many characters goes at once (a message stays well within a link's line). */
const MAX_BATCH_CHARS = MAX_LINE_CHARS / 4;

/** One shared change, as it crosses to the siblings: a learned prompt's block hashes as the base64 text of their little-endian u32 words. */
export type SiblingEntry =
  | { readonly op: "learn-blocks"; readonly url: string; readonly hashes: string; readonly namespace: PrefixNamespace; readonly rank?: number }
  | { readonly op: "bind"; readonly url: string; readonly key: string; readonly rank?: number };

/**
 * Whether `text` is base64 as Buffer writes it (padded, its unused bits
 * zero): Node's decoder skips anything else, so it is checked first, by
 * writing the decoded bytes again. A regular expression took 13.6 µs on a
 * 430-block prompt's 4.6 KB, the round trip 2.5 (a worker's 4% on the trace).
 */
const isBase64 = (text: string): boolean => text.length % 4 === 0 && Buffer.from(text, "base64").toString("base64") === text;

/** Block hashes as they cross (base64 of the u32 words, little-endian as Node runs on). */
export const hashesText = (hashes: Uint32Array): string => Buffer.from(hashes.buffer, hashes.byteOffset, hashes.byteLength).toString("base64");

/** Block hashes back from their text (checked by isEntry: whole words, two a block, within the bound). */
function hashesOf(text: string): Uint32Array {
  const bytes = Buffer.from(text, "base64");
  const words = new Uint32Array(bytes.length >>> 2);
  new Uint8Array(words.buffer).set(bytes.subarray(0, words.length * 4));
  return words;
}

/** What a worker has in flight on one upstream (the others add it to their own: one load, as one gateway sees it). */
export interface SiblingLoad {
  readonly url: string;
  readonly inFlight: number;
  readonly inFlightTokens: number;
}

/** A batch of entries and the sender's loads now, as it crosses. */
export interface StateMessage {
  readonly type: typeof STATE_MESSAGE;
  /** The sending worker's number. */
  readonly from: number;
  /** The sending process's id (a restarted worker has the same number and a new id). */
  readonly epoch: number;
  /** Its sequence number (1, 2, ... from its start); 0 on the primary's notice that the process exited. */
  readonly seq: number;
  /** Set on the primary's notice that the process `epoch` exited (its loads are dropped). */
  readonly ended?: true;
  readonly entries: readonly SiblingEntry[];
  /** Its in-flight requests per upstream now (all of them: a worker's earlier report is replaced). */
  readonly loads: readonly SiblingLoad[];
}

/** Where a worker's siblings' loads go: the sums over the siblings, per upstream (its index in the fleet's rank order). */
export type LoadSink = (upstream: number, inFlight: number, inFlightTokens: number) => void;

/** Where batches go (the worker's IPC channel to the primary). */
export type Send = (message: StateMessage) => void;

/** Whether `v` is a batch as a sibling sends it, every entry within the bounds (anything else is dropped, counted). */
export function isStateMessage(v: unknown): v is StateMessage {
  if (typeof v !== "object" || v === null || (v as StateMessage).type !== STATE_MESSAGE) return false;
  const { entries, loads, from, seq, epoch, ended } = v as StateMessage;
  if (!Number.isSafeInteger(from) || !Number.isSafeInteger(seq) || !Number.isSafeInteger(epoch) || (ended !== undefined && ended !== true) || !Array.isArray(loads) || loads.length > MAX_LOADS || !loads.every(isLoad)) return false;
  return Array.isArray(entries) && entries.length <= MAX_BATCH_ENTRIES && entries.every(isEntry);
}

/** Whether `l` is one upstream's load within the bounds. */
function isLoad(l: unknown): l is SiblingLoad {
  if (typeof l !== "object" || l === null) return false;
  const x = l as Record<string, unknown>;
  return typeof x.url === "string" && x.url.length <= MAX_TEXT && Number.isSafeInteger(x.inFlight) && (x.inFlight as number) >= 0 && Number.isSafeInteger(x.inFlightTokens) && (x.inFlightTokens as number) >= 0;
}

/** Whether `e` is one entry within the bounds. */
function isEntry(e: unknown): e is SiblingEntry {
  if (typeof e !== "object" || e === null) return false;
  const x = e as Record<string, unknown>;
  const text = (t: unknown) => typeof t === "string" && t.length <= MAX_TEXT;
  const rank = x.rank === undefined || (Number.isSafeInteger(x.rank) && (x.rank as number) >= 0);
  if (!text(x.url) || !rank) return false;
  if (x.op === "bind") return text(x.key) && (x.key as string).length > 0;
  if (x.op !== "learn-blocks") return false;
  const ns = x.namespace as Record<string, unknown> | null;
  const nsOk = typeof ns === "object" && ns !== null && (ns.loraTaskId === undefined || ns.loraTaskId === null || Number.isSafeInteger(ns.loraTaskId)) && (ns.cacheSalt === undefined || ns.cacheSalt === null || text(ns.cacheSalt));
  // Text of whole blocks (8 bytes each: 12 base64 characters per 9 bytes, so a block count decides the length), within the bound.
  const hashes = x.hashes;
  if (typeof hashes !== "string" || hashes.length > Math.ceil((MAX_HASH_WORDS * 4) / 3) + 4 || !isBase64(hashes)) return false;
  const bytes = (hashes.length / 4) * 3 - (hashes.endsWith("==") ? 2 : hashes.endsWith("=") ? 1 : 0);
  return bytes % 8 === 0 && nsOk;
}

/** Counters of a worker's sharing with its siblings. */
export interface SiblingCounters {
  /** Entries sent to the siblings. */
  sent: number;
  /** Siblings' entries applied. */
  applied: number;
  /** Siblings' entries skipped: naming an upstream this worker does not have (a reload in between). */
  skipped: number;
  /** Messages that were not batches of entries (dropped). */
  rejected: number;
}

/** A worker's share of the one routing state. */
export class Siblings {
  /** Counters for logs and tests. */
  readonly counters: SiblingCounters = { sent: 0, applied: 0, skipped: 0, rejected: 0 };
  readonly #send: Send;
  /** This worker's number. */
  readonly self: number;
  /** This worker's loads now. */
  #loads: () => readonly SiblingLoad[] = () => [];
  /** Where the siblings' summed loads go. */
  #sink: LoadSink = () => {};
  /** Each sibling's last load report, by worker number. */
  readonly #reports = new Map<number, readonly SiblingLoad[]>();
  /** The process and sequence number of each sibling's last load report taken. */
  readonly #taken = new Map<number, { readonly epoch: number; readonly seq: number }>();
  /** Processes known to be gone, by worker number (the last few: a late batch of one is not taken for its loads). */
  readonly #ended = new Map<number, number[]>();
  /** This process's id, sent with each message. */
  readonly #epoch: number;
  /** This worker's last message's sequence number. */
  #seq = 0;
  /** Characters of the hashes and keys in `#batch`. */
  #batchChars = 0;
  /** The last loads sent, as text (a report goes out only when they changed). */
  #sentLoads = "";
  /** Cancels the pending send, if one is due. */
  #timer: (() => void) | null = null;
  /** Whether the pending send waits LOADS_MS (for loads alone), so that an entry may bring it forward. */
  #timerForLoads = false;
  /** When the last message went (performance.now). */
  #lastSent = -Infinity;
  /** Entries of this turn, not yet sent. */
  #batch: SiblingEntry[] = [];
  #local: RoutingState | null = null;
  #urls: () => readonly string[] = () => [];
  #closed = false;
  /** The links to the siblings this worker's batches go on (null: none, all through the primary), for metrics. */
  readonly links: SiblingLinks | null;

  constructor(send: Send, self: number, links: SiblingLinks | null = null, epoch: number = process.pid) {
    this.#send = send;
    this.self = self;
    this.links = links;
    this.#epoch = epoch;
  }

  /** The state log the routing state appends to: learned prompts and bindings go to the siblings. */
  readonly stateLog: StateLog = {
    append: (entry: StateEntry) => {
      if (this.#closed || this.#local === null) return;
      const shared = this.#shared(entry);
      if (shared === null) return;
      this.#batch.push(shared);
      this.#batchChars += shared.url.length + (shared.op === "bind" ? shared.key.length : shared.hashes.length);
      if (this.#batch.length >= MAX_BATCH_ENTRIES || this.#batchChars >= MAX_BATCH_CHARS) this.#flush();
      else this.#soon();
    },
  };

  /** What of `entry` the siblings take, copied (the caller's arrays are reused), or null. */
  #shared(entry: StateEntry): SiblingEntry | null {
    if (entry.op !== "learn" && entry.op !== "bind" && entry.op !== "learn-blocks") return null;
    const url = this.#urls()[entry.upstream];
    if (url === undefined) return null;
    const rank = entry.rank === undefined ? {} : { rank: entry.rank };
    if (entry.op === "bind") return { op: "bind", url, key: entry.key, ...rank };
    const index = this.#local!.router.prefixIndex;
    if (index === null) return null;
    // A learned prompt travels as its block hashes (blockHashes returns a fresh array); a sibling's own relayed
    // learn-blocks never comes back here (applied quietly), so these are this worker's.
    const hashes = entry.op === "learn" ? (entry.hashes ?? index.blockHashes(entry.tokens)) : entry.hashes;
    if (hashes.length === 0 || hashes.length > MAX_HASH_WORDS) return null;
    return { op: "learn-blocks", url, hashes: hashesText(hashes), namespace: { loraTaskId: entry.namespace.loraTaskId ?? null, cacheSalt: entry.namespace.cacheSalt ?? null }, ...rank };
  }

  /**
   * That this worker's loads changed (a request ended): they go to the
   * siblings with the next message, or this turn once it has nothing in
   * flight (a quiet gateway's next request may reach a sibling at once, and
   * must not find this worker's ended request still counted there).
   */
  loadsChanged(): void {
    if (this.#closed || this.#local === null) return;
    if (this.#loads().every((l) => l.inFlight === 0)) {
      // Now, not this turn: written before the answer leaves (answers wait for the check phase), the message is
      // in the sibling's link (or the primary's channel) before the client can open that connection, unless an
      // earlier batch still queues on that link; a connection the sibling accepts is read a poll later.
      this.#timer?.();
      this.#flush();
    } else this.#soon();
  }

  /** Schedules the next message: this turn when the last is FLUSH_MS old (LOADS_MS with loads alone to send), else once it is. */
  #soon(): void {
    const loadsOnly = this.#batch.length === 0;
    if (this.#timer !== null) {
      if (loadsOnly || !this.#timerForLoads) return;
      this.#timer(); // an entry: sooner than loads alone would go
    }
    this.#timerForLoads = loadsOnly;
    const wait = (loadsOnly ? LOADS_MS : FLUSH_MS) - (performance.now() - this.#lastSent);
    if (wait <= 0) {
      const t = setImmediate(() => this.#flush());
      this.#timer = () => clearImmediate(t);
    } else {
      const t = setTimeout(() => this.#flush(), wait);
      this.#timer = () => clearTimeout(t);
    }
  }

  /** Sends the entries gathered, with the loads now (or only the loads, when they changed). */
  #flush(): void {
    this.#timer = null;
    if (this.#closed) return;
    const loads = this.#loads();
    const text = loads.map((l) => `${l.inFlight},${l.inFlightTokens}`).join(";");
    if (this.#batch.length === 0 && text === this.#sentLoads) return;
    const entries = this.#batch;
    this.#batch = [];
    this.#batchChars = 0;
    this.#sentLoads = text;
    this.#lastSent = performance.now();
    this.counters.sent += entries.length;
    this.#send({ type: STATE_MESSAGE, from: this.self, epoch: this.#epoch, seq: ++this.#seq, entries, loads });
  }

  /**
   * Starts sharing `local`'s changes; `urls` are the fleet's upstreams in rank
   * order, `loads` this worker's in-flight requests on them, `sink` where the
   * siblings' summed loads go.
   */
  start(local: RoutingState, urls: () => readonly string[], loads: () => readonly SiblingLoad[] = () => [], sink: LoadSink = () => {}): void {
    this.#local = local;
    this.#urls = urls;
    this.#loads = loads;
    this.#sink = sink;
  }

  /** Each upstream's index in the fleet, by URL (siblings name upstreams by URL). */
  #urlIndex(): Map<string, number> {
    return new Map(this.#urls().map((url, i) => [url, i]));
  }

  /** Sums the siblings' last reports per upstream into the sink (every upstream, so one no sibling names is zero); `at` gives each URL's index. */
  #sumLoads(at: ReadonlyMap<string, number>): void {
    const sums = Array.from({ length: at.size }, () => [0, 0] as [number, number]);
    for (const report of this.#reports.values()) {
      for (const l of report) {
        const sum = sums[at.get(l.url) ?? -1];
        if (sum !== undefined) (sum[0] += l.inFlight), (sum[1] += l.inFlightTokens);
      }
    }
    sums.forEach(([n, tokens], i) => this.#sink(i, n, tokens));
  }

  /** The link to sibling `slot` ended: the process last heard there is taken as gone (its loads dropped until it, or its restart, reports again). */
  gone(slot: number): void {
    const last = this.#taken.get(slot);
    if (last !== undefined) this.#end(slot, last.epoch);
  }

  /** A new link to a sibling: it has none of this worker's loads yet, so the next message carries them. */
  resend(): void {
    this.#sentLoads = "";
    if (this.#local !== null && !this.#closed) this.#soon();
  }

  /** Process `epoch` of worker `slot` is gone: its loads are dropped, and a late batch of it is not taken for them. */
  #end(slot: number, epoch: number): void {
    const ended = this.#ended.get(slot) ?? [];
    if (!ended.includes(epoch)) ended.push(epoch);
    if (ended.length > 8) ended.shift();
    this.#ended.set(slot, ended);
    if (this.#taken.get(slot)?.epoch === epoch) {
      this.#taken.delete(slot);
      this.#reports.delete(slot);
      this.#sumLoads(this.#urlIndex());
    }
  }

  /** Whether a report of worker `from`'s process `epoch` numbered `seq` is newer than the one taken (and its process not gone). */
  #newer(from: number, epoch: number, seq: number): boolean {
    if (this.#ended.get(from)?.includes(epoch) === true) return false;
    const last = this.#taken.get(from);
    return last === undefined || last.epoch !== epoch || seq > last.seq;
  }

  /** Applies a sibling's batch (from its link, or relayed by the primary) to the routing state, quietly: it is not sent on again. */
  receive(message: unknown): void {
    if (this.#closed || this.#local === null) return;
    if (!isStateMessage(message)) {
      this.counters.rejected++;
      return;
    }
    // Once for the batch: loads and entries name upstreams by URL.
    const at = this.#urlIndex();
    const { from, seq, epoch } = message;
    // A worker's own number on a batch is never its own (those never come back): its loads are not taken.
    if (from !== this.self && message.ended === true) this.#end(from, epoch);
    else if (from !== this.self && this.#newer(from, epoch, seq)) {
      this.#taken.set(from, { epoch, seq });
      this.#reports.set(from, message.loads);
      this.#sumLoads(at);
    }
    for (const e of message.entries) {
      const upstream = at.get(e.url);
      if (upstream === undefined) {
        this.counters.skipped++;
        continue;
      }
      const rank = e.rank === undefined ? {} : { rank: e.rank };
      this.#local.applyQuietly(e.op === "bind" ? { op: "bind", upstream, key: e.key, ...rank } : { op: "learn-blocks", upstream, hashes: hashesOf(e.hashes), namespace: e.namespace, ...rank });
      this.counters.applied++;
    }
  }

  /** Sends what is pending, then stops (its links end once that is written). */
  close(): void {
    this.#timer?.();
    this.#flush();
    this.#closed = true;
    this.links?.close();
  }
}
