// Prefill/decode disaggregation end to end: the gateway on loopback in front
// of mock prefill and decode servers that answer in each engine's own shape
// (test/support/mock-prefill.ts names the source files and versions), driven
// by the official `openai` client. Each request's fields are checked as it
// reached each server, and each failure rule has a test.
import { spawn, spawnSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createConnection } from "node:net";
import OpenAI, { APIError } from "openai";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, createGatewayReader, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, urlFrom, type MockEngine, type Received } from "../support/mock-engine.js";
import { mockTokenIds, type PrefillRole } from "../support/mock-prefill.js";
import { waitFor } from "../support/wait.js";
import { vllmHandOff } from "../../gateway/src/disaggregation/protocols.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** A disaggregated gateway over `p` prefill and `d` decode mock servers. */
interface Pools {
  readonly gateway: Gateway;
  readonly prefill: MockEngine[];
  readonly decode: MockEngine[];
  readonly client: OpenAI;
  readonly logs: Record<string, unknown>[];
  readonly yaml: string;
}

/** Options of {@link pools}. */
interface PoolOptions {
  readonly prefill?: number;
  readonly decode?: number;
  /** Lines under `disaggregation:` beyond the protocol. */
  readonly section?: string;
  /** Lines added under prefill upstream `i` / decode upstream `i`. */
  readonly prefillUpstream?: (i: number) => string;
  readonly decodeUpstream?: (i: number) => string;
  /** Top-level lines. */
  readonly extra?: string;
  /** The servers' loopback address. */
  readonly host?: string;
  /** The `health:` section (checks every minute by default: the tests' failures are the traffic's). */
  readonly health?: string;
}

/** Starts the mock servers and a gateway over them. */
async function pools(protocol: "trtllm" | "vllm" | "sglang", options: PoolOptions = {}): Promise<Pools> {
  const role: PrefillRole = { engine: protocol };
  const prefill = await Promise.all(Array.from({ length: options.prefill ?? 2 }, (_, i) => startMockEngine(`P${i}`, { prefill: role }, options.host)));
  const decode = await Promise.all(Array.from({ length: options.decode ?? 2 }, (_, i) => startMockEngine(`D${i}`, {}, options.host)));
  open.push(...prefill, ...decode);
  const yaml = [
    "listen: { port: 0 }",
    `health: ${options.health ?? "{ interval_ms: 60000 }"}`,
    "routing: { tokens_per_block: 4 }",
    options.extra ?? "",
    "disaggregation:",
    `  protocol: ${protocol}`,
    options.section ?? "",
    "upstreams:",
    ...prefill.flatMap((e, i) => [`  - url: ${e.url}`, `    name: P${i}`, "    role: prefill", options.prefillUpstream?.(i) ?? ""]),
    ...decode.flatMap((e, i) => [`  - url: ${e.url}`, `    name: D${i}`, "    role: decode", options.decodeUpstream?.(i) ?? ""]),
  ].join("\n");
  const logs: Record<string, unknown>[] = [];
  const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text: yaml } }), { logger: pino({ level: "info" }, { write: (l: string) => logs.push(JSON.parse(l) as Record<string, unknown>) }) });
  open.push(gateway);
  return { gateway, prefill, decode, logs, yaml, client: new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: "x", maxRetries: 0 }) };
}

/** The completion requests an engine received. */
const completions = (e: MockEngine): Received[] => e.received.filter((r) => r.path.startsWith("/v1/"));
/** Every completion request the engines received, in one list. */
const all = (engines: readonly MockEngine[]) => engines.flatMap(completions);
/** The body of the one request the engines received. */
function only(engines: readonly MockEngine[]): Received {
  const got = all(engines);
  expect(got).toHaveLength(1);
  return got[0]!;
}
const body = (r: Received) => r.body as Record<string, unknown>;
/** A long prompt of its own (several blocks). */
const prompt = (i: number) => `request ${i}: ${"the prefill pool holds the prompt, the decode pool generates; ".repeat(8)}`;

/** A POST of `payload` to the gateway with fetch: status, headers and text. */
async function post(g: Gateway, path: string, payload: unknown, signal?: AbortSignal): Promise<{ status: number; headers: Headers; text: string }> {
  const r = await fetch(`${g.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(payload), ...(signal === undefined ? {} : { signal }) });
  return { status: r.status, headers: r.headers, text: await r.text() };
}

describe("disaggregation: TensorRT-LLM (context and generation servers)", () => {
  it("the context request, its answer's hand-over, the generation request: each field as trtllm-serve disaggregated sends it, whole and streamed", async () => {
    const p = await pools("trtllm");
    const messages = [{ role: "user" as const, content: prompt(1) }];
    const answer = await p.client.chat.completions.create({ model: "m", messages, max_tokens: 20 });
    expect(answer.choices[0]!.message.content).toMatch(/^hello from D[01]$/);
    const context = only(p.prefill);
    const generation = only(p.decode);
    const ctx = body(context);
    expect(ctx.stream).toBe(false);
    expect(ctx.stream_options).toBeNull();
    expect(ctx.max_tokens).toBe(20); // the context server caps it at one token itself
    expect(ctx.messages).toEqual(messages);
    const id = /"disagg_request_id":(\d+)/.exec(context.raw)![1]!;
    expect(BigInt(id)).toBeGreaterThanOrEqual(1n << 40n); // TensorRT-LLM's global id range, every digit sent
    expect(ctx.disaggregated_params).toEqual({ request_type: "context_only", disagg_request_id: Number(id), schedule_style: 0, conversation_id: null });

    const gen = body(generation);
    const params = gen.disaggregated_params as Record<string, unknown>;
    expect(params.request_type).toBe("generation_only");
    expect(params.first_gen_tokens).toEqual([42]);
    expect(params.encoded_opaque_state).toBe(Buffer.from(`state of ${context === completions(p.prefill[0]!)[0] ? "P0" : "P1"}`).toString("base64"));
    expect(params.schedule_style).toBe(0);
    expect(params.ctx_usage).toEqual({ prompt_tokens: mockTokenIds({ messages }).length, completion_tokens: 1, total_tokens: mockTokenIds({ messages }).length + 1 });
    // Both ids with every digit: the context's own and the gateway's.
    expect(/"ctx_request_id":(\d+)/.exec(generation.raw)![1]).toBe(id);
    expect(/"disagg_request_id":(\d+)/.exec(generation.raw)![1]).toBe(id);
    expect(gen.prompt_token_ids).toEqual(mockTokenIds({ messages }));
    expect(gen.messages).toEqual(messages);
    expect(gen.max_tokens).toBe(20);
    expect(gen.stream).toBeUndefined();

    // Streamed: the context request still whole, the generation streamed to the client.
    const stream = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: prompt(2) }], stream: true, stream_options: { include_usage: true } });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    expect(text).toMatch(/^D[01]:0:1:2$/);
    const [ctx2] = all(p.prefill).slice(-1);
    const [gen2] = all(p.decode).slice(-1);
    expect(body(ctx2!).stream).toBe(false);
    expect(body(ctx2!).stream_options).toBeNull();
    expect(body(gen2!).stream).toBe(true);
    expect(body(gen2!).stream_options).toEqual({ include_usage: true });
    expect(/"disagg_request_id":(\d+)/.exec(gen2!.raw)![1]).not.toBe(id); // a new id per request
  });

  it("a completion's prompt becomes the context server's token ids; a client's own disaggregated_params never reaches a server", async () => {
    const p = await pools("trtllm", { prefill: 1, decode: 1 });
    const sent = { model: "m", prompt: prompt(3), max_tokens: 5, disaggregated_params: { request_type: "generation_only", ctx_request_id: 7 } };
    const r = await post(p.gateway, "/v1/completions", sent);
    expect(r.status).toBe(200);
    expect(body(only(p.prefill)).disaggregated_params).toMatchObject({ request_type: "context_only" });
    const gen = body(only(p.decode));
    expect(gen.prompt).toEqual(mockTokenIds({ prompt: prompt(3) }));
    expect((gen.disaggregated_params as Record<string, unknown>).ctx_request_id).not.toBe(7);
  });

  it("a context phase that ends the request (finish_reason stop) is the client's answer, whole or streamed; no generation server is contacted", async () => {
    const p = await pools("trtllm", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.prefill = { engine: "trtllm", finishReason: "stop" };
    const whole = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(whole.choices[0]!.message.content).toBe("first token from P0");
    expect(whole.choices[0]!.finish_reason).toBe("stop");
    expect((whole.choices[0] as unknown as Record<string, unknown>).disaggregated_params).toBeUndefined();
    const stream = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((c) => c.choices[0]!.delta.content)).toEqual(["first token from P0"]);
    expect(chunks[0]!.choices[0]!.finish_reason).toBe("stop");
    expect(all(p.decode)).toHaveLength(0);
  });

  it("a context answer without its hand-over is a 502 naming the prefill server, and no generation server is contacted", async () => {
    for (const omit of ["disaggregated_params", "ctx_request_id"] as const) {
      const p = await pools("trtllm", { prefill: 1, decode: 1 });
      p.prefill[0]!.behaviour.prefill = { engine: "trtllm", omit };
      const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
      expect(r.status).toBe(502);
      expect(JSON.parse(r.text).error.code).toBe("prefill_invalid_answer");
      expect(r.headers.get("x-adp-upstream-name")).toBe("P0");
      expect(all(p.decode)).toHaveLength(0);
    }
  });

  it("a context answer whose ctx_request_id is no uint64 (negative, fractional, a string, 2^64) is a 502, and no generation server is contacted; 2^64 - 1 goes on with every digit", async () => {
    for (const bad of ["-1", "1.5", '"7"', "18446744073709551616", "1e3"]) {
      const p = await pools("trtllm", { prefill: 1, decode: 1 });
      p.prefill[0]!.behaviour.prefill = { engine: "trtllm", ctxRequestId: bad };
      const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
      expect(r.status, bad).toBe(502);
      expect(JSON.parse(r.text).error.message).toContain("ctx_request_id is not a request id");
      expect(all(p.decode)).toHaveLength(0);
    }
    const p = await pools("trtllm", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.prefill = { engine: "trtllm", ctxRequestId: "18446744073709551615" };
    const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(r.status).toBe(200);
    expect(all(p.decode)[0]!.raw).toContain('"ctx_request_id":18446744073709551615');
  });

  it("a vLLM prefill answer with prompt_logprobs for 30,000 tokens (180,000 objects and members, 150,000 strings: past a client body's bounds) still hands over", () => {
    const logprobs = [null, ...Array.from({ length: 30_000 }, (_, i) => ({ [String(i)]: { logprob: -0.5, rank: 1, decoded_token: `t${i}` } }))];
    const answer = JSON.stringify({ id: "x", object: "text_completion", choices: [{ index: 0, text: "a", finish_reason: "length", prompt_logprobs: logprobs }], kv_transfer_params: { do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [1], remote_engine_id: "e", remote_request_id: "x", remote_host: "127.0.0.1", remote_port: 5600, tp_size: 1 } });
    const handOff = vllmHandOff(answer);
    if (handOff.kind !== "decode") expect.fail(handOff.kind);
    expect(JSON.parse(handOff.members.get("kv_transfer_params")!).remote_engine_id).toBe("e");
  });

  it("a context answer nested 200,000 deep is refused before JSON.parse reads it (502 naming the bound), and no generation server is contacted", async () => {
    const p = await pools("trtllm", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.prefill = { engine: "trtllm", opaqueState: `${"[".repeat(200_000)}${"]".repeat(200_000)}` };
    const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text).error.code).toBe("prefill_invalid_answer");
    expect(JSON.parse(r.text).error.message).toContain("nests objects and arrays deeper than 1000");
    expect(all(p.decode)).toHaveLength(0);
  });

  it("conditional disaggregation: a prompt a generation server holds, with a short uncached tail, is served whole there; one it does not hold is disaggregated", async () => {
    const p = await pools("trtllm", { prefill: 1, section: "  max_local_prefill_length: 64", decodeUpstream: () => "    kv_events: { kind: http, interval_ms: 20 }" });
    const config = loadGatewayConfig({ file: { name: "g.yaml", text: p.yaml } });
    const reader = await createGatewayReader(config);
    const held = { model: "m", messages: [{ role: "user" as const, content: prompt(4) }] };
    const tokens = [...(await reader.read("chat", Buffer.from(JSON.stringify(held)), {})).tokens];
    await reader.close();
    // D1's engine reports the prompt's blocks (TensorRT-LLM's /kv_cache_events, 4-token blocks), all but its last few tokens.
    const full = Math.floor((tokens.length - 8) / 4);
    const blocks = Array.from({ length: full }, (_, b) => ({ type: "stored_block", block_hash: 1000 + b, tokens: tokens.slice(b * 4, b * 4 + 4).map((t) => ({ type: "unique_token", token_id: t, token_extra_id: 0 })), cache_level: 0, priority: 35, mm_keys: [] }));
    p.decode[1]!.behaviour.kvCacheEvents = [JSON.stringify([{ event_id: 0, data: { type: "stored", parent_hash: null, blocks }, window_size: 4096 }])];
    await waitFor(() => /adp_gateway_upstream_engine_view_blocks\{pool="decode",upstream="D1"\} [1-9]/.test(p.gateway.metrics()), () => "D1's view never held the blocks");
    const r = await post(p.gateway, "/v1/chat/completions", held);
    expect(r.status).toBe(200);
    expect(r.headers.get("x-adp-upstream-name")).toBe("D1");
    expect(all(p.prefill)).toHaveLength(0);
    const whole = body(only(p.decode));
    expect(whole.disaggregated_params).toBeUndefined();
    expect(whole.messages).toEqual(held.messages);

    // A prompt no generation server holds goes through the context server.
    const cold = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: prompt(5) }] });
    expect(cold.status).toBe(200);
    expect(all(p.prefill)).toHaveLength(1);
    expect((body(all(p.decode)[1]!).disaggregated_params as Record<string, unknown>).request_type).toBe("generation_only");
  });
});

describe("disaggregation: routing each pool by its own router", () => {
  it("a multi-turn chat's prefill goes to the prefill server whose engine holds its prefix (its KV events); its decode to the least-loaded decode server", async () => {
    const p = await pools("trtllm", { prefillUpstream: () => "    kv_events: { kind: http, interval_ms: 20 }" });
    const config = loadGatewayConfig({ file: { name: "g.yaml", text: p.yaml } });
    const reader = await createGatewayReader(config);
    const first = [{ role: "user" as const, content: prompt(6) }];
    const tokens = [...(await reader.read("chat", Buffer.from(JSON.stringify({ model: "m", messages: first })), {})).tokens];
    await reader.close();
    // P1's engine stored the first turn's prompt.
    const blocks = Array.from({ length: Math.floor(tokens.length / 4) }, (_, b) => ({ type: "stored_block", block_hash: 5000 + b, tokens: tokens.slice(b * 4, b * 4 + 4).map((t) => ({ type: "unique_token", token_id: t, token_extra_id: 0 })), cache_level: 0, priority: 35, mm_keys: [] }));
    p.prefill[1]!.behaviour.kvCacheEvents = [JSON.stringify([{ event_id: 0, data: { type: "stored", parent_hash: null, blocks }, window_size: 4096 }])];
    await waitFor(() => /adp_gateway_upstream_engine_view_blocks\{pool="prefill",upstream="P1"\} [1-9]/.test(p.gateway.metrics()), () => "P1's view never held the blocks");

    // Decode server X is busy with a slow request; the next turn's decode goes to the other.
    for (const d of p.decode) d.behaviour.delayMs = 1500;
    const slow = post(p.gateway, "/v1/completions", { model: "m", prompt: "a slow one" });
    await waitFor(() => all(p.decode).length === 1);
    for (const d of p.decode) d.behaviour.delayMs = 0;
    const busy = p.decode.findIndex((d) => completions(d).length === 1);

    const second = [...first, { role: "assistant" as const, content: "an answer" }, { role: "user" as const, content: "and the next turn" }];
    const turn = await p.client.chat.completions.create({ model: "m", messages: second }).withResponse();
    expect(turn.response.headers.get("x-adp-upstream-name")).toBe(`D${1 - busy}`);
    const turns = (e: MockEngine) => completions(e).map((r) => (body(r).messages as unknown[] | undefined)?.length);
    expect(turns(p.prefill[1]!)).toContain(3);
    expect(turns(p.prefill[0]!)).not.toContain(3);
    expect((await slow).status).toBe(200);
    // Both pools' metrics on one page, each sample with its pool, each family's HELP once.
    const page = p.gateway.metrics();
    expect(page).toMatch(/adp_gateway_requests_total\{pool="decode",outcome="ok"\} 2/);
    expect(page.split("\n").filter((l) => l === "# TYPE adp_gateway_upstream_in_flight_requests gauge")).toHaveLength(1);
  });

  it("kv_cache_routing_account_for_in_transfer: a prefill server's load counts the request until its decode begins", async () => {
    const p = await pools("vllm", { prefill: 1, decode: 1, section: "  prefill: { attention_dp_config: { kv_cache_routing_account_for_in_transfer: true } }" });
    p.decode[0]!.behaviour.delayMs = 800;
    const pending = post(p.gateway, "/v1/completions", { model: "m", prompt: prompt(7) });
    await waitFor(() => all(p.decode).length === 1);
    expect(p.gateway.metrics()).toMatch(/adp_gateway_upstream_in_transfer_requests\{pool="prefill",upstream="P0"\} 1/);
    expect((await pending).status).toBe(200);
    expect(p.gateway.metrics()).toMatch(/adp_gateway_upstream_in_transfer_requests\{pool="prefill",upstream="P0"\} 0/);
  });
});

describe("disaggregation: vLLM (NIXL-style connectors)", () => {
  it("the prefill request asks for a remote decode and one token; its answer's kv_transfer_params go to the decode request as the engine wrote them", async () => {
    const p = await pools("vllm", { prefill: 1, decode: 1 });
    const stream = await p.client.completions.create({ model: "m", prompt: prompt(8), max_tokens: 30, stream: true, stream_options: { include_usage: true }, min_tokens: 3 } as OpenAI.CompletionCreateParamsStreaming);
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe("D0:0D0:1D0:2");
    const pre = body(only(p.prefill));
    expect(pre.kv_transfer_params).toEqual({ do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null });
    expect(pre.stream).toBe(false);
    expect(pre.max_tokens).toBe(1);
    expect(pre).not.toHaveProperty("stream_options");
    expect(pre).not.toHaveProperty("min_tokens");
    expect(pre).not.toHaveProperty("max_completion_tokens"); // set only when the client sent it
    expect(pre.prompt).toBe(prompt(8));
    const dec = body(only(p.decode));
    expect(dec.kv_transfer_params).toEqual({ do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [1, 2, 3], remote_engine_id: "engine-P0", remote_request_id: expect.stringMatching(/^cmpl-\d+$/), remote_host: "127.0.0.1", remote_port: 5600, tp_size: 1 });
    expect(dec).toMatchObject({ stream: true, stream_options: { include_usage: true }, max_tokens: 30, min_tokens: 3, prompt: prompt(8) });
  });

  it("max_completion_tokens is 1 on the prefill when the client sent it; a prefill that kept no KV (kv_transfer_params null) leaves the decode to prefill itself", async () => {
    const p = await pools("vllm", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.prefill = { engine: "vllm", noParams: true };
    const answer = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], max_completion_tokens: 9 });
    expect(answer.choices[0]!.message.content).toBe("hello from D0");
    expect(body(only(p.prefill))).toMatchObject({ max_tokens: 1, max_completion_tokens: 1 });
    const dec = body(only(p.decode));
    expect(dec).not.toHaveProperty("kv_transfer_params");
    expect(dec.max_completion_tokens).toBe(9);
  });
});

describe("disaggregation: SGLang (bootstrap rooms)", () => {
  it("one body with the prefill server's bootstrap host, port and one room goes to both servers; the client gets the decode server's answer", async () => {
    const p = await pools("sglang", { prefill: 1, decode: 1, prefillUpstream: () => "    bootstrap_port: 8999" });
    const answer = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: prompt(9) }] });
    expect(answer.choices[0]!.message.content).toBe("hello from D0");
    const pre = only(p.prefill);
    const dec = only(p.decode);
    expect(pre.raw).toBe(dec.raw);
    expect(body(pre)).toMatchObject({ bootstrap_host: "127.0.0.1", bootstrap_port: 8999, messages: [{ role: "user", content: prompt(9) }] });
    const room = /"bootstrap_room":(\d+)/.exec(pre.raw)![1]!;
    expect(BigInt(room)).toBeGreaterThanOrEqual(1n << 40n);
    expect(BigInt(room)).toBeLessThan(1n << 63n);
    // The server's default port when none is configured; a new room per request.
    const q = await pools("sglang", { prefill: 1, decode: 1 });
    await q.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    await q.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    const rooms = all(q.decode).map((r) => /"bootstrap_room":(\d+)/.exec(r.raw)![1]);
    expect(body(all(q.prefill)[0]!).bootstrap_port).toBeNull();
    expect(new Set(rooms).size).toBe(2);
  });

  it("a prefill that fails before the decode server answered stops the decode, and its failure is the client's answer", async () => {
    const p = await pools("sglang", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.failWith = 503;
    p.prefill[0]!.behaviour.delayMs = 100;
    p.decode[0]!.behaviour.delayMs = 2000;
    const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(r.status).toBe(503);
    expect(r.headers.get("x-adp-upstream-name")).toBe("P0");
    await waitFor(() => p.decode[0]!.aborted === 1, () => `decode aborted ${p.decode[0]!.aborted}`);
  });

  it("a prefill that fails after the decode server's head came, its body not yet: the decode's answer is the client's, on either server path", async () => {
    // Old code (84e69b6): on node:http's path the decode's held head did not count as its answer: the decode was stopped
    // and the prefill's failure answered with the decode's headers (its Content-Length among them) still set.
    const p = await pools("sglang", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.failWith = 503;
    p.prefill[0]!.behaviour.delayMs = 300;
    p.decode[0]!.behaviour.bodyDelayMs = 1200;
    const { port } = new URL(p.gateway.url);
    const payload = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] });
    const heads = {
      own: `POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: ${payload.length}\r\n\r\n${payload}`,
      "node:http": `POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n${payload.length.toString(16)}\r\n${payload}\r\n0\r\n\r\n`,
    };
    for (const [path, request] of Object.entries(heads)) {
      const text = await new Promise<string>((resolve) => {
        const c = createConnection(Number(port), "127.0.0.1");
        let got = "";
        c.on("data", (d: Buffer) => (got += d.toString("latin1")));
        c.on("close", () => resolve(got));
        c.write(request);
      });
      const [head, answer] = text.split("\r\n\r\n");
      expect([path, head!.split("\r\n")[0]]).toEqual([path, "HTTP/1.1 200 OK"]);
      expect(Number(/\r\ncontent-length: (\d+)/i.exec(head!)![1])).toBe(Buffer.byteLength(answer!));
      expect(answer).toContain("hello from D0");
    }
  });

  it("a decode server that fails stops the prefill, and its failure is the client's answer", async () => {
    const p = await pools("sglang", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.delayMs = 3000;
    p.decode[0]!.behaviour.failWith = 503;
    const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(r.status).toBe(503);
    expect(r.headers.get("x-adp-upstream-name")).toBe("D0");
    await waitFor(() => p.prefill[0]!.aborted === 1, () => `prefill aborted ${p.prefill[0]!.aborted}`);
    expect(p.gateway.metrics()).toMatch(/adp_gateway_requests_by_code_total\{pool="decode",code="503"\} 1/);
  });

  it("a client that leaves mid-stream cancels both servers", async () => {
    const p = await pools("sglang", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.delayMs = 3000;
    p.decode[0]!.behaviour = { chunks: 50, chunkGapMs: 50 };
    const ac = new AbortController();
    const stream = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true }, { signal: ac.signal });
    for await (const _chunk of stream) {
      ac.abort();
      break;
    }
    await waitFor(() => p.prefill[0]!.aborted === 1 && p.decode[0]!.aborted === 1, () => `prefill aborted ${p.prefill[0]!.aborted}, decode ${p.decode[0]!.aborted}`);
  });
});

describe("disaggregation: the delivery rule per phase", () => {
  it("a prefill that never reached its server goes to another prefill server; the decode follows", async () => {
    const p = await pools("vllm", { decode: 1 });
    await p.prefill[0]!.close(); // refuses connections from now on: never delivered
    for (let i = 0; i < 4; i++) expect((await post(p.gateway, "/v1/completions", { model: "m", prompt: prompt(10 + i) })).status).toBe(200);
    expect(all(p.prefill)).toHaveLength(4);
    expect(completions(p.prefill[1]!)).toHaveLength(4);
    expect(all(p.decode)).toHaveLength(4);
  });

  it("a prefill server's own failure is the client's answer (a 4xx passed through), a cut answer a 502; no decode server is contacted, no other prefill server tried", async () => {
    const p = await pools("trtllm", { decode: 1 });
    for (const e of p.prefill) e.behaviour.failWith = 400;
    const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(r.status).toBe(400);
    expect(JSON.parse(r.text).error.message).toBe("engine failure");
    for (const e of p.prefill) e.behaviour.failWith = 500;
    const s = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e);
    expect(s).toBeInstanceOf(APIError);
    expect((s as APIError).status).toBe(500);
    expect(all(p.prefill)).toHaveLength(2); // one each: never a second prefill server for one request
    expect(all(p.decode)).toHaveLength(0);
  });

  it("a decode server that received the request and failed is the client's answer, never retried; one that never received it is replaced", async () => {
    const p = await pools("trtllm", { prefill: 1 });
    for (const d of p.decode) d.behaviour.failWith = 500;
    const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(r.status).toBe(500);
    expect(all(p.decode)).toHaveLength(1);
    for (const d of p.decode) d.behaviour.failWith = undefined;
    await p.decode[0]!.close();
    for (let i = 0; i < 3; i++) expect((await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: `again ${i}` }] })).status).toBe(200);
    expect(completions(p.decode[1]!).filter((x) => x.body !== null && (body(x).messages as { content: string }[])[0]!.content.startsWith("again"))).toHaveLength(3);
  });

  it("a client that leaves during the prefill cancels it; no decode server is contacted", async () => {
    const p = await pools("trtllm", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.delayMs = 2000;
    const ac = new AbortController();
    const sent = post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] }, ac.signal).catch((e: unknown) => e);
    await waitFor(() => p.prefill[0]!.active === 1);
    ac.abort();
    await sent;
    await waitFor(() => p.prefill[0]!.aborted === 1);
    await new Promise((r) => setTimeout(r, 100));
    expect(all(p.decode)).toHaveLength(0);
    expect(p.gateway.metrics()).toMatch(/adp_gateway_upstream_in_flight_requests\{pool="prefill",upstream="P0"\} 0/);
  });
});

describe("disaggregation: configuration", () => {
  const check = (text: string) => {
    try {
      loadGatewayConfig({ file: { name: "g.yaml", text } });
      return [];
    } catch (error) {
      return (error as { issues: { field: string; message: string }[] }).issues.map((i) => `${i.field}: ${i.message}`);
    }
  };
  it("roles need the section and the section roles; each pool needs a server; protocol-specific settings are refused elsewhere", () => {
    expect(check("upstreams:\n  - { url: http://a:1, role: prefill }")).toEqual([expect.stringMatching(/^upstreams\[0\]\.role: takes effect only with a disaggregation/)]);
    expect(check("disaggregation: { protocol: vllm }\nupstreams:\n  - { url: http://a:1 }\n  - { url: http://b:1, role: decode }")).toEqual(expect.arrayContaining([expect.stringMatching(/^upstreams\[0\]\.role: is required/), expect.stringMatching(/no upstream of role prefill/)]));
    expect(check("disaggregation: { protocol: tensorrt-llm }\nupstreams:\n  - { url: http://a:1, role: context }\n  - { url: http://b:1, role: decode }")).toEqual([expect.stringMatching(/^upstreams\[0\]\.role: .*\(did you mean prefill\?\)$/), expect.stringMatching(/^disaggregation\.protocol: .*\(did you mean trtllm\?\)$/)]);
    expect(check("disaggregation: { protocol: nixl }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }")).toEqual([expect.stringMatching(/^disaggregation\.protocol: must be one of trtllm, vllm, sglang/)]);
    expect(check("disaggregation: { protocol: vllm, max_local_prefill_length: 10 }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }")).toEqual([expect.stringMatching(/max_local_prefill_length: is TensorRT-LLM's conditional/)]);
    expect(check("disaggregation: { protocol: trtllm, max_local_prefill_length: 10, decode: { policy: default } }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }")).toEqual([expect.stringMatching(/^disaggregation\.decode\.policy: must route by prefix/)]);
    expect(check("disaggregation: { protocol: trtllm }\nupstreams:\n  - { url: http://a:1, role: prefill, bootstrap_port: 8998 }\n  - { url: http://b:1, role: decode }")).toEqual([expect.stringMatching(/bootstrap_port: is an SGLang prefill server's/)]);
    expect(check("disaggregation: { protocol: sglang, prefill: { attention_dp_config: { kv_cache_routing_load_balance_weight: heavy } } }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }")[0]).toMatch(/^disaggregation\.prefill\.attention_dp_config\.kv_cache_routing_load_balance_weight/);
    expect(check("disaggregation: { protocol: sglang }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }")).toEqual([]);
  });

  it("examples/gateway/disaggregated.yaml is valid, and the built CLI serves it in front of TensorRT-LLM servers", async () => {
    const example = readFileSync("examples/gateway/disaggregated.yaml", "utf8");
    const key = { TRTLLM_INTERNAL_AUTH_KEY: "x".repeat(32) };
    const config = loadGatewayConfig({ file: { name: "disaggregated.yaml", text: example }, env: key });
    expect(config.upstreams.map((u) => `${u.name}:${u.role}`)).toEqual(["ctx-0:prefill", "ctx-1:prefill", "gen-0:decode"]);
    const servers = [await startMockEngine("ctx-0", { prefill: { engine: "trtllm" }, kvCacheEvents: [] }), await startMockEngine("ctx-1", { prefill: { engine: "trtllm" }, kvCacheEvents: [] }), await startMockEngine("gen-0", { kvCacheEvents: [] })];
    open.push(...servers);
    const dir = mkdtempSync(path.join(tmpdir(), "disagg-"));
    const file = path.join(dir, "g.yaml");
    writeFileSync(file, example.replace("port: 8000", "port: 0").replace(/http:\/\/127\.0\.0\.1:800([123])/g, (_m, n: string) => servers[Number(n) - 1]!.url));
    const child = spawn(process.execPath, [path.resolve("gateway/dist/cli.js"), "serve", "--workers", "1", "--config", file, "--log-level", "silent"], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...key } });
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    try {
      const url = await urlFrom(child);
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "x", maxRetries: 0 });
      const answer = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: prompt(40) }] });
      expect(answer.choices[0]!.message.content).toBe("hello from gen-0");
      expect(all(servers.slice(0, 2))).toHaveLength(1);
      expect(completions(servers[2]!)[0]!.headers["x-trtllm-disagg-auth"]).toMatch(/^sha256=[0-9a-f]{64}$/);
    } finally {
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
      rmSync(dir, { recursive: true });
    }
  }, 20_000);

  it("serve --disaggregation P --prefill URL --decode URL: pools from flags alone; a role without a protocol is refused", async () => {
    const prefill = await startMockEngine("P", { prefill: { engine: "vllm" } });
    const decode = await startMockEngine("D");
    open.push(prefill, decode);
    const cli = path.resolve("gateway/dist/cli.js");
    const child = spawn(process.execPath, [cli, "serve", "--workers", "1", "--port", "0", "--log-level", "silent", "--disaggregation", "vllm", "--prefill", prefill.url, "--decode", decode.url], { stdio: ["ignore", "pipe", "pipe"] });
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    try {
      const url = await urlFrom(child);
      const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hi" }) });
      expect(r.status).toBe(200);
      expect(body(only([prefill])).kv_transfer_params).toMatchObject({ do_remote_decode: true });
      expect(body(only([decode])).kv_transfer_params).toMatchObject({ do_remote_prefill: true });
    } finally {
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
    }
    const refused = spawnSync(process.execPath, [cli, "serve", "--workers", "1", "--port", "0", "--prefill", prefill.url, "--decode", decode.url], { encoding: "utf8" });
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(/role: takes effect only with a disaggregation: section or --disaggregation PROTOCOL/);
  }, 20_000);

  it("validate names the pools", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "disagg-"));
    const file = path.join(dir, "g.yaml");
    writeFileSync(file, "disaggregation: { protocol: sglang }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }\n  - { url: http://c:1, role: decode }\n");
    const out = spawnSync(process.execPath, [path.resolve("gateway/dist/cli.js"), "validate", file], { encoding: "utf8" });
    rmSync(dir, { recursive: true });
    expect(out.status).toBe(0);
    expect(out.stdout).toMatch(/valid \(3 upstreams in pools of sglang: 1 prefill, 2 decode, listening/);
  });

  it("each pool routes by its own policy: the prefill pool by prefix (the file's policy), the decode pool by load unless set", () => {
    const config = loadGatewayConfig({ file: { name: "g.yaml", text: "policy: conversation\ndisaggregation: { protocol: vllm, decode: { policy: kv_cache_aware } }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }" } });
    expect(config.disaggregation!.prefill.attentionDp.kvCacheRoutingConversationAffinity).toBe(true);
    expect(config.disaggregation!.decode.attentionDp.enableKvCacheAwareRouting).toBe(true);
    const plain = loadGatewayConfig({ file: { name: "g.yaml", text: "disaggregation: { protocol: vllm }\nupstreams:\n  - { url: http://a:1, role: prefill }\n  - { url: http://b:1, role: decode }" } });
    expect(plain.disaggregation!.prefill.attentionDp.enableKvCacheAwareRouting).toBe(true);
    expect(plain.disaggregation!.decode.attentionDp.enableKvCacheAwareRouting).toBe(false);
  });
});

describe("disaggregation: TensorRT-LLM's signatures, SGLang's DP groups, refusals and counting", () => {
  const hmac = (key: string, text: string) => `sha256=${createHmac("sha256", key).update(text).digest("hex")}`;
  it("with internal_request_auth_key the generation request's hand-over is signed as TensorRT-LLM's front end signs it; a client's sub-agent hint reaches neither phase", async () => {
    process.env.TEST_TRTLLM_KEY = "k".repeat(32);
    const p = await pools("trtllm", { prefill: 1, decode: 1, extra: "auth: { internal_request_auth_key_env: TEST_TRTLLM_KEY }" });
    delete process.env.TEST_TRTLLM_KEY;
    const r = await fetch(`${p.gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-trtllm-subagent-affinity-id": "child-1", "x-trtllm-subagent-affinity-auth": "sha256=forged" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }) });
    expect(r.status).toBe(200);
    const ctx = only(p.prefill);
    const gen = only(p.decode);
    const state = (body(gen).disaggregated_params as Record<string, unknown>).encoded_opaque_state as string;
    expect(gen.headers["x-trtllm-disagg-auth"]).toBe(hmac("k".repeat(32), `{"ctx_info_endpoint":null,"encoded_opaque_state":${JSON.stringify(state)}}`));
    expect(ctx.headers["x-trtllm-disagg-auth"]).toBeUndefined();
    for (const sent of [ctx, gen]) {
      expect(sent.headers["x-trtllm-subagent-affinity-id"]).toBeUndefined();
      expect(sent.headers["x-trtllm-subagent-affinity-auth"]).toBeUndefined();
    }

    // Without a key: nothing signed, and the file says what that means.
    const q = await pools("trtllm", { prefill: 1, decode: 1 });
    expect(loadGatewayConfig({ file: { name: "g.yaml", text: q.yaml } }).warnings.map((w) => w.message)).toContainEqual(expect.stringMatching(/generation requests go unsigned/));
    await post(q.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(only(q.decode).headers["x-trtllm-disagg-auth"]).toBeUndefined();
  });

  it("a context answer whose signed fields are not TensorRT-LLM's types (a nested list for the opaque state) is a 502, and no slot is kept", async () => {
    const p = await pools("trtllm", { prefill: 1, decode: 1, section: "  max_local_prefill_length: 8", decodeUpstream: () => "" });
    p.prefill[0]!.behaviour.prefill = { engine: "trtllm", opaqueState: "[".repeat(50_000) + "]".repeat(50_000) };
    const r = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: prompt(30) }] });
    expect(r.status).toBe(502);
    expect(JSON.parse(r.text).error.code).toBe("prefill_invalid_answer");
    expect(all(p.decode)).toHaveLength(0);
    const health = (await (await fetch(`${p.gateway.url}/health`)).json()) as { upstreams: { in_flight: number }[] };
    expect(health.upstreams.map((u) => u.in_flight)).toEqual([0, 0]);
  });

  it("SGLang: a prefill pinned to a DP rank gets a bootstrap room of that rank modulo its DP size; an IPv6 prefill server's host keeps its brackets", async () => {
    const p = await pools("sglang", { prefill: 1, decode: 1, prefillUpstream: () => "    dp_ranks: 4\n    rank_routing: adp" });
    for (let i = 0; i < 8; i++) expect((await post(p.gateway, "/v1/completions", { model: "m", prompt: prompt(20 + i) })).status).toBe(200);
    const sent = completions(p.prefill[0]!);
    expect(sent).toHaveLength(8);
    const ranks = new Set<number>();
    sent.forEach((r, i) => {
      const rank = Number(r.headers["x-data-parallel-rank"]);
      ranks.add(rank);
      const room = BigInt(/"bootstrap_room":(\d+)/.exec(r.raw)![1]!);
      expect(Number(room % 4n)).toBe(rank);
      expect(/"bootstrap_room":(\d+)/.exec(completions(p.decode[0]!)[i]!.raw)![1]).toBe(String(room));
    });
    expect(ranks.size).toBeGreaterThan(1); // the rank router spread them, so agreeing is not luck

    const v6 = await pools("sglang", { prefill: 1, decode: 1, host: "::1" });
    expect((await post(v6.gateway, "/v1/completions", { model: "m", prompt: "hi" })).status).toBe(200);
    expect(body(only(v6.decode)).bootstrap_host).toBe("[::1]");
  });

  it("TensorRT-LLM refuses n > 1 and batched prompts before any server sees them; a streamed context answer that ended the request carries its usage when asked", async () => {
    const p = await pools("trtllm", { prefill: 1, decode: 1 });
    const n = await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }], n: 2 });
    expect(n.status).toBe(400);
    expect(JSON.parse(n.text).error).toMatchObject({ code: "unsupported_with_disaggregation", param: "n" });
    const batch = await post(p.gateway, "/v1/completions", { model: "m", prompt: ["a", "b"] });
    expect(batch.status).toBe(400);
    expect(JSON.parse(batch.text).error.param).toBe("prompt");
    expect((await post(p.gateway, "/v1/completions", { model: "m", prompt: ["just one"] })).status).toBe(200);
    expect(all(p.prefill)).toHaveLength(1);
    p.prefill[0]!.behaviour.prefill = { engine: "trtllm", finishReason: "stop" };
    const stream = await p.client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.at(-1)!.usage).toEqual({ prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 });
  });

  it("with no decode server taking requests the request is a 503 before any prefill is sent", async () => {
    const p = await pools("vllm", { prefill: 1, decode: 1, health: "{ interval_ms: 60000, consecutive_gateway_failures: 1, max_ejected_percent: 100 }" });
    await p.decode[0]!.close(); // refused: ejected after one gateway failure
    expect((await post(p.gateway, "/v1/completions", { model: "m", prompt: "one" })).status).toBe(502);
    const r = await post(p.gateway, "/v1/completions", { model: "m", prompt: "two" });
    expect(r.status).toBe(503);
    expect(JSON.parse(r.text).error.message).toBe("no healthy decode upstream");
    expect(all(p.prefill)).toHaveLength(1); // the first request's only
  });

  it("a prefill failure is counted in the prefill pool; a reload cannot add, remove or change the pools", async () => {
    const p = await pools("trtllm", { prefill: 1, decode: 1 });
    p.prefill[0]!.behaviour.prefill = { engine: "trtllm", omit: "disaggregated_params" };
    expect((await post(p.gateway, "/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }] })).status).toBe(502);
    const page = p.gateway.metrics();
    expect(page).toMatch(/adp_gateway_requests_total\{pool="prefill",outcome="prefill_invalid_answer"\} 1/);
    expect(page).not.toMatch(/adp_gateway_requests_total\{pool="decode",outcome="prefill_invalid_answer"\}/);
    const aggregated = p.yaml.replace(/disaggregation:\n  protocol: trtllm\n/, "").replace(/    role: (prefill|decode)\n/g, "");
    await expect(p.gateway.reload(loadGatewayConfig({ file: { name: "g.yaml", text: aggregated } }))).rejects.toThrow(/disaggregation: changes from trtllm to none/);
    await expect(p.gateway.reload(loadGatewayConfig({ file: { name: "g.yaml", text: p.yaml.replace("protocol: trtllm", "protocol: vllm") } }))).rejects.toThrow(/changes from trtllm to vllm/);
    const same = await p.gateway.reload(loadGatewayConfig({ file: { name: "g.yaml", text: p.yaml } }));
    expect(same.kept).toHaveLength(2);
  });
});

