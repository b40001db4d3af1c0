// A mock OpenAI-compatible engine on loopback for the gateway's tests: it
// speaks the API's exact shapes (chat and text completions, streaming as SSE
// `data:` lines ending with `data: [DONE]`, /v1/models, /health), records what
// it received, and can be made slow, failing or key-protected.

import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach } from "vitest";
import { prefillAnswer, type PrefillRole } from "./mock-prefill.js";

/** What one received request looked like. */
export interface Received {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingMessage["headers"];
  readonly body: unknown;
  /** The body's text, as it came (long integers with every digit). */
  readonly raw: string;
}

/** Behaviour knobs, changeable while it runs. */
export interface EngineBehaviour {
  /** Answer every completion with this status (and an OpenAI error body). */
  failWith?: number;
  /** Milliseconds before the response headers. */
  delayMs?: number;
  /** Milliseconds between a whole answer's head (sent at once) and its body. */
  bodyDelayMs?: number;
  /** Stream chunks: how many, and the gap between them. */
  chunks?: number;
  chunkGapMs?: number;
  /** Pads each stream chunk's content to about this many bytes. */
  chunkBytes?: number;
  /** Required `Authorization: Bearer` key. */
  apiKey?: string;
  /** /health status. */
  healthStatus?: number;
  /**
   * TensorRT-LLM's `/kv_cache_events` (POST): the bodies queued here are served
   * one per call, byte for byte, then `[]` (each call drains the engine's buffer).
   */
  kvCacheEvents?: string[];
  /** `GET /metrics`: this text as vLLM's Prometheus page, or a status to fail with. */
  loadMetrics?: string | number;
  /**
   * A disaggregated prefill server's whole answer (mock-prefill.ts): trtllm a
   * context server's (disaggregated_params per choice), vllm a NIXL prefill's
   * (top-level kv_transfer_params), sglang a prefill's (nothing to hand over).
   */
  prefill?: PrefillRole;
}

/** A running mock engine. */
export interface MockEngine {
  readonly url: string;
  readonly name: string;
  readonly received: Received[];
  /** Completion requests whose client went away before the response ended. */
  aborted: number;
  /** Completion requests being answered now. */
  active: number;
  /** Stream chunks written so far (a writer that honours backpressure stops while its reader does not read). */
  streamed: number;
  behaviour: EngineBehaviour;
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Starts a mock engine named `name` on a free port of loopback address `host`. */
export async function startMockEngine(name: string, behaviour: EngineBehaviour = {}, host = "127.0.0.1"): Promise<MockEngine> {
  const engine: Partial<MockEngine> & { received: Received[]; behaviour: EngineBehaviour; aborted: number; active: number; streamed: number } = { name, received: [], behaviour, aborted: 0, active: 0, streamed: 0 };
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const text = Buffer.concat(chunks).toString("utf8");
    let body: unknown = null;
    try {
      body = text ? JSON.parse(text) : null;
    } catch {
      body = text;
    }
    const path = req.url ?? "/";
    engine.received.push({ method: req.method ?? "", path, headers: req.headers, body, raw: text });
    const b = engine.behaviour;
    if (path === "/health") {
      res.writeHead(b.healthStatus ?? 200).end("ok");
      return;
    }
    if (b.apiKey !== undefined && req.headers.authorization !== `Bearer ${b.apiKey}`) {
      res.writeHead(401, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "bad key", type: "invalid_request_error", param: null, code: "invalid_api_key" } }));
      return;
    }
    if (path === "/metrics" && b.loadMetrics !== undefined) {
      if (typeof b.loadMetrics === "number") res.writeHead(b.loadMetrics).end();
      else res.writeHead(200, { "content-type": "text/plain; version=0.0.4" }).end(b.loadMetrics);
      return;
    }
    if (path === "/kv_cache_events" && b.kvCacheEvents !== undefined) {
      const next = b.kvCacheEvents.shift() ?? "[]";
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(next) }).end(next);
      return;
    }
    if (path === "/v1/models") {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: [{ id: "mock-model", object: "model", created: 0, owned_by: name }] }));
      return;
    }
    if (path !== "/v1/chat/completions" && path !== "/v1/completions") {
      res.writeHead(404).end();
      return;
    }
    engine.active++;
    let finished = false;
    res.on("close", () => {
      engine.active--;
      if (!finished) engine.aborted++;
    });
    if (b.delayMs) await sleep(b.delayMs);
    if (b.failWith !== undefined) {
      finished = true;
      res.writeHead(b.failWith, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "engine failure", type: "server_error", param: null, code: null } }));
      return;
    }
    const chat = path === "/v1/chat/completions";
    const stream = (body as { stream?: boolean } | null)?.stream === true;
    const id = `cmpl-${engine.received.length}`;
    if (b.prefill !== undefined) {
      finished = true;
      const answer = prefillAnswer(b.prefill, name, chat, id, text);
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) }).end(answer);
      return;
    }
    if (!stream) {
      finished = true;
      const choice = chat ? { index: 0, message: { role: "assistant", content: `hello from ${name}` }, finish_reason: "stop" } : { index: 0, text: `hello from ${name}`, finish_reason: "stop" };
      // With its length, as the engines' servers (uvicorn behind FastAPI) send a whole JSON answer.
      const answer = JSON.stringify({ id, object: chat ? "chat.completion" : "text_completion", created: 0, model: "mock-model", choices: [choice], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) });
      if (b.bodyDelayMs) {
        res.flushHeaders();
        await sleep(b.bodyDelayMs);
      }
      res.end(answer);
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const n = b.chunks ?? 3;
    for (let i = 0; i < n; i++) {
      if (res.destroyed) return;
      const pad = b.chunkBytes ? ".".repeat(b.chunkBytes) : "";
      const delta = chat ? { index: 0, delta: i === 0 ? { role: "assistant", content: `${name}:${i}${pad}` } : { content: `:${i}${pad}` }, finish_reason: null } : { index: 0, text: `${name}:${i}${pad}`, finish_reason: null };
      if (!res.write(`data: ${JSON.stringify({ id, object: chat ? "chat.completion.chunk" : "text_completion", created: 0, model: "mock-model", choices: [delta] })}\n\n`)) {
        await new Promise<void>((r) => {
          // Whichever comes first removes the other: a long stream would otherwise pile up close listeners.
          const done = () => {
            res.off("drain", done);
            res.off("close", done);
            r();
          };
          res.once("drain", done);
          res.once("close", done);
        });
      }
      engine.streamed++;
      if (b.chunkGapMs) await sleep(b.chunkGapMs);
    }
    if (res.destroyed) return;
    finished = true;
    res.end("data: [DONE]\n\n");
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return Object.assign(engine, {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  }) as MockEngine;
}

/** The first `http://…` line a child process prints on standard output (how `adp-router serve` announces itself). */
export function urlFrom(child: { stdout: NodeJS.ReadableStream | null }): Promise<string> {
  return new Promise((resolve) => {
    let out = "";
    child.stdout!.on("data", (d) => {
      out += d;
      const line = out.split("\n").find((l) => /^http:\/\/\S+$/.test(l));
      if (line) resolve(line);
    });
  });
}

/** What a suite's tests start, cleaned up after each test. */
export interface Tracked {
  readonly children: ChildProcess[];
  readonly engines: MockEngine[];
  /** Folders removed with what they hold. */
  readonly dirs: string[];
}

/**
 * Child processes, mock engines and folders a test starts or makes, killed,
 * closed and removed after each test (registers the afterEach in the calling
 * suite).
 */
export function trackedForCleanup(): Tracked {
  const children: ChildProcess[] = [];
  const engines: MockEngine[] = [];
  const dirs: string[] = [];
  afterEach(async () => {
    for (const c of children.splice(0)) if (c.exitCode === null) c.kill("SIGKILL");
    for (const e of engines.splice(0)) await e.close();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  return { children, engines, dirs };
}

/**
 * A mock engine and, in a fresh folder, a `serve` configuration in front of
 * it alone (loopback, port 0, warn-level logs); all cleaned up after the test.
 */
export async function oneEngineServeConfig(tracked: Tracked): Promise<{ engine: MockEngine; dir: string; config: string }> {
  const engine = await startMockEngine("e0");
  tracked.engines.push(engine);
  const dir = mkdtempSync(join(tmpdir(), "adp-serve-"));
  tracked.dirs.push(dir);
  const config = join(dir, "gateway.yaml");
  writeFileSync(config, `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: warn }\nupstreams:\n  - url: ${engine.url}\n`);
  return { engine, dir, config };
}

/** Starts `n` mock engines named e0, e1, … with `behaviour`, each pushed onto `open` (closed by the caller's cleanup) as it starts. */
export async function startEngines(n: number, open: { close(): Promise<void> }[], behaviour: EngineBehaviour = {}): Promise<MockEngine[]> {
  const out: MockEngine[] = [];
  for (let i = 0; i < n; i++) {
    const e = await startMockEngine(`e${i}`, { ...behaviour });
    open.push(e);
    out.push(e);
  }
  return out;
}
