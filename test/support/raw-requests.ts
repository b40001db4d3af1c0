// Raw upstreams in tests read HTTP/1.1 requests off a socket by hand: each
// request is its head up to the blank line and a body of its Content-Length
// (no chunked bodies: the gateway and its pool send a length), and a raw
// upstream on them that answers with whatever bytes a test writes.

import { createServer, type AddressInfo, type Socket } from "node:net";

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

/** A raw upstream: each request's bytes go to `answer`, which writes what it likes on the socket. */
export interface RawUpstream {
  readonly origin: string;
  readonly requests: string[];
  connections: number;
  /** Connections closed so far (by either side). */
  readonly closed: number;
  close(): Promise<void>;
}

/** Starts a raw upstream (pushed onto `open` for the caller's cleanup); `answer(socket, request, n)` answers the n-th request (0-based) of the whole server. */
export async function startRawUpstream(answer: (socket: Socket, request: string, n: number) => void, open: { close(): Promise<void> }[]): Promise<RawUpstream> {
  const sockets = new Set<Socket>();
  const state = { requests: [] as string[], connections: 0, closed: 0 };
  const server = createServer((socket) => {
    state.connections++;
    sockets.add(socket);
    socket.on("close", () => {
      sockets.delete(socket);
      state.closed++;
    });
    socket.on("error", () => {});
    onRawRequests(socket, (_head, request) => {
      state.requests.push(request);
      answer(socket, request, state.requests.length - 1);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const upstream = {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get requests() {
      return state.requests;
    },
    get connections() {
      return state.connections;
    },
    set connections(n: number) {
      state.connections = n;
    },
    get closed() {
      return state.closed;
    },
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
  open.push(upstream);
  return upstream;
}
