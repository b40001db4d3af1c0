// The gateway routing on the engines' own KV-cache events: fake engines publish
// every wire variant of the reference (recorded byte for byte by
// scripts/kv-event-fixtures.py) on real ZeroMQ sockets and serve TensorRT-LLM's
// /kv_cache_events over HTTP on 127.0.0.1; the gateway subscribes, and the
// next request with a stored prefix routes to the engine holding it, with the
// tokens that engine would reuse. Removals, AllBlocksCleared, gaps (replayed or
// not), restarts, silence and unparseable batches each show in routing and in
// /metrics.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { encode } from "@msgpack/msgpack";
import fc from "fast-check";
import pino from "pino";
import { curveKeyPair, Publisher } from "zeromq";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createGateway, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { batchDecoder, MAX_BATCH_DEPTH, parseJsonKeepingIntegers, prepareBatch } from "../../gateway/src/events/batch-preparation.js";
import { BatchDecoder, INLINE_BYTES } from "../../gateway/src/events/batch-decoder.js";
import { SLICE_BLOCKS } from "../../gateway/src/events/event-slicing.js";
import { EVERY, NoticeThrottle, type Notice } from "../../gateway/src/events/notice-throttle.js";
import { startFakePublisher, seqFrame, type ReplayStyle } from "../support/fake-kv-publisher.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import { waitFor } from "../support/wait.js";
import { metricsByIndex } from "../support/metrics.js";

const wire = JSON.parse(readFileSync(new URL("../fixtures/kv-events/wire.json", import.meta.url), "utf8")) as {
  tokensPerBlock: number;
  prompts: Record<"P" | "Q" | "R", number[]>;
  msgpack: Record<string, { what: string; hex: string }>;
  http: Record<string, string>;
};
/** KV events as the engines' own code writes them (scripts/engine-event-fixtures.py). */
const engines = JSON.parse(readFileSync(new URL("../fixtures/kv-events/engines.json", import.meta.url), "utf8")) as {
  tokensPerBlock: number;
  trtllm_partial_tail: { json: string; prompt: number[]; reused: number };
  trtllm_fanout_gap: { http_json: string };
  trtllm_v2_stored: { hex: string; prompts: number[][]; reused: number[]; tokensPerBlock: number };
  trtllm_v2_removed: { hex: string };
  trtllm_vswa: { json: string; prompt: number[]; reused: number; tokensPerBlock: number };
  vllm_hybrid: { stored_hex: string; removed_hex: string; prompt: number[]; reused: number; tokensPerBlock: number; groups: { kind: string; sliding_window?: number }[] };
  sglang_stored: { hex: string; prompt: number[]; reused: number };
  sglang_removed: { hex: string };
  sglang_cleared: { hex: string };
};
const bytes = (name: string): Buffer => Buffer.from(wire.msgpack[name]!.hex, "hex");
const { P, Q } = wire.prompts;

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** A gateway in front of engine B (no events, index 0) and engine A (events as `kvEvents`, index 1); logs kept. */
async function gatewayWith(kvEvents: string, extra = ""): Promise<{ gateway: Gateway; a: MockEngine; logs: Record<string, unknown>[] }> {
  const b = await startMockEngine("B");
  const a = await startMockEngine("A");
  open.push(b, a);
  const text = [
    "listen: { port: 0 }",
    "health: { interval_ms: 60000 }",
    `routing: { tokens_per_block: ${/# tokens_per_block: (\d+)/.exec(extra)?.[1] ?? (extra.includes("huggingface") ? 16 : wire.tokensPerBlock)}, lora_adapters: { sql-lora: 1 } }`,
    "upstreams:",
    `  - url: ${b.url}`,
    `  - url: ${a.url}`,
    `    kv_events: ${kvEvents}`,
    extra,
  ].join("\n");
  const logs: Record<string, unknown>[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => logs.push(JSON.parse(line) as Record<string, unknown>) });
  const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }), { logger });
  open.push(gateway);
  return { gateway, a, logs };
}

/** A metric's value (labels matched as written), or NaN when absent. */
function metric(gateway: Gateway, name: string, labels: string): number {
  const line = metricsByIndex(gateway.metrics()).split("\n").find((l) => l.startsWith(`adp_gateway_${name}{${labels}}`));
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(" ") + 1));
}

/** Sends a completion with token ids as its prompt; returns the upstream it went to. */
async function complete(gateway: Gateway, prompt: number[], body: Record<string, unknown> = {}): Promise<number> {
  const response = await fetch(`${gateway.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt, max_tokens: 1, ...body }) });
  await response.text();
  expect(response.status).toBe(200);
  return Number(response.headers.get("x-adp-upstream"));
}

/** Tokens matched on upstream 1 so far (by the engine's view while live, else the gateway's). */
const matchedOnA = (g: Gateway) => metric(g, "upstream_matched_tokens_total", 'upstream="1"');
const viewBlocks = (g: Gateway) => metric(g, "upstream_engine_view_blocks", 'upstream="1"');
const state = (g: Gateway, s: string, rank = 0) => metric(g, "upstream_kv_events_state", `upstream="1",dp_rank="${rank}",state="${s}"`);

/** Starts a publisher and a gateway subscribed to it. */
/** A vLLM batch storing a chain of `blocks` blocks (of the fixtures' block size) from hash `first` on. */
function storedBatch(blocks: number, first: number): Buffer {
  const tpb = wire.tokensPerBlock;
  const event = { type: "BlockStored", block_hashes: Array.from({ length: blocks }, (_, i) => first + i), parent_block_hash: null, token_ids: Array.from({ length: blocks * tpb }, (_, i) => i % 1000), block_size: tpb, lora_id: null, medium: "GPU" };
  return Buffer.from(encode({ ts: 1, events: [event], data_parallel_rank: 0 }));
}

/** A PUB socket (with `options`) connected to a bound stream at `endpoint`, after a moment for its handshake. */
async function connectedPublisher(endpoint: string, options: ConstructorParameters<typeof Publisher>[0]): Promise<Publisher> {
  const pub = new Publisher({ linger: 0, ...options });
  pub.connect(endpoint);
  open.push({ close: async () => pub.close() });
  await new Promise((r) => setTimeout(r, 200));
  return pub;
}

async function subscribed(dpRanks = 1, replay: ReplayStyle | null = null, extraEvents = "") {
  const pub = await startFakePublisher(dpRanks, replay);
  open.push(pub);
  const replayPart = pub.replayEndpoint === null ? "" : `, replay_endpoint: "${pub.replayEndpoint}"`;
  const g = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}"${replayPart}, dp_ranks: ${dpRanks}${extraEvents} }`);
  for (let r = 0; r < dpRanks; r++) await pub.subscribed(r);
  // With a replay socket the gateway first asks for the publisher's buffer (empty here): tests publish after that.
  if (replay !== null) await waitFor(() => pub.replayRequests.every((r) => r.length >= 1));
  return { pub, ...g };
}

describe("ZeroMQ streams: every encoding, stored then removed then cleared", () => {
  const variants: [string, string, string][] = [
    ["vllm_map_stored", "vllm_map_removed", "map_cleared"],
    ["vllm_array_stored", "vllm_array_removed", "array_cleared"],
    ["vllm_map_bytes_stored", "vllm_map_bytes_removed", "map_cleared"],
    ["trtllm_array_stored", "trtllm_array_removed", "array_cleared"],
  ];
  for (const [stored, removed, cleared] of variants) {
    it(`${stored} → ${removed} → ${cleared}`, async () => {
      const { pub, gateway } = await subscribed();
      await pub.publish(0, 0n, bytes(stored));
      await waitFor(() => viewBlocks(gateway) === 4, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
      expect(state(gateway, "live")).toBe(1);
      // The engine holds P's four blocks: P plus one token routes there, all 16 tokens reused.
      expect(await complete(gateway, [...P, 7])).toBe(1);
      expect(matchedOnA(gateway)).toBe(16);

      await pub.publish(0, 1n, bytes(removed));
      await waitFor(() => viewBlocks(gateway) === 1);
      expect(await complete(gateway, [...P, 8])).toBe(1);
      expect(matchedOnA(gateway)).toBe(16 + 4);

      await pub.publish(0, 2n, bytes(cleared));
      await waitFor(() => viewBlocks(gateway) === 0);
      await complete(gateway, [...P, 9]);
      // The engine reuses nothing now, whatever the gateway placed there before.
      expect(matchedOnA(gateway)).toBe(20);
      expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="applied"')).toBe(3);
      expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
    });
  }

  it("an engine that connects to its consumer (vLLM without *): the gateway binds the endpoint", async () => {
    const pub = await startFakePublisher(1, null, true);
    open.push(pub);
    const { gateway } = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}", bind: true }`);
    await pub.subscribed(0);
    await pub.publish(0, 0n, bytes("vllm_map_stored"));
    await waitFor(() => viewBlocks(gateway) === 4);
    expect(await complete(gateway, [...P, 7])).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
  });

  it("a salted prompt and a LoRA prompt match exactly the blocks the engine would reuse for them", async () => {
    const { pub, gateway } = await subscribed();
    await pub.publish(0, 0n, bytes("vllm_map_salted"));
    await pub.publish(0, 1n, bytes("vllm_map_lora"));
    await waitFor(() => viewBlocks(gateway) === 8);
    expect(await complete(gateway, [...Q, 7], { cache_salt: "tenant-salt" })).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
    // Unsalted, or salted otherwise: the engine would reuse none of it.
    await complete(gateway, [...Q, 8]);
    await complete(gateway, [...Q, 9], { cache_salt: "another" });
    expect(matchedOnA(gateway)).toBe(16);
    expect(await complete(gateway, [...Q, 10], { model: "sql-lora" })).toBe(1);
    expect(matchedOnA(gateway)).toBe(32);
  });

  it("an upstream's match is its best DP rank's (rank 1 publishes on the base port plus one)", async () => {
    const { pub, gateway } = await subscribed(2);
    await pub.publish(0, 0n, bytes("array_cleared"));
    await pub.publish(1, 0n, bytes("vllm_map_rank1"));
    await waitFor(() => viewBlocks(gateway) === 4 && state(gateway, "live", 0) === 1 && state(gateway, "live", 1) === 1);
    expect(await complete(gateway, [...P, 7])).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
  });
});

describe("ZeroMQ streams: sequence gaps, restarts, bad batches, silence", () => {
  for (const style of ["vllm", "trtllm"] as const) {
    it(`a gap is filled through the replay socket (${style} replies)`, async () => {
      const { pub, gateway } = await subscribed(1, style);
      await pub.publish(0, 0n, bytes("chain_p"));
      pub.lose(0, 1n, bytes("chain_q"));
      await pub.publish(0, 2n, bytes("chain_r"));
      await waitFor(() => viewBlocks(gateway) === 12, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
      expect(pub.replayRequests[0]).toEqual([0n, 1n]); // the publisher's buffer at start, then the gap
      expect(metric(gateway, "upstream_kv_event_gaps_total", 'upstream="1",filled="true"')).toBe(1);
      expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="replayed"')).toBe(1);
      expect(state(gateway, "live")).toBe(1);
      // The replayed batch counts: Q is on the engine.
      expect(await complete(gateway, [...Q, 7])).toBe(1);
      expect(matchedOnA(gateway)).toBe(16);
    });
  }

  it("joining a stream under way, the gateway first replays what the publisher still buffers", async () => {
    const { pub, gateway } = await subscribed(1, "vllm");
    pub.lose(0, 0n, bytes("chain_p"));
    pub.lose(0, 1n, bytes("chain_q"));
    await pub.publish(0, 2n, bytes("chain_r"));
    await waitFor(() => viewBlocks(gateway) === 12);
    expect(pub.replayRequests[0]).toEqual([0n, 0n]); // at start (nothing buffered yet), then on joining batch 2
    expect(metric(gateway, "upstream_kv_event_gaps_total", 'upstream="1",filled="false"')).toBe(0);
    expect(state(gateway, "live")).toBe(1);
  });

  it("a gateway (re)started next to a publisher that buffers batches replays them at once, before any live batch", async () => {
    // Before: replay was asked for only on a live batch; a rank with nothing new to say left the view empty.
    const pub = await startFakePublisher(1, "vllm");
    open.push(pub);
    pub.lose(0, 0n, bytes("chain_p")); // published before this gateway listened, still in the publisher's buffer
    const { gateway } = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}", replay_endpoint: "${pub.replayEndpoint}" }`);
    await waitFor(() => viewBlocks(gateway) === 4, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    expect(pub.replayRequests[0]).toEqual([0n]);
    expect(state(gateway, "live")).toBe(1);
    expect(await complete(gateway, [...P, 7])).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
  });

  it("after a reconnection the gateway replays what the publisher buffered meanwhile, though the rank publishes nothing new", async () => {
    // Before: a replay was asked for only at subscription or on a live batch's gap; an idle rank missed those batches.
    const { pub, gateway } = await subscribed(1, "vllm");
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    await pub.bounce(0); // the PUB socket goes away and comes back on its port
    pub.lose(0, 1n, bytes("chain_q")); // published while the gateway was not connected
    await pub.subscribed(0, 2); // the gateway's SUB socket reconnected and subscribed again
    await waitFor(() => viewBlocks(gateway) === 8, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_event")).join("\n"));
    expect(pub.replayRequests[0]).toEqual([0n, 1n]); // at start, then from the next batch after the reconnection
    expect(metric(gateway, "upstream_kv_event_reconnects_total", 'upstream="1"')).toBe(1);
    expect(state(gateway, "live")).toBe(1);
    expect(await complete(gateway, [...Q, 7])).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
  });

  it("batches published while a reconnection's replay is pending come twice too: duplicates, not a restart", async () => {
    const { pub, gateway } = await subscribed(1, "vllm");
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    const release = pub.holdReplays();
    await pub.bounce(0);
    await pub.subscribed(0, 2);
    await waitFor(() => pub.replayRequests[0]!.length === 2);
    await pub.publish(0, 1n, bytes("chain_q")); // live and in the buffer while the replay is held
    await pub.publish(0, 2n, bytes("chain_r"));
    release();
    await waitFor(() => viewBlocks(gateway) === 12, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_event")).join("\n"));
    await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="duplicate"') === 2);
    expect(metric(gateway, "upstream_kv_event_restarts_total", 'upstream="1"')).toBe(0);
    expect(viewBlocks(gateway)).toBe(12);
  });

  it("batches published while the replay at subscription is pending come twice (replayed and live): skipped as duplicates, not read as a restart", async () => {
    const pub = await startFakePublisher(1, "vllm");
    open.push(pub);
    pub.lose(0, 0n, bytes("chain_p"));
    const release = pub.holdReplays();
    const { gateway, logs } = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}", replay_endpoint: "${pub.replayEndpoint}" }`);
    await pub.subscribed(0);
    await waitFor(() => pub.replayRequests[0]!.length === 1);
    await pub.publish(0, 1n, bytes("chain_q")); // live and in the buffer, while the engine has not answered the replay
    await pub.publish(0, 2n, bytes("chain_r"));
    release();
    await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="duplicate"') === 2, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_event")).join("\n"));
    expect(metric(gateway, "upstream_kv_event_restarts_total", 'upstream="1"')).toBe(0);
    expect(logs.some((l) => String(l.what ?? l.msg).includes("restarted"))).toBe(false);
    expect(viewBlocks(gateway)).toBe(12);
    expect(await complete(gateway, [...Q, 7])).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
  });

  it("an idle DP rank (it never publishes: the engine sent it nothing) is an empty cache, not a stale stream: the upstream's events are used", async () => {
    // Before: until every rank had spoken, kv_events_used stayed 0 and routing ran on placements.
    const { pub, gateway } = await subscribed(2);
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    expect(state(gateway, "live", 0)).toBe(1);
    expect(state(gateway, "live", 1)).toBe(1);
    await waitFor(() => metric(gateway, "upstream_kv_events_used", 'upstream="1"') === 1, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_events")).join("\n"));
    expect(await complete(gateway, [...P, 7])).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
  });

  it("a gap without replay keeps the view going but untrusted: meanwhile routing uses the gateway's own placements", async () => {
    const { pub, gateway, logs } = await subscribed(1, null, ", stale_after_ms: 60000");
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    expect(await complete(gateway, [...P, 5])).toBe(1); // the gateway's own view of A now holds P
    await pub.publish(0, 2n, bytes("chain_q")); // batch 1 never arrives
    await waitFor(() => state(gateway, "gapped") === 1);
    expect(viewBlocks(gateway)).toBe(8); // P and Q: the view goes on
    expect(metric(gateway, "upstream_kv_event_gaps_total", 'upstream="1",filled="false"')).toBe(1);
    expect(logs.some((l) => String(l.msg).includes("gap not filled"))).toBe(true);
    // Gapped: A's match comes from what the gateway placed there (P, not Q), not from its engine view (P and Q).
    const before = matchedOnA(gateway);
    await complete(gateway, [...Q, 6]);
    expect(matchedOnA(gateway)).toBe(before);
    expect(await complete(gateway, [...P, 6])).toBe(1);
    expect(matchedOnA(gateway)).toBe(before + P.length);
  });

  it("a publisher restart (its sequence starts over) empties the view", async () => {
    const { pub, gateway } = await subscribed();
    await pub.publish(0, 0n, bytes("chain_p"));
    await pub.publish(0, 1n, bytes("chain_q"));
    await waitFor(() => viewBlocks(gateway) === 8);
    await pub.publish(0, 0n, bytes("chain_r"));
    await waitFor(() => metric(gateway, "upstream_kv_event_restarts_total", 'upstream="1"') === 1);
    expect(viewBlocks(gateway)).toBe(4);
    expect(state(gateway, "live")).toBe(1);
  });

  it("an unparseable batch and a malformed message are counted and skipped; the stream goes on", async () => {
    const { pub, gateway, logs } = await subscribed();
    await pub.publish(0, 0n, bytes("chain_p"));
    await pub.publish(0, 1n, bytes("garbage"));
    await pub.sendFrames(0, [Buffer.from(""), seqFrame(2n)]); // two frames, no payload
    await pub.publish(0, 2n, bytes("chain_q"));
    await waitFor(() => viewBlocks(gateway) === 8);
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"')).toBe(2);
    expect(state(gateway, "live")).toBe(1);
    expect(logs.filter((l) => l.level === 40 && String(l.msg).startsWith("KV events:")).length).toBeGreaterThanOrEqual(2);
  });

  it("a batch over kv_events.max_batch_bytes is refused unread and counted, /health answers meanwhile, the stream is gapped, and later batches apply", async () => {
    // Before: one 57 MB batch (1M blocks) was decoded and applied on the event loop: ~2 s blocked, RSS 80 → 850 MB.
    const { pub, gateway, logs } = await subscribed(1, null, ", max_batch_bytes: 65536");
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    // 8 MB of msgpack (a bin of zeros): over the bound, refused before decoding.
    const huge = Buffer.concat([Buffer.from([0xc6, 0x00, 0x80, 0x00, 0x00]), Buffer.alloc(8 << 20)]);
    const probe = fetch(`${gateway.url}/health`).then((r) => r.status);
    await pub.publish(0, 1n, huge);
    expect(await probe).toBe(200);
    await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="oversized"') === 1);
    expect(state(gateway, "gapped")).toBe(1);
    expect(logs.some((l) => String(l.msg).startsWith("KV events: batch refused") && String(l.detail).includes("max_batch_bytes (65536)"))).toBe(true);
    await pub.publish(0, 2n, bytes("chain_q"));
    await waitFor(() => viewBlocks(gateway) === 8);
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"')).toBe(0);
  });

  it("CURVE: a gateway with the engine's public key and its own key pair receives its events; one without the key receives nothing", async () => {
    // Before: no CURVE option; a stream was plain TCP, readable (and writable, for bind sources) by anyone who could reach it.
    const server = curveKeyPair();
    const client = curveKeyPair();
    const dir = mkdtempSync(path.join(tmpdir(), "adp-curve-"));
    writeFileSync(path.join(dir, "gw.pub"), client.publicKey);
    writeFileSync(path.join(dir, "gw.key"), client.secretKey);
    const pub = await startFakePublisher(1, null, false, server.secretKey);
    open.push(pub);
    const curve = `, curve: { server_public_key: "${server.publicKey.replace(/["\\]/g, "\\$&")}", public_key_file: "${path.join(dir, "gw.pub")}", secret_key_file: "${path.join(dir, "gw.key")}" }`;
    const keyed = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}", dp_ranks: 1${curve} }`);
    const plain = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}", dp_ranks: 1 }`);
    await pub.subscribed(0); // the keyed gateway's subscription (the plain one's handshake fails: no subscription reaches the engine)
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(keyed.gateway) === 4);
    await new Promise((r) => setTimeout(r, 300));
    expect(viewBlocks(plain.gateway)).toBe(0);
    expect(metric(plain.gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="applied"')).toBe(0);
  });

  it("CURVE settings: keys checked (Z85, from files), each mode's own settings, no key in any message", () => {
    const pair = curveKeyPair();
    const dir = mkdtempSync(path.join(tmpdir(), "adp-curve-"));
    writeFileSync(path.join(dir, "ok.key"), pair.secretKey);
    writeFileSync(path.join(dir, "bad.key"), "not a key");
    writeFileSync(path.join(dir, "allowed"), `# the engines\n${pair.publicKey}\n\n`);
    const load = (curve: string, bind = false, extra = "") => () =>
      loadGatewayConfig({ file: { name: "g.yaml", text: `upstreams:\n  - url: http://127.0.0.1:9\n    kv_events: { kind: zmq, endpoint: "tcp://127.0.0.1:5557", bind: ${bind}, curve: ${curve}${extra} }\n` } });
    const good = `{ server_public_key: "${pair.publicKey}", public_key_file: "${path.join(dir, "ok.key")}", secret_key_file: "${path.join(dir, "ok.key")}" }`;
    expect(load(good)().upstreams[0]!.kvEvents).toMatchObject({ curve: { role: "client", serverPublicKey: pair.publicKey, secretKey: pair.secretKey } });
    // Bound: the gateway is the server; the engine's key is not its setting, the allowed publishers are.
    expect(load(good, true)).toThrow(/server_public_key: is not a setting/);
    const server = `{ secret_key_file: "${path.join(dir, "ok.key")}", allowed_clients_file: "${path.join(dir, "allowed")}" }`;
    expect(load(server, true)().upstreams[0]!.kvEvents).toMatchObject({ curve: { role: "server", secretKey: pair.secretKey, allowedClients: [pair.publicKey] } });
    expect(load(`{ secret_key_file: "${path.join(dir, "ok.key")}" }`, true)).toThrow(/needs the publishers it accepts/);
    expect(load(`{ secret_key_file: "${path.join(dir, "ok.key")}", allowed_clients: ["nope"] }`, true)).toThrow(/allowed_clients\[0\]: must be a CURVE public key/);
    expect(load(server, true, `, replay_endpoint: "tcp://127.0.0.1:5558"`)).toThrow(/replay_endpoint: cannot be used with CURVE and bind: true/);
    expect(load(`{ server_public_key: "short", public_key_file: "${path.join(dir, "bad.key")}", secret_key_file: /nonexistent }`)).toThrow(/server_public_key: must be the engine's CURVE public key[\s\S]*does not hold a CURVE key[\s\S]*cannot be read \(ENOENT\)/);
    try {
      load(`{ server_public_key: "x", public_key_file: "${path.join(dir, "ok.key")}", secret_key_file: "${path.join(dir, "bad.key")}" }`)();
    } catch (error) {
      expect(String(error)).not.toContain(pair.secretKey);
    }
  });

  it("CURVE with bind: true: the allowed publisher's events apply; one with another key, or without CURVE, is turned away and its events never apply", async () => {
    // Before: a bound stream applied the events of any process that connected to it.
    const gatewayPair = curveKeyPair();
    const engine = curveKeyPair();
    const intruder = curveKeyPair();
    const dir = mkdtempSync(path.join(tmpdir(), "adp-curve-"));
    writeFileSync(path.join(dir, "gw.key"), gatewayPair.secretKey);
    const good = await startFakePublisher(1, null, true, { serverPublicKey: gatewayPair.publicKey, publicKey: engine.publicKey, secretKey: engine.secretKey });
    open.push(good);
    const { gateway, logs } = await gatewayWith(`{ kind: zmq, endpoint: "${good.endpoint}", bind: true, curve: { secret_key_file: "${path.join(dir, "gw.key")}", allowed_clients: ["${engine.publicKey.replace(/["\\]/g, "\\$&")}"] } }`);
    await good.subscribed(0);
    // Two others connect to the same bound endpoint: one with CURVE and a key not allowed, one without CURVE.
    const rogue = await connectedPublisher(good.endpoint, { curveServerKey: gatewayPair.publicKey, curvePublicKey: intruder.publicKey, curveSecretKey: intruder.secretKey });
    const plain = await connectedPublisher(good.endpoint, {});
    await waitFor(() => metric(gateway, "upstream_kv_event_publishers_refused_total", 'upstream="1"') >= 1);
    for (const pub of [rogue, plain]) for (let i = 0; i < 5; i++) await pub.send(["", seqFrame(BigInt(i)), bytes("chain_q")]);
    await good.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    await new Promise((r) => setTimeout(r, 300));
    expect(viewBlocks(gateway)).toBe(4); // chain_p's blocks only: no batch of the others arrived
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="applied"')).toBe(1);
    expect(logs.some((l) => String(l.msg).includes("publisher refused: its CURVE public key is not allowed"))).toBe(true);
    expect(JSON.stringify(logs)).not.toContain(gatewayPair.secretKey);
  });

  it("a batch nested 4,000 deep, decoded in the worker, is counted unparseable and the stream goes on (it used to end: the main thread could not read its slice back)", async () => {
    const { pub, gateway, logs } = await subscribed();
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    // [1, [deep, nil...]] written by hand (msgpack's encoder recurses): fixarray headers 4,000 deep, then nils past
    // INLINE_BYTES, so the worker decodes it.
    const nils = INLINE_BYTES + 1024;
    const events = Buffer.alloc(5);
    events.writeUInt8(0xdd, 0);
    events.writeUInt32BE(nils + 1, 1);
    const payload = Buffer.concat([Buffer.from([0x92, 0x01]), events, Buffer.alloc(3999, 0x91), Buffer.from([0x90]), Buffer.alloc(nils, 0xc0)]);
    expect(payload.length).toBeGreaterThan(INLINE_BYTES);
    await pub.publish(0, 1n, payload);
    await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"') === 1);
    expect(logs.some((l) => String(l.detail).includes(`nested deeper than ${MAX_BATCH_DEPTH}`))).toBe(true);
    await pub.publish(0, 2n, bytes("chain_q"));
    await waitFor(() => viewBlocks(gateway) === 8);
    expect(logs.some((l) => String(l.msg).includes("stream ended"))).toBe(false);
    expect(state(gateway, "live")).toBe(1);
  });

  it("a batch whose slice cannot be read back from the decoder (after its first was applied) is counted unparseable and gaps the stream, which goes on", async () => {
    const { pub, gateway, logs } = await subscribed();
    await pub.publish(0, 0n, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4);
    // The decoder hands back a batch whose second slice fails as a worker's unreadable message would.
    const prepare = vi.spyOn(BatchDecoder.prototype, "prepare").mockResolvedValueOnce({
      kind: "ok",
      time: "1",
      digest: "d",
      slices: (async function* () {
        yield [];
        throw new RangeError("Maximum call stack size exceeded");
      })(),
    });
    try {
      await pub.publish(0, 1n, bytes("garbage"));
      await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"') === 1);
    } finally {
      prepare.mockRestore();
    }
    expect(state(gateway, "gapped")).toBe(1);
    expect(logs.some((l) => l.msg === "KV events: batch skipped; stream gapped while its view goes on" && String(l.detail).startsWith("slice 1: Maximum call stack"))).toBe(true);
    await pub.publish(0, 2n, bytes("chain_q"));
    await waitFor(() => viewBlocks(gateway) === 8);
    expect(logs.some((l) => String(l.msg).includes("stream ended"))).toBe(false);
  });

  it("notices reach the log the first time and every hundredth, per kind and DP rank: 250 malformed messages are 3 lines, each later one saying how many", async () => {
    const passed: Notice[] = [];
    const t = new NoticeThrottle((n) => passed.push(n));
    for (let i = 0; i < 2 * EVERY + 50; i++) t.notice({ rank: 0, what: "message skipped", detail: "1 frame" });
    t.notice({ rank: 1, what: "message skipped" });
    t.notice({ rank: 0, what: "batch skipped" });
    expect(passed.map((n) => [n.rank, n.what, n.detail])).toEqual([
      [0, "message skipped", "1 frame"],
      [0, "message skipped", `1 frame; ${EVERY} of these on this rank so far`],
      [0, "message skipped", `1 frame; ${2 * EVERY} of these on this rank so far`],
      [1, "message skipped", undefined],
      [0, "batch skipped", undefined],
    ]);
    // Past the pairs it counts apart, the rest are counted together: still throttled.
    let late = 0;
    const counting = new NoticeThrottle(() => late++);
    for (let r = 0; r < 20_000; r++) counting.notice({ rank: r, what: "message skipped" });
    const before = late;
    for (let i = 0; i < 1000; i++) counting.notice({ rank: 99_999, what: "message skipped" });
    expect(late - before).toBeLessThanOrEqual(1000 / EVERY + 1);
    // Through a real stream: the messages are all counted, three lines logged.
    const { pub, gateway, logs } = await subscribed();
    for (let i = 0; i < 250; i++) await pub.sendFrames(0, [Buffer.from("")]);
    await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"') === 250);
    expect(logs.filter((l) => l.msg === "KV events: message skipped")).toHaveLength(3);
  });

  it("a batch of more events than the larger limit (each of no block) is refused, one of more events than blocks is not, and each is cut into slices of at most SLICE_BLOCKS events", () => {
    const limits = { maxBatchBlocks: 5000, maxBatchTokens: 3000 };
    const cleared = (n: number) => Buffer.from(encode([1, Array.from({ length: n }, () => ["AllBlocksCleared"])]));
    const refused = prepareBatch(cleared(5001), "msgpack", batchDecoder(), limits);
    expect(refused).toEqual({ kind: "oversized", detail: "5001 events, over the longest list a batch may hold (5000: kv_events.max_batch_blocks or max_batch_tokens, the larger)" });
    // TensorRT-LLM's `updated` events name no block and may outnumber the blocks: taken, in slices.
    const updated = Buffer.from(JSON.stringify([{ event_id: 0, data: { type: "removed", block_hashes: [1] } }, ...Array.from({ length: 4000 }, (_, i) => ({ event_id: i + 1, data: { type: "updated", block_hash: 1, cache_level: null, priority: { old_value: 35, new_value: 90 } } }))]));
    const many = prepareBatch(updated, "json", batchDecoder(), { maxBatchBlocks: 100, maxBatchTokens: 5000 });
    expect(many.kind).toBe("ok");
    const taken = prepareBatch(cleared(2500), "msgpack", batchDecoder(), limits);
    if (taken.kind !== "ok") throw new Error(taken.kind);
    const sizes = taken.slices.map((slice) => ((slice as unknown[])[1] as unknown[]).length);
    expect(sizes).toEqual([SLICE_BLOCKS, SLICE_BLOCKS, 2500 - 2 * SLICE_BLOCKS]);
    expect(taken.slices.every((slice) => (slice as unknown[])[0] === 1)).toBe(true);
    // A polled answer's runs: an event of no block counts as one.
    const json = Buffer.from(JSON.stringify(Array.from({ length: 1000 }, (_, i) => ({ event_id: i, data: { type: "removed", block_hashes: [] } }))));
    const runs = prepareBatch(json, "json", batchDecoder(), limits);
    if (runs.kind !== "ok") throw new Error(runs.kind);
    expect(runs.slices.length).toBeGreaterThan(1);
    expect(runs.slices.every((run) => (run as { events: unknown[] }).events.length <= SLICE_BLOCKS / 4)).toBe(true);
    // Nesting: MAX_BATCH_DEPTH levels are taken, one more is not.
    const nested = (n: number) => {
      let v: unknown = 0;
      for (let i = 0; i < n; i++) v = [v];
      return Buffer.from(encode(v));
    };
    expect(prepareBatch(nested(MAX_BATCH_DEPTH), "msgpack", batchDecoder(), limits).kind).toBe("ok");
    expect(prepareBatch(nested(MAX_BATCH_DEPTH + 1), "msgpack", batchDecoder(), limits)).toEqual({ kind: "unparseable", detail: `nested deeper than ${MAX_BATCH_DEPTH} lists and maps` });
  });

  it("a polled answer is walked before JSON.parse reads it: a list longer than the larger limit, lists of more elements in all than the limits allow, an object of over 1,024 members or nesting past MAX_BATCH_DEPTH is refused unparsed, as msgpack's decoder refuses them", () => {
    const limits = { maxBatchBlocks: 5000, maxBatchTokens: 3000 };
    const zeros = (n: number) => Buffer.from(`[${Array.from({ length: n }, () => "0").join(",")}]`);
    const parse = vi.spyOn(JSON, "parse");
    try {
      expect(prepareBatch(zeros(5001), "json", batchDecoder(), limits)).toEqual({ kind: "oversized", detail: "the answer has a list of more than 5000 elements" });
      const members = (n: number) => Buffer.from(JSON.stringify([{ event_id: 0, data: Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, i])) }]));
      expect(prepareBatch(members(1025), "json", batchDecoder(), limits)).toEqual({ kind: "oversized", detail: "the answer has an object of more than 1024 members" });
      const nested = (n: number) => Buffer.from(`${"[".repeat(n)}0${"]".repeat(n)}`);
      expect(prepareBatch(nested(MAX_BATCH_DEPTH + 1), "json", batchDecoder(), limits)).toEqual({ kind: "unparseable", detail: `nested deeper than ${MAX_BATCH_DEPTH} lists and maps` });
      // 16 MiB of the deepest nesting costs a walk to its 33rd bracket.
      expect(prepareBatch(nested(8 << 20), "json", batchDecoder(), limits).kind).toBe("unparseable");
      expect(parse).not.toHaveBeenCalled();
      // Lists each within the bound, but more elements in all than events, three times the blocks and the tokens
      // (5,000 + 15,000 + 3,000): 6 lists of 4,000 zeros in a list are 24,006.
      const lists = (n: number) => Buffer.from(`[${Array.from({ length: n }, () => `[${Array.from({ length: 4000 }, () => "0").join(",")}]`).join(",")}]`);
      expect(prepareBatch(lists(6), "json", batchDecoder(), limits)).toEqual({ kind: "oversized", detail: "the answer has more than 23000 list elements in all" });
      expect(parse).not.toHaveBeenCalled();
      // At the bounds, parsed (and taken: a list or a number is an event of no kind the index knows).
      expect(prepareBatch(zeros(5000), "json", batchDecoder(), limits).kind).toBe("ok");
      expect(prepareBatch(members(1024), "json", batchDecoder(), limits).kind).toBe("ok");
      expect(prepareBatch(nested(MAX_BATCH_DEPTH), "json", batchDecoder(), limits).kind).toBe("ok");
      expect(prepareBatch(lists(5), "json", batchDecoder(), limits).kind).toBe("ok");
      expect(parse).toHaveBeenCalledTimes(4);
    } finally {
      parse.mockRestore();
    }
  });

  it("a batch naming more blocks than kv_events.max_batch_blocks is refused once decoded, counted, and gaps the stream; later batches apply", async () => {
    const { pub, gateway, logs } = await subscribed(1, null, ", max_batch_blocks: 100");
    await pub.publish(0, 0n, storedBatch(200, 1));
    await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="oversized"') === 1);
    expect(viewBlocks(gateway)).toBe(0);
    expect(state(gateway, "gapped")).toBe(1);
    expect(logs.some((l) => String(l.detail).includes("200 blocks, over kv_events.max_batch_blocks (100)"))).toBe(true);
    await pub.publish(0, 1n, storedBatch(100, 1));
    await waitFor(() => viewBlocks(gateway) === 100);
  });

  it("a large accepted batch is applied a slice at a time: requests are answered while it is half applied, and the view ends whole", async () => {
    const blocks = 40_000;
    const { pub, gateway } = await subscribed(1, null, ", max_batch_bytes: 16777216, max_batch_blocks: 65536");
    await pub.publish(0, 0n, storedBatch(blocks, 1));
    // /health answered between slices: some answer sees a view neither empty nor whole.
    const seen: number[] = [];
    while (seen.at(-1) !== blocks) {
      expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
      seen.push(viewBlocks(gateway));
    }
    expect(seen.some((n) => n > 0 && n < blocks)).toBe(true);
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="applied"')).toBe(1);
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
  });

  it("a 1M-block batch (within the byte bound it is given) is refused before it is applied, and /health answers meanwhile", async () => {
    // Before: 1M blocks in one 57 MB batch held the event loop ~2 s and took RSS from 80 to 850 MB.
    const { pub, gateway } = await subscribed(1, null, ", max_batch_bytes: 67108864");
    const removal = Buffer.from(encode({ ts: 1, events: [{ type: "BlockRemoved", block_hashes: Array.from({ length: 1 << 20 }, (_, i) => i + 1), medium: "GPU" }], data_parallel_rank: 0 }));
    const health = (async () => {
      let answered = 0;
      while (metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="oversized"') !== 1) {
        expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
        answered++;
      }
      return answered;
    })();
    await pub.publish(0, 0n, removal);
    expect(await health).toBeGreaterThan(0);
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="applied"')).toBe(0);
  });

  it("a stream silent while its engine is sent requests goes stale, is logged, and routing falls back to the gateway's own placements until events resume", async () => {
    const { pub, gateway, logs } = await subscribed(1, null, ", stale_after_ms: 300");
    await pub.publish(0, 0n, bytes("vllm_map_stored"));
    await waitFor(() => viewBlocks(gateway) === 4);
    expect(await complete(gateway, [...P, 5])).toBe(1); // the gateway's own view of A holds P from here
    await pub.publish(0, 1n, bytes("vllm_map_removed")); // the engine keeps P's first block only
    await waitFor(() => viewBlocks(gateway) === 1);
    let before = matchedOnA(gateway);
    expect(await complete(gateway, [...P, 6])).toBe(1);
    expect(matchedOnA(gateway) - before).toBe(4); // live: what the engine holds
    await waitFor(() => state(gateway, "stale") === 1, () => "stale", 3000);
    await waitFor(() => logs.some((l) => String(l.msg).startsWith("KV events stale")), () => "a log line", 3000);
    before = matchedOnA(gateway);
    expect(await complete(gateway, [...P, 7])).toBe(1);
    expect(matchedOnA(gateway) - before).toBe(16); // stale: what the gateway placed there
    expect(metric(gateway, "upstream_kv_events_used", 'upstream="1"')).toBe(0);
    await pub.publish(0, 2n, bytes("chain_q"));
    await waitFor(() => state(gateway, "live") === 1);
    before = matchedOnA(gateway);
    expect(await complete(gateway, [...P, 8])).toBe(1);
    expect(matchedOnA(gateway) - before).toBe(4); // live again: the engine's view
    await waitFor(() => logs.some((l) => String(l.msg).startsWith("KV events live")), () => "a log line", 3000);
  });

  it("a restarted publisher whose batch 0 was lost is still a restart: any number below the next expected", async () => {
    const { pub, gateway } = await subscribed();
    await pub.publish(0, 0n, bytes("chain_p"));
    await pub.publish(0, 1n, bytes("chain_q"));
    await pub.publish(0, 2n, bytes("chain_r"));
    await waitFor(() => viewBlocks(gateway) === 12);
    await pub.publish(0, 1n, bytes("vllm_map_lora")); // the new publisher's batch 1 (its batch 0 lost on reconnection)
    await waitFor(() => metric(gateway, "upstream_kv_event_restarts_total", 'upstream="1"') === 1);
    expect(viewBlocks(gateway)).toBe(4);
  });

  it("an engine whose blocks are not the gateway's size is not live, and says why", async () => {
    const pub = await startFakePublisher(1);
    open.push(pub);
    const { gateway, logs } = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}" }`, "");
    await pub.subscribed(0);
    await pub.publish(0, 0n, bytes("qwen_long_turn_stored")); // 16-token blocks; the gateway's are 4
    await waitFor(() => logs.some((l) => String(l.msg).startsWith("KV events: events the gateway cannot use")));
    expect(String((logs.find((l) => String(l.msg).startsWith("KV events: events the gateway cannot use"))!.reasons as string[])[0])).toContain("block_size");
    await complete(gateway, [...P, 1]);
    expect(metric(gateway, "upstream_kv_events_used", 'upstream="1"')).toBe(0);
  });
});

describe("hybrid models and attention windows, as the engines' own code writes their events", () => {
  it("vLLM with full attention and a 32-token sliding window: a removal in the window's group leaves the full-attention prefix (112 tokens, not 0)", async () => {
    const f = engines.vllm_hybrid;
    const pub = await startFakePublisher(1);
    open.push(pub);
    const groups = JSON.stringify(f.groups);
    const { gateway } = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}", groups: ${groups} }`, `# tokens_per_block: ${f.tokensPerBlock}`);
    await pub.subscribed(0);
    await pub.publish(0, 0n, Buffer.from(f.stored_hex, "hex"));
    await waitFor(() => viewBlocks(gateway) === 16, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    await pub.publish(0, 1n, Buffer.from(f.removed_hex, "hex"));
    await waitFor(() => viewBlocks(gateway) === 15);
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
    expect(await complete(gateway, f.prompt)).toBe(1);
    expect(matchedOnA(gateway)).toBe(f.reused);
  });

  it("TensorRT-LLM with variable sliding windows: the minimum over its windows (96 tokens, not 256)", async () => {
    const f = engines.trtllm_vswa;
    const { gateway, a } = await gatewayWith("{ kind: http, interval_ms: 20 }", `# tokens_per_block: ${f.tokensPerBlock}`);
    a.behaviour.kvCacheEvents = [f.json];
    await waitFor(() => viewBlocks(gateway) === 22, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    expect(await complete(gateway, f.prompt)).toBe(1);
    expect(matchedOnA(gateway)).toBe(f.reused);
  });
});

describe("TensorRT-LLM's KV cache manager v2 streaming events, as its wire structs encode them", () => {
  it("on DP rank 1's stream: coalesced chains, a block holding an image left out with what follows, a coalesced removal", async () => {
    const stored = engines.trtllm_v2_stored;
    const { pub, gateway } = await subscribed(2);
    await pub.publish(1, 0n, Buffer.from(stored.hex, "hex"));
    await waitFor(() => viewBlocks(gateway) === 5, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
    let matched = 0;
    for (const [i, prompt] of stored.prompts.entries()) {
      expect(await complete(gateway, prompt)).toBe(1);
      matched += stored.reused[i]!;
      expect(matchedOnA(gateway)).toBe(matched);
    }
    await pub.publish(1, 1n, Buffer.from(engines.trtllm_v2_removed.hex, "hex"));
    await waitFor(() => viewBlocks(gateway) === 2);
  });
});

describe("SGLang's events as its publisher encodes them (msgspec, no DP rank in the batch)", () => {
  it("on DP rank 1's port: stored, then removed, then cleared, each in rank 1's view", async () => {
    const { pub, gateway } = await subscribed(2);
    const hex = (h: string) => Buffer.from(h, "hex");
    await pub.publish(1, 0n, hex(engines.sglang_stored.hex));
    await waitFor(() => viewBlocks(gateway) === 2, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
    expect(await complete(gateway, engines.sglang_stored.prompt)).toBe(1);
    expect(matchedOnA(gateway)).toBe(engines.sglang_stored.reused);
    await pub.publish(1, 1n, hex(engines.sglang_removed.hex));
    await waitFor(() => viewBlocks(gateway) === 1);
    await pub.publish(1, 2n, hex(engines.sglang_cleared.hex));
    await waitFor(() => viewBlocks(gateway) === 0);
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="applied"')).toBe(3);
  });
});

describe("the engine's tokenizer and its events together", () => {
  it("a chat's next turn, tokenized as Qwen2.5 does, matches the blocks the engine stored for the turn before", async () => {
    const reference = JSON.parse(readFileSync(new URL("../fixtures/tokenizers/qwen2.5/reference.json", import.meta.url), "utf8")) as { cases: { name: string; request: Record<string, unknown>; ids: number[] }[] };
    const turn = reference.cases.find((c) => c.name === "chat: long multi-turn")!;
    const next = reference.cases.find((c) => c.name === "chat: long multi-turn, next turn")!;
    // What the engine would reuse, from the reference ids alone: the full 16-token blocks
    // it stored of the turn before, within the next turn's shared prefix (its last token never).
    let shared = 0;
    while (shared < turn.ids.length && turn.ids[shared] === next.ids[shared]) shared++;
    const stored = Math.floor(turn.ids.length / 16) * 16;
    const expected = Math.min(stored, Math.floor(Math.min(shared, next.ids.length - 1) / 16) * 16);
    expect(expected).toBeGreaterThan(1_000);

    const pub = await startFakePublisher(1);
    open.push(pub);
    const tokenizerDir = new URL("../fixtures/tokenizers/qwen2.5", import.meta.url).pathname;
    const { gateway } = await gatewayWith(`{ kind: zmq, endpoint: "${pub.endpoint}" }`, `tokenizer: { kind: huggingface, path: "${tokenizerDir}" }`);
    await pub.subscribed(0);
    await pub.publish(0, 0n, bytes("qwen_long_turn_stored"));
    await waitFor(() => viewBlocks(gateway) === stored / 16);
    const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", ...next.request }) });
    await response.text();
    expect(response.headers.get("x-adp-upstream")).toBe("1");
    expect(matchedOnA(gateway)).toBe(expected);
  });
});

/** msgpack of `v`, or of its string form when msgpack has no encoding for it (a bigint past 64 bits, say). */
function packed(v: unknown): Buffer {
  try {
    return Buffer.from(encode(v, { ignoreUndefined: true, useBigInt64: true }));
  } catch {
    return Buffer.from(encode(String(v)));
  }
}

describe("hostile streams", () => {
  it("random payloads, random msgpack values and odd frame counts never stop the stream or reach past the counters", async () => {
    const { pub, gateway } = await subscribed();
    const values = fc.sample(fc.oneof(fc.uint8Array({ maxLength: 64 }), fc.anything({ withBigInt: true, withTypedArray: true, maxDepth: 4 }).map((v) => packed(v))), { numRuns: 150, seed: 12 });
    let seq = 0n;
    for (const v of values) await pub.publish(0, seq++, Buffer.from(v));
    await pub.sendFrames(0, [Buffer.from("t")]);
    await pub.sendFrames(0, [Buffer.from("t"), Buffer.alloc(3), Buffer.alloc(0), Buffer.alloc(1)]);
    await pub.publish(0, seq++, bytes("chain_p"));
    await waitFor(() => viewBlocks(gateway) === 4, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    const applied = metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="applied"');
    const unparseable = metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"');
    expect(applied + unparseable).toBe(values.length + 1 + 2);
    expect(await complete(gateway, [...P, 7])).toBe(1);
  });
});

describe("TensorRT-LLM's /kv_cache_events over HTTP", () => {
  it("polled and drained per attention-DP rank: stored, updated, removed, an id gap, a body that is not a list", async () => {
    const { gateway, a } = await gatewayWith("{ kind: http, interval_ms: 20, dp_ranks: 2 }");
    a.behaviour.kvCacheEvents = [wire.http.stored!];
    await waitFor(() => viewBlocks(gateway) === 5, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    expect(a.received.some((r) => r.method === "POST" && r.path === "/kv_cache_events")).toBe(true);
    expect(await complete(gateway, [...P, 7])).toBe(1);
    expect(matchedOnA(gateway)).toBe(16);
    a.behaviour.kvCacheEvents.push(wire.http.updated_and_removed!);
    await waitFor(() => viewBlocks(gateway) === 2);
    expect(await complete(gateway, [...P, 8])).toBe(1);
    expect(matchedOnA(gateway)).toBe(20);
    a.behaviour.kvCacheEvents.push(wire.http.gap!);
    await waitFor(() => state(gateway, "gapped", 0) === 1);
    expect(metric(gateway, "upstream_kv_event_gaps_total", 'upstream="1",filled="false"')).toBe(1);
    expect(state(gateway, "live", 1)).toBe(1);
    a.behaviour.kvCacheEvents.push(wire.http.not_a_list!);
    await waitFor(() => metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"') === 1);
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="ignored"')).toBeGreaterThanOrEqual(2); // created, updated
  });

  it("a large answer (parsed off the event loop) is applied a run of events at a time: /health answers while it is half applied, event ids are checked across runs, the view ends whole", async () => {
    // 2 DP ranks, 300 stored events of 32 blocks each, a chain per rank; rank 1's ids jump once (id 100 lost).
    const { gateway, a } = await gatewayWith("{ kind: http, interval_ms: 20, dp_ranks: 2 }");
    const tpb = wire.tokensPerBlock;
    const events: unknown[] = [];
    const ids = [0, 0];
    for (let e = 0; e < 300; e++) {
      const rank = e % 2;
      if (rank === 1 && ids[1] === 100) ids[1]++;
      const first = 1 + rank * 1_000_000 + Math.floor(e / 2) * 32;
      const blocks = Array.from({ length: 32 }, (_, i) => ({ type: "stored_block", block_hash: first + i, tokens: Array.from({ length: tpb }, (_, t) => ({ type: "unique_token", token_id: ((first + i) * tpb + t) % 30_000, token_extra_id: 0 })), cache_level: 0, priority: 35, mm_keys: [] }));
      events.push({ event_id: ids[rank]!++, data: { type: "stored", parent_hash: e < 2 ? null : first - 1, blocks }, window_size: 4096, attention_dp_rank: rank });
    }
    const answer = JSON.stringify(events);
    expect(answer.length).toBeGreaterThan(1 << 20); // over the inline bound many times: parsed in the worker
    a.behaviour.kvCacheEvents = [answer];
    const seen: number[] = [];
    while (seen.at(-1) !== 9_600) {
      expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
      seen.push(viewBlocks(gateway));
    }
    expect(seen.some((n) => n > 0 && n < 9_600)).toBe(true);
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="applied"')).toBe(1);
    expect(metric(gateway, "upstream_kv_event_gaps_total", 'upstream="1",filled="false"')).toBe(1);
    expect(state(gateway, "gapped", 1)).toBe(1);
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
  });

  it("one event larger than a run is cut: its pieces follow it to its DP rank, and the same event again (an old id) is dropped whole", async () => {
    const { gateway, a } = await gatewayWith("{ kind: http, interval_ms: 20, dp_ranks: 2 }");
    const tpb = wire.tokensPerBlock;
    const stored = (id: number, rank: number, first: number, n: number) => ({
      event_id: id,
      data: { type: "stored", parent_hash: null, blocks: Array.from({ length: n }, (_, i) => ({ type: "stored_block", block_hash: first + i, tokens: Array.from({ length: tpb }, (_, t) => ({ type: "unique_token", token_id: ((first + i) * tpb + t) % 30_000, token_extra_id: 0 })), cache_level: 0, priority: 35, mm_keys: [] })) },
      window_size: 4096,
      attention_dp_rank: rank,
    });
    const first = JSON.stringify([stored(1, 0, 1, 5), stored(2, 0, 101, 3_000), stored(0, 1, 1_000_001, 10)]);
    expect(first.length).toBeGreaterThan(64 << 10);
    a.behaviour.kvCacheEvents = [first];
    await waitFor(() => viewBlocks(gateway) === 3_015, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_") || l.includes("view")).join("\n"));
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
    // Id 2 again with other blocks: old, so none of its pieces applies; the rank's next id does.
    a.behaviour.kvCacheEvents.push(JSON.stringify([stored(2, 0, 50_001, 3_000), stored(3, 0, 6_001, 5)]));
    await waitFor(() => viewBlocks(gateway) === 3_020, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_") || l.includes("view")).join("\n"));
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="duplicate"')).toBe(1);
    expect(state(gateway, "live", 0)).toBe(1);
    // A large answer that is not JSON (parsed in the worker too) is counted, and polling goes on.
    a.behaviour.kvCacheEvents.push(`[${"{".repeat(100_000)}`, JSON.stringify([stored(4, 0, 7_001, 2)]));
    await waitFor(() => viewBlocks(gateway) === 3_022);
    expect(metric(gateway, "upstream_kv_event_batches_total", 'upstream="1",outcome="unparseable"')).toBe(1);
  });

  it("TensorRT-LLM's serializer's stored event with a partial last block: the full blocks route the next request, the tail is counted", async () => {
    // Before: the whole event was malformed (matched 0 where the engine reuses 8).
    const f = engines.trtllm_partial_tail;
    const { gateway, a } = await gatewayWith("{ kind: http, interval_ms: 20 }");
    a.behaviour.kvCacheEvents = [f.json];
    await waitFor(() => viewBlocks(gateway) === f.reused / engines.tokensPerBlock, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
    expect(metric(gateway, "upstream_kv_partial_tails_total", 'upstream="1"')).toBe(1);
    expect(metric(gateway, "upstream_kv_events_total", 'upstream="1",outcome="malformed"')).toBe(0);
    expect(await complete(gateway, f.prompt)).toBe(1);
    expect(matchedOnA(gateway)).toBe(f.reused);
  });

  it("behind TensorRT-LLM's fanout (event_ids: sparse) the ids its filter skips are not gaps; without it they are", async () => {
    // kv_event_fanout.py's HTTP buffer, as recorded: stored events 1 and 5 (2, an update, filtered; 3 and 4 lost upstream of it).
    const drained = JSON.parse(engines.trtllm_fanout_gap.http_json) as { attention_dp_rank?: number }[];
    const body = JSON.stringify(drained.map(({ attention_dp_rank: _rank, ...e }) => e)); // one DP rank here
    for (const [setting, gaps] of [[", event_ids: sparse", 0], ["", 1]] as const) {
      const { gateway, a } = await gatewayWith(`{ kind: http, interval_ms: 20${setting} }`);
      a.behaviour.kvCacheEvents = [body];
      await waitFor(() => viewBlocks(gateway) === 2, () => gateway.metrics().split("\n").filter((l) => l.includes("kv_")).join("\n"));
      expect(metric(gateway, "upstream_kv_event_gaps_total", 'upstream="1",filled="false"')).toBe(gaps);
      expect(state(gateway, gaps === 0 ? "live" : "gapped")).toBe(1);
    }
  });

  it("uint64 hashes in the JSON keep every bit", () => {
    const parsed = parseJsonKeepingIntegers('[{"h": 17293822569102704641, "n": 12, "s": "17293822569102704642 \\" 17293822569102704643", "f": 1.5e300}]') as Record<string, unknown>[];
    expect(parsed[0]).toEqual({ h: "17293822569102704641", n: 12, s: '17293822569102704642 " 17293822569102704643', f: 1.5e300 });
  });
});
