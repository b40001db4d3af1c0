// An engine's KV-cache events over ZeroMQ (kv-events reference §2): one SUB
// socket per data-parallel rank (the engine offsets its PUB port by the rank),
// each message three frames (topic, 8-byte big-endian sequence number, msgpack
// EventBatch). Batches are applied in sequence order; a gap is filled through
// the engine's replay (ROUTER) socket when one is configured (and a first
// batch numbered above 0 asks for the publisher's buffer from 0, so a stream
// the gateway joins late misses what the engine still buffers of it). A gap
// that cannot be filled leaves the rank's view as it is (missing what the lost
// batches stored, holding what they removed) and the stream `gapped` for
// `stale_after_ms`: emptying the view instead would orphan every later chain
// (its parent gone) and leave the view cold for good (`adp-router simulate
// --event-drop 0.01`: hit ratio 0.147 emptied, 0.359 kept, 0.360 with no loss).
// A publisher restart (its sequence starts over) empties the view. A batch
// that does not decode is counted and skipped.

import type { Dealer, Subscriber } from "zeromq";
import { StreamTurns } from "../common/next-turn.js";
import { zeromq } from "../common/optional-packages.js";
import { BatchDecoder } from "./batch-decoder.js";
import { engineStatus, EventFreshness, rankStatuses, zeroCounters, type FeedStatus } from "./event-freshness.js";
import type { CurveConfig, KvEventsConfig } from "../config/events-config.js";
import type { IndexUpdate, IndexUpdateSource } from "./index-update.js";
import { registerAllowList } from "./zap-handler.js";
import { NoticeThrottle } from "./notice-throttle.js";

/** Largest message taken from an engine (a peer sending more is disconnected by ZeroMQ). */
const MAX_MESSAGE_BYTES = 64 << 20;
/** Batches a publisher keeps for replay (vLLM's `buffer_steps`). */
const REPLAY_BUFFER_STEPS = 10_000;
/** The replay's end marker: sequence -1 as 8 signed big-endian bytes. */
const END_MARKER = -1n;
/** A replay's upper bound when it asks for the whole buffer (any batch the publisher holds is below it). */
const WHOLE_BUFFER = 1n << 63n;

/** `endpoint` for DP rank `rank`: its port plus the rank (`tcp://…:PORT`), as the engines offset them. */
export function rankEndpoint(endpoint: string, rank: number): string {
  if (rank === 0) return endpoint;
  const colon = endpoint.lastIndexOf(":");
  return `${endpoint.slice(0, colon)}:${Number(endpoint.slice(colon + 1)) + rank}`;
}

/** A sequence-number frame as a bigint (signed, so the end marker reads -1), or null when it is not 8 bytes. */
function sequenceOf(frame: Buffer | undefined): bigint | null {
  return frame !== undefined && frame.length === 8 ? frame.readBigInt64BE(0) : null;
}

/** One DP rank's stream. */
class RankStream {
  readonly freshness: EventFreshness;
  readonly sub: Subscriber;
  #replay: Dealer | null = null;
  /**
   * The last batch the replay at subscription applied, until the live stream
   * passes it: the SUB socket was already subscribed, so batches published
   * meanwhile come both in the replay and live, and are not a restart.
   */
  replayedThrough: bigint | null = null;
  /** The stream's work in order: live batches and the replays a reconnection asks for never interleave. */
  #work: Promise<void> = Promise.resolve();

  constructor(
    readonly rank: number,
    readonly endpoint: string,
    readonly replayEndpoint: string | null,
    staleAfterMs: number,
    now: () => number,
    /** CURVE, as the engine's client or as the server its publishers connect to, or null. */
    readonly curve: CurveConfig | null = null,
  ) {
    this.freshness = new EventFreshness({ staleAfterMs, now });
    this.sub = new (zeromq().Subscriber)({ maxMessageSize: MAX_MESSAGE_BYTES, linger: 0, ...this.#curveOptions() });
  }

  /** The socket options of CURVE as a client of the engine (none without it, or as a server: set when it binds). */
  #curveOptions(): { curveServerKey?: string; curvePublicKey?: string; curveSecretKey?: string } {
    const c = this.curve;
    return c?.role !== "client" ? {} : { curveServerKey: c.serverPublicKey, curvePublicKey: c.publicKey, curveSecretKey: c.secretKey };
  }

  /** Releases the stream's allow-list, once it is a CURVE server. */
  release: () => void = () => {};

  /**
   * Makes the SUB socket a CURVE server that admits only the allowed
   * publishers (before it binds); `onRefused` hears each one turned away.
   */
  async serveCurve(curve: Extract<CurveConfig, { role: "server" }>, onRefused: (address: string) => void): Promise<void> {
    const { domain, release } = await registerAllowList(curve.allowedClients, onRefused);
    this.release = release;
    this.sub.curveServer = true;
    this.sub.curveSecretKey = curve.secretKey;
    this.sub.zapDomain = domain;
  }

  /** The replay socket, connected on first use (a timed-out one is replaced: its late replies must not mix in). */
  replaySocket(timeoutMs: number): Dealer {
    if (this.#replay === null) {
      this.#replay = new (zeromq().Dealer)({ receiveTimeout: timeoutMs, sendTimeout: timeoutMs, maxMessageSize: MAX_MESSAGE_BYTES, linger: 0, ...this.#curveOptions() });
      this.#replay.connect(this.replayEndpoint!);
    }
    return this.#replay;
  }

  /** Runs `task` after the stream's earlier work (a failure is the task's own: the queue goes on). */
  serially(task: () => Promise<void>): Promise<void> {
    const next = this.#work.then(task, task);
    this.#work = next.catch(() => {});
    return next;
  }

  /** Drops the replay socket (after a timeout or an error). */
  dropReplay(): void {
    this.#replay?.close();
    this.#replay = null;
  }

  close(): void {
    this.sub.close();
    this.dropReplay();
    this.release();
  }
}

/** Options of {@link ZmqEventSource}. */
export interface ZmqEventSourceOptions {
  /** The clock (ms), for staleness; injectable for tests. */
  readonly now?: () => number;
  /** Called with what went wrong or changed (gaps, restarts, unparseable batches), for logs. */
  readonly onNotice?: (notice: { readonly rank: number; readonly what: string; readonly detail?: string }) => void;
}

/** An upstream's KV events from its engine's ZeroMQ streams, one per DP rank. */
export class ZmqEventSource implements IndexUpdateSource {
  readonly kind = "zmq";
  readonly counters = zeroCounters();
  readonly #config: Extract<KvEventsConfig, { kind: "zmq" }>;
  readonly #streams: RankStream[];
  /** The process's batch decoder (large batches prepared off the event loop), while started. */
  #decoder: BatchDecoder | null = null;
  /** The longest list a batch's decoding may allocate. */
  readonly #maxItems: number;
  readonly #onNotice: NonNullable<ZmqEventSourceOptions["onNotice"]>;
  #closed = false;
  #loops: Promise<void>[] = [];

  constructor(config: Extract<KvEventsConfig, { kind: "zmq" }>, options: ZmqEventSourceOptions = {}) {
    this.#config = config;
    this.#maxItems = Math.max(config.maxBatchBlocks, config.maxBatchTokens);
    // Each kind of notice of a rank reaches the log the first time and every hundredth (notice-throttle.ts).
    const throttle = new NoticeThrottle(options.onNotice ?? (() => {}));
    this.#onNotice = (notice) => throttle.notice(notice);
    const now = options.now ?? Date.now;
    this.#streams = Array.from({ length: config.dpRanks }, (_, r) =>
      new RankStream(r, rankEndpoint(config.endpoint, r), config.replayEndpoint === null ? null : rankEndpoint(config.replayEndpoint, r), config.staleAfterMs, now, config.curve ?? null),
    );
  }

  /** Its DP ranks' statuses as one (see engineStatus). */
  get status(): FeedStatus {
    return engineStatus(this.#streams.map((s) => s.freshness));
  }

  /** Each DP rank's status. */
  get rankStatuses(): FeedStatus[] {
    return rankStatuses(this.#streams.map((s) => s.freshness));
  }

  routed(): void {
    for (const s of this.#streams) s.freshness.routed();
  }

  start(emit: (update: IndexUpdate) => void): void {
    this.#decoder = BatchDecoder.acquire();
    for (const s of this.#streams) {
      s.sub.subscribe(this.#config.topic);
      this.#loops.push(this.#receive(s, emit));
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const s of this.#streams) s.close();
    await Promise.all(this.#loops);
    if (this.#decoder !== null) BatchDecoder.release();
    this.#decoder = null;
  }

  /** Receives one rank's messages until closed, in order (a replay holds the next message back). */
  async #receive(s: RankStream, emit: (update: IndexUpdate) => void): Promise<void> {
    try {
      // A socket binds before it receives (zeromq allows one operation at a time on it).
      const curve = this.#config.curve;
      if (curve?.role === "server") await s.serveCurve(curve, (address) => this.#refusedPeer(s, address));
      if (s.replayEndpoint !== null) this.#replayOnReconnect(s, emit);
      if (this.#config.bind) await s.sub.bind(s.endpoint);
      else s.sub.connect(s.endpoint);
      // What the publisher still buffers, asked for at once: a rank that has served nothing publishes nothing, and
      // after a gateway restart its view would otherwise wait for its next live batch. Live batches queue meanwhile.
      if (s.replayEndpoint !== null) {
        await s.serially(async () => {
          await this.#replay(s, 0n, WHOLE_BUFFER, emit, true);
          const expected = s.freshness.expected;
          s.replayedThrough = expected === null ? null : expected - 1n;
        });
      }
      // A stream never empty (a flood) lets requests in: ZeroMQ hands a queued message back as a microtask.
      const turns = new StreamTurns();
      for await (const frames of s.sub) {
        if (this.#closed) break;
        const turn = turns.take();
        if (turn !== null) await turn;
        if (this.#closed) break;
        const seq = frames.length === 3 ? sequenceOf(frames[1]) : null;
        if (seq === null) {
          this.counters.unparseable++;
          this.#onNotice({ rank: s.rank, what: "message skipped", detail: `${frames.length} frames, expected topic, sequence (8 bytes), payload` });
        } else {
          await s.serially(() => this.#onBatch(s, seq, frames[2]!, emit));
          if (this.#closed) break;
        }
      }
    } catch (error) {
      if (!this.#closed) this.#onNotice({ rank: s.rank, what: "stream ended", detail: (error as Error).message });
    }
  }

  /**
   * After the stream's connection to its publisher comes back (the engine's
   * network went away, or the gateway's), asks for what the publisher
   * buffered meanwhile: an idle rank publishes nothing that would show the
   * gap, so its view would otherwise miss those batches until its next one.
   * Only a completed ZeroMQ handshake counts (a bare TCP connection, a port
   * scanner, a CURVE handshake that fails, is no publisher), and at most one
   * such replay waits at a time.
   */
  #replayOnReconnect(s: RankStream, emit: (update: IndexUpdate) => void): void {
    let handshakes = 0;
    let pending = false;
    s.sub.events.on("handshake", () => {
      handshakes++;
      // The first is the subscription's, whose replay runs in #receive.
      if (handshakes === 1 || this.#closed || pending) return;
      this.counters.reconnects++;
      pending = true;
      void s.serially(async () => {
        pending = false;
        if (this.#closed) return;
        const from = s.freshness.expected;
        await this.#replay(s, from ?? 0n, WHOLE_BUFFER, emit, from === null);
        // Batches published since the SUB socket came back arrive live too: those the replay carried are duplicates.
        const expected = s.freshness.expected;
        if (expected !== null && expected !== from) s.replayedThrough = expected - 1n;
      });
    });
  }

  /** Applies (or skips) one live batch, filling a gap before it first. */
  async #onBatch(s: RankStream, seq: bigint, payload: Buffer, emit: (update: IndexUpdate) => void): Promise<void> {
    if (s.replayedThrough !== null) {
      // Queued live while the replay at subscription carried it too: already applied (0 is still a restart).
      if (seq > 0n && seq <= s.replayedThrough) {
        this.counters.duplicates++;
        return;
      }
      s.replayedThrough = null;
    }
    if (s.freshness.expected === null && seq > 0n && s.replayEndpoint !== null) {
      // First contact with a stream already under way: what the publisher still buffers comes first.
      await this.#replay(s, 0n, seq, emit, true);
      if (this.#closed) return;
    }
    let step = s.freshness.batch(seq);
    if (step === "gap") {
      this.counters.gaps++;
      const from = s.freshness.expected!;
      if (s.replayEndpoint !== null) await this.#replay(s, from, seq, emit, false);
      if (this.#closed) return;
      step = s.freshness.batch(seq);
      if (step === "gap") {
        // Not filled: the view goes on from this batch, untrusted until it has for a while.
        this.counters.unfilled++;
        this.#onNotice({ rank: s.rank, what: "gap not filled; stream gapped while its view goes on", detail: `batches ${from}..${seq - 1n} lost` });
        s.freshness.unfilled(seq);
        step = "next";
      }
    }
    if (step === "old") {
      this.counters.duplicates++;
      return;
    }
    if (step === "restart") {
      this.counters.restarts++;
      this.#onNotice({ rank: s.rank, what: "publisher restarted; view emptied", detail: `sequence ${seq}` });
    }
    await this.#apply(s, seq, payload, emit, step === "restart");
  }

  /** Counts a publisher CURVE turned away (logged at the first and every hundredth, as every notice: a scanner must not flood the log). */
  #refusedPeer(s: RankStream, address: string): void {
    this.counters.refusedPeers++;
    this.#onNotice({ rank: s.rank, what: "publisher refused: its CURVE public key is not allowed", detail: `${this.counters.refusedPeers} so far, the latest from ${address || "an unknown address"}` });
  }

  /** Empties the view when batch `seq`, not applied, came from a restarted publisher (the restart still happened). */
  #clearOnRestart(s: RankStream, seq: bigint, emit: (update: IndexUpdate) => void, restart: boolean): void {
    if (restart) emit({ kind: "cleared", dpRank: s.rank, id: `${s.endpoint}|${seq}|restart` });
  }

  /** Refuses batch `seq` for its size (its events are lost: the stream is gapped), after the restart it shows. */
  #refuse(s: RankStream, seq: bigint, emit: (update: IndexUpdate) => void, restart: boolean, detail: string): false {
    this.#clearOnRestart(s, seq, emit, restart);
    this.counters.oversized++;
    s.freshness.unfilled(seq);
    this.#onNotice({ rank: s.rank, what: "batch refused; stream gapped while its view goes on", detail });
    return false;
  }

  /**
   * Decodes and emits one batch (`seq` its number), after emptying the view
   * when it comes from a restarted publisher (`restart`); one that does not
   * decode is counted and skipped.
   */
  async #apply(s: RankStream, seq: bigint, payload: Uint8Array, emit: (update: IndexUpdate) => void, restart = false): Promise<boolean> {
    // Refused unread: decoding and applying it would hold the event loop.
    if (payload.length > this.#config.maxBatchBytes) return this.#refuse(s, seq, emit, restart, `${payload.length} bytes, over kv_events.max_batch_bytes (${this.#config.maxBatchBytes})`);
    const batch = await this.#decoder!.prepare(payload, "msgpack", this.#maxItems, this.#config);
    if (this.#closed) return false;
    if (batch.kind !== "ok") {
      if (batch.kind === "oversized") return this.#refuse(s, seq, emit, restart, batch.detail);
      this.#clearOnRestart(s, seq, emit, restart);
      this.counters.unparseable++;
      this.#onNotice({ rank: s.rank, what: "batch skipped", detail: batch.detail });
      return false;
    }
    // Its identity at every replica: where and when it was published, and what it says (a restarted publisher
    // numbers from 0 again; its time and contents tell its batches from the old ones).
    const id = `${s.endpoint}|${seq}|${batch.time}|${batch.digest}`;
    if (restart) emit({ kind: "cleared", dpRank: s.rank, id: `${id}|restart` });
    // A slice a turn: each arrives from the worker as its own message (or, prepared inline, after a turn).
    let k = 0;
    try {
      for await (const slice of batch.slices) {
        if (this.#closed) return false;
        emit({ kind: "kv-events", events: slice, dpRank: s.rank, id: k === 0 ? id : `${id}#${k}` });
        k++;
      }
    } catch (error) {
      // A slice that could not be read back from the worker: the rest of the batch is lost, not the stream.
      this.counters.unparseable++;
      s.freshness.unfilled(seq);
      this.#onNotice({ rank: s.rank, what: "batch skipped; stream gapped while its view goes on", detail: `slice ${k}: ${(error as Error).message.slice(0, 120)}` });
      return false;
    }
    this.counters.batches++;
    return true;
  }

  /**
   * Asks the engine's replay socket for the batches from `from` on and applies
   * those that continue the sequence, up to the end marker (vLLM replies
   * `(seq, payload)`, TensorRT-LLM `(topic, seq, payload)`). On first contact
   * (`first`) the stream starts at the first batch replayed, whatever its
   * number. Gives up at the configured timeout; what it filled stays filled.
   */
  async #replay(s: RankStream, from: bigint, upTo: bigint, emit: (update: IndexUpdate) => void, first: boolean): Promise<void> {
    const dealer = s.replaySocket(this.#config.replayTimeoutMs);
    const request = Buffer.alloc(8);
    request.writeBigInt64BE(from, 0);
    // One deadline for the whole replay, and no more frames than the gap holds (plus the publisher's
    // buffer on first contact): a replay socket that keeps talking must not hold the live stream back.
    const deadline = performance.now() + 4 * this.#config.replayTimeoutMs;
    let frames = (first || upTo === WHOLE_BUFFER ? REPLAY_BUFFER_STEPS : Number(upTo - from)) + 1; // the batches, and the end marker
    try {
      await dealer.send(["", request]);
      while (!this.#closed) {
        if (performance.now() > deadline || frames-- <= 0) throw Object.assign(new Error("replay too long"), { code: "REPLAY_TOO_LONG" });
        const reply = await dealer.receive();
        if (this.#closed) return;
        const body = reply[0]?.length === 0 ? reply.slice(1) : reply; // the ROUTER's empty delimiter
        const seq = sequenceOf(body.length === 3 ? body[1] : body[0]);
        if (seq === null) continue;
        if (seq === END_MARKER) {
          s.freshness.heard(); // the publisher answered: what it holds is what was replayed (nothing, for an idle rank)
          break;
        }
        if (seq >= upTo || (seq !== s.freshness.expected && !(first && s.freshness.expected === null))) continue;
        s.freshness.filled(seq);
        if (await this.#apply(s, seq, body[body.length - 1]!, emit)) this.counters.replayed++;
      }
    } catch (error) {
      if (this.#closed) return;
      this.#onNotice({ rank: s.rank, what: "replay failed", detail: (error as { code?: string }).code ?? (error as Error).message });
      s.dropReplay();
    }
  }
}
