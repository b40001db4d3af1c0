// One upstream engine as the gateway sees it: a rank of its router, a pool of
// keep-alive connections, the load it carries (in-flight requests and prompt
// tokens, which become the rank's state for the next route), and its health:
// active checks on an interval, passive ejection when requests fail on it
// (connect errors, broken connections, 5xx answers).

import { Pool } from "undici";
import { rankStateFromLoad } from "./engine-load-combine.js";
import type { GatewayConfig, UpstreamConfig } from "./config.js";
import type { EventSourceCounters, FeedStatus } from "./event-freshness.js";
import type { EngineLoadConfig, KvEventsConfig } from "./events-config.js";
import type { EngineLoadScraper } from "./engine-load.js";
import type { IndexUpdateSource } from "./routing-state.js";

/** An engine's KV-event source as the gateway keeps it: its counters and its DP ranks' statuses besides the interface. */
export interface EventSource extends IndexUpdateSource {
  readonly counters: EventSourceCounters;
  readonly rankStatuses: FeedStatus[];
}

/** Latency histogram bounds, seconds. */
export const LATENCY_BOUNDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/** A cumulative-per-bucket histogram of seconds. */
export class Histogram {
  readonly counts = new Array<number>(LATENCY_BOUNDS.length + 1).fill(0);
  sum = 0;
  count = 0;
  /** Counts one observation. */
  observe(seconds: number): void {
    let i = 0;
    while (i < LATENCY_BOUNDS.length && seconds > LATENCY_BOUNDS[i]!) i++;
    this.counts[i]!++;
    this.sum += seconds;
    this.count++;
  }
}

/** One upstream: its pool, load, health and counters. */
export class Upstream {
  /** Its rank (its place in the configured list; a reload may move it). */
  index: number;
  /** Its base URL (what a reload matches upstreams by). */
  readonly url: string;
  /** Its name in logs. */
  name: string;
  /** The key sent to it in place of the client's, or null. */
  apiKey: string | null;
  /** The URL's path, which API paths are joined to (`""` for none). */
  readonly basePath: string;
  readonly pool: Pool;
  /** Requests routed here and not yet ended. */
  inFlight = 0;
  /** Their prompt tokens. */
  inFlightTokens = 0;
  /** Whether it takes requests (health checks and passive ejection decide). */
  healthy = true;
  /** Its configuration's drain flag (a reload may change it). */
  #drainInConfig: boolean;
  /** Drained or undrained through the admin endpoint: this wins over the configuration, across reloads, until the next admin call. */
  drainOverride: boolean | null = null;
  /** Consecutive failed health checks, and consecutive passing ones (while unhealthy). */
  failures = 0;
  successes = 0;
  /** Consecutive proxied requests that failed on it (connect errors, broken connections, 5xx answers). */
  passiveFailures = 0;
  /** When (performance.now()) its last passive ejection began, or null when it was not ejected by traffic. */
  passiveEjectedAt: number | null = null;
  /** Responses by exact HTTP status code (bounded: 100-599). */
  readonly byCode = new Map<number, number>();
  /** Responses by status class, and requests retried elsewhere because this one could not be reached. */
  readonly byStatus = new Map<string, number>([["2xx", 0], ["4xx", 0], ["5xx", 0]]); // the usual classes from the start, at 0
  retriedAway = 0;
  /** Prompt tokens of the requests placed here, and those of them its cache view already held (their ratio is its prefix hit rate). */
  promptTokens = 0;
  matchedTokens = 0;
  /** Requests placed here (promptTokens / placed is its mean prompt). */
  placed = 0;
  /** Where its engine publishes KV events (kept across reloads, as its URL is), or null. */
  readonly kvEvents: KvEventsConfig | null;
  /** The source of those events, once started, or null. */
  events: EventSource | null = null;
  /** Where its engine's load is scraped (kept across reloads, as its URL is), or null. */
  readonly loadConfig: EngineLoadConfig | null;
  /** The scraper of that load, once started, or null. */
  load: EngineLoadScraper | null = null;
  /** Whether its load report was recent enough when last looked at (changes are logged). */
  loadFresh: boolean | null = null;
  /** Whether its events can be used: false while its engine's stored events are all malformed (a block size that is not the gateway's, say). */
  eventsUsable = true;
  /** When a malformed event of its engine was last logged (ms; such logs are rate-limited). */
  malformedLoggedAt = Number.NEGATIVE_INFINITY;
  /** Its event stream's status last logged (transitions are logged, never silent). */
  loggedStatus: FeedStatus | null = null;
  readonly latency = new Histogram();
  readonly firstByte = new Histogram();
  readonly #unhealthyThreshold: number;
  readonly #healthyThreshold: number;
  /** How long a passive ejection lasts at least before passing checks count (one health interval). */
  readonly #minEjectionMs: number;

  constructor(index: number, config: UpstreamConfig, gateway: GatewayConfig) {
    this.index = index;
    this.url = config.url;
    this.name = config.name;
    this.apiKey = config.apiKey;
    this.#drainInConfig = config.drain;
    this.kvEvents = config.kvEvents;
    this.loadConfig = config.load;
    const url = new URL(config.url);
    this.basePath = url.pathname === "/" ? "" : url.pathname;
    this.pool = new Pool(url.origin, {
      connect: { timeout: gateway.timeouts.connectMs },
      headersTimeout: gateway.timeouts.firstByteMs,
      bodyTimeout: gateway.timeouts.idleMs,
      // Under the engines' own idle timeout (uvicorn's, vLLM's and trtllm-serve's server, is 5 s): a connection the
      // engine has closed is not reused, so a stale keep-alive does not read as a failed request (nor count toward ejection).
      keepAliveTimeout: 4_000,
    });
    this.#unhealthyThreshold = gateway.health.unhealthyThreshold;
    this.#healthyThreshold = gateway.health.healthyThreshold;
    this.#minEjectionMs = gateway.health.intervalMs;
  }

  /** Whether its engine's load is known recently enough to route to it (always, when its load is not scraped). */
  get loadKnown(): boolean {
    return this.load === null || this.loadConfig === null || this.load.fresh(this.loadConfig.maxAgeMs);
  }

  /**
   * Its rank state for the router: its own in-flight counts, combined with its
   * engine's last report when scraped (requests the gateway did not send count
   * at `meanPrompt` tokens each, the fleet's mean prompt, when the report has
   * no token count).
   */
  rankLoad(meanPrompt: number): { numActiveRequests: number; numActiveTokens: number } {
    const report = this.load === null || this.loadConfig === null ? null : this.load.current(this.loadConfig.maxAgeMs);
    if (report === null) return { numActiveRequests: this.inFlight, numActiveTokens: this.inFlightTokens };
    return rankStateFromLoad({ inFlight: this.inFlight, inFlightTokens: this.inFlightTokens }, report, { tokensPerRequest: meanPrompt });
  }

  /** Whether it is being drained: it finishes its requests and takes no new ones. */
  get draining(): boolean {
    return this.drainOverride ?? this.#drainInConfig;
  }

  /** Takes a reloaded configuration's name, key and drain flag (its URL is the same). */
  update(config: UpstreamConfig): void {
    this.name = config.name;
    this.apiKey = config.apiKey;
    this.#drainInConfig = config.drain;
  }

  /** Counts a response's status. */
  countStatus(status: number | "error" | "timeout" | "aborted"): void {
    const key = typeof status === "number" ? `${Math.floor(status / 100)}xx` : status;
    this.byStatus.set(key, (this.byStatus.get(key) ?? 0) + 1);
    if (typeof status === "number" && Number.isInteger(status) && status >= 100 && status <= 599) this.byCode.set(status, (this.byCode.get(status) ?? 0) + 1);
  }

  /**
   * A failed health check: ejects after `unhealthy_threshold` in a row.
   * Returns whether it just became unhealthy.
   */
  checkFailed(): boolean {
    this.successes = 0;
    this.failures++;
    return this.#eject(this.failures, false);
  }

  /**
   * A proxied request that failed on it: it could not be reached (a connect
   * error), its connection broke before an answer, or it answered 5xx. Ejects
   * after `unhealthy_threshold` in a row (a 2xx-4xx answer resets the count;
   * passing health checks do not). Returns whether it just became unhealthy.
   */
  passiveFail(): boolean {
    this.successes = 0;
    this.passiveFailures++;
    return this.#eject(this.passiveFailures, true);
  }

  /** A 2xx-4xx answer seen while proxying: resets the count of passive failures. */
  succeed(): void {
    this.passiveFailures = 0;
  }

  /** Starts it unhealthy (found unreachable when the gateway started): it takes requests once its checks pass. */
  startUnhealthy(): void {
    this.healthy = false;
    this.successes = 0;
  }

  /**
   * A passing health check: re-admits after `healthy_threshold` in a row.
   * After a passive ejection, checks count only once the ejection has lasted
   * `minEjectionMs` (one health interval): an engine whose /health says 200
   * while it fails every completion is not bounced straight back. Returns
   * whether it just became healthy.
   */
  checkPassed(now = performance.now()): boolean {
    this.failures = 0;
    if (this.healthy) return false;
    if (this.passiveEjectedAt !== null && now - this.passiveEjectedAt < this.#minEjectionMs) {
      this.successes = 0;
      return false;
    }
    this.successes++;
    if (this.successes >= this.#healthyThreshold) {
      this.healthy = true;
      this.successes = 0;
      this.passiveFailures = 0;
      this.passiveEjectedAt = null;
      return true;
    }
    return false;
  }

  /** Ejects once `count` reaches the threshold; returns whether it just became unhealthy. */
  #eject(count: number, passive: boolean): boolean {
    if (passive && count >= this.#unhealthyThreshold) this.passiveEjectedAt = performance.now(); // (again) from now
    if (this.healthy && count >= this.#unhealthyThreshold) {
      this.healthy = false;
      return true;
    }
    return false;
  }
}
