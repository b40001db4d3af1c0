// What the gateway reads of a client's request and writes of its answer,
// whichever server took it: node:http's IncomingMessage and ServerResponse
// fit these, and so do the gateway's own (server-connection.ts,
// server-response.ts) for the requests its own server path serves.

import type { IncomingHttpHeaders } from "node:http";

/** A client's request as the gateway reads it. */
export interface EdgeRequest {
  readonly method?: string | undefined;
  /** The request target as sent. */
  readonly url?: string | undefined;
  /** Lower-case names. */
  readonly headers: IncomingHttpHeaders;
  /** Whether its body was read whole. */
  readonly complete: boolean;
}

/** The answer to a client's request. */
export interface EdgeResponse {
  /** Whether the head was written (nothing can be answered in its place any more). */
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
  /** Whether the answer was handed to the connection whole (a close before that is the client's hang-up). */
  readonly writableFinished: boolean;
  setHeader(name: string, value: string): unknown;
  writeHead(status: number, headers?: Record<string, string | string[]>): this;
  /** Sends the head now. */
  flushHeaders(): void;
  /** false: wait for 'drain'. */
  write(chunk: Buffer): boolean;
  end(chunk?: Buffer | string): unknown;
  /** Its connection was cut. */
  destroy(): unknown;
  /** 'close': the answer ended, or its connection closed first. */
  on(event: "close", listener: () => void): unknown;
  once(event: "drain", listener: () => void): unknown;
  off(event: "drain", listener: () => void): unknown;
}
