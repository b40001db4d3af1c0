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
// Catch-up: every `snapshot_every` entries a replica stores the replicated
// state (state-snapshot.ts, checksummed) in a JetStream object store, with the
// sequence it covers; a replica that starts, restarts, or finds the stream has
// dropped entries it has not applied (past `max_entries`) loads the latest
// snapshot and replays the stream from there.
//
// At least once: JetStream drops a republished entry within its duplicate
// window (the entry's id as `Nats-Msg-Id`), and an entry delivered twice is
// applied once (a stream sequence at or below the last applied is skipped).
// NATS unreachable: the replica routes on, its entries wait in a bounded
// buffer (the oldest dropped past it, and counted), and it reports itself
// unsynced until they are published again.

import { createHash, randomUUID } from "node:crypto";
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { ObjectStore } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import { nats } from "../common/optional-packages.js";
import { connectOptions, syncProblem, type SyncProblem } from "./nats-connection.js";
import { sign, SignatureError, verify } from "./entry-signing.js";
import type { Logger } from "pino";
import { indexBound, type Bound } from "../common/bounds.js";
import type { GatewayConfig } from "../config/config.js";
import { gatewayEngineViews } from "../events/engine-views.js";
import { nextTurn } from "../events/event-slicing.js";
import { createGatewayRouter } from "../fleet/fleet.js";
import { RoutingState, type StateEntry, type StateLog } from "../fleet/routing-state.js";
import { decodeEntry, encodeEntry, isShared, SyncEntryError, type EntryBounds, type SyncMessage } from "./entry-codec.js";
import { decodeStateSnapshot, encodeStateSnapshot, SnapshotError, stateDigest } from "./state-snapshot.js";
import type { SyncConfig } from "../config/sync-config.js";

/** Publications in flight at once (one connection keeps their order). */
const WINDOW = 256;
/** Pause before retrying after NATS refused or could not be reached. */
const RETRY_MS = 500;
/** The most engine-view ranks a shared fleet change may have (all upstreams' DP ranks together). */
const MAX_SHARED_RANKS = 8192;
/** How long one attempt to connect to NATS may take. */
const CONNECT_TIMEOUT_MS = 5_000;
/** How long the consumer applies entries before it lets the event loop turn. */
const TURN_MS = 4;
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
  /** Entries not published because they were over the server's max_payload. */
  tooLarge: number;
  /** Learned prompts shared only up to the blocks that fit the server's max_payload. */
  truncated: number;
  /** Stream entries applied to the replicated state. */
  applied: number;
  /** Stream messages that were not entries, or not signed by a listed key (skipped, counted). */
  rejected: number;
  /** Of those, by reason (`not an entry`, `unsigned`, `unknown key`, `bad signature`, `not applicable`). */
  readonly rejectedBy: Map<string, number>;
  /** Deliveries of an entry already applied (skipped). */
  duplicates: number;
  /** Snapshots this replica stored, and loaded. */
  snapshotsStored: number;
  snapshotsLoaded: number;
  /** Entries the stream had dropped before this replica applied them, with no snapshot to cover them (its state then differs). */
  missed: number;
}

/** The bounds a replica with `config` reads entries within (see EntryBounds). */
function entryBounds(config: GatewayConfig, sync: SyncConfig): EntryBounds {
  const sources = config.upstreams.flatMap((u) => (u.kvEvents === null ? [] : [u.kvEvents]));
  return {
    maxFleet: sync.maxFleet,
    maxLearnBlocks: Math.ceil(config.limits.maxPromptTokens / config.routing.tokensPerBlock),
    // An engine's batches as its upstreams here take them (the defaults without any).
    maxBatchBlocks: sources.length === 0 ? 32_768 : Math.max(...sources.map((k) => k.maxBatchBlocks)),
    maxBatchTokens: sources.length === 0 ? 1 << 20 : Math.max(...sources.map((k) => k.maxBatchTokens)),
  };
}

/** One replica's share of the cluster state. */
export class Replication {
  readonly #sync: SyncConfig;
  readonly #log: Logger;
  /** This process's origin in entry ids: a restarted replica is a new incarnation. */
  readonly origin: string;
  #mirror: RoutingState;
  readonly #config: GatewayConfig;
  #jsm: JetStreamManager | null = null;
  #objects: ObjectStore | null = null;
  /** Whether a snapshot is being stored now (one at a time). */
  #storing = false;
  #local: RoutingState | null = null;
  /** The routing state's upstream URLs now, in rank order. */
  #localUrls: () => readonly string[] = () => [];
  /** The replicated state's upstream URLs, in rank order (entries name upstreams by URL). */
  #mirrorUrls: readonly string[];
  readonly counters: SyncCounters = { published: 0, dropped: 0, applied: 0, rejected: 0, rejectedBy: new Map(), tooLarge: 0, truncated: 0, duplicates: 0, snapshotsStored: 0, snapshotsLoaded: 0, missed: 0 };
  /** When a rejected message was last logged (such lines are rate-limited). */
  #rejectionLoggedAt = Number.NEGATIVE_INFINITY;
  #counter = 0;
  /** Entries waiting to be published, in order. */
  #queue: { id: string; bytes: Uint8Array }[] = [];
  #inFlight = 0;
  #appliedSeq = 0;
  #nc: NatsConnection | null = null;
  #js: JetStreamClient | null = null;
  #connected = false;
  /** What the last failed connection showed (null once connected). */
  #problem: SyncProblem | null = "NATS unreachable";
  /** The problem last logged (a new one is logged even while still disconnected). */
  #saidProblem: SyncProblem | null = null;
  /** Whether the replica has said NATS is unreachable since it last was reachable. */
  #saidUnreachable = false;
  #closed = false;
  #consuming: Promise<void> | null = null;
  /** The stream consumption under way (stopped to start over after a reconnection). */
  #messages: { stop(): void } | null = null;
  #retry: NodeJS.Timeout | null = null;
  /** What this replica takes in one entry at most (its own configuration's bounds). */
  readonly #bounds: EntryBounds;
  /** The server's max_payload, as last connected (1 MiB, NATS's default, before). */
  #maxPayload = 1 << 20;

  constructor(sync: SyncConfig, config: GatewayConfig, log: Logger) {
    this.#sync = sync;
    this.#config = config;
    this.#log = log;
    this.origin = `${sync.replicaId}#${randomUUID().slice(0, 8)}`;
    const views = gatewayEngineViews(config);
    this.#mirror = new RoutingState(createGatewayRouter(config), null, { views, live: () => [] });
    this.#mirrorUrls = config.upstreams.map((u) => u.url);
    this.#bounds = entryBounds(config, sync);
    if (sync.signing === null) log.warn({ replica: sync.replicaId }, "sync: entries are unauthenticated (no sync.signing keys): anyone who can publish on the cluster's NATS subject can change every replica's routing state");
  }

  /** `bytes` signed with the first key, when keys are configured. */
  #seal(bytes: Uint8Array): Uint8Array {
    return this.#sync.signing === null ? bytes : sign(bytes, this.#sync.signing[0]!);
  }

  /** The body of a stored message (its signature checked, when keys are configured); throws SignatureError. */
  #open(bytes: Uint8Array): Uint8Array {
    return this.#sync.signing === null ? bytes : verify(bytes, this.#sync.signing);
  }

  /** Counts (and, at most every 10 s, logs) a message that was not applied. */
  #reject(seq: number, reason: string, detail: string): void {
    this.counters.rejected++;
    this.counters.rejectedBy.set(reason, (this.counters.rejectedBy.get(reason) ?? 0) + 1);
    const now = performance.now();
    if (now - this.#rejectionLoggedAt < 10_000) return;
    this.#rejectionLoggedAt = now;
    this.#log.warn({ replica: this.#sync.replicaId, seq, reason, detail: detail.slice(0, 200), rejected: this.counters.rejected }, "sync: a stream message was not applied (further ones within 10 s are only counted)");
  }

  /** The state log the routing state appends to: shared entries go to the stream. */
  readonly stateLog: StateLog = {
    append: (entry: StateEntry) => {
      if (this.#closed) return;
      let message: SyncMessage;
      let id: string;
      const counter = this.#counter;
      if (entry.op === "ranks") {
        if (entry.urls === undefined) return;
        // Every replica reloading the same file makes the same change: one copy of it is enough.
        const change = `${this.#localUrls().join("\n")}\n>\n${entry.urls.join("\n")}`;
        id = `fleet|${createHash("sha256").update(change).digest("hex")}`;
        message = { origin: this.origin, counter, entry: { op: "fleet", urls: entry.urls, dpRanks: (entry.shapes ?? entry.urls.map(() => null)).map((s) => s?.dpRanks ?? null) } };
      } else if (entry.op === "learn" || isShared(entry)) {
        const url = this.#localUrls()[entry.upstream];
        if (url === undefined) return;
        if (entry.op === "learn") {
          // Its block hashes, not its tokens: 8 bytes a block rather than 4 a token.
          const index = this.#local?.router.prefixIndex;
          if (index === null || index === undefined) return;
          message = { origin: this.origin, counter, url, entry: { op: "learn-blocks", upstream: entry.upstream, hashes: this.#fitting(entry.hashes ?? index.blockHashes(entry.tokens), url), namespace: entry.namespace, ...(entry.rank === undefined ? {} : { rank: entry.rank }) } };
        } else message = { origin: this.origin, counter, url, entry };
        // An engine batch (or the restart it shows) every replica receives carries its own identity: JetStream keeps the first copy.
        id = (entry.op === "kv-events" || entry.op === "clear") && entry.id !== undefined ? `kv|${url}|${entry.id}` : `${this.origin}:${counter}`;
      } else return;
      this.#counter++;
      const bytes = this.#seal(encodeEntry(message)); // a copy: the caller's arrays are reused
      if (this.#queue.length >= this.#sync.maxBufferedEntries) {
        this.#queue.shift();
        this.counters.dropped++;
      }
      this.#queue.push({ id, bytes });
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

  /**
   * A learned prompt's block hashes (two words a block), cut to the longest
   * prefix whose entry fits the server's max_payload: the other replicas learn
   * what fits of a prompt too long to share whole (a prefix of a cached prompt
   * is cached too), and the cut is counted.
   */
  #fitting(hashes: Uint32Array, url: string): Uint32Array {
    // Besides its hashes an entry holds its origin, URL, salt and signature: 8 KiB covers them with room to spare.
    const blocks = Math.max(0, Math.floor((this.#maxPayload - 8192 - 2 * url.length) / 8));
    if (hashes.length <= 2 * blocks) return hashes;
    this.counters.truncated++;
    if (this.counters.truncated === 1 || this.counters.truncated % 100 === 0) {
      this.#log.warn({ replica: this.#sync.replicaId, blocks: hashes.length / 2, shared: blocks, max_payload: this.#maxPayload, truncated: this.counters.truncated }, "sync: a learned prompt too long for the NATS server's max_payload is shared up to the blocks that fit");
    }
    return hashes.subarray(0, 2 * blocks);
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

  /** The bounds on what the stream can make this replica hold, and their use (see bounds.ts). */
  bounds(): Bound[] {
    const budget = this.#config.routing.indexBytes;
    const views = (this.#mirror.views?.all ?? []).filter((v) => v !== null);
    const index = this.#mirror.router.prefixIndex;
    return [
      { bound: "sync_pending_entries", limit: this.#sync.maxBufferedEntries, used: this.pending },
      { bound: "replicated_fleet_upstreams", limit: this.#sync.maxFleet, used: this.#mirrorUrls.length },
      ...(index === null ? [] : [indexBound("replicated_index_bytes", index, budget)]),
      { bound: "replicated_engine_view_bytes", limit: views.length * budget, used: views.reduce((n, v) => n + (v.usable ? v.stats().bytesInUse : 0), 0) },
    ];
  }

  /** What `/sync/state` reports: the replicated state's sequence and digest (hashes its snapshot: not for every request). */
  state(): SyncState {
    return { replica: this.#sync.replicaId, applied: this.#appliedSeq, digest: stateDigest(this.#parts()) };
  }

  /** The replicated state's parts. */
  #parts() {
    return { urls: this.#mirrorUrls, router: this.#mirror.router, views: this.#mirror.views?.all ?? [] };
  }

  /** Starts sharing `local`'s changes and applying the others'. Connects in the background: routing never waits for NATS. */
  start(local: RoutingState, urls: () => readonly string[]): void {
    this.#local = local;
    this.#localUrls = urls;
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
      const { transport, jetstream, objects } = nats();
      const nc = await transport.connect({ ...connectOptions(transport, this.#sync.url, this.#sync.auth, this.#sync.tls), reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: RETRY_MS, timeout: CONNECT_TIMEOUT_MS, name: this.origin });
      if (this.#closed) {
        await nc.close();
        return;
      }
      // A server without JetStream answers nothing on its API: said as such, not as "unreachable".
      const jsm = await jetstream.jetstreamManager(nc).catch(async (error: unknown) => {
        await nc.close().catch(() => undefined);
        throw Object.assign(new Error(`JetStream is not enabled: ${(error as Error).message}`), { code: "JETSTREAM_NOT_ENABLED" });
      });
      await jsm.streams.add({ name: this.#stream, subjects: [this.#subject], duplicate_window: DUPLICATE_WINDOW_NS, max_msgs: this.#sync.maxEntries, discard: jetstream.DiscardPolicy.Old }).catch(async (error: unknown) => {
        // Another replica made it first (with the same settings): use it.
        await jsm.streams.info(this.#stream).catch(() => Promise.reject(error));
      });
      const objm = new objects.Objm(nc);
      this.#objects = await objm.create(`adp_${this.#sync.cluster}_snapshots`);
      this.#jsm = jsm;
      this.#nc = nc;
      this.#maxPayload = nc.info?.max_payload ?? this.#maxPayload;
      this.#js = jetstream.jetstream(nc);
      this.#setConnected(true);
      void this.#watch(nc);
      this.#consuming = this.#consume();
      this.#pump();
    } catch (error) {
      const { problem, detail } = syncProblem(await this.#diagnose(error));
      this.#problem = problem;
      this.#setConnected(false, detail, problem);
      this.#retry = setTimeout(() => void this.#connect(), RETRY_MS * 2);
      this.#retry.unref();
    }
  }

  /**
   * Why a connection failed: a client that retries for ever reports a refusal
   * it retried (a TLS alert, say) as a timeout, so one attempt without retries
   * is made to hear the server's own answer.
   */
  async #diagnose(error: unknown): Promise<unknown> {
    // Only a timeout hides the server's answer: a refusal or a named error already says what happened.
    const e = error as { name?: unknown; message?: unknown } | null;
    const timedOut = e?.name === "TimeoutError" || String(e?.message ?? "").toLowerCase().includes("timeout");
    if (!timedOut || syncProblem(error).problem !== "NATS unreachable" || this.#closed) return error;
    try {
      const { transport } = nats();
      const probe = await transport.connect({ ...connectOptions(transport, this.#sync.url, this.#sync.auth, this.#sync.tls), reconnect: false, timeout: CONNECT_TIMEOUT_MS });
      await probe.close();
      return error;
    } catch (answer) {
      return answer;
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

  /** What stops sync now (authentication, TLS, no JetStream, unreachable), or null while connected. */
  get problem(): SyncProblem | null {
    return this.#connected ? null : this.#problem;
  }

  /** Records (and logs) a change of connection; a problem that changes is said again. */
  #setConnected(connected: boolean, why?: string, problem: SyncProblem = "NATS unreachable"): void {
    // Unreachable from the start is said too (once), not only a connection lost.
    if (connected === this.#connected && (connected || (this.#saidUnreachable && this.#saidProblem === problem))) return;
    this.#connected = connected;
    this.#saidUnreachable = !connected;
    this.#saidProblem = connected ? null : problem;
    if (connected) {
      this.#problem = null;
      this.#log.info({ replica: this.#sync.replicaId, nats: this.#sync.url }, "sync: connected; sharing the routing state");
    } else this.#log.warn({ replica: this.#sync.replicaId, nats: this.#sync.url, problem, ...(why === undefined ? {} : { reason: why }) }, `sync: ${problem}; routing on local state, entries buffered`);
  }

  /** Publishes queued entries, up to WINDOW at once, in order; a failure puts the rest back and retries. */
  #pump(): void {
    const js = this.#js;
    if (js === null || !this.#connected) return;
    // The server's max_payload (1 MiB by default): a larger entry would be refused, put back and retried for ever.
    const most = this.#nc?.info?.max_payload ?? 1 << 20;
    while (this.#inFlight < WINDOW && this.#queue.length > 0) {
      const item = this.#queue.shift()!;
      if (item.bytes.length > most) {
        this.counters.tooLarge++;
        this.#log.warn({ replica: this.#sync.replicaId, bytes: item.bytes.length, max_payload: most, too_large: this.counters.tooLarge }, "sync: an entry over the NATS server's max_payload was not published (the other replicas miss it; a prompt this long routes on this replica's state)");
        continue;
      }
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

  /**
   * Before consuming: when the stream no longer holds the entry after the last
   * applied (a new replica on an old stream, one that fell behind), or on a
   * fresh start, loads the latest snapshot that covers the gap.
   */
  async #catchUp(): Promise<void> {
    const info = await this.#jsm!.streams.info(this.#stream);
    const first = info.state.first_seq;
    const behind = this.#appliedSeq + 1 < first;
    if (!behind && this.#appliedSeq > 0) return;
    const snapshot = await this.#loadSnapshot();
    if (snapshot !== null && snapshot.seq + 1 >= first && snapshot.seq > this.#appliedSeq) {
      this.#adopt(snapshot.seq, snapshot.parts);
      return;
    }
    for (const v of snapshot?.parts.views ?? []) v?.dispose();
    snapshot?.parts.router.prefixIndex?.dispose();
    if (behind && info.state.messages > 0) {
      // Entries gone with nothing to cover them: this replica's state will differ from the others'.
      this.counters.missed += first - 1 - this.#appliedSeq;
      this.#log.error({ replica: this.#sync.replicaId, applied: this.#appliedSeq, firstInStream: first }, "sync: the stream dropped entries this replica never applied and no snapshot covers them; its replicated state differs from the others'");
      this.#appliedSeq = first - 1;
    }
  }

  /** The latest stored snapshot, restored and checked, or null (none, or a damaged one: logged). */
  async #loadSnapshot(): Promise<{ seq: number; parts: ReturnType<typeof decodeStateSnapshot>["parts"] } | null> {
    const store = this.#objects;
    if (store === null) return null;
    const info = await store.info("latest");
    if (info === null) return null;
    try {
      const meta = JSON.parse(info.description ?? "{}") as { seq?: number; digest?: string };
      if (typeof meta.seq !== "number" || meta.seq > (await this.#lastSequence())) throw new SnapshotError("it claims a sequence the stream never reached");
      const stored = await store.getBlob("latest");
      if (stored === null || typeof meta.digest !== "string") throw new SnapshotError("missing its bytes or its digest");
      const bytes = this.#open(stored);
      const snapshot = decodeStateSnapshot(bytes, meta.digest);
      if (snapshot.seq !== meta.seq) throw new SnapshotError("its sequence differs from the one recorded with it");
      return snapshot;
    } catch (error) {
      this.#log.error({ replica: this.#sync.replicaId, reason: (error as Error).message.slice(0, 200) }, "sync: the stored snapshot cannot be used");
      return null;
    }
  }

  /** Takes a snapshot's state as the replicated state (and as the routing state's, on a fresh start). */
  #adopt(seq: number, parts: ReturnType<typeof decodeStateSnapshot>["parts"]): void {
    const views = gatewayEngineViews(this.#config, []);
    views.adopt(parts.views);
    this.#mirror.views?.dispose();
    this.#mirror.router.prefixIndex?.dispose();
    this.#mirror = new RoutingState(parts.router, null, { views, live: () => [] });
    this.#mirrorUrls = parts.urls;
    this.#appliedSeq = seq;
    this.counters.snapshotsLoaded++;
    // A routing state that has learned nothing yet starts from the cluster's (its own engines' events it ingests itself).
    const local = this.#local;
    const sameFleet = JSON.stringify(this.#localUrls()) === JSON.stringify(parts.urls);
    if (local !== null && sameFleet && local.router.prefixIndex !== null && local.router.prefixIndex.usable && local.router.prefixIndex.stats().blocks === 0) local.restore(parts.router.snapshot());
    this.#log.info({ replica: this.#sync.replicaId, seq }, "sync: started from the stored snapshot");
  }

  /** Stores the replicated state as the latest snapshot, unless a newer one is there (one at a time). */
  async #storeSnapshot(): Promise<void> {
    const store = this.#objects;
    if (store === null || this.#storing) return;
    this.#storing = true;
    try {
      // Taken now, at this sequence, before anything awaits: entries applied meanwhile must not slip into it.
      const seq = this.#appliedSeq;
      const parts = this.#parts();
      const bytes = encodeStateSnapshot(seq, parts);
      const digest = stateDigest(parts);
      const info = await store.info("latest");
      const stored = info === null ? -1 : Number((JSON.parse(info.description ?? "{}") as { seq?: unknown }).seq ?? -1);
      // Another replica got there first, unless what is there claims a sequence the stream never reached (planted).
      if (stored >= seq && stored <= (await this.#lastSequence())) return;
      await store.putBlob({ name: "latest", description: JSON.stringify({ seq, digest }) }, this.#seal(bytes));
      this.counters.snapshotsStored++;
    } catch (error) {
      this.#log.warn({ replica: this.#sync.replicaId, reason: (error as Error).message.slice(0, 200) }, "sync: could not store a snapshot");
    } finally {
      this.#storing = false;
    }
  }

  /** The stream's last sequence (what any real snapshot covers at most). */
  async #lastSequence(): Promise<number> {
    const jsm = this.#jsm;
    if (jsm === null) return -1;
    return (await jsm.streams.info(this.#stream)).state.last_seq;
  }

  /** Applies the stream in order from the entry after the last applied, for as long as the replica runs. */
  async #consume(): Promise<void> {
    while (!this.#closed && this.#js !== null) {
      try {
        await this.#catchUp();
        const consumer = await this.#js.consumers.get(this.#stream, { deliver_policy: nats().jetstream.DeliverPolicy.StartSequence, opt_start_seq: this.#appliedSeq + 1 });
        const messages = await consumer.consume();
        this.#messages = messages;
        let turn = performance.now();
        for await (const m of messages) {
          if (this.#closed) break;
          this.#onMessage(m.seq, m.data);
          // A backlog is applied a few milliseconds at a time: requests and /health are served in between.
          if (performance.now() - turn > TURN_MS) {
            await nextTurn();
            turn = performance.now();
          }
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
    if (seq !== this.#appliedSeq + 1) {
      // The stream dropped entries this replica had not applied: start over from a snapshot.
      this.#messages?.stop();
      return;
    }
    this.#appliedSeq = seq;
    try {
      this.#applyMessage(seq, data);
    } finally {
      // Stored once the entry is applied: the snapshot is the state at `seq`, exactly.
      if (seq % this.#sync.snapshotEvery === 0) void this.#storeSnapshot();
    }
  }

  /** Applies the message at `seq` (the next in the stream) to the replicated state, and the others' to the routing state. */
  #applyMessage(seq: number, data: Uint8Array): void {
    let message;
    try {
      message = decodeEntry(this.#open(data), this.#bounds);
    } catch (error) {
      if (error instanceof SignatureError) return this.#reject(seq, error.problem, error.message);
      if (error instanceof SyncEntryError && error.overBounds) return this.#reject(seq, "over the local bounds", error.message);
      // Anything the codec throws is the message's fault: counted, never a stopped consumer.
      return this.#reject(seq, "not an entry", (error as Error).message);
    }
    // A fleet change is bounded by this replica's own limits before anything is built for it (10,000 URLs took
    // a replica from 83 MB to 915 MB): its size by sync.max_fleet as it was read, its engine views' ranks here.
    if (!("url" in message)) {
      const ranks = message.entry.dpRanks.reduce<number>((n, d) => n + (d ?? 1), 0);
      if (ranks > MAX_SHARED_RANKS) return this.#reject(seq, "over the local bounds", `a fleet of ${message.entry.urls.length} upstreams with ${ranks} ranks (at most ${MAX_SHARED_RANKS})`);
    }
    this.counters.applied++;
    try {
      if (!("url" in message)) {
        // A fleet change, once: the same change from another replica finds the fleet already moved.
        const { urls, dpRanks } = message.entry;
        if (JSON.stringify(urls) === JSON.stringify(this.#mirrorUrls)) return;
        const from = this.#mirrorUrls;
        // A view's KV-cache groups are not in the entry: replicas read them from their own configuration, by URL.
        const groupsOf = (url: string) => {
          const events = this.#config.upstreams.find((u) => u.url === url)?.kvEvents;
          return events?.kind === "zmq" ? events.groups : [];
        };
        this.#mirror.moveRanks(urls.map((u) => (from.indexOf(u) < 0 ? null : from.indexOf(u))), dpRanks.map((d, i) => (d === null ? null : { dpRanks: d, groups: groupsOf(urls[i]!) })));
        this.#mirrorUrls = urls;
        return;
      }
      const rank = this.#mirrorUrls.indexOf(message.url);
      if (rank < 0) throw new Error(`no upstream ${message.url.slice(0, 200)} in the replicated fleet`);
      const entry = { ...message.entry, upstream: rank };
      this.#mirror.apply(entry);
      // The routing state made its own changes already; it takes the others' learned prompts (its engines'
      // events it ingests itself), on its own ranks, and every binding in stream order, its own too: two
      // replicas that bound one conversation at once then agree on the one the stream put last.
      const local = this.#localUrls().indexOf(message.url);
      if (local >= 0 && (entry.op === "bind" || (entry.op === "learn-blocks" && message.origin !== this.origin))) this.#local?.applyQuietly({ ...entry, upstream: local });
    } catch (error) {
      // An entry naming an upstream this fleet does not have (a replica with another configuration).
      this.#reject(seq, "not applicable", (error as Error).message);
    }
    }
}
