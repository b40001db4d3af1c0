// The gateway's fleet: the upstreams in rank order, the router over them, and
// their health checks, changeable while requests run. A reload keeps every
// upstream whose URL remains (its loads, health, connections and, through
// `restoreRouter({ ranks })`, its cache view and conversations under its new
// rank), adds new ones empty, and retires removed ones: they take no new
// requests, finish those they have, then close. A drained upstream stays a
// rank but takes no new requests.

import type { Logger } from "pino";
import { createRouter, type Router } from "../router.js";
import type { RouterMetrics } from "../metrics.js";
import { addCounters, carryOver } from "./carried-metrics.js";
import { RoutingState, type StateLog } from "./routing-state.js";
import type { GatewayConfig } from "./config.js";
import { Upstream } from "./upstream.js";

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

  constructor(config: GatewayConfig, log: Logger, onRoom: () => void, stateLog: StateLog | null = null) {
    this.#config = config;
    this.#log = log;
    this.#onRoom = onRoom;
    this.upstreams = config.upstreams.map((u, i) => new Upstream(i, u, config));
    this.state = new RoutingState(createGatewayRouter(config), stateLog);
    for (const u of this.upstreams) this.#startChecks(u);
  }

  /** The router over the upstreams (a reload that changes them replaces it). */
  get router(): Router {
    return this.state.router;
  }

  /** Whether `u` takes new requests: a current rank, healthy and not draining. */
  available(u: Upstream): boolean {
    return u.healthy && !u.draining && !this.#retired.has(u);
  }

  /** Ends one request's load on `u`; a retired upstream closes once it has none. */
  release(u: Upstream, tokens: number): void {
    u.inFlight--;
    u.inFlightTokens -= tokens;
    if (u.inFlight === 0 && this.#retired.has(u)) {
      this.#retired.delete(u);
      void u.pool.close().catch(() => u.pool.destroy());
    }
    this.#onRoom();
  }

  /** Starts or stops draining the upstream at `index`; returns it, or null when there is none. */
  drain(index: number, on: boolean): Upstream | null {
    const u = this.upstreams[index];
    if (u === undefined) return null;
    u.drainOverride = on;
    this.#log.info({ upstream: u.index, name: u.name, draining: on }, on ? "upstream draining" : "upstream taking requests again");
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
    if (!unchanged) this.state.moveRanks(ranks); // the only step that can throw: before it, nothing changed
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
      return u;
    });
    for (const gone of unused.values()) {
      for (const u of gone) {
        change.removed.push(u.url);
        this.#stopChecks(u);
        if (u.inFlight > 0) this.#retired.add(u);
        else void u.pool.close().catch(() => u.pool.destroy());
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

  /** Stops the health checks and closes every connection pool. */
  async close(): Promise<void> {
    for (const u of [...this.#checks.keys()]) this.#stopChecks(u);
    await Promise.all([...this.upstreams, ...this.#retired].map((u) => u.pool.close().catch(() => u.pool.destroy())));
  }

  /** Destroys every pool at once (a gateway that failed to start). */
  async destroy(): Promise<void> {
    for (const u of [...this.#checks.keys()]) this.#stopChecks(u);
    await Promise.all(this.upstreams.map((u) => u.pool.destroy()));
  }

  /** Runs `u`'s health check now and on every interval. */
  #startChecks(u: Upstream): void {
    const health = this.#config.health;
    const log = this.#log;
    const check = async () => {
      try {
        const response = await u.pool.request({ path: `${u.basePath}${health.path}`, method: "GET", headers: u.apiKey ? { authorization: `Bearer ${u.apiKey}` } : {}, signal: AbortSignal.timeout(health.timeoutMs) });
        await response.body.dump();
        if (response.statusCode < 400) {
          if (u.checkPassed()) log.info({ upstream: u.index, name: u.name }, "upstream healthy again");
          this.#onRoom();
        } else if (u.fail()) log.warn({ upstream: u.index, name: u.name, status: response.statusCode }, "upstream ejected by its health check");
      } catch (error) {
        if (u.fail()) log.warn({ upstream: u.index, name: u.name, reason: (error as { code?: string }).code ?? "error" }, "upstream ejected by its health check");
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
