// Whether the upstreams can be reached at all, asked once when the gateway starts:
// a TCP connection to each (name resolved, port open) within a deadline. An
// engine that answers its health check with 503 while it loads a model is
// reachable; a typo in a host name, a wrong port or a stopped engine is not,
// and `adp-router-gateway serve` says so before it listens (health.on_start: require).

import { lookup } from "node:dns/promises";
import { connect, isIP } from "node:net";
import { networkInterfaces } from "node:os";
import type { GatewayConfig } from "../config/config-types.js";
import { GatewayConfigError } from "../config/config.js";

/** An upstream that could not be reached, and why. */
export interface Unreachable {
  /** Its index in the configured list. */
  readonly index: number;
  readonly url: string;
  /** The reason in words, with the system's error code. */
  readonly reason: string;
}

/** Words for the connection errors users meet. */
const REASONS: Readonly<Record<string, string>> = {
  ECONNREFUSED: "connection refused (nothing listens on that port)",
  ENOTFOUND: "host name not found",
  EAI_AGAIN: "host name could not be resolved (DNS did not answer)",
  EHOSTUNREACH: "host unreachable",
  ENETUNREACH: "network unreachable",
  ECONNRESET: "connection reset",
};

/** The port an http(s) URL connects to. */
const portOf = (url: URL) => (url.port !== "" ? Number(url.port) : url.protocol === "https:" ? 443 : 80);

/** Tries one TCP connection to `url`'s host and port; resolves with null when it opened, else the reason. */
function tryConnect(url: URL, timeoutMs: number): Promise<string | null> {
  return new Promise((resolve) => {
    // URL keeps an IPv6 host in brackets; the socket wants it bare.
    const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
    const socket = connect({ host, port: portOf(url) });
    const done = (reason: string | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reason);
    };
    const timer = setTimeout(() => done(`no connection within ${timeoutMs} ms`), timeoutMs);
    socket.once("connect", () => done(null));
    socket.once("error", (error: NodeJS.ErrnoException) => done(`${REASONS[error.code ?? ""] ?? error.message}${error.code ? ` (${error.code})` : ""}`));
  });
}

/** The upstreams of `config` that cannot be reached when the gateway starts: each tried within its connect timeout, at most 5 s. */
export function unreachableAtStart(config: Pick<GatewayConfig, "upstreams" | "timeouts">): Promise<Unreachable[]> {
  return unreachableNow(config.upstreams.map((u) => u.url), config.timeouts);
}

/** The upstreams among `urls` nobody can connect to now, each tried within the connect timeout (5 s at most): at start, and those a reload or the admin API adds. */
export function unreachableNow(urls: readonly string[], timeouts: GatewayConfig["timeouts"]): Promise<Unreachable[]> {
  return unreachableUpstreams(urls, Math.min(timeouts.connectMs, 5_000));
}

/** The upstreams among `urls` that cannot be reached within `timeoutMs` each, tried together. */
export async function unreachableUpstreams(urls: readonly string[], timeoutMs: number): Promise<Unreachable[]> {
  const reasons = await Promise.all(urls.map((url) => tryConnect(new URL(url), timeoutMs)));
  return reasons.flatMap((reason, index) => (reason === null ? [] : [{ index, url: urls[index]!, reason }]));
}

/**
 * Whether nothing listens at `url` any more: a TCP connection is refused
 * within `timeoutMs`. After a connection broke before any answer, this tells
 * an engine process that is gone (it cannot be running the request, so the
 * request may go elsewhere) from one that is alive (it may have started it).
 */
export async function connectionRefused(url: string, timeoutMs: number): Promise<boolean> {
  const reason = await tryConnect(new URL(url), timeoutMs);
  return reason !== null && reason.endsWith("(ECONNREFUSED)");
}

/**
 * An address as one form: lower-case, without brackets; IPv4-mapped IPv6 as
 * its IPv4, written dotted (`::ffff:1.2.3.4`) or in hex as URL rewrites it
 * (`::ffff:7f00:1`); the unspecified addresses as the loopback ones a
 * connection to them reaches (Linux connects `0.0.0.0` to 127.0.0.1, `::` to ::1).
 */
function canonical(address: string): string {
  const a = address.toLowerCase().replace(/^\[|\]$/g, "");
  if (a === "0.0.0.0") return "127.0.0.1";
  if (a === "::" || a === "0:0:0:0:0:0:0:0") return "::1";
  const hex = /^(?:0{0,4}:){0,5}:?ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(a);
  if (hex !== null) {
    const [hi, lo] = [parseInt(hex[1]!, 16), parseInt(hex[2]!, 16)];
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  return a.startsWith("::ffff:") && a.includes(".") ? a.slice(7) : a;
}

/**
 * The addresses a socket listening on `host` accepts connections to: a
 * wildcard (`0.0.0.0`, `::`) takes every local address, loopback's whole
 * 127.0.0.0/8 included (tested by `isLocal`); any other address only itself.
 */
async function listeningOn(host: string): Promise<(address: string) => boolean> {
  const h = host.toLowerCase().replace(/^\[|\]$/g, "");
  if (h === "0.0.0.0" || h === "::" || h === "") {
    const local = new Set<string>(["::1"]);
    for (const list of Object.values(networkInterfaces())) for (const i of list ?? []) local.add(canonical(i.address));
    // `0.0.0.0` takes IPv4 only; `::` takes IPv6 and (dual-stack, as Node opens it) IPv4 too.
    return (a) => (h === "0.0.0.0" && a.includes(":") ? false : local.has(a) || a.startsWith("127."));
  }
  const own = new Set((await lookup(h, { all: true }).catch(() => [{ address: h }])).map((r) => canonical(r.address)));
  return (a) => own.has(a);
}

/**
 * The upstreams among `urls` that are this gateway itself: their host
 * resolves to an address the listening socket (`host`, `port`) accepts and
 * their port is its port. Names that do not resolve within `timeoutMs` are
 * not counted (the reachability check reports them).
 */
export async function pointsAtSelf(urls: readonly string[], host: string, port: number, timeoutMs = 2_000): Promise<{ index: number; url: string; address: string }[]> {
  const accepts = await listeningOn(host);
  const found: { index: number; url: string; address: string }[] = [];
  await Promise.all(
    urls.map(async (text, index) => {
      const url = new URL(text);
      if (portOf(url) !== port) return;
      const name = canonical(url.hostname);
      const addresses = isIP(name) !== 0 ? [name] : await Promise.race([lookup(name, { all: true }).then((r) => r.map((x) => canonical(x.address))), new Promise<string[]>((r) => setTimeout(() => r([]), timeoutMs).unref())]).catch(() => []);
      const self = addresses.find(accepts);
      if (self !== undefined) found.push({ index, url: text, address: self });
    }),
  );
  return found.sort((a, b) => a.index - b.index);
}

/** Throws a GatewayConfigError when an upstream of `urls` is the gateway listening on `host`:`port` (resolving names); `field` names the i-th. */
export async function refuseSelf(urls: readonly string[], host: string, port: number, field: (i: number) => string = (i) => `upstreams[${i}].url`): Promise<void> {
  const self = await pointsAtSelf(urls, host, port);
  if (self.length > 0) throw new GatewayConfigError(self.map((s) => ({ field: field(s.index), message: `is this gateway itself (${s.address}:${port}, where it listens): every request would loop back to it`, where: null })));
}
