// Whether an engine's KV-event picture can be trusted, per event stream: the
// gateway must never keep routing on a stale picture in silence (TensorRT-LLM
// #14882). A stream is `live` while its batches arrive in sequence; `gapped`
// after a sequence gap that replay could not fill; `stale` when it has said
// nothing for `staleAfterMs` while requests were routed to its engine (an
// idle engine has nothing to say), and before its engine first answers (its
// first batch, or a poll). While not live, the gateway learns that upstream's
// cache from its own placements.

/** What a stream's picture is worth now. */
export type FeedStatus = "live" | "gapped" | "stale";

/** How a batch's sequence number relates to the last one seen. */
export type SequenceStep =
  /** The next one (or the first): apply it. */
  | "next"
  /** Some were skipped: ask for a replay from `expected`, or mark the stream gapped. */
  | "gap"
  /** Already seen (a replayed batch that also came live): skip it. */
  | "old"
  /** Far behind the last one: the publisher restarted; its engine's cache is new (clear the view, then apply). */
  | "restart";

/** Options of {@link EventFreshness}. */
export interface EventFreshnessOptions {
  /** Silence (ms) after which a stream whose engine was sent requests is stale. */
  readonly staleAfterMs: number;
  /**
   * A sequence number this far behind the last is a publisher restart, not a
   * late batch. Engines never send a batch twice (a ZeroMQ PUB stream, a
   * draining poll), so any number below the next expected is a restart (its
   * batch 0 may have been lost while the subscription reconnected); a larger
   * value suits a transport that may redeliver.
   * @default 1n
   */
  readonly restartBehind?: bigint;
  /** The clock (ms); injectable for tests. */
  readonly now?: () => number;
}

/** The freshness of one event stream (one engine, or one DP rank of it). */
export class EventFreshness {
  readonly #staleAfterMs: number;
  readonly #restartBehind: bigint;
  readonly #now: () => number;
  /** The last sequence number applied, or null before the first batch. */
  #last: bigint | null = null;
  #lastHeardAt: number;
  /** Whether requests went to the engine since it last spoke. */
  #routedSinceHeard = false;
  /** Whether the engine has answered at all (a polled engine with nothing to say has a true, empty picture). */
  #answered = false;
  #gapped = false;
  /** When a gapped stream rebuilding its view is trusted again (null: only a resync ends the gap). */
  #gappedUntil: number | null = null;

  constructor(options: EventFreshnessOptions) {
    if (!Number.isFinite(options.staleAfterMs) || options.staleAfterMs <= 0) throw new RangeError("staleAfterMs must be a positive number of milliseconds");
    this.#staleAfterMs = options.staleAfterMs;
    this.#restartBehind = options.restartBehind ?? 1n;
    this.#now = options.now ?? Date.now;
    this.#lastHeardAt = this.#now();
  }

  /** Whether its engine has answered at all. */
  get answered(): boolean {
    return this.#answered;
  }

  /** The stream's status now. */
  get status(): FeedStatus {
    if (this.#gapped && this.#gappedUntil !== null && this.#now() >= this.#gappedUntil) this.#gapped = false;
    if (this.#gapped) return "gapped";
    if (this.#last === null && !this.#answered) return "stale";
    return this.#routedSinceHeard && this.#now() - this.#lastHeardAt > this.#staleAfterMs ? "stale" : "live";
  }

  /** The sequence number the next batch should carry, or null before the first. */
  get expected(): bigint | null {
    return this.#last === null ? null : this.#last + 1n;
  }

  /** A request was sent to the stream's engine (silence counts only while it has work). */
  routed(): void {
    this.#routedSinceHeard = true;
  }

  /** The engine spoke without a sequence number (a poll that came back, even empty). */
  heard(): void {
    this.#answered = true;
    this.#lastHeardAt = this.#now();
    this.#routedSinceHeard = false;
  }

  /**
   * A batch with sequence number `seq` arrived. Returns how it relates to the
   * last; "next" and "restart" advance the stream (the caller applies the
   * batch, after clearing the view on a restart), "gap" and "old" do not.
   */
  batch(seq: bigint): SequenceStep {
    this.heard();
    const last = this.#last;
    if (last === null || seq === last + 1n) {
      this.#last = seq;
      return "next";
    }
    if (seq > last + 1n) return "gap";
    if (last - seq >= this.#restartBehind || seq === 0n) {
      this.#last = seq;
      this.#gapped = false;
      this.#gappedUntil = null;
      return "restart";
    }
    return "old";
  }

  /** Batch `seq` follows the last though its number jumps (sparse ids, as behind TensorRT-LLM's fanout): a gap it is not, and one known before stays. */
  skipTo(seq: bigint): void {
    this.#last = seq;
  }

  /** A replay filled the gap up to `seq` (the last batch it applied). */
  filled(seq: bigint): void {
    this.#last = seq;
    this.#gapped = false;
    this.#gappedUntil = null;
  }

  /**
   * The gap could not be filled (no replay socket, or the publisher no longer
   * buffers those batches): the stream is gapped, and its picture not trusted,
   * until `resync`. With `resumeAt`, the caller goes on from batch `resumeAt`
   * (which it applies) with a view that missed the lost batches: the stream
   * is trusted again `staleAfterMs` later, once what the engine's traffic
   * uses has been stored (or removed) again.
   */
  unfilled(resumeAt?: bigint): void {
    this.#gapped = true;
    this.#gappedUntil = null;
    if (resumeAt !== undefined) {
      this.#last = resumeAt;
      this.#gappedUntil = this.#now() + this.#staleAfterMs;
    }
  }

  /** Starts over from `seq` (null: the next batch, whatever its number) with a trusted view. */
  resync(seq: bigint | null): void {
    this.#last = seq;
    this.#gapped = false;
    this.#gappedUntil = null;
    this.heard();
  }
}

/** Counters of one source, summed over its DP ranks. */
export interface EventSourceCounters {
  /** Batches applied (live or replayed). */
  batches: number;
  /** Batches that did not decode, or messages not of three frames (skipped). */
  unparseable: number;
  /** Batches refused for their size (kv_events.max_batch_bytes unread; max_batch_blocks or max_batch_tokens once decoded). */
  oversized: number;
  /** Publishers a CURVE-protected bound stream turned away (their public key not allowed). */
  refusedPeers: number;
  /** Sequence gaps seen. */
  gaps: number;
  /** Batches a replay delivered into a gap. */
  replayed: number;
  /** Gaps a replay could not fill (the stream was gapped while its view went on). */
  unfilled: number;
  /** Publisher restarts seen (its sequence started over). */
  restarts: number;
  /** Batches seen twice (skipped). */
  duplicates: number;
  /** Connections to a publisher that came back (each asks for a replay of what was published meanwhile). */
  reconnects: number;
}

/** New zeroed counters. */
export const zeroCounters = (): EventSourceCounters => ({ batches: 0, unparseable: 0, oversized: 0, refusedPeers: 0, gaps: 0, replayed: 0, unfilled: 0, restarts: 0, duplicates: 0, reconnects: 0 });

/**
 * Each DP-rank stream's status, an idle rank's among them: a rank that has
 * never spoken while another rank of its engine speaks (is live) is live with
 * an empty view, not stale. vLLM publishes only when a rank has events, so a rank the
 * engine's own balancer has sent nothing to cache never speaks; it holds
 * nothing a request could reuse.
 */
export function rankStatuses(streams: readonly EventFreshness[]): FeedStatus[] {
  const statuses = streams.map((s) => s.status);
  // Idle only beside a rank that speaks now: one that spoke once and fell silent says nothing of its siblings.
  const anyLive = streams.some((s, i) => s.answered && statuses[i] === "live");
  return streams.map((s, i) => (!s.answered && anyLive && statuses[i] === "stale" ? "live" : statuses[i]!));
}

/**
 * The status of one engine's DP-rank streams as one: gapped if any is; stale
 * if no rank has spoken (no picture at all) or every rank is stale (silent
 * while the engine had work); else live. Ranks that never spoke while others
 * did are idle and empty (rankStatuses), and one silent while the others speak
 * is an idle rank too (the engine's own balancer chose the others), not a dead
 * stream.
 */
export function engineStatus(streams: readonly EventFreshness[]): FeedStatus {
  const statuses = rankStatuses(streams);
  if (statuses.includes("gapped")) return "gapped";
  return statuses.every((s) => s === "stale") ? "stale" : "live";
}
