// TensorRT-LLM's `/kv_cache_events` (kv-events reference §1), polled: each POST
// drains the engine's event buffer and returns a JSON list of events
// `{event_id, data, window_size, attention_dp_rank?}`. Each attention-DP rank
// numbers its events in its own sequence (its own KV-cache manager), so a jump
// in a rank's event ids means the engine's buffer overflowed between polls and
// dropped events: HTTP has no replay, so that rank's view goes on from there,
// reported `gapped` for `stale_after_ms` (see zmq-events.ts for why it is not
// emptied). Ids that start over mean the engine restarted: its view is emptied. A poll that fails leaves the
// stream to go stale; a body that is not a JSON list is counted and skipped.

import { engineStatus, EventFreshness, rankStatuses, zeroCounters, type FeedStatus } from "./event-freshness.js";
import { BatchDecoder } from "./batch-decoder.js";
import type { EventRun } from "./batch-preparation.js";
import type { KvEventsConfig } from "../config/events-config.js";
import type { IndexUpdate, IndexUpdateSource } from "./index-update.js";
import type { RequestDispatcher } from "../http1/http1-pool.js";
import { AnswerTooLargeError, controlRequest } from "../http1/control-request.js";


/** What the source needs of its upstream. */
export interface PolledEngine {
  /** The upstream's control connections. */
  readonly control: RequestDispatcher;
  /** The upstream URL's path, which `path` is joined to. */
  readonly basePath: string;
  /** The upstream's API key now (a reload may change it), or null. */
  apiKey(): string | null;
}

/** Options of {@link TrtllmHttpEventSource}. */
export interface HttpEventSourceOptions {
  /** The clock (ms); injectable for tests. */
  readonly now?: () => number;
  /** Called with what went wrong or changed, for logs. */
  readonly onNotice?: (notice: { readonly rank: number; readonly what: string; readonly detail?: string }) => void;
}

/** The DP rank an event names, or null (the index's parser decides what to do with it). */
function rankOf(e: unknown, dpRanks: number): number | null {
  if (typeof e !== "object" || e === null) return null;
  const r = (e as Record<string, unknown>).attention_dp_rank;
  if (r === undefined || r === null) return dpRanks === 1 ? 0 : null;
  return typeof r === "number" && Number.isInteger(r) && r >= 0 && r < dpRanks ? r : null;
}

/** An event's id, or null. */
function idOf(e: unknown): bigint | null {
  const id = (e as Record<string, unknown>).event_id;
  return typeof id === "number" && Number.isSafeInteger(id) && id >= 0 ? BigInt(id) : null;
}

/** An upstream's KV events from TensorRT-LLM's `/kv_cache_events`, polled. */
export class TrtllmHttpEventSource implements IndexUpdateSource {
  readonly kind = "http";
  readonly counters = zeroCounters();
  readonly #config: Extract<KvEventsConfig, { kind: "http" }>;
  readonly #engine: PolledEngine;
  readonly #ranks: EventFreshness[];
  /** Whether a jump in a rank's event ids is expected (event_ids: sparse). */
  readonly #sparseIds: boolean;
  readonly #onNotice: NonNullable<HttpEventSourceOptions["onNotice"]>;
  #timer: NodeJS.Timeout | null = null;
  #polling: Promise<void> | null = null;
  #closed = false;
  /** Where the last event checked went (its DP rank, unranked, or dropped as old): a cut event's later pieces follow. */
  #lastPlacement: number | "unranked" | "dropped" = "dropped";
  /** The process's batch decoder, from the first poll until closed. */
  #decoder: BatchDecoder | null = null;
  /** Aborts the poll in flight on close. */
  readonly #abort = new AbortController();

  constructor(config: Extract<KvEventsConfig, { kind: "http" }>, engine: PolledEngine, options: HttpEventSourceOptions = {}) {
    this.#config = config;
    this.#engine = engine;
    this.#onNotice = options.onNotice ?? (() => {});
    const now = options.now ?? Date.now;
    this.#ranks = Array.from({ length: config.dpRanks }, () => new EventFreshness({ staleAfterMs: config.staleAfterMs, now }));
    this.#sparseIds = config.eventIds === "sparse";
  }

  /** Its DP ranks' statuses as one (see engineStatus). */
  get status(): FeedStatus {
    return engineStatus(this.#ranks);
  }

  /** Each DP rank's status. */
  get rankStatuses(): FeedStatus[] {
    return rankStatuses(this.#ranks);
  }

  routed(): void {
    for (const f of this.#ranks) f.routed();
  }

  start(emit: (update: IndexUpdate) => void): void {
    const tick = () => {
      this.#polling = this.poll(emit).finally(() => {
        this.#polling = null;
        if (!this.#closed) {
          this.#timer = setTimeout(tick, this.#config.intervalMs);
          this.#timer.unref();
        }
      });
    };
    tick();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#abort.abort();
    await this.#polling;
    if (this.#decoder !== null) BatchDecoder.release();
    this.#decoder = null;
  }

  /** One poll: drains the engine's buffer and emits its events per DP rank, in order. */
  async poll(emit: (update: IndexUpdate) => void): Promise<void> {
    let body: Uint8Array;
    try {
      const key = this.#engine.apiKey();
      const response = await controlRequest(this.#engine.control, {
        path: `${this.#engine.basePath}${this.#config.path}`,
        method: "POST",
        headers: key === null ? {} : { authorization: `Bearer ${key}` },
        signal: AbortSignal.any([this.#abort.signal, AbortSignal.timeout(Math.max(this.#config.staleAfterMs, 1_000))]),
        maxBytes: this.#config.maxBatchBytes,
        // An error page, however long, is no batch: the engine drained no events.
        readsBody: (status) => status < 400,
      });
      if (response.statusCode >= 400) {
        this.#onNotice({ rank: -1, what: "poll failed", detail: `HTTP ${response.statusCode}` });
        return;
      }
      body = response.body;
    } catch (error) {
      if (error instanceof AnswerTooLargeError) {
        const max = this.#config.maxBatchBytes;
        return this.#refuse(error.declared === null ? `over ${max} bytes, kv_events.max_batch_bytes` : `${error.declared} bytes declared, over kv_events.max_batch_bytes (${max})`);
      }
      if (!this.#closed) this.#onNotice({ rank: -1, what: "poll failed", detail: (error as { code?: string }).code ?? (error as Error).message });
      return;
    }
    if (this.#closed) return;
    // Parsed, measured and cut into runs of whole events off the event loop when large (batch-decoder.ts).
    this.#decoder ??= BatchDecoder.acquire();
    const answer = await this.#decoder.prepare(body, "json", 0, this.#config, true);
    if (this.#closed) return;
    if (answer.kind !== "ok") {
      if (answer.kind === "oversized") return this.#refuse(answer.detail);
      this.counters.unparseable++;
      this.#onNotice({ rank: -1, what: "batch skipped", detail: answer.detail });
      return;
    }
    this.counters.batches++;
    // An empty answer says nothing of the engine's cache: an engine whose event buffer is off
    // (event_buffer_max_size 0) answers [] for ever, and must not read as a live, empty picture.
    try {
      // A run a turn, each checked against its ranks' event ids and emitted.
      for await (const run of answer.slices) {
        if (this.#closed) return;
        this.#emitByRank(run as EventRun, emit);
      }
    } catch (error) {
      this.#onNotice({ rank: -1, what: "poll answer cut short", detail: (error as Error).message });
    }
  }

  /**
   * Refuses a poll's answer for its size: the events it drained are lost, so
   * every rank is gapped (the next answer's event ids show the jump too).
   */
  #refuse(detail: string): void {
    this.counters.oversized++;
    for (const f of this.#ranks) if (f.expected !== null) f.unfilled(f.expected - 1n);
    this.#onNotice({ rank: -1, what: "poll answer refused; streams gapped while their views go on", detail });
  }

  /**
   * Emits a run of a poll's events per DP rank, checking each
   * rank's event ids; the further pieces of a cut event (`run.continues`) go
   * where its first piece went.
   */
  #emitByRank(run: EventRun, emit: (update: IndexUpdate) => void): void {
    const pending: unknown[][] = this.#ranks.map(() => []);
    const unranked: unknown[] = [];
    // What to emit, in order: each rank's event ids are checked first, all at once, then the updates go out.
    const updates: IndexUpdate[] = [];
    const flush = (rank: number) => {
      if (pending[rank]!.length > 0) updates.push({ kind: "kv-events", events: pending[rank]!, dpRank: rank });
      pending[rank] = [];
    };
    if (run.continues) {
      const to = this.#lastPlacement;
      if (to === "unranked") unranked.push(...run.events);
      else if (to !== "dropped") pending[to]!.push(...run.events);
    }
    for (const e of run.continues ? [] : run.events) {
      const rank = rankOf(e, this.#ranks.length);
      const id = rank === null ? null : idOf(e);
      if (rank === null || id === null) {
        unranked.push(e); // the index's parser counts what it cannot place
        this.#lastPlacement = "unranked";
        continue;
      }
      const f = this.#ranks[rank]!;
      const step = f.batch(id);
      if (step === "old") {
        this.counters.duplicates++;
        this.#lastPlacement = "dropped";
        continue;
      }
      this.#lastPlacement = rank;
      if (step === "gap" && this.#sparseIds) {
        f.skipTo(id); // behind the fanout a jump is its filter, not a loss (nor does it undo a loss known before)
      } else if (step === "gap") {
        this.counters.gaps++;
        this.counters.unfilled++;
        this.#onNotice({ rank, what: "events dropped by the engine; stream gapped while its view goes on", detail: `event ids ${f.expected}..${id - 1n} lost` });
        f.unfilled(id);
      } else if (step === "restart") {
        this.counters.restarts++;
        this.#onNotice({ rank, what: "engine restarted; view emptied", detail: `event id ${id}` });
        flush(rank);
        updates.push({ kind: "cleared", dpRank: rank });
      }
      pending[rank]!.push(e);
    }
    for (let r = 0; r < pending.length; r++) flush(r);
    if (unranked.length > 0) updates.push({ kind: "kv-events", events: unranked });
    // A run holds at most JSON_RUN_BLOCKS blocks (its answer was measured against the limits and cut into runs
    // before): its updates go out together, on its own turn of the event loop.
    for (const u of updates) emit(u);
  }
}
