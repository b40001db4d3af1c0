// How the simulated engine's KV-cache events reach the router in
// `--index-updates events` runs, and what the router makes of them when they
// arrive late, get lost, or stop: the rules of the gateway's event sources
// (gateway/src/events/zmq-events.ts, http-events.ts) and EventFreshness, in the
// simulation's own time. Platform-neutral and deterministic: losses come from
// a seeded hash, never a clock or Math.random.
//
// Each engine rank publishes its own stream (as TensorRT-LLM's attention-DP
// ranks do): one batch per iteration in which its cache stored or evicted
// blocks, numbered 0, 1, 2, … per rank. A batch reaches the router `delayMs`
// after it was published, in publication order, unless the link loses it (a
// `dropRate` share of batches, picked by hashing seed, rank and number).
//
// The router keeps two views of every rank, as the gateway does: the engine
// view, built from the events, and its own, learned from every placement. A
// rank's match comes from the engine view while its stream is live, else from
// the router's own view. A stream is
//   - gapped after a batch whose number skips some. With replay, the lost
//     batches are fetched and applied first and nothing is gapped (a stream's
//     first batch numbered above 0 asks for the publisher's buffer from 0 too).
//     Without, the rank's engine view is kept as it is (missing what the lost
//     batches stored, holding what they removed: emptying it would leave every
//     later chain without its parent, and the view cold for good) and trusted
//     again `staleAfterMs` later; without replay a stream's first batch is
//     taken whatever its number (a loss cannot be told from batches published
//     before the gateway listened);
//   - stale when the rank was sent requests and its stream has said nothing
//     for `staleAfterMs` (an idle engine has nothing to say);
//   - live otherwise, from the start: the engine and the router start
//     together, both empty (the gateway's streams are stale until their first
//     batch, a polled engine's until its first answer with events; not modelled).

import { AdpInputError } from "../errors.js";

/** How engine KV-event batches travel to the router, and what it does about losses. */
export interface EventModel {
  /** Simulated milliseconds between a batch's publication and its arrival at the router. @default 0 */
  readonly delayMs: number;
  /** Share of batches the link loses, from 0 to 1. @default 0 */
  readonly dropRate: number;
  /** Whether a gap is filled by replaying the lost batches from the publisher. @default false */
  readonly replay: boolean;
  /** Seed of the loss draw: the same seed loses the same batches. @default 1 */
  readonly seed: number;
  /**
   * The gateway's `stale_after_ms`: silence (ms) after which a stream whose
   * rank was sent requests is stale, and how long a view rebuilt after a gap
   * stays gapped. @default 10000 (the gateway's default)
   */
  readonly staleAfterMs: number;
}

/** The event model of a plain `--index-updates events` run: no delay, no loss, the gateway's staleness. */
export const DEFAULT_EVENT_MODEL: EventModel = Object.freeze({ delayMs: 0, dropRate: 0, replay: false, seed: 1, staleAfterMs: 10_000 });

/** Where a rank's stream stands, as the gateway's FeedStatus names it. */
export type StreamStatus = "live" | "gapped" | "stale";

/** What happened on a run's event streams (summed over ranks). */
export interface EventFeedCounts {
  /** Batches the engine ranks published. */
  readonly batches_published: number;
  /** Batches that reached the router. */
  readonly batches_delivered: number;
  /** Batches the link lost. */
  readonly batches_dropped: number;
  /** Lost batches fetched again to fill a gap (replay only). */
  readonly batches_replayed: number;
  /**
   * Lost batches before their stream's first delivered one: the gateway takes
   * a stream's first batch whatever its number, so these gaps go unseen and
   * the engine view silently misses what they held.
   */
  readonly batches_lost_unseen: number;
  /** Batches still on their way when the run ended. */
  readonly batches_in_flight_at_end: number;
  /** Gaps seen: a batch numbered past the next expected one (each leaves that rank gapped for staleAfterMs unless replayed). */
  readonly gaps: number;
  /** Placements decided while that rank's stream was gapped (its match came from the router's own view). */
  readonly placements_while_gapped: number;
  /** Placements decided while that rank's stream was stale (its match came from the router's own view). */
  readonly placements_while_stale: number;
}

/** One published batch on its way. */
interface Batch {
  readonly rank: number;
  readonly seq: number;
  readonly events: unknown[];
  readonly dueMs: number;
}

/** What the router knows of one rank's stream. */
interface Stream {
  /** Number of the next batch this rank publishes. */
  nextSeq: number;
  /** Number of the last batch applied, or -1 before the first. */
  last: number;
  /** Until when a view rebuilt after a gap is not trusted (-Infinity: not gapped). */
  gappedUntilMs: number;
  /** Arrival time of the last batch (0 before the first: the stream answered at the start). */
  lastHeardMs: number;
  /** Whether the rank was sent requests since its stream last spoke (silence counts only then). */
  routedSinceHeard: boolean;
  /** Lost batches by number, kept for replay (replay only). */
  readonly lost: Map<number, Batch>;
}

/** What the feed does to the engine view. */
export interface FeedTarget {
  /** Applies engine KV events (PrefixIndex.applyKvEvents). */
  applyKvEvents(events: unknown[]): void;
  /** Empties one rank's view (PrefixIndex.clearRank). */
  clearRank(rank: number): void;
}

/** 32-bit finalizer of MurmurHash3: spreads every input bit over the output. */
function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * A uniform draw in [0, 1) for batch `seq` of `rank`. A hash, not a stream of
 * draws: a batch's fate depends on nothing else, so it does not shift when a
 * policy or delay changes how many batches other ranks publish, and with one
 * seed a lower drop rate loses a subset of what a higher one loses.
 */
export function lossDraw(seed: number, rank: number, seq: number): number {
  let h = fmix32((seed >>> 0) ^ 0x9e3779b9);
  h = fmix32(h ^ Math.floor(seed / 2 ** 32));
  h = fmix32(h ^ Math.imul(rank + 1, 0x27d4eb2f));
  h = fmix32(h ^ (seq >>> 0));
  return fmix32(h ^ Math.floor(seq / 2 ** 32)) / 2 ** 32;
}

/** The event link and the router's reading of every rank's stream, for one run. */
export class EventFeed {
  readonly #model: EventModel;
  readonly #target: FeedTarget;
  readonly #streams: Stream[];
  /** Batches on their way, in arrival order (the delay is the same for all, so publication order). */
  readonly #inFlight: Batch[] = [];
  #head = 0;
  #published = 0;
  #delivered = 0;
  #dropped = 0;
  #replayed = 0;
  #unseen = 0;
  #gaps = 0;
  #whileGapped = 0;
  #whileStale = 0;

  constructor(ranks: number, model: EventModel, target: FeedTarget) {
    this.#model = model;
    this.#target = target;
    this.#streams = Array.from({ length: ranks }, () => ({ nextSeq: 0, last: -1, gappedUntilMs: -Infinity, lastHeardMs: 0, routedSinceHeard: false, lost: new Map() }));
  }

  /** Rank `rank` publishes the events of one iteration at `atMs`. */
  publish(rank: number, events: unknown[], atMs: number): void {
    const stream = this.#streams[rank]!;
    const batch: Batch = { rank, seq: stream.nextSeq++, events, dueMs: atMs + this.#model.delayMs };
    this.#published++;
    if (this.#model.dropRate > 0 && lossDraw(this.#model.seed, rank, batch.seq) < this.#model.dropRate) {
      this.#dropped++;
      if (this.#model.replay) stream.lost.set(batch.seq, batch);
      return;
    }
    this.#inFlight.push(batch);
  }

  /** Hands the router every batch due by `nowMs`, in order (called right before it routes). */
  deliverDue(nowMs: number): void {
    const queue = this.#inFlight;
    while (this.#head < queue.length && queue[this.#head]!.dueMs <= nowMs) this.#receive(queue[this.#head++]!);
    // Compact now and then so the queue does not grow with the run.
    if (this.#head > 4096 && this.#head * 2 > queue.length) {
      queue.splice(0, this.#head);
      this.#head = 0;
    }
  }

  /** One batch arrives (at its due time): the gateway's sequence check, then replay or rebuild, then apply. */
  #receive(batch: Batch): void {
    const stream = this.#streams[batch.rank]!;
    this.#delivered++;
    stream.lastHeardMs = batch.dueMs;
    stream.routedSinceHeard = false;
    if (stream.last < 0 && !this.#model.replay) {
      // The stream's first batch: every earlier number was lost, unseen (see batches_lost_unseen).
      this.#unseen += batch.seq;
      this.#forget(stream, batch.seq);
    } else if (batch.seq > stream.last + 1) {
      this.#gaps++;
      if (this.#model.replay) {
        for (let seq = stream.last + 1; seq < batch.seq; seq++) {
          this.#replayed++;
          this.#target.applyKvEvents(stream.lost.get(seq)!.events);
          stream.lost.delete(seq);
        }
      } else {
        // What the gap held (stored blocks, evictions) is unknown: the engine
        // view goes on from this batch, and is not trusted until staleAfterMs.
        stream.gappedUntilMs = batch.dueMs + this.#model.staleAfterMs;
      }
    }
    stream.last = batch.seq;
    this.#target.applyKvEvents(batch.events);
  }

  /** Lets go of the lost batches numbered below `seq`: no replay will ask for them. */
  #forget(stream: Stream, seq: number): void {
    for (const lost of stream.lost.keys()) if (lost < seq) stream.lost.delete(lost);
  }

  /** Where rank `rank`'s stream stands at `nowMs`. */
  status(rank: number, nowMs: number): StreamStatus {
    const stream = this.#streams[rank]!;
    if (nowMs < stream.gappedUntilMs) return "gapped";
    return stream.routedSinceHeard && nowMs - stream.lastHeardMs > this.#model.staleAfterMs ? "stale" : "live";
  }

  /** The router placed a request on `rank`, deciding with its stream in `status` (silence now counts). */
  placed(rank: number, status: StreamStatus): void {
    this.#streams[rank]!.routedSinceHeard = true;
    if (status === "gapped") this.#whileGapped++;
    else if (status === "stale") this.#whileStale++;
  }

  /** The run's counts so far. */
  counts(): EventFeedCounts {
    return {
      batches_published: this.#published,
      batches_delivered: this.#delivered,
      batches_dropped: this.#dropped,
      batches_replayed: this.#replayed,
      batches_lost_unseen: this.#unseen,
      batches_in_flight_at_end: this.#inFlight.length - this.#head,
      gaps: this.#gaps,
      placements_while_gapped: this.#whileGapped,
      placements_while_stale: this.#whileStale,
    };
  }
}

/** The event options of `simulate`, as the caller gives them. */
export interface EventOptions {
  /** See {@link EventModel.delayMs}. */
  readonly eventDelayMs?: number;
  /** See {@link EventModel.dropRate}. */
  readonly eventDropRate?: number;
  /** See {@link EventModel.replay}. */
  readonly eventReplay?: boolean;
  /** See {@link EventModel.seed}. */
  readonly eventSeed?: number;
  /** See {@link EventModel.staleAfterMs}. */
  readonly eventStaleMs?: number;
}

/** The event options' names, in the order messages list them. */
export const EVENT_OPTION_KEYS = ["eventDelayMs", "eventDropRate", "eventReplay", "eventSeed", "eventStaleMs"] as const;

/**
 * The event model the options ask for, or null when the index does not learn
 * from `events`; throws {@link AdpInputError} naming the first bad option.
 * Event options given without events are refused: they would change nothing,
 * silently.
 */
export function readEventModel(options: EventOptions, events: boolean): EventModel | null {
  for (const key of EVENT_OPTION_KEYS) {
    if (options[key] !== undefined && !events) throw new AdpInputError(key, 'applies only with indexUpdates "events"', options[key]);
  }
  if (!events) return null;
  const d = DEFAULT_EVENT_MODEL;
  const { eventDelayMs = d.delayMs, eventDropRate = d.dropRate, eventReplay = d.replay, eventSeed = d.seed, eventStaleMs = d.staleAfterMs } = options;
  if (typeof eventDelayMs !== "number" || !Number.isFinite(eventDelayMs) || eventDelayMs < 0) throw new AdpInputError("eventDelayMs", "must be a finite number of milliseconds ≥ 0", eventDelayMs);
  if (typeof eventDropRate !== "number" || !(eventDropRate >= 0 && eventDropRate <= 1)) throw new AdpInputError("eventDropRate", "must be a number from 0 to 1", eventDropRate);
  if (typeof eventReplay !== "boolean") throw new AdpInputError("eventReplay", "must be a boolean", eventReplay);
  if (typeof eventSeed !== "number" || !Number.isSafeInteger(eventSeed)) throw new AdpInputError("eventSeed", "must be a safe integer", eventSeed);
  if (typeof eventStaleMs !== "number" || !Number.isFinite(eventStaleMs) || eventStaleMs <= 0) throw new AdpInputError("eventStaleMs", "must be a finite number of milliseconds > 0", eventStaleMs);
  return { delayMs: eventDelayMs, dropRate: eventDropRate, replay: eventReplay, seed: eventSeed, staleAfterMs: eventStaleMs };
}

/** The model in words, for the text and HTML reports. */
export function describeEventModel(model: EventModel): string {
  const parts = [`engine KV events, ${model.delayMs === 0 ? "delivered at the router's next look" : `delivered ${model.delayMs} ms after publication`}`];
  if (model.dropRate > 0) {
    parts.push(`${+(100 * model.dropRate).toFixed(4)}% of batches lost (seed ${model.seed}), ${model.replay ? "gaps filled by replay" : "no replay: after a gap, that rank's engine view goes on from the next batch"}`);
  }
  parts.push(`a rank's match from its engine view while its stream is live, else from the router's own placements (stale after ${model.staleAfterMs} ms of silence while sent requests; gapped ${model.staleAfterMs} ms after a gap)`);
  return parts.join("; ");
}
