// The gateway end to end, on loopback only: real HTTP servers and clients
// (fetch, and the official `openai` client), mock OpenAI-compatible engines
// (test/support/mock-engine.ts) speaking the API's exact shapes.
import { request as httpRequest } from "node:http";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, loadGatewayConfig, Utf8ByteTokenizer, type Gateway } from "../../gateway/src/index.js";
import type { GatewayFlags } from "../../gateway/src/config/config.js";
import { startMockEngine, type EngineBehaviour, type MockEngine } from "../support/mock-engine.js";
import { metricsByIndex } from "../support/metrics.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** Starts `n` engines and a gateway in front of them (a YAML text may add settings). */
async function fleet(n: number, yaml = "", flags: GatewayFlags = {}, behaviour: EngineBehaviour = {}): Promise<{ gateway: Gateway; engines: MockEngine[] }> {
  const engines: MockEngine[] = [];
  for (let i = 0; i < n; i++) {
    const e = await startMockEngine(`e${i}`, { ...behaviour });
    open.push(e);
    engines.push(e);
  }
  const text = `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 200, timeout_ms: 500, unhealthy_threshold: 2, healthy_threshold: 1 }\nupstreams:\n${engines.map((e) => `  - url: ${e.url}\n    name: ${e.name}\n`).join("")}${yaml}`;
  const gateway = await createGateway(loadGatewayConfig({ file: { name: "gateway.yaml", text }, flags }));
  open.push(gateway);
  return { gateway, engines };
}

const chat = (content: string, extra: Record<string, unknown> = {}) => ({ model: "mock-model", messages: [{ role: "system", content: SYSTEM }, { role: "user", content }], ...extra });
/** A long shared system prompt: many blocks of prefix to match. */
const SYSTEM = "You are a careful assistant. ".repeat(40);

async function post(gateway: Gateway, body: unknown, headers: Record<string, string> = {}, path = "/v1/chat/completions") {
  const response = await fetch(`${gateway.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: typeof body === "string" ? body : JSON.stringify(body) });
  return { status: response.status, upstream: response.headers.get("x-adp-upstream"), body: await response.json().catch(() => null) as Record<string, unknown> | null, headers: response.headers };
}

const completionsTo = (engine: MockEngine) => engine.received.filter((r) => r.path.endsWith("completions"));

describe("proxying", () => {
  it("passes a chat completion through and names the upstream; headers reach it, hop-by-hop ones do not", async () => {
    const { gateway, engines } = await fleet(2);
    const r = await post(gateway, chat("hi"), { authorization: "Bearer client-key", "x-custom": "kept", "x-session-id": "s1" });
    expect(r.status).toBe(200);
    expect(r.upstream).toMatch(/^[01]$/);
    const engine = engines[Number(r.upstream)]!;
    expect((r.body!.choices as { message: { content: string } }[])[0]!.message.content).toBe(`hello from ${engine.name}`);
    const got = completionsTo(engine)[0]!;
    expect(got.headers.authorization).toBe("Bearer client-key");
    expect(got.headers["x-custom"]).toBe("kept");
    expect(got.headers["x-session-id"]).toBe("s1");
    expect(got.body).toEqual(chat("hi"));
  });

  it("an upstream's configured key replaces the client's Authorization", async () => {
    const e = await startMockEngine("keyed", { apiKey: "engine-secret" });
    open.push(e);
    const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text: `listen: { port: 0 }\nlogging: { level: silent }\nupstreams:\n  - url: ${e.url}\n    api_key_env: ENGINE_KEY\n` }, env: { ENGINE_KEY: "engine-secret" } }));
    open.push(gateway);
    const r = await post(gateway, chat("hi"), { authorization: "Bearer something-else" });
    expect(r.status).toBe(200);
    expect(completionsTo(e)[0]!.headers.authorization).toBe("Bearer engine-secret");
  });

  it("streams SSE chunks to the client as they arrive, before the upstream finishes", async () => {
    const { gateway } = await fleet(1, "", {}, { chunks: 4, chunkGapMs: 150 });
    const started = Date.now();
    const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat("stream please", { stream: true })) });
    expect(response.headers.get("content-type")).toBe("text/event-stream");
    const reader = response.body!.getReader();
    const first = await reader.read();
    const firstAt = Date.now() - started;
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const total = Date.now() - started;
    expect(firstAt).toBeLessThan(total - 300); // three more gaps of 150 ms came after the first chunk
    expect(text).toContain("data: [DONE]");
    expect(text.match(/^data: \{/gm)?.length).toBe(4);
  });

  it("a whole answer keeps the upstream's length; a client that stops reading a stream stops the upstream (backpressure), then gets every byte", async () => {
    const CHUNKS = 1024;
    const { gateway, engines } = await fleet(1, "", {}, { chunks: CHUNKS, chunkBytes: 64 * 1024 });
    const whole = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat("hi")) });
    const text = await whole.text();
    expect(whole.headers.get("content-length")).toBe(String(Buffer.byteLength(text)));
    expect(whole.headers.get("transfer-encoding")).toBeNull();

    // A raw client that stops reading: 64 MB cannot all sit in socket buffers, so
    // the engine must stall until it reads again; without backpressure the gateway
    // would read the engine dry into its own memory and the engine would finish.
    const engine = engines[0]!;
    const url = new URL(gateway.url);
    const { bytes, tail, stalledAt } = await new Promise<{ bytes: number; tail: string; stalledAt: number }>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" } }, (res) => {
        res.pause();
        let bytes = 0;
        let tail = "";
        let last = -1;
        let stalledAt = -1;
        // Stalled: no chunk written for 300 ms while the client reads nothing.
        const watch = setInterval(() => {
          if (engine.streamed === last && last > 0) {
            clearInterval(watch);
            stalledAt = last;
            res.on("data", (d: Buffer) => {
              bytes += d.length;
              tail = (tail + d.toString("latin1")).slice(-64);
            });
            res.on("end", () => resolve({ bytes, tail, stalledAt }));
            res.resume();
          }
          last = engine.streamed;
        }, 300);
      });
      req.on("error", reject);
      req.end(JSON.stringify(chat("a long stream", { stream: true })));
    });
    expect(stalledAt).toBeLessThan(CHUNKS / 2);
    expect(engine.streamed).toBe(CHUNKS);
    expect(bytes).toBeGreaterThan(CHUNKS * 64 * 1024);
    expect(tail).toContain("data: [DONE]");
  }, 30_000);

  it("serves the official openai client, streaming and not", async () => {
    const { gateway } = await fleet(2);
    const client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const completion = await client.chat.completions.create({ model: "mock-model", messages: [{ role: "user", content: "hello" }] });
    expect(completion.choices[0]!.message.content).toMatch(/^hello from e[01]$/);
    const stream = await client.chat.completions.create({ model: "mock-model", messages: [{ role: "user", content: "hello" }], stream: true });
    let content = "";
    for await (const chunk of stream) content += chunk.choices[0]?.delta?.content ?? "";
    expect(content).toMatch(/^e[01]:0:1:2$/);
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["mock-model"]);
    const text = await client.completions.create({ model: "mock-model", prompt: "once upon a time" });
    expect(text.choices[0]!.text).toMatch(/^hello from e[01]$/);
  });
});

describe("routing", () => {
  it("requests sharing a long system prompt land on one upstream under equal load (prefix affinity)", async () => {
    const { gateway } = await fleet(4);
    const upstreams = new Set<string | null>();
    for (let i = 0; i < 12; i++) upstreams.add((await post(gateway, chat(`question ${i}`))).upstream);
    expect(upstreams.size).toBe(1);
    // A different system prompt is free to go elsewhere, and its followers then stick to it.
    const other = { model: "mock-model", messages: [{ role: "system", content: "Another persona entirely. ".repeat(40) }, { role: "user", content: "x" }] };
    const first = (await post(gateway, other)).upstream;
    for (let i = 0; i < 5; i++) expect((await post(gateway, { ...other, messages: [other.messages[0], { role: "user", content: `y${i}` }] })).upstream).toBe(first);
  });

  it("a conversation sticks to its upstream by session header and by body, and new ones spread", async () => {
    const { gateway } = await fleet(3, "", { policy: "conversation" });
    const byHeader = new Set<string | null>();
    const byBody = new Set<string | null>();
    for (let i = 0; i < 6; i++) {
      byHeader.add((await post(gateway, chat(`turn ${i}`), { "x-session-id": "conversation-a" })).upstream);
      byBody.add((await post(gateway, chat(`turn ${i}`, { conversation_params: { conversation_id: "conversation-b" } }))).upstream);
    }
    expect(byHeader.size).toBe(1);
    expect(byBody.size).toBe(1);
    const spread = new Set<string | null>();
    for (let i = 0; i < 9; i++) spread.add((await post(gateway, chat("new"), { "x-correlation-id": `fresh-${i}` })).upstream);
    expect(spread.size).toBeGreaterThan(1);
  });

  it("a model mapped to a LoRA adapter routes in that adapter's cache namespace", async () => {
    const { gateway } = await fleet(2, "routing: { lora_adapters: { adapter-x: 7 } }\n");
    const baseText = "cached under the base model. ".repeat(20);
    const adapterText = "cached under the adapter. ".repeat(20);
    expect((await post(gateway, chat(baseText))).status).toBe(200);
    expect((await post(gateway, { ...chat(adapterText), model: "adapter-x" })).status).toBe(200);
    const tokens = (content: string) => new Utf8ByteTokenizer().encodeChat(chat(content).messages);
    const index = gateway.router.prefixIndex!;
    const base = tokens(baseText);
    const adapter = tokens(adapterText);
    expect(Math.max(...index.match(base.subarray(0, base.length - 1)))).toBeGreaterThan(0);
    // Outside the adapter's namespace only the shared system prompt (learned by the base model) matches;
    // inside it, the adapter's whole prompt does.
    const outside = Math.max(...index.match(adapter.subarray(0, adapter.length - 1)));
    const inside = Math.max(...index.match(adapter.subarray(0, adapter.length - 1), { loraTaskId: 7 }));
    expect(inside).toBe(Math.floor((adapter.length - 1) / 128) * 128);
    expect(outside).toBeLessThan(inside);
  });

  it("requests arriving together are routed as one batch and spread by load", async () => {
    const { gateway, engines } = await fleet(2, "", {}, { delayMs: 100 });
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => post(gateway, { model: "m", prompt: `distinct prompt ${i} `.repeat(20) }, {}, "/v1/completions")));
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(completionsTo(engines[0]!).length).toBe(4); // fair share within the batch: 4 and 4
    expect(completionsTo(engines[1]!).length).toBe(4);
  });
});

describe("failures", () => {
  it("an upstream killed mid-run costs no request: not-yet-sent requests are retried on another, then it is ejected", async () => {
    const { gateway, engines } = await fleet(3);
    for (let i = 0; i < 6; i++) expect((await post(gateway, chat(`warm ${i}`), { "x-session-id": `s${i}` })).status).toBe(200);
    await engines[1]!.close();
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) statuses.push((await post(gateway, chat(`after ${i}`), { "x-session-id": `t${i}` })).status);
    expect(statuses.every((s) => s === 200)).toBe(true);
    const health = await (await fetch(`${gateway.url}/health`)).json() as { upstreams: { healthy: boolean }[] };
    expect(health.upstreams.map((u) => u.healthy)).toEqual([true, false, true]);
    expect(metricsByIndex(gateway.metrics())).toMatch(/adp_gateway_upstream_retries_total\{upstream="1"\} [1-9]/);
  });

  it("a client that hangs up aborts the upstream request and frees its load", async () => {
    const { gateway, engines } = await fleet(1, "", {}, { chunks: 50, chunkGapMs: 50 });
    const abort = new AbortController();
    const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(chat("long", { stream: true })), signal: abort.signal });
    const reader = response.body!.getReader();
    await reader.read();
    abort.abort();
    const deadline = Date.now() + 3000;
    while ((engines[0]!.aborted === 0 || engines[0]!.active > 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(engines[0]!.aborted).toBe(1);
    await new Promise((r) => setTimeout(r, 50));
    expect(metricsByIndex(gateway.metrics())).toContain('adp_gateway_upstream_in_flight_requests{upstream="0"} 0');
  });

  it("no healthy upstream: 503; a slow first byte: 504; an engine's 5xx is passed through", async () => {
    const slow = await fleet(1, "timeouts: { first_byte_ms: 200 }\n", {}, { delayMs: 1000 });
    const r504 = await post(slow.gateway, chat("slow"));
    expect(r504.status).toBe(504);
    expect((r504.body!.error as { type: string }).type).toBe("server_error");
    const failing = await fleet(1, "", {}, { failWith: 500, healthStatus: 500 });
    expect((await post(failing.gateway, chat("x"))).status).toBe(500);
    const deadline = Date.now() + 3000;
    let status = 0;
    while (Date.now() < deadline && status !== 503) {
      status = (await post(failing.gateway, chat("x"))).status;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe(503);
    expect((await fetch(`${failing.gateway.url}/health`)).status).toBe(503);
  });

  it("every upstream at capacity: requests wait in the queue, then 429 with Retry-After", async () => {
    const { gateway } = await fleet(1, "limits: { max_in_flight_per_upstream: 1, queue_size: 1, queue_timeout_ms: 300 }\n", {}, { delayMs: 800 });
    const results = await Promise.all([post(gateway, chat("a")), post(gateway, chat("b")), post(gateway, chat("c"))]);
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 429, 429]);
    const limited = results.find((r) => r.status === 429)!;
    expect(limited.headers.get("retry-after")).toBe("1");
    // One process holds every upstream's whole cap.
    expect(metricsByIndex(gateway.metrics())).toContain('adp_gateway_upstream_in_flight_share{upstream="0"} 1');
  });
});

describe("bad requests get OpenAI-style errors, and the next request is served", () => {
  it.each([
    ["malformed JSON", "/v1/chat/completions", "POST", "{nope", 400],
    ["a null body", "/v1/chat/completions", "POST", "null", 400],
    ["an array body", "/v1/chat/completions", "POST", "[]", 400],
    ["no model", "/v1/chat/completions", "POST", JSON.stringify({ messages: [{ role: "user", content: "x" }] }), 400],
    ["no messages", "/v1/chat/completions", "POST", JSON.stringify({ model: "m" }), 400],
    ["a message without a role", "/v1/chat/completions", "POST", JSON.stringify({ model: "m", messages: [{ content: "x" }] }), 400],
    ["no prompt", "/v1/completions", "POST", JSON.stringify({ model: "m" }), 400],
    ["an empty conversation id", "/v1/chat/completions", "POST", JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }], conversation_params: { conversation_id: "" } }), 400],
    ["a body over the limit", "/v1/chat/completions", "POST", JSON.stringify({ model: "m", messages: [{ role: "user", content: "x".repeat(5000) }] }), 413],
    ["an unknown path", "/v1/embeddings/nope", "POST", "{}", 404],
    ["a wrong method", "/v1/chat/completions", "GET", undefined, 405],
  ])("%s", async (_name, path, method, body, status) => {
    const { gateway, engines } = await fleet(1, "limits: { max_body_bytes: 4096 }\n");
    const response = await fetch(`${gateway.url}${path}`, { method, headers: { "content-type": "application/json" }, ...(body !== undefined ? { body } : {}) });
    expect(response.status).toBe(status);
    const error = (await response.json()) as { error: { message: string; type: string } };
    expect(error.error.type).toBe("invalid_request_error");
    expect(typeof error.error.message).toBe("string");
    expect(completionsTo(engines[0]!)).toHaveLength(0);
    expect((await post(gateway, chat("fine"))).status).toBe(200);
  });

  it("client API keys: none or a wrong one is 401, a right one passes; /health and /metrics stay open unless protected", async () => {
    const { gateway } = await fleet(1, "auth: { api_keys: [client-key-1, client-key-2] }\n");
    expect((await post(gateway, chat("x"))).status).toBe(401);
    expect((await post(gateway, chat("x"), { authorization: "Bearer client-key-3" })).status).toBe(401);
    expect((await post(gateway, chat("x"), { authorization: "Bearer client-key-2" })).status).toBe(200);
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    expect((await fetch(`${gateway.url}/metrics`)).status).toBe(200);
  });
});

describe("observability", () => {
  it("logs one line per request with its upstream and matched tokens, never its prompt or keys", async () => {
    const engine = await startMockEngine("e0");
    open.push(engine);
    const lines: Record<string, unknown>[] = [];
    const { pino } = await import("pino");
    const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
    const gateway = await createGateway(loadGatewayConfig({ flags: { upstreams: [engine.url], port: 0 } }), { logger });
    open.push(gateway);
    await post(gateway, chat("the first question"), { authorization: "Bearer secret-client-key" });
    await post(gateway, chat("the second question"), { authorization: "Bearer secret-client-key" });
    const requests = lines.filter((l) => l.msg === "request");
    expect(requests).toHaveLength(2);
    expect(requests[0]).toMatchObject({ method: "POST", path: "/v1/chat/completions", status: 200, upstream: new URL(engine.url).host, outcome: "ok", matched_tokens: 0 });
    expect(requests[0]!.request_id).toMatch(/^[0-9a-f-]{36}$/); // generated: the client sent none
    expect(requests[1]!.matched_tokens as number).toBeGreaterThanOrEqual(1024); // the shared system prompt, cached by the first
    const metrics = metricsByIndex(gateway.metrics());
    const total = (name: string) => Number(new RegExp(`adp_gateway_upstream_${name}_total\\{upstream="0"\\} (\\d+)`).exec(metrics)![1]);
    expect(total("matched_tokens")).toBe((requests[0]!.matched_tokens as number) + (requests[1]!.matched_tokens as number));
    expect(total("prompt_tokens")).toBeGreaterThan(total("matched_tokens"));
    const text = JSON.stringify(lines);
    expect(text).not.toContain("question");
    expect(text).not.toContain("careful assistant");
    expect(text).not.toContain("secret-client-key");
  });

  it("/metrics has the router's and the gateway's metrics, /health lists the upstreams", async () => {
    const { gateway } = await fleet(2);
    await post(gateway, chat("x"));
    const text = metricsByIndex(await (await fetch(`${gateway.url}/metrics`)).text());
    expect(text).toContain("adp_router_batches_total");
    expect(text).toMatch(/adp_gateway_upstream_responses_total\{upstream="[01]",status="2xx"\} 1/);
    expect(text).toContain('adp_gateway_upstream_healthy{upstream="0"} 1');
    expect(text).toContain('adp_gateway_requests_total{outcome="ok"} 1');
    expect(text).toMatch(/adp_gateway_upstream_e2e_request_latency_seconds_count\{upstream="[01]"\} 1/);
    const health = (await (await fetch(`${gateway.url}/health`)).json()) as { status: string; upstreams: unknown[] };
    expect(health.status).toBe("ok");
    expect(health.upstreams).toHaveLength(2);
  });
});
