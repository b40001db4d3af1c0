// The gateway: an OpenAI-compatible HTTP server in front of a fleet of
// upstream engines, one upstream per rank of an adp-router router. This file
// wires the parts and routes each request by path; the edge (edge.ts) bounds
// clients, the request reader (request-reader.ts) tokenizes off the event
// loop, the scheduler (scheduler.ts) routes each event-loop turn's requests as
// one batch, the proxy (proxy.ts) keeps the delivery rule, the fleet
// (fleet.ts) holds the upstreams, their health and the router; the admin
// endpoints are admin.ts, /v1/models models.ts.

import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { pino, type Logger } from "pino";
import type { Router } from "../router.js";
import { formatPrometheus } from "../prometheus.js";
import { excerpt } from "../errors.js";
import { isGatewayConfig, loadGatewayConfig, SHORT_KEY, type GatewayConfig, type GatewayConfigObject } from "./config.js";
import { adminRoute, bearerIn, digest, type AdminGateway } from "./admin.js";
import { refuseSelf, unreachableAtStart } from "./reachability.js";
import { HttpError } from "./openai.js";
import type { Tokenizer } from "./tokenizer.js";
import { createRequestReader, type RequestReader } from "./request-reader.js";
import { formatSyncMetrics } from "./sync/sync-metrics.js";
import { Replication } from "./sync/replication.js";
import { Fleet, type FleetChange } from "./fleet.js";
import { Hangup, Scheduler } from "./scheduler.js";
import { formatEdgeMetrics, formatGatewayMetrics, type GatewayCounters } from "./metrics.js";
import { answerError, createEdgeServer, isLoop, readBody, requestIdOf, viaEntry, type EdgeCounters } from "./edge.js";
import { ModelsEndpoint } from "./models.js";
import { proxy, type ProxyContext } from "./proxy.js";
import type { StateLog } from "./routing-state.js";

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
   */
  reload(config: GatewayConfig | GatewayConfigObject): Promise<FleetChange & { needRestart: string[] }>;
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
  for (const w of config.warnings) log.warn({ field: w.field, ...(w.where === null ? {} : { where: w.where }) }, `configuration: ${w.field}: ${w.message}`);
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

/** The `/health` answer: 200 while at least one upstream takes requests. */
function health(res: ServerResponse, fleet: Fleet, replication: Replication | null): number {
  const ok = fleet.upstreams.some((u) => fleet.available(u));
  const body = {
    status: ok ? "ok" : "unavailable",
    upstreams: fleet.upstreams.map((u) => ({ index: u.index, name: u.name, healthy: u.healthy, ...(u.health.cause === null ? {} : { ejected: u.health.cause }), draining: u.draining, in_flight: u.inFlight })),
    ...(replication === null ? {} : { sync: { synced: replication.synced, connected: replication.connected, pending: replication.pending, applied: replication.applied } }),
  };
  res.writeHead(ok ? 200 : 503, { "content-type": "application/json" }).end(JSON.stringify(body));
  return ok ? 200 : 503;
}

/** A 405 naming the method a path takes. */
const onlyMethod = (path: string, method: string) => new HttpError(405, `${path} takes ${method}`, "invalid_request_error", "method_not_allowed", { allow: method });
/** A 401 for a missing or wrong key. */
const unauthorized = () => new HttpError(401, "a valid API key is required", "invalid_request_error", "invalid_api_key");

/**
 * Starts a gateway listening as configured; resolves once it listens.
 * `config` is a plain object shaped like the YAML file (`{ upstreams: [{ url:
 * "http://…" }], listen: { port: 0 } }`), checked by the same rules as the
 * file, or a configuration loadGatewayConfig() returned.
 */
export async function createGateway(input: GatewayConfig | GatewayConfigObject, options: GatewayOptions = {}): Promise<Gateway> {
  const config = checked(input);
  const log = options.logger ?? pino({ level: config.logging.level, base: undefined });
  warnAtStart(config, log);
  // Upstreams found unreachable start unhealthy: no request tries them until their checks pass.
  let startUnhealthy = options.startUnhealthy;
  if (startUnhealthy === undefined && config.health.onStart === "warn") {
    const unreachable = await unreachableAtStart(config);
    startUnhealthy = unreachable.map((u) => u.index);
    for (const u of unreachable) log.warn({ upstream: config.upstreams[u.index]?.name, index: u.index, url: u.url, reason: u.reason }, "upstream unreachable at start: unhealthy until its health checks pass");
  }
  // Tokenizing: the configured tokenizer (a Hugging Face one on worker threads; a TokenizerLoadError names the file), or the one given.
  const reader: RequestReader = options.requestReader ?? (await createGatewayReader(config, options.tokenizer));
  // With `sync:`, shared changes also go to the other replicas (replication.ts).
  const replication = config.sync === null ? null : new Replication(config.sync, config, log);
  const own = options.stateLog ?? null;
  const stateLog: StateLog | null = replication === null ? own : own === null ? replication.stateLog : { append: (e) => (own.append(e), replication.stateLog.append(e)) };
  const fleet: Fleet = new Fleet(config, log, () => scheduler.schedule(), stateLog);
  for (const i of startUnhealthy ?? []) fleet.upstreams[i]?.health.startOut();
  /** The configuration the upstreams last came from (the start's, then each reload's or admin change's). */
  let current: GatewayConfig = config;
  replication?.start(fleet.state, () => fleet.upstreams.map((u) => u.url));
  if (reader.tokenizerName === "utf8-bytes" && config.upstreams.some((u) => u.kvEvents !== null)) {
    // Engine blocks hold the engine's token ids: only token-id prompts can match them through bytes.
    log.warn("kv_events with the byte tokenizer: only prompts sent as token ids can match the engines' blocks (set tokenizer: { kind: huggingface, path: DIR })");
  }
  const keyDigests = config.auth.apiKeys.map(digest);
  const adminDigest = config.auth.adminApiKey === null ? null : digest(config.auth.adminApiKey.trim());
  const counters: GatewayCounters = { requests: new Map(), codes: new Map(), queued: 0, rejectedFull: 0 };
  const edge: EdgeCounters = { connections: 0, refusedConnections: 0, readTimeouts: 0, loops: 0 };
  const scheduler = new Scheduler(fleet, config, counters, (error) => log.error({ err: error }, "the router refused a batch"), (ids) => reader.release(ids), options.placement === "per-request");
  const via = viaEntry();
  const models = new ModelsEndpoint(fleet, keyDigests.length > 0, config.timeouts.firstByteMs);
  const proxying: ProxyContext = {
    fleet,
    scheduler,
    log,
    timeouts: config.timeouts,
    clientKeys: keyDigests.length > 0,
    via,
    // The prompt now goes to another upstream: its view learns it (the same ids: tokenizers are deterministic),
    // read again from the body rather than held by every request for this rare path.
    relearn: (u, call) => {
      if (fleet.router.prefixIndex === null) return;
      reader.read(call.kind, call.raw, call.req.headers).then(
        (again) => {
          if (fleet.upstreams[u.index] === u) fleet.state.learn(u.index, again.tokens, { loraTaskId: again.loraTaskId, cacheSalt: again.cacheSalt });
          reader.release(again.tokens);
        },
        () => {},
      );
    },
  };
  const count = (outcome: string) => counters.requests.set(outcome, (counters.requests.get(outcome) ?? 0) + 1);
  /** Set once `close()` has begun. */
  let closing: Promise<void> | null = null;
  /** The port it listens on, once it does. */
  let port = config.listen.port;

  /** Whether the request carries one of the client keys (constant-time comparison). */
  const authorized = (req: IncomingMessage) => keyDigests.length === 0 || bearerIn(req, keyDigests);

  /**
   * Moves to `next`'s upstreams (SIGHUP, `reload()`, the admin endpoint's
   * additions and removals: one path, so each is the same fleet change, which
   * replication also sees); other settings are named when they need a restart.
   */
  function reloadFleet(next: GatewayConfig): FleetChange & { needRestart: string[] } {
    const change = fleet.reload(next);
    current = next;
    models.prune();
    const text = (v: unknown) => JSON.stringify(v, (_k, x: unknown) => (x instanceof Map ? [...x] : x));
    const needRestart: string[] = (Object.keys(config) as (keyof GatewayConfig)[]).filter((k) => k !== "upstreams" && k !== "warnings" && text(next[k]) !== text(config[k]));
    // An upstream that stays keeps its event source and load scraper as they started.
    for (const u of next.upstreams) {
      const kept = fleet.upstreams.find((f) => f.url === u.url);
      if (kept === undefined) continue;
      if (text(u.kvEvents) !== text(kept.kvEvents)) needRestart.push(`upstreams[${kept.index}].kv_events`);
      if (text(u.load) !== text(kept.loadConfig)) needRestart.push(`upstreams[${kept.index}].load`);
    }
    if (needRestart.length > 0) log.warn({ settings: needRestart }, "the reloaded configuration changes settings that take effect on a restart");
    log.info({ added: change.added.length, removed: change.removed.length, kept: change.kept.length, draining: change.draining }, "upstreams reloaded");
    return { ...change, needRestart };
  }

  /** The admin endpoints' view of this gateway. */
  const adminGateway: AdminGateway = {
    fleet,
    current: () => current,
    reloadFleet,
    refuseSelf: (urls) => refuseSelf(urls, config.listen.host, port, () => "url"),
    readBody: (req) => readBody(req, config.limits.maxBodyBytes),
    log,
    adminDigest,
  };

  /** Serves a completion request: read (and tokenized), placed, proxied; resolves with what its log line says. */
  async function complete(kind: "chat" | "completion", req: IncomingMessage, res: ServerResponse, requestId: string, hangup: Hangup) {
    if (req.method !== "POST") throw onlyMethod(kind === "chat" ? "/v1/chat/completions" : "/v1/completions", "POST");
    if (!authorized(req)) throw unauthorized();
    const raw = await readBody(req, config.limits.maxBodyBytes);
    const request = await reader.read(kind, raw, req.headers, hangup);
    const tokens = request.tokens.length;
    // Only the prompt's size goes on from here, not its token ids: the scheduler hands them back once placed
    // (a token array held for the whole upstream round trip outlives the young generation; bench:serve).
    const placement = await scheduler.acquire(request, hangup);
    const r = await proxy(proxying, { kind, req, res, raw, tokens, requestId, hangup }, placement.upstream);
    return { status: r.status, upstream: r.upstream.name, outcome: r.outcome, matched: placement.matchedTokens };
  }

  /** Serves the other endpoints; resolves with the status answered. */
  async function serveOther(path: string, req: IncomingMessage, res: ServerResponse, requestId: string): Promise<{ status: number; upstream: string | null }> {
    if (path.startsWith("/admin/")) return { status: await adminRoute(adminGateway, req, res, path, (req.url ?? "").slice(path.length + 1)), upstream: null };
    if (path === "/v1/models") {
      if (req.method !== "GET") throw onlyMethod(path, "GET");
      if (!authorized(req)) throw unauthorized();
      const m = await models.answer(req, res, requestId);
      return { status: m.status, upstream: m.upstream.name };
    }
    const open = path === "/health" ? !config.auth.protectHealth : !config.auth.protectMetrics;
    if (path === "/health" || path === "/metrics" || (path === "/sync/state" && replication !== null)) {
      if (req.method !== "GET") throw onlyMethod(path, "GET");
      if (!open && !authorized(req)) throw unauthorized();
      if (path === "/health") return { status: health(res, fleet, replication), upstream: null };
      const [type, body] = path === "/metrics" ? ["text/plain; version=0.0.4", metrics()] : ["application/json", JSON.stringify(replication!.state())];
      res.writeHead(200, { "content-type": type }).end(body);
      return { status: 200, upstream: null };
    }
    throw new HttpError(404, `no route for ${req.method} ${path.slice(0, 200)}`, "invalid_request_error", "not_found");
  }

  const inFlightResponses = new Set<ServerResponse>();

  /** Serves one request: routes by path, answers every failure OpenAI-style, logs one line. */
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    const path = (req.url ?? "/").split("?")[0]!;
    const kind = path === "/v1/chat/completions" ? "chat" : path === "/v1/completions" ? "completion" : null;
    const requestId = requestIdOf(req);
    res.setHeader("x-request-id", requestId);
    let status = 0;
    let upstream: string | null = null;
    let matched: number | null = null;
    let outcome = "ok";
    inFlightResponses.add(res);
    const hangup = new Hangup();
    res.on("close", () => {
      if (!res.writableFinished) hangup.abort();
      inFlightResponses.delete(res);
    });
    try {
      // A request that went out through this gateway and came back: one hop, then refused (never an amplification).
      if (isLoop(req, via)) {
        edge.loops++;
        throw new HttpError(508, "the request came back to this gateway (an upstream is this gateway, or forwards to it)", "invalid_request_error", "loop_detected");
      }
      if (kind !== null) {
        const r = await complete(kind, req, res, requestId, hangup);
        ({ status, upstream, outcome, matched } = r);
      } else ({ status, upstream } = await serveOther(path, req, res, requestId));
    } catch (error) {
      const e = error instanceof HttpError ? error : new HttpError(500, "internal error", "server_error", "internal_error");
      if (!(error instanceof HttpError)) log.error({ err: error, request_id: requestId }, "unexpected error");
      status = e.status;
      outcome = e.code;
      // An answer about an upstream (its timeout, its failure) names it, in the log line as in the header.
      upstream ??= e.headers["x-adp-upstream-name"] ?? null;
      if (e.status !== 499) answerError(req, res, e);
    } finally {
      if (kind !== null) {
        count(outcome);
        if (status >= 100 && status <= 599) counters.codes.set(status, (counters.codes.get(status) ?? 0) + 1);
      }
      const ms = Math.round((performance.now() - started) * 10) / 10;
      log.info({ method: req.method, path: path.slice(0, 200), request_id: requestId, status, upstream, outcome, matched_tokens: matched, latency_ms: ms }, "request");
    }
  }

  /** The router's metrics, then the gateway's, as Prometheus text. */
  function metrics(): string {
    return (
      formatPrometheus(fleet.routerMetrics()) +
      formatGatewayMetrics(fleet.upstreams, counters, scheduler.waiting(), fleet.state.views) +
      formatEdgeMetrics(edge, config.limits.maxConnections, reader.metricLines("adp_gateway_")) +
      (replication === null ? "" : formatSyncMetrics(replication))
    );
  }

  const server = createEdgeServer(config, edge, (req, res) => void handle(req, res));
  try {
    await listen(server, config);
    const address = server.address();
    port = typeof address === "object" && address !== null ? address.port : config.listen.port;
    await refuseSelf(config.upstreams.map((u) => u.url), config.listen.host, port, (i) => `upstreams[${i}].url`);
  } catch (error) {
    server.close();
    server.closeAllConnections();
    await replication?.close();
    await fleet.destroy();
    await reader.close();
    throw error;
  }
  const host = config.listen.host.includes(":") ? `[${config.listen.host}]` : config.listen.host;

  return {
    url: `http://${host}:${port}`,
    get router() {
      return fleet.router;
    },
    metrics,
    async reload(input: GatewayConfig | GatewayConfigObject) {
      const next = checked(input);
      await refuseSelf(next.upstreams.map((u) => u.url), config.listen.host, port, (i) => `upstreams[${i}].url`);
      return reloadFleet(next);
    },
    close(deadlineMs = 30_000) {
      closing ??= (async () => {
        const closed = new Promise<void>((resolve) => server.close(() => resolve()));
        // Requests still waiting for an upstream have not started: answer them now.
        scheduler.stop();
        server.closeIdleConnections();
        const deadline = Date.now() + deadlineMs;
        while (inFlightResponses.size > 0 && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 20));
          server.closeIdleConnections();
        }
        server.closeAllConnections();
        await closed;
        await replication?.close();
        await fleet.close();
        await reader.close();
      })();
      return closing;
    },
  };
}
