// The gateway's failure handling, end to end on loopback: passive ejection on
// 5xx and its minimum duration, upstreams unreachable at start starting
// unhealthy, `x-adp-upstream` on every answer that came from (or failed on) an
// upstream, and a connect timeout answered 504.
import { createServer as createHttpServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import { metricsByIndex } from "../support/metrics.js";
import { blackhole, freePort } from "../support/processes.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const chat = (content: string) => ({ model: "m", messages: [{ role: "system", content: "You are a careful assistant. ".repeat(20) }, { role: "user", content }] });

async function post(gateway: Gateway, body: unknown, headers: Record<string, string> = {}, path = "/v1/chat/completions") {
  const response = await fetch(`${gateway.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const json = (await response.json().catch(() => null)) as { error?: { code: unknown } } | null;
  return { status: response.status, upstream: response.headers.get("x-adp-upstream"), json };
}

async function engine(name: string, behaviour = {}): Promise<MockEngine> {
  const e = await startMockEngine(name, behaviour);
  open.push(e);
  return e;
}

/** A gateway from a plain configuration object, its log lines collected. */
async function gateway(config: Record<string, unknown>, options: Record<string, unknown> = {}): Promise<{ gateway: Gateway; logs: Record<string, unknown>[] }> {
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const g = await createGateway({ listen: { port: 0 }, ...config }, { logger, ...options });
  open.push(g);
  return { gateway: g, logs };
}

const healthOf = async (g: Gateway) => {
  const r = await fetch(`${g.url}/health`);
  return { status: r.status, healthy: ((await r.json()) as { upstreams: { healthy: boolean }[] }).upstreams.map((u) => u.healthy) };
};
const metric = (g: Gateway, line: string) => metricsByIndex(g.metrics()).split("\n").find((l) => l.startsWith(line));


describe("passive ejection on 5xx", () => {
  it("answers never eject the last healthy upstream: its 5xx answers are passed on, not turned into 503s for everyone", async () => {
    const only = await engine("only", { failWith: 500 });
    const { gateway: g } = await gateway({ upstreams: [only.url], health: { interval_ms: 60_000, consecutive_5xx: 2 } });
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await post(g, chat(`q${i}`))).status);
    expect(statuses).toEqual([500, 500, 500, 500, 500, 500]);
    expect(await healthOf(g)).toEqual({ status: 200, healthy: [true] });
  });

  it("consecutive 5xx answers eject an upstream whose /health says 200; it stays out its ejection time, then checks re-admit it", async () => {
    const good = await engine("good");
    const bad = await engine("bad", { failWith: 500 });
    const { gateway: g, logs } = await gateway({
      upstreams: [good.url, bad.url],
      policy: "conversation",
      health: { interval_ms: 200, timeout_ms: 300, consecutive_5xx: 2, base_ejection_ms: 1000, healthy_threshold: 1 },
    });
    // New conversations are spread over both: the bad one answers 500 (passed through, naming it) until ejected.
    const seen: string[] = [];
    for (let i = 0; i < 24; i++) {
      const r = await post(g, chat(`q${i}`), { "x-session-id": `s${i}` });
      seen.push(`${r.upstream}:${r.status}`);
    }
    expect(seen.filter((x) => x === "1:500")).toHaveLength(2); // consecutive_5xx, then out
    expect(seen.slice(seen.lastIndexOf("1:500") + 1).every((x) => x === "0:200")).toBe(true);
    expect(await healthOf(g)).toEqual({ status: 200, healthy: [true, false] });
    expect(metric(g, 'adp_gateway_upstream_healthy{upstream="1"}')).toBe('adp_gateway_upstream_healthy{upstream="1"} 0');
    expect(logs.some((l) => l.msg?.toString().startsWith("upstream ejected") && l.upstream === new URL(bad.url).host && l.cause === "consecutive_5xx" && l.reason === "status 500" && l.ejection_ms === 1000)).toBe(true);
    // Its /health answers 200 all along (checked every 200 ms), but no check within its ejection time brings it back.
    await sleep(500);
    expect((await healthOf(g)).healthy).toEqual([true, false]);
    for (let i = 0; i < 4; i++) expect((await post(g, chat(`w${i}`), { "x-session-id": `w${i}` })).upstream).toBe("0");
    // Fixed, it is re-admitted once the ejection has lasted an interval and a check passed.
    bad.behaviour.failWith = undefined;
    const deadline = Date.now() + 4000;
    while ((await healthOf(g)).healthy[1] !== true && Date.now() < deadline) await sleep(50);
    expect((await healthOf(g)).healthy).toEqual([true, true]);
    const after = new Set<string | null>();
    for (let i = 0; i < 8; i++) after.add((await post(g, chat(`a${i}`), { "x-session-id": `a${i}` })).upstream);
    expect(after.has("1")).toBe(true);
  });

  it("a 2xx or 4xx answer resets the count: 5xx answers that are not consecutive never eject", async () => {
    const e = await engine("e");
    const spare = await engine("spare");
    // The default router places each request alone on idle upstreams at rank 0 (e); the spare keeps e from being the last healthy one.
    const { gateway: g } = await gateway({ upstreams: [e.url, spare.url], policy: "default", health: { interval_ms: 60_000, consecutive_5xx: 2 } });
    for (let i = 0; i < 4; i++) {
      e.behaviour.failWith = 503;
      expect((await post(g, chat(`x${i}`))).status).toBe(503);
      e.behaviour.failWith = i % 2 === 0 ? 400 : undefined;
      expect((await post(g, chat(`y${i}`))).status).toBe(i % 2 === 0 ? 400 : 200);
    }
    expect((await healthOf(g)).healthy).toEqual([true, true]);
    expect(metric(g, 'adp_gateway_upstream_responses_by_code_total{upstream="0",code="503"}')).toMatch(/ 4$/);
    expect(metric(g, 'adp_gateway_upstream_responses_by_code_total{upstream="0",code="400"}')).toMatch(/ 2$/);
    expect(metric(g, 'adp_gateway_upstream_responses_by_code_total{upstream="0",code="200"}')).toMatch(/ 2$/);
    expect(metric(g, 'adp_gateway_requests_by_code_total{code="503"}')).toMatch(/ 4$/);
    expect(metric(g, 'adp_gateway_upstream_responses_total{upstream="0",status="5xx"}')).toMatch(/ 4$/);
    // Then two in a row eject it, and the next request goes to the spare.
    e.behaviour.failWith = 500;
    await post(g, chat("z1"));
    await post(g, chat("z2"));
    expect(await post(g, chat("z3"))).toMatchObject({ status: 200, upstream: "1" });
    expect((await healthOf(g)).healthy).toEqual([false, true]);
  });
});

describe("upstreams unreachable at start (health.on_start: warn)", () => {
  it("start unhealthy: a single dead upstream answers 503 at once, /health says so, and it joins once its checks pass", async () => {
    const port = await freePort();
    const { gateway: g, logs } = await gateway({ upstreams: [`http://127.0.0.1:${port}`], health: { on_start: "warn", interval_ms: 200, timeout_ms: 200, healthy_threshold: 1 } });
    expect(logs.some((l) => l.index === 0 && l.upstream === `127.0.0.1:${port}` && String(l.msg).includes("unreachable at start"))).toBe(true);
    expect(await healthOf(g)).toEqual({ status: 503, healthy: [false] });
    const started = performance.now();
    const r = await post(g, chat("hi"));
    expect(r.status).toBe(503);
    expect(performance.now() - started).toBeLessThan(500);
    // The engine comes up on that port: the checks re-admit it.
    const late = createHttpServer((req, res) => {
      req.resume();
      req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end(req.url === "/health" ? "ok" : JSON.stringify({ id: "x", object: "chat.completion", choices: [] })));
    });
    await new Promise<void>((resolve) => late.listen(port, "127.0.0.1", resolve));
    open.push({ close: () => new Promise<void>((resolve) => (late.closeAllConnections(), late.close(() => resolve()))) });
    const deadline = Date.now() + 3000;
    while ((await healthOf(g)).status !== 200 && Date.now() < deadline) await sleep(50);
    expect(await healthOf(g)).toEqual({ status: 200, healthy: [true] });
    expect((await post(g, chat("again"))).status).toBe(200);
  });

  it("no request tries a dead upstream beside a live one; startUnhealthy names them for a caller that checked already", async () => {
    const live = await engine("live");
    const port = await freePort();
    const { gateway: g } = await gateway({ upstreams: [`http://127.0.0.1:${port}`, live.url], health: { on_start: "warn", interval_ms: 60_000 } });
    for (let i = 0; i < 6; i++) expect(await post(g, chat(`q${i}`), { "x-session-id": `q${i}` })).toMatchObject({ status: 200, upstream: "1" });
    expect(metric(g, 'adp_gateway_upstream_retries_total{upstream="0"}')).toBe('adp_gateway_upstream_retries_total{upstream="0"} 0');
    // Every upstream has its status-class series from the start (at 0).
    expect(metric(g, 'adp_gateway_upstream_responses_total{upstream="0",status="2xx"}')).toMatch(/ 0$/);
    const { gateway: told } = await gateway({ upstreams: [live.url] }, { startUnhealthy: [0] });
    expect(await healthOf(told)).toEqual({ status: 503, healthy: [false] });
  });
});

/** An HTTP server whose handler decides per request (for answers the mock engine does not give). */
async function server(handler: (req: import("node:http").IncomingMessage, res: import("node:http").ServerResponse) => void): Promise<{ url: string; server: Server }> {
  const s = createHttpServer((req, res) => {
    if (req.url === "/health") return void res.end("ok");
    handler(req, res);
  });
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  open.push({ close: () => new Promise<void>((resolve) => (s.closeAllConnections(), s.close(() => resolve()))) });
  return { url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, server: s };
}

describe("x-adp-upstream on every answer about an upstream", () => {
  it("504 first-byte timeout, 502 on a reset, and the request's log line names the upstream", async () => {
    let mode: "slow" | "reset" = "slow";
    const s = await server((req, res) => {
      req.resume();
      req.on("end", () => {
        if (mode === "reset") req.socket.destroy();
        else setTimeout(() => res.writeHead(200).end("{}"), 1500);
      });
    });
    const { gateway: g, logs } = await gateway({ upstreams: [s.url], timeouts: { first_byte_ms: 200 }, health: { interval_ms: 60_000, unhealthy_threshold: 10 } });
    const slow = await post(g, chat("slow"));
    expect(slow).toMatchObject({ status: 504, upstream: "0" });
    expect(slow.json?.error?.code).toBe("upstream_timeout");
    mode = "reset";
    const reset = await post(g, chat("reset"));
    expect(reset).toMatchObject({ status: 502, upstream: "0" });
    expect(reset.json?.error?.code).toBe("upstream_error");
    const lines = logs.filter((l) => l.msg === "request");
    const name = new URL(s.url).host;
    expect(lines.map((l) => [l.status, l.upstream])).toEqual([[504, name], [502, name]]);
    expect(lines.every((l) => typeof l.latency_ms === "number")).toBe(true);
  });

  it("GET /v1/models names the upstream it came from, cached or not", async () => {
    const a = await engine("a");
    const b = await engine("b");
    const { gateway: g } = await gateway({ upstreams: [a.url, b.url] });
    const first = await fetch(`${g.url}/v1/models`);
    const cached = await fetch(`${g.url}/v1/models`);
    expect(first.headers.get("x-adp-upstream")).toBe("0");
    expect(cached.headers.get("x-adp-upstream")).toBe("0");
    expect(a.received.filter((r) => r.path === "/v1/models")).toHaveLength(1);
  });

  it("GET /v1/models is cached per client credential: a keyed client (the openai client always sends one) is served from cache, another key is not given its answer", async () => {
    const a = await engine("a");
    const { gateway: g } = await gateway({ upstreams: [a.url] });
    const list = (key: string) => fetch(`${g.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    for (let i = 0; i < 3; i++) expect((await list("key-one")).status).toBe(200);
    const hits = () => a.received.filter((r) => r.path === "/v1/models").map((r) => r.headers.authorization);
    expect(hits()).toEqual(["Bearer key-one"]); // fetched once, with that client's key, then reused
    await list("key-two");
    expect(hits()).toEqual(["Bearer key-one", "Bearer key-two"]); // another key is asked for itself
    await list("key-two");
    expect(hits()).toHaveLength(2);
  });

  it("an upstream killed with the request on its connection: it received the request, so no other upstream gets it (502); alive after a reset, no retry either", async () => {
    const b = await engine("b");
    // Upstream 0 takes the request's bytes, then dies: closes its listener and the connection, as a killed process does.
    const a = createHttpServer((req, res) => {
      if (req.url === "/health") return void res.writeHead(200).end("{}");
      req.resume();
      req.on("end", () => {
        req.socket.destroy();
        a.close();
      });
    });
    await new Promise<void>((r) => a.listen(0, "127.0.0.1", r));
    const aUrl = `http://127.0.0.1:${(a.address() as AddressInfo).port}`;
    open.push({ close: () => new Promise<void>((r) => a.close(() => r())) });
    const { gateway: g } = await gateway({ upstreams: [aUrl, b.url], policy: "default", health: { interval_ms: 60_000, unhealthy_threshold: 10 } });
    const killed = await post(g, chat("killed mid-request"));
    expect(killed).toMatchObject({ status: 502, upstream: "0" });
    expect(killed.json?.error?.code).toBe("upstream_error");
    expect(metric(g, 'adp_gateway_upstream_retries_total{upstream="0"}')).toMatch(/ 0$/);
    // Alive after the reset (it still listens): the request may be running there, so it is not sent again.
    const alive = createHttpServer((req, res) => {
      if (req.url === "/health") return void res.writeHead(200).end("{}");
      req.resume();
      req.on("end", () => req.socket.destroy());
    });
    await new Promise<void>((r) => alive.listen(0, "127.0.0.1", r));
    open.push({ close: () => new Promise<void>((r) => alive.close(() => r())) });
    const aliveUrl = `http://127.0.0.1:${(alive.address() as AddressInfo).port}`;
    const { gateway: g3 } = await gateway({ upstreams: [aliveUrl, b.url], policy: "default", health: { interval_ms: 60_000, unhealthy_threshold: 10 } });
    const reset = await post(g3, chat("reset, engine alive"));
    expect(reset).toMatchObject({ status: 502, upstream: "0" });
    expect(b.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(0); // neither was sent on
  });

  it("when every try failed to connect, the answer names the last upstream tried", async () => {
    const ports = [await freePort(), await freePort()];
    const { gateway: g, logs } = await gateway({ upstreams: ports.map((p) => `http://127.0.0.1:${p}`), policy: "default", health: { interval_ms: 60_000, unhealthy_threshold: 10 } });
    const r = await post(g, chat("x"));
    expect(r.status).toBe(502);
    expect(r.json?.error?.code).toBe("upstream_unreachable");
    expect(["0", "1"]).toContain(r.upstream);
    expect(metric(g, `adp_gateway_upstream_retries_total{upstream="${r.upstream === "0" ? 1 : 0}"}`)).toMatch(/ 1$/);
    expect(logs.find((l) => l.msg === "request")!.upstream).toBe(`127.0.0.1:${ports[Number(r.upstream)]}`);
  });
});


describe("connect timeouts", () => {
  it("a connect timeout is retried elsewhere, and answers 504 when every try timed out; a refused connection stays 502", async () => {
    const hole = await blackhole();
    open.push(hole);
    const live = await engine("live");
    const health = { interval_ms: 60_000, timeout_ms: 5000, unhealthy_threshold: 10 };
    const { gateway: alone } = await gateway({ upstreams: [`http://127.0.0.1:${hole.port}`], timeouts: { connect_ms: 300 }, health });
    const started = performance.now();
    const r = await post(alone, chat("ct"));
    expect(r).toMatchObject({ status: 504, upstream: "0" });
    expect(r.json?.error?.code).toBe("upstream_connect_timeout");
    expect(performance.now() - started).toBeLessThan(2000);
    const { gateway: two } = await gateway({ upstreams: [`http://127.0.0.1:${hole.port}`, live.url], policy: "conversation", timeouts: { connect_ms: 300 }, health });
    for (let i = 0; i < 3; i++) expect(await post(two, chat(`c${i}`), { "x-session-id": `c${i}` })).toMatchObject({ status: 200, upstream: "1" });
    const { gateway: refused } = await gateway({ upstreams: [`http://127.0.0.1:${await freePort()}`], health });
    expect(await post(refused, chat("r"))).toMatchObject({ status: 502, upstream: "0" });
  });
});
