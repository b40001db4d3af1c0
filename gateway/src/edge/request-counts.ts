// limits.max_requests_per_connection on node:http's server path, counted
// here rather than by node:http: its own count (`maxRequestsPerSocket`)
// skips HTTP/1.0 requests (a keep-alive HTTP/1.0 client, such as `ab -k`, was
// never sent away), starts again when the own server path hands it a
// connection, and on Node 20 says close in the last answer without closing.
// The last answer here carries `Connection: close`, which node:http honours
// by closing the connection once it is written; a request sent ahead of it is
// never served (refused 503, which node:http drops with the connection).

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { HttpError } from "../requests/openai.js";

/** Requests each node:http connection served, against limits.max_requests_per_connection. */
export class RequestCounts {
  /** Requests a connection served so far (the own path's too, when it handed it over). */
  readonly #served = new WeakMap<Socket, number>();
  /** The limit (0: none). */
  readonly #limit: number;

  constructor(limit: number) {
    this.#limit = limit;
  }

  /**
   * Starts `socket`'s count at the `served` requests the own server path
   * answered on it before handing it over (fewer than the limit: the own path
   * closes a connection at its limit).
   */
  handedOff(socket: Socket, served: number): void {
    if (this.#limit > 0 && served > 0) this.#served.set(socket, Math.min(served, this.#limit - 1));
  }

  /**
   * Counts `req`: its answer says close when it is the connection's last;
   * past the limit (sent ahead of the last answer) it is refused, the error
   * to answer returned, and it must not be served (null: serve it).
   */
  admit(req: IncomingMessage, res: ServerResponse): HttpError | null {
    if (this.#limit === 0) return null;
    const socket = req.socket;
    const n = (this.#served.get(socket) ?? 0) + 1;
    this.#served.set(socket, n);
    if (n < this.#limit) return null;
    res.setHeader("connection", "close");
    if (n === this.#limit) return null;
    return new HttpError(503, `the connection served limits.max_requests_per_connection (${this.#limit}) requests: send this one on a new connection`, "server_error", "connection_request_limit");
  }
}
