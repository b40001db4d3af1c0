// The gateway: an OpenAI-compatible HTTP server in front of a fleet of
// upstream engines, one upstream per rank of an adp-router router. This file
// is the HTTP side (requests, proxying, errors, health, metrics, listening and
// shutdown; the admin endpoints are admin.ts); the fleet (fleet.ts) holds the upstreams and the
// router, and the scheduler (scheduler.ts) routes the requests of each
// event-loop turn as one batch over the upstreams' in-flight loads.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { pino, type Logger } from "pino";
import type { Router } from "../router.js";
import { formatPrometheus } from "../prometheus.js";
import { excerpt } from "../errors.js";
import { isGatewayConfig, loadGatewayConfig, SHORT_KEY, type GatewayConfig, type GatewayConfigObject } from "./config.js";
import { adminRoute, bearerIn, digest, type AdminGateway } from "./admin.js";
import { connectionRefused, unreachableAtStart } from "./reachability.js";
import { HttpError, readRequest } from "./openai.js";
import type { Tokenizer } from "./tokenizer.js";
import { loadTokenizer } from "./tokenizer-config.js";
import { formatSyncMetrics } from "./sync/sync-metrics.js";
import { Replication } from "./sync/replication.js";
import type { Upstream } from "./upstream.js";
import { Fleet, type FleetChange } from "./fleet.js";
import { Hangup, Scheduler, type Placement } from "./scheduler.js";
import { formatGatewayMetrics, type GatewayCounters } from "./metrics.js";
import { exchange } from "./exchange.js";
import type { StateLog } from "./routing-state.js";

/** Headers never forwarded: those of one connection (hop-by-hop), and those the proxy sets itself (host, length, expect). */
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length", "expect"]);
/** Errors that mean the request never reached the upstream, so retrying elsewhere cannot run it twice. */
const NOT_SENT = new Set(["ECONNREFUSED", "UND_ERR_CONNECT_TIMEOUT", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN"]);
/** Errors of a connection that broke before any answer: the request may have reached the upstream. */
const BROKE = new Set(["ECONNRESET", "EPIPE", "UND_ERR_SOCKET", "UND_ERR_CLOSED"]);
/** How long to try a fresh connection to an upstream whose connection broke, to learn whether its process is gone. */
const GONE_PROBE_MS = 250;
/** How long `/v1/models` answers are reused. */
const MODELS_TTL_MS = 5_000;
/** Most `/v1/models` answers kept (one per client credential seen within the TTL). */
const MODELS_CACHE_ENTRIES = 256;

/** A running gateway. */
export interface Gateway {
  /** `http://HOST:PORT`, as it listens. */
  readonly url: string;
  /** The router the gateway routes with (one rank per upstream; a reload that changes the upstreams replaces it). */
  readonly router: Router;
  /**
   * Moves to `config`'s upstreams without a restart (see Fleet.reload); other
   * settings need one, and are named in `needRestart`. Takes a loaded
   * configuration or a plain object shaped like the YAML file.
   */
  reload(config: GatewayConfig | GatewayConfigObject): FleetChange & { needRestart: string[] };
  /** Prometheus text of the router's and the gateway's metrics. */
  metrics(): string;
  /** Stops accepting, lets in-flight requests finish up to `deadlineMs`, then closes everything. */
  close(deadlineMs?: number): Promise<void>;
}

/** Options of {@link createGateway} beyond the configuration. */
export interface GatewayOptions {
  /** Where logs go (default: pino to standard output at the configured level). */
  readonly logger?: Logger;
  /** How prompts become tokens (default: the configuration's `tokenizer:`, the UTF-8 byte tokenizer unless set). */
  readonly tokenizer?: Tokenizer;
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

/**
 * Starts a gateway listening as configured; resolves once it listens.
 * `config` is a plain object shaped like the YAML file (`{ upstreams: [{ url:
 * "http://…" }], listen: { port: 0 } }`), checked by the same rules as the
 * file, or a configuration loadGatewayConfig() returned.
 */
export async function createGateway(input: GatewayConfig | GatewayConfigObject, options: GatewayOptions = {}): Promise<Gateway> {
  const config = checked(input);
  const log = options.logger ?? pino({ level: config.logging.level, base: undefined });
  // Upstreams found unreachable start unhealthy: no request tries them until their checks pass.
  let startUnhealthy = options.startUnhealthy;
  if (startUnhealthy === undefined && config.health.onStart === "warn") {
    const unreachable = await unreachableAtStart(config);
    startUnhealthy = unreachable.map((u) => u.index);
    for (const u of unreachable) log.warn({ upstream: u.index, url: u.url, reason: u.reason }, "upstream unreachable at start: unhealthy until its health checks pass");
  }
  // Keys of any length are taken; a short one is guessable: said once, never printed.
  const shortClientKeys = config.auth.apiKeys.filter((k) => k.length < SHORT_KEY).length;
  if (shortClientKeys > 0) log.warn({ keys: shortClientKeys, min_recommended: SHORT_KEY }, `${shortClientKeys} client API key${shortClientKeys === 1 ? " is" : "s are"} shorter than ${SHORT_KEY} characters (easier to guess)`);
  if (config.auth.adminApiKey !== null && config.auth.adminApiKey.length < SHORT_KEY) log.warn({ min_recommended: SHORT_KEY }, `the admin API key is shorter than ${SHORT_KEY} characters (easier to guess)`);
  if (config.auth.apiKeys.length === 0 && (config.auth.protectMetrics || config.auth.protectHealth)) {
    log.warn({ protect_metrics: config.auth.protectMetrics, protect_health: config.auth.protectHealth }, "auth.protect_metrics / protect_health are set but no client API keys are (auth.api_keys or api_keys_env): they protect nothing");
  }
  // The configured tokenizer unless one is given (loading a Hugging Face folder throws a TokenizerLoadError naming the file).
  const tokenizer = options.tokenizer ?? loadTokenizer(config.tokenizer);
  // With `sync:`, shared changes also go to the other replicas (replication.ts).
  const replication = config.sync === null ? null : new Replication(config.sync, config, log);
  const own = options.stateLog ?? null;
  const stateLog: StateLog | null = replication === null ? own : own === null ? replication.stateLog : { append: (e) => (own.append(e), replication.stateLog.append(e)) };
  const fleet: Fleet = new Fleet(config, log, () => scheduler.schedule(), stateLog);
  for (const i of startUnhealthy ?? []) fleet.upstreams[i]?.startUnhealthy();
  /** The configuration the upstreams last came from (the start's, then each reload's or admin change's). */
  let current: GatewayConfig = config;
  replication?.start(fleet.state, () => fleet.upstreams.map((u) => u.url));
  if (tokenizer.name === "utf8-bytes" && config.upstreams.some((u) => u.kvEvents !== null)) {
    // Engine blocks hold the engine's token ids: only token-id prompts can match them through bytes.
    log.warn("kv_events with the byte tokenizer: only prompts sent as token ids can match the engines' blocks (set tokenizer: { kind: huggingface, path: DIR })");
  }
  const keyDigests = config.auth.apiKeys.map(digest);
  const adminDigest = config.auth.adminApiKey === null ? null : digest(config.auth.adminApiKey.trim());
  const counters: GatewayCounters = { requests: new Map(), codes: new Map(), queued: 0, rejectedFull: 0 };
  const scheduler = new Scheduler(fleet, config, counters, (error) => log.error({ err: error }, "the router refused a batch"), (ids) => tokenizer.release?.(ids), options.placement === "per-request");
  const count = (outcome: string) => counters.requests.set(outcome, (counters.requests.get(outcome) ?? 0) + 1);

  /** Set once `close()` has begun. */
  let closing: Promise<void> | null = null;
  // ---- proxying ---------------------------------------------------------------------------

  /** The headers sent upstream: the client's, less hop-by-hop ones, with the upstream's key. */
  function upstreamHeaders(req: IncomingMessage, u: Upstream): Record<string, string | string[]> {
    const out: Record<string, string | string[]> = {};
    // Headers the client's Connection header names are hop-by-hop too (RFC 9110 §7.6.1).
    const named = req.headers.connection?.toLowerCase().split(",").map((t) => t.trim());
    for (const [name, value] of Object.entries(req.headers)) {
      if (value === undefined || HOP_BY_HOP.has(name) || named?.includes(name)) continue;
      out[name] = value;
    }
    // The upstream's own key; else, when clients authenticate to the gateway, their key is the gateway's and stays here.
    if (u.apiKey !== null) out.authorization = `Bearer ${u.apiKey}`;
    else if (keyDigests.length > 0) delete out.authorization;
    return out;
  }

  /**
   * Reads a completion request and waits for its upstream. Only the prompt's
   * size leaves here, not its token ids: a token array held for the whole
   * upstream round trip outlives the young generation, and that alone cost
   * about a third of the gateway's CPU per request (bench:serve, 4 KB bodies).
   */
  function place(kind: "chat" | "completion", raw: Buffer, req: IncomingMessage, abort: Hangup): Promise<Placement & { tokens: number }> {
    const request = readRequest(kind, raw, req.headers, tokenizer, config.routing.loraAdapters);
    const tokens = request.tokens.length;
    return scheduler.acquire(request, abort).then((p) => ({ upstream: p.upstream, matchedTokens: p.matchedTokens, tokens }));
  }

  /** Counts a failure of a proxied request on `u` toward its passive ejection, logging the ejection. */
  function passiveFail(u: Upstream, reason: string): void {
    if (u.passiveFail()) log.warn({ upstream: u.index, name: u.name, reason }, "upstream ejected: requests failed on it (it takes requests again once its health checks pass, after at least one health interval)");
  }

  /**
   * Proxies a placed request, retrying on another upstream only when it was
   * never sent. Every answer carries `x-adp-upstream` (an error's too: the
   * last upstream tried).
   */
  async function proxy(req: IncomingMessage, res: ServerResponse, raw: Buffer, kind: "chat" | "completion", tokens: number, first: Upstream, abort: Hangup): Promise<{ status: number; upstream: number; outcome: string }> {
    const tried = new Set<Upstream>();
    let u: Upstream = first;
    for (;;) {
      tried.add(u);
      const started = performance.now();
      let released = false;
      const done = () => {
        if (!released) {
          released = true;
          fleet.release(u, tokens);
        }
      };
      try {
        const upstream: Upstream = u;
        const sent = exchange(upstream.pool, res, {
          path: `${upstream.basePath}${req.url}`,
          headers: upstreamHeaders(req, upstream),
          body: raw,
          hangup: abort,
          onHead: (status, answer) => {
            upstream.firstByte.observe((performance.now() - started) / 1000);
            // Passive ejection: consecutive 5xx answers count like failures to connect; any other answer resets the count.
            // Answers never eject the last healthy upstream: requests that make engines fail must not turn the whole fleet into 503s.
            if (status < 500) upstream.succeed();
            else if (fleet.upstreams.some((x) => x !== upstream && x.healthy && !x.draining)) passiveFail(upstream, `status ${status}`);
            upstream.countStatus(status);
            const headers: Record<string, string | string[]> = {};
            for (const name in answer) {
              const value = answer[name];
              if (value !== undefined && !HOP_BY_HOP.has(name)) headers[name] = value;
            }
            // The body is passed on byte for byte, so the upstream's length stands: the
            // answer then goes out unchunked, headers and body in one write and no
            // closing chunk (undici refuses a body that does not match its length).
            const length = answer["content-length"];
            if (typeof length === "string" && answer["transfer-encoding"] === undefined) headers["content-length"] = length;
            headers["x-adp-upstream"] = String(upstream.index);
            res.writeHead(status, headers);
            // A stream's head goes out at once; a whole answer's goes with its body, in one write.
            if (String(answer["content-type"] ?? "").startsWith("text/event-stream")) res.flushHeaders();
          },
        });
        const status = await sent.head;
        try {
          await sent.end;
        } catch (error) {
          if (!res.writableEnded) res.destroy();
          const code = (error as { code?: string }).code;
          done();
          u.latency.observe((performance.now() - started) / 1000);
          return { status, upstream: u.index, outcome: abort.aborted ? "client_closed" : code === "UND_ERR_BODY_TIMEOUT" ? "idle_timeout" : "stream_error" };
        }
        done();
        u.latency.observe((performance.now() - started) / 1000);
        return { status, upstream: u.index, outcome: "ok" };
      } catch (error) {
        done();
        if (abort.aborted) {
          u.countStatus("aborted");
          return { status: 499, upstream: u.index, outcome: "client_closed" };
        }
        const code = (error as { code?: string }).code ?? "";
        const at = { "x-adp-upstream": String(u.index) };
        // A connection that broke before any answer, to an upstream that now refuses connections: its
        // process is gone (killed mid-run), and a process that is gone cannot be running the request, so it goes elsewhere.
        const gone = BROKE.has(code) && (await connectionRefused(u.url, GONE_PROBE_MS));
        if (NOT_SENT.has(code) || gone) {
          const timedOut = code === "UND_ERR_CONNECT_TIMEOUT";
          u.countStatus(timedOut ? "timeout" : "error");
          passiveFail(u, code);
          const next = scheduler.leastLoaded(tried);
          if (next !== null) {
            u.retriedAway++;
            next.inFlight++;
            next.inFlightTokens += tokens;
            // The prompt now goes to `next`: its view learns it (the first one's cannot unlearn it, but it is out of the fleet for now).
            // Its tokens are read again from the body (the same ids: tokenizers are deterministic) rather than held by every request for this rare path.
            if (tokens > 0 && fleet.router.prefixIndex !== null) {
              const again = readRequest(kind, raw, req.headers, tokenizer, config.routing.loraAdapters);
              fleet.state.learn(next.index, again.tokens, { loraTaskId: again.loraTaskId, cacheSalt: again.cacheSalt });
              tokenizer.release?.(again.tokens);
            }
            u = next;
            continue;
          }
          // Every try failed: the last one's failure is the answer (a connect timeout 504, a refusal 502).
          if (timedOut) throw new HttpError(504, "the upstream could not be connected to in time", "server_error", "upstream_connect_timeout", at);
          throw new HttpError(502, "no upstream could be reached", "server_error", "upstream_unreachable", at);
        }
        if (code === "UND_ERR_HEADERS_TIMEOUT") {
          u.countStatus("timeout");
          throw new HttpError(504, "the upstream did not answer in time", "server_error", "upstream_timeout", at);
        }
        // The connection broke before an answer (reset, closed) and the upstream still listens: it may have started the request, so no retry.
        u.countStatus("error");
        passiveFail(u, code || "error");
        throw new HttpError(502, "the upstream failed", "server_error", "upstream_error", at);
      }
    }
  }

  // ---- the HTTP server --------------------------------------------------------------------

  /** Whether the request carries one of the client keys (constant-time comparison). */
  function authorized(req: IncomingMessage): boolean {
    return keyDigests.length === 0 || bearerIn(req, keyDigests);
  }

  /** The request body, at most the configured bytes (413 past it). */
  async function readBody(req: IncomingMessage): Promise<Buffer> {
    const limit = config.limits.maxBodyBytes;
    const declared = Number(req.headers["content-length"] ?? NaN);
    if (declared > limit) throw new HttpError(413, `the request body is over ${limit} bytes`, "invalid_request_error", "payload_too_large");
    // Events, not async iteration: a promise per chunk costs measurably per request.
    return new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const finish = (error: HttpError | null) => {
        req.off("data", onData);
        req.off("end", onEnd);
        req.off("error", onError);
        req.off("close", onClose);
        if (error === null) resolve(Buffer.concat(chunks, size));
        else reject(error);
      };
      const onData = (chunk: Buffer) => {
        size += chunk.length;
        if (size > limit) finish(new HttpError(413, `the request body is over ${limit} bytes`, "invalid_request_error", "payload_too_large"));
        else chunks.push(chunk);
      };
      const onEnd = () => finish(null);
      const onError = () => finish(new HttpError(499, "the client closed the request"));
      const onClose = () => {
        if (!req.complete) finish(new HttpError(499, "the client closed the request")); // it hung up mid-body
      };
      req.on("data", onData);
      req.on("end", onEnd);
      req.on("error", onError);
      req.on("close", onClose);
    });
  }

  /**
   * `/v1/models` answers by the credential they were fetched with: "" for the
   * gateway's own (an upstream's key, or none), else the sha256 of the client's
   * Authorization (sent on when clients do not authenticate to the gateway), so
   * a client only ever gets an answer its own key could have fetched. At most
   * {@link MODELS_CACHE_ENTRIES}, the oldest dropped first.
   */
  const modelsCache = new Map<string, { at: number; status: number; body: Buffer; type: string; upstream: Upstream }>();

  /** `GET /v1/models` from a healthy upstream (the next one when it cannot be reached), reused for a few seconds. */
  async function models(req: IncomingMessage, res: ServerResponse): Promise<{ status: number; upstream: number }> {
    const auth = keyDigests.length === 0 ? req.headers.authorization : undefined;
    const credential = auth === undefined ? "" : digest(auth).toString("hex");
    const cached = modelsCache.get(credential) ?? (credential === "" ? undefined : modelsCache.get(""));
    if (cached !== undefined && Date.now() - cached.at < MODELS_TTL_MS) {
      const from = cached.upstream.index;
      res.writeHead(cached.status, { "content-type": cached.type, "x-adp-upstream": String(from) }).end(cached.body);
      return { status: cached.status, upstream: from };
    }
    const candidates = fleet.upstreams.filter((x) => fleet.available(x));
    if (candidates.length === 0) throw new HttpError(503, "no healthy upstream", "server_error", "no_healthy_upstream", { "retry-after": "1" });
    for (const [i, u] of candidates.entries()) {
      // The upstream's key; else the client's, when it is meant for the engines (no client keys
      // here), and then the answer is that client's alone, not cached.
      const clientAuth = u.apiKey === null ? auth : undefined;
      try {
        const response = await u.pool.request({ path: `${u.basePath}/v1/models`, method: "GET", headers: u.apiKey ? { authorization: `Bearer ${u.apiKey}` } : clientAuth ? { authorization: clientAuth } : {} });
        const body = Buffer.from(await response.body.arrayBuffer());
        const type = String(response.headers["content-type"] ?? "application/json");
        if (response.statusCode < 400) {
          const key = clientAuth === undefined ? "" : credential;
          modelsCache.delete(key);
          if (modelsCache.size >= MODELS_CACHE_ENTRIES) modelsCache.delete(modelsCache.keys().next().value!);
          modelsCache.set(key, { at: Date.now(), status: response.statusCode, body, type, upstream: u });
        }
        res.writeHead(response.statusCode, { "content-type": type, "x-adp-upstream": String(u.index) }).end(body);
        return { status: response.statusCode, upstream: u.index };
      } catch (error) {
        const code = (error as { code?: string }).code ?? "";
        if (NOT_SENT.has(code)) {
          passiveFail(u, code);
          if (i + 1 < candidates.length) continue; // never reached: ask the next one
        }
        throw new HttpError(502, "the upstream failed", "server_error", "upstream_error", { "x-adp-upstream": String(u.index) });
      }
    }
    throw new HttpError(503, "no healthy upstream", "server_error", "no_healthy_upstream", { "retry-after": "1" });
  }

  /**
   * Moves to `next`'s upstreams (SIGHUP, `reload()`, the admin endpoint's
   * additions and removals: one path, so each is the same fleet change, which
   * replication also sees); other settings are named when they need a restart.
   */
  function reloadFleet(next: GatewayConfig): FleetChange & { needRestart: string[] } {
    const change = fleet.reload(next);
    current = next;
    for (const [key, entry] of modelsCache) if (!fleet.upstreams.includes(entry.upstream)) modelsCache.delete(key);
    const text = (v: unknown) => JSON.stringify(v, (_k, x: unknown) => (x instanceof Map ? [...x] : x));
    const needRestart: string[] = (Object.keys(config) as (keyof GatewayConfig)[]).filter((k) => k !== "upstreams" && text(next[k]) !== text(config[k]));
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
  const adminGateway: AdminGateway = { fleet, current: () => current, reloadFleet, readBody, log, adminDigest };

  /** `/health`: 200 while at least one upstream is healthy. */
  function health(res: ServerResponse): number {
    const ok = fleet.upstreams.some((u) => fleet.available(u));
    const body = {
      status: ok ? "ok" : "unavailable",
      upstreams: fleet.upstreams.map((u) => ({ index: u.index, name: u.name, healthy: u.healthy, draining: u.draining, in_flight: u.inFlight })),
      ...(replication === null ? {} : { sync: { synced: replication.synced, connected: replication.connected, pending: replication.pending, applied: replication.applied } }),
    };
    res.writeHead(ok ? 200 : 503, { "content-type": "application/json" }).end(JSON.stringify(body));
    return ok ? 200 : 503;
  }

  /**
   * Answers `error` OpenAI-style (when nothing was sent yet). A request whose
   * body was not read whole (refused by its size, key or method) also closes
   * its connection, so the rest of that body is never read.
   */
  function answerError(req: IncomingMessage, res: ServerResponse, error: HttpError): void {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const unread = !req.complete;
    res.writeHead(error.status, { "content-type": "application/json", ...error.headers, ...(unread ? { connection: "close" } : {}) }).end(error.body());
    if (unread) res.once("finish", () => req.socket?.destroy());
  }

  const inFlightResponses = new Set<ServerResponse>();

  /** Serves one request: routes by path, answers every failure OpenAI-style, logs one line. */
  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now();
    const path = (req.url ?? "/").split("?")[0]!;
    const kind = path === "/v1/chat/completions" ? "chat" : path === "/v1/completions" ? "completion" : null;
    let status = 0;
    let upstream: number | null = null;
    let matched: number | null = null;
    let outcome = "ok";
    inFlightResponses.add(res);
    const abort = new Hangup();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
      inFlightResponses.delete(res);
    });
    try {
      if (kind !== null) {
        if (req.method !== "POST") throw new HttpError(405, `${path} takes POST`, "invalid_request_error", "method_not_allowed", { allow: "POST" });
        if (!authorized(req)) throw new HttpError(401, "a valid API key is required", "invalid_request_error", "invalid_api_key");
        const raw = await readBody(req);
        const placement = await place(kind, raw, req, abort);
        matched = placement.matchedTokens;
        const r = await proxy(req, res, raw, kind, placement.tokens, placement.upstream, abort);
        status = r.status;
        upstream = r.upstream;
        outcome = r.outcome;
      } else if (path.startsWith("/admin/")) {
        status = await adminRoute(adminGateway, req, res, path, (req.url ?? "").slice(path.length + 1));
      } else if (path === "/v1/models") {
        if (req.method !== "GET") throw new HttpError(405, "/v1/models takes GET", "invalid_request_error", "method_not_allowed", { allow: "GET" });
        if (!authorized(req)) throw new HttpError(401, "a valid API key is required", "invalid_request_error", "invalid_api_key");
        const m = await models(req, res);
        status = m.status;
        upstream = m.upstream;
      } else if (path === "/health") {
        if (req.method !== "GET") throw new HttpError(405, "/health takes GET", "invalid_request_error", "method_not_allowed", { allow: "GET" });
        if (config.auth.protectHealth && !authorized(req)) throw new HttpError(401, "a valid API key is required", "invalid_request_error", "invalid_api_key");
        status = health(res);
      } else if (path === "/sync/state" && replication !== null) {
        if (req.method !== "GET") throw new HttpError(405, "/sync/state takes GET", "invalid_request_error", "method_not_allowed", { allow: "GET" });
        if (config.auth.protectMetrics && !authorized(req)) throw new HttpError(401, "a valid API key is required", "invalid_request_error", "invalid_api_key");
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(replication.state()));
        status = 200;
      } else if (path === "/metrics") {
        if (req.method !== "GET") throw new HttpError(405, "/metrics takes GET", "invalid_request_error", "method_not_allowed", { allow: "GET" });
        if (config.auth.protectMetrics && !authorized(req)) throw new HttpError(401, "a valid API key is required", "invalid_request_error", "invalid_api_key");
        res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(metrics());
        status = 200;
      } else {
        throw new HttpError(404, `no route for ${req.method} ${path.slice(0, 200)}`, "invalid_request_error", "not_found");
      }
    } catch (error) {
      const e = error instanceof HttpError ? error : new HttpError(500, "internal error", "server_error", "internal_error");
      if (!(error instanceof HttpError)) log.error({ err: error }, "unexpected error");
      status = e.status;
      outcome = e.code;
      // An answer about an upstream (its timeout, its failure) names it, in the log line as in the header.
      const named = e.headers["x-adp-upstream"];
      if (upstream === null && named !== undefined) upstream = Number(named);
      if (e.status !== 499) answerError(req, res, e);
    } finally {
      if (kind !== null) {
        count(outcome);
        if (status >= 100 && status <= 599) counters.codes.set(status, (counters.codes.get(status) ?? 0) + 1);
      }
      const ms = Math.round((performance.now() - started) * 10) / 10;
      log.info({ method: req.method, path: path.slice(0, 200), status, upstream, outcome, matched_tokens: matched, latency_ms: ms, ms }, "request");
    }
  }

  /** The router's metrics, then the gateway's, as Prometheus text. */
  function metrics(): string {
    return formatPrometheus(fleet.routerMetrics()) + formatGatewayMetrics(fleet.upstreams, counters, scheduler.waiting(), fleet.state.views) + (replication === null ? "" : formatSyncMetrics(replication));
  }

  // ---- listening --------------------------------------------------------------------------

  // requestTimeout bounds receiving a whole request (a body trickled a byte at a time is cut off).
  const server: Server = createServer(
    {
      keepAliveTimeout: 65_000,
      requestTimeout: config.timeouts.requestMs,
      headersTimeout: Math.min(60_000, config.timeouts.requestMs),
      // Node checks those timeouts on this interval (30 s by default): a fraction of the timeout keeps it near its word.
      connectionsCheckingInterval: Math.max(50, Math.min(30_000, Math.floor(config.timeouts.requestMs / 4))),
    },
    (req, res) => void handle(req, res),
  );
  // Expect: 100-continue: a body declared over the limit is refused before the client sends it.
  server.on("checkContinue", (req, res) => {
    if (Number(req.headers["content-length"] ?? 0) > config.limits.maxBodyBytes) {
      answerError(req, res, new HttpError(413, `the request body is over ${config.limits.maxBodyBytes} bytes`, "invalid_request_error", "payload_too_large"));
      return;
    }
    res.writeContinue();
    void handle(req, res);
  });
  // A request Node's parser refuses: a timeout is 408, oversized headers 431, anything else 400.
  server.on("clientError", (error: NodeJS.ErrnoException, socket) => {
    if (!socket.writable) {
      socket.destroy();
      return;
    }
    const [status, text, message] = error.code === "ERR_HTTP_REQUEST_TIMEOUT" ? [408, "Request Timeout", "the request was not received in time"] : error.code === "HPE_HEADER_OVERFLOW" ? [431, "Request Header Fields Too Large", "the request headers are too large"] : [400, "Bad Request", "malformed HTTP request"];
    socket.end(`HTTP/1.1 ${status} ${text}\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n${new HttpError(status, message).body()}`);
  });
  await new Promise<void>((resolve, reject) => {
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
  }).catch(async (error) => {
    await fleet.destroy();
    throw error;
  });
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : config.listen.port;
  const host = config.listen.host.includes(":") ? `[${config.listen.host}]` : config.listen.host;
  const url = `http://${host}:${port}`;

  return {
    url,
    get router() {
      return fleet.router;
    },
    metrics,
    reload(next: GatewayConfig | GatewayConfigObject): FleetChange & { needRestart: string[] } {
      return reloadFleet(checked(next));
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
      })();
      return closing;
    },
  };
}
