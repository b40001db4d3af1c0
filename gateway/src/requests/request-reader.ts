// Reading a chat or completion request for routing, wherever its tokenizer
// runs: on the calling thread (the byte tokenizer, linear and cheap; an
// embedder's own tokenizer; `workers: 0`), or on the worker pool
// (tokenize-pool.ts) for a Hugging Face tokenizer, whose rendering and BPE
// cost too much for the event loop. Both check the prompt bounds (readRequest)
// and count what came of each request for /metrics.

import type { TokenIds } from "adp-router";
import { builtScript } from "../common/built-script.js";
import { HttpError, readRequest, type PromptLimits, type RoutedRequest } from "./openai.js";
import { TokenizePool, type ClientSignal, type TokenizeStats } from "./tokenize-pool.js";
import { loadTokenizer } from "../tokenizers/tokenizer-loading.js";
import { tokenizerPoolSettings, type TokenizerSettings } from "../config/tokenizer-settings.js";
import type { Tokenizer } from "../tokenizers/tokenizer.js";

export type { TokenizeStats } from "./tokenize-pool.js";

/** Reads requests' routing fields (tokens included); see createRequestReader. */
export interface RequestReader {
  /** The tokenizer's name (for logs), e.g. "utf8-bytes" or "huggingface:qwen2.5". */
  readonly tokenizerName: string;
  /**
   * Reads and tokenizes a chat/completion body: resolves with the
   * RoutedRequest or rejects with an HttpError (400/413 bounds, 429 queue
   * full with retry-after, 503 tokenize timeout/worker crash with
   * retry-after). `signal.aborted` true → a queued job is dropped (rejects
   * HttpError 499).
   */
  read(kind: "chat" | "completion", raw: Buffer, headers: Record<string, string | string[] | undefined>, signal?: ClientSignal): Promise<RoutedRequest>;
  /**
   * The same, at once, for a reader that tokenizes on the calling thread
   * (throws the HttpError read() rejects with); absent on a pooled one.
   * A request then costs no promise for its reading.
   */
  readonly readNow?: (kind: "chat" | "completion", raw: Buffer, headers: Record<string, string | string[] | undefined>) => RoutedRequest;
  /** Hands token ids back (pooled memory) once the caller is done. */
  release(ids: TokenIds): void;
  /** Counters for /metrics. */
  stats(): TokenizeStats;
  /** Prometheus lines of those counters, metric names prefixed `prefix` (e.g. "adp_gateway_"), # HELP/# TYPE included. */
  metricLines(prefix: string): string[];
  close(): Promise<void>;
}

/** What createRequestReader is built from. */
export interface RequestReaderOptions {
  /** The `tokenizer:` setting. */
  readonly settings: TokenizerSettings;
  /** limits.max_prompt_chars and max_prompt_tokens. */
  readonly limits: PromptLimits;
  /** routing.lora_adapters: model name → LoRA task id. */
  readonly loraAdapters: ReadonlyMap<string, number>;
  /** An embedder's own tokenizer, used on the calling thread (settings' kind is then ignored). */
  readonly tokenizer?: Tokenizer;
}

/** The tokenizer workers' built script. */
const WORKER_SCRIPT = builtScript("tokenize-worker.js");

/**
 * A request reader for `options`: on the calling thread for an embedder's
 * tokenizer, kind bytes, or `workers: 0`; else on a pool of workers, resolved
 * once each has loaded the tokenizer (rejects with TokenizerLoadError, its
 * message naming the file, when they cannot).
 */
export async function createRequestReader(options: RequestReaderOptions): Promise<RequestReader> {
  const { settings, limits, loraAdapters } = options;
  if (options.tokenizer !== undefined) return new InlineReader(options.tokenizer, limits, loraAdapters);
  const pool = tokenizerPoolSettings(settings);
  if (settings.kind !== "huggingface" || pool.workers === 0) return new InlineReader(loadTokenizer(settings), limits, loraAdapters);
  const workers = await TokenizePool.start({
    script: WORKER_SCRIPT,
    size: pool.workers,
    queueSize: pool.queueSize,
    timeoutMs: pool.timeoutMs,
    data: { path: settings.path, limits, loraAdapters: [...loraAdapters], ...(settings.engine === undefined ? {} : { engine: settings.engine }) },
  });
  return new PooledReader(workers);
}

/** Reads on the calling thread: readRequest as is (no copy of the body or the ids). */
class InlineReader implements RequestReader {
  /** The tokenizer, run on this thread. */
  readonly #tokenizer: Tokenizer;
  /** The prompt bounds. */
  readonly #limits: PromptLimits;
  /** routing.lora_adapters. */
  readonly #lora: ReadonlyMap<string, number>;
  /** Requests read. */
  #completed = 0;
  /** Requests readRequest refused (4xx). */
  #refused = 0;

  constructor(tokenizer: Tokenizer, limits: PromptLimits, lora: ReadonlyMap<string, number>) {
    this.#tokenizer = tokenizer;
    this.#limits = limits;
    this.#lora = lora;
  }

  get tokenizerName(): string {
    return this.#tokenizer.name;
  }

  read(kind: "chat" | "completion", raw: Buffer, headers: Record<string, string | string[] | undefined>, signal?: ClientSignal): Promise<RoutedRequest> {
    if (signal?.aborted) return Promise.reject(new HttpError(499, "the client closed the request"));
    try {
      return Promise.resolve(this.readNow(kind, raw, headers));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  readNow(kind: "chat" | "completion", raw: Buffer, headers: Record<string, string | string[] | undefined>): RoutedRequest {
    try {
      const request = readRequest(kind, raw, headers, this.#tokenizer, this.#lora, this.#limits);
      this.#completed++;
      return request;
    } catch (error) {
      if (error instanceof HttpError) this.#refused++;
      throw error;
    }
  }

  release(ids: TokenIds): void {
    this.#tokenizer.release?.(ids);
  }

  stats(): TokenizeStats {
    return { workers: 0, busy: 0, queued: 0, completed: this.#completed, refused: this.#refused, shed: 0, timedOut: 0, crashed: 0, dropped: 0, failed: 0, restarts: 0 };
  }

  metricLines(prefix: string): string[] {
    return metricLines(prefix, this.stats(), false);
  }

  async close(): Promise<void> {}
}

/** Reads on the worker pool. The ids arrive in buffers of their own (transferred), so `release` has nothing to take back. */
class PooledReader implements RequestReader {
  /** The workers. */
  readonly #pool: TokenizePool;

  constructor(pool: TokenizePool) {
    this.#pool = pool;
  }

  get tokenizerName(): string {
    return this.#pool.name;
  }

  read(kind: "chat" | "completion", raw: Buffer, headers: Record<string, string | string[] | undefined>, signal?: ClientSignal): Promise<RoutedRequest> {
    return this.#pool.run(kind, raw, headers, signal);
  }

  release(): void {}

  stats(): TokenizeStats {
    return this.#pool.stats();
  }

  metricLines(prefix: string): string[] {
    return metricLines(prefix, this.#pool.stats(), true);
  }

  close(): Promise<void> {
    return this.#pool.close();
  }
}

/** Prometheus lines of `s`; `pooled`: with the outcomes only a pool has (shed, timeout, crashed, dropped, failed). */
function metricLines(p: string, s: TokenizeStats, pooled: boolean): string[] {
  const outcomes: [string, number][] = [
    ["ok", s.completed],
    ["refused", s.refused],
  ];
  if (pooled) outcomes.push(["shed", s.shed], ["timeout", s.timedOut], ["crashed", s.crashed], ["dropped", s.dropped], ["failed", s.failed]);
  return [
    `# HELP ${p}tokenizer_workers Worker threads tokenizing prompts (0: on the event loop).`,
    `# TYPE ${p}tokenizer_workers gauge`,
    `${p}tokenizer_workers ${s.workers}`,
    `# HELP ${p}tokenizer_busy Tokenizer workers on a request now.`,
    `# TYPE ${p}tokenizer_busy gauge`,
    `${p}tokenizer_busy ${s.busy}`,
    `# HELP ${p}tokenizer_queued Requests waiting for a tokenizer worker now.`,
    `# TYPE ${p}tokenizer_queued gauge`,
    `${p}tokenizer_queued ${s.queued}`,
    `# HELP ${p}tokenizer_jobs_total Requests read for routing by outcome (ok; refused: malformed or over the prompt limits; shed: queue full, 429; timeout: past tokenizer.timeout_ms, 503; crashed: the worker died, 503; dropped: the client left while queued; failed: an unexpected error).`,
    `# TYPE ${p}tokenizer_jobs_total counter`,
    ...outcomes.map(([outcome, n]) => `${p}tokenizer_jobs_total{outcome="${outcome}"} ${n}`),
    `# HELP ${p}tokenizer_worker_restarts_total Tokenizer workers started again after one timed out, died or could not load.`,
    `# TYPE ${p}tokenizer_worker_restarts_total counter`,
    `${p}tokenizer_worker_restarts_total ${s.restarts}`,
  ];
}
