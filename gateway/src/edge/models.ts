// `GET /v1/models`: asked of a healthy upstream (the next one when it cannot
// be reached), each answer reused for a few seconds per client credential.

import type { IncomingMessage, ServerResponse } from "node:http";
import { digest } from "./admin.js";
import { viaFor } from "../requests/via.js";
import { reasonOf } from "../fleet/upstream-errors.js";
import type { Fleet } from "../fleet/fleet.js";
import { HttpError } from "../requests/openai.js";
import type { Hangup } from "../fleet/hangup.js";
import type { Upstream } from "../fleet/upstream.js";
import { namingUpstream } from "../proxy/proxy.js";
import { AnswerTooLargeError, controlRequest } from "../http1/control-request.js";

/** How long `/v1/models` answers are reused. */
const MODELS_TTL_MS = 5_000;
/** Most answers kept (one per client credential seen within the TTL). */
const MODELS_CACHE_ENTRIES = 256;
/** The largest answer taken (a model list is kilobytes; past this it is not one): 502 past it. */
const MODELS_MAX_BYTES = 1 << 20;

/** A cached answer. */
interface CachedModels {
  readonly at: number;
  readonly status: number;
  readonly body: Buffer;
  readonly type: string;
  readonly upstream: Upstream;
}

/**
 * The `/v1/models` endpoint. Answers are kept by the credential they were
 * fetched with: "" for the gateway's own (an upstream's key, or none), else
 * the sha256 of the client's Authorization (sent on when clients do not
 * authenticate to the gateway), so a client only ever gets an answer its own
 * key could have fetched. At most {@link MODELS_CACHE_ENTRIES}, the oldest
 * dropped first.
 */
export class ModelsEndpoint {
  readonly #cache = new Map<string, CachedModels>();
  readonly #fleet: Fleet;
  /** Whether clients authenticate to the gateway (their key then is never sent on). */
  readonly #clientKeys: boolean;
  /** How long an upstream may take to answer. */
  readonly #timeoutMs: number;
  /** The gateway's `Via` entry: a /v1/models that loops back to the gateway is one hop, then 508. */
  readonly #via: string;
  /** The clock (ms), injectable for tests. */
  readonly #now: () => number;

  constructor(fleet: Fleet, clientKeys: boolean, timeoutMs: number, via: string, now: () => number = Date.now) {
    this.#fleet = fleet;
    this.#clientKeys = clientKeys;
    this.#timeoutMs = timeoutMs;
    this.#via = via;
    this.#now = now;
  }

  /** Forgets answers of upstreams no longer in the fleet. */
  prune(): void {
    for (const [key, entry] of this.#cache) if (!this.#fleet.upstreams.includes(entry.upstream)) this.#cache.delete(key);
  }

  /** Answers the request (its client's hang-up aborts the upstream's); resolves with the status and the upstream it came from. */
  async answer(req: IncomingMessage, res: ServerResponse, requestId: string, hangup: Hangup): Promise<{ status: number; upstream: Upstream }> {
    const auth = this.#clientKeys ? undefined : req.headers.authorization;
    const credential = auth === undefined ? "" : digest(auth).toString("hex");
    const cached = this.#cache.get(credential) ?? (credential === "" ? undefined : this.#cache.get(""));
    if (cached !== undefined && this.#now() - cached.at < MODELS_TTL_MS) {
      res.writeHead(cached.status, this.#headers(cached.type, cached.upstream, requestId)).end(cached.body);
      return { status: cached.status, upstream: cached.upstream };
    }
    const candidates = this.#fleet.upstreams.filter((x) => this.#fleet.available(x));
    if (candidates.length === 0) throw new HttpError(503, "no healthy upstream", "server_error", "no_healthy_upstream", { "retry-after": "1" });
    for (const [i, u] of candidates.entries()) {
      // The upstream's key; else the client's, when it is meant for the engines (no client keys
      // here), and then the answer is that client's alone.
      const clientAuth = u.apiKey === null ? auth : undefined;
      try {
        const headers = { "x-request-id": requestId, via: viaFor(req, this.#via), ...(u.apiKey ? { authorization: `Bearer ${u.apiKey}` } : clientAuth ? { authorization: clientAuth } : {}) };
        const left = new AbortController();
        const onHangup = () => left.abort(new HttpError(499, "the client closed the request"));
        hangup.once("abort", onHangup);
        let response;
        try {
          response = await controlRequest(u.control, { path: `${u.basePath}/v1/models`, method: "GET", headers, signal: AbortSignal.any([left.signal, AbortSignal.timeout(this.#timeoutMs)]), maxBytes: MODELS_MAX_BYTES });
        } finally {
          hangup.off("abort", onHangup);
        }
        const body = response.body;
        const type = String(response.headers["content-type"] ?? "application/json");
        if (response.statusCode < 400) this.#keep(clientAuth === undefined ? "" : credential, { at: this.#now(), status: response.statusCode, body, type, upstream: u });
        res.writeHead(response.statusCode, this.#headers(type, u, requestId)).end(body);
        return { status: response.statusCode, upstream: u };
      } catch (error) {
        if (hangup.aborted) throw new HttpError(499, "the client closed the request");
        if (error instanceof HttpError) throw error;
        if (error instanceof AnswerTooLargeError) throw new HttpError(502, `the upstream's model list is over ${MODELS_MAX_BYTES} bytes`, "server_error", "upstream_error");
        const reason = reasonOf(error);
        this.#fleet.gatewayFailure(u, reason);
        const at = namingUpstream(u);
        if (reason === "timeout") throw new HttpError(504, "the upstream did not answer in time", "server_error", "upstream_timeout", at);
        // Never reached: ask the next one.
        if ((reason === "refused" || reason === "connect_timeout" || reason === "dns" || reason === "unreachable") && i + 1 < candidates.length) continue;
        throw new HttpError(502, `the upstream failed (${reason})`, "server_error", "upstream_error", at);
      }
    }
    throw new HttpError(503, "no healthy upstream", "server_error", "no_healthy_upstream", { "retry-after": "1" });
  }

  /** The answer's headers. */
  #headers(type: string, u: Upstream, requestId: string): Record<string, string> {
    return { "content-type": type, ...namingUpstream(u), "x-request-id": requestId };
  }

  /** Keeps an answer, dropping the oldest past the bound. */
  #keep(key: string, entry: CachedModels): void {
    this.#cache.delete(key);
    if (this.#cache.size >= MODELS_CACHE_ENTRIES) this.#cache.delete(this.#cache.keys().next().value!);
    this.#cache.set(key, entry);
  }
}
