// A running gateway's request handling, once its parts are built: it routes
// each request by path (completions through the reader, the scheduler and the
// proxy; /v1/models, /health, /metrics, /sync/state, the admin endpoints),
// answers every failure OpenAI-style, logs one line per request, and moves the
// fleet on reloads. createGateway (gateway.ts) builds it and listens.

import { IncomingMessage, type ServerResponse } from "node:http";
import type { Logger } from "pino";
import { formatPrometheus } from "adp-router/prometheus";
import { GatewayConfigError, logConfigWarnings, type GatewayConfig } from "./config/config.js";
import { adminRoute, bearerIn, digest, type AdminGateway } from "./edge/admin.js";
import { answerError, readBody, requestIdOf, type EdgeCounters } from "./edge/edge.js";
import { ReceivingBudget } from "./edge/receiving-budget.js";
import { isLoop } from "./requests/via.js";
import type { Fleet, FleetChange } from "./fleet/fleet.js";
import { formatBounds, indexBound, type Bound } from "./common/bounds.js";
import { formatEdgeMetrics, formatGatewayMetrics, label, type GatewayCounters } from "./metrics.js";
import { ModelsEndpoint } from "./edge/models.js";
import { HttpError, type RoutedRequest } from "./requests/openai.js";
import { proxy, type ProxyCall, type ProxyContext, type ProxyOutcome } from "./proxy/proxy.js";
import { refuseSelf } from "./fleet/reachability.js";
import type { RequestReader } from "./requests/request-reader.js";
import { Hangup } from "./fleet/hangup.js";
import type { Scheduler } from "./fleet/scheduler.js";
import type { Replication } from "./replication/replication.js";
import { formatSyncMetrics } from "./replication/sync-metrics.js";
import { formatSiblingMetrics } from "./workers/sibling-metrics.js";
import type { Siblings } from "./workers/sibling-log.js";
import type { Upstream } from "./fleet/upstream.js";
import { poolConfig } from "./config/disaggregation-config.js";
import { DisaggregatedServing } from "./disaggregation/disaggregated-serving.js";
import { mergeLabelled } from "./common/labelled-metrics.js";
import type { MetricsRelay } from "./workers/metrics-relay.js";
import type { EdgeRequest, EdgeResponse } from "./http1/edge-types.js";

/** The longest `/v1/models` may take (an engine answers it from memory; `first_byte_ms` is sized for generation). */
const MODELS_TIMEOUT_MS = 30_000;

/** A 405 naming the method a path takes. */
const onlyMethod = (path: string, method: string) => new HttpError(405, `${path} takes ${method}`, "invalid_request_error", "method_not_allowed", { allow: method });
/** A 401 for a missing or wrong key. */
const unauthorized = () => new HttpError(401, "a valid API key is required", "invalid_request_error", "invalid_api_key");

/** The parts a service runs on (built by createGateway). */
export interface ServiceParts {
  readonly config: GatewayConfig;
  readonly log: Logger;
  readonly reader: RequestReader;
  readonly fleet: Fleet;
  readonly scheduler: Scheduler;
  readonly counters: GatewayCounters;
  readonly replication: Replication | null;
  /** This gateway's `Via` entry (edge.ts: viaEntry), on every request it sends an upstream. */
  readonly via: string;
  /**
   * With `disaggregation:`, the prefill pool (`fleet`, `scheduler` and
   * `counters` above are then the decode pool's); null: one pool serves whole requests.
   */
  readonly prefill: { readonly fleet: Fleet; readonly scheduler: Scheduler; readonly counters: GatewayCounters } | null;
  /** With `serve --workers N`: every worker's page for `/metrics`, each sample labelled worker="N"; null: this process's own. */
  readonly workerMetrics: MetricsRelay | null;
  /** A worker's share of the one routing state (null: not a worker of `--workers N`). */
  readonly siblings: Siblings | null;
}

/** One request from its start to its log line: what that line says, and what its handling keeps across its waits. */
class Served {
  /** When it came (performance.now()). */
  readonly started = performance.now();
  /** Its client hung up before its answer was whole. */
  readonly hangup = new Hangup();
  status = 0;
  upstream: string | null = null;
  outcome = "ok";
  matched: number | null = null;
  /** The counters its outcome goes to (a disaggregated request's: those of the pool that answered last); null: the gateway's. */
  counters: GatewayCounters | null = null;
  /** A completion's body, once read. */
  raw: Buffer | null = null;

  constructor(
    /** Its path (the target before any query). */
    readonly path: string,
    /** The completion it asks for (null: another endpoint). */
    readonly kind: "chat" | "completion" | null,
    readonly requestId: string,
  ) {}

  /** Takes a proxied completion's outcome, `matched` tokens of its prompt in the prefix index where it went. */
  answered(r: ProxyOutcome, matched: number): void {
    this.matched = matched;
    this.status = r.status;
    this.upstream = r.upstream.name;
    this.outcome = r.outcome;
  }
}

/** The gateway's request handling and fleet changes. */
export class GatewayService {
  /** The edge's counters (the server's bounds count into them). */
  readonly edge: EdgeCounters = { connections: 0, refusedConnections: 0, passedConnections: 0, readTimeouts: 0, loops: 0, malformed: 0, headersTooLarge: 0, receivingBytes: 0, bodiesRefused: 0 };
  /** The bytes of request bodies being received, both server paths together (limits.max_receiving_bytes; counted in `edge`). */
  readonly receiving: ReceivingBudget;
  /** Responses not yet ended (close() waits for them): a count, not a set (a set's table grew and shrank with every request). */
  answering = 0;
  /** The port it listens on, once it does (the self-check compares upstreams with it). */
  port: number;
  readonly #parts: ServiceParts;
  /** sha256 of each client key. */
  readonly #keyDigests: Buffer[];
  /** This gateway's `Via` entry. */
  readonly #via: string;
  readonly #models: ModelsEndpoint;
  readonly #proxying: ProxyContext;
  readonly #admin: AdminGateway;
  /** The two pools' serving, with `disaggregation:`; null otherwise. */
  readonly #disaggregation: DisaggregatedServing | null;
  /** The configuration the upstreams last came from (the start's, then each reload's or admin change's). */
  #current: GatewayConfig;

  constructor(parts: ServiceParts) {
    const { config, fleet, scheduler, log } = parts;
    this.#parts = parts;
    this.#via = parts.via;
    this.receiving = new ReceivingBudget(config.limits.maxReceivingBytes, this.edge);
    this.#current = config;
    this.port = config.listen.port;
    this.#keyDigests = config.auth.apiKeys.map(digest);
    const clientKeys = this.#keyDigests.length > 0;
    this.#models = new ModelsEndpoint(fleet, clientKeys, Math.min(config.timeouts.firstByteMs, MODELS_TIMEOUT_MS), this.#via);
    this.#proxying = this.#proxyingFor(fleet, scheduler);
    this.#disaggregation = disaggregationOf(parts, this.#proxying, parts.prefill === null ? null : this.#proxyingFor(parts.prefill.fleet, parts.prefill.scheduler));
    this.#admin = {
      fleet,
      current: () => this.#current,
      reloadFleet: (next) => this.reloadFleet(next),
      refuseSelf: (urls) => refuseSelf(urls, config.listen.host, this.port, () => "url"),
      readBody: (req) => readBody(req, config.limits.maxBodyBytes, this.receiving),
      log,
      adminDigest: config.auth.adminApiKey === null ? null : digest(config.auth.adminApiKey.trim()),
    };
  }

  /** What proxying to `fleet`'s upstreams needs. */
  #proxyingFor(fleet: Fleet, scheduler: Scheduler): ProxyContext {
    const { config, log } = this.#parts;
    return { fleet, scheduler, log, timeouts: config.timeouts, clientKeys: config.auth.apiKeys.length > 0, via: this.#via, relearn: (u, call) => this.#relearn(fleet, u, call) };
  }

  /**
   * Serves one request: routes by path, answers every failure OpenAI-style,
   * logs one line. `body`: the body the own server path read (null: node:http's
   * request, its body still to read). What a request needs from its start to
   * its log line is one Served record, not this function's locals: a request
   * waiting on its engine keeps this frame, which stays small.
   */
  async handle(req: EdgeRequest, res: EdgeResponse, body: Buffer | null = null): Promise<void> {
    const served = this.#begin(req, res);
    try {
      // A request that went out through this gateway and came back: one hop, then refused (never an amplification).
      if (isLoop(req, this.#via)) {
        this.edge.loops++;
        throw new HttpError(508, "the request came back to this gateway (an upstream is this gateway, or forwards to it)", "invalid_request_error", "loop_detected");
      }
      const kind = served.kind;
      if (kind !== null) {
        // A completion: read (and tokenized), placed, proxied. Its waits are here rather than in a method of their own,
        // so that a request waiting on its engine keeps one suspended frame.
        const read = this.#read(kind, req, body, served);
        const request = read instanceof Promise ? await read : read;
        if (this.#disaggregation !== null) await this.#disaggregated(this.#disaggregation, kind, req, res, request, served);
        else {
          const tokens = request.tokens.length;
          // Only the prompt's size goes on from here, not its token ids: the scheduler hands them back once placed
          // (a token array held for the whole upstream round trip outlives the young generation; bench:serve).
          const placement = await this.#parts.scheduler.acquire(request, served.hangup);
          const r = await proxy(this.#proxying, { kind, req, res, raw: served.raw!, tokens, requestId: served.requestId, hangup: served.hangup }, placement.upstream, placement.rank);
          served.answered(r, placement.matchedTokens);
        }
      }
      // The own server path takes only the completion routes: every other request is node:http's.
      else if (req instanceof IncomingMessage) Object.assign(served, await this.#serveOther(served.path, req, res as ServerResponse, served.requestId, served.hangup));
      else throw new HttpError(404, `no route for ${req.method} ${served.path.slice(0, 200)}`, "invalid_request_error", "not_found");
    } catch (error) {
      this.#failed(req, res, served, error);
    } finally {
      this.#finished(req, served);
    }
  }

  /** A request's start: its record, its id on the answer, its hang-up when the client leaves first. */
  #begin(req: EdgeRequest, res: EdgeResponse): Served {
    const path = pathOf(req);
    const requestId = requestIdOf(req);
    res.setHeader("x-request-id", requestId);
    const served = new Served(path, path === "/v1/chat/completions" ? "chat" : path === "/v1/completions" ? "completion" : null, requestId);
    this.answering++;
    const hangup = served.hangup;
    res.on("close", () => {
      if (!res.writableFinished) hangup.abort();
      this.answering--;
    });
    return served;
  }

  /** Answers a request's failure OpenAI-style (an HttpError as it says, anything else 500 and logged); a 499 gets no answer. */
  #failed(req: EdgeRequest, res: EdgeResponse, served: Served, error: unknown): void {
    const e = error instanceof HttpError ? error : new HttpError(500, "internal error", "server_error", "internal_error");
    if (!(error instanceof HttpError)) this.#parts.log.error({ err: error, request_id: served.requestId }, "unexpected error");
    served.status = e.status;
    served.outcome = e.code;
    // An answer about an upstream (its timeout, its failure) names it, in the log line as in the header.
    served.upstream ??= e.headers["x-adp-upstream-name"] ?? null;
    if (e.status === 499) return;
    try {
      answerError(req, res, e);
    } catch (failed) {
      // An answer that cannot be written (a header Node refuses) must not become an unhandled rejection.
      this.#parts.log.error({ err: failed, request_id: served.requestId }, "an error answer could not be written");
      res.destroy();
    }
  }

  /** A request's end: a completion's outcome counted, its log line written. */
  #finished(req: EdgeRequest, served: Served): void {
    if (served.kind !== null) this.#count(served);
    // The line's object is made only when it is written (below `info`, a request makes none).
    const log = this.#parts.log;
    if (log.isLevelEnabled("info")) log.info({ method: req.method, path: served.path.slice(0, 200), request_id: served.requestId, status: served.status, upstream: served.upstream, outcome: served.outcome, matched_tokens: served.matched, latency_ms: Math.round((performance.now() - served.started) * 10) / 10 }, "request");
  }

  /**
   * Counts and logs a request whose body never came (its client left, or
   * took past timeouts.request_ms): the own server path reads a body before
   * serving it, where node:http's request would have failed reading it.
   */
  abandoned(req: EdgeRequest): void {
    this.#count({ status: 499, outcome: "client_closed", counters: null });
    const path = pathOf(req);
    this.#parts.log.info({ method: req.method, path: path.slice(0, 200), request_id: requestIdOf(req), status: 499, upstream: null, outcome: "client_closed", matched_tokens: null, latency_ms: null }, "request");
  }

  /**
   * Moves to `next`'s upstreams (SIGHUP, `reload()`, the admin endpoint's
   * additions and removals: one path, so each is the same fleet change, which
   * replication also sees); other settings are named when they need a restart.
   */
  reloadFleet(next: GatewayConfig): FleetChange & { needRestart: string[] } {
    const { config, fleet, log, prefill } = this.#parts;
    // The pools are built at start: a reload moves each to its upstreams, it cannot add, remove or change them.
    const shape = (c: GatewayConfig) => (c.disaggregation === null ? "none" : c.disaggregation.protocol);
    if (shape(next) !== shape(config)) throw new GatewayConfigError([{ field: "disaggregation", message: `changes from ${shape(config)} to ${shape(next)}: the pools are built at start (restart the gateway to change them)`, where: null }]);
    // Each pool moves to its own upstreams (with `disaggregation:`; else the one fleet to all).
    const change = fleet.reload(poolConfig(next, "decode"));
    if (prefill !== null) {
      let more: FleetChange;
      try {
        more = prefill.fleet.reload(poolConfig(next, "prefill"));
      } catch (error) {
        // The prefill pool cannot move (each reload changes nothing when it throws): the decode pool moves back, so the file is refused whole.
        fleet.reload(poolConfig(this.#current, "decode"));
        throw error;
      }
      change.added.push(...more.added);
      change.removed.push(...more.removed);
      change.kept.push(...more.kept);
      change.draining.push(...more.draining);
    }
    this.#current = next;
    logConfigWarnings(log, next.warnings);
    this.#models.prune();
    const text = (v: unknown) => JSON.stringify(v, (_k, x: unknown) => (x instanceof Map ? [...x] : x));
    const needRestart: string[] = (Object.keys(config) as (keyof GatewayConfig)[]).filter((k) => k !== "upstreams" && k !== "warnings" && text(next[k]) !== text(config[k]));
    // An upstream that stays keeps its event source and load scraper as they started.
    const upstreams = prefill === null ? fleet.upstreams : [...prefill.fleet.upstreams, ...fleet.upstreams];
    for (const u of next.upstreams) {
      const kept = upstreams.find((f) => f.url === u.url);
      if (kept === undefined) continue;
      if (text(u.kvEvents) !== text(kept.kvEvents)) needRestart.push(`upstreams[${kept.index}].kv_events`);
      if (text(u.load) !== text(kept.loadConfig)) needRestart.push(`upstreams[${kept.index}].load`);
      // Its phase 2 (its DP ranks' router and their counts) is built once, as its engine view is.
      for (const [key, now, then] of [["dp_ranks", u.dpRanks, kept.dpRanks], ["rank_routing", u.rankRouting, kept.rankRoutingKind], ["attention_dp_config", u.attentionDp, kept.engineAttentionDp], ["bootstrap_port", u.bootstrapPort, kept.bootstrapPort]] as const) {
        if (text(now) !== text(then)) needRestart.push(`upstreams[${kept.index}].${key}`);
      }
    }
    if (needRestart.length > 0) log.warn({ settings: needRestart }, "the reloaded configuration changes settings that take effect on a restart");
    log.info({ added: change.added.length, removed: change.removed.length, kept: change.kept.length, draining: change.draining }, "upstreams reloaded");
    return { ...change, needRestart };
  }

  /** The router's metrics, then the gateway's, as Prometheus text. */
  metrics(): string {
    const { config, fleet, scheduler, counters, reader, replication, prefill, siblings } = this.#parts;
    const pool = (f: Fleet, s: Scheduler, c: GatewayCounters) => formatPrometheus(f.routerMetrics()) + formatGatewayMetrics(f.upstreams, c, s.waiting(), f.state.views, (u) => s.shareOf(u));
    const edge = formatEdgeMetrics(this.edge, config.limits.maxConnections, reader.metricLines("adp_gateway_")) + (replication === null ? "" : formatSyncMetrics(replication)) + (siblings === null ? "" : formatSiblingMetrics(siblings));
    if (prefill === null) return pool(fleet, scheduler, counters) + edge + formatBounds([...this.#poolBounds(fleet, scheduler), ...this.#edgeBounds()]);
    // Two pools: each sample labelled with its pool, each family's HELP and TYPE once.
    return mergeLabelled([
      { label: 'pool="prefill"', text: pool(prefill.fleet, prefill.scheduler, prefill.counters) + formatBounds(this.#poolBounds(prefill.fleet, prefill.scheduler)) },
      { label: 'pool="decode"', text: pool(fleet, scheduler, counters) + formatBounds(this.#poolBounds(fleet, scheduler)) },
      { label: null, text: edge + formatBounds(this.#edgeBounds()) },
    ]);
  }

  /** The `/metrics` page: this process's, or with workers every worker's, each sample labelled with its worker. */
  async #scrape(): Promise<string> {
    const relay = this.#parts.workerMetrics;
    if (relay === null) return this.metrics();
    const pages = await relay.pages();
    return mergeLabelled(pages.map((p) => ({ label: `worker="${p.worker}"`, text: p.text })));
  }

  /** The bounds of the client edge and replication (see bounds.ts). */
  #edgeBounds(): Bound[] {
    const { config, replication } = this.#parts;
    const bounds: Bound[] = [
      { bound: "client_connections", limit: config.limits.maxConnections, used: this.edge.connections },
      { bound: "receiving_body_bytes", limit: config.limits.maxReceivingBytes, used: this.edge.receivingBytes },
    ];
    return replication === null ? bounds : [...bounds, ...replication.bounds()];
  }

  /** Each bound on what input can make one pool hold, and its use (see bounds.ts). */
  #poolBounds(fleet: Fleet, scheduler: Scheduler): Bound[] {
    const { config } = this.#parts;
    const budget = config.routing.indexBytes;
    const bounds: Bound[] = [];
    const learned = fleet.state.router.prefixIndex;
    if (learned !== null) bounds.push(indexBound("learned_index_bytes", learned, budget));
    for (const u of fleet.upstreams) {
      const view = fleet.state.views?.view(u.index) ?? null;
      // Each KV-cache group of a hybrid model has the budget of its own.
      if (view !== null) bounds.push(indexBound("engine_view_bytes", view, budget * Math.max(1, view.groups.length), `upstream="${label(u)}"`));
    }
    const conversations = fleet.state.router.metrics().conversations;
    if (conversations !== undefined) bounds.push({ bound: "conversations", limit: conversations.maxSessions, used: conversations.tracked });
    bounds.push({ bound: "queued_requests", limit: config.limits.queueSize, used: scheduler.waiting() });
    return bounds;
  }

  /** Whether the request carries one of the client keys (constant-time comparison). */
  #authorized(req: EdgeRequest): boolean {
    return this.#keyDigests.length === 0 || bearerIn(req, this.#keyDigests);
  }

  /** Counts a completion request's outcome and status. */
  #count(served: Pick<Served, "status" | "outcome" | "counters">): void {
    const { requests, codes } = served.counters ?? this.#parts.counters;
    requests.set(served.outcome, (requests.get(served.outcome) ?? 0) + 1);
    if (served.status >= 100 && served.status <= 599) codes.set(served.status, (codes.get(served.status) ?? 0) + 1);
  }

  /**
   * A completion request's body and what the reader made of it: at once on the
   * own server path with a reader in this thread, else a promise; refused
   * (thrown) when not a POST or not authorized.
   */
  #read(kind: "chat" | "completion", req: EdgeRequest, body: Buffer | null, served: Served): RoutedRequest | Promise<RoutedRequest> {
    if (body === null) return this.#readIncoming(kind, req as IncomingMessage, served);
    this.#admit(kind, req);
    return this.#readRaw(kind, req, body, served);
  }

  /**
   * node:http's completion request: refused or its body read, in a promise. A
   * refusal is then answered after node:http's 'request' event returned: answered
   * inside it, on a connection the own server path handed over with the body in
   * the same read, node:http has not yet marked the body read and closes the
   * connection, leaving a request pipelined behind it unanswered.
   */
  async #readIncoming(kind: "chat" | "completion", req: IncomingMessage, served: Served): Promise<RoutedRequest> {
    this.#admit(kind, req);
    return this.#readRaw(kind, req, await readBody(req, this.#parts.config.limits.maxBodyBytes, this.receiving), served);
  }

  /** What the reader makes of a completion's body `raw` (kept in `served`): at once with a reader in this thread, else a promise. */
  #readRaw(kind: "chat" | "completion", req: EdgeRequest, raw: Buffer, served: Served): RoutedRequest | Promise<RoutedRequest> {
    const { reader } = this.#parts;
    served.raw = raw;
    return reader.readNow !== undefined ? reader.readNow(kind, raw, req.headers) : reader.read(kind, raw, req.headers, served.hangup);
  }

  /** Refuses a completion request that is not a POST (405) or carries no client key (401). */
  #admit(kind: "chat" | "completion", req: EdgeRequest): void {
    if (req.method !== "POST") throw onlyMethod(kind === "chat" ? "/v1/chat/completions" : "/v1/completions", "POST");
    if (!this.#authorized(req)) throw unauthorized();
  }

  /** Serves a disaggregated completion request (its phases on the two pools); what happened goes in `served`. */
  async #disaggregated(d: DisaggregatedServing, kind: "chat" | "completion", req: EdgeRequest, res: EdgeResponse, request: RoutedRequest, served: Served): Promise<void> {
    const { requestId, hangup, raw } = served;
    // A failure thrown is counted in the pool its phase ran on.
    const done = await d.serve({ kind, req, res, raw: raw!, tokens: request.tokens.length, requestId, hangup, request }, (pool) => (served.counters = pool.counters));
    served.status = done.status;
    served.upstream = done.upstream;
    served.outcome = done.outcome;
    served.matched = done.matched;
    served.counters = done.pool.counters;
  }

  /** Serves the other endpoints. */
  async #serveOther(path: string, req: IncomingMessage, res: ServerResponse, requestId: string, hangup: Hangup): Promise<Pick<Served, "status" | "upstream" | "outcome" | "matched">> {
    const { config, fleet, replication } = this.#parts;
    const ok = (status: number, upstream: string | null = null) => ({ status, upstream, outcome: "ok", matched: null });
    if (path.startsWith("/admin/")) return ok(await adminRoute(this.#admin, req, res, path, (req.url ?? "").slice(path.length + 1)));
    if (path === "/v1/models") {
      if (req.method !== "GET") throw onlyMethod(path, "GET");
      if (!this.#authorized(req)) throw unauthorized();
      const m = await this.#models.answer(req, res, requestId, hangup);
      return ok(m.status, m.upstream.name);
    }
    if (path !== "/health" && path !== "/metrics" && !(path === "/sync/state" && replication !== null)) throw new HttpError(404, `no route for ${req.method} ${path.slice(0, 200)}`, "invalid_request_error", "not_found");
    if (req.method !== "GET") throw onlyMethod(path, "GET");
    const open = path === "/health" ? !config.auth.protectHealth : !config.auth.protectMetrics;
    if (!open && !this.#authorized(req)) throw unauthorized();
    if (path === "/health") return ok(health(res, this.#parts.prefill === null ? [fleet] : [this.#parts.prefill.fleet, fleet], replication, this.#parts.workerMetrics?.worker ?? null));
    const [type, body] = path === "/metrics" ? ["text/plain; version=0.0.4", await this.#scrape()] : ["application/json", JSON.stringify(replication!.state())];
    res.writeHead(200, { "content-type": type }).end(body);
    return ok(200);
  }

  /**
   * Teaches `u`'s view a prompt retried onto it: read again from the body (the
   * same ids: tokenizers are deterministic) rather than held by every request
   * for this rare path.
   */
  #relearn(fleet: Fleet, u: Upstream, call: ProxyCall): void {
    const { reader } = this.#parts;
    if (fleet.router.prefixIndex === null) return;
    reader.read(call.kind, call.raw, call.req.headers).then(
      (again) => {
        if (fleet.upstreams[u.index] === u) fleet.state.learn(u.index, again.tokens, { loraTaskId: again.loraTaskId, cacheSalt: again.cacheSalt });
        reader.release(again.tokens);
      },
      () => {},
    );
  }
}

/** A request's path: its target before any query. */
function pathOf(req: EdgeRequest): string {
  const url = req.url ?? "/";
  const query = url.indexOf("?");
  return query < 0 ? url : url.slice(0, query);
}

/** The two pools' serving when the parts have a prefill pool, else null. */
function disaggregationOf(parts: ServiceParts, decode: ProxyContext, prefill: ProxyContext | null): DisaggregatedServing | null {
  const d = parts.config.disaggregation;
  if (d === null || parts.prefill === null || prefill === null) return null;
  const pool = (role: "prefill" | "decode", p: { fleet: Fleet; scheduler: Scheduler; counters: GatewayCounters }, proxying: ProxyContext) => ({ role, ...p, proxying, accountForInTransfer: d[role].attentionDp.kvCacheRoutingAccountForInTransfer });
  return new DisaggregatedServing(d, pool("prefill", parts.prefill, prefill), pool("decode", parts, decode), (ids) => parts.reader.release(ids), parts.config.auth.internalRequestAuthKey);
}

/**
 * The `/health` answer: 200 while at least one upstream takes requests (it
 * routes), with `status: "degraded"` and `sync.problem` while a replica cannot
 * sync (its routing state drifts from the others'; the orchestrator alerts on
 * the field, and does not take every replica out when NATS is away); 503 with
 * no upstream. Under `--workers`, `worker` names the worker that answered
 * (each holds its own view of the upstreams' health and in-flight requests).
 */
function health(res: ServerResponse, fleets: readonly Fleet[], replication: Replication | null, worker: number | null): number {
  // Each pool must take requests: a disaggregated gateway without prefill (or decode) servers serves nothing.
  const ok = fleets.every((fleet) => fleet.upstreams.some((u) => fleet.available(u)));
  const pooled = fleets.length > 1;
  const problem = replication?.problem ?? null;
  const body = {
    status: !ok ? "unavailable" : problem !== null ? "degraded" : "ok",
    ...(worker === null ? {} : { worker }),
    upstreams: fleets.flatMap((fleet, f) => fleet.upstreams.map((u) => ({ index: u.index, name: u.name, ...(pooled ? { pool: f === 0 ? "prefill" : "decode" } : {}), healthy: u.healthy, ...(u.health.cause === null ? {} : { ejected: u.health.cause }), draining: u.draining, in_flight: u.inFlight }))),
    ...(replication === null ? {} : { sync: { synced: replication.synced, connected: replication.connected, pending: replication.pending, applied: replication.applied, ...(problem === null ? {} : { problem }) } }),
  };
  res.writeHead(ok ? 200 : 503, { "content-type": "application/json" }).end(JSON.stringify(body));
  return ok ? 200 : 503;
}
