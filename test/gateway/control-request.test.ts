// Control requests (health checks, model lists, load scrapes, KV-event polls;
// gateway/src/http1/control-request.ts) over the gateway's own pool and over
// undici's, against raw upstreams writing exact bytes: an answer read whole
// into memory of its own, a body over the bound refused (before reading when
// its length says so, at the bound when it does not) with the connection
// never reused, a body the caller does not read not kept, a signal's reason as the error and nothing sent when it came
// first, and no listener left on it. Through a gateway: a long health answer
// judged by its status, a long model list a 502, a long error page to a KV-event
// poll a failed poll. Then the gateway as a process: with http:// upstreams it never loads
// undici, with an https:// one it does, and both proxy, check health and list models.
import { execFileSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { getEventListeners } from "node:events";
import { createServer as createHttpServer } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import pino from "pino";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Pool } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { AnswerTooLargeError, controlRequest, type ControlRequestOptions } from "../../gateway/src/http1/control-request.js";
import { Http1Pool, type AnswerHandler, type OwnedDispatcher } from "../../gateway/src/http1/http1-pool.js";
import { createGateway, loadGatewayConfig } from "../../gateway/src/index.js";
import { TrtllmHttpEventSource } from "../../gateway/src/events/http-events.js";
import type { KvEventsConfig } from "../../gateway/src/config/events-config.js";
import { waitFor } from "../support/wait.js";
import { startRawUpstream, type RawUpstream } from "../support/raw-requests.js";
import { startServe } from "../support/processes.js";
import { startMockEngine } from "../support/mock-engine.js";
import path from "node:path";

const GATEWAY_CLI = path.resolve("gateway/dist/cli.js");

const open: { close(): Promise<void> }[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  await Promise.all(open.splice(0).map((o) => o.close()));
});

const rawUpstream = (answer: (socket: Socket, request: string, n: number) => void): Promise<RawUpstream> => startRawUpstream(answer, open);

/**
 * The two dispatchers a control request goes over: the gateway's own pool
 * (http://) and undici's (https://; here over http). Only the own pool's
 * connection counts are exact: undici's may open one more while the last
 * answer's connection is still being released.
 */
const DISPATCHERS: [string, (origin: string) => OwnedDispatcher, boolean][] = [
  ["the gateway's own pool", (origin) => new Http1Pool(origin, { connectTimeoutMs: 2_000, keepAliveMs: 4_000 }), true],
  ["undici's pool", (origin) => new Pool(origin, { headersTimeout: 0, bodyTimeout: 0 }), false],
];

/** A dispatcher to `origin`, destroyed after the test. */
function dispatcherTo(make: (origin: string) => OwnedDispatcher, origin: string): OwnedDispatcher {
  const d = make(origin);
  open.push({ close: () => d.destroy() });
  return d;
}

const GET: ControlRequestOptions = { path: "/health", method: "GET", headers: { accept: "application/json" }, maxBytes: 1024 };
const answer = (status: string, head: string, body: string) => `HTTP/1.1 ${status}\r\n${head}\r\n${body}`;

describe.each(DISPATCHERS)("a control request over %s", (_name, make, exactConnections) => {
  it("reads an answer whole, by its length or chunked, into memory of its own, and reuses the connection", async () => {
    const upstream = await rawUpstream((socket, _request, n) =>
      socket.write(n === 0 ? answer("200 OK", "content-length: 11\r\n", "hello world") : answer("503 Busy", "transfer-encoding: chunked\r\n", "3\r\nnot\r\n6\r\n ready\r\n0\r\n\r\n")),
    );
    const d = dispatcherTo(make, upstream.origin);
    const first = await controlRequest(d, GET);
    expect([first.statusCode, first.body.toString()]).toEqual([200, "hello world"]);
    expect([first.body.byteOffset, first.body.buffer.byteLength]).toEqual([0, 11]);
    const second = await controlRequest(d, GET);
    expect([second.statusCode, second.body.toString()]).toEqual([503, "not ready"]);
    expect(upstream.requests.map((r) => r.split("\r\n")[0])).toEqual(["GET /health HTTP/1.1", "GET /health HTTP/1.1"]);
    if (exactConnections) expect(upstream.connections).toBe(1);
  });

  it("refuses a declared length over the bound before its body comes, and a chunked body at the bound; neither connection is reused", async () => {
    const upstream = await rawUpstream((socket, _request, n) => {
      if (n === 0) socket.write(answer("200 OK", "content-length: 5000\r\n", "")); // the body never comes: only the length can refuse it
      else if (n === 1) socket.write(answer("200 OK", "transfer-encoding: chunked\r\n", "400\r\n" + "x".repeat(1024) + "\r\n1\r\ny\r\n"));
      else socket.write(answer("200 OK", "content-length: 2\r\n", "ok"));
    });
    const d = dispatcherTo(make, upstream.origin);
    const declared = await controlRequest(d, GET).catch((e: unknown) => e);
    expect(declared).toBeInstanceOf(AnswerTooLargeError);
    expect(declared).toMatchObject({ statusCode: 200, limit: 1024, declared: 5000, code: "ADP_ANSWER_TOO_LARGE" });
    await waitFor(() => upstream.closed === 1); // aborted: its connection closed, not left busy
    const ran = await controlRequest(d, GET).catch((e: unknown) => e);
    expect(ran).toMatchObject({ statusCode: 200, limit: 1024, declared: null });
    await waitFor(() => upstream.closed === 2);
    // Read whole: had a refused answer's connection been reused, its stray bytes would be read as this answer.
    const after = await controlRequest(d, GET);
    expect(after.body.toString()).toBe("ok");
    expect(upstream.connections).toBeGreaterThanOrEqual(3);
    if (exactConnections) expect(upstream.connections).toBe(3);
  });

  it("an answer whose body the caller does not read resolves with its status and no body: within the bound its connection is reused, past it closed", async () => {
    const upstream = await rawUpstream((socket, _request, n) => {
      if (n === 0) socket.write(answer("503 Busy", "content-length: 9\r\n", "not ready"));
      else if (n === 1) socket.write(answer("503 Busy", "content-length: 5000\r\n", "")); // past the bound: never read
      else if (n === 2) socket.write(answer("500 Oops", "transfer-encoding: chunked\r\n", "800\r\n" + "e".repeat(2048) + "\r\n"));
      else socket.write(answer("200 OK", "content-length: 2\r\n", "ok"));
    });
    const d = dispatcherTo(make, upstream.origin);
    const errorsOnly = { ...GET, readsBody: (status: number) => status < 400 };
    const within = await controlRequest(d, errorsOnly);
    expect([within.statusCode, within.body.length]).toEqual([503, 0]);
    const declared = await controlRequest(d, errorsOnly);
    expect([declared.statusCode, declared.body.length]).toEqual([503, 0]);
    await waitFor(() => upstream.closed === 1);
    const ran = await controlRequest(d, errorsOnly);
    expect([ran.statusCode, ran.body.length]).toEqual([500, 0]);
    await waitFor(() => upstream.closed === 2);
    const read = await controlRequest(d, errorsOnly);
    expect([read.statusCode, read.body.toString()]).toEqual([200, "ok"]);
    if (exactConnections) expect(upstream.connections).toBe(3);
  });

  it("stops reading an endless chunked body at the bound and closes its connection", async () => {
    let timer: NodeJS.Timeout | undefined;
    const upstream = await rawUpstream((socket) => {
      socket.write(answer("200 OK", "transfer-encoding: chunked\r\n", ""));
      timer = setInterval(() => socket.writable && socket.write("100\r\n" + "y".repeat(256) + "\r\n"), 1);
      socket.on("close", () => clearInterval(timer));
    });
    const d = dispatcherTo(make, upstream.origin);
    await expect(controlRequest(d, { ...GET, maxBytes: 4096 })).rejects.toMatchObject({ declared: null, limit: 4096 });
    await waitFor(() => upstream.closed === 1);
  });

  it("fails with the signal's reason when it aborts mid-answer (the connection then closed), and sends nothing when it aborted first", async () => {
    const upstream = await rawUpstream(() => {}); // never answers
    const d = dispatcherTo(make, upstream.origin);
    const timedOut = await controlRequest(d, { ...GET, signal: AbortSignal.timeout(100) }).catch((e: unknown) => e);
    expect((timedOut as Error).name).toBe("TimeoutError");
    expect(upstream.requests).toHaveLength(1);
    await waitFor(() => upstream.closed === 1);
    const gone = new AbortController();
    gone.abort(new Error("left"));
    await expect(controlRequest(d, { ...GET, signal: gone.signal })).rejects.toThrow("left");
    await new Promise((r) => setTimeout(r, 100));
    expect(upstream.requests).toHaveLength(1);
  });
});

describe("a control request's handler", () => {
  it("aborts a request the dispatcher starts after its signal fired (it was still connecting), and rejects at once", async () => {
    const aborted: Error[] = [];
    let start: (() => void) | null = null;
    const late = {
      dispatch(_options: unknown, handler: AnswerHandler) {
        start = () => handler.onRequestStart!({ abort: (e) => void aborted.push(e), pause() {}, resume() {} }, null);
      },
    };
    const gone = new AbortController();
    const pending = controlRequest(late, { ...GET, signal: gone.signal });
    gone.abort(new Error("left"));
    await expect(pending).rejects.toThrow("left");
    start!();
    expect(aborted).toHaveLength(1);
  });

  it("leaves no listener on a long-lived signal, whether the request succeeds, fails or is refused", async () => {
    const upstream = await rawUpstream((socket, _request, n) =>
      n === 0 ? socket.write(answer("200 OK", "content-length: 2\r\n", "ok")) : n === 1 ? socket.destroy() : socket.write(answer("200 OK", "content-length: 5000\r\n", "")),
    );
    const d = dispatcherTo(DISPATCHERS[0]![1], upstream.origin);
    const signal = new AbortController().signal;
    await controlRequest(d, { ...GET, signal });
    await controlRequest(d, { ...GET, signal }).catch(() => undefined);
    await controlRequest(d, { ...GET, signal }).catch(() => undefined);
    expect(upstream.requests).toHaveLength(3);
    expect(getEventListeners(signal, "abort")).toHaveLength(0);
  });
});

/** A gateway on raw node:http upstreams answering `/health`, `/v1/models` and chats as `answer` says; its log lines kept. */
async function gatewayOn(answers: ((path: string) => { status: number; body: string })[], health: Record<string, unknown> = {}) {
  const urls: string[] = [];
  for (const answerOf of answers) {
    const server = createHttpServer((req, res) => {
      req.resume();
      req.on("end", () => {
        const { status, body } = answerOf(req.url ?? "");
        res.writeHead(status, { "content-type": "application/json" }).end(body);
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    server.on("connection", (c) => open.push({ close: async () => void c.destroy() }));
    open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
    urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  }
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const g = await createGateway({ listen: { port: 0 }, upstreams: urls, health: { interval_ms: 100, unhealthy_threshold: 1, on_start: "warn", ...health } }, { logger });
  open.push(g);
  return { g, logs };
}

const CHAT_ANSWER = '{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}';

describe("the gateway's control requests, answered at length", () => {
  it("a health answer past its 64 KiB is judged by its status: 200 stays in, 503 is ejected with 'status 503'", async () => {
    const long = "x".repeat(100 * 1024);
    const { g, logs } = await gatewayOn([
      (p) => (p === "/health" ? { status: 200, body: long } : { status: 200, body: CHAT_ANSWER }),
      (p) => (p === "/health" ? { status: 503, body: long } : { status: 200, body: CHAT_ANSWER }),
    ]);
    await waitFor(() => logs.some((l) => l.msg === "upstream ejected by its health check"));
    await new Promise((r) => setTimeout(r, 300)); // a few more checks
    const health = (await (await fetch(`${g.url}/health`)).json()) as { upstreams: { healthy: boolean }[] };
    expect(health.upstreams.map((u) => u.healthy)).toEqual([true, false]);
    const ejected = logs.filter((l) => l.msg === "upstream ejected by its health check");
    expect(ejected.map((l) => [l.index, l.reason])).toEqual([[1, "status 503"]]);
  });

  it("a model list over 1 MiB is a 502 upstream_error, and never counts against the upstream", async () => {
    const { g } = await gatewayOn([(p) => (p === "/v1/models" ? { status: 200, body: `{"data":"${"m".repeat(1 << 20)}"}` } : { status: 200, body: CHAT_ANSWER })], { consecutive_gateway_failures: 1 });
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${g.url}/v1/models`);
      expect(r.status).toBe(502);
      expect(((await r.json()) as { error: { code: string; message: string } }).error).toMatchObject({ code: "upstream_error", message: expect.stringContaining("model list is over") });
    }
    const health = (await (await fetch(`${g.url}/health`)).json()) as { upstreams: { healthy: boolean }[] };
    expect(health.upstreams.map((u) => u.healthy)).toEqual([true]);
  });

  it("a KV-event poll answered by a long error page is a failed poll, not an oversized batch that gaps the streams", async () => {
    const upstream = await rawUpstream((socket) => socket.write(answer("503 Busy", "content-length: 5000\r\n", "e".repeat(5000))));
    const config = loadGatewayConfig({ file: { name: "g.yaml", text: `upstreams:\n  - url: ${upstream.origin}\n    kv_events: { kind: http, max_batch_bytes: 1024 }\n` } });
    const events = config.upstreams[0]!.kvEvents as Extract<KvEventsConfig, { kind: "http" }>;
    const notices: string[] = [];
    const control = dispatcherTo(DISPATCHERS[0]![1], upstream.origin);
    const source = new TrtllmHttpEventSource(events, { control, basePath: "", apiKey: () => null }, { onNotice: (n) => void notices.push(`${n.what}: ${n.detail ?? ""}`) });
    open.push(source);
    await source.poll(() => {});
    expect(notices).toEqual(["poll failed: HTTP 503"]);
    expect(source.counters.oversized).toBe(0);
  });
});

/** A self-signed certificate for 127.0.0.1 (openssl, as the sync tests use), in a temporary folder. */
function selfSigned(): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), "adp-https-"));
  const key = join(dir, "key.pem");
  const cert = join(dir, "cert.pem");
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], { stdio: "ignore" });
  return { cert, key };
}

/** A preload that writes the packages the process loaded to `out` as it exits. */
function packagesPreload(dir: string, out: string): string {
  const file = join(dir, "packages.cjs");
  writeFileSync(
    file,
    `process.on("exit", () => {
      const names = new Set();
      for (const k of Object.keys(require.cache)) { const m = /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(k); if (m) names.add(m[1]); }
      require("node:fs").writeFileSync(${JSON.stringify(out)}, JSON.stringify([...names].sort()));
    });`,
  );
  return file;
}

/** Runs a gateway on `upstreams` (extra environment `env`), sends a chat and asks /v1/models, stops it, and returns what it answered and the packages it loaded. */
async function throughGateway(upstreams: string[], env: NodeJS.ProcessEnv = {}): Promise<{ chat: number; models: number; packages: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), "adp-control-"));
  const out = join(dir, "packages.json");
  const config = join(dir, "gateway.yaml");
  writeFileSync(config, `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: warn }\nhealth: { interval_ms: 200 }\nupstreams:\n${upstreams.map((u) => `  - url: ${u}\n`).join("")}`);
  const serve = await startServe(GATEWAY_CLI, ["--config", config], children, { ...process.env, ...env, NODE_OPTIONS: `--require ${packagesPreload(dir, out)}` });
  await new Promise((r) => setTimeout(r, 400)); // a health check or two
  const chat = await fetch(`${serve.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }) });
  await chat.arrayBuffer();
  const models = await fetch(`${serve.url}/v1/models`);
  await models.arrayBuffer();
  serve.child.kill("SIGTERM");
  await serve.exited;
  return { chat: chat.status, models: models.status, packages: JSON.parse(readFileSync(out, "utf8")) as string[] };
}

describe("the gateway's control connections", () => {
  it("with http:// upstreams: health checks, /v1/models and proxying work and undici is never loaded", async () => {
    const engine = await startMockEngine("e0");
    open.push(engine);
    const run = await throughGateway([engine.url]);
    expect([run.chat, run.models]).toEqual([200, 200]);
    expect(run.packages).toContain("pino");
    expect(run.packages).not.toContain("undici");
    expect(engine.received.map((r) => r.path)).toEqual(expect.arrayContaining(["/health", "/v1/chat/completions", "/v1/models"]));
  });

  it("with an https:// upstream: undici is loaded for it, and health checks, /v1/models and proxying work over TLS", async () => {
    const { cert, key } = selfSigned();
    const paths: string[] = [];
    const server = createHttpsServer({ cert: readFileSync(cert), key: readFileSync(key) }, (req, res) => {
      paths.push(req.url ?? "");
      req.resume();
      req.on("end", () => {
        if (req.url === "/v1/models") return void res.writeHead(200, { "content-type": "application/json" }).end('{"object":"list","data":[{"id":"m","object":"model"}]}');
        if (req.url === "/v1/chat/completions")
          return void res.writeHead(200, { "content-type": "application/json" }).end('{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}');
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
    server.on("connection", (s) => open.push({ close: async () => void s.destroy() }));
    const run = await throughGateway([`https://127.0.0.1:${(server.address() as AddressInfo).port}`], { NODE_EXTRA_CA_CERTS: cert });
    expect([run.chat, run.models]).toEqual([200, 200]);
    expect(run.packages).toContain("undici");
    expect(paths).toEqual(expect.arrayContaining(["/health", "/v1/chat/completions", "/v1/models"]));
  });
});
