// Clean answers and observability at the gateway's edge (issue #22), end to
// end on loopback with hand-written engines that speak OpenAI's shapes:
// headers an upstream's Connection names never reach the client; a stream the
// engine cuts short ends with an OpenAI SSE error event the official client
// throws as an APIError; upstreams have stable names (metric labels that
// survive reloads, `x-adp-upstream-name`, log lines); x-request-id is taken,
// generated, sent upstream, echoed and logged; TTFT / ITL / e2e histograms
// measure what they say; health-check failures log a readable reason.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import OpenAI, { APIConnectionError, APIError } from "openai";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import { waitFor } from "../support/wait.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A hand-written engine: /health answers 200, everything else goes to `complete` (its body read first); received requests are recorded. */
async function rawEngine(complete: (req: IncomingMessage, res: ServerResponse, body: string) => void | Promise<void>): Promise<{ url: string; received: { path: string; headers: IncomingMessage["headers"] }[] }> {
  const received: { path: string; headers: IncomingMessage["headers"] }[] = [];
  const server: Server = createServer(async (req, res) => {
    let body = "";
    for await (const c of req) body += c;
    received.push({ path: req.url ?? "", headers: req.headers });
    if (req.url === "/health") res.writeHead(200).end("ok");
    else await complete(req, res, body);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  open.push({ close: () => new Promise<void>((r) => (server.closeAllConnections(), server.close(() => r()))) });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

async function mock(name: string, behaviour = {}): Promise<MockEngine> {
  const e = await startMockEngine(name, behaviour);
  open.push(e);
  return e;
}

/** A gateway from a plain configuration object, its log lines collected. */
async function gateway(config: Record<string, unknown>): Promise<{ gateway: Gateway; logs: Record<string, unknown>[] }> {
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void logs.push(JSON.parse(line) as Record<string, unknown>) });
  const g = await createGateway({ listen: { port: 0 }, health: { interval_ms: 60_000 }, ...config }, { logger });
  open.push(g);
  return { gateway: g, logs };
}

/** One SSE chunk of a chat stream. */
const event = (delta: Record<string, unknown>) => `data: ${JSON.stringify({ id: "c1", object: "chat.completion.chunk", created: 0, model: "m", choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
const whole = JSON.stringify({ id: "c1", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
const chat = (stream = false) => JSON.stringify({ model: "m", stream, messages: [{ role: "user", content: "hello" }] });
const post = (g: Gateway, body: string, headers: Record<string, string> = {}) => fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
const client = (g: Gateway) => new OpenAI({ baseURL: `${g.url}/v1`, apiKey: "x", maxRetries: 0 });
/** The value of the one metric line starting with `prefix` (a number). */
const metric = (g: Gateway, prefix: string) => {
  const lines = g.metrics().split("\n").filter((l) => l.startsWith(`${prefix} `));
  expect(lines, prefix).toHaveLength(1);
  return Number(lines[0]!.slice(prefix.length + 1));
};
const requestLines = (logs: Record<string, unknown>[]) => logs.filter((l) => l.msg === "request");

describe("hop-by-hop answer headers", () => {
  it("a header the upstream's Connection names does not reach the client; the others do", async () => {
    // Old code (35819c5): only the fixed hop-by-hop list was dropped, so x-secret-hop went through to the client.
    const e = await rawEngine((req, res, body) => {
      const stream = (JSON.parse(body) as { stream?: boolean }).stream === true;
      res.writeHead(200, { "content-type": stream ? "text/event-stream" : "application/json", connection: "keep-alive, x-secret-hop", "x-secret-hop": "1", "x-engine-note": "kept" });
      res.end(stream ? `${event({ role: "assistant", content: "hi" })}data: [DONE]\n\n` : whole);
    });
    const { gateway: g } = await gateway({ upstreams: [e.url] });
    for (const stream of [false, true]) {
      const response = await post(g, chat(stream));
      expect(response.status).toBe(200);
      expect(response.headers.get("x-engine-note")).toBe("kept");
      expect(response.headers.get("x-secret-hop")).toBeNull();
      expect(response.headers.get("connection") ?? "").not.toContain("x-secret-hop");
      expect(await response.text()).toContain("hi");
    }
    expect(e.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(2); // the engine did send them
  });
});

describe("an engine that dies mid-stream", () => {
  /** An engine that streams `parts` (each written and flushed) then destroys its socket. */
  const dying = (parts: string[]) =>
    rawEngine(async (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      for (const p of parts) {
        await new Promise<void>((r) => res.write(p, () => r()));
        await sleep(30);
      }
      res.socket?.destroy();
    });

  it("the openai client's iterator throws an APIError with the gateway's message; the raw stream ends with an error event and [DONE]; a warn line says so", async () => {
    // Old code (35819c5): the gateway destroyed the client's connection, so the client saw a broken connection (no error event, no [DONE]).
    const e = await dying([event({ role: "assistant", content: "one" }), event({ content: " two" })]);
    const { gateway: g, logs } = await gateway({ upstreams: [{ url: e.url, name: "dying" }] });
    const stream = await client(g).chat.completions.create({ model: "m", messages: [{ role: "user", content: "hello" }], stream: true });
    const seen: string[] = [];
    let thrown: unknown = null;
    try {
      for await (const chunk of stream) seen.push(chunk.choices[0]?.delta.content ?? "");
    } catch (error) {
      thrown = error;
    }
    expect(seen).toEqual(["one", " two"]);
    expect(thrown).toBeInstanceOf(APIError);
    expect(thrown).not.toBeInstanceOf(APIConnectionError);
    expect((thrown as APIError).code).toBe("upstream_stream_error");
    // The raw body, as a client without the SDK reads it.
    const raw = await (await post(g, chat(true))).text();
    const tail = /data: (\{"error":[^\n]*\})\n\ndata: \[DONE\]\n\n$/.exec(raw);
    expect(tail, raw).not.toBeNull();
    const error = (JSON.parse(tail![1]!) as { error: { message: string; type: string; param: unknown; code: string } }).error;
    expect(error).toMatchObject({ type: "server_error", param: null, code: "upstream_stream_error" });
    expect((thrown as APIError).message).toBe(error.message);
    expect(raw.startsWith(event({ role: "assistant", content: "one" }) + event({ content: " two" }))).toBe(true);
    const warns = logs.filter((l) => l.level === 40 && String(l.msg).startsWith("stream cut short"));
    expect(warns).toHaveLength(2);
    expect(warns[0]).toMatchObject({ upstream: "dying" });
    expect(["closed", "reset"]).toContain(warns[0]!.reason);
    expect(metric(g, 'adp_gateway_upstream_stream_cuts_total{upstream="dying",reason="upstream_died"}')).toBe(2);
  });

  it("a stream cut mid-event passes on whole events only, then the error event: the openai client raises an APIError, not a JSON error", async () => {
    // Old code (35819c5): the client's connection was destroyed after the half event (nothing to parse).
    // (A first fix ended the half event with a blank line: the client then failed to parse it, a SyntaxError.)
    const full = event({ role: "assistant", content: "one" });
    const half = event({ content: " two and more" }).slice(0, 40);
    const e = await dying([full, half]);
    const { gateway: g } = await gateway({ upstreams: [e.url] });
    const raw = await (await post(g, chat(true))).text();
    expect(raw.startsWith(full)).toBe(true);
    expect(raw.split("data: ")).toHaveLength(4); // three events: the whole one, the error, [DONE]; the half one held back, then dropped
    const events = raw.split("\n\n");
    expect(events.pop()).toBe(""); // it ends on a boundary
    expect(events.pop()).toBe("data: [DONE]");
    const last = events.pop()!;
    expect((JSON.parse(last.slice(6)) as { error: { code: string } }).error.code).toBe("upstream_stream_error");
    expect(events).toEqual([full.slice(0, -2)]); // the whole event before it, nothing else
    // Through the official client: the whole chunk, then an APIError (the gateway's message), never a SyntaxError.
    const client = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: "x", maxRetries: 0 });
    const seen: string[] = [];
    let thrown: unknown = null;
    try {
      for await (const c of await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true })) seen.push(c.choices[0]?.delta?.content ?? "");
    } catch (error) {
      thrown = error;
    }
    expect(seen).toEqual(["one"]);
    expect(thrown).toBeInstanceOf(APIError);
    expect(thrown).not.toBeInstanceOf(SyntaxError);
  });

  it("an event too big to hold, passed on unfinished, then more of it, then the engine dies: the error event is an event of its own", async () => {
    const full = event({ role: "assistant", content: "one" });
    const big = `data: {"choices":[{"delta":{"content":"${"x".repeat(80_000)}`;
    const e = await dying([full, big, "yyyy"]);
    const { gateway: g } = await gateway({ upstreams: [e.url] });
    const raw = await (await post(g, chat(true))).text();
    expect(raw.startsWith(full + big)).toBe(true);
    // The unfinished event is ended before the error, which a client's SSE parser then reads as an event.
    expect(raw).toMatch(/x\n\ndata: \{"error":\{[^\n]*"code":"upstream_stream_error"\}\}\n\ndata: \[DONE\]\n\n$/);
  });
});

describe("stable upstream names", () => {
  it("configured or derived, they label metrics (unchanged by a reload that shifts indexes), /health, x-adp-upstream-name and log lines", async () => {
    // Old code (35819c5): metric labels were indexes (a removal shifted every later upstream's series onto another's label), and no x-adp-upstream-name.
    const [a, b, c] = [await mock("a"), await mock("b"), await mock("c")];
    const derived = new URL(b.url).host;
    const { gateway: g, logs } = await gateway({ upstreams: [{ url: a.url, name: "alpha" }, b.url, { url: c.url, name: "gamma" }], policy: "conversation" });
    const counts = new Map<string, number>();
    for (let i = 0; i < 60 && counts.size < 3; i++) {
      const r = await post(g, chat(), { "x-session-id": `s${i}` });
      expect(r.status).toBe(200);
      const name = r.headers.get("x-adp-upstream-name")!;
      const body = (await r.json()) as { choices: { message: { content: string } }[] };
      // The header names the engine that answered.
      expect({ alpha: "hello from a", [derived]: "hello from b", gamma: "hello from c" }[name]).toBe(body.choices[0]!.message.content);
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    expect([...counts.keys()].sort()).toEqual([derived, "alpha", "gamma"].sort());
    for (const [name, n] of counts) expect(requestLines(logs).filter((l) => l.upstream === name)).toHaveLength(n);
    const ok = (name: string) => metric(g, `adp_gateway_upstream_responses_total{upstream="${name}",status="2xx"}`);
    const e2e = (name: string) => metric(g, `adp_gateway_upstream_e2e_request_latency_seconds_count{upstream="${name}"}`);
    for (const [name, n] of counts) expect([name, ok(name), e2e(name)]).toEqual([name, n, n]);
    expect(metric(g, `adp_gateway_upstream_info{upstream="${derived}",index="1",url="${b.url}"}`)).toBe(1);
    // Remove the first: the others move down an index, their series keep their labels and values.
    await g.reload({ upstreams: [b.url, { url: c.url, name: "gamma" }], policy: "conversation", health: { interval_ms: 60_000 } });
    for (const name of [derived, "gamma"]) expect([name, ok(name), e2e(name)]).toEqual([name, counts.get(name), counts.get(name)]);
    expect(metric(g, `adp_gateway_upstream_info{upstream="${derived}",index="0",url="${b.url}"}`)).toBe(1);
    expect(metric(g, `adp_gateway_upstream_info{upstream="gamma",index="1",url="${c.url}"}`)).toBe(1);
    expect(g.metrics()).not.toContain('upstream="alpha"');
    expect(g.metrics()).not.toMatch(/upstream="\d+"/);
    const health = (await (await fetch(`${g.url}/health`)).json()) as { upstreams: { index: number; name: string }[] };
    expect(health.upstreams.map((u) => [u.index, u.name])).toEqual([[0, derived], [1, "gamma"]]);
    // /v1/models names the upstream it asked.
    const models = await fetch(`${g.url}/v1/models`);
    expect(models.status).toBe(200);
    const name = models.headers.get("x-adp-upstream-name");
    expect([derived, "gamma"]).toContain(name);
    expect(models.headers.get("x-adp-upstream")).toBe(name === derived ? "0" : "1");
    expect(((await models.json()) as { data: { owned_by: string }[] }).data[0]!.owned_by).toBe(name === derived ? "b" : "c");
    expect(requestLines(logs).at(-1)).toMatchObject({ path: "/v1/models", upstream: name });
  });

  it("a 502 from an upstream that closed the connection after taking the request names it in its header and log line", async () => {
    // Old code (35819c5): the 502 carried only x-adp-upstream (the index) and its log line an index.
    const e = await rawEngine((_req, res) => void res.socket?.destroy());
    const { gateway: g, logs } = await gateway({ upstreams: [{ url: e.url, name: "doomed" }] });
    const r = await post(g, chat());
    expect(r.status).toBe(502);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("upstream_error");
    expect(r.headers.get("x-adp-upstream-name")).toBe("doomed");
    expect(r.headers.get("x-adp-upstream")).toBe("0");
    expect(requestLines(logs)).toMatchObject([{ status: 502, upstream: "doomed" }]);
  });
});

describe("x-request-id", () => {
  it("a client's id is echoed, sent upstream and logged; a missing, over-long or control-character one is replaced by a fresh UUID", async () => {
    // Old code (35819c5): no x-request-id at all (not echoed, not sent upstream, not logged).
    const e = await mock("e0");
    const { gateway: g, logs } = await gateway({ upstreams: [e.url] });
    const sent = () => e.received.filter((r) => r.path === "/v1/chat/completions").at(-1)!.headers["x-request-id"];
    const given = "client-id_0123.ABC:xyz~!";
    const r = await post(g, chat(), { "x-request-id": given });
    expect(r.status).toBe(200);
    expect(r.headers.get("x-request-id")).toBe(given);
    expect(sent()).toBe(given);
    expect(requestLines(logs).at(-1)!.request_id).toBe(given);
    // The longest taken as is.
    const longest = "a".repeat(128);
    expect((await post(g, chat(), { "x-request-id": longest })).headers.get("x-request-id")).toBe(longest);
    // Tab is the one control character Node's parser lets into a header value (the others are a 400 before any handler).
    const ids = new Set<string>();
    for (const header of [{}, { "x-request-id": "b".repeat(200) }, { "x-request-id": "tab\there" }, { "x-request-id": "with space" }, { "x-request-id": "caf\u00e9" }] as Record<string, string>[]) {
      const response = await post(g, chat(), header);
      expect(response.status).toBe(200);
      const id = response.headers.get("x-request-id")!;
      expect(id, JSON.stringify(header)).toMatch(UUID);
      expect(sent()).toBe(id);
      expect(requestLines(logs).at(-1)!.request_id).toBe(id);
      ids.add(id);
    }
    expect(ids.size).toBe(5); // fresh each time
    // Gateway-made answers carry one too.
    expect((await fetch(`${g.url}/health`)).headers.get("x-request-id")).toMatch(UUID);
  });
});

describe("token timing", () => {
  it("TTFT waits for the first content (not the role chunk), ITL counts the gaps between content chunks, e2e bounds both", async () => {
    // Old code (35819c5): no TTFT or ITL histograms (one latency histogram per upstream).
    const e = await rawEngine(async (_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(event({ role: "assistant", content: "" }));
      await sleep(300);
      for (let i = 0; i < 5; i++) {
        if (i > 0) await sleep(50);
        res.write(event({ content: `t${i}` }));
      }
      await sleep(20);
      res.end("data: [DONE]\n\n");
    });
    const { gateway: g } = await gateway({ upstreams: [{ url: e.url, name: "timed" }] });
    const seen: string[] = [];
    for await (const chunk of await client(g).chat.completions.create({ model: "m", messages: [{ role: "user", content: "hello" }], stream: true })) seen.push(chunk.choices[0]?.delta.content ?? "");
    expect(seen).toEqual(["", "t0", "t1", "t2", "t3", "t4"]);
    const h = (name: string, part: "sum" | "count") => metric(g, `adp_gateway_upstream_${name}_${part}{upstream="timed"}`);
    expect(h("time_to_first_token_seconds", "count")).toBe(1);
    expect(h("time_to_first_token_seconds", "sum")).toBeGreaterThanOrEqual(0.28);
    expect(h("time_to_first_token_seconds", "sum")).toBeLessThan(h("e2e_request_latency_seconds", "sum"));
    expect(h("first_byte_seconds", "sum")).toBeLessThan(h("time_to_first_token_seconds", "sum"));
    expect(h("inter_token_latency_seconds", "count")).toBe(4);
    expect(h("inter_token_latency_seconds", "sum") / 4).toBeGreaterThanOrEqual(0.04);
    // The gaps and the first token fit in the whole exchange.
    expect(h("time_to_first_token_seconds", "sum") + h("inter_token_latency_seconds", "sum")).toBeLessThanOrEqual(h("e2e_request_latency_seconds", "sum"));
  });

  it("a whole (non-streamed) answer's TTFT is its e2e observation", async () => {
    // Old code (35819c5): no TTFT histogram.
    const e = await mock("e0", { delayMs: 50 });
    const { gateway: g } = await gateway({ upstreams: [{ url: e.url, name: "whole" }] });
    expect((await client(g).chat.completions.create({ model: "m", messages: [{ role: "user", content: "hello" }] })).choices[0]!.message.content).toBe("hello from e0");
    const h = (name: string, part: "sum" | "count") => metric(g, `adp_gateway_upstream_${name}_${part}{upstream="whole"}`);
    expect(h("time_to_first_token_seconds", "count")).toBe(1);
    expect(h("e2e_request_latency_seconds", "count")).toBe(1);
    expect(h("time_to_first_token_seconds", "sum")).toBe(h("e2e_request_latency_seconds", "sum"));
    expect(h("time_to_first_token_seconds", "sum")).toBeGreaterThanOrEqual(0.045);
    expect(h("inter_token_latency_seconds", "count")).toBe(0);
  });
});

describe("health-check failure reasons", () => {
  it("a check that times out logs reason timeout (not 23), a refused one refused, a 503 status 503", async () => {
    // Old code (35819c5): the reason was the error's code: 23 (a DOMException's) for a timeout, ECONNREFUSED for a refusal; a status was not a reason.
    const hanging = createServer(() => {}); // never answers
    await new Promise<void>((r) => hanging.listen(0, "127.0.0.1", r));
    open.push({ close: () => new Promise<void>((r) => (hanging.closeAllConnections(), hanging.close(() => r()))) });
    const dead = createNetServer();
    await new Promise<void>((r) => dead.listen(0, "127.0.0.1", r));
    const deadPort = (dead.address() as AddressInfo).port;
    await new Promise((r) => dead.close(r));
    const sick = await mock("sick", { healthStatus: 503 });
    const { logs } = await gateway({
      upstreams: [{ url: `http://127.0.0.1:${(hanging.address() as AddressInfo).port}`, name: "hanging" }, { url: `http://127.0.0.1:${deadPort}`, name: "dead" }, { url: sick.url, name: "sick" }],
      health: { interval_ms: 200, timeout_ms: 100, unhealthy_threshold: 1 },
    });
    const ejected = (name: string) => logs.find((l) => l.msg === "upstream ejected by its health check" && l.upstream === name);
    await waitFor(() => ["hanging", "dead", "sick"].every((n) => ejected(n) !== undefined), () => JSON.stringify(logs.filter((l) => l.level === 40)));
    expect(ejected("hanging")!.reason).toBe("timeout");
    expect(ejected("dead")!.reason).toBe("refused");
    expect(ejected("sick")!.reason).toBe("status 503");
  });
});
