// Why an exchange with an upstream ended without a whole answer, in words for
// logs, metrics and error codes: the proxy's exchanges (proxy/exchange.ts),
// the health checks and /v1/models all name their failures the same way.

/** Why an exchange ended without a whole answer, in words for logs, metrics and error codes. */
export type ExchangeReason =
  | "refused"
  | "connect_timeout"
  | "dns"
  | "unreachable"
  | "reset"
  | "closed"
  | "first_byte_timeout"
  | "idle_timeout"
  | "client_stalled"
  | "max_duration"
  | "invalid_answer"
  | "client_closed"
  | "error";

/** undici's, the gateway's own HTTP/1.1 client's (http1/) and the system's error codes, as reasons. */
export const REASONS: Readonly<Record<string, ExchangeReason>> = {
  ECONNREFUSED: "refused",
  UND_ERR_CONNECT_TIMEOUT: "connect_timeout",
  ETIMEDOUT: "connect_timeout",
  ENOTFOUND: "dns",
  EAI_AGAIN: "dns",
  EHOSTUNREACH: "unreachable",
  ENETUNREACH: "unreachable",
  ECONNRESET: "reset",
  EPIPE: "reset",
  UND_ERR_SOCKET: "closed",
  UND_ERR_CLOSED: "closed",
  ADP_UPSTREAM_CLOSED: "closed",
  ADP_POOL_CLOSED: "closed",
  ADP_ANSWER_INVALID: "invalid_answer",
};

/** An exchange that failed: why, and whether the upstream may have received the request. */
export class ExchangeError extends Error {
  readonly code = "ERR_ADP_EXCHANGE";
  constructor(
    readonly reason: ExchangeReason,
    /** False only when no byte of the request was written: then, and only then, it may go to another upstream. */
    readonly delivered: boolean,
    options?: { cause?: unknown },
  ) {
    super(`the exchange with the upstream failed: ${reason}`, options);
    this.name = "ExchangeError";
  }
}

/** A reason in words for any error (health checks and /v1/models use it too): `timeout`, `refused`, `reset`, ... */
export function reasonOf(error: unknown, depth = 0): ExchangeReason | "timeout" {
  if (error instanceof ExchangeError) return error.reason;
  const e = error as { code?: unknown; name?: unknown; cause?: unknown } | null;
  // AbortSignal.timeout() aborts with a DOMException named TimeoutError (its numeric code, 23, is no reason).
  if (e?.name === "TimeoutError" || e?.code === "UND_ERR_HEADERS_TIMEOUT" || e?.code === "UND_ERR_BODY_TIMEOUT") return "timeout";
  const known = typeof e?.code === "string" ? REASONS[e.code] : undefined;
  if (known !== undefined) return known;
  return e?.cause !== undefined && e.cause !== error && depth < 4 ? reasonOf(e.cause, depth + 1) : "error";
}
