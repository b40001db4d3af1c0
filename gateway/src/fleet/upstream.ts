// One upstream engine as the gateway sees it: a rank of its router, a pool of
// keep-alive connections, the load it carries (in-flight requests and prompt
// tokens, which become the rank's state for the next route), its health
// (outlier.ts: active checks, outlier ejection on 5xx answers and gateway
// failures) and its counters and latency histograms.

import { Http1Pool, type OwnedDispatcher } from "../http1/http1-pool.js";
import { undici } from "../common/optional-packages.js";
import { rankStateFromLoad } from "../load/engine-load-combine.js";
import type { GatewayConfig, UpstreamConfig } from "../config/config.js";
import type { EventSourceCounters, FeedStatus } from "../events/event-freshness.js";
import type { EngineLoadConfig, KvEventsConfig } from "../config/events-config.js";
import type { EngineLoadScraper } from "../load/engine-load.js";
import type { IndexUpdateSource } from "./routing-state.js";
import { UpstreamHealth } from "./outlier.js";
import { RankRouting } from "./rank-routing.js";

/** An engine's KV-event source as the gateway keeps it: its counters and its DP ranks' statuses besides the interface. */
export interface EventSource extends IndexUpdateSource {
  readonly counters: EventSourceCounters;
  readonly rankStatuses: FeedStatus[];
}

/** Latency histogram bounds, seconds (a request's whole time, its first byte or token). */
export const LATENCY_BOUNDS: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** Inter-token latency bounds, seconds (vLLM's own buckets for it, from 10 ms). */
export const ITL_BOUNDS: readonly number[] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];

/** A histogram of seconds: a count per bucket (not cumulative), their sum and count. */
export class Histogram {
  readonly bounds: readonly number[];
  readonly counts: number[];
  sum = 0;
  count = 0;
  constructor(bounds: readonly number[] = LATENCY_BOUNDS) {
    this.bounds = bounds;
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }
  /** Counts one observation. */
  observe(seconds: number): void {
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && seconds > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += seconds;
    this.count++;
  }
}

/** The status classes' names, by hundreds (made once, not per answer). */
const STATUS_CLASSES: readonly string[] = ["0xx", "1xx", "2xx", "3xx", "4xx", "5xx"];

/** One upstream: its pool, load, health and counters. */
export class Upstream {
  /** Its rank (its place in the configured list; a reload may move it): `x-adp-upstream`. */
  index: number;
  /** Its base URL (what a reload matches upstreams by). */
  readonly url: string;
  /** Its stable name (metric labels, logs, `x-adp-upstream-name`); a reload may rename it. */
  name: string;
  /** The key sent to it in place of the client's, or null. */
  apiKey: string | null;
  /** The URL's path, which API paths are joined to (`""` for none). */
  readonly basePath: string;
  /**
   * Its control connections (health checks, /v1/models, KV events over HTTP,
   * sent with http1/control-request.ts): for an http:// upstream a pool of the
   * gateway's own apart from the proxied requests' (a check never waits behind
   * a completion), for https:// undici's, shared with them.
   */
  readonly control: OwnedDispatcher;
  /** Where proxied requests go: the gateway's own HTTP/1.1 pool for an http:// upstream (its cost is the point), undici's for https://. */
  readonly exchanges: OwnedDispatcher;
  /** Requests routed here and not yet ended. */
  inFlight = 0;
  /** Their prompt tokens. */
  inFlightTokens = 0;
  /**
   * Disaggregated serving, with the pool's kv_cache_routing_account_for_in_transfer:
   * requests whose prefill it answered and whose decode has not begun (its KV
   * cache still moving to the decode server), and their prompt tokens. Its
   * engine no longer reports them; TensorRT-LLM's router adds them to the rank's load.
   */
  inTransfer = 0;
  inTransferTokens = 0;
  /** With `serve --workers N`: the other workers' requests on it, as they last reported them (its load is theirs and its own). */
  siblingInFlight = 0;
  siblingInFlightTokens = 0;
  /** Its health: active checks and outlier detection (outlier.ts). */
  readonly health: UpstreamHealth;
  /** Its configuration's drain flag (a reload may change it). */
  #drainInConfig: boolean;
  /** Drained or undrained through the admin endpoint: this wins over the configuration, across reloads, until the next admin call. */
  drainOverride: boolean | null = null;
  /** Responses by exact HTTP status code (bounded: 100-599). */
  readonly byCode = new Map<number, number>();
  /** Responses by status class, and failures by reason (`timeout`, `refused`, `reset`, ...). */
  readonly byStatus = new Map<string, number>([["2xx", 0], ["4xx", 0], ["5xx", 0]]); // the usual classes from the start, at 0
  /** Requests retried elsewhere because they provably never reached this one. */
  retriedAway = 0;
  /** Streams that ended early on it, by reason (`upstream_died`, `idle_timeout`, `client_stalled`, `max_duration`). */
  readonly cutStreams = new Map<string, number>();
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
  /** Stored events whose last block was not yet full: their full blocks applied, the tail left out (TensorRT-LLM). */
  partialTails = 0;
  /** Its event stream's status last logged (transitions are logged, never silent). */
  loggedStatus: FeedStatus | null = null;
  /** Phase 2 over its engine's own DP ranks (rank_routing adp or instance), or null: the engine's balancer picks. */
  readonly rankRouting: RankRouting | null;
  /** An SGLang prefill server's bootstrap port, or null: the server's default (disaggregation). */
  readonly bootstrapPort: number | null;
  /** Its DP ranks, rank_routing and engine attention_dp_config as started (a reload that changes them needs a restart). */
  readonly dpRanks: number;
  readonly rankRoutingKind: UpstreamConfig["rankRouting"];
  readonly engineAttentionDp: UpstreamConfig["attentionDp"];
  /** From sending a request to the end of its answer. */
  readonly e2e = new Histogram();
  /** From sending a request to the answer's head. */
  readonly firstByte = new Histogram();
  /** From sending a request to its first token: the first SSE event with content, or the whole answer when not streamed. */
  readonly ttft = new Histogram();
  /** Between a stream's tokens (events with content). */
  readonly itl = new Histogram(ITL_BOUNDS);

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
    if (url.protocol === "http:") {
      const pool = { connectTimeoutMs: gateway.timeouts.connectMs + 1_000, keepAliveMs: 4_000 };
      this.exchanges = new Http1Pool(url.origin, pool);
      this.control = new Http1Pool(url.origin, pool);
    } else {
      this.exchanges = this.control = new (undici().Pool)(url.origin, {
        // The exchange times connecting itself (exchange.ts); undici's timer, on a half-second tick, is a backstop behind it.
        connect: { timeout: gateway.timeouts.connectMs + 1_000 },
        // The exchange times the first byte and idleness itself (exchange.ts): undici's timers
        // for them tick every second and fired up to half a second late.
        headersTimeout: 0,
        bodyTimeout: 0,
        // Under the engines' own idle timeout (uvicorn's, vLLM's and trtllm-serve's server, is 5 s): a connection the
        // engine has closed is not reused, so a stale keep-alive does not read as a failed request (nor count toward ejection).
        keepAliveTimeout: 4_000,
      });
    }
    this.health = new UpstreamHealth(gateway.health);
    this.dpRanks = config.dpRanks;
    this.bootstrapPort = config.bootstrapPort;
    this.rankRoutingKind = config.rankRouting;
    this.engineAttentionDp = config.attentionDp;
    this.rankRouting =
      config.rankRouting === "none" || config.dpRanks < 2
        ? null
        : new RankRouting({ kind: config.rankRouting, ranks: config.dpRanks, attentionDp: config.attentionDp ?? gateway.attentionDp, tokensPerBlock: gateway.routing.tokensPerBlock, indexBytes: gateway.routing.indexBytes, cap: gateway.limits.maxInFlightPerUpstream, loadWeight: gateway.routing.loadWeight });
  }

  /** Closes its connections once their requests end (destroys them if that fails). */
  async closeConnections(): Promise<void> {
    await Promise.all(this.#dispatchers().map((d) => d.close().catch(() => d.destroy())));
  }

  /** Closes its connections now, failing requests in flight. */
  async destroyConnections(): Promise<void> {
    await Promise.all(this.#dispatchers().map((d) => d.destroy()));
  }

  /** Its dispatchers, each once (an https:// upstream has one for both uses). */
  #dispatchers(): OwnedDispatcher[] {
    return this.control === this.exchanges ? [this.control] : [this.control, this.exchanges];
  }

  /** Whether it takes requests (its health checks and outlier detection decide). */
  get healthy(): boolean {
    return this.health.healthy;
  }

  /** Whether its engine's load is known recently enough to route to it (always, when its load is not scraped). */
  get loadKnown(): boolean {
    return this.load === null || this.loadConfig === null || this.load.fresh(this.loadConfig.maxAgeMs);
  }

  /**
   * Its rank state for the router: its own in-flight counts (with workers,
   * and the siblings' last reported ones, at most `siblingsAtMost`: the units
   * of the cap this worker does not hold, so a unit it holds unused always
   * reads as room), combined with its engine's last report when scraped
   * (requests the gateway did not send count at `meanPrompt` tokens each, the
   * fleet's mean prompt, when the report has no token count).
   */
  rankLoad(meanPrompt: number, siblingsAtMost = Infinity): { numActiveRequests: number; numActiveTokens: number } {
    const report = this.load === null || this.loadConfig === null ? null : this.load.current(this.loadConfig.maxAgeMs);
    const inFlight = this.inFlight + Math.min(this.siblingInFlight, siblingsAtMost);
    const inFlightTokens = this.inFlightTokens + this.siblingInFlightTokens;
    const own = report === null ? { numActiveRequests: inFlight, numActiveTokens: inFlightTokens } : rankStateFromLoad({ inFlight, inFlightTokens }, report, { tokensPerRequest: meanPrompt });
    if (this.inTransfer === 0) return own;
    // Neither the engine's count nor the gateway's in-flight one holds them any more: added to both.
    return { numActiveRequests: own.numActiveRequests + this.inTransfer, numActiveTokens: own.numActiveTokens + this.inTransferTokens };
  }

  /** Whether it is being drained: it finishes its requests and takes no new ones. */
  get draining(): boolean {
    return this.drainOverride ?? this.#drainInConfig;
  }

  /** Takes a reloaded configuration's name, key and drain flag (its URL is the same). */
  update(config: UpstreamConfig): void {
    // What a reload changes in an upstream that stays: a worker started again after one starts so (workers/config-relay.ts afterReload).
    this.name = config.name;
    this.apiKey = config.apiKey;
    this.#drainInConfig = config.drain;
  }

  /** Counts a response's status, or a failure's reason (`timeout`, `refused`, `reset`, `aborted`, ...). */
  countStatus(status: number | string): void {
    const key = typeof status === "number" ? (STATUS_CLASSES[Math.floor(status / 100)] ?? `${Math.floor(status / 100)}xx`) : status;
    this.byStatus.set(key, (this.byStatus.get(key) ?? 0) + 1);
    if (typeof status === "number" && Number.isInteger(status) && status >= 100 && status <= 599) this.byCode.set(status, (this.byCode.get(status) ?? 0) + 1);
  }

  /** Counts a stream cut short on it, by reason. */
  countCut(reason: string): void {
    this.cutStreams.set(reason, (this.cutStreams.get(reason) ?? 0) + 1);
  }
}
