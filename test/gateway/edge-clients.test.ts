// The gateway's edge against the clients that used to freeze it or pin its
// capacity (issue #22), on loopback in front of mock engines, with the
// official openai client where a client's view matters:
// - one request freezes it: a huge prompt is refused by limits.max_prompt_chars
//   before tokenizing; a pathological one (a few hundred thousand spaces for the
//   Qwen BPE) occupies a tokenizer worker while /health, /metrics and other
//   chats are answered; tokenizer.timeout_ms answers 503 and the worker comes
//   back; a full tokenizer queue sheds 429 with retry-after; max_prompt_tokens
//   is OpenAI's 400 context_length_exceeded;
// - slow readers pin capacity: streams whose clients stopped reading are cut
//   after timeouts.idle_ms and their upstream slots released;
// - connections: limits.max_connections closes connections past it on arrival;
//   timeouts.headers_ms and request_ms answer 408, counted;
// - timeouts.max_stream_ms ends an endless stream with an SSE error event.
// The Hugging Face tokenizer runs on worker threads, which run the built
// dist/tokenize-worker.js (`npm run build` first; npm test's pretest does it).
import { connect, type Socket } from "node:net";
import path from "node:path";
import OpenAI, { APIConnectionError, APIError, BadRequestError, RateLimitError } from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, type Gateway, type GatewayConfigObject } from "../../gateway/src/index.js";
import { metricsByIndex } from "../support/metrics.js";
import { startMockEngine, type EngineBehaviour, type MockEngine } from "../support/mock-engine.js";
import { waitFor } from "../support/wait.js";

const QWEN = path.resolve("test/fixtures/tokenizers/qwen2.5");
/** Spaces the Qwen BPE grinds over for seconds (one pre-tokenized word). */
const SLOW_SPACES = 300_000;

const open: { close(): Promise<void> | void }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** One mock engine and a gateway in front of it with `config` (logging silent); both closed after the test. */
async function start(config: Omit<GatewayConfigObject, "upstreams" | "listen">, behaviour: EngineBehaviour = {}): Promise<{ gateway: Gateway; engine: MockEngine }> {
  const engine = await startMockEngine("e0", behaviour);
  open.push(engine);
  const gateway = await createGateway({ listen: { port: 0 }, logging: { level: "silent" }, upstreams: [engine.url], ...config });
  open.push({ close: () => gateway.close(2000) });
  return { gateway, engine };
}

/** The `tokenizer:` setting of the Qwen fixture on worker threads. */
const qwen = (pool: { workers?: number; queue_size?: number; timeout_ms?: number } = {}) => ({ kind: "huggingface", path: QWEN, ...pool });

/** A chat body of one user message. */
const chat = (content: string, extra: Record<string, unknown> = {}) => JSON.stringify({ model: "m", messages: [{ role: "user", content }], ...extra });
const post = (gateway: Gateway, body: string, signal?: AbortSignal) => fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body, ...(signal ? { signal } : {}) });
const client = (gateway: Gateway) => new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: "x", maxRetries: 0 });

/** The value of one series (`name{labels}` as printed, upstream labels as indexes) in the gateway's metrics, or null. */
function sample(gateway: Gateway, series: string, text = gateway.metrics()): number | null {
  const line = metricsByIndex(text)
    .split("\n")
    .find((l) => l.startsWith(`${series} `));
  return line === undefined ? null : Number(line.slice(series.length + 1));
}

/** Completion requests that reached `engine`. */
const completions = (engine: MockEngine) => engine.received.filter((r) => r.path.endsWith("/completions")).length;

/** The HTTP status and OpenAI error of a refused answer. */
async function refusal(response: Response): Promise<{ status: number; retryAfter: string | null; error: { message: string; code: string } }> {
  return { status: response.status, retryAfter: response.headers.get("retry-after"), error: ((await response.json()) as { error: { message: string; code: string } }).error };
}

/** What `p` rejects with (fails the test when it resolves). */
async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error("expected a rejection");
    },
    (error: unknown) => error,
  );
}

/** A raw TCP connection to the gateway (destroyed after the test); `closed` turns true once the server has closed it. */
function socketTo(gateway: Gateway): Promise<{ socket: Socket; closed: () => boolean; closedAfterMs: () => number | null; text: () => string }> {
  const { port } = new URL(gateway.url);
  const socket = connect(Number(port), "127.0.0.1");
  open.push({ close: () => void socket.destroy() });
  const started = Date.now();
  let closedAt: number | null = null;
  let text = "";
  socket.on("error", () => {});
  socket.on("close", () => (closedAt = Date.now()));
  socket.on("data", (d: Buffer) => (text += d.toString("latin1")));
  const handle = { socket, closed: () => closedAt !== null, closedAfterMs: () => (closedAt === null ? null : closedAt - started), text: () => text };
  return new Promise((resolve) => {
    socket.once("connect", () => resolve(handle));
    socket.once("close", () => resolve(handle));
  });
}

describe("one request freezes it", () => {
  it("a 4 MB chat of spaces is refused 413 by limits.max_prompt_chars before tokenizing, and never reaches an engine", async () => {
    // Old code: no limits.max_prompt_chars; the 4 MB were rendered and tokenized on the event loop (48.9 s and more: past this test's 60 s), the whole gateway frozen, then proxied.
    const { gateway, engine } = await start({ tokenizer: qwen({ workers: 1 }), limits: { max_body_bytes: 8 << 20 } });
    const body = chat(" ".repeat(4_000_000));
    expect(Buffer.byteLength(body)).toBeGreaterThan(4_000_000);
    const r = await refusal(await post(gateway, body));
    expect(r.status).toBe(413);
    expect(r.error.code).toBe("prompt_too_large");
    expect(r.error.message).toContain("limits.max_prompt_chars");
    expect(completions(engine)).toBe(0);
    expect(sample(gateway, 'adp_gateway_tokenizer_jobs_total{outcome="refused"}')).toBe(1);
    // The worker is free at once: the next chat is served.
    expect((await post(gateway, chat("hi"))).status).toBe(200);
    expect(completions(engine)).toBe(1);
  });

  it("while a worker grinds on a pathological prompt, /health, /metrics and a later small chat all complete before it", async () => {
    // Old code: the BPE ran on the event loop, so /health, /metrics and the small chat waited behind it (no worker ever reported busy: tokenizer_busy never showed 1).
    const { gateway, engine } = await start({ tokenizer: qwen({ workers: 2, timeout_ms: 60_000 }), limits: { max_prompt_chars: 1_000_000 } });
    const order: string[] = [];
    const statuses = new Map<string, number>();
    const bodies = new Map<string, string>();
    const settle = (label: string, p: Promise<Response>) =>
      p.then(async (response) => {
        statuses.set(label, response.status);
        bodies.set(label, await response.text());
        order.push(label);
      });
    const big = settle("big", post(gateway, chat(" ".repeat(SLOW_SPACES))));
    await waitFor(() => sample(gateway, "adp_gateway_tokenizer_busy") === 1, () => `tokenizer_busy ${sample(gateway, "adp_gateway_tokenizer_busy")}`, 10_000);
    const others: Promise<void>[] = [];
    for (let i = 0; i < 3; i++) {
      others.push(settle(`health${i}`, fetch(`${gateway.url}/health`)));
      others.push(settle(`metrics${i}`, fetch(`${gateway.url}/metrics`)));
    }
    others.push(settle("small", post(gateway, chat("hi"))));
    await Promise.all(others);
    // Every one of them completed while the big one was still being tokenized.
    expect(order).toHaveLength(7);
    expect(order).not.toContain("big");
    // /metrics, answered meanwhile, saw the worker busy.
    expect(sample(gateway, "adp_gateway_tokenizer_busy", bodies.get("metrics0"))).toBe(1);
    await big;
    expect(order.at(-1)).toBe("big");
    expect([...statuses.values()]).toEqual(Array.from({ length: 8 }, () => 200));
    expect(completions(engine)).toBe(2);
  });

  it("a prompt past tokenizer.timeout_ms is answered 503 tokenize_timeout, and the next chat is served by the replaced worker", async () => {
    // Old code: no tokenizer timeout; the prompt was tokenized to its end on the event loop, seconds later, and proxied (200).
    const { gateway, engine } = await start({ tokenizer: qwen({ workers: 1, timeout_ms: 400 }), limits: { max_prompt_chars: 1_000_000 } });
    const r = await refusal(await post(gateway, chat(" ".repeat(SLOW_SPACES))));
    expect(r.status).toBe(503);
    expect(r.error.code).toBe("tokenize_timeout");
    expect(r.retryAfter).not.toBeNull();
    expect(completions(engine)).toBe(0);
    expect((await post(gateway, chat("hi"))).status).toBe(200);
    expect(completions(engine)).toBe(1);
    expect(sample(gateway, 'adp_gateway_tokenizer_jobs_total{outcome="timeout"}')).toBe(1);
    expect(sample(gateway, "adp_gateway_tokenizer_worker_restarts_total")).toBeGreaterThanOrEqual(1);
  });

  it("with tokenizer.queue_size 0 and its one worker busy, a concurrent request is shed: 429 tokenizer_busy with retry-after", async () => {
    // Old code: no tokenizer workers or queue; the second request waited behind the first on the event loop, and was then served.
    const { gateway, engine } = await start({ tokenizer: qwen({ workers: 1, queue_size: 0, timeout_ms: 60_000 }), limits: { max_prompt_chars: 1_000_000 } });
    const abort = new AbortController();
    const big = post(gateway, chat(" ".repeat(SLOW_SPACES)), abort.signal).catch(() => null);
    await waitFor(() => sample(gateway, "adp_gateway_tokenizer_busy") === 1, () => `tokenizer_busy ${sample(gateway, "adp_gateway_tokenizer_busy")}`, 10_000);
    const error = await rejection(client(gateway).chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }));
    expect(error).toBeInstanceOf(RateLimitError);
    const e = error as RateLimitError;
    expect(e.status).toBe(429);
    expect(e.code).toBe("tokenizer_busy");
    expect(Number(e.headers?.get("retry-after"))).toBeGreaterThan(0);
    expect(sample(gateway, 'adp_gateway_tokenizer_jobs_total{outcome="shed"}')).toBe(1);
    expect(completions(engine)).toBe(0);
    abort.abort();
    await big;
  });

  it("a prompt over limits.max_prompt_tokens is OpenAI's 400 context_length_exceeded (a BadRequestError for the openai client)", async () => {
    // Old code: no limits.max_prompt_tokens: the long prompt was proxied (200).
    const { gateway, engine } = await start({ tokenizer: qwen({ workers: 1 }), limits: { max_prompt_tokens: 100 } });
    const openai = client(gateway);
    // A short chat (42 tokens with Qwen's template) is under the limit.
    expect((await openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] })).choices[0]!.message.content).toBe("hello from e0");
    const error = await rejection(openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hello ".repeat(100) }] }));
    expect(error).toBeInstanceOf(BadRequestError);
    const e = error as BadRequestError;
    expect(e.status).toBe(400);
    expect(e.code).toBe("context_length_exceeded");
    expect(e.message).toContain("limits.max_prompt_tokens");
    expect(completions(engine)).toBe(1);
  });

  it("with the byte tokenizer, a prompt over limits.max_prompt_chars is 413 prompt_too_large", async () => {
    // Old code: no limits.max_prompt_chars: the long prompt was proxied (200).
    const { gateway, engine } = await start({ limits: { max_prompt_chars: 1000 } });
    const openai = client(gateway);
    expect((await openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x".repeat(500) }] })).choices).toHaveLength(1);
    const error = await rejection(openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x".repeat(2000) }] }));
    expect(error).toBeInstanceOf(APIError);
    const e = error as APIError;
    expect(e.status).toBe(413);
    expect(e.code).toBe("prompt_too_large");
    expect(e.message).toContain("limits.max_prompt_chars");
    expect(completions(engine)).toBe(1);
  });
});

describe("slow readers pin capacity", () => {
  it("streams whose clients never read are cut after timeouts.idle_ms, every upstream slot released", async () => {
    // Old code: the idle timer did not run while the response was paused by backpressure, so the 20 streams held all 20 slots for good and the next client got 429.
    const slots = 20;
    const { gateway, engine } = await start({ limits: { max_in_flight_per_upstream: slots, queue_timeout_ms: 3000 }, timeouts: { idle_ms: 500 } }, { chunks: 1_000_000, chunkBytes: 8192 });
    const body = chat("stream to me", { stream: true });
    const request = `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const readers = await Promise.all(
      Array.from({ length: slots }, async () => {
        const s = await socketTo(gateway);
        s.socket.removeAllListeners("data");
        s.socket.pause(); // never reads
        s.socket.write(request);
        return s;
      }),
    );
    expect(readers.every((r) => !r.closed())).toBe(true);
    await waitFor(() => completions(engine) === slots, () => `${completions(engine)} reached the engine`, 10_000);
    const inFlight = () => sample(gateway, 'adp_gateway_upstream_in_flight_requests{upstream="0"}');
    const stalled = () => sample(gateway, 'adp_gateway_upstream_stream_cuts_total{upstream="0",reason="client_stalled"}');
    await waitFor(
      () => inFlight() === 0 && stalled() === slots && engine.aborted === slots,
      () => `in flight ${inFlight()}, client_stalled cuts ${stalled()}, engine aborts ${engine.aborted}, chunks streamed ${engine.streamed}`,
      15_000,
    );
    // The engine streamed until backpressure stopped it (it honours it), not the whole answer.
    expect(engine.streamed).toBeGreaterThan(0);
    expect(engine.streamed).toBeLessThan(slots * 1_000_000);
    const answer = await client(gateway).chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(answer.choices[0]!.message.content).toBe("hello from e0");
  });
});

describe("connection limit and read timeouts", () => {
  it("past limits.max_connections, connections are closed on arrival and counted; once they go, requests are served", async () => {
    // Old code: no limits.max_connections: none of the 80 half-sent requests lost its connection (a flood could take every descriptor).
    const limit = 50;
    const tried = 80;
    const { gateway } = await start({ limits: { max_connections: limit } });
    const sockets = await Promise.all(Array.from({ length: tried }, () => socketTo(gateway)));
    for (const s of sockets) if (!s.closed()) s.socket.write("GET /health HTTP/1.1\r\nhost: x\r\n"); // never a complete head
    await waitFor(() => sockets.filter((s) => s.closed()).length >= tried - limit, () => `${sockets.filter((s) => s.closed()).length} closed`, 10_000);
    await new Promise((r) => setTimeout(r, 300)); // the ones kept stay open
    const stillOpen = sockets.filter((s) => !s.closed()).length;
    expect(stillOpen).toBe(limit); // at most the limit stay open, and those under it are kept
    expect(sample(gateway, "adp_gateway_client_connections")).toBe(limit);
    expect(sample(gateway, "adp_gateway_client_connections_refused_total")).toBeGreaterThanOrEqual(tried - limit);
    for (const s of sockets) s.socket.destroy();
    await waitFor(() => sample(gateway, "adp_gateway_client_connections") === 0, () => `${sample(gateway, "adp_gateway_client_connections")} connections`, 10_000);
    expect((await post(gateway, chat("hi"))).status).toBe(200);
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
  });

  it("a half-sent head is answered 408 after timeouts.headers_ms, a trickled body after timeouts.request_ms; both counted", async () => {
    // Old code: no timeouts.headers_ms (a half-sent head was held until request_ms) and no client_read_timeouts_total counter.
    const headersMs = 300;
    const requestMs = 2500;
    const { gateway } = await start({ timeouts: { headers_ms: headersMs, request_ms: requestMs } });
    const half = await socketTo(gateway);
    half.socket.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-");
    const trickled = await socketTo(gateway);
    trickled.socket.write("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{");
    const trickle = setInterval(() => (trickled.socket.writable ? trickled.socket.write(" ") : clearInterval(trickle)), 100);
    open.push({ close: () => clearInterval(trickle) });
    await waitFor(() => half.closed() && trickled.closed(), () => `half-sent head closed: ${half.closed()}, trickled body closed: ${trickled.closed()}`, requestMs + 8000);
    // The head's bound cut the half-sent head, well before the whole request's.
    expect(half.text()).toMatch(/^(HTTP\/1\.1 408 |$)/);
    expect(half.closedAfterMs()!).toBeGreaterThanOrEqual(headersMs / 2);
    expect(half.closedAfterMs()!).toBeLessThan(requestMs / 2);
    expect(trickled.text()).toMatch(/^HTTP\/1\.1 408 /);
    expect(trickled.closedAfterMs()!).toBeGreaterThan(half.closedAfterMs()!);
    expect(trickled.closedAfterMs()!).toBeGreaterThanOrEqual(requestMs / 2);
    expect(sample(gateway, "adp_gateway_client_read_timeouts_total")).toBe(2);
    expect((await post(gateway, chat("hi"))).status).toBe(200);
  });
});

describe("timeouts.max_stream_ms", () => {
  it("ends an endless stream with the SSE error event stream_max_duration (an APIError for the openai client) and releases its slot", async () => {
    // Old code: no timeouts.max_stream_ms: the endless stream went on (past this test's 60 s), holding its slot.
    const maxMs = 1000;
    const { gateway, engine } = await start({ limits: { max_in_flight_per_upstream: 1, queue_timeout_ms: 2000 }, timeouts: { max_stream_ms: maxMs } }, { chunks: 1_000_000, chunkGapMs: 50 });
    const started = performance.now();
    const stream = await client(gateway).chat.completions.create({ model: "m", messages: [{ role: "user", content: "go on forever" }], stream: true });
    let chunks = 0;
    const error = await rejection(
      (async () => {
        for await (const _ of stream) chunks++;
      })(),
    );
    const elapsed = performance.now() - started;
    expect(error).toBeInstanceOf(APIError);
    expect(error).not.toBeInstanceOf(APIConnectionError);
    expect((error as APIError).code).toBe("stream_max_duration");
    expect(chunks).toBeGreaterThan(0);
    expect(elapsed).toBeGreaterThanOrEqual(maxMs * 0.9);
    expect(elapsed).toBeLessThan(maxMs + 10_000);
    const inFlight = () => sample(gateway, 'adp_gateway_upstream_in_flight_requests{upstream="0"}');
    await waitFor(() => inFlight() === 0 && engine.aborted === 1, () => `in flight ${inFlight()}, engine aborts ${engine.aborted}`);
    // On the wire: the event, then [DONE], the stream ended cleanly.
    const raw = await (await post(gateway, chat("again", { stream: true }))).text();
    const events = raw.split("\n\n").filter((e) => e !== "");
    expect(events.at(-1)).toBe("data: [DONE]");
    expect(JSON.parse(events.at(-2)!.slice("data: ".length))).toMatchObject({ error: { type: "server_error", code: "stream_max_duration" } });
    expect(events.length).toBeGreaterThan(3);
    expect(sample(gateway, 'adp_gateway_upstream_stream_cuts_total{upstream="0",reason="max_duration"}')).toBe(2);
    // The one slot is free: a request is served, not queued into a 429.
    await waitFor(() => inFlight() === 0, () => `in flight ${inFlight()}`);
    expect((await post(gateway, chat("hi"))).status).toBe(200);
  });
});
