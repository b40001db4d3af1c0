// Whether the upstreams can be reached at all, asked once when the gateway starts:
// a TCP connection to each (name resolved, port open) within a deadline. An
// engine that answers its health check with 503 while it loads a model is
// reachable; a typo in a host name, a wrong port or a stopped engine is not,
// and `adp-router serve` says so before it listens (health.on_start: require).

import { connect } from "node:net";
import type { GatewayConfig } from "./config-types.js";

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
  return unreachableUpstreams(config.upstreams.map((u) => u.url), Math.min(config.timeouts.connectMs, 5_000));
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
