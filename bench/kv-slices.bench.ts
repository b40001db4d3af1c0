// Large engine batches and the event loop. Printed:
//   1. the library: one 65,536-block vLLM batch (16-token blocks) applied whole,
//      and in slices of SLICE_BLOCKS (the longest slice is the longest the
//      loop is held), after a warm-up;
//   2. gateways on a real ZeroMQ stream (a Publisher on loopback), /health
//      probed every 5 ms while the engine publishes: with the default limits,
//      a 16,000-block batch (0.9 MB: applied in slices) and a 1M-block
//      removal (5 MB: refused unread, over max_batch_bytes); with
//      max_batch_bytes raised to 64 MiB, the removal decoded, then refused
//      (over max_batch_blocks);
//   3. a gateway polling TensorRT-LLM's /kv_cache_events whose first answer
//      holds 16,000 blocks (16 MB of JSON: parsed in the worker, applied a
//      run of events at a time). The longest turn of the event loop meanwhile (the widest gap
//      between ticks of a 1 ms timer), /health's latency p50 and max, and how
//      long each batch took to be applied or refused.
//   4. a publisher in its own process sending one-block vLLM batches as fast
//      as it can for FLOOD_MS (tens of thousands a second, more than the
//      gateway applies: ZeroMQ drops the rest at the publisher): the longest
//      turn and /health's latency meanwhile, against the same probe before
//      the flood, and the batches applied.
// Run: npm run bench:kv-slices
import { spawn } from "node:child_process";
import { encode } from "@msgpack/msgpack";
import pino from "pino";
import { Publisher } from "zeromq";
import { createPrefixIndex, sliceKvEvents } from "../src/index.js";
import { createGateway, loadGatewayConfig } from "../gateway/src/index.js";
import { SLICE_BLOCKS } from "../gateway/src/events/event-slicing.js";

const TPB = 16;

/** A vLLM batch storing one chain of `blocks` blocks. */
function stored(blocks: number, first: number) {
  const event = { type: "BlockStored", block_hashes: Array.from({ length: blocks }, (_, i) => first + i), parent_block_hash: null, token_ids: Array.from({ length: blocks * TPB }, (_, i) => i % 5000), block_size: TPB, lora_id: null, medium: "GPU" };
  return { ts: 1, events: [event], data_parallel_rank: 0 };
}

/** Milliseconds `f` takes. */
function time(f: () => void): number {
  const t = performance.now();
  f();
  return performance.now() - t;
}

/** Percentile `q` of `xs`. */
const pct = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))] ?? NaN;

// 1. The library.
for (let round = 0; round < (process.env.ADP_BENCH_SKIP_LIBRARY ? 0 : 2); round++) {
  const batch = stored(65_536, 1 + round * 100_000);
  const whole = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB, maxMemoryBytes: 1 << 30 });
  const wholeMs = time(() => whole.applyKvEvents(batch, { rank: 0 }));
  const sliced = createPrefixIndex({ numRanks: 1, tokensPerBlock: TPB, maxMemoryBytes: 1 << 30 });
  let slices: unknown[] = [];
  const cutMs = time(() => (slices = sliceKvEvents(batch, SLICE_BLOCKS).slices));
  const each = slices.map((s) => time(() => sliced.applyKvEvents(s, { rank: 0 })));
  if (round === 1) {
    console.log(`library, 65,536 blocks: whole ${wholeMs.toFixed(1)} ms in one turn; cut ${cutMs.toFixed(1)} ms, then ${slices.length} slices of ${SLICE_BLOCKS}: longest ${Math.max(...each).toFixed(2)} ms, p50 ${pct(each, 0.5).toFixed(2)} ms, total ${each.reduce((a, b) => a + b, 0).toFixed(1)} ms`);
  }
  whole.dispose();
  sliced.dispose();
}

// 2. Gateways on a ZeroMQ stream.
const pub = new Publisher({ linger: 0 });
await pub.bind("tcp://127.0.0.1:*");
const endpoint = pub.lastEndpoint!;

/** A gateway subscribed to the publisher, with `limits` (YAML) on its stream. */
async function gatewayWith(limits: string) {
  const text = [
    "listen: { port: 0 }",
    "health: { interval_ms: 60000 }",
    `routing: { tokens_per_block: ${TPB} }`,
    "upstreams:",
    "  - url: http://127.0.0.1:9",
    `    kv_events: { kind: zmq, endpoint: "${endpoint}"${limits} }`,
  ].join("\n");
  const gateway = await createGateway(loadGatewayConfig({ file: { name: "bench.yaml", text } }), { logger: pino({ level: "silent" }) });
  await new Promise((r) => setTimeout(r, 300)); // the subscription reaches the publisher
  return gateway;
}

/** The longest turn of the event loop from now to `stop()`: the widest gap between ticks of a 1 ms timer. */
function longestTurn(): { stop(): number } {
  let last = performance.now();
  let longest = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  return {
    stop: () => {
      clearInterval(ticker);
      return longest;
    },
  };
}

/** /health latencies while `done` is false, probing every 5 ms. */
async function probe(url: string, done: () => boolean): Promise<number[]> {
  const out: number[] = [];
  while (!done()) {
    const t = performance.now();
    await (await fetch(`${url}/health`)).text();
    out.push(performance.now() - t);
    await new Promise((r) => setTimeout(r, 5));
  }
  return out;
}

let seq = 0n;
const removal = Buffer.from(encode({ ts: 1, events: [{ type: "BlockRemoved", block_hashes: Array.from({ length: 1 << 20 }, (_, i) => i + 1), medium: "GPU" }], data_parallel_rank: 0 }));
const runs: [string, string, Buffer, string][] = [
  ["default limits", "", Buffer.from(encode(stored(16_000, 1))), "applied"],
  ["default limits", "", Buffer.from(encode(stored(16_000, 100_001))), "applied"],
  ["default limits", "", removal, "oversized"],
  ["max_batch_bytes 64 MiB", ", max_batch_bytes: 67108864", removal, "oversized"],
];
for (const [name, limits, payload, outcome] of runs) {
  const gateway = await gatewayWith(limits);
  const count = () => Number(new RegExp(`^adp_gateway_upstream_kv_event_batches_total\\{[^}]*outcome="${outcome}"\\} (\\d+)$`, "m").exec(gateway.metrics())?.[1] ?? NaN);
  const before = count();
  // A probe before the batch: the first request's cold path (client and gateway share this process) is not the batch's.
  await (await fetch(`${gateway.url}/health`)).text();
  const frame = Buffer.alloc(8);
  frame.writeBigInt64BE(seq++, 0);
  const turns = longestTurn();
  const started = performance.now();
  const latencies = probe(gateway.url, () => count() > before);
  await pub.send(["", frame, payload]);
  const l = await latencies;
  const longest = turns.stop();
  console.log(`gateway (${name}), ${(payload.length / 1e6).toFixed(1)} MB batch ${outcome === "applied" ? "applied" : "refused"} in ${(performance.now() - started).toFixed(0)} ms; longest turn ${longest.toFixed(1)} ms; /health meanwhile p50 ${pct(l, 0.5).toFixed(1)} ms, max ${Math.max(...l).toFixed(1)} ms over ${l.length} probes`);
  await gateway.close();
}

pub.close();

// 3. A gateway polling TensorRT-LLM's /kv_cache_events: one answer of 16,000 blocks (16 MB of JSON) drained at once.
const trtllm = Array.from({ length: 500 }, (_, e) => ({
  event_id: e,
  data: { type: "stored", parent_hash: e === 0 ? null : e * 32, blocks: Array.from({ length: 32 }, (_, i) => ({ type: "stored_block", block_hash: e * 32 + i + 1, tokens: Array.from({ length: TPB }, (_, t) => ({ type: "unique_token", token_id: (i * TPB + t) % 5000, token_extra_id: 0 })), cache_level: 0, priority: 35, mm_keys: [] })) },
  window_size: 4096,
  attention_dp_rank: 0,
}));
// The engine in a process of its own: writing 16 MB to a socket here would be the bench's turn, not the gateway's.
const engineScript = `
  const parts = [];
  process.stdin.on("data", (d) => parts.push(d)).on("end", () => {
  const answer = Buffer.concat(parts);
  let served = 0;
  const server = require("node:http").createServer((req, res) => {
    req.resume();
    const body = req.url === "/kv_cache_events" && served++ === 0 ? answer : Buffer.from("[]");
    res.writeHead(200, { "content-type": "application/json", "content-length": body.length }).end(body);
  });
  server.listen(0, "127.0.0.1", () => process.stdout.write(server.address().port + "\\n"));
  });`;
const answerBytes = Buffer.byteLength(JSON.stringify(trtllm));
const engine = spawn(process.execPath, ["-e", engineScript], { stdio: ["pipe", "pipe", "inherit"] });
engine.stdin.end(JSON.stringify(trtllm));
const enginePort = Number(await new Promise<string>((r) => engine.stdout.once("data", (d: Buffer) => r(d.toString()))));
const polling = await createGateway(
  loadGatewayConfig({ file: { name: "bench.yaml", text: `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\nrouting: { tokens_per_block: ${TPB} }\nupstreams:\n  - url: http://127.0.0.1:${enginePort}\n    kv_events: { kind: http, interval_ms: 50 }\n` } }),
  { logger: pino({ level: "silent" }) },
);
await (await fetch(`${polling.url}/health`)).text();
{
  const blocks = () => Number(/^adp_gateway_upstream_engine_view_blocks\{[^}]*\} (\d+)$/m.exec(polling.metrics())?.[1] ?? 0);
  const turns = longestTurn();
  const started = performance.now();
  const l = await probe(polling.url, () => blocks() === 16_000);
  const longest = turns.stop();
  console.log(`gateway polling /kv_cache_events, ${(answerBytes / 1e6).toFixed(1)} MB answer (16,000 blocks) applied in ${(performance.now() - started).toFixed(0)} ms from the gateway's start; longest turn ${longest.toFixed(1)} ms; /health meanwhile p50 ${pct(l, 0.5).toFixed(1)} ms, max ${Math.max(...l).toFixed(1)} ms over ${l.length} probes`);
}
await polling.close();
engine.kill();

// 4. A flood of small batches from a publisher in a process of its own (a publisher in this one would be starved by
// the gateway it floods): each batch's single block is applied at once, so only the streams' share of a turn
// (common/next-turn.ts StreamTurns) lets requests in.
const FLOOD_MS = 5000;
const flooderScript = `
  const { Publisher } = require("zeromq");
  const { encode } = require("@msgpack/msgpack");
  (async () => {
    const pub = new Publisher({ linger: 0 });
    await pub.bind("tcp://127.0.0.1:*");
    process.stdout.write(pub.lastEndpoint + "\\n");
    await new Promise((r) => process.stdin.once("data", r));
    const seq = Buffer.alloc(8);
    for (let n = 1; ; n++) {
      seq.writeBigInt64BE(BigInt(n));
      const event = { type: "BlockStored", block_hashes: [n], parent_block_hash: n % 64 === 1 ? null : n - 1, token_ids: Array.from({ length: ${TPB} }, (_, i) => (n * ${TPB} + i) % 1000000), block_size: ${TPB}, lora_id: null, medium: "GPU" };
      await pub.send(["", seq, encode({ ts: 1, events: [event], data_parallel_rank: 0 })]);
    }
  })();`;
const flooder = spawn(process.execPath, ["-e", flooderScript], { stdio: ["pipe", "pipe", "inherit"], cwd: process.cwd() });
const floodEndpoint = (await new Promise<string>((r) => flooder.stdout.once("data", (d: Buffer) => r(d.toString())))).trim();
const flooded = await createGateway(
  loadGatewayConfig({ file: { name: "bench.yaml", text: `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\nrouting: { tokens_per_block: ${TPB} }\nupstreams:\n  - url: http://127.0.0.1:9\n    kv_events: { kind: zmq, endpoint: "${floodEndpoint}" }\n` } }),
  { logger: pino({ level: "silent" }) },
);
await new Promise((r) => setTimeout(r, 300)); // the subscription reaches the publisher
{
  const applied = () => Number(/^adp_gateway_upstream_kv_event_batches_total\{[^}]*outcome="applied"\} (\d+)$/m.exec(flooded.metrics())?.[1] ?? 0);
  await (await fetch(`${flooded.url}/health`)).text();
  let until = performance.now() + 1000;
  const quiet = await probe(flooded.url, () => performance.now() > until);
  flooder.stdin.write("go\n");
  const turns = longestTurn();
  until = performance.now() + FLOOD_MS;
  const l = await probe(flooded.url, () => performance.now() > until);
  const longest = turns.stop();
  console.log(`gateway under a flood of one-block batches for ${FLOOD_MS / 1000} s: ${applied()} applied; longest turn ${longest.toFixed(1)} ms; /health meanwhile p50 ${pct(l, 0.5).toFixed(1)} ms, p99 ${pct(l, 0.99).toFixed(1)} ms, max ${Math.max(...l).toFixed(1)} ms over ${l.length} probes (before it: p50 ${pct(quiet, 0.5).toFixed(1)} ms)`);
}
flooder.kill();
await flooded.close();
