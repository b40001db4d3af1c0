// The gateway: an OpenAI-compatible HTTP server in front of a fleet of
// upstream engines, one upstream per rank of an adp-router router. This file
// builds the parts, listens and shuts down; the service (service.ts) routes
// each request by path. The edge (edge.ts) bounds clients, the request reader
// (request-reader.ts) tokenizes off the event loop, the scheduler
// (scheduler.ts) routes each event-loop turn's requests as one batch, the
// proxy (proxy.ts) keeps the delivery rule, the fleet (fleet.ts) holds the
// upstreams, their health and the router; the admin endpoints are admin.ts,
// /v1/models models.ts.

import type { Server } from "node:http";
import { pino, type Logger } from "pino";
import type { Router, TokenIds } from "adp-router";
import { excerpt } from "adp-router";
import { isGatewayConfig, loadGatewayConfig, logConfigWarnings, SHORT_KEY, type GatewayConfig, type GatewayConfigObject } from "./config/config.js";
import { refuseSelf, unreachableAtStart, unreachableNow, type Unreachable } from "./fleet/reachability.js";
import type { Tokenizer } from "./tokenizers/tokenizer.js";
import { createRequestReader, type RequestReader } from "./requests/request-reader.js";
import { Replication } from "./replication/replication.js";
import { Fleet, type FleetChange } from "./fleet/fleet.js";
import { newCounters, Scheduler } from "./fleet/scheduler.js";
import { createEdgeServer } from "./edge/edge.js";
import { viaEntry } from "./requests/via.js";
import { GatewayService } from "./service.js";
import type { StateLog } from "./fleet/routing-state.js";
import type { Siblings } from "./workers/sibling-log.js";
import type { MetricsRelay } from "./workers/metrics-relay.js";
import type { ConnectionGate } from "./workers/connection-overflow.js";
import type { InFlightLending } from "./workers/in-flight-lending.js";
import type { QueueSlots } from "./fleet/queue-slots.js";
import { poolConfig } from "./config/disaggregation-config.js";

/** A running gateway. */
export interface Gateway {
  /** `http://HOST:PORT`, as it listens. */
  readonly url: string;
  /** The router the gateway routes with (one rank per upstream; a reload that changes the upstreams replaces it). */
  readonly router: Router;
  /**
   * Moves to `config`'s upstreams without a restart (see Fleet.reload); other
   * settings need one, and are named in `needRestart`. Takes a loaded
   * configuration or a plain object shaped like the YAML file. Rejects with a
   * GatewayConfigError, changing nothing, when an upstream is this gateway.
   * An upstream it adds is tried first, as at start: one nobody can connect
   * to joins unhealthy until its health checks pass (in `unreachable`).
   */
  reload(config: GatewayConfig | GatewayConfigObject): Promise<FleetChange & { needRestart: string[]; unreachable: Unreachable[] }>;
  /** Prometheus text of the router's and the gateway's metrics. */
  metrics(): string;
  /** Stops accepting, lets in-flight requests finish up to `deadlineMs`, then closes everything. */
  close(deadlineMs?: number): Promise<void>;
}

/** Options of {@link createGateway} beyond the configuration. */
export interface GatewayOptions {
  /** Where logs go (default: pino to standard output at the configured level). */
  readonly logger?: Logger;
  /**
   * How prompts become tokens, on the event loop (default: the
   * configuration's `tokenizer:`, the UTF-8 byte tokenizer unless set; a
   * Hugging Face one runs on worker threads).
   */
  readonly tokenizer?: Tokenizer;
  /**
   * The reader (and tokenizer) of requests, built by createRequestReader (the
   * CLI builds it first, so a tokenizer that cannot load is reported before
   * anything else); the gateway closes it. Default: built from the configuration.
   */
  readonly requestReader?: RequestReader;
  /** Where every change to the routing state goes, in order (see routing-state.ts); none by default. */
  readonly stateLog?: StateLog;
  /**
   * Indexes of the upstreams that start unhealthy (found unreachable before
   * starting): they take no request until their health checks pass. Without
   * it, a configuration with `health.on_start: warn` has the gateway try a
   * TCP connection to each upstream itself before it listens.
   */
  readonly startUnhealthy?: readonly number[];
  /**
   * `"batched"` (the default): requests arriving in one event-loop turn are
   * routed together. `"per-request"`: each is routed as it arrives, alone (no
   * batch semantics); for measuring what the batching window costs.
   */
  readonly placement?: "batched" | "per-request";
  /** With `serve --workers N`: this worker's share of the one routing state (workers/sibling-log.ts). */
  readonly siblings?: Siblings;
  /** With `serve --workers N`: how this worker's `/metrics` answers for every worker (workers/metrics-relay.ts). */
  readonly workerMetrics?: MetricsRelay;
  /** With `serve --workers N`: what this worker does with a connection past its share of `limits.max_connections` (workers/connection-overflow.ts). */
  readonly connectionGate?: ConnectionGate;
  /** With `serve --workers N`: this worker's shares of the in-flight caps, lent between the workers (workers/in-flight-lending.ts). */
  readonly inFlightLending?: InFlightLending;
  /** With `serve --workers N`: this worker's slots of the gateway's queue, asked of the primary (workers/queue-lending.ts). */
  readonly queueSlots?: QueueSlots;
  /**
   * `"own"` (the default): the completion routes are served on the gateway's
   * own HTTP/1.1 server path, every other request by node:http.
   * `"node:http"`: node:http serves them all (for comparing the two).
   */
  readonly serverPath?: "own" | "node:http";
}

/** The listen error of a port in use or not allowed, as one clear message. */
export class GatewayListenError extends Error {
  readonly code = "ERR_ADP_GATEWAY_LISTEN";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "GatewayListenError";
  }
}

/** A loaded configuration as is; a plain object checked by loadGatewayConfig's rules (a GatewayConfigError lists its problems). */
function checked(config: GatewayConfig | GatewayConfigObject): GatewayConfig {
  if (isGatewayConfig(config)) return config;
  if (typeof config !== "object" || config === null || Array.isArray(config)) {
    throw new TypeError("createGateway() takes a configuration object shaped like the YAML file ({ upstreams: [{ url }], listen: { port } }) or one loadGatewayConfig() returned");
  }
  // `port` and `host` at the top are taken as the flags of those names (listen.port / listen.host).
  const { port, host, ...rest } = config as GatewayConfigObject & { port?: unknown; host?: unknown };
  const flags = { ...(port === undefined ? {} : { port: port as number }), ...(host === undefined ? {} : { host: host as string }) };
  return loadGatewayConfig({ object: rest, flags });
}

/** The request reader a configuration asks for (`tokenizer` in place of its tokenizer: on the event loop); throws TokenizerLoadError. */
export function createGatewayReader(config: GatewayConfig, tokenizer?: Tokenizer): Promise<RequestReader> {
  return createRequestReader({
    settings: config.tokenizer,
    limits: { maxPromptChars: config.limits.maxPromptChars, maxPromptTokens: config.limits.maxPromptTokens },
    loraAdapters: config.routing.loraAdapters,
    ...(tokenizer === undefined ? {} : { tokenizer }),
  });
}

/** Logs what the configuration warns about, and keys short enough to guess (said once, never printed). */
function warnAtStart(config: GatewayConfig, log: Logger): void {
  logConfigWarnings(log, config.warnings);
  const shortClientKeys = config.auth.apiKeys.filter((k) => k.length < SHORT_KEY).length;
  if (shortClientKeys > 0) log.warn({ keys: shortClientKeys, min_recommended: SHORT_KEY }, `${shortClientKeys} client API key${shortClientKeys === 1 ? " is" : "s are"} shorter than ${SHORT_KEY} characters (easier to guess)`);
  if (config.auth.adminApiKey !== null && config.auth.adminApiKey.length < SHORT_KEY) log.warn({ min_recommended: SHORT_KEY }, `the admin API key is shorter than ${SHORT_KEY} characters (easier to guess)`);
  if (config.auth.apiKeys.length === 0 && (config.auth.protectMetrics || config.auth.protectHealth)) {
    log.warn({ protect_metrics: config.auth.protectMetrics, protect_health: config.auth.protectHealth }, "auth.protect_metrics / protect_health are set but no client API keys are (auth.api_keys or api_keys_env): they protect nothing");
  }
}

/** Listens as configured; a port in use or not allowed is one GatewayListenError. */
function listen(server: Server, config: GatewayConfig): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException) => {
      const where = `${excerpt(config.listen.host, 100)}:${config.listen.port}`;
      const why = error.code === "EADDRINUSE" ? `${where} is already in use` : error.code === "EACCES" ? `${where} is not allowed (a port below 1024 needs privileges)` : error.code === "EADDRNOTAVAIL" ? `${excerpt(config.listen.host, 100)} is not an address of this machine` : `cannot listen on ${where} (${error.code ?? error.message})`;
      reject(new GatewayListenError(why, { cause: error }));
    };
    server.once("error", onError);
    server.listen(config.listen.port, config.listen.host, () => {
      server.off("error", onError);
      resolve();
    });
  });
}

/**
 * Starts a gateway listening as configured; resolves once it listens.
 * `config` is a plain object shaped like the YAML file (`{ upstreams: [{ url:
 * "http://…" }], listen: { port: 0 } }`), checked by the same rules as the
 * file, or a configuration loadGatewayConfig() returned.
 */
export async function createGateway(input: GatewayConfig | GatewayConfigObject, options: GatewayOptions = {}): Promise<Gateway> {
  const config = checked(input);
  // A worker of `--workers N` names itself on each line (its siblings log the same events).
  const log = options.logger ?? pino({ level: config.logging.level, base: options.siblings === undefined ? undefined : { worker: options.siblings.self } });
  warnAtStart(config, log);
  const startUnhealthy = options.startUnhealthy ?? (await unreachableToStartOut(config, log));
  // Tokenizing: the configured tokenizer (a Hugging Face one on worker threads; a TokenizerLoadError names the file), or the one given.
  const reader: RequestReader = options.requestReader ?? (await createGatewayReader(config, options.tokenizer));
  if (reader.tokenizerName === "utf8-bytes" && config.upstreams.some((u) => u.kvEvents !== null)) {
    // Engine blocks hold the engine's token ids: only token-id prompts can match them through bytes.
    log.warn("kv_events with the byte tokenizer: only prompts sent as token ids can match the engines' blocks (set tokenizer: { kind: huggingface, path: DIR })");
  }
  // With `sync:`, shared changes also go to the other replicas (replication.ts).
  const replication = config.sync === null ? null : new Replication(config.sync, config, log);
  const stateLog = joinLogs([options.stateLog, replication?.stateLog, options.siblings?.stateLog]);
  const via = viaEntry();
  // With `disaggregation:` this fleet is the decode pool's, and the prefill pool has one of its own.
  const decodeConfig = poolConfig(config, "decode");
  const lending = options.inFlightLending;
  const fleet: Fleet = new Fleet(decodeConfig, log, () => (scheduler.schedule(), options.siblings?.loadsChanged(), lending?.ended()), stateLog, via);
  const prefillConfig = config.disaggregation === null ? null : poolConfig(config, "prefill");
  const prefillFleet = prefillConfig === null ? null : new Fleet(prefillConfig, log, () => prefillScheduler?.schedule(), null, via);
  startOut(config, startUnhealthy, [[decodeConfig, fleet], ...(prefillConfig === null ? [] : [[prefillConfig, prefillFleet!] as const])]);
  replication?.start(fleet.state, () => fleet.upstreams.map((u) => u.url));
  options.siblings?.start(
    fleet.state,
    () => fleet.upstreams.map((u) => u.url),
    () => fleet.upstreams.map((u) => ({ url: u.url, inFlight: u.inFlight, inFlightTokens: u.inFlightTokens })),
    (i, n, tokens) => {
      const u = fleet.upstreams[i];
      if (u === undefined) return;
      // Requests waiting for room the gateway was full of may start now (the router weighs the siblings' loads).
      if (n < u.siblingInFlight) scheduler.schedule();
      (u.siblingInFlight = n), (u.siblingInFlightTokens = tokens);
    },
  );
  const counters = newCounters();
  const onRouterError = (error: unknown) => log.error({ err: error }, "the router refused a batch");
  // A disaggregated request is placed twice: its token ids go back to the reader once both are placed (disaggregated-serving.ts).
  const release = prefillFleet === null ? (ids: TokenIds) => reader.release(ids) : () => {};
  const scheduler = new Scheduler(fleet, decodeConfig, counters, onRouterError, release, options.placement === "per-request", lending, options.queueSlots);
  lending?.start({ inFlight: (url) => fleet.inFlightAt(url), urls: () => fleet.upstreams.filter((u) => fleet.available(u)).map((u) => u.url), wake: () => scheduler.schedule(), unbatched: () => scheduler.unbatched() });
  const prefillCounters = newCounters();
  const prefillScheduler = prefillFleet === null ? null : new Scheduler(prefillFleet, prefillConfig!, prefillCounters, onRouterError, release, options.placement === "per-request");
  const prefill = prefillFleet === null ? null : { fleet: prefillFleet, scheduler: prefillScheduler!, counters: prefillCounters };
  const service = new GatewayService({ config, log, reader, fleet, scheduler, counters, replication, via, prefill, workerMetrics: options.workerMetrics ?? null, siblings: options.siblings ?? null });
  options.workerMetrics?.renderWith(() => service.metrics());
  const edge = createEdgeServer(config, service.edge, { serve: (req, res, body) => void service.handle(req, res, body), abandoned: (req) => service.abandoned(req), receiving: service.receiving }, options.serverPath !== "node:http", options.connectionGate ?? null);
  const server = edge.server;
  try {
    await listen(server, config);
    const address = server.address();
    service.port = typeof address === "object" && address !== null ? address.port : config.listen.port;
    await refuseSelf(config.upstreams.map((u) => u.url), config.listen.host, service.port);
  } catch (error) {
    server.close();
    edge.closeAllConnections();
    await replication?.close();
    await fleet.destroy();
    await prefillFleet?.destroy();
    await reader.close();
    throw error;
  }
  const host = config.listen.host.includes(":") ? `[${config.listen.host}]` : config.listen.host;
  /** Set once `close()` has begun. */
  let closing: Promise<void> | null = null;
  return {
    url: `http://${host}:${service.port}`,
    get router() {
      return fleet.router;
    },
    metrics: () => service.metrics(),
    async reload(next: GatewayConfig | GatewayConfigObject) {
      const loaded = checked(next);
      await refuseSelf(loaded.upstreams.map((u) => u.url), config.listen.host, service.port);
      // The upstreams it adds are tried first: one nobody can connect to (a typo'd port) joins out, as at start,
      // not taken as healthy until its health checks eject it.
      const pools = prefillFleet === null ? [fleet] : [fleet, prefillFleet];
      const known = new Set(pools.flatMap((f) => f.upstreams.map((u) => u.url)));
      const unreachable = await unreachableNow(loaded.upstreams.map((u) => u.url).filter((url) => !known.has(url)), loaded.timeouts);
      const change = service.reloadFleet(loaded);
      const out = new Set(unreachable.map((u) => u.url));
      for (const f of pools) for (const u of f.upstreams) if (out.has(u.url)) u.health.startOut();
      // Indexes in the new list, as the start's are.
      return { ...change, unreachable: unreachable.map((u) => ({ ...u, index: loaded.upstreams.findIndex((c) => c.url === u.url) })) };
    },
    close(deadlineMs = 30_000) {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        // Requests still waiting for an upstream have not started: answer them now.
        scheduler.stop();
        prefillScheduler?.stop();
        edge.closeIdleConnections();
        const deadline = Date.now() + deadlineMs;
        while (service.answering > 0 && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 20));
          edge.closeIdleConnections();
        }
        edge.closeAllConnections();
        await closed;
        options.siblings?.close();
        await replication?.close();
        await fleet.close();
        await prefillFleet?.close();
        await reader.close();
      })();
      return closing;
    },
  };
}

/** Starts out the upstreams found unreachable (indexes in `config.upstreams`), each in the pool fleet it belongs to. */
function startOut(config: GatewayConfig, unhealthy: readonly number[], pools: readonly (readonly [GatewayConfig, Fleet])[]): void {
  const out = new Set(unhealthy.map((i) => config.upstreams[i]));
  for (const [pool, fleet] of pools) pool.upstreams.forEach((u, j) => out.has(u) && fleet.upstreams[j]?.health.startOut());
}

/** One state log of those given (an embedder's, replication's, the sibling workers'), each appended in turn; null with none. */
function joinLogs(logs: readonly (StateLog | undefined)[]): StateLog | null {
  const given = logs.filter((l): l is StateLog => l !== undefined);
  if (given.length <= 1) return given[0] ?? null;
  return { append: (e) => given.forEach((l) => l.append(e)) };
}

/** With `health.on_start: warn`, the upstreams unreachable now (logged): they start out until their checks pass. */
async function unreachableToStartOut(config: GatewayConfig, log: Logger): Promise<number[]> {
  if (config.health.onStart !== "warn") return [];
  const unreachable = await unreachableAtStart(config);
  for (const u of unreachable) log.warn({ upstream: config.upstreams[u.index]?.name, index: u.index, url: u.url, reason: u.reason }, "upstream unreachable at start: unhealthy until its health checks pass");
  return unreachable.map((u) => u.index);
}
