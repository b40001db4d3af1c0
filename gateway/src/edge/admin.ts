// The gateway's admin endpoints (off unless an admin key is configured) and the
// constant-time key checks every protected endpoint uses. The endpoints change
// the fleet through the gateway's one reload path, so an upstream added or
// removed here is the same fleet change as a SIGHUP reload (and replication
// sees it the same way).

import type { IncomingMessage, ServerResponse } from "node:http";
import { createHash, timingSafeEqual } from "node:crypto";
import type { Logger } from "pino";
import { checkUpstreamEntry, GatewayConfigError, logConfigWarnings, withUpstreams, type GatewayConfig } from "../config/config.js";
import type { Fleet, FleetChange } from "../fleet/fleet.js";
import { HttpError, parseJsonObject } from "../requests/openai.js";
import { unreachableNow } from "../fleet/reachability.js";
import type { EdgeRequest } from "../http1/edge-types.js";

/** sha256 of a key, so comparisons take constant time whatever the lengths. */
export const digest = (key: string): Buffer => createHash("sha256").update(key).digest();

/** Whether the request's bearer token is one of the keys of `digests` (compared in constant time, against every one). */
export function bearerIn(req: EdgeRequest, digests: readonly Buffer[]): boolean {
  const match = /^Bearer\s+(.+)$/i.exec(req.headers.authorization ?? "");
  if (!match) return false;
  const got = digest(match[1]!.trim());
  let ok = false;
  for (const d of digests) ok = timingSafeEqual(got, d) || ok;
  return ok;
}

/** What the admin endpoints need of a running gateway. */
export interface AdminGateway {
  readonly fleet: Fleet;
  /** The configuration now in force (changed by every reload). */
  readonly current: () => GatewayConfig;
  /** Moves the gateway to `next`'s upstreams (the SIGHUP path). */
  readonly reloadFleet: (next: GatewayConfig) => FleetChange & { needRestart: string[] };
  /** Throws a GatewayConfigError when one of `urls` is the gateway itself (its own listen address, or a name for it). */
  readonly refuseSelf: (urls: readonly string[]) => Promise<void>;
  /** Reads a request body within the configured limit. */
  readonly readBody: (req: IncomingMessage) => Promise<Buffer>;
  readonly log: Logger;
  /** sha256 of the admin key; null: the endpoints are off. */
  readonly adminDigest: Buffer | null;
}

/**
 * The admin endpoints, off (404) unless an admin key is configured:
 * `GET /admin/upstreams`, `POST /admin/upstreams` (adds one: `{"url", "name"?,
 * "api_key"?, "drain"?}`, checked as the file's entries; 201 with its index),
 * `DELETE /admin/upstreams/{index}?url=URL` (removes it: its cache view and
 * conversations are dropped, its in-flight requests finish; `url`, when given,
 * must be that upstream's, so a retried call cannot remove the one that took its
 * index), and `POST /admin/upstreams/{index}/drain` and `/undrain`. An added
 * upstream cannot name an environment variable for its key, nor subscribe to
 * events or scrape load: the admin key must not reach the gateway's environment
 * or open connections the file did not configure.
 */
export async function adminRoute(gateway: AdminGateway, req: IncomingMessage, res: ServerResponse, path: string, query = ""): Promise<number> {
  const { fleet, reloadFleet, readBody, log, adminDigest } = gateway;
  if (adminDigest === null) throw new HttpError(404, `no route for ${req.method} ${path.slice(0, 200)}`, "invalid_request_error", "not_found");
  if (!bearerIn(req, [adminDigest])) throw new HttpError(401, "a valid admin key is required", "invalid_request_error", "invalid_api_key");
  const list = () => fleet.upstreams.map((u) => ({ index: u.index, name: u.name, url: u.url, healthy: u.healthy, draining: u.draining, in_flight: u.inFlight }));
  const answer = (status: number, body: object) => {
    res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    return status;
  };
  if (path === "/admin/upstreams") {
    if (req.method === "GET") return answer(200, { upstreams: list() });
    if (req.method !== "POST") throw new HttpError(405, `${path} takes GET or POST`, "invalid_request_error", "method_not_allowed", { allow: "GET, POST" });
    const body = parseJsonObject(await readBody(req), 'the body must be an upstream: {"url": "http://…", "name"?, "api_key"?}');
    for (const field of ["api_key_env", "kv_events", "load"]) {
      if (body[field] !== undefined) throw new HttpError(400, `${field}: not accepted here (set it in the configuration file and reload)`, "invalid_request_error", "invalid_value", {}, field);
    }
    let entry;
    try {
      entry = checkUpstreamEntry(body, {});
    } catch (error) {
      if (!(error instanceof GatewayConfigError)) throw error;
      const first = error.issues[0];
      throw new HttpError(400, error.issues.map((i) => `${i.field}: ${i.message}`).join("; "), "invalid_request_error", first?.message === "is required" ? "missing_field" : "invalid_value", {}, first?.field.replace(/^upstream\.?/, "") || null);
    }
    // Before the fleet is read: the check awaits name resolution, and the fleet must be read after every wait.
    try {
      await gateway.refuseSelf([entry.url]);
    } catch (error) {
      if (!(error instanceof GatewayConfigError)) throw error;
      throw new HttpError(400, `url: ${error.issues[0]?.message ?? "is this gateway"}`, "invalid_request_error", "upstream_is_self", {}, "url");
    }
    logConfigWarnings(log, entry.warnings);
    // Tried first, as a reload tries the upstreams it adds: one nobody can connect to joins unhealthy until its checks pass.
    const [unreachable] = await unreachableNow([entry.url], gateway.current().timeouts);
    // The fleet as it is now, after the body's wait: another call or a reload may have changed it meanwhile.
    const current = gateway.current();
    if (current.upstreams.some((u) => u.url === entry.url)) throw new HttpError(409, `${entry.url} is already upstream ${current.upstreams.findIndex((u) => u.url === entry.url)}`, "invalid_request_error", "upstream_exists");
    const { warnings: _warnings, ...upstream } = entry;
    try {
      reloadFleet(withUpstreams(current, [...current.upstreams, upstream]));
    } catch (error) {
      throw new HttpError(409, `the upstream cannot be added: ${(error as Error).message}`, "invalid_request_error", "conflict");
    }
    const index = fleet.upstreams.length - 1;
    if (unreachable !== undefined) {
      fleet.upstreams[index]!.health.startOut();
      log.warn({ upstream: entry.name, index, reason: unreachable.reason }, "upstream added through the admin endpoint is unreachable: unhealthy until its health checks pass");
    } else log.info({ upstream: entry.name, index }, "upstream added through the admin endpoint");
    return answer(201, { index, upstreams: list(), ...(unreachable === undefined ? {} : { unreachable: unreachable.reason }) });
  }
  const one = /^\/admin\/upstreams\/(\d{1,6})$/.exec(path);
  if (one) {
    if (req.method !== "DELETE") throw new HttpError(405, `${path} takes DELETE`, "invalid_request_error", "method_not_allowed", { allow: "DELETE" });
    const index = Number(one[1]);
    const current = gateway.current();
    const gone = current.upstreams[index];
    if (gone === undefined) throw new HttpError(404, `no upstream ${index}`, "invalid_request_error", "not_found");
    const expected = new URLSearchParams(query).get("url");
    if (expected !== null && expected !== gone.url) throw new HttpError(409, `upstream ${index} is ${gone.url}, not ${expected.slice(0, 200)}`, "invalid_request_error", "upstream_mismatch");
    if (current.upstreams.length === 1) throw new HttpError(409, "the last upstream cannot be removed (add another first)", "invalid_request_error", "last_upstream");
    try {
      reloadFleet(withUpstreams(current, current.upstreams.filter((_, i) => i !== index)));
    } catch (error) {
      throw new HttpError(409, `the upstream cannot be removed: ${(error as Error).message}`, "invalid_request_error", "conflict");
    }
    log.info({ upstream: gone.name, index }, "upstream removed through the admin endpoint");
    return answer(200, { removed: { index, url: gone.url, name: gone.name }, upstreams: list() });
  }
  const drain = /^\/admin\/upstreams\/(\d{1,6})\/(drain|undrain)$/.exec(path);
  if (drain) {
    if (req.method !== "POST") throw new HttpError(405, `${path} takes POST`, "invalid_request_error", "method_not_allowed", { allow: "POST" });
    const u = fleet.drain(Number(drain[1]), drain[2] === "drain");
    if (u === null) throw new HttpError(404, `no upstream ${drain[1]}`, "invalid_request_error", "not_found");
    return answer(200, { upstreams: list() });
  }
  throw new HttpError(404, `no route for ${req.method} ${path.slice(0, 200)}`, "invalid_request_error", "not_found");
}
