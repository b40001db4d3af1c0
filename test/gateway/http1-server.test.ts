// The gateway's own HTTP/1.1 server path (gateway/src/http1/request-head.ts,
// server-connection.ts, server-response.ts): every head it takes is one
// node:http's parser (llhttp) reads the same way (random heads, compared);
// what it does not take goes to node:http on the same connection, unread,
// from that request on; pipelined requests are answered in order; its bounds
// (head and body time, keep-alive, held bytes) hold; and the same requests
// get the same answers whichever server path serves them.
import { createRequire } from "node:module";
import { connect, createServer as createNetServer, type Socket } from "node:net";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { MAX_REQUEST_HEAD_BYTES, parseRequestHead } from "../../gateway/src/http1/request-head.js";
import type { SeenNames } from "../../gateway/src/http1/grammar.js";
import { Http1Response } from "../../gateway/src/http1/server-response.js";
import { ServerConnection, type ServerPath } from "../../gateway/src/http1/server-connection.js";
import { SERVER_READS_INTO_BUFFER } from "../../gateway/src/http1/read-buffer.js";
import { startMockEngine, type EngineBehaviour, type MockEngine } from "../support/mock-engine.js";
import { onRawRequests } from "../support/raw-requests.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** node:http's own request parser (llhttp), as its server runs it. */
const { HTTPParser } = createRequire(import.meta.url)("_http_common") as {
  HTTPParser: (new () => LlhttpParser) & { REQUEST: number; kOnHeadersComplete: number; kOnBody: number; kOnMessageComplete: number; kOnHeaders: number };
};
interface LlhttpParser {
  initialize(type: number, resource: object, maxHeaderSize: number, lenient: number): void;
  execute(data: Buffer): number | Error;
  finish(): number | Error;
  [key: number]: unknown;
}

/** What llhttp reads of `bytes` (one request): its method, target, version and headers, or null when it refuses them. */
function llhttpRead(bytes: Buffer): { method: number; url: string; version: string; headers: [string, string][]; complete: boolean } | null {
  const parser = new HTTPParser();
  parser.initialize(HTTPParser.REQUEST, {}, MAX_REQUEST_HEAD_BYTES, 0);
  let got: { method: number; url: string; version: string; headers: [string, string][]; complete: boolean } | null = null;
  parser[HTTPParser.kOnHeadersComplete] = (major: number, minor: number, headers: string[], method: number, url: string) => {
    const pairs: [string, string][] = [];
    for (let i = 0; i < headers.length; i += 2) pairs.push([headers[i]!, headers[i + 1]!]);
    got = { method, url, version: `${major}.${minor}`, headers: pairs, complete: false };
    return 0;
  };
  parser[HTTPParser.kOnBody] = () => {};
  parser[HTTPParser.kOnMessageComplete] = () => {
    if (got !== null) got.complete = true;
  };
  const r = parser.execute(bytes);
  return r instanceof Error ? null : got;
}

/** POST's number in llhttp's method list. */
const POST = 3;

describe("request heads: only what llhttp reads the same way", () => {
  const takes = (p: string) => p === "/v1/chat/completions" || p === "/v1/completions";

  it("a plain head is taken, its headers lower-cased and trimmed", () => {
    const head = parseRequestHead("POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nX-Session-Id:  s1 \t\r\nContent-Length: 12\r\nConnection: close", takes);
    expect(head).toEqual({
      target: "/v1/chat/completions?x=1",
      path: "/v1/chat/completions",
      headers: Object.assign(Object.create(null), { host: "a", "x-session-id": "s1", "content-length": "12", connection: "close" }),
      contentLength: 12,
      close: true,
      names: ["host", "x-session-id", "content-length", "connection"],
      // Each line's start and its end past its CRLF (the last one's CRLF is the blank line's first half).
      lines: [40, 49, 49, 70, 70, 90, 90, 109],
      // What the connection's next head is read against: the names as sent, and lower-cased.
      namesSeen: { raw: ["Host", "X-Session-Id", "Content-Length", "Connection"], names: ["host", "x-session-id", "content-length", "connection"] },
    });
  });

  it("a head read against the last one's names is read as a fresh one: names found again are taken, others read; names sent alike are shared", () => {
    const first = parseRequestHead("POST /v1/completions HTTP/1.1\r\nHost: a\r\nX-Stainless-Runtime-Version: v20\r\nContent-Length: 2", takes)!;
    const heads = [
      "POST /v1/completions HTTP/1.1\r\nHost: b\r\nX-Stainless-Runtime-Version: v22\r\nContent-Length: 3",
      "POST /v1/completions HTTP/1.1\r\nhost: b\r\nX-Stainless-Runtime-Versions: v22\r\nContent-Length: 3", // another case, a longer name
      "POST /v1/completions HTTP/1.1\r\nHost: b\r\nX-Stainless-Runtime: v22\r\nContent-Length: 3", // a shorter name
      "POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Length: 3", // fewer
      "POST /v1/completions HTTP/1.1\r\nHost: b\r\nX-Stainless-Runtime-Version: v22\r\nContent-Length: 3\r\nX-A: 1", // more
      "POST /v1/completions HTTP/1.1\r\nHost: b\r\nX-Stainless-Runtime-Version : v22\r\nContent-Length: 3", // a space before the colon: refused
    ];
    for (const text of heads) {
      const again = parseRequestHead(text, takes, first.namesSeen);
      const fresh = parseRequestHead(text, takes);
      expect(again === null ? null : { ...again, namesSeen: null }, text).toEqual(fresh === null ? null : { ...fresh, namesSeen: null });
      expect(again?.namesSeen, text).toEqual(fresh?.namesSeen);
    }
    // The same names again: the same object, no copies.
    expect(parseRequestHead(heads[0]!, takes, first.namesSeen)!.namesSeen).toBe(first.namesSeen);
    // Names another connection's client sent alike are shared, not copied again.
    expect(parseRequestHead(heads[0]!, takes)!.namesSeen).toBe(parseRequestHead(heads[0]!, takes)!.namesSeen);
    // A name sent lower-case is kept once; what is kept cannot be changed.
    const kept = parseRequestHead("POST /v1/completions HTTP/1.1\r\nhost: a\r\nX-Custom-Header-Name: 1\r\ncontent-length: 2", takes)!.namesSeen;
    expect(kept.raw[0]).toBe(kept.names[0]);
    expect(kept.raw[1]).toBe("X-Custom-Header-Name");
    expect(Object.isFrozen(kept) && Object.isFrozen(kept.raw) && Object.isFrozen(kept.names)).toBe(true);
    // Names a client makes long (an idle connection would hold them) are not kept, and the next head reads the same.
    const long = `POST /v1/completions HTTP/1.1\r\nhost: a\r\n${Array.from({ length: 5 }, (_, i) => `x-${String(i).repeat(240)}: 1\r\n`).join("")}content-length: 2`;
    const head = parseRequestHead(long, takes)!;
    expect(head.names).toHaveLength(7);
    expect(head.namesSeen.raw).toHaveLength(0);
    expect({ ...parseRequestHead(long, takes, head.namesSeen)! }).toEqual({ ...head });
  });

  it.each([
    ["another path", "POST /health HTTP/1.1\r\nhost: a\r\ncontent-length: 0"],
    ["another method", "PUT /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 0"],
    ["HTTP/1.0", "POST /v1/completions HTTP/1.0\r\nhost: a\r\ncontent-length: 0"],
    ["no Host", "POST /v1/completions HTTP/1.1\r\ncontent-length: 0"],
    ["no length", "POST /v1/completions HTTP/1.1\r\nhost: a"],
    ["chunked", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked"],
    ["Expect", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nexpect: 100-continue"],
    ["Upgrade", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nupgrade: websocket"],
    ["a Connection list", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nconnection: x-a, close"],
    ["a duplicate header", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nX-A: 1\r\nx-a: 2"],
    ["two lengths", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\ncontent-length: 2"],
    ["a signed length", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: +2"],
    ["obs-fold", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nx-a: 1\r\n 2"],
    ["a space before the colon", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length : 2"],
    ["a bare LF", "POST /v1/completions HTTP/1.1\nhost: a\r\ncontent-length: 2"],
    ["obs-text in a value", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nx-a: caf\u00e9"],
    ["a control character", "POST /v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\nx-a: a\u0000b"],
    ["a space in the target", "POST /v1/completions x HTTP/1.1\r\nhost: a\r\ncontent-length: 2"],
    ["an absolute target", "POST http://a/v1/completions HTTP/1.1\r\nhost: a\r\ncontent-length: 2"],
  ])("%s goes to node:http", (_what, text) => {
    expect(parseRequestHead(text, takes)).toBeNull();
  });

  it("random heads: every one taken is read by llhttp with the same target, headers and length, and read alike against the last head's names (fixed seed)", () => {
    // Mostly well-formed, with rare hostile parts: every part has its own odd variants.
    const rare = <T,>(usual: fc.Arbitrary<T>, odd: fc.Arbitrary<T>) => fc.oneof({ weight: 40, arbitrary: usual }, { weight: 1, arbitrary: odd });
    const name = rare(fc.constantFrom("x-session-id", "authorization", "x-request-id", "via", "X-Custom", "accept", "user-agent", "__proto__", "constructor", "toString"), fc.constantFrom("connection", "Connection", "transfer-encoding", "expect", "upgrade", "content-length", "host", "x a", "x\ta", "x:a", "", "x\u00e9", "x\u0000", "(x)", "x/y"));
    const valueChar = rare(fc.constantFrom("a", "Z", "1", "-", ".", "/", "=", " ", "\t", ",", ":", ";", "\"", "~"), fc.constantFrom("\r", "\n", "\u0000", "\u001f", "\u007f", "\u0080", "\u00ff", "\u00e9", "close", "keep-alive", "chunked", "\r\n "));
    const value = fc.array(valueChar, { maxLength: 8 }).map((xs) => xs.join(""));
    const separator = rare(fc.constantFrom(": ", ":", ":  ", ":\t"), fc.constantFrom(" :", "", " : ", "\t:"));
    const lineEnd = rare(fc.constant("\r\n"), fc.constantFrom("\n", "\r", "\r\n ", "\r\n\t", " \r\n"));
    const line = fc.tuple(name, separator, value, lineEnd);
    const method = rare(fc.constant("POST"), fc.constantFrom("GET", "post", "POST ", " POST", "PUT"));
    const target = rare(fc.constantFrom("/v1/chat/completions", "/v1/completions", "/v1/completions?x=1", "/v1/chat/completions?a=b&c=%20"), fc.constantFrom("/v1//completions", "/v1/completions#x", "/v1/completions x", "/v1/completions\u00e9", "*", "http://h/v1/completions", "/v1/completions?\u0000"));
    const version = rare(fc.constant(" HTTP/1.1"), fc.constantFrom(" HTTP/1.0", " HTTP/1.1 ", "  HTTP/1.1", " http/1.1", " HTTP/2.0", " HTTP/1.1\t"));
    const requestLine = fc.tuple(method, fc.constant(" "), target, version, lineEnd).map(([m, sp, t, v, eol]) => `${m}${sp}${t}${v}${eol}`.replace(/^(\S+)  /, "$1 "));
    // Names mostly distinct (a repeated one is refused, tested above), sometimes not.
    const lines = rare(fc.uniqueArray(line, { maxLength: 8, selector: ([n]) => n.toLowerCase() }), fc.array(line, { maxLength: 8 })).map((ls) => ls.map(([n, sep, v, eol]) => `${n}${sep}${v}${eol}`));
    const present = rare(fc.constant(true), fc.constant(false));
    const head = fc.tuple(requestLine, lines, present, present, fc.nat({ max: 40 }));
    let taken = 0;
    let previous: SeenNames | undefined;
    fc.assert(
      fc.property(head, ([first, lines, withHost, withLength, length]) => {
        const all = [...(withHost ? ["host: h\r\n"] : []), ...lines, ...(withLength ? [`content-length: ${length}\r\n`] : [])];
        const text = `${first}${all.join("")}`;
        const end = text.endsWith("\r\n") ? text.slice(0, -2) : text;
        if (end.includes("\r\n\r\n")) return; // a head ends at its first blank line
        const ours = parseRequestHead(end, takes);
        // Read against the names of the last head (another random one) and of itself, it reads the same.
        for (const seen of [previous, ours?.namesSeen]) {
          const again = seen === undefined ? ours : parseRequestHead(end, takes, seen);
          expect(again === null ? null : { ...again, namesSeen: null }).toEqual(ours === null ? null : { ...ours, namesSeen: null });
        }
        if (ours === null) return;
        previous = ours.namesSeen;
        taken++;
        const body = "x".repeat(ours.contentLength);
        const theirs = llhttpRead(Buffer.from(`${end}\r\n\r\n${body}`, "latin1"));
        expect(theirs, JSON.stringify(end)).not.toBeNull();
        expect(theirs!.method).toBe(POST);
        expect(theirs!.version).toBe("1.1");
        expect(theirs!.url).toBe(ours.target);
        expect(theirs!.complete).toBe(true);
        const lower = theirs!.headers.map(([n, v]) => [n.toLowerCase(), v] as const);
        expect(Object.fromEntries(lower)).toEqual({ ...ours.headers });
        expect(lower.length).toBe(Object.keys(ours.headers).length);
      }),
      { seed: 20261204, numRuns: 4000 },
    );
    expect(taken).toBeGreaterThan(1000); // the property was tested, not skipped
  });
});

/** A gateway in front of `n` mock engines; `serverPath` picks who serves the completion routes. */
async function fleet(n: number, yaml = "", behaviour: EngineBehaviour = {}, serverPath: "own" | "node:http" = "own"): Promise<{ gateway: Gateway; engines: MockEngine[] }> {
  const engines: MockEngine[] = [];
  for (let i = 0; i < n; i++) {
    const e = await startMockEngine(`e${i}`, behaviour);
    open.push(e);
    engines.push(e);
  }
  const text = `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 60000 }\nupstreams:\n${engines.map((e) => `  - ${e.url}\n`).join("")}${yaml}`;
  const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }), { serverPath });
  open.push(gateway);
  return { gateway, engines };
}

/** A raw connection to `url`: what it wrote so far, whether it closed. */
function rawConnection(url: string): Promise<{ socket: Socket; text: () => string; closed: () => boolean; until: (test: (text: string) => boolean, ms?: number) => Promise<string> }> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  let text = "";
  let closed = false;
  const waiters: (() => void)[] = [];
  socket.on("data", (d) => {
    text += d.toString("latin1");
    waiters.splice(0).forEach((w) => w());
  });
  socket.on("error", () => {});
  socket.on("close", () => {
    closed = true;
    waiters.splice(0).forEach((w) => w());
  });
  const until = async (test: (t: string) => boolean, ms = 3000) => {
    const deadline = Date.now() + ms;
    while (!test(text) && !closed && Date.now() < deadline) await new Promise<void>((r) => (waiters.push(r), setTimeout(r, 50)));
    return text;
  };
  open.push({ close: async () => void socket.destroy() });
  return new Promise((resolve) => socket.on("connect", () => resolve({ socket, text: () => text, closed: () => closed, until })));
}

const chatBody = (content: string) => JSON.stringify({ model: "m", messages: [{ role: "user", content }] });
const chatRequest = (content: string, extra = "") => {
  const body = chatBody(content);
  return `POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\n${extra}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
};
/** The status lines of the answers in `text`, in order. */
const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => Number(m[1]));

describe("the own server path on a connection", () => {
  it("pipelined requests are answered in order, each whole; a request it does not take goes to node:http on the same connection", async () => {
    const { gateway, engines } = await fleet(1);
    const c = await rawConnection(gateway.url);
    c.socket.write(chatRequest("one") + chatRequest("two") + "GET /health HTTP/1.1\r\nhost: g\r\n\r\n" + chatRequest("three", "connection: close\r\n"));
    const text = await c.until(() => c.closed());
    expect(statuses(text)).toEqual([200, 200, 200, 200]);
    expect(text.indexOf('"status":"ok"')).toBeGreaterThan(text.indexOf("HTTP/1.1 200", text.indexOf("HTTP/1.1 200") + 1));
    const prompts = engines[0]!.received.filter((r) => r.path === "/v1/chat/completions").map((r) => (r.body as { messages: { content: string }[] }).messages[0]!.content);
    expect(prompts).toEqual(["one", "two", "three"]);
  });

  it("a head and body trickled a few bytes per read are served; a body spanning reads arrives whole", async () => {
    const { gateway, engines } = await fleet(1);
    const c = await rawConnection(gateway.url);
    const big = "y".repeat(300_000);
    const bytes = Buffer.from(chatRequest("tiny") + chatRequest(big));
    for (let at = 0; at < 400; at += 7) {
      c.socket.write(bytes.subarray(at, Math.min(at + 7, 400)));
      await new Promise((r) => setImmediate(r));
    }
    c.socket.write(bytes.subarray(400));
    const text = await c.until((t) => statuses(t).length === 2);
    expect(statuses(text)).toEqual([200, 200]);
    const got = engines[0]!.received.filter((r) => r.path === "/v1/chat/completions");
    expect(got.map((r) => (r.body as { messages: { content: string }[] }).messages[0]!.content.length)).toEqual([4, 300_000]);
  });

  it("what node:http judges stays node:http's: Expect 100-continue, chunked bodies, a malformed head, an oversized body", async () => {
    const { gateway } = await fleet(1, "limits: { max_body_bytes: 2000 }\n");
    const body = chatBody("hi");
    const expectContinue = await rawConnection(gateway.url);
    expectContinue.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-length: ${body.length}\r\nexpect: 100-continue\r\n\r\n`);
    await expectContinue.until((t) => t.includes("100 Continue"));
    expectContinue.socket.write(body);
    expect(statuses(await expectContinue.until((t) => statuses(t).length >= 1 && t.includes('"choices"')))).toContain(200);
    const chunked = await rawConnection(gateway.url);
    chunked.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ntransfer-encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`);
    expect(statuses(await chunked.until((t) => t.includes('"choices"')))).toEqual([200]);
    const malformed = await rawConnection(gateway.url);
    malformed.socket.write("POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-length: 2\r\nbad header\r\n\r\n{}");
    expect(statuses(await malformed.until(() => malformed.closed()))).toEqual([400]);
    const oversized = await rawConnection(gateway.url);
    oversized.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-length: 5000\r\n\r\n`);
    expect(statuses(await oversized.until((t) => t.includes("payload_too_large")))).toEqual([413]);
  });

  it("a head past 16 KiB is node:http's 431; a client ending its side mid-request is dropped", async () => {
    const { gateway } = await fleet(1);
    const big = await rawConnection(gateway.url);
    big.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\nx-big: ${"a".repeat(20_000)}\r\n\r\n`);
    expect(statuses(await big.until(() => big.closed()))).toEqual([431]);
    expect(gateway.metrics()).toContain('adp_gateway_client_malformed_requests_total{status="431"} 1');
  });

  it("an HTTP/1.1 request without Host is refused OpenAI-style and counted; CONNECT is answered 405, not dropped unanswered", async () => {
    const { gateway, engines } = await fleet(1);
    const body = chatBody("hi");
    for (const head of [`POST /v1/chat/completions HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`, "GET /health HTTP/1.1\r\n\r\n"]) {
      const c = await rawConnection(gateway.url);
      c.socket.write(head);
      const text = await c.until((t) => t.includes("}"));
      expect(statuses(text)).toEqual([400]);
      expect(text).toContain('"message":"an HTTP/1.1 request must carry a Host header"');
    }
    expect(gateway.metrics()).toContain('adp_gateway_client_malformed_requests_total{status="400"} 2\n');
    // HTTP/1.0 has no Host requirement.
    const old = await rawConnection(gateway.url);
    old.socket.write("GET /health HTTP/1.0\r\n\r\n");
    expect(statuses(await old.until(() => old.closed()))).toEqual([200]);
    const tunnel = await rawConnection(gateway.url);
    tunnel.socket.write("CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n");
    const refused = await tunnel.until(() => tunnel.closed());
    expect(statuses(refused)).toEqual([405]);
    expect(refused).toContain('"message":"CONNECT is not served"');
    expect(engines[0]!.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(0);
  });

  it("a CONNECT whose client resets is dropped, the gateway unharmed; closing the gateway closes a CONNECT waiting behind an answer", async () => {
    // Old code (1d3dc86): node:http lets go of a CONNECT's socket (its error listener too): a reset while the 405
    // lingered was an uncaught 'error' that ended the process, and close() waited for the answer before it.
    const { gateway } = await fleet(1, "", { delayMs: 3000 }, "node:http");
    for (let i = 0; i < 5; i++) {
      const c = await rawConnection(gateway.url);
      c.socket.write("CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n");
      await new Promise((r) => setTimeout(r, 20));
      c.socket.resetAndDestroy();
    }
    await new Promise((r) => setTimeout(r, 300));
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    const behind = await rawConnection(gateway.url);
    behind.socket.write(chatRequest("slow") + "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n");
    await new Promise((r) => setTimeout(r, 200));
    const t0 = Date.now();
    await gateway.close(300);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(await behind.until(() => behind.closed(), 1000)).not.toContain("405");
  });

  it("an unfinished head with a bare LF goes to node:http at once: 400 then, not 408 after headers_ms", async () => {
    const { gateway } = await fleet(1, "timeouts: { headers_ms: 3000 }\n");
    for (const head of ["POST /v1/chat/completions HTTP/1.1\nhost: g\n", "POST /v1/chat/completions HTTP/1.1\r\nhost: g\ncontent-length: 2\r\n"]) {
      const c = await rawConnection(gateway.url);
      const t0 = Date.now();
      // Sent in two reads, the bare LF in the second (the bytes before it were looked at already).
      c.socket.write(head.slice(0, 20));
      await new Promise((r) => setTimeout(r, 50));
      c.socket.write(head.slice(20));
      expect(statuses(await c.until(() => c.closed(), 5000))).toEqual([400]);
      expect(Date.now() - t0).toBeLessThan(1500);
    }
  });

  it("a head not finished within timeouts.headers_ms and a body not within request_ms are answered 408, counted, and closed", async () => {
    const { gateway } = await fleet(1, "timeouts: { headers_ms: 300, request_ms: 600 }\n");
    const head = await rawConnection(gateway.url);
    head.socket.write("POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\n");
    const body = await rawConnection(gateway.url);
    body.socket.write("POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-length: 100\r\n\r\n{");
    expect(statuses(await head.until(() => head.closed()))).toEqual([408]);
    expect(statuses(await body.until(() => body.closed()))).toEqual([408]);
    const metrics = gateway.metrics();
    expect(metrics).toMatch(/read_timeouts_total 2\b/);
    expect(metrics).toContain('adp_gateway_requests_total{outcome="client_closed"} 1');
  });

  it("an idle keep-alive connection is closed after timeouts.keep_alive_ms; answers say so in Keep-Alive", async () => {
    const { gateway } = await fleet(1, "timeouts: { keep_alive_ms: 2000, headers_ms: 400 }\n");
    const c = await rawConnection(gateway.url);
    c.socket.write(chatRequest("hi"));
    const text = await c.until((t) => t.includes('"choices"'));
    expect(text).toMatch(/\r\nKeep-Alive: timeout=2, max=1000\r\n/);
    expect(text).toMatch(/\r\nConnection: keep-alive\r\n/);
    expect(text).toMatch(/\r\ncontent-length: \d+\r\n/i);
    const answered = Date.now();
    await c.until(() => c.closed(), 5000);
    expect(c.closed()).toBe(true);
    expect(Date.now() - answered).toBeGreaterThanOrEqual(1500);
  });

  it("a connection serves limits.max_requests_per_connection requests: the last answer says Connection: close and the connection closes, on either server path; 0 is no limit", async () => {
    const { gateway, engines } = await fleet(1, "limits: { max_requests_per_connection: 3 }\n");
    const prompts = () => engines[0]!.received.filter((r) => r.path === "/v1/chat/completions").map((r) => (r.body as { messages: { content: string }[] }).messages[0]!.content);
    const connections = (text: string) => text.split(/(?=HTTP\/1\.1 )/).map((a) => /\r\nconnection: (\S+)\r?/i.exec(a)?.[1]?.toLowerCase());
    /** Sends `n` chats one at a time on `c`, each after the last answer came. */
    const oneByOne = async (c: Awaited<ReturnType<typeof rawConnection>>, n: number, name: string) => {
      for (let i = 1; i <= n; i++) {
        c.socket.write(chatRequest(`${name} ${i}`));
        await c.until((t) => statuses(t).length === i && t.endsWith("}"));
      }
    };
    // One at a time on the own path: the third answer closes.
    const c = await rawConnection(gateway.url);
    await oneByOne(c, 3, "turn");
    await c.until(() => c.closed());
    expect(c.closed()).toBe(true);
    expect(connections(c.text())).toEqual(["keep-alive", "keep-alive", "close"]);
    expect(c.text()).toMatch(/\r\nKeep-Alive: timeout=65, max=3\r\n/);
    // Pipelined on the own path: the third answer closes however much was sent ahead of it; the requests after it
    // never reach an engine (RFC 9112 9.6; a pipelining client sends them again on a new connection).
    const p = await rawConnection(gateway.url);
    p.socket.write(["a", "b", "c", "d", "e"].map((x) => chatRequest(x)).join(""));
    const piped = await p.until(() => p.closed());
    expect(statuses(piped)).toEqual([200, 200, 200]);
    expect(connections(piped)).toEqual(["keep-alive", "keep-alive", "close"]);
    expect(prompts()).toEqual(["turn 1", "turn 2", "turn 3", "a", "b", "c"]);
    // On node:http's server path, one at a time: its second answer says close, and the connection closes then
    // (node:http alone would keep it open until keep_alive_ms), not after the 65 s keep-alive.
    const { gateway: nodeHttp, engines: nodeEngines } = await fleet(1, "limits: { max_requests_per_connection: 2 }\n", {}, "node:http");
    const n = await rawConnection(nodeHttp.url);
    await oneByOne(n, 2, "node");
    await n.until(() => n.closed(), 2000);
    expect(n.closed()).toBe(true);
    expect(connections(n.text())).toEqual(["keep-alive", "close"]);
    // Pipelined past the limit on node:http's path: the second answer closes the connection; the third request, sent
    // ahead of it, never reaches an engine (node:http drops it with the connection).
    const np = await rawConnection(nodeHttp.url);
    np.socket.write(["x", "y", "z"].map((x) => chatRequest(x)).join(""));
    const nodePiped = await np.until(() => np.closed(), 2000);
    expect(np.closed()).toBe(true);
    expect(statuses(nodePiped)).toEqual([200, 200]);
    expect(connections(nodePiped)).toEqual(["keep-alive", "close"]);
    expect(nodeEngines[0]!.received.filter((r) => r.path === "/v1/chat/completions").map((r) => (r.body as { messages: { content: string }[] }).messages[0]!.content)).toEqual(["node 1", "node 2", "x", "y"]);
    // 0: a connection serves past the default's thousand.
    const { gateway: unlimited } = await fleet(1, "limits: { max_requests_per_connection: 0 }\n");
    const u = await rawConnection(unlimited.url);
    await oneByOne(u, 1002, "u");
    expect(u.closed()).toBe(false);
    expect(u.text()).not.toMatch(/Connection: close/i);
  }, 30_000);

  it("limits.max_requests_per_connection counts a connection's requests on node:http's path too: HTTP/1.0 keep-alive ones, those after a hand-off, a 417", async () => {
    const connection = (text: string) => text.split(/(?=HTTP\/1\.1 )/).map((a) => /\r\nconnection: (\S+)\r?/i.exec(a)?.[1]?.toLowerCase());
    // HTTP/1.0 keep-alive chats (node:http's: the own path takes HTTP/1.1 alone), which node:http does not count.
    const { gateway: old } = await fleet(1, "limits: { max_requests_per_connection: 2 }\n");
    const http10 = (content: string) => {
      const body = chatBody(content);
      return `POST /v1/chat/completions HTTP/1.0\r\nconnection: keep-alive\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
    };
    const c10 = await rawConnection(old.url);
    for (const [i, content] of ["a", "b"].entries()) {
      c10.socket.write(http10(content));
      await c10.until((t) => statuses(t).length === i + 1 && t.endsWith("}"));
    }
    await c10.until(() => c10.closed(), 2000);
    expect(c10.closed()).toBe(true);
    expect(statuses(c10.text())).toEqual([200, 200]);
    expect(connection(c10.text())).toEqual(["keep-alive", "close"]);
    // Two chats on the own path, then a request it hands to node:http: the third of the connection, its last.
    const { gateway } = await fleet(1, "limits: { max_requests_per_connection: 3 }\n");
    const h = await rawConnection(gateway.url);
    for (const [i, content] of ["one", "two"].entries()) {
      h.socket.write(chatRequest(content));
      await h.until((t) => statuses(t).length === i + 1 && t.endsWith("}"));
    }
    h.socket.write("GET /health HTTP/1.1\r\nhost: g\r\n\r\n");
    await h.until(() => h.closed(), 2000);
    expect(h.closed()).toBe(true);
    expect(statuses(h.text())).toEqual([200, 200, 200]);
    expect(connection(h.text())).toEqual(["keep-alive", "keep-alive", "close"]);
    // An expectation other than 100-continue is answered 417 (an OpenAI-style error), counted like any request.
    const { gateway: one } = await fleet(1, "limits: { max_requests_per_connection: 1 }\n");
    const e = await rawConnection(one.url);
    e.socket.write("GET /health HTTP/1.1\r\nhost: g\r\nexpect: something-else\r\n\r\n");
    await e.until(() => e.closed(), 2000);
    expect(e.closed()).toBe(true);
    expect(statuses(e.text())).toEqual([417]);
    expect(connection(e.text())).toEqual(["close"]);
    expect(e.text()).toContain('"code":"expectation_failed"');
    // Short of the limit, a 417 (or any error) to a request without a body keeps the connection: the next is answered.
    const { gateway: many } = await fleet(1, "limits: { max_requests_per_connection: 0 }\n");
    const k = await rawConnection(many.url);
    k.socket.write("GET /health HTTP/1.1\r\nhost: g\r\nexpect: something-else\r\n\r\nGET /nowhere HTTP/1.1\r\nhost: g\r\n\r\nGET /health HTTP/1.1\r\nhost: g\r\n\r\n");
    await k.until((t) => statuses(t).length === 3 && t.endsWith("}"));
    expect(statuses(k.text())).toEqual([417, 404, 200]);
    expect(connection(k.text())).toEqual(["keep-alive", "keep-alive", "keep-alive"]);
    await new Promise((r) => setTimeout(r, 400));
    expect(k.closed()).toBe(false);
  }, 30_000);

  it("a connection whose last answer went out lingers: a client still sending gets that answer whole, not a reset; LINGER_BYTES and LINGER_MS bound it", async () => {
    const { gateway, engines } = await fleet(1, "limits: { max_requests_per_connection: 2 }\n");
    /**
     * Sends `first`, then `extra` bytes more in 16 KiB writes without reading (closing a socket with bytes unread
     * sends a reset, and a reset makes the client's kernel drop what it had not read); then reads. What it read, and
     * whether its socket failed.
     */
    const sendOn = (first: string, extra: number) =>
      new Promise<{ text: string; error: string | null; ms: number }>((resolve) => {
        const { port } = new URL(gateway.url);
        const socket = connect(Number(port), "127.0.0.1");
        const started = Date.now();
        socket.pause();
        let text = "";
        let error: string | null = null;
        socket.on("data", (d: Buffer) => (text += d.toString("latin1")));
        socket.on("error", (e: NodeJS.ErrnoException) => {
          error = e.code ?? "error";
          socket.resume();
        });
        socket.on("close", () => resolve({ text, error, ms: Date.now() - started }));
        socket.write(first);
        const junk = Buffer.alloc(16 * 1024, 0x78);
        let sent = 0;
        const pump = () => {
          while (sent < extra && !socket.destroyed) {
            sent += junk.length;
            if (!socket.write(junk)) return void socket.once("drain", pump);
          }
          setTimeout(() => socket.resume(), 200);
        };
        setTimeout(pump, 50);
      });
    const served = () => engines[0]!.received.filter((r) => r.path === "/v1/chat/completions").length;
    // A chat saying close, then 600 KB more while the answer goes out: the answer arrives whole.
    const closing = await sendOn(chatRequest("close", "connection: close\r\n"), 600_000);
    expect(statuses(closing.text)).toEqual([200]);
    expect(closing.text).toMatch(/"choices"[^]*\}$/);
    expect(served()).toBe(1);
    // Two chats at the limit of two, with more pipelined behind them (past HOLD_BYTES, so the socket was not being
    // read): both answers whole, the second saying close; nothing after them served.
    const pipelined = await sendOn(chatRequest("one") + chatRequest("two") + chatRequest("three"), 400_000);
    expect(statuses(pipelined.text)).toEqual([200, 200]);
    expect(pipelined.text).toMatch(/\r\nConnection: close\r\n[^]*"choices"[^]*\}$/);
    expect(served()).toBe(3);
    // A client that goes on sending past LINGER_BYTES is closed then, not read on until LINGER_MS.
    const flood = await sendOn(chatRequest("flood", "connection: close\r\n"), 64 << 20);
    expect(flood.error).not.toBeNull();
    expect(flood.ms).toBeLessThan(1800);
    // A client that neither sends nor closes its side after its last answer: its connection closed at LINGER_MS.
    const open = () => Number(/\nadp_gateway_client_connections (\d+)/.exec(gateway.metrics())![1]);
    const settle = async (test: () => boolean, ms: number) => {
      for (const deadline = Date.now() + ms; !test() && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 20));
    };
    await settle(() => open() === 0, 3000);
    const c = await rawConnection(gateway.url);
    c.socket.allowHalfOpen = true;
    c.socket.write(chatRequest("quiet", "connection: close\r\n"));
    await c.until((t) => t.endsWith("}"));
    await new Promise((r) => setTimeout(r, 1000));
    expect(open()).toBe(1);
    await settle(() => open() === 0, 3000);
    expect(open()).toBe(0);
    expect(c.closed()).toBe(false); // its own side still open: the gateway's end was quiet
  }, 30_000);

  it("on node:http's path, bytes refused after a pipelined request wait for its answer: it is not cut or preceded by the refusal", async () => {
    const { gateway, engines } = await fleet(1, "", { delayMs: 400 }, "node:http");
    const served = () => engines[0]!.received.filter((r) => r.path === "/v1/chat/completions").length;
    // A malformed request behind a chat: the chat's answer, then the 400, then the close.
    const bad = await rawConnection(gateway.url);
    const first = chatBody("first");
    bad.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n${first.length.toString(16)}\r\n${first}\r\n0\r\n\r\nPOST /v1/chat/completions HTTP/1.1\r\nhost: g\r\nbad header\r\n\r\n`);
    // More bytes while the chat is answered: node:http's parser, in error, refuses each read again (counted once, and
    // the chat's answer not cut by a second refusal).
    for (let i = 0; i < 5; i++) {
      await new Promise((r) => setTimeout(r, 50));
      bad.socket.write(`more garbage ${i}\r\n`);
    }
    const text = await bad.until(() => bad.closed());
    expect(statuses(text)).toEqual([200, 400]);
    expect(text).toMatch(/"choices"[^]*HTTP\/1\.1 400 [^]*malformed HTTP request/);
    expect(served()).toBe(1);
    // Bytes after a chat that said close (llhttp refuses them): its answer, saying close, then the close; no 400.
    const after = await rawConnection(gateway.url);
    after.socket.write(chatRequest("closing", "connection: close\r\n") + chatRequest("after"));
    const closing = await after.until(() => after.closed());
    expect(statuses(closing)).toEqual([200]);
    expect(closing).toMatch(/\r\nconnection: close\r\n[^]*"choices"/i);
    expect(served()).toBe(2);
    expect(gateway.metrics()).toMatch(/\nadp_gateway_requests_total\{outcome="ok"\} 2\b/);
    // Each refusal counted.
    expect(gateway.metrics()).toContain('adp_gateway_client_malformed_requests_total{status="400"} 2\n');
    // CONNECT behind a chat: the chat's answer, then the 405.
    const tunnel = await rawConnection(gateway.url);
    tunnel.socket.write(chatRequest("before a tunnel") + "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n");
    expect(statuses(await tunnel.until(() => tunnel.closed()))).toEqual([200, 405]);
    expect(served()).toBe(3);
  });

  it("on node:http's path, a refusal about the request being read is sent at once (its answer cannot come); one behind a whole request waits for that answer", async () => {
    const { gateway, engines } = await fleet(1, "timeouts: { headers_ms: 400, request_ms: 800 }\n", { delayMs: 1500 }, "node:http");
    const chunked = "POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n[1,2]\r\n";
    // A chunked body cut by a bad chunk: 400 at once, the connection closed.
    const bad = await rawConnection(gateway.url);
    const t0 = Date.now();
    bad.socket.write(`${chunked}ZZ\r\n`);
    expect(statuses(await bad.until(() => bad.closed()))).toEqual([400]);
    expect(Date.now() - t0).toBeLessThan(700);
    // A chunked body that stalls: 408 at request_ms, the connection closed.
    const stalled = await rawConnection(gateway.url);
    const t1 = Date.now();
    stalled.socket.write(chunked);
    expect(statuses(await stalled.until(() => stalled.closed(), 4000))).toEqual([408]);
    expect(Date.now() - t1).toBeLessThan(1400);
    // Behind a whole chat still being answered (1.5 s), a body that stalls: the chat's answer, then the 408.
    const behind = await rawConnection(gateway.url);
    behind.socket.write(chatRequest("first") + chunked);
    expect(statuses(await behind.until(() => behind.closed(), 5000))).toEqual([200, 408]);
    expect(engines[0]!.received.filter((r) => r.path === "/v1/chat/completions").length).toBe(1);
    // Each refused connection closed (at its client's end, or LINGER_MS after its refusal).
    await expect.poll(() => /\nadp_gateway_client_connections (\d+)/.exec(gateway.metrics())![1], { timeout: 2000 }).toBe("0");
  });

  it("limits.max_receiving_bytes defaults to 16 times max_body_bytes and is at least it", () => {
    const load = (limits: string) => loadGatewayConfig({ file: { name: "g.yaml", text: `upstreams: [ "http://127.0.0.1:1" ]\nlimits: ${limits}\n` } });
    expect(load("{}").limits.maxReceivingBytes).toBe(64 << 20);
    expect(load("{ max_body_bytes: 1048576 }").limits.maxReceivingBytes).toBe(16 << 20);
    expect(load("{ max_body_bytes: 1048576, max_receiving_bytes: 1048576 }").limits.maxReceivingBytes).toBe(1 << 20);
    expect(() => load("{ max_body_bytes: 1048576, max_receiving_bytes: 1048575 }")).toThrow(/limits\.max_receiving_bytes.*below limits\.max_body_bytes/);
  });

  it.each(["own", "node:http"] as const)("limits.max_receiving_bytes bounds the bodies being received, all connections together (%s server path): past it 503 and closed; bytes given back once a body is whole or its connection ends", async (serverPath) => {
    const { gateway, engines } = await fleet(1, "limits: { max_body_bytes: 100000, max_receiving_bytes: 300000 }\n", {}, serverPath);
    const used = () => Number(/\nadp_gateway_bound_used\{bound="receiving_body_bytes"\} (\d+)/.exec(gateway.metrics())![1]);
    const refused = () => Number(/\nadp_gateway_client_bodies_refused_total (\d+)/.exec(gateway.metrics())![1]);
    const settle = async (test: () => boolean) => {
      for (const deadline = Date.now() + 3000; !test() && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 20));
    };
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "x".repeat(89_900) }] }).padEnd(90_000, " ");
    const head = `POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`;
    // Slow clients: a head and 70,000 bytes of the body each (the own path's buffer has 140,000 then, node:http's chunks 70,000).
    const slow: Awaited<ReturnType<typeof rawConnection>>[] = [];
    for (let i = 0; i < 5; i++) {
      const c = await rawConnection(gateway.url);
      c.socket.write(head + body.slice(0, 70_000));
      slow.push(c);
      await settle(() => used() >= (i + 1) * 70_000 || refused() > 0);
    }
    // What fits is held; the first body that does not is answered 503 and its connection closed; nothing reached an engine.
    const answered = slow.filter((c) => statuses(c.text()).length > 0);
    await settle(() => slow.some((c) => c.closed()));
    expect(refused()).toBeGreaterThan(0);
    expect(used()).toBeLessThanOrEqual(300_000);
    const busy = slow.find((c) => c.closed())!;
    expect(statuses(busy.text())).toEqual([503]);
    expect(busy.text()).toContain("limits.max_receiving_bytes");
    expect(busy.text()).toContain('"code":"server_busy"');
    expect(answered.length).toBeLessThanOrEqual(slow.length - 1);
    expect(engines[0]!.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(0);
    // The first finishes its body: served, its bytes given back; the others hang up: theirs too.
    const first = slow[0]!;
    first.socket.write(body.slice(70_000));
    expect(statuses(await first.until((t) => t.endsWith("}")))).toEqual([200]);
    for (const c of slow.slice(1)) c.socket.destroy();
    await settle(() => used() === 0);
    expect(used()).toBe(0);
    expect(engines[0]!.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(1);
  });

  it("a client that pipelines and never reads holds at most what one answer needs: the gateway stops reading it", async () => {
    const { gateway, engines } = await fleet(1, "", { chunks: 50, chunkBytes: 4000 });
    const c = await rawConnection(gateway.url);
    c.socket.pause(); // never reads
    const streamed = (content: string) => {
      const body = JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content }] });
      return `POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
    };
    const many = Array.from({ length: 2000 }, (_, i) => streamed(`q${i}`)).join("");
    c.socket.write(many);
    await new Promise((r) => setTimeout(r, 1500));
    // Each answer is ~200 KB the client never takes: the gateway must not have read the whole pipeline into answers.
    const served = engines[0]!.received.filter((r) => r.path === "/v1/chat/completions").length;
    expect(served).toBeLessThan(50);
  });
});

describe("whole answers leave in the check phase, together", () => {
  // Http1Response corks a whole answer's socket until the event loop's check phase (server-response.ts).
  /** `n` loopback connections: the server's sockets, and what each client received so far. */
  async function pairs(n: number): Promise<{ server: Socket; client: Socket; received: () => string }[]> {
    const accepted: Socket[] = [];
    const listening = createNetServer((s) => accepted.push(s));
    await new Promise<void>((r) => listening.listen(0, "127.0.0.1", r));
    const port = (listening.address() as { port: number }).port;
    const clients = await Promise.all(Array.from({ length: n }, () => new Promise<Socket>((r) => { const c = connect(port, "127.0.0.1", () => r(c)); })));
    while (accepted.length < n) await new Promise((r) => setTimeout(r, 5));
    open.push({ close: async () => { for (const c of clients) c.destroy(); for (const a of accepted) a.destroy(); await new Promise((r) => listening.close(r)); } });
    return clients.map((c, i) => {
      let text = "";
      c.on("data", (d: Buffer) => (text += d.toString("latin1")));
      return { server: accepted[i]!, client: c, received: () => text };
    });
  }
  const owner = { ended: () => {}, keepAliveHeader: null, servedItsLast: false };
  /** A server path taking every request, serving each with `serve`, with bodies up to `maxBodyBytes` (the rest of it does nothing). */
  const servingPath = (serve: ServerPath["serve"], maxBodyBytes = 1 << 20): ServerPath => ({
    takes: () => true,
    maxBodyBytes,
    maxRequests: Infinity,
    keepAliveHeader: null,
    serve,
    abandoned: () => {},
    handOff: () => {},
    timedOut: () => {},
    receiving: { take: () => true, give: () => {} },
    busyAnswer: "",
    forget: () => {},
  });
  /** Resolves once `test()` holds (polled), or fails after 3 s. */
  async function until(test: () => boolean): Promise<void> {
    const deadline = Date.now() + 3000;
    while (!test()) {
      if (Date.now() > deadline) throw new Error("timed out waiting");
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  it("a whole answer's head and body are held until the poll phase's reads are done, then every connection's go out, in order; a stream's head goes at once", async () => {
    const conns = await pairs(3);
    const bodies = conns.map((_, i) => `{"answer":${i}}`);
    for (const [i, c] of conns.entries()) {
      const res = new Http1Response(c.server, owner, false);
      res.writeHead(200, { "content-type": "application/json", "content-length": String(bodies[i]!.length) });
      res.write(Buffer.from(bodies[i]!.slice(0, 5)));
      res.end(Buffer.from(bodies[i]!.slice(5)));
      // Held: nothing has reached the kernel yet.
      expect(c.server.writableLength).toBeGreaterThan(bodies[i]!.length);
    }
    // An answer ended before any write (a gateway's own error, an empty body) is held alike.
    const [own] = await pairs(1);
    new Http1Response(own!.server, owner, false).writeHead(429, { "content-type": "application/json" }).end('{"error":{}}');
    expect(own!.server.writableLength).toBeGreaterThan(0);
    const stream = new Http1Response(conns[0]!.server, owner, false);
    await new Promise((r) => setImmediate(r));
    for (const c of [...conns, own!]) expect(c.server.writableLength).toBe(0);
    await new Promise((r) => setTimeout(r, 50));
    for (const [i, c] of conns.entries()) {
      expect(c.received()).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
      expect(c.received().endsWith(`\r\n\r\n${bodies[i]}`)).toBe(true);
    }
    // A stream's head is not held (its first token's time is the client's).
    stream.writeHead(200, { "content-type": "text/event-stream" });
    stream.flushHeaders();
    expect(conns[0]!.server.writableLength).toBe(0);
  });

  it("a stream's chunks written in one poll phase leave together at its check phase, framed and in order, the last chunk with them", async () => {
    const [c] = await pairs(1);
    // Counts the socket's writes to its handle (net.Socket's one path for write and writev).
    let writes = 0;
    const socket = c!.server as Socket & { _writeGeneric(...args: unknown[]): unknown };
    const write = socket._writeGeneric.bind(socket);
    socket._writeGeneric = (...args: unknown[]) => (writes++, write(...args));
    const stream = new Http1Response(c!.server, owner, false);
    stream.writeHead(200, { "content-type": "text/event-stream" });
    stream.flushHeaders();
    expect(c!.server.writableLength).toBe(0); // the head is not held
    await until(() => c!.received().endsWith("\r\n\r\n"));
    writes = 0;
    const events = ['data: {"a":1}\n\n', "data: é\n\n", 'data: {"b":2}\n\n'];
    const large = `data: ${"x".repeat(20_000)}\n\n`; // beyond the size copied into one buffer
    expect(stream.write(Buffer.from(events[0]!))).toBe(true);
    stream.write(events[1]!); // text, its UTF-8 size framed
    stream.write(Buffer.from(events[2]!));
    stream.write(Buffer.alloc(0)); // nothing, no chunk
    expect(c!.server.writableLength).toBeGreaterThan(40); // held: nothing reached the kernel yet
    await new Promise((r) => setImmediate(r));
    expect(c!.server.writableLength).toBe(0);
    expect(writes).toBe(1); // one write for every chunk of the phase
    // A later phase: a chunk written as it is (past the size copied into one buffer), the last chunk with the end's.
    stream.write(Buffer.from(large));
    stream.end(Buffer.from("data: [DONE]\n\n"));
    const chunk = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${Buffer.from(text).toString("latin1")}\r\n`;
    await until(() => c!.received().endsWith("0\r\n\r\n"));
    expect(c!.received().slice(c!.received().indexOf("\r\n\r\n") + 4)).toBe([...events, large, "data: [DONE]\n\n"].map(chunk).join("") + "0\r\n\r\n");
  });

  it("a stream's events the engine sends apart reach the client apart: each before the engine sends the next", async () => {
    const { gateway, engines } = await fleet(1, "", { chunks: 4, chunkGapMs: 300 });
    const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "spaced" }] }) });
    // At each event's arrival, how many the engine had sent: one more each time, never all at once.
    const sentAtArrival: number[] = [];
    let text = "";
    for await (const piece of response.body!) {
      text += new TextDecoder().decode(piece);
      const events = text.split("\n\n").filter((e) => e.startsWith("data: {")).length;
      while (sentAtArrival.length < events) sentAtArrival.push(engines[0]!.streamed);
    }
    expect(sentAtArrival).toEqual([1, 2, 3, 4]);
  });

  it("a stream's events held past the socket's high-water mark go at once, and 'drain' follows before the check phase", async () => {
    const [c] = await pairs(1);
    const stream = new Http1Response(c!.server, owner, false);
    stream.writeHead(200, { "content-type": "text/event-stream" });
    stream.flushHeaders();
    const event = Buffer.from(`data: ${"y".repeat(1000)}\n\n`);
    const hwm = c!.server.writableHighWaterMark;
    let drained = false;
    let n = 0;
    while (n < 1000 && stream.write(event)) n++;
    c!.server.once("drain", () => (drained = true));
    // Held until the write that filled the buffer, then handed to the kernel in that write's turn.
    expect(n).toBe(Math.floor((hwm - 1) / (event.length + 8))); // each event framed with its size line and CRLF
    expect(c!.server.writableLength).toBe(0);
    let checked = false;
    setImmediate(() => (checked = true));
    await new Promise((r) => process.nextTick(r));
    expect(drained && !checked).toBe(true);
    stream.end();
    await until(() => c!.received().endsWith("0\r\n\r\n"));
    expect(c!.received().split("data: ").length - 1).toBe(n + 1);
  });

  it("a held answer whose connection ends or breaks before the check phase: ended, it still goes out whole; destroyed, no error and never a part", async () => {
    const [ends, breaks] = await pairs(2);
    const errors: Error[] = [];
    for (const c of [ends!, breaks!]) {
      c.server.on("error", (e) => errors.push(e));
      const res = new Http1Response(c.server, owner, false);
      res.writeHead(200, { "content-length": "2" });
      res.end(Buffer.from("ok"));
    }
    ends!.server.end();
    breaks!.server.destroy();
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setTimeout(r, 50));
    expect(ends!.received().endsWith("\r\n\r\nok")).toBe(true);
    expect(breaks!.received() === "" || breaks!.received().endsWith("\r\n\r\nok")).toBe(true);
    expect(errors).toEqual([]);
  });

  it.each(["the read buffer", "'data' events"])("a connection reading from %s keeps what it reads: bodies of many reads, and requests held across later reads, arrive intact", async (mode) => {
    // The fast path on this Node, not a silent fallback to 'data' events; the fallback is taken where net has no such path.
    expect(SERVER_READS_INTO_BUFFER).toBe(true);
    const [c] = await pairs(1);
    const handle = (c!.server as unknown as { _handle: object })._handle;
    if (mode !== "the read buffer") Object.defineProperty(handle, "useUserBuffer", { value: undefined });
    const served: Buffer[] = [];
    const path = servingPath((_req, res, body) => {
      served.push(body);
      setTimeout(() => res.writeHead(200, { "content-length": "2" }).end("ok"), 30);
    }, 1 << 22);
    new ServerConnection(c!.server, path);
    expect(c!.server.listenerCount("data")).toBe(mode === "the read buffer" ? 0 : 1);
    const head = (n: number) => Buffer.from(`POST /v1/x HTTP/1.1\r\nhost: a\r\ncontent-length: ${n}\r\n\r\n`);
    const big = Buffer.alloc(300 * 1024);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 9)) & 0xff;
    const second = Buffer.from('{"second":true}');
    // A body of many reads with the next request right behind it (held while the first is served) ...
    c!.client.write(Buffer.concat([head(big.length), big, head(second.length), second]));
    await until(() => served.length === 2);
    // ... then more reads into the same buffer while both bodies are still held here.
    const third = Buffer.alloc(70 * 1024, 0x5a);
    c!.client.write(Buffer.concat([head(third.length), third]));
    await until(() => served.length === 3);
    expect(served[0]!.equals(big)).toBe(true);
    expect(served[1]!.equals(second)).toBe(true);
    expect(served[2]!.equals(third)).toBe(true);
  });

  it("a head declaring a large body does not take its memory before the body comes: the body grows as its bytes do, and arrives whole", async () => {
    const conns = await pairs(40);
    const served: Buffer[] = [];
    const path = servingPath((_req, res, body) => {
      served.push(body);
      res.writeHead(200, { "content-length": "2" }).end("ok");
    }, 8 << 20);
    for (const c of conns) new ServerConnection(c.server, path);
    const declared = 4 << 20;
    const before = process.memoryUsage().arrayBuffers;
    for (const c of conns) c.client.write(`POST /v1/x HTTP/1.1\r\nhost: a\r\ncontent-length: ${declared}\r\n\r\n${"y".repeat(100)}`);
    await new Promise((r) => setTimeout(r, 200));
    // 40 heads declaring 4 MiB each: 160 MiB if taken at the head, 64 KiB each now.
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(32 << 20);
    // One body sent whole, in writes of odd sizes: grown several times, byte for byte what was sent.
    const rest = Buffer.alloc(declared - 100);
    for (let i = 0; i < rest.length; i++) rest[i] = (i * 13 + (i >> 11)) & 0xff;
    for (let at = 0; at < rest.length; at += 70_001) conns[0]!.client.write(rest.subarray(at, at + 70_001));
    await until(() => served.length === 1);
    expect(served[0]!.length).toBe(declared);
    expect(served[0]!.subarray(0, 100).equals(Buffer.alloc(100, "y"))).toBe(true);
    expect(served[0]!.subarray(100).equals(rest)).toBe(true);
  });

  it("a client pipelining far past HOLD_BYTES and reading its answers is read one request's room an answer, not a read an answer", async () => {
    const [c] = await pairs(1);
    const pending: (() => void)[] = [];
    const path = servingPath((_req, res) => void pending.push(() => res.writeHead(200, { "content-length": "1" }).end("k")));
    new ServerConnection(c!.server, path);
    const one = Buffer.from(`POST /v1/x HTTP/1.1\r\nhost: a\r\ncontent-length: 40\r\n\r\n${"x".repeat(40)}`);
    const flood = Buffer.concat(Array.from({ length: 40_000 }, () => one)); // ~4 MB of small requests
    c!.client.write(flood);
    await new Promise((r) => setTimeout(r, 300));
    // The first request is being served: what was read is what is held (64 KiB) and the reads that brought it.
    expect(c!.server.bytesRead).toBeLessThan(256 * 1024);
    for (let i = 0; i < 200; i++) {
      await until(() => pending.length > 0);
      pending.shift()!();
      await new Promise((r) => setTimeout(r, 1));
    }
    // 200 answers took 200 requests (~20 KB) from what is held: reading may have resumed once, never once an answer.
    expect(c!.server.bytesRead).toBeLessThan(512 * 1024);
  });

  it("the server closing in the turn an answer was held sends it before the connection ends", async () => {
    const [c] = await pairs(1);
    let connection: ServerConnection | null = null;
    // Answered at once, then the server closes within the same turn (gateway.close() from a signal does so).
    const path = servingPath((_req, res) => {
      res.writeHead(200, { "content-type": "text/plain" }).end("done");
      process.nextTick(() => connection!.closeIdle());
    });
    connection = new ServerConnection(c!.server, path);
    // The request, read by the accepted socket in a poll phase of its own.
    c!.client.write("POST /v1/x HTTP/1.1\r\nhost: a\r\ncontent-length: 0\r\n\r\n");
    await new Promise((r) => setTimeout(r, 100));
    expect(c!.received()).toMatch(/^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\ndone$/);
    expect(c!.server.destroyed).toBe(true);
  });

  it("a client that ends its side once its last answer ended still reads all of it: the socket closes once it is written", async () => {
    const [c] = await pairs(1);
    const big = Buffer.alloc(8 << 20, 0x61);
    const path = servingPath((_req, res) => void res.writeHead(200, { "content-type": "text/plain", "content-length": String(big.length) }).end(big));
    new ServerConnection(c!.server, path);
    c!.client.pause();
    c!.client.write("POST /v1/x HTTP/1.1\r\nhost: a\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
    // The answer ended with most of it still in the socket; then the client ends its side, and only then reads.
    await until(() => c!.server.writableEnded);
    expect(c!.server.writableLength).toBeGreaterThan(0);
    c!.client.end();
    await new Promise((r) => setTimeout(r, 100));
    // Closed by the server once written: the client reads to the end (or, were the answer cut, to a reset), however slow.
    const closed = new Promise((r) => c!.client.once("close", r));
    c!.client.resume();
    await until(() => c!.server.destroyed);
    await closed;
    const text = c!.received();
    expect(text.length - text.indexOf("\r\n\r\n") - 4).toBe(big.length);
  });

  it("a connection whose client does not read its last answer is closed once idle past keep_alive_ms, as between requests", async () => {
    const [c] = await pairs(1);
    // More than loopback's socket buffers take: the answer's tail stays in the socket, unsent, while the client does not read.
    const big = Buffer.alloc(32 << 20, 0x61);
    const path = servingPath((_req, res) => void res.writeHead(200, { "content-type": "text/plain", "content-length": String(big.length) }).end(big));
    const connection = new ServerConnection(c!.server, path);
    c!.client.pause();
    c!.client.write("POST /v1/x HTTP/1.1\r\nhost: a\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
    // Its last answer ended: the socket ends after it (once the client takes it).
    await until(() => c!.server.writableEnded);
    expect(c!.server.writableLength).toBeGreaterThan(0);
    const keepAliveMs = 500;
    connection.check(performance.now(), 60_000, 300_000, keepAliveMs);
    expect(c!.server.destroyed).toBe(false);
    connection.check(performance.now() + keepAliveMs + 1, 60_000, 300_000, keepAliveMs);
    expect(c!.server.destroyed).toBe(true);
  });
});

describe("the same answers whichever server path serves them", () => {
  /** Status, body and the headers a client reads (less Date and the request id), of each request. */
  async function answers(serverPath: "own" | "node:http"): Promise<unknown[]> {
    const { gateway } = await fleet(1, "", { chunks: 3 }, serverPath);
    const out: unknown[] = [];
    const calls: [string, RequestInit][] = [
      ["/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", "x-request-id": "fixed-1" }, body: chatBody("hello") }],
      ["/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", "x-request-id": "fixed-2" }, body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "s" }] }) }],
      ["/v1/completions", { method: "POST", headers: { "content-type": "application/json", "x-request-id": "fixed-3" }, body: JSON.stringify({ model: "m", prompt: "abc" }) }],
      ["/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", "x-request-id": "fixed-4" }, body: "{not json" }],
      ["/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", "x-request-id": "fixed-5" }, body: JSON.stringify({ model: "m" }) }],
    ];
    for (const [path, init] of calls) {
      const r = await fetch(`${gateway.url}${path}`, init);
      // Not compared: the date, the upstream's port, and how a body is framed (node:http chunks an error
      // answer whose head was written before its body; the own path sends its Content-Length).
      const headers = Object.fromEntries([...r.headers].filter(([k]) => !["date", "x-adp-upstream-name", "content-length", "transfer-encoding"].includes(k)));
      out.push({ status: r.status, headers, body: await r.text() });
    }
    return out;
  }

  it("whole and streamed answers, and the gateway's own errors", async () => {
    const own = await answers("own");
    const node = await answers("node:http");
    expect(own).toEqual(node);
  });
});

/** A raw engine: records each request's head lines and answers with `answer()`'s bytes. */
async function rawEngine(answer: () => string): Promise<{ url: string; heads: string[] }> {
  const { createServer } = await import("node:net");
  const heads: string[] = [];
  const server = createServer((socket) => {
    socket.on("error", () => {});
    onRawRequests(socket, (head) => {
      if (!head.startsWith("POST")) {
        socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}");
        return;
      }
      heads.push(head);
      socket.write(answer());
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, heads };
}

/** Header lines as a sorted list of `name: value` (lower-case names, values trimmed), less `leave`'s names. */
function headerList(lines: string[], leave: readonly string[]): string[] {
  return lines
    .map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()] as const)
    .filter(([n]) => !leave.includes(n))
    .map(([n, v]) => `${n}: ${v}`)
    .sort();
}

describe("header lines passed on as they came, not rebuilt: what reaches each side is what rebuilding sends", () => {
  const requestLines = fc.uniqueArray(
    fc.tuple(
      fc.constantFrom("x-session-id", "X-Custom", "authorization", "Authorization", "x-request-id", "via", "x-data-parallel-rank", "keep-alive", "proxy-authorization", "te", "trailer", "accept", "user-agent", "x-trtllm-subagent-affinity-id", "constructor", "connection"),
      fc.constantFrom("v1", "Bearer client-key-123", "Bearer other", "1.1 upstream-proxy", "3", " spaced\t", "close", "keep-alive", "a, b", "trailers", ""),
    ),
    { maxLength: 7, selector: ([n]) => n.toLowerCase() },
  );

  it.each([
    ["no keys", ""],
    ["client keys and an upstream key", "auth: { api_keys: [client-key-123] }\n"],
  ])("the request's headers reaching the engine (%s, random header sets)", async (_what, yaml) => {
    const answer = () => 'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}';
    const engine = await rawEngine(answer);
    const upstream = yaml === "" ? `  - ${engine.url}\n` : `  - { url: ${engine.url}, api_key: upstream-key }\n`;
    const gateways: Gateway[] = [];
    for (const serverPath of ["own", "node:http"] as const) {
      const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text: `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 60000 }\nupstreams:\n${upstream}${yaml}` } }), { serverPath });
      open.push(g);
      gateways.push(g);
    }
    let compared = 0;
    await fc.assert(
      fc.asyncProperty(requestLines, async (lines) => {
        const withKey = yaml === "" || lines.some(([n, v]) => n.toLowerCase() === "authorization" && v === "Bearer client-key-123") ? lines : [...lines, ["authorization", "Bearer client-key-123"] as [string, string]];
        const body = chatBody("same");
        const text = `POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\n${withKey.map(([n, v]) => `${n}: ${v}\r\n`).join("")}content-length: ${body.length}\r\n\r\n${body}`;
        const got: string[][] = [];
        for (const g of gateways) {
          const before = engine.heads.length;
          const c = await rawConnection(g.url);
          c.socket.write(text);
          await c.until((t) => statuses(t).length > 0);
          c.socket.destroy();
          if (engine.heads.length === before) return; // refused before any engine (the same way through both: compared below)
          got.push(engine.heads[engine.heads.length - 1]!.split("\r\n").slice(1));
        }
        if (got.length < 2) return;
        compared++;
        // Via differs by gateway (each has its own entry), and so does a request id each makes up; the rest must be the same header for header.
        const given = withKey.find(([n]) => n.toLowerCase() === "x-request-id")?.[1].trim() ?? "";
        const leave = /^[\x21-\x7e]{1,128}$/.test(given) ? ["via"] : ["via", "x-request-id"];
        expect(headerList(got[0]!, leave)).toEqual(headerList(got[1]!, leave));
        for (const lines of got) expect(lines.filter((l) => /^(via|x-request-id): /i.test(l))).toHaveLength(2);
      }),
      { seed: 7, numRuns: 60 },
    );
    expect(compared).toBeGreaterThan(30);
  });

  it("the answer's headers reaching the client: hop-by-hop ones and those its Connection names dropped, duplicates kept, the length as the upstream gave it", async () => {
    const answers = [
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX-Engine: a\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 2\r\n\r\n{}",
      "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: x-secret, keep-alive\r\nx-secret: s\r\nproxy-authenticate: Basic\r\ncontent-length: 5, 5\r\n\r\n{\"a\":1}".replace('{"a":1}', "{\"a\":}").slice(0, -1) + "1}",
      "HTTP/1.1 201 Created\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-a:  spaced  \r\ntrailer: x-t\r\nupgrade: h2c\r\n\r\n5\r\ndata:\r\n0\r\n\r\n",
      "HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nServer: uvicorn\r\ncontent-length: 2\r\n\r\n{}",
    ];
    let next = 0;
    const engine = await rawEngine(() => answers[Math.floor(next++ / 2) % answers.length]!);
    const got: { status: number; headers: string[]; body: string }[][] = [[], []];
    const gateways: Gateway[] = [];
    for (const serverPath of ["own", "node:http"] as const) {
      const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text: `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 60000 }\nupstreams:\n  - ${engine.url}\n` } }), { serverPath });
      open.push(g);
      gateways.push(g);
    }
    for (let i = 0; i < answers.length; i++) {
      for (const [k, g] of gateways.entries()) {
        const c = await rawConnection(g.url);
        c.socket.write(chatRequest("q", "x-request-id: fixed\r\n"));
        const text = await c.until((t) => /\r\n\r\n/.test(t) && (/\r\n0\r\n\r\n$/.test(t) || /content-length: (\d+)/i.test(t)), 3000);
        c.socket.destroy();
        const [head, ...rest] = text.split("\r\n\r\n");
        const lines = head!.split("\r\n");
        got[k]!.push({ status: Number(lines[0]!.split(" ")[1]), headers: headerList(lines.slice(1), ["date", "x-adp-upstream-name", "transfer-encoding", "content-length"]), body: rest.join("\r\n\r\n") });
      }
    }
    expect(got[0]).toEqual(got[1]);
    // What the rule drops is dropped, what it keeps is kept.
    const own = got[0]!.map((a) => a.headers.join("\n")).join("\n");
    expect(own).not.toMatch(/x-secret|proxy-authenticate|trailer|upgrade|keep-alive: timeout=5/);
    expect(own).toMatch(/set-cookie: a=1\nset-cookie: b=2/);
    expect(own).toMatch(/x-a: spaced/);
    expect(own).toMatch(/server: uvicorn/);
  });
});

describe("a connection handed to node:http", () => {
  it("answers a refused completion (401) with the connection kept, and the request pipelined behind it: three answers, and close() does not wait out its deadline", async () => {
    const engine = await startMockEngine("e");
    const g = await createGateway({ logging: { level: "silent" }, listen: { port: 0 }, upstreams: [engine.url], health: { interval_ms: 60_000 }, auth: { api_keys: ["secret"] } });
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] });
    const post = (key: string) => `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer ${key}\r\ncontent-length: ${body.length}\r\n\r\n${body}`;
    const { hostname, port } = new URL(g.url);
    // GET /v1/models hands the connection to node:http; the two POSTs come in the same read, their bodies with them.
    const text = await new Promise<string>((resolve) => {
      const s = connect({ host: hostname, port: Number(port) });
      let t = "";
      s.on("data", (d) => {
        t += d.toString("latin1");
        if ([...t.matchAll(/^HTTP\/1\.1 \d+/gm)].length === 3 && t.endsWith("}")) setTimeout(() => (s.destroy(), resolve(t)), 50);
      });
      s.on("error", () => {});
      s.on("close", () => resolve(t));
      s.on("connect", () => s.write("GET /v1/models HTTP/1.1\r\nhost: x\r\nauthorization: Bearer secret\r\n\r\n" + post("wrong") + post("secret")));
      setTimeout(() => (s.destroy(), resolve(t)), 3000);
    });
    const started = Date.now();
    await g.close(3000);
    const closeMs = Date.now() - started;
    await engine.close();
    const statuses = [...text.matchAll(/^HTTP\/1\.1 (\d+)/gm)].map((m) => m[1]);
    expect({ statuses, closes: /^connection: close\r$/im.test(text), slowClose: closeMs > 1000 }).toEqual({ statuses: ["200", "401", "200"], closes: false, slowClose: false });
  }, 20_000);
});
