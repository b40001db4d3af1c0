// A head and its body (or a body's chunk between its size line and its end)
// written to a socket as one buffer when they are small (one `write` system
// call, none of the stream's corked-write bookkeeping),
// or as two corked writes when the body is large (no copy of it). Measured in
// bench:peers (docs/performance.md): the corked path's JS, for a small
// proxied request's two writes, was a few µs of the gateway's own CPU.

import type { Socket } from "node:net";

/** Bodies up to this size are copied beside their head; larger ones are written as they are. */
const JOIN_BYTES = 16 * 1024;

/** Header lines passed on as they came: each line's start and its end with its CRLF in `bytes`, two numbers a line. */
export interface ForwardedLines {
  readonly bytes: Buffer;
  readonly lines: readonly number[];
}

/** Buffer's own latin1 writer: what `buf.write(text, at, "latin1")` calls once it has read its arguments. */
const latin1Write = (Buffer.prototype as unknown as { latin1Write(this: Buffer, text: string, offset: number, length: number): number }).latin1Write;

/** Writes `text` as latin1 into `out` at `at`; returns the bytes written. */
const putLatin1 = (out: Buffer, text: string, at: number): number => latin1Write.call(out, text, at, text.length);

/** Writes `head` (latin1) then `body` on `socket`; `done` is called once both reached the kernel. Returns what `write` returned. */
export function writeJoined(socket: Socket, head: string, body: Buffer | null, done?: () => void): boolean {
  if (body === null || body.length === 0) return socket.write(head, "latin1", done);
  if (body.length <= JOIN_BYTES) {
    const joined = Buffer.allocUnsafe(head.length + body.length);
    putLatin1(joined, head, 0);
    body.copy(joined, head.length);
    return socket.write(joined, done);
  }
  socket.cork();
  socket.write(head, "latin1");
  const more = socket.write(body, done);
  socket.uncork();
  return more;
}

/**
 * Writes one chunk of a chunked body: its size line, `size` bytes of `chunk`,
 * then `after` (its CRLF, and the last chunk when it ends the body); one
 * buffer when small, as writeJoined joins (a stream's token events are a few
 * hundred bytes: three small buffers cost a corked socket's writev three
 * times the bookkeeping). Returns what `write` returned.
 */
export function writeChunk(socket: Socket, chunk: Buffer | string, size: number, after: string): boolean {
  const line = `${size.toString(16)}\r\n`;
  if (size > JOIN_BYTES) {
    socket.write(line, "latin1");
    socket.write(chunk);
    return socket.write(after, "latin1");
  }
  const out = Buffer.allocUnsafe(line.length + size + after.length);
  putLatin1(out, line, 0);
  if (typeof chunk === "string") out.write(chunk, line.length, "utf8");
  else chunk.copy(out, line.length);
  putLatin1(out, after, line.length + size);
  return socket.write(out);
}

/**
 * Writes a request: `head`, the forwarded lines copied from their bytes,
 * `end` (the length and the blank line), then `body`; one buffer when the
 * body is small (head and lines are always copied together: they are small).
 */
export function writeRequest(socket: Socket, head: string, forward: ForwardedLines | null, end: string, body: Buffer | null, done: () => void): boolean {
  if (forward === null) return writeJoined(socket, head + end, body, done);
  const lines = forward.lines;
  let linesBytes = 0;
  for (let i = 0; i < lines.length; i += 2) linesBytes += lines[i + 1]! - lines[i]!;
  const bodyLength = body === null ? 0 : body.length;
  const joined = bodyLength <= JOIN_BYTES;
  const out = Buffer.allocUnsafe(head.length + linesBytes + end.length + (joined ? bodyLength : 0));
  let at = putLatin1(out, head, 0);
  for (let i = 0; i < lines.length; i += 2) at += forward.bytes.copy(out, at, lines[i]!, lines[i + 1]!);
  at += putLatin1(out, end, at);
  if (joined) {
    if (body !== null) body.copy(out, at);
    return socket.write(out, done);
  }
  socket.cork();
  socket.write(out);
  const more = socket.write(body!, done);
  socket.uncork();
  return more;
}
