// Many gateway replicas, one routing state: every shared change (a prompt an
// upstream learned, an engine's KV events, a cleared engine view) is one entry
// on one JetStream stream, and every replica applies the stream in its order.
//
// Two states per replica. The replicated state (the "mirror") applies the
// stream and nothing else, strictly in stream order, so replicas that applied
// the same sequence hold byte-identical state: `/sync/state` reports its
// sequence and digest. The routing state routes at once, never waiting on the
// log: it applies its own changes as it makes them and the others' learned
// prompts as they arrive (so a prompt routed through one replica is known to
// all). Each replica subscribes to its engines' KV events itself, so the
// others' copies of those reach only the mirror.
//
// At least once: JetStream drops a republished entry within its duplicate
// window (the entry's id as `Nats-Msg-Id`), and an entry delivered twice is
// applied once (a stream sequence at or below the last applied is skipped).
// NATS unreachable: the replica routes on, its entries wait in a bounded
// buffer (the oldest dropped past it, and counted), and it reports itself
// unsynced until they are published again.

import { createHash, randomUUID } from "node:crypto";
import { DeliverPolicy, jetstream, jetstreamManager, type JetStreamClient } from "@nats-io/jetstream";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "pino";
import type { GatewayConfig } from "../config.js";
import { EngineViews } from "../engine-views.js";
import { createGatewayRouter } from "../fleet.js";
import { RoutingState, type StateEntry, type StateLog } from "../routing-state.js";
import { decodeEntry, encodeEntry, isShared, SyncEntryError } from "./entry-codec.js";
import type { SyncConfig } from "./sync-config.js";

/** Publications in flight at once (one connection keeps their order). */
const WINDOW = 256;
/** Pause before retrying after NATS refused or could not be reached. */
const RETRY_MS = 500;
/** JetStream's duplicate window for entry ids (ns). */
const DUPLICATE_WINDOW_NS = 120 * 1e9;

/** What `/sync/state` reports. */
export interface SyncState {
  readonly replica: string;
  /** The stream sequence of the last entry the replicated state applied (0: none). */
  readonly applied: number;
  /** SHA-256 of the replicated state (its router snapshot and engine views), hex. */
  readonly digest: string;
}

/** Counters of a replica's sharing. */
export interface SyncCounters {
  /** Entries this replica published. */
  published: number;
  /** Entries dropped from a full buffer while NATS could not take them. */
  dropped: number;
  /** Stream entries applied to the replicated state. */
  applied: number;
  /** Stream messages that were not entries (skipped, counted). */
  rejected: number;
  /** Deliveries of an entry already applied (skipped). */
  duplicates: number;
}

/** One replica's share of the cluster state. */
export class Replication {
  readonly #sync: SyncConfig;
  readonly #log: Logger;
  /** This process's origin in entry ids: a restarted replica is a new incarnation. */
  readonly origin: string;
  readonly #mirror: RoutingState;
  #local: RoutingState | null = null;
  readonly counters: SyncCounters = { published: 0, dropped: 0, applied: 0, rejected: 0, duplicates: 0 };
  #counter = 0;
  /** Entries waiting to be published, in order. */
  #queue: { id: string; bytes: Uint8Array }[] = [];
  #inFlight = 0;
  #appliedSeq = 0;
  #nc: NatsConnection | null = null;
  #js: JetStreamClient | null = null;
  #connected = false;
  #closed = false;
  #consuming: Promise<void> | null = null;
  /** The stream consumption under way (stopped to start over after a reconnection). */
  #messages: { stop(): void } | null = null;
  #retry: NodeJS.Timeout | null = null;

  constructor(sync: SyncConfig, config: GatewayConfig, log: Logger) {
    this.#sync = sync;
    this.#log = log;
    this.origin = `${sync.replicaId}#${randomUUID().slice(0, 8)}`;
    const views = new EngineViews(config.upstreams.map((u) => (u.kvEvents === null ? null : { dpRanks: u.kvEvents.dpRanks })), {
      tokensPerBlock: config.routing.tokensPerBlock,
      maxMemoryBytes: config.routing.indexBytes,
      loraIds: config.routing.loraAdapters,
    });
    this.#mirror = new RoutingState(createGatewayRouter(config), null, { views, live: () => [] });
  }

  /** The state log the routing state appends to: shared entries go to the stream. */
  readonly stateLog: StateLog = {
    append: (entry: StateEntry) => {
      if (this.#closed || !isShared(entry)) return;
      const counter = this.#counter++;
      const bytes = encodeEntry({ origin: this.origin, counter, entry }); // a copy: the caller's arrays are reused
      if (this.#queue.length >= this.#sync.maxBufferedEntries) {
        this.#queue.shift();
        this.counters.dropped++;
      }
      this.#queue.push({ id: `${this.origin}:${counter}`, bytes });
      this.#pump();
    },
  };

  /** The stream's name and subject. */
  get #stream(): string {
    return `ADP_${this.#sync.cluster}`;
  }
  get #subject(): string {
    return `adp.${this.#sync.cluster}.state`;
  }

  /** Whether NATS is reachable and nothing waits to be published. */
  get synced(): boolean {
    return this.#connected && this.#queue.length === 0 && this.#inFlight === 0;
  }

  /** Entries waiting for NATS. */
  get pending(): number {
    return this.#queue.length + this.#inFlight;
  }

  /** Whether the replica is connected to NATS. */
  get connected(): boolean {
    return this.#connected;
  }

  /** The stream sequence of the last entry the replicated state applied. */
  get applied(): number {
    return this.#appliedSeq;
  }

  /** What `/sync/state` reports: the replicated state's sequence and digest (hashes its snapshot: not for every request). */
  state(): SyncState {
    const hash = createHash("sha256").update(this.#mirror.router.snapshot());
    const views = this.#mirror.views;
    const upstreams = this.#mirror.router.numRanks;
    for (let u = 0; u < upstreams; u++) {
      const view = views?.view(u) ?? null;
      hash.update(view === null ? Uint8Array.of(0) : view.snapshot());
    }
    return { replica: this.#sync.replicaId, applied: this.#appliedSeq, digest: hash.digest("hex") };
  }

  /** Starts sharing `local`'s changes and applying the others'. Connects in the background: routing never waits for NATS. */
  start(local: RoutingState): void {
    this.#local = local;
    void this.#connect();
  }

  /** Stops: publishes what it can within `deadlineMs`, then closes the connection. */
  async close(deadlineMs = 2_000): Promise<void> {
    const until = Date.now() + deadlineMs;
    while (this.#connected && this.pending > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    this.#closed = true;
    if (this.#retry !== null) clearTimeout(this.#retry);
    const nc = this.#nc;
    this.#nc = null;
    if (nc !== null) await nc.close().catch(() => undefined);
    await this.#consuming?.catch(() => undefined);
  }

  /** Connects (again and again until it can), sets the stream up, and starts consuming it. */
  async #connect(): Promise<void> {
    if (this.#closed) return;
    try {
      const nc = await connect({ servers: this.#sync.url.replace(/^nats:\/\//, ""), reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: RETRY_MS, name: this.origin });
      if (this.#closed) {
        await nc.close();
        return;
      }
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: this.#stream, subjects: [this.#subject], duplicate_window: DUPLICATE_WINDOW_NS }).catch(async (error: unknown) => {
        // Another replica made it first (with the same settings): use it.
        await jsm.streams.info(this.#stream).catch(() => Promise.reject(error));
      });
      this.#nc = nc;
      this.#js = jetstream(nc);
      this.#setConnected(true);
      void this.#watch(nc);
      this.#consuming = this.#consume();
      this.#pump();
    } catch (error) {
      this.#setConnected(false, (error as { code?: string }).code ?? (error as Error).message);
      this.#retry = setTimeout(() => void this.#connect(), RETRY_MS * 2);
      this.#retry.unref();
    }
  }

  /** Follows the connection's state (disconnects and reconnects). */
  async #watch(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (s.type === "disconnect") this.#setConnected(false, "disconnected");
      else if (s.type === "reconnect") {
        this.#setConnected(true);
        // A consumer on a restarted server may never deliver again: start over after the last applied entry.
        this.#messages?.stop();
        this.#pump();
      }
    }
  }

  /** Records (and logs) a change of connection. */
  #setConnected(connected: boolean, why?: string): void {
    if (connected === this.#connected) return;
    this.#connected = connected;
    if (connected) this.#log.info({ replica: this.#sync.replicaId, nats: this.#sync.url }, "sync: connected; sharing the routing state");
    else this.#log.warn({ replica: this.#sync.replicaId, nats: this.#sync.url, ...(why === undefined ? {} : { reason: why }) }, "sync: NATS unreachable; routing on local state, entries buffered");
  }

  /** Publishes queued entries, up to WINDOW at once, in order; a failure puts the rest back and retries. */
  #pump(): void {
    const js = this.#js;
    if (js === null || !this.#connected) return;
    while (this.#inFlight < WINDOW && this.#queue.length > 0) {
      const item = this.#queue.shift()!;
      this.#inFlight++;
      js.publish(this.#subject, item.bytes, { msgID: item.id }).then(
        () => {
          this.#inFlight--;
          this.counters.published++;
          this.#pump();
        },
        () => {
          // Back in front (a duplicate id is dropped by JetStream if it did get there), and try again soon.
          this.#inFlight--;
          this.#queue.unshift(item);
          if (this.#retry === null && !this.#closed) {
            this.#retry = setTimeout(() => {
              this.#retry = null;
              this.#pump();
            }, RETRY_MS);
            this.#retry.unref();
          }
        },
      );
    }
  }

  /** Applies the stream in order from the entry after the last applied, for as long as the replica runs. */
  async #consume(): Promise<void> {
    while (!this.#closed && this.#js !== null) {
      try {
        const consumer = await this.#js.consumers.get(this.#stream, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: this.#appliedSeq + 1 });
        const messages = await consumer.consume();
        this.#messages = messages;
        for await (const m of messages) {
          if (this.#closed) break;
          this.#onMessage(m.seq, m.data);
        }
      } catch (error) {
        if (this.#closed) return;
        this.#log.warn({ replica: this.#sync.replicaId, reason: (error as Error).message.slice(0, 200) }, "sync: stream consumer stopped; resuming");
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    }
  }

  /** Applies one stream message (once: a redelivery is skipped). */
  #onMessage(seq: number, data: Uint8Array): void {
    if (seq <= this.#appliedSeq) {
      this.counters.duplicates++;
      return;
    }
    this.#appliedSeq = seq;
    let message;
    try {
      message = decodeEntry(data);
    } catch (error) {
      if (!(error instanceof SyncEntryError)) throw error;
      this.counters.rejected++;
      this.#log.warn({ replica: this.#sync.replicaId, seq, reason: error.message }, "sync: a stream message that is not an entry was skipped");
      return;
    }
    this.counters.applied++;
    const entry = message.entry;
    try {
      this.#mirror.apply(entry);
      // The routing state made its own changes already; it takes the others' learned prompts
      // (its engines' events it ingests itself).
      if (message.origin !== this.origin && entry.op === "learn") this.#local?.applyQuietly(entry);
    } catch (error) {
      // An entry naming an upstream this fleet does not have (a replica with another configuration).
      this.counters.rejected++;
      this.#log.warn({ replica: this.#sync.replicaId, seq, reason: (error as Error).message.slice(0, 200) }, "sync: an entry this replica cannot apply was skipped");
    }
  }
}
