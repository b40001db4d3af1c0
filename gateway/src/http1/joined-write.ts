// A head and its body written to a socket as one buffer when they are small
// (one `write` system call, none of the stream's corked-write bookkeeping),
// or as two corked writes when the body is large (no copy of it). Measured in
// bench:peers (docs/performance.md): the corked path's JS, for a small
// proxied request's two writes, was a few µs of the gateway's own CPU.

import type { Socket } from "node:net";

/** Bodies up to this size are copied beside their head; larger ones are written as they are. */
const JOIN_BYTES = 16 * 1024;

/** Writes `head` (latin1) then `body` on `socket`; `done` is called once both reached the kernel. Returns what `write` returned. */
export function writeJoined(socket: Socket, head: string, body: Buffer | null, done?: () => void): boolean {
  if (body === null || body.length === 0) return socket.write(head, "latin1", done);
  if (body.length <= JOIN_BYTES) {
    const joined = Buffer.allocUnsafe(head.length + body.length);
    joined.write(head, 0, "latin1");
    body.copy(joined, head.length);
    return socket.write(joined, done);
  }
  socket.cork();
  socket.write(head, "latin1");
  const more = socket.write(body, done);
  socket.uncork();
  return more;
}
