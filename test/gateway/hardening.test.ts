// The gateway against hostile clients and configurations (an attacker's review,
// each finding reduced to a test): slow and oversized bodies, bodies that make
// engines fail, deep nesting, clients that hang up, shutdown with a queue,
// header and key hygiene, and configurations built to be slow or explosive.
import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, GatewayConfigError, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type EngineBehaviour, type MockEngine } from "../support/mock-engine.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

async function fleet(n: number, yaml = "", behaviour: EngineBehaviour = {}): Promise<{ gateway: Gateway; engines: MockEngine[] }> {
  const engines: MockEngine[] = [];
  for (let i = 0; i < n; i++) {
    const e = await startMockEngine(`e${i}`, { ...behaviour });
    open.push(e);
    engines.push(e);
  }
  const text = `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 200, timeout_ms: 500, unhealthy_threshold: 2, healthy_threshold: 1, consecutive_5xx: 2, consecutive_gateway_failures: 2 }\nupstreams:\n${engines.map((e) => `  - ${e.url}\n`).join("")}${yaml}`;
  const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }));
  open.push(gateway);
  return { gateway, engines };
}

/** Sends raw bytes on a new connection; resolves with what came back and how long until the server closed it. */
function raw(url: string, write: (socket: ReturnType<typeof connect>) => void, waitMs = 3000): Promise<{ text: string; closedAfterMs: number | null }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const started = Date.now();
    const socket = connect(Number(port), hostname);
    let text = "";
    let closedAfterMs: number | null = null;
    socket.on("data", (d) => (text += d.toString("latin1")));
    socket.on("error", () => {});
    socket.on("close", () => {
      closedAfterMs = Date.now() - started;
      clearTimeout(timer);
      resolve({ text, closedAfterMs });
    });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ text, closedAfterMs });
    }, waitMs);
    socket.on("connect", () => write(socket));
  });
}

const chat = { model: "m", messages: [{ role: "user", content: "hi" }] };
const post = (gateway: Gateway, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

describe("hostile clients", () => {
  it("a body trickled a byte at a time is cut off at timeouts.request_ms", async () => {
    const { gateway } = await fleet(1, "timeouts: { request_ms: 400 }\n");
    const r = await raw(gateway.url, (s) => {
      s.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{");
      const trickle = setInterval(() => (s.writable ? s.write(" ") : clearInterval(trickle)), 150);
      s.on("close", () => clearInterval(trickle));
    });
    expect(r.closedAfterMs).not.toBeNull();
    expect(r.closedAfterMs!).toBeLessThan(2500);
    expect(r.text).toMatch(/^HTTP\/1\.1 408 /);
  });

  it("oversized headers get 431, garbage gets 400", async () => {
    const { gateway } = await fleet(1);
    const big = await raw(gateway.url, (s) => s.write(`GET /health HTTP/1.1\r\nhost: x\r\nx-big: ${"a".repeat(100_000)}\r\n\r\n`));
    expect(big.text).toMatch(/^HTTP\/1\.1 431 /);
    const junk = await raw(gateway.url, (s) => s.write("NOT HTTP AT ALL\r\n\r\n"));
    expect(junk.text).toMatch(/^HTTP\/1\.1 400 /);
  });

  it("a body over the limit is answered 413 and its connection closed, not read to its end", async () => {
    const { gateway } = await fleet(1, "limits: { max_body_bytes: 4096 }\n");
    const r = await raw(gateway.url, (s) => {
      s.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000000000\r\n\r\n");
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = setInterval(() => (s.writable ? s.write(chunk) : clearInterval(pump)), 5);
      s.on("close", () => clearInterval(pump));
    });
    expect(r.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(r.text.toLowerCase()).toContain("connection: close");
    expect(r.closedAfterMs).not.toBeNull();
  });

  it("a chunked body over the limit is answered 413 and the gateway goes on serving", async () => {
    const { gateway } = await fleet(1, "limits: { max_body_bytes: 4096 }\n");
    const r = await raw(gateway.url, (s) => {
      s.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
      const chunk = Buffer.alloc(2048, 0x20);
      for (let i = 0; i < 8; i++) s.write(`${chunk.length.toString(16)}\r\n${chunk.toString()}\r\n`);
    });
    expect(r.text).toMatch(/^HTTP\/1\.1 413 /);
    expect((await post(gateway, chat)).status).toBe(200);
  });

  it("/v1/models never sends a client's gateway key on to an upstream", async () => {
    const { gateway, engines } = await fleet(1, "auth: { api_keys: [client-key-123] }\n");
    const response = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: "Bearer client-key-123" } });
    expect(response.status).toBe(200);
    expect(engines[0]!.received.find((r) => r.path === "/v1/models")!.headers.authorization).toBeUndefined();
  });

  it("Expect: 100-continue with a body declared over the limit gets 413 without 100 Continue", async () => {
    const { gateway } = await fleet(1, "limits: { max_body_bytes: 4096 }\n");
    const r = await raw(gateway.url, (s) => s.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 999999\r\n\r\n"));
    expect(r.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(r.text).not.toContain("100 Continue");
  });

  it("answers 4xx never eject an upstream; 5xx answers in a row do (passive ejection), but never the last healthy one", async () => {
    const { gateway, engines } = await fleet(2, "", { failWith: 400 });
    for (let i = 0; i < 8; i++) expect((await post(gateway, chat)).status).toBe(400);
    const healthy = async () => ((await (await fetch(`${gateway.url}/health`)).json()) as { upstreams: { healthy: boolean }[] }).upstreams.map((u) => u.healthy);
    expect(await healthy()).toEqual([true, true]);
    for (const e of engines) e.behaviour.failWith = 500;
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await post(gateway, chat)).status);
    // consecutive_5xx (2) answers 500 eject the first to fail twice; the other, the last healthy one, is never ejected by answers: no 503s.
    expect(statuses).toEqual([500, 500, 500, 500, 500, 500]);
    expect((await healthy()).filter((h) => h)).toHaveLength(1);
  });

  it("message content nested too deeply is a 400, not a 500", async () => {
    const { gateway } = await fleet(1);
    const deep = "[".repeat(20_000) + "]".repeat(20_000);
    const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: `{"model":"m","messages":[{"role":"user","content":[${deep}]}]}` });
    expect(response.status).toBe(400);
  });

  it("a client that hangs up mid-body is counted as client_closed, not as an internal error", async () => {
    const { gateway } = await fleet(1);
    await raw(gateway.url, (s) => {
      s.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"model\"");
      setTimeout(() => s.destroy(), 50);
    }, 500);
    await new Promise((r) => setTimeout(r, 100));
    const text = gateway.metrics();
    expect(text).toContain('adp_gateway_requests_total{outcome="client_closed"} 1');
    expect(text).not.toContain('outcome="error"');
  });

  it("headers named by Connection are not forwarded; with client keys, the client's key stays at the gateway", async () => {
    const { gateway, engines } = await fleet(1, "auth: { api_keys: [client-key-123] }\n");
    // Raw bytes: fetch itself drops a Connection header.
    const body = JSON.stringify(chat);
    const r = await raw(gateway.url, (s) => s.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer client-key-123\r\nconnection: x-strip-me, close\r\nx-strip-me: secret\r\nx-keep: 1\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`));
    expect(r.text).toMatch(/^HTTP\/1\.1 200 /);
    const got = engines[0]!.received.find((r) => r.path === "/v1/chat/completions")!;
    expect(got.headers["x-strip-me"]).toBeUndefined();
    expect(got.headers["x-keep"]).toBe("1");
    expect(got.headers.authorization).toBeUndefined();
  });

  it("on close, requests still waiting for an upstream are answered 503 at once", async () => {
    const { gateway } = await fleet(1, "limits: { max_in_flight_per_upstream: 1, queue_timeout_ms: 60000 }\n", { delayMs: 600 });
    const first = post(gateway, chat);
    await new Promise((r) => setTimeout(r, 50));
    const queued = post(gateway, chat);
    await new Promise((r) => setTimeout(r, 50));
    const closed = gateway.close(5_000);
    const [a, b] = await Promise.all([first, queued]);
    await closed;
    open.pop(); // closed already
    expect(a.status).toBe(200);
    expect(b.status).toBe(503);
    expect(((await b.json()) as { error: { code: string } }).error.code).toBe("shutting_down");
  });
});

describe("hostile configurations", () => {
  const load = (text: string, env: Record<string, string> = {}) => loadGatewayConfig({ file: { name: "g.yaml", text }, env });
  const issues = (fn: () => unknown): string[] => {
    try {
      fn();
    } catch (error) {
      expect(error).toBeInstanceOf(GatewayConfigError);
      return (error as GatewayConfigError).issues.map((i) => `${i.where}: ${i.field}: ${i.message}`);
    }
    throw new Error("expected a GatewayConfigError");
  };

  it("an alias bomb is one configuration error, not a crash", () => {
    const bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]", "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]", "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]", "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]", "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]", "upstreams: [http://127.0.0.1:1]"].join("\n");
    expect(issues(() => load(bomb)).join("\n")).toMatch(/alias/i);
  });

  it("a key set twice is reported with its line (in one pass, not by comparing every pair)", () => {
    expect(issues(() => load("upstreams: [http://127.0.0.1:1]\nlimits:\n  queue_size: 1\n  queue_size: 2\n")).join("\n")).toContain("g.yaml:4: queue_size: is set twice in one mapping");
  });

  it("20,000 unknown keys are reported by their first hundred, quickly", () => {
    const text = "upstreams: [http://127.0.0.1:1]\n" + Array.from({ length: 20_000 }, (_, i) => `junk_${i}: 1`).join("\n");
    const started = performance.now();
    const found = issues(() => load(text));
    expect(performance.now() - started).toBeLessThan(3000);
    expect(found).toHaveLength(101);
    expect(found.at(-1)).toContain("and 19900 more problems");
  });

  it("an empty --host is refused (it would listen on every interface); a huge one is reported briefly", () => {
    expect(issues(() => loadGatewayConfig({ flags: { host: "", upstreams: ["http://127.0.0.1:1"] } })).join("\n")).toContain("--host: host: must be an address or host name");
    const found = issues(() => load(`listen: { host: ${"h".repeat(100_000)} }\nupstreams: [http://127.0.0.1:1]`)).join("\n");
    expect(found.length).toBeLessThan(500);
  });

  it("a YAML syntax error names its own line, once", () => {
    const found = issues(() => load("upstreams:\n  - url: http://127.0.0.1:1\nlimits:\n   max_body_bytes: 4096\n  queue_size: 3\n"));
    expect(found.length).toBeLessThanOrEqual(2);
    expect(found[0]).toMatch(/^g\.yaml:[45]: /);
  });

  it("createGateway checks a plain configuration object by the file's rules", async () => {
    await expect(createGateway({ listen: { host: "127.0.0.1", port: 0 }, upstreams: [] })).rejects.toThrow(GatewayConfigError);
    await expect(createGateway({ upstreams: ["127.0.0.1:8001"], limits: { queue_size: -1 } })).rejects.toThrow(/upstreams\[0\]\.url: has no scheme[\s\S]*limits\.queue_size/);
    await expect(createGateway(null as never)).rejects.toThrow(TypeError);
  });

  it("client keys of any non-empty length, from the file or the environment; keys are trimmed; empty ones are refused", () => {
    expect(load("upstreams: [http://127.0.0.1:1]\nauth: { api_keys_env: KEYS }", { KEYS: "k, kk" }).auth.apiKeys).toEqual(["k", "kk"]);
    expect(issues(() => load("upstreams: [http://127.0.0.1:1]\nauth: { api_keys_env: KEYS }", { KEYS: " , " })).join("\n")).toContain("auth.api_keys_env");
    expect(issues(() => load("upstreams: [http://127.0.0.1:1]\nauth: { api_keys: [''] }")).join("\n")).toContain("auth.api_keys");
    const config = load("upstreams: [http://127.0.0.1:1]\nauth: { api_keys: [' padded-key-123 '] }");
    expect(config.auth.apiKeys).toEqual(["padded-key-123"]);
  });
});
