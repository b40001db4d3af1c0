// Raw upstreams in tests read HTTP/1.1 requests off a socket by hand: each
// request is its head up to the blank line and a body of its Content-Length
// (no chunked bodies: the gateway and its pool send a length).

import type { Socket } from "node:net";

/** Calls `onRequest(head, request)` for each whole request `socket` brings, in order: `head` without its blank line, `request` head and body as sent (latin1). */
export function onRawRequests(socket: Socket, onRequest: (head: string, request: string) => void): void {
  let buf = "";
  socket.on("data", (d: Buffer) => {
    buf += d.toString("latin1");
    for (;;) {
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = buf.slice(0, end);
      const length = Number(/\r\ncontent-length:[ \t]*(\d+)/i.exec(head)?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      const request = buf.slice(0, end + 4 + length);
      buf = buf.slice(end + 4 + length);
      onRequest(head, request);
    }
  });
}
