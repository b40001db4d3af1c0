// The gateway's fleet: the upstreams in rank order, the router over them, and
// their health checks, changeable while requests run. A reload keeps every
// upstream whose URL remains (its loads, health, connections and, through
// `restoreRouter({ ranks })`, its cache view and conversations under its new
// rank), adds new ones empty, and retires removed ones: they take no new
// requests, finish those they have, then close. A drained upstream stays a
// rank but takes no new requests.

import type { Logger } from "pino";
import { createRouter, type Router } from "adp-router";
import type { RouterMetrics } from "adp-router";
import { addCounters, carryOver } from "./carried-metrics.js";
import type { KvEventsResult } from "adp-router";
import { RoutingState, type IndexUpdate, type StateLog } from "./routing-state.js";
import type { GatewayConfig } from "../config/config.js";
import { gatewayEngineViews, shapeOf } from "../events/engine-views.js";
import { EngineLoadScraper } from "../load/engine-load.js";
import { TrtllmHttpEventSource } from "../events/http-events.js";
import { Upstream, type EventSource } from "./upstream.js";
import { reasonOf } from "./upstream-errors.js";
import { controlRequest } from "../http1/control-request.js";
import { viaEntry } from "../requests/via.js";
import type { TrafficVerdict } from "./outlier.js";
import { ZmqEventSource } from "../events/zmq-events.js";

/** How often event streams' statuses are checked for transitions to log. */
const STATUS_CHECK_MS = 1_000;
/** The most of a health answer read (only its status counts; a longer answer is cut there). */
const HEALTH_MAX_BYTES = 64 * 1024;

/** What a reload changed. */
export interface FleetChange {
  /** URLs added, removed, and kept (the latter with their old and new index). */
  readonly added: string[];
  readonly removed: string[];
  readonly kept: { url: string; from: number; to: number }[];
  /** Indexes (new) of the upstreams now draining. */
  readonly draining: number[];
}

/** The upstreams, their router and their health checks. */
export class Fleet {
  /** The upstreams, one per rank, in rank order. */
  upstreams: Upstream[];
  /** The routing state over them: the router, changed only through it (and its state log). */
  readonly state: RoutingState;
  /** Removed upstreams still finishing requests. */
  readonly #retired = new Set<Upstream>();
  readonly #checks = new Map<Upstream, NodeJS.Timeout>();
  /** The configuration the gateway started with (connections and health checks keep it). */
  readonly #config: GatewayConfig;
  readonly #log: Logger;
  /** Counters of the routers reloads replaced, on the current ranks (see carried-metrics.ts). */
  #carried: RouterMetrics | null = null;
  /** Called when an upstream may take requests again (waiting ones can be routed). */
  readonly #onRoom: () => void;
  /** Checks event streams' statuses, when any upstream has one. */
  #statusTimer: NodeJS.Timeout | null = null;

  /** The gateway's `Via` entry, sent with health checks (a check that loops back to the gateway fails: 508). */
  readonly #via: string;

  constructor(config: GatewayConfig, log: Logger, onRoom: () => void, stateLog: StateLog | null = null, via = viaEntry()) {
    this.#via = via;
    this.#config = config;
    this.#log = log;
    this.#onRoom = onRoom;
    this.upstreams = config.upstreams.map((u, i) => new Upstream(i, u, config));
    const views = gatewayEngineViews(config);
    // Asked before each routed batch: a change of status is logged as routing first sees it.
    const live = () => {
      this.#logStatuses();
      return this.upstreams.map((u) => u.loggedStatus === "live");
    };
    this.state = new RoutingState(createGatewayRouter(config), stateLog, { views, live });
    // Other replicas' placements on a DP rank reach that upstream's phase 2 (the upstreams of the fleet as it is now).
    this.state.rankPlacements = (i) => this.upstreams[i]?.rankRouting ?? null;
    for (const u of this.upstreams) {
      this.#startChecks(u);
      this.#startEvents(u);
      this.#startLoad(u);
    }
  }

  /** The router over the upstreams (a reload that changes them replaces it). */
  get router(): Router {
    return this.state.router;
  }

  /** Requests in flight on the upstream at `url`: the current one's, and a removed one's still finishing its own. */
  inFlightAt(url: string): number {
    let n = 0;
    for (const u of this.upstreams) if (u.url === url) n += u.inFlight;
    for (const u of this.#retired) if (u.url === url) n += u.inFlight;
    return n;
  }

  /** Whether `u` takes new requests: a current rank, healthy, not draining, and (when its load is scraped) reporting. */
  available(u: Upstream): boolean {
    return u.healthy && !u.draining && !this.#retired.has(u) && u.loadKnown;
  }

  /** An answer's status from `u`: outlier detection counts its 5xx answers (an ejection is logged). */
  answered(u: Upstream, status: number): void {
    if (status >= 500 || !u.health.clean) this.#judge(u, u.health.answered(status, () => this.#mayEject(u)), `status ${status}`);
  }

  /** A gateway failure on `u` (a connect error, a reset, a timeout: `reason`): outlier detection counts it. */
  gatewayFailure(u: Upstream, reason: string): void {
    this.#judge(u, u.health.gatewayFailure(() => this.#mayEject(u)), reason);
  }

  /**
   * Whether outlier detection may eject `u` now: the fleet's ejected
   * upstreams (by any cause) stay within `max_ejected_percent` of it, rounded
   * down, and (below 100) another upstream still takes requests.
   */
  #mayEject(u: Upstream): boolean {
    const percent = this.#config.health.maxEjectedPercent;
    let out = 0;
    let others = false;
    for (const x of this.upstreams) {
      if (!x.healthy) out++;
      else if (x !== u && this.available(x)) others = true;
    }
    return out + 1 <= Math.floor((this.upstreams.length * percent) / 100) && (percent >= 100 || others);
  }

  /** Logs what outlier detection decided about `u` (a refusal rarely: the 1st, 10th, 100th ...). */
  #judge(u: Upstream, verdict: TrafficVerdict, reason: string): void {
    if (verdict.ejected) {
      this.#log.warn({ upstream: u.name, index: u.index, cause: verdict.cause, reason, ejection_ms: verdict.forMs }, "upstream ejected by outlier detection: passing health checks re-admit it once its ejection time is over");
    } else if (verdict.refused && Number.isInteger(Math.log10(u.health.refusedEjections))) {
      this.#log.warn({ upstream: u.name, index: u.index, reason, refused: u.health.refusedEjections, max_ejected_percent: this.#config.health.maxEjectedPercent }, "upstream kept in: ejecting it would leave too much of the fleet ejected (health.max_ejected_percent)");
    }
  }

  /** Ends one request's load on `u` (and on its DP rank `rank`, when phase 2 chose one); a retired upstream closes once it has none. */
  release(u: Upstream, tokens: number, rank: number | null = null): void {
    u.inFlight--;
    u.inFlightTokens -= tokens;
    if (rank !== null) u.rankRouting?.release(rank, tokens);
    if (u.inFlight === 0 && this.#retired.has(u)) {
      this.#retired.delete(u);
      void u.closeConnections();
    }
    this.#onRoom();
  }

  /** Counts a request whose prefill `u` answered as still sending its KV cache (until {@link transferred}). */
  inTransfer(u: Upstream, tokens: number): void {
    u.inTransfer++;
    u.inTransferTokens += tokens;
  }

  /** Ends {@link inTransfer}'s count: the decode server has the KV cache (its first chunk came), or the request ended. */
  transferred(u: Upstream, tokens: number): void {
    u.inTransfer--;
    u.inTransferTokens -= tokens;
    this.#onRoom();
  }

  /** Starts or stops draining the upstream at `index`; returns it, or null when there is none. */
  drain(index: number, on: boolean): Upstream | null {
    const u = this.upstreams[index];
    if (u === undefined) return null;
    u.drainOverride = on;
    this.#log.info({ upstream: u.name, index: u.index, draining: on }, on ? "upstream draining" : "upstream taking requests again");
    if (!on) this.#onRoom();
    return u;
  }

  /**
   * Moves to `config`'s upstreams (matched by URL), keeping the routing state
   * of those that remain. Only the list of upstreams (with their names, keys
   * and drain flags) changes; every other setting, and the connection and
   * health settings of new upstreams, stay those the gateway started with.
   * Throws, changing nothing, when the router cannot move (its index cannot
   * hold the new ranks within its budget, say).
   */
  reload(config: GatewayConfig): FleetChange {
    const old = this.upstreams;
    const unused = new Map<string, Upstream[]>();
    for (const u of old) unused.set(u.url, [...(unused.get(u.url) ?? []), u]);
    // First what would change, without changing anything.
    const plan = config.upstreams.map((c) => ({ c, same: unused.get(c.url)?.shift() }));
    const ranks = plan.map(({ same }) => (same === undefined ? null : same.index));
    const unchanged = ranks.length === old.length && ranks.every((r, i) => r === i);
    const carried = unchanged ? this.#carried : carryOver(addCounters(this.router.metrics(), this.#carried), ranks);
    // The only step that can throw: before it, nothing changed. Kept upstreams keep their engine views (and event sources).
    if (!unchanged) this.state.moveRanks(ranks, plan.map(({ c, same }) => shapeOf(same ?? c)), plan.map(({ c }) => c.url));
    // Then all of it.
    const change: FleetChange = { added: [], removed: [], kept: [], draining: [] };
    const next = plan.map(({ c, same }, i) => {
      if (same !== undefined) {
        change.kept.push({ url: c.url, from: same.index, to: i });
        same.index = i;
        same.update(c);
        return same;
      }
      const u = new Upstream(i, c, this.#config);
      change.added.push(c.url);
      this.#startChecks(u);
      this.#startEvents(u);
      this.#startLoad(u);
      return u;
    });
    for (const gone of unused.values()) {
      for (const u of gone) {
        change.removed.push(u.url);
        this.#stopChecks(u);
        void u.events?.close();
        u.events = null;
        void u.load?.close();
        u.load = null;
        u.rankRouting?.dispose(); // its requests in flight still release their ranks' counts
        if (u.inFlight > 0) this.#retired.add(u);
        else void u.closeConnections();
      }
    }
    for (const u of next) if (u.draining) change.draining.push(u.index);
    this.#carried = carried;
    this.upstreams = next;
    this.#onRoom();
    return change;
  }

  /** The router's metrics, its counters including what the routers before the last reloads counted. */
  routerMetrics(): RouterMetrics {
    return addCounters(this.router.metrics(), this.#carried);
  }

  /** Stops the health checks and event sources and closes every connection pool. */
  async close(): Promise<void> {
    for (const u of [...this.#checks.keys()]) this.#stopChecks(u);
    await this.#closeEvents();
    await Promise.all([...this.upstreams, ...this.#retired].map((u) => u.closeConnections()));
    for (const u of this.upstreams) u.rankRouting?.dispose();
    this.state.views?.dispose();
  }

  /** Destroys every pool at once (a gateway that failed to start). */
  async destroy(): Promise<void> {
    for (const u of [...this.#checks.keys()]) this.#stopChecks(u);
    await this.#closeEvents();
    await Promise.all(this.upstreams.map((u) => u.destroyConnections()));
    for (const u of this.upstreams) u.rankRouting?.dispose();
    this.state.views?.dispose();
  }

  /** Starts `u`'s KV-event source, when it has one: its updates go to its engine view, at its rank at the time. */
  #startEvents(u: Upstream): void {
    const config = u.kvEvents;
    if (config === null) return;
    const onNotice = (n: { rank: number; what: string; detail?: string }) =>
      this.#log.warn({ upstream: u.name, index: u.index, ...(n.rank >= 0 ? { dpRank: n.rank } : {}), ...(n.detail === undefined ? {} : { detail: n.detail }) }, `KV events: ${n.what}`);
    const source: EventSource =
      config.kind === "zmq" ? new ZmqEventSource(config, { onNotice }) : new TrtllmHttpEventSource(config, { control: u.control, basePath: u.basePath, apiKey: () => u.apiKey }, { onNotice });
    u.events = source;
    source.start((update: IndexUpdate) => {
      if (this.upstreams[u.index] !== u) return;
      try {
        const result = this.state.update(u.index, update);
        if (result !== null) this.#judgeEvents(u, result);
      } catch (error) {
        this.#log.error({ upstream: u.name, index: u.index, err: error }, "KV events: a batch could not be applied");
      }
    });
    this.#ensureStatusTimer();
  }

  /**
   * Notes what came of a batch of `u`'s events: malformed ones are logged (at
   * most every 10 s, with their reasons), and while every event it stores is
   * malformed (its engine's blocks are not the gateway's size, say) its
   * stream counts as not live, whatever its sequence says.
   */
  #judgeEvents(u: Upstream, result: KvEventsResult): void {
    u.partialTails += result.partialTails;
    if (result.malformed > 0) {
      if (result.applied === 0) u.eventsUsable = false;
      const now = performance.now();
      if (now - u.malformedLoggedAt > 10_000) {
        u.malformedLoggedAt = now;
        this.#log.warn({ upstream: u.name, index: u.index, malformed: result.malformed, reasons: result.problems.slice(0, 3) }, "KV events: events the gateway cannot use were skipped");
      }
    }
    if (result.applied > 0) u.eventsUsable = true;
  }

  /**
   * Notes (and logs) each change of an event stream's status: routing falls
   * back to the gateway's own view while it is not live. A stream not yet
   * heard from is stale without a warning (it has said nothing yet).
   */
  #logStatuses(): void {
    for (const u of this.upstreams) {
      if (u.load !== null && u.loadKnown !== u.loadFresh) {
        const fields = { upstream: u.name, index: u.index, ...(u.load.lastError === null ? {} : { lastError: u.load.lastError }) };
        if (u.loadKnown) this.#log.info(fields, "engine load reported: upstream takes requests");
        else this.#log.warn(fields, `engine load report older than ${u.loadConfig!.maxAgeMs} ms: upstream takes no requests until it reports (its cache view is kept)`);
        u.loadFresh = u.loadKnown;
      }
      const reported = u.events?.status;
      if (reported === undefined) continue;
      const status = reported === "live" && !u.eventsUsable ? "stale" : reported;
      if (status === u.loggedStatus) continue;
      const fields = { upstream: u.name, index: u.index, status, dpRanks: u.events!.rankStatuses };
      if (status === "live") this.#log.info(fields, "KV events live: routing on the engine's own cache view");
      else if (u.loggedStatus !== null || status !== "stale") this.#log.warn(fields, `KV events ${status}: routing on the gateway's own placements until they resume`);
      else this.#log.info(fields, "KV events: waiting for the engine's first batch; routing on the gateway's own placements meanwhile");
      u.loggedStatus = status;
    }
  }

  /** Stops every event source and load scraper. */
  async #closeEvents(): Promise<void> {
    if (this.#statusTimer !== null) clearInterval(this.#statusTimer);
    this.#statusTimer = null;
    await Promise.all(this.upstreams.flatMap((u) => [u.events?.close(), u.load?.close()]));
  }

  /** Starts scraping `u`'s engine load, when configured; a report arriving may let waiting requests go there. */
  #startLoad(u: Upstream): void {
    const config = u.loadConfig;
    if (config === null) return;
    u.load = new EngineLoadScraper({
      baseUrl: u.url,
      engine: config.kind,
      path: config.path,
      intervalMs: config.intervalMs,
      apiKey: () => u.apiKey,
      ...(config.model === null ? {} : { model: config.model }),
      onScrape: (outcome) => {
        if (outcome.kind === "ok") this.#onRoom();
        this.#logStatuses();
      },
    });
    u.load.start();
    this.#ensureStatusTimer();
  }

  /** Starts the status check that logs feeds going stale (silence changes nothing by itself). */
  #ensureStatusTimer(): void {
    if (this.#statusTimer !== null) return;
    this.#statusTimer = setInterval(() => this.#logStatuses(), STATUS_CHECK_MS);
    this.#statusTimer.unref();
  }

  /** Runs `u`'s health check now and on every interval. */
  #startChecks(u: Upstream): void {
    const health = this.#config.health;
    const log = this.#log;
    const check = async () => {
      try {
        const headers = { via: this.#via, ...(u.apiKey ? { authorization: `Bearer ${u.apiKey}` } : {}) };
        // Only the status counts: the body is not kept, and one longer than HEALTH_MAX_BYTES is cut there.
        const { statusCode } = await controlRequest(u.control, { path: `${u.basePath}${health.path}`, method: "GET", headers, signal: AbortSignal.timeout(health.timeoutMs), maxBytes: HEALTH_MAX_BYTES, readsBody: () => false });
        if (statusCode < 400) {
          if (u.health.checkPassed()) log.info({ upstream: u.name, index: u.index }, "upstream healthy again");
          this.#onRoom();
        } else if (u.health.checkFailed()) log.warn({ upstream: u.name, index: u.index, reason: `status ${statusCode}` }, "upstream ejected by its health check");
      } catch (error) {
        if (u.health.checkFailed()) log.warn({ upstream: u.name, index: u.index, reason: reasonOf(error) }, "upstream ejected by its health check");
      }
    };
    void check();
    const timer = setInterval(check, health.intervalMs);
    timer.unref();
    this.#checks.set(u, timer);
  }

  /** Stops `u`'s health checks. */
  #stopChecks(u: Upstream): void {
    const timer = this.#checks.get(u);
    if (timer !== undefined) clearInterval(timer);
    this.#checks.delete(u);
  }
}

/** The router a gateway starts with: one rank per upstream, as configured. */
export function createGatewayRouter(config: GatewayConfig): Router {
  return createRouter({
    numRanks: config.upstreams.length,
    attentionDp: config.attentionDp,
    learnFromRouting: false, // the gateway teaches the index where requests really go (Scheduler's #place)
    prefixIndex: { tokensPerBlock: config.routing.tokensPerBlock, maxMemoryBytes: config.routing.indexBytes },
  });
}
