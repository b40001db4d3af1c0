// Whether an engine's KV-event picture can be trusted, per event stream: the
// gateway must never keep routing on a stale picture in silence (TensorRT-LLM
// #14882). A stream is `live` while its batches arrive in sequence; `gapped`
// after a sequence gap that replay could not fill; `stale` when it has said
// nothing for `staleAfterMs` while requests were routed to its engine (an
// idle engine has nothing to say), and before its first batch. While not
// live, the gateway learns that upstream's cache from its own placements.

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
  /** A sequence number this far behind the last is a publisher restart, not a late batch. */
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
  #gapped = false;

  constructor(options: EventFreshnessOptions) {
    if (!Number.isFinite(options.staleAfterMs) || options.staleAfterMs <= 0) throw new RangeError("staleAfterMs must be a positive number of milliseconds");
    this.#staleAfterMs = options.staleAfterMs;
    this.#restartBehind = options.restartBehind ?? 1_000n;
    this.#now = options.now ?? Date.now;
    this.#lastHeardAt = this.#now();
  }

  /** The stream's status now. */
  get status(): FeedStatus {
    if (this.#gapped) return "gapped";
    if (this.#last === null) return "stale";
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
      return "restart";
    }
    return "old";
  }

  /** A replay filled the gap up to `seq` (the last batch it applied). */
  filled(seq: bigint): void {
    this.#last = seq;
    this.#gapped = false;
  }

  /**
   * The gap could not be filled (no replay socket, or the publisher no longer
   * buffers those batches): the stream is gapped until `resync`, and its
   * batches are not trusted.
   */
  unfilled(): void {
    this.#gapped = true;
  }

  /** Starts over from `seq` with an emptied view (after AllBlocksCleared, or a cleared view after a gap). */
  resync(seq: bigint | null): void {
    this.#last = seq;
    this.#gapped = false;
    this.heard();
  }
}
