// Engine load: each upstream engine's own account of its load, scraped from
// its metrics endpoint on an interval, and combined with the gateway's own
// in-flight counts into the router's rank state. The gateway's counts are
// exact for what it sent but blind to traffic that did not come through it
// (other gateway replicas, clients that call the engine directly) and to
// requests the engine has queued; the engine's are complete but as old as
// the last scrape. An `EngineLoadScraper` per upstream keeps the last report
// and when it came; `fresh(maxAgeMs)` says whether it can still be believed
// (TensorRT-LLM's centralized router stops routing to a worker whose last
// load report is older than `load_suspend_s`, 3 s, until it reports again);
// `rankStateFromLoad` (engine-load-combine.ts) does the combining. Formats:
// engine-load-parse.ts and engine-load-prometheus.ts.

import { Http1Pool, type OwnedDispatcher, type RequestDispatcher } from "../http1/http1-pool.js";
import { AnswerTooLargeError, controlRequest } from "../http1/control-request.js";
import { undici } from "../common/optional-packages.js";
import { parseEngineLoadStepped, type EngineKind, type EngineLoadReport, type LoadProblem } from "./engine-load-parse.js";
import { nextTurn } from "../common/next-turn.js";

export { parseEngineLoad, parseSglangMetrics, parseTrtllmMetrics, parseVllmMetrics, type EngineKind, type EngineLoad, type EngineLoadReport, type LoadParse, type LoadProblem, type LoadProblemKind, type RankLoad, type VllmParseOptions } from "./engine-load-parse.js";
export { dpRankStateFromLoad, rankStateFromLoad, type CombineOptions, type OwnLoad } from "./engine-load-combine.js";
export { parsePrometheusText, type PrometheusParse, type PrometheusSample, type PrometheusSyntaxProblem, type PrometheusType } from "./engine-load-prometheus.js";

/** Options of {@link EngineLoadScraper}. */
export interface EngineLoadScraperOptions {
  /** The upstream's URL; its path is a prefix of `path` (as API paths are joined to it), its userinfo and query are never used. */
  readonly baseUrl: string;
  /** Which format its metrics are in. */
  readonly engine: EngineKind;
  /** The metrics path. @default "/metrics" (vLLM, SGLang and trtllm-serve) */
  readonly path?: string;
  /** Milliseconds between the end of one scrape and the start of the next. */
  readonly intervalMs: number;
  /**
   * A scrape's deadline (connecting, headers and the whole body). trtllm-serve
   * may hold `/metrics` up to 2 s waiting for statistics, hence the default.
   * @default 5000
   */
  readonly timeoutMs?: number;
  /** The largest body read; a larger one fails the scrape. @default 8 MiB (a vLLM page with many ranks and histograms runs to hundreds of KiB) */
  readonly maxBodyBytes?: number;
  /** Sent as `Authorization: Bearer` (engines started with an API key protect their metrics too). */
  readonly apiKey?: string | null | (() => string | null);
  /** vLLM and SGLang: read only this `model_name`'s series. */
  readonly model?: string;
  /** The clock (ms); injectable for tests. */
  readonly now?: () => number;
  /**
   * A dispatcher to send through (the scraper then neither owns nor closes it):
   * anything with undici 7's `dispatch(options, handler)` (an undici `Client`,
   * `Pool` or `Agent`). By default connections of its own, so scrapes never
   * wait behind long completions: the gateway's own HTTP/1.1 client for an
   * http:// URL, an undici `Client` for https://.
   */
  readonly dispatcher?: RequestDispatcher;
  /** Called after every scrape with its outcome (what it throws is ignored: it must not stop the polling). */
  readonly onScrape?: (outcome: ScrapeOutcome) => void;
}

/** Why a scrape got no body to read. */
export type ScrapeFailure =
  /** Refused, unreachable, unresolvable, or the connect timeout. */
  | "connect"
  /** The deadline passed (headers or body too slow). */
  | "timeout"
  /** An HTTP status other than 2xx (a 401 is a missing or wrong key). */
  | "status"
  /** The body was larger than `maxBodyBytes`. */
  | "too_large"
  /** Anything else (the connection reset mid-body, say). */
  | "error";

/** What one scrape came to. */
export type ScrapeOutcome =
  | { readonly kind: "ok"; readonly report: EngineLoadReport; readonly at: number }
  | { readonly kind: "failed"; readonly reason: ScrapeFailure; readonly message: string; readonly at: number }
  | { readonly kind: "unparseable"; readonly problem: LoadProblem; readonly at: number }
  /** Stopped by `close()`: counted nowhere. */
  | { readonly kind: "closed"; readonly at: number };

/** Scrapes by outcome, since the scraper started. */
export interface ScrapeCounts {
  readonly ok: number;
  readonly failed: number;
  readonly unparseable: number;
}

/** The default deadline of one scrape (ms). */
const DEFAULT_TIMEOUT_MS = 5_000;
/** The default body cap (bytes). */
const DEFAULT_MAX_BODY = 8 * 1024 * 1024;
/** Longest error message kept. */
const MAX_MESSAGE = 200;
/** Error codes of a connection that could not be made. */
const CONNECT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "UND_ERR_CONNECT_TIMEOUT", "ECONNABORTED"]);
/** Whether a scrape's status is a success (only then is its body read). */
const isSuccess = (statusCode: number): boolean => statusCode >= 200 && statusCode <= 299;
/** Error codes of a deadline undici enforced. */
const TIMEOUT_CODES = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT", "ETIMEDOUT"]);

/**
 * Polls one upstream engine's metrics endpoint on an interval, one scrape at
 * a time (a slow engine delays the next scrape, it never gets two), and keeps
 * the last report. Nothing a scrape meets (refusal, a 500, a timeout,
 * garbage) escapes the loop: it is counted and kept as `lastError`, whose
 * text names the URL without userinfo or query and never holds the key.
 */
export class EngineLoadScraper {
  /** The format its metrics are read in. */
  readonly #engine: EngineKind;
  /** Where the GET goes: the base URL's origin (no userinfo), its path joined to the metrics path. */
  readonly #origin: string;
  readonly #path: string;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #maxBodyBytes: number;
  /** The bearer key, or null. */
  readonly #apiKey: () => string | null;
  /** vLLM's model filter, or undefined for every series. */
  readonly #model: string | undefined;
  readonly #now: () => number;
  /** What the GET goes through: its own client, or the one given. */
  readonly #dispatcher: RequestDispatcher;
  /** The dispatcher when it is the scraper's own (closed with it), else null. */
  readonly #ownDispatcher: OwnedDispatcher | null;
  /** Told of every scrape's outcome. */
  readonly #onScrape: ((outcome: ScrapeOutcome) => void) | null;
  /** The last report, and when it came (the injected clock). */
  #report: EngineLoadReport | null = null;
  #receivedAt: number | null = null;
  /** Scrapes by outcome, and failures since the last good one. */
  #counts = { ok: 0, failed: 0, unparseable: 0 };
  #consecutiveFailures = 0;
  #lastError: string | null = null;
  #lastOutcome: ScrapeOutcome | null = null;
  /** The scrape under way, which every caller of `scrapeNow` shares. */
  #inFlight: Promise<ScrapeOutcome> | null = null;
  /** Aborts the scrape under way (close). */
  #abort: AbortController | null = null;
  /** The wait before the next scheduled scrape. */
  #timer: NodeJS.Timeout | null = null;
  /** Whether `start()` ran, whether `close()` did, and the close under way (a second call shares it). */
  #started = false;
  #closed = false;
  #closing: Promise<void> | null = null;

  constructor(options: EngineLoadScraperOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch {
      throw new TypeError("baseUrl must be an absolute http:// or https:// URL");
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new TypeError("baseUrl must be an absolute http:// or https:// URL");
    if (options.engine !== "vllm" && options.engine !== "sglang" && options.engine !== "trtllm") throw new TypeError('engine must be "vllm", "sglang" or "trtllm"');
    const path = options.path ?? "/metrics";
    // No query or fragment: messages show the path, and a query is where a secret would hide.
    if (!/^\/[^?#\s]*$/.test(path)) throw new TypeError("path must start with / and hold no query, fragment or blank");
    const positive = (v: number | undefined, name: string, fallback: number) => {
      const n = v ?? fallback;
      if (!Number.isFinite(n) || n <= 0) throw new RangeError(`${name} must be a positive number`);
      return n;
    };
    this.#intervalMs = positive(options.intervalMs, "intervalMs", Number.NaN);
    this.#timeoutMs = positive(options.timeoutMs, "timeoutMs", DEFAULT_TIMEOUT_MS);
    this.#maxBodyBytes = positive(options.maxBodyBytes, "maxBodyBytes", DEFAULT_MAX_BODY);
    this.#engine = options.engine;
    this.#origin = url.origin;
    this.#path = `${url.pathname.replace(/\/+$/, "")}${path}`;
    const key = options.apiKey ?? null;
    // A function is asked at each scrape (a reload may change the upstream's key).
    this.#apiKey = typeof key === "function" ? key : () => key;
    this.#model = options.model;
    this.#now = options.now ?? Date.now;
    this.#onScrape = options.onScrape ?? null;
    // Kept alive 4 s, under uvicorn's 5 s, so a scrape never meets a socket the engine just closed.
    this.#ownDispatcher =
      options.dispatcher !== undefined
        ? null
        : url.protocol === "http:"
          ? new Http1Pool(url.origin, { connectTimeoutMs: this.#timeoutMs, keepAliveMs: 4_000 })
          : new (undici().Client)(url.origin, { connect: { timeout: this.#timeoutMs } });
    this.#dispatcher = options.dispatcher ?? this.#ownDispatcher!;
  }

  /** The URL scraped, as messages show it (no userinfo, no query). */
  get url(): string {
    return `${this.#origin}${this.#path}`;
  }

  /** The last report read, or null before the first. */
  get report(): EngineLoadReport | null {
    return this.#report;
  }

  /** When the last report was received (the injected clock's ms), or null before the first. */
  get receivedAt(): number | null {
    return this.#receivedAt;
  }

  /** Scrapes by outcome. */
  get counts(): ScrapeCounts {
    return { ...this.#counts };
  }

  /** Failed or unparseable scrapes since the last good one. */
  get consecutiveFailures(): number {
    return this.#consecutiveFailures;
  }

  /** What went wrong last (kept after later successes, for the record), or null when nothing has. */
  get lastError(): string | null {
    return this.#lastError;
  }

  /** The last scrape's outcome, or null before the first ended. */
  get lastOutcome(): ScrapeOutcome | null {
    return this.#lastOutcome;
  }

  /** Whether a scrape is under way. */
  get polling(): boolean {
    return this.#inFlight !== null;
  }

  /** Whether the last report is at most `maxAgeMs` old (false before the first). */
  fresh(maxAgeMs: number): boolean {
    return this.#receivedAt !== null && this.#now() - this.#receivedAt <= maxAgeMs;
  }

  /** The last report if it is fresh, else null (what to combine with the gateway's own counts). */
  current(maxAgeMs: number): EngineLoadReport | null {
    return this.fresh(maxAgeMs) ? this.#report : null;
  }

  /** Scrapes now and then every interval, until `close()`. Calling it again does nothing. */
  start(): void {
    if (this.#started || this.#closed) return;
    this.#started = true;
    this.#schedule(0);
  }

  /** Scrapes now, or joins the scrape under way (two never overlap). Never rejects. */
  scrapeNow(): Promise<ScrapeOutcome> {
    if (this.#inFlight !== null) return this.#inFlight;
    if (this.#closed) return Promise.resolve({ kind: "closed", at: this.#now() });
    const run = this.#scrape().finally(() => {
      this.#inFlight = null;
    });
    this.#inFlight = run;
    return run;
  }

  /** Stops polling: no further scrape starts, the one under way is aborted and awaited, and its own connection is closed. */
  close(): Promise<void> {
    if (this.#closing !== null) return this.#closing;
    this.#closed = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#abort?.abort();
    const inFlight = this.#inFlight;
    this.#closing = (async () => {
      if (inFlight !== null) await inFlight;
      const own = this.#ownDispatcher;
      if (own !== null) await own.close().catch(() => own.destroy());
    })();
    return this.#closing;
  }

  /** Waits `delay`, scrapes, and schedules the next (the timer does not keep the process alive). */
  #schedule(delay: number): void {
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.scrapeNow().then(() => {
        if (!this.#closed) this.#schedule(this.#intervalMs);
      });
    }, delay);
    this.#timer.unref();
  }

  /** One scrape, recorded; resolves with its outcome whatever happens. */
  async #scrape(): Promise<ScrapeOutcome> {
    const abort = new AbortController();
    this.#abort = abort;
    let timedOut = false;
    const deadline = setTimeout(() => {
      timedOut = true;
      abort.abort();
    }, this.#timeoutMs);
    let outcome: ScrapeOutcome;
    try {
      outcome = await this.#fetch(abort.signal);
    } catch (error) {
      outcome = this.#closed ? { kind: "closed", at: this.#now() } : timedOut ? this.#failure("timeout", `no whole answer within ${this.#timeoutMs} ms`) : this.#failureOf(error);
    } finally {
      clearTimeout(deadline);
      this.#abort = null;
    }
    this.#record(outcome);
    return outcome;
  }

  /** Sends the GET and reads the body under the cap; throws what the transport throws. */
  async #fetch(signal: AbortSignal): Promise<ScrapeOutcome> {
    const headers: Record<string, string> = { accept: this.#engine === "trtllm" ? "application/json" : "text/plain;version=0.0.4", "user-agent": "adp-router" };
    const apiKey = this.#apiKey();
    if (apiKey !== null && apiKey !== "") headers.authorization = `Bearer ${apiKey}`;
    let response;
    try {
      response = await controlRequest(this.#dispatcher, { origin: this.#origin, path: this.#path, method: "GET", headers, signal, maxBytes: this.#maxBodyBytes, readsBody: isSuccess });
    } catch (error) {
      if (!(error instanceof AnswerTooLargeError)) throw error;
      // A body that does not say its length is cut off at the cap, not read to its end.
      return this.#failure("too_large", error.declared === null ? `a body over the ${this.#maxBodyBytes}-byte cap` : `a body of ${error.declared} bytes, over the ${this.#maxBodyBytes}-byte cap`);
    }
    if (!isSuccess(response.statusCode)) return this.#failure("status", `HTTP ${response.statusCode}`);
    const text = new TextDecoder("utf-8").decode(response.body);
    // A page of many lines is read a step a turn (a scrape that times out or closes meanwhile stops it).
    const turn = async () => {
      await nextTurn();
      signal.throwIfAborted();
    };
    const parsed = await parseEngineLoadStepped(this.#engine, text, this.#model === undefined ? {} : { model: this.#model }, turn);
    const at = this.#now();
    return parsed.ok ? { kind: "ok", report: parsed.report, at } : { kind: "unparseable", problem: parsed.problem, at };
  }

  /** Counts and keeps an outcome, and tells `onScrape`. */
  #record(outcome: ScrapeOutcome): void {
    if (outcome.kind === "closed") return;
    this.#lastOutcome = outcome;
    if (outcome.kind === "ok") {
      this.#counts.ok++;
      this.#consecutiveFailures = 0;
      this.#report = outcome.report;
      this.#receivedAt = outcome.at;
    } else {
      if (outcome.kind === "failed") this.#counts.failed++;
      else this.#counts.unparseable++;
      this.#consecutiveFailures++;
      this.#lastError = outcome.kind === "failed" ? outcome.message : this.#safe(`${this.url}: unparseable (${outcome.problem.kind}): ${outcome.problem.message}`);
    }
    if (this.#onScrape !== null) {
      try {
        this.#onScrape(outcome);
      } catch {
        // The callback's failure is its own; the polling goes on.
      }
    }
  }

  /** A failure outcome whose message names the URL. */
  #failure(reason: ScrapeFailure, detail: string): ScrapeOutcome {
    return { kind: "failed", reason, message: this.#safe(`${this.url}: ${detail}`), at: this.#now() };
  }

  /** A transport error as a failure outcome, by its code. */
  #failureOf(error: unknown): ScrapeOutcome {
    const e = error as { code?: unknown; message?: unknown; name?: unknown; cause?: { code?: unknown } } | null;
    const code = typeof e?.code === "string" ? e.code : typeof e?.cause?.code === "string" ? e.cause.code : null;
    const message = typeof e?.message === "string" ? e.message : String(error);
    const reason: ScrapeFailure = code !== null && CONNECT_CODES.has(code) ? "connect" : code !== null && TIMEOUT_CODES.has(code) ? "timeout" : "error";
    return this.#failure(reason, code === null || message.includes(code) ? message : `${code}: ${message}`);
  }

  /** `text` cut short, with the key (should any error ever quote it) and any URL's userinfo masked. */
  #safe(text: string): string {
    let out = text.replace(/\/\/[^/@\s]*@/g, "//");
    const apiKey = this.#apiKey();
    if (apiKey !== null && apiKey.length >= 4) out = out.split(apiKey).join("***");
    return out.length > MAX_MESSAGE ? `${out.slice(0, MAX_MESSAGE - 3)}...` : out;
  }
}
