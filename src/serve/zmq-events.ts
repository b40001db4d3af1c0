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

import { createHash } from "node:crypto";
import { Decoder } from "@msgpack/msgpack";
import { Dealer, Subscriber } from "zeromq";
import { engineStatus, EventFreshness, zeroCounters, type FeedStatus } from "./event-freshness.js";
import type { KvEventsConfig } from "./events-config.js";
import type { IndexUpdate, IndexUpdateSource } from "./routing-state.js";

/** Largest message taken from an engine (a peer sending more is disconnected by ZeroMQ). */
const MAX_MESSAGE_BYTES = 64 << 20;
/** Batches a publisher keeps for replay (vLLM's `buffer_steps`). */
const REPLAY_BUFFER_STEPS = 10_000;
/** The replay's end marker: sequence -1 as 8 signed big-endian bytes. */
const END_MARKER = -1n;

/** `endpoint` for DP rank `rank`: its port plus the rank (`tcp://…:PORT`), as the engines offset them. */
export function rankEndpoint(endpoint: string, rank: number): string {
  if (rank === 0) return endpoint;
  const colon = endpoint.lastIndexOf(":");
  return `${endpoint.slice(0, colon)}:${Number(endpoint.slice(colon + 1)) + rank}`;
}

/** A msgpack decoder for event batches: 64-bit integers as bigints (block hashes keep every bit), sizes bounded. */
export function batchDecoder(): Decoder {
  return new Decoder({ useBigInt64: true, maxStrLength: 1 << 20, maxBinLength: 1 << 16, maxArrayLength: 1 << 24, maxMapLength: 1 << 10, maxExtLength: 0 });
}

/**
 * A batch's publication time (`ts`, map or positional), part of its identity:
 * a restarted publisher numbers its batches from 0 again, at other times.
 */
function batchTime(batch: unknown): string {
  const ts = Array.isArray(batch) ? batch[0] : typeof batch === "object" && batch !== null ? (batch as Record<string, unknown>).ts : undefined;
  return typeof ts === "number" || typeof ts === "bigint" ? String(ts) : "";
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

  constructor(
    readonly rank: number,
    readonly endpoint: string,
    readonly replayEndpoint: string | null,
    staleAfterMs: number,
    now: () => number,
    /** CURVE to the engine (its public key, the gateway's key pair), or null. */
    readonly curve: { readonly serverPublicKey: string; readonly publicKey: string; readonly secretKey: string } | null = null,
  ) {
    this.freshness = new EventFreshness({ staleAfterMs, now });
    this.sub = new Subscriber({ maxMessageSize: MAX_MESSAGE_BYTES, linger: 0, ...this.#curveOptions() });
  }

  /** The socket options of CURVE as a client of the engine (none without it). */
  #curveOptions(): { curveServerKey?: string; curvePublicKey?: string; curveSecretKey?: string } {
    const c = this.curve;
    return c === null ? {} : { curveServerKey: c.serverPublicKey, curvePublicKey: c.publicKey, curveSecretKey: c.secretKey };
  }

  /** The replay socket, connected on first use (a timed-out one is replaced: its late replies must not mix in). */
  replaySocket(timeoutMs: number): Dealer {
    if (this.#replay === null) {
      this.#replay = new Dealer({ receiveTimeout: timeoutMs, sendTimeout: timeoutMs, maxMessageSize: MAX_MESSAGE_BYTES, linger: 0, ...this.#curveOptions() });
      this.#replay.connect(this.replayEndpoint!);
    }
    return this.#replay;
  }

  /** Drops the replay socket (after a timeout or an error). */
  dropReplay(): void {
    this.#replay?.close();
    this.#replay = null;
  }

  close(): void {
    this.sub.close();
    this.dropReplay();
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
  readonly #decoder = batchDecoder();
  readonly #onNotice: NonNullable<ZmqEventSourceOptions["onNotice"]>;
  #closed = false;
  #loops: Promise<void>[] = [];

  constructor(config: Extract<KvEventsConfig, { kind: "zmq" }>, options: ZmqEventSourceOptions = {}) {
    this.#config = config;
    this.#onNotice = options.onNotice ?? (() => {});
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
    return this.#streams.map((s) => s.freshness.status);
  }

  routed(): void {
    for (const s of this.#streams) s.freshness.routed();
  }

  start(emit: (update: IndexUpdate) => void): void {
    for (const s of this.#streams) {
      s.sub.subscribe(this.#config.topic);
      this.#loops.push(this.#receive(s, emit));
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const s of this.#streams) s.close();
    await Promise.all(this.#loops);
  }

  /** Receives one rank's messages until closed, in order (a replay holds the next message back). */
  async #receive(s: RankStream, emit: (update: IndexUpdate) => void): Promise<void> {
    try {
      // A socket binds before it receives (zeromq allows one operation at a time on it).
      if (this.#config.bind) await s.sub.bind(s.endpoint);
      else s.sub.connect(s.endpoint);
      for await (const frames of s.sub) {
        if (this.#closed) break;
        const seq = frames.length === 3 ? sequenceOf(frames[1]) : null;
        if (seq === null) {
          this.counters.unparseable++;
          this.#onNotice({ rank: s.rank, what: "message skipped", detail: `${frames.length} frames, expected topic, sequence (8 bytes), payload` });
          continue;
        }
        await this.#onBatch(s, seq, frames[2]!, emit);
      }
    } catch (error) {
      if (!this.#closed) this.#onNotice({ rank: s.rank, what: "stream ended", detail: (error as Error).message });
    }
  }

  /** Applies (or skips) one live batch, filling a gap before it first. */
  async #onBatch(s: RankStream, seq: bigint, payload: Buffer, emit: (update: IndexUpdate) => void): Promise<void> {
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
    this.#apply(s, seq, payload, emit, step === "restart");
  }

  /**
   * Decodes and emits one batch (`seq` its number), after emptying the view
   * when it comes from a restarted publisher (`restart`); one that does not
   * decode is counted and skipped.
   */
  #apply(s: RankStream, seq: bigint, payload: Uint8Array, emit: (update: IndexUpdate) => void, restart = false): boolean {
    if (payload.length > this.#config.maxBatchBytes) {
      // Refused unread (decoding and applying it would hold the event loop); its events are lost, so the stream is gapped.
      if (restart) emit({ kind: "cleared", dpRank: s.rank, id: `${s.endpoint}|${seq}|restart` });
      this.counters.oversized++;
      s.freshness.unfilled(seq);
      this.#onNotice({ rank: s.rank, what: "batch refused; stream gapped while its view goes on", detail: `${payload.length} bytes, over kv_events.max_batch_bytes (${this.#config.maxBatchBytes})` });
      return false;
    }
    let events: unknown;
    try {
      events = this.#decoder.decode(payload);
    } catch (error) {
      if (restart) emit({ kind: "cleared", dpRank: s.rank, id: `${s.endpoint}|${seq}|restart` });
      this.counters.unparseable++;
      this.#onNotice({ rank: s.rank, what: "batch skipped", detail: `not msgpack: ${(error as Error).message.slice(0, 120)}` });
      return false;
    }
    this.counters.batches++;
    // Its identity at every replica: where and when it was published, and what it says (a restarted publisher
    // numbers from 0 again; its time and contents tell its batches from the old ones).
    const id = `${s.endpoint}|${seq}|${batchTime(events)}|${createHash("sha256").update(payload).digest("base64url").slice(0, 22)}`;
    if (restart) emit({ kind: "cleared", dpRank: s.rank, id: `${id}|restart` });
    emit({ kind: "kv-events", events, dpRank: s.rank, id });
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
    let frames = first ? REPLAY_BUFFER_STEPS : Number(upTo - from) + 1;
    try {
      await dealer.send(["", request]);
      while (!this.#closed) {
        if (performance.now() > deadline || frames-- <= 0) throw Object.assign(new Error("replay too long"), { code: "REPLAY_TOO_LONG" });
        const reply = await dealer.receive();
        if (this.#closed) return;
        const body = reply[0]?.length === 0 ? reply.slice(1) : reply; // the ROUTER's empty delimiter
        const seq = sequenceOf(body.length === 3 ? body[1] : body[0]);
        if (seq === null) continue;
        if (seq === END_MARKER) break;
        if (seq >= upTo || (seq !== s.freshness.expected && !(first && s.freshness.expected === null))) continue;
        s.freshness.filled(seq);
        if (this.#apply(s, seq, body[body.length - 1]!, emit)) this.counters.replayed++;
      }
    } catch (error) {
      if (this.#closed) return;
      this.#onNotice({ rank: s.rank, what: "replay failed", detail: (error as { code?: string }).code ?? (error as Error).message });
      s.dropReplay();
    }
  }
}
