// A client's request head, read by the gateway's own server path
// (server-connection.ts) in a narrow, strict grammar: `POST` to a path the
// caller takes, HTTP/1.1, CRLF line ends, token names, visible-ASCII values
// (spaces and tabs inside), each name once, a Content-Length and no other
// framing. Whatever falls outside it is not judged here: the connection goes
// to node:http as it came, whose parser (llhttp) answers anything malformed
// or unusual (Expect, Transfer-Encoding, obs-fold, HTTP/1.0, a duplicate
// header, ...). So every head this file takes is one llhttp would read the
// same way (test/gateway/http1-server.test.ts compares them on random heads).

import { HeaderRecord, isBlank, lengthOf, nameColon, namesAfter, NO_NAMES, seenName, type SeenNames } from "./grammar.js";

/** The most bytes of a head read here (node:http's default maxHeaderSize: past it the connection goes there, which answers 431). */
export const MAX_REQUEST_HEAD_BYTES = 16 * 1024;

/** The most header lines taken (more go to node:http, which keeps 2,000). */
const MAX_HEADERS = 64;

/** What the server path takes of a head. */
export interface RequestHead {
  /** The request target as sent (an origin-form path, its query too). */
  readonly target: string;
  /** The target's path (before `?`). */
  readonly path: string;
  /** The headers, lower-case names, one value each (trimmed), in a null-prototype object. */
  readonly headers: Record<string, string>;
  /** The body's length. */
  readonly contentLength: number;
  /** Whether the client asked to close the connection after the answer (`Connection: close`). */
  readonly close: boolean;
  /** Each header's lower-case name, in the order sent. */
  readonly names: readonly string[];
  /** Where each header's line is in the head: its start and its end with its CRLF, two numbers a line (what is passed on as it came). */
  readonly lines: readonly number[];
  /** The names the connection's next head is read against (grammar.ts). */
  readonly namesSeen: SeenNames;
}

/** The header names made last, which a connection whose client sends the same shares (grammar.ts: namesAfter). */
const lastNames: { last: SeenNames } = { last: NO_NAMES };

/** The request line's start every head taken has. */
const START = "POST /";
/** The request line's end. */
const VERSION = " HTTP/1.1";

/**
 * Whether `bytes` (a head's first bytes, unfinished) could still begin a head
 * this file takes: when not, the connection need not wait for the rest. A
 * bare LF (one not after a CR) cannot: llhttp refuses it at once. `from`: the
 * bytes before it were looked at already (so a head trickled a byte a read
 * costs linear time).
 */
export function mayBeTaken(bytes: Buffer, from = 0): boolean {
  const n = Math.min(bytes.length, START.length);
  for (let i = 0; i < n; i++) if (bytes[i] !== START.charCodeAt(i)) return false;
  for (let lf = bytes.indexOf(0x0a, from); lf >= 0; lf = bytes.indexOf(0x0a, lf + 1)) if (lf === 0 || bytes[lf - 1] !== 0x0d) return false;
  return true;
}

/**
 * Reads a head: `text` is its latin1 text up to (not with) the blank line
 * that ends it; `seen`, the names of the last head on its connection. Returns
 * null for any head outside the grammar, and for a path `takes` refuses.
 */
export function parseRequestHead(text: string, takes: (path: string) => boolean, seen: SeenNames = NO_NAMES): RequestHead | null {
  if (!text.startsWith(START)) return null;
  const space = text.indexOf(" ", START.length);
  if (space < 0) return null;
  let lineEnd = text.indexOf("\r\n", space);
  if (lineEnd < 0) lineEnd = text.length;
  if (lineEnd - space !== VERSION.length || !text.startsWith(VERSION, space)) return null;
  const from = START.length - 1;
  let query = -1;
  for (let i = from; i < space; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) return null; // visible ASCII only
    if (c === 0x3f && query < 0) query = i;
  }
  const target = text.slice(from, space);
  const path = query < 0 ? target : text.slice(from, query);
  if (!takes(path)) return null;
  const headers = new HeaderRecord() as Record<string, string>;
  const names: string[] = [];
  const lines: number[] = [];
  let count = 0;
  let contentLength = -1;
  let close = false;
  let same = true;
  for (let at = lineEnd + 2; at < text.length + 2; at = lineEnd + 2) {
    lineEnd = text.indexOf("\r\n", at);
    if (lineEnd < 0) lineEnd = text.length;
    // The name: the last head's at this line, else token bytes up to the colon (a line starting with a space or tab, obs-fold, has none).
    let name = seenName(seen, count, text, at);
    let i: number;
    if (name !== null) {
      i = at + name.length;
    } else {
      same = false;
      i = nameColon(text, at, lineEnd);
      if (i < 0) return null;
      name = text.slice(at, i).toLowerCase();
    }
    // The value, without the spaces and tabs around it; inside it only visible ASCII, spaces and tabs.
    let start = i + 1;
    let end = lineEnd;
    while (start < end && isBlank(text.charCodeAt(start))) start++;
    while (end > start && isBlank(text.charCodeAt(end - 1))) end--;
    for (let j = start; j < end; j++) {
      const c = text.charCodeAt(j);
      if ((c < 0x20 && c !== 0x09) || c > 0x7e) return null;
    }
    if (headers[name] !== undefined || ++count > MAX_HEADERS) return null;
    const value = text.slice(start, end);
    headers[name] = value;
    names.push(name);
    lines.push(at, lineEnd + 2);
    switch (name) {
      case "content-length":
        contentLength = lengthOf(value);
        if (contentLength < 0) return null;
        break;
      case "connection": {
        const option = value.toLowerCase();
        if (option === "close") close = true;
        else if (option !== "keep-alive") return null; // a list, or names of headers to drop: node:http's
        break;
      }
      case "transfer-encoding":
      case "expect":
      case "upgrade":
        return null; // framing, a 100-continue, a protocol switch: node:http's
    }
  }
  // HTTP/1.1 needs a Host (node:http answers its absence 400); a body this path reads needs its length.
  if (contentLength < 0 || headers.host === undefined) return null;
  return { target, path, headers, contentLength, close, names, lines, namesSeen: namesAfter(seen, same, text, names, lines, lastNames) };
}
