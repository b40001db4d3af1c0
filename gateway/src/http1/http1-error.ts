// The errors of the gateway's own HTTP/1.1 client, by code: what
// fleet/upstream-errors.ts turns into an exchange's reason.

/** A failure of an upstream connection or answer: `code` says which (ADP_UPSTREAM_CLOSED, ADP_ANSWER_INVALID, ...). */
export class Http1Error extends Error {
  constructor(
    readonly code: "ADP_UPSTREAM_CLOSED" | "ADP_ANSWER_INVALID" | "ADP_REQUEST_INVALID" | "ADP_POOL_CLOSED" | "UND_ERR_CONNECT_TIMEOUT",
    message: string,
  ) {
    super(message);
    this.name = "Http1Error";
  }
}
