// Control requests (health checks, model lists, load scrapes, KV-event polls;
// gateway/src/http1/control-request.ts) over the gateway's own pool and over
// undici's, against raw upstreams writing exact bytes: an answer read whole
// into memory of its own, a body over the bound refused (before reading when
// its length says so, at the bound when it does not) with the connection
// never reused, a signal's reason as the error and nothing sent when it came
// first. Then the gateway as a process: with http:// upstreams it never loads
// undici, with an https:// one it does, and both proxy, check health and list models.
import { execFileSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Pool } from "undici";
import { afterEach, describe, expect, it } from "vitest";
import { AnswerTooLargeError, controlRequest, type ControlRequestOptions } from "../../gateway/src/http1/control-request.js";
import { Http1Pool, type OwnedDispatcher } from "../../gateway/src/http1/http1-pool.js";
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
    const ran = await controlRequest(d, GET).catch((e: unknown) => e);
    expect(ran).toMatchObject({ statusCode: 200, limit: 1024, declared: null });
    // Read whole: had a refused answer's connection been reused, its stray bytes would be read as this answer.
    const after = await controlRequest(d, GET);
    expect(after.body.toString()).toBe("ok");
    expect(upstream.connections).toBeGreaterThanOrEqual(3);
    if (exactConnections) expect(upstream.connections).toBe(3);
  });

  it("fails with the signal's reason when it aborts mid-answer (the connection then closed), and sends nothing when it aborted first", async () => {
    const upstream = await rawUpstream(() => {}); // never answers
    const d = dispatcherTo(make, upstream.origin);
    const timedOut = await controlRequest(d, { ...GET, signal: AbortSignal.timeout(100) }).catch((e: unknown) => e);
    expect((timedOut as Error).name).toBe("TimeoutError");
    expect(upstream.requests).toHaveLength(1);
    const gone = new AbortController();
    gone.abort(new Error("left"));
    await expect(controlRequest(d, { ...GET, signal: gone.signal })).rejects.toThrow("left");
    await new Promise((r) => setTimeout(r, 100));
    expect(upstream.requests).toHaveLength(1);
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
