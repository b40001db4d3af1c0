// A fake engine metrics endpoint on loopback for the engine-load tests: a real
// node:http server on port 0 that answers each GET with what the test says
// (a body in an engine's exact format, a status, a delay, a body dripped
// slowly or without end), and records what it was sent and how many
// requests it was answering at once.

import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** How to answer one request. */
export interface FakeAnswer {
  /** @default 200 */
  readonly status?: number;
  /** The body (a string is sent as UTF-8). */
  readonly body?: string | Buffer;
  /** @default "text/plain; version=0.0.4; charset=utf-8" */
  readonly contentType?: string;
  /** Milliseconds before the headers. */
  readonly delayMs?: number;
  /** Send the body without a Content-Length, in chunks of this many bytes, `dripMs` apart. */
  readonly chunkBytes?: number;
  readonly dripMs?: number;
  /** Keep writing chunks of `chunkBytes` forever (a body with no end). */
  readonly endless?: boolean;
}

/** What one received request looked like. */
export interface FakeReceived {
  readonly path: string;
  readonly headers: IncomingHttpHeaders;
}

/** A running fake engine. */
export interface FakeLoadEngine {
  /** `http://127.0.0.1:PORT` */
  readonly url: string;
  readonly received: FakeReceived[];
  /** Requests being answered now, and the most ever at once. */
  readonly active: number;
  readonly maxActive: number;
  /** Requests whose client went away before the answer ended. */
  readonly aborted: number;
  /** Changes the answer from the next request on. */
  answer: (received: FakeReceived, index: number) => FakeAnswer;
  /** Closes the server and every connection to it. */
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Starts a fake engine answering with `answer` (changeable later). */
export async function startFakeLoadEngine(answer: FakeLoadEngine["answer"]): Promise<FakeLoadEngine> {
  const state = { received: [] as FakeReceived[], active: 0, maxActive: 0, aborted: 0, answer };
  const server: Server = createServer(async (req, res) => {
    const received = { path: req.url ?? "/", headers: req.headers };
    const index = state.received.push(received) - 1;
    state.active++;
    state.maxActive = Math.max(state.maxActive, state.active);
    let gone = false;
    res.on("close", () => {
      if (!res.writableFinished) {
        gone = true;
        state.aborted++;
      }
      state.active--;
    });
    const a = state.answer(received, index);
    if (a.delayMs) await sleep(a.delayMs);
    if (gone) return;
    const body = typeof a.body === "string" ? Buffer.from(a.body, "utf8") : (a.body ?? Buffer.alloc(0));
    const headers = { "content-type": a.contentType ?? "text/plain; version=0.0.4; charset=utf-8" };
    if (a.chunkBytes === undefined) {
      res.writeHead(a.status ?? 200, { ...headers, "content-length": String(body.length) }).end(body);
      return;
    }
    res.writeHead(a.status ?? 200, headers);
    await drip(res, body, a, () => gone);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    get received() {
      return state.received;
    },
    get active() {
      return state.active;
    },
    get maxActive() {
      return state.maxActive;
    },
    get aborted() {
      return state.aborted;
    },
    get answer() {
      return state.answer;
    },
    set answer(f) {
      state.answer = f;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Writes `body` in chunks (forever when `endless`) until done or the client leaves. */
async function drip(res: ServerResponse, body: Buffer, a: FakeAnswer, gone: () => boolean): Promise<void> {
  const size = Math.max(1, a.chunkBytes ?? 1);
  for (let offset = 0; a.endless || offset < body.length; offset += size) {
    if (gone()) return;
    res.write(a.endless ? Buffer.alloc(size, 0x61) : body.subarray(offset, offset + size));
    if (a.dripMs) await sleep(a.dripMs);
    else await new Promise<void>((r) => setImmediate(r));
  }
  res.end();
}

/** A loopback port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
