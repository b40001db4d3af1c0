// The gateway's delivery rule, outlier detection and its own timers (issue #22),
// end to end on loopback: mock engines (test/support/mock-engine.ts) and tiny
// node:http engines written here for what the mock lacks (engines that hang,
// reset, or exit after receiving a request), the official `openai` client where
// what a client sees matters.
//
// - Delivery: a request goes to another upstream only when provably never
//   delivered (refused, connect timeout); an engine that received it and then
//   died, reset, answered 5xx or timed out is that request's answer (502, 5xx,
//   504), and no other engine ever receives it.
// - Outlier detection: first-byte timeouts eject a wedged engine whose /health
//   says 200; resets never eject the last upstream; max_ejected_percent bounds
//   ejections; ejection time grows with recent ejections; 5xx answers and
//   gateway failures are counted apart.
// - Timeouts fire near their setting (first_byte_ms, idle_ms), not up to 500 ms late.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import OpenAI, { APIConnectionError, APIError } from "openai";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type EngineBehaviour, type MockEngine } from "../support/mock-engine.js";
import { metricsByIndex } from "../support/metrics.js";
import { blackhole, freePort } from "../support/processes.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const messages = (content: string) => [{ role: "system" as const, content: "You are a careful assistant. ".repeat(20) }, { role: "user" as const, content }];
const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: "m", messages: messages(content), ...extra });

async function engine(name: string, behaviour: EngineBehaviour = {}): Promise<MockEngine> {
  const e = await startMockEngine(name, behaviour);
  open.push(e);
  return e;
}

/** A tiny engine: /health answers 200; a completion's body is read whole and counted, then `handler` answers it (or not). */
interface Tiny {
  readonly url: string;
  readonly server: Server;
  received: number;
}
async function tiny(handler: (req: IncomingMessage, res: ServerResponse, self: Tiny) => void): Promise<Tiny> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.url === "/health") return void res.writeHead(200, { "content-type": "application/json" }).end("{}");
      self.received++;
      handler(req, res, self);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const self: Tiny = { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server, received: 0 };
  open.push({ close: () => new Promise<void>((r) => (server.closeAllConnections(), server.listening ? server.close(() => r()) : r())) });
  return self;
}
/** A whole chat completion, as an engine answers one. */
const answer = (res: ServerResponse, status = 200) => {
  const body = status === 200 ? JSON.stringify({ id: "c", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }] }) : JSON.stringify({ error: { message: `engine says ${status}`, type: "server_error", param: null, code: null } });
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) }).end(body);
};

/** A gateway from a plain configuration object, its log lines collected. */
async function gateway(config: Record<string, unknown>): Promise<{ gateway: Gateway; logs: Record<string, unknown>[] }> {
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const g = await createGateway({ listen: { port: 0 }, ...config }, { logger });
  open.push(g);
  return { gateway: g, logs };
}

const client = (g: Gateway) => new OpenAI({ baseURL: `${g.url}/v1`, apiKey: "x", maxRetries: 0 });
/** The error a call rejects with (fails the test when it resolves). */
async function rejection(p: Promise<unknown>): Promise<APIError> {
  const error = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(APIError);
  return error as APIError;
}

async function post(g: Gateway, body: unknown) {
  const r = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const json = (await r.json().catch(() => null)) as { error?: { code?: unknown } } | null;
  return { status: r.status, upstream: r.headers.get("x-adp-upstream"), name: r.headers.get("x-adp-upstream-name"), code: json?.error?.code };
}

type UpstreamState = { index: number; name: string; healthy: boolean; ejected?: string };
const health = async (g: Gateway) => {
  const r = await fetch(`${g.url}/health`);
  return { status: r.status, upstreams: ((await r.json()) as { upstreams: UpstreamState[] }).upstreams };
};
/** One series' value from /metrics (upstreams by index), or NaN when absent. */
const metric = (g: Gateway, series: string) => Number(metricsByIndex(g.metrics()).split("\n").find((l) => l.startsWith(`${series} `))?.slice(series.length + 1) ?? NaN);
/** A metric summed over all its series. */
const total = (g: Gateway, name: string) =>
  g
    .metrics()
    .split("\n")
    .filter((l) => l.startsWith(`${name}{`))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);


/** A port where connecting hangs (test/support/processes.ts), closed after the test. */
async function hole(): Promise<number> {
  const h = await blackhole();
  open.push(h);
  return h.port;
}

/** Checks on a long interval: only traffic changes an upstream's health. */
const quiet = { interval_ms: 60_000, unhealthy_threshold: 10 };

describe("the delivery rule: another upstream only when provably never delivered", () => {
  it("a refused connection is retried on another upstream, and the client gets that one's answer", async () => {
    // Old code (35819c5): retried too, but its answer did not name the upstream (no x-adp-upstream-name) and its log line had no request_id.
    const live = await engine("live");
    const { gateway: g, logs } = await gateway({ upstreams: [{ url: `http://127.0.0.1:${await freePort()}`, name: "dead" }, { url: live.url, name: "live" }], policy: "default", health: quiet });
    const { data, response } = await client(g).chat.completions.create({ model: "m", messages: messages("refused first") }).withResponse();
    expect(data.choices[0]!.message.content).toBe("hello from live");
    expect(response.headers.get("x-adp-upstream")).toBe("1");
    expect(response.headers.get("x-adp-upstream-name")).toBe("live");
    expect(total(g, "adp_gateway_upstream_retries_total")).toBe(1);
    expect(metric(g, 'adp_gateway_upstream_retries_total{upstream="0"}')).toBe(1);
    const line = logs.find((l) => l.msg === "request")!;
    expect(line).toMatchObject({ status: 200, upstream: "live", request_id: response.headers.get("x-request-id") });
  });

  it("a connect that hangs (connect_ms) is retried on another upstream, and counts as the hung one's gateway failure", async () => {
    // Old code: retried too, but never named the upstream nor counted connect timeouts under consecutive_gateway_failures (no such setting: refused config).
    const port = await hole();
    const live = await engine("live");
    const { gateway: g } = await gateway({
      upstreams: [{ url: `http://127.0.0.1:${port}`, name: "hole" }, { url: live.url, name: "live" }],
      policy: "default",
      timeouts: { connect_ms: 300 },
      health: { ...quiet, timeout_ms: 5000, consecutive_gateway_failures: 1 },
    });
    const started = performance.now();
    const { response } = await client(g).chat.completions.create({ model: "m", messages: messages("hang first") }).withResponse();
    const ms = performance.now() - started;
    expect(response.headers.get("x-adp-upstream-name")).toBe("live");
    expect(ms).toBeGreaterThanOrEqual(250); // it did wait on the hole's connect first
    expect(ms).toBeLessThan(300 + 250); // the gateway times the connect itself: undici's timer, on a half-second tick, cut at 0.5-1.0 s
    expect(metric(g, 'adp_gateway_upstream_retries_total{upstream="0"}')).toBe(1);
    expect(live.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(1);
    // One gateway failure ejected it: the next requests go straight to the live one, with no retry.
    expect(metric(g, 'adp_gateway_upstream_ejections_total{upstream="0",cause="gateway_failures"}')).toBe(1);
    for (let i = 0; i < 3; i++) expect(await post(g, chat(`then ${i}`))).toMatchObject({ status: 200, name: "live" });
    expect(total(g, "adp_gateway_upstream_retries_total")).toBe(1);
  });

  it("one request kills the fleet no more: engines that exit after receiving it cost one engine, and the client gets a 502", async () => {
    // Old code: a broken connection to an upstream that then refused connections counted as "its process is gone, it cannot be running the request",
    // so the request went to the next engine, which died too: one request took down all three.
    const exitsAfterReceiving = () =>
      tiny((req, _res, self) =>
        setTimeout(() => {
          self.server.close(); // as a killed process: its listener goes, and its connection
          req.socket.destroy();
        }, 300),
      );
    const engines = [await exitsAfterReceiving(), await exitsAfterReceiving(), await exitsAfterReceiving()];
    const { gateway: g } = await gateway({ upstreams: engines.map((e) => e.url), policy: "default", health: quiet });
    const error = await rejection(client(g).chat.completions.create({ model: "m", messages: messages("the poison request") }));
    expect(error).not.toBeInstanceOf(APIConnectionError);
    expect(error.status).toBe(502);
    expect(error.code).toBe("upstream_error");
    await sleep(200); // nothing sends it anywhere later either
    expect(engines.map((e) => e.received).reduce((a, b) => a + b)).toBe(1);
    const at = Number(error.headers!.get("x-adp-upstream"));
    expect(engines[at]!.received).toBe(1); // the one it named; the other two received nothing
    expect(error.headers!.get("x-adp-upstream-name")).toBe(new URL(engines[at]!.url).host);
    expect(total(g, "adp_gateway_upstream_retries_total")).toBe(0);
  });

  it("a reset from a live engine after it received the request: 502, and no other engine receives it", async () => {
    // Old code: also 502 without a retry, but its answer did not name the upstream (x-adp-upstream-name).
    const resets = await tiny((req) => req.socket.resetAndDestroy());
    const other = await engine("other");
    const { gateway: g } = await gateway({ upstreams: [{ url: resets.url, name: "resets" }, { url: other.url, name: "other" }], policy: "default", health: quiet });
    const error = await rejection(client(g).chat.completions.create({ model: "m", messages: messages("reset me") }));
    expect(error.status).toBe(502);
    expect(error.code).toBe("upstream_error");
    expect(error.headers!.get("x-adp-upstream")).toBe("0");
    expect(error.headers!.get("x-adp-upstream-name")).toBe("resets");
    expect(resets.received).toBe(1);
    expect(other.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(0);
    expect(total(g, "adp_gateway_upstream_retries_total")).toBe(0);
  });

  it("5xx answers are passed through as the engine gave them, not retried", async () => {
    // Old code: passed through too, but without x-adp-upstream-name (and a 5xx counted with connect errors toward one passive count).
    const failing = await engine("failing", { failWith: 503 });
    const other = await engine("other");
    const { gateway: g } = await gateway({ upstreams: [{ url: failing.url, name: "failing" }, { url: other.url, name: "other" }], policy: "default", health: quiet });
    for (const status of [503, 500, 502]) {
      failing.behaviour.failWith = status;
      const error = await rejection(client(g).chat.completions.create({ model: "m", messages: messages(`fail ${status}`) }));
      expect(error.status).toBe(status);
      expect(error.message).toContain("engine failure"); // the engine's own body
      expect(error.headers!.get("x-adp-upstream-name")).toBe("failing");
    }
    expect(failing.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(3);
    expect(other.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(0);
    expect(total(g, "adp_gateway_upstream_retries_total")).toBe(0);
  });

  it("a first-byte timeout is a 504 naming its upstream, not retried", async () => {
    // Old code: also 504 without a retry, but no x-adp-upstream-name, and undici's timer fired up to 500 ms late.
    const slow = await engine("slow", { delayMs: 2000 });
    const other = await engine("other");
    const { gateway: g } = await gateway({ upstreams: [{ url: slow.url, name: "slow" }, { url: other.url, name: "other" }], policy: "default", timeouts: { first_byte_ms: 300 }, health: quiet });
    const r = await post(g, chat("slow one"));
    expect(r).toMatchObject({ status: 504, upstream: "0", name: "slow", code: "upstream_timeout" });
    expect(slow.received.filter((x) => x.path === "/v1/chat/completions")).toHaveLength(1);
    expect(other.received.filter((x) => x.path === "/v1/chat/completions")).toHaveLength(0);
    expect(total(g, "adp_gateway_upstream_retries_total")).toBe(0);
  });
});

describe("outlier detection", () => {
  it("a wedged engine (its /health 200, its completions never answered) is ejected by first-byte timeouts, and its traffic goes to the healthy one", async () => {
    // Old code: first-byte timeouts counted toward nothing, and /health passed: the wedged engine kept its traffic, every request there a 504.
    const wedged = await tiny(() => {});
    const good = await engine("good");
    const { gateway: g, logs } = await gateway({
      upstreams: [{ url: wedged.url, name: "wedged" }, { url: good.url, name: "good" }],
      policy: "default",
      timeouts: { first_byte_ms: 200 },
      health: { interval_ms: 100, healthy_threshold: 1, consecutive_gateway_failures: 2 },
    });
    expect(await post(g, chat("a"))).toMatchObject({ status: 504, name: "wedged" });
    expect(await post(g, chat("b"))).toMatchObject({ status: 504, name: "wedged" });
    expect(metric(g, 'adp_gateway_upstream_ejections_total{upstream="0",cause="gateway_failures"}')).toBe(1);
    expect(logs.some((l) => String(l.msg).startsWith("upstream ejected by outlier detection") && l.upstream === "wedged" && l.cause === "gateway_failures")).toBe(true);
    await sleep(400); // several passing health checks: within its ejection time they do not count
    const h = await health(g);
    expect(h.status).toBe(200);
    expect(h.upstreams[0]).toMatchObject({ healthy: false, ejected: "gateway_failures" });
    expect(h.upstreams[1]!.ejected).toBeUndefined();
    for (let i = 0; i < 6; i++) expect(await post(g, chat(`later ${i}`))).toMatchObject({ status: 200, name: "good" });
    expect(wedged.received).toBe(2);
  });

  it("resets never eject the last upstream taking requests: every request gets its 502, never a 503", async () => {
    // Old code: resets counted toward a passive ejection that ignored the rest of the fleet: the only upstream went out and everyone got 503s.
    const resets = await tiny((req) => req.socket.resetAndDestroy());
    const { gateway: g } = await gateway({ upstreams: [resets.url], health: { ...quiet, consecutive_gateway_failures: 2 } });
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await post(g, chat(`r${i}`))).status);
    expect(statuses).toEqual(Array(8).fill(502));
    expect(resets.received).toBe(8);
    const h = await health(g);
    expect(h.status).toBe(200);
    expect(h.upstreams.map((u) => u.healthy)).toEqual([true]);
    expect(metric(g, 'adp_gateway_upstream_ejections_refused_total{upstream="0"}')).toBeGreaterThan(0);
    expect(metric(g, 'adp_gateway_upstream_ejections_total{upstream="0",cause="gateway_failures"}')).toBe(0);
  });

  it("max_ejected_percent (default 50): of 4 upstreams all answering 500, at most 2 are ejected", async () => {
    // Old code: 5xx answers ejected every upstream but the last healthy one: 3 of 4 out.
    const fleet: MockEngine[] = [];
    for (let i = 0; i < 4; i++) fleet.push(await engine(`e${i}`, { failWith: 500 }));
    const { gateway: g } = await gateway({ upstreams: fleet.map((e) => e.url), policy: "default", health: { ...quiet, consecutive_5xx: 1 } });
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await post(g, chat(`q${i}`))).status);
    expect(statuses).toEqual(Array(12).fill(500));
    const h = await health(g);
    expect(h.status).toBe(200);
    expect(h.upstreams.filter((u) => !u.healthy)).toHaveLength(2); // floor(4 × 50%), and consecutive_5xx 1 ejects whenever allowed
    expect(h.upstreams.filter((u) => u.ejected === "consecutive_5xx")).toHaveLength(2);
    expect(total(g, "adp_gateway_upstream_ejections_total")).toBe(2);
    expect(total(g, "adp_gateway_upstream_ejections_refused_total")).toBeGreaterThan(0);
  });

  it("ejection time grows: ejected again soon after re-admission, an upstream stays out about twice as long; passing checks re-admit it after", async () => {
    // Old code: a passive ejection lasted one health interval, every time: no growth.
    // Checks run at most every 100 ms (interval_ms's floor), so an out-time is base to base + ~110 ms: base 1000 keeps 2× apart from 1×.
    const base = 1000;
    let failing = true;
    const bad = await tiny((_req, res) => answer(res, failing ? 500 : 200));
    const good = await engine("good");
    const { gateway: g, logs } = await gateway({
      upstreams: [{ url: bad.url, name: "bad" }, { url: good.url, name: "good" }],
      policy: "default",
      health: { interval_ms: 100, timeout_ms: 500, healthy_threshold: 1, consecutive_5xx: 1, base_ejection_ms: base },
    });
    /** Ejects it with one 500, then polls /health until it is back: how long it was out (ms). */
    const outTime = async (content: string) => {
      expect(await post(g, chat(content))).toMatchObject({ status: 500, name: "bad" });
      const ejectedAt = performance.now();
      expect((await health(g)).upstreams[0]).toMatchObject({ healthy: false, ejected: "consecutive_5xx" });
      const deadline = ejectedAt + 10 * base;
      while (!(await health(g)).upstreams[0]!.healthy && performance.now() < deadline) await sleep(10);
      expect((await health(g)).upstreams[0]!.healthy).toBe(true);
      return performance.now() - ejectedAt;
    };
    const first = await outTime("first");
    const second = await outTime("second"); // at once: it stayed in far less than one base ejection time
    expect(first).toBeGreaterThanOrEqual(0.9 * base); // its /health passed every 100 ms, but not within the ejection time
    expect(second).toBeGreaterThanOrEqual(1.7 * first);
    const ejections = logs.filter((l) => String(l.msg).startsWith("upstream ejected by outlier detection"));
    expect(ejections.map((l) => [l.upstream, l.cause, l.ejection_ms])).toEqual([
      ["bad", "consecutive_5xx", base],
      ["bad", "consecutive_5xx", 2 * base],
    ]);
    // Re-admitted, fixed: it takes requests again.
    failing = false;
    expect(await post(g, chat("fixed"))).toMatchObject({ status: 200, name: "bad" });
  });

  it("consecutive 5xx and gateway failures count apart: any answer resets the failures, only an answer under 500 resets the 5xx count", async () => {
    // Old code: one passive count for both (a 500 and a reset each added to it), so reset, 500, reset ejected at a threshold of 2.
    let mode: "reset" | number = 200;
    const x = await tiny((req, res) => (mode === "reset" ? req.socket.resetAndDestroy() : answer(res, mode)));
    const spare = await engine("spare");
    const { gateway: g } = await gateway({ upstreams: [{ url: x.url, name: "x" }, { url: spare.url, name: "spare" }], policy: "default", health: { ...quiet, consecutive_5xx: 2, consecutive_gateway_failures: 2 } });
    let n = 0;
    const send = async (m: typeof mode) => {
      mode = m;
      const r = await post(g, chat(`q${n++}`));
      expect(r).toMatchObject({ status: m === "reset" ? 502 : m, name: "x" });
    };
    const ejected = async () => (await health(g)).upstreams[0]!.ejected ?? null;
    // A 500 between two resets is an answer: the failures start again, so two resets that are not consecutive do not eject.
    await send("reset");
    await send(500);
    await send("reset");
    expect(await ejected()).toBeNull();
    // A 400 resets the 5xx count: the 500 before it and the one after are not consecutive.
    await send(400);
    await send(500);
    expect(await ejected()).toBeNull();
    // A reset between two 500s is no answer: it resets nothing of the 5xx count, so the second 500 ejects.
    await send("reset");
    expect(await ejected()).toBeNull();
    await send(500);
    expect(await ejected()).toBe("consecutive_5xx");
    expect(metric(g, 'adp_gateway_upstream_ejections_total{upstream="0",cause="consecutive_5xx"}')).toBe(1);
    expect(metric(g, 'adp_gateway_upstream_ejections_total{upstream="0",cause="gateway_failures"}')).toBe(0);
    expect(await post(g, chat("to the spare"))).toMatchObject({ status: 200, name: "spare" });
  });
});

describe("the gateway's own timers fire near their setting", () => {
  it("first_byte_ms 1000 against an engine that answers after 3 s: the 504 comes after about 1 s, not 1.5 s", async () => {
    // Old code: undici's headersTimeout, on a timer ticking every half second, cut it up to 500 ms late (1.50 s).
    const slow = await engine("slow", { delayMs: 3000 });
    const { gateway: g } = await gateway({ upstreams: [slow.url], timeouts: { first_byte_ms: 1000 }, health: quiet });
    // Three in a row: undici's ticks made the first land anywhere in 1.0-1.5 s, and each one after (started on a tick) at 1.5 s.
    for (let i = 0; i < 3; i++) {
      const started = performance.now();
      const r = await post(g, chat(`wait for it ${i}`));
      const ms = performance.now() - started;
      expect(r).toMatchObject({ status: 504, code: "upstream_timeout" });
      expect(ms).toBeGreaterThan(950);
      expect(ms).toBeLessThan(1300);
    }
    expect(slow.received.filter((x) => x.path === "/v1/chat/completions")).toHaveLength(3);
  });

  it("idle_ms 600 against a stream that sends one chunk then stalls: cut by an SSE error event 0.55-0.9 s after the chunk", async () => {
    // Old code: undici's bodyTimeout fired up to 500 ms late, and the client's connection was dropped (a connection error, no SSE error event).
    const stalls = await tiny((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      res.write(`data: ${JSON.stringify({ id: "s", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta: { role: "assistant", content: "first" }, finish_reason: null }] })}\n\n`);
    });
    const { gateway: g, logs } = await gateway({ upstreams: [{ url: stalls.url, name: "stalls" }], timeouts: { idle_ms: 600 }, health: quiet });
    const stream = await client(g).chat.completions.create({ model: "m", messages: messages("stream"), stream: true });
    const contents: string[] = [];
    let chunkAt = 0;
    let error: unknown = null;
    try {
      for await (const chunk of stream) {
        chunkAt = performance.now();
        contents.push(chunk.choices[0]?.delta.content ?? "");
      }
    } catch (e) {
      error = e;
    }
    const cutAfter = performance.now() - chunkAt;
    expect(contents).toEqual(["first"]);
    expect(error).toBeInstanceOf(APIError);
    expect(error).not.toBeInstanceOf(APIConnectionError);
    expect((error as APIError).code).toBe("upstream_idle_timeout");
    expect(cutAfter).toBeGreaterThan(550);
    expect(cutAfter).toBeLessThan(900);
    expect(metric(g, 'adp_gateway_upstream_stream_cuts_total{upstream="0",reason="idle_timeout"}')).toBe(1);
    expect(logs.some((l) => l.msg === "stream cut short: ended with an SSE error event" && l.reason === "idle_timeout" && l.upstream === "stalls")).toBe(true);
  });
});
