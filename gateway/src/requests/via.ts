// A proxied request's \`Via\` header (RFC 9110 §7.6.3): this gateway's entry,
// the header a request sent on carries, and the loop it shows when a request
// comes back through the gateway that sent it.

import { randomBytes } from "node:crypto";
import type { EdgeRequest } from "../http1/edge-types.js";

/** This gateway's `Via` entry (RFC 9110 §7.6.3): a pseudonym unique to the process, so another gateway's is not mistaken for it. */
export function viaEntry(): string {
  return `1.1 adp-router-${randomBytes(6).toString("hex")}`;
}

/** The `Via` a request sent on from `req` carries: the client's entries, then this gateway's `entry`. */
export function viaFor(req: EdgeRequest, entry: string): string {
  return req.headers.via === undefined ? entry : `${req.headers.via}, ${entry}`;
}

/** Whether a request's `Via` header names `entry`: it went out through this gateway and came back (a loop). */
export function isLoop(req: EdgeRequest, entry: string): boolean {
  const via = req.headers.via;
  return via !== undefined && via.includes(entry.slice(4));
}
