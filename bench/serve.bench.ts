// The gateway's cost per proxied request: CPU time of the gateway process per
// non-streaming chat completion (a 4 KB body), side by side with a minimal
// pass-through proxy on the same HTTP stack (node:http in, undici Pool out)
// that neither parses nor routes; plus the latency each adds over going
// direct to the engine (p50, p99, one request at a time). Each server runs in
// its own child process so its CPU time is its own; the engine and the load
// generator run in others. Loopback only, bounded. Run: npm run bench:serve
// (ADP_BENCH_PROFILE=gateway, or passthrough, writes that child's CPU profile
// to build/profiles/; ADP_BENCH_NODE_ARGS passes V8 flags such as --trace-gc to
// both servers).
import { fork, type ChildProcess } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { createGateway, loadGatewayConfig } from "../src/serve/index.js";

const SELF = fileURLToPath(import.meta.url);
const CONCURRENCY = 16;
const CPU_REQUESTS = 18_000;
/** Rounds (the ratio is reported per round too). */
const ROUNDS = 9;
/** Requests each server serves before measuring. */
const WARM_UP_REQUESTS = 30_000;
const LATENCY_REQUESTS = 1800;

/** A 4 KB chat body (a system prompt and a question). */
function body(i: number): string {
  const system = "You are a helpful assistant that answers briefly. ".repeat(70);
  const text = JSON.stringify({ model: "bench-model", messages: [{ role: "system", content: system }, { role: "user", content: `question number ${i}` }], max_tokens: 16 });
  return text;
}

/** What a child process runs: `engine`, `gateway URL` or `passthrough URL`; it reports its URL, then its CPU time on request. */
async function child(mode: string, upstream: string | undefined): Promise<void> {
  let url: string;
  if (mode === "engine") {
    const answer = JSON.stringify({ id: "x", object: "chat.completion", created: 0, model: "bench-model", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    const answerBytes = Buffer.byteLength(answer);
    const server = createServer((req, res) => {
      req.resume();
      req.on("end", () => res.writeHead(200, { "content-type": "application/json", "content-length": answerBytes }).end(answer)); // with its length, as uvicorn sends a whole JSON answer
    });
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  } else if (mode === "gateway") {
    const gateway = await createGateway(loadGatewayConfig({ flags: { upstreams: [upstream!], port: 0, logLevel: "silent" } }));
    url = gateway.url;
  } else {
    // The pass-through: the same stack, no parsing, no routing, one upstream.
    const pool = new Pool(upstream!, { keepAliveTimeout: 30_000 });
    const hop = new Set(["connection", "keep-alive", "transfer-encoding", "host", "content-length"]);
    const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const headers: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !hop.has(k)) headers[k] = v;
      const response = await pool.request({ path: req.url!, method: "POST", headers, body: Buffer.concat(chunks) });
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(response.headers)) if (v !== undefined && !hop.has(k)) out[k] = v;
      if (response.headers["content-length"] !== undefined) out["content-length"] = response.headers["content-length"]; // unchunked, as the gateway answers
      res.writeHead(response.statusCode, out);
      for await (const c of response.body) res.write(c);
      res.end();
    });
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }
  let since = process.cpuUsage();
  process.on("message", (m) => {
    if (m === "reset") since = process.cpuUsage();
    if (m === "cpu") {
      const d = process.cpuUsage(since);
      process.send!({ cpuUs: d.user + d.system });
    }
    if (m === "exit") process.exit(0);
  });
  process.send!({ url });
}

/** Forks this file as a child of `mode`; resolves with it and its URL. */
function spawnChild(mode: string, upstream?: string): Promise<{ proc: ChildProcess; url: string }> {
  return new Promise((resolve, reject) => {
    const proc = fork(SELF, ["child", mode, ...(upstream ? [upstream] : [])], { stdio: ["ignore", "inherit", "inherit", "ipc"], execArgv: [...(process.env.ADP_BENCH_NODE_ARGS?.split(" ").filter(Boolean) ?? []), ...(process.env.ADP_BENCH_PROFILE === mode ? ["--cpu-prof", "--cpu-prof-dir=build/profiles"] : [])] });
    proc.once("message", (m) => resolve({ proc, url: (m as { url: string }).url }));
    proc.once("exit", (code) => reject(new Error(`${mode} exited ${code}`)));
  });
}

/** Asks a child for its CPU time since its last reset (µs). */
function cpuOf(proc: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    proc.once("message", (m) => resolve((m as { cpuUs: number }).cpuUs));
    proc.send("cpu");
  });
}

/** Sends `n` requests with `concurrency` in flight; returns each one's latency (ms). */
async function load(url: string, n: number, concurrency: number): Promise<number[]> {
  const pool = new Pool(url, { connections: concurrency, keepAliveTimeout: 30_000 });
  const latencies: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const started = performance.now();
      const response = await pool.request({ path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" }, body: body(i) });
      await response.body.dump();
      if (response.statusCode !== 200) throw new Error(`status ${response.statusCode}`);
      latencies.push(performance.now() - started);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  await pool.close();
  return latencies;
}

const quantile = (xs: number[], q: number) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

async function main(): Promise<void> {
  const engine = await spawnChild("engine");
  const servers = { passthrough: await spawnChild("passthrough", engine.url), gateway: await spawnChild("gateway", engine.url) };
  const cpu: Record<string, number[]> = { passthrough: [], gateway: [] };
  const latency: Record<string, number[]> = { direct: [], passthrough: [], gateway: [] };
  // Both servers are loaded at the same time, half the concurrency each, so
  // whatever the VM does (its speed drifts, the four processes contend for two
  // cores) happens to both alike; measured one after the other, the ratio
  // swung by ±20% from run to run. The warm-up runs to a steady state: JIT,
  // heap sizing (the young generation grows over the first ~8,000 requests;
  // a full GC still falls in most runs past 15,000)
  // and connections; the soak shows that state holds over a million requests.
  const both = Object.entries(servers);
  await Promise.all(both.map(([, s]) => load(s.url, WARM_UP_REQUESTS, CONCURRENCY / 2)));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [, s] of both) s.proc.send("reset");
    await Promise.all(both.map(([, s]) => load(s.url, CPU_REQUESTS / ROUNDS, CONCURRENCY / 2)));
    for (const [name, s] of both) cpu[name]!.push(await cpuOf(s.proc));
    latency.direct!.push(...(await load(engine.url, LATENCY_REQUESTS / ROUNDS, 1)));
    for (const [name, s] of Object.entries(servers)) latency[name]!.push(...(await load(s.url, LATENCY_REQUESTS / ROUNDS, 1)));
  }
  const perRequest = (name: string) => cpu[name]!.reduce((a, b) => a + b, 0) / CPU_REQUESTS;
  const direct50 = quantile(latency.direct!, 0.5);
  const direct99 = quantile(latency.direct!, 0.99);
  for (const name of ["passthrough", "gateway"]) {
    console.log(JSON.stringify({
      bench: "serve",
      server: name,
      cpu_us_per_request: Number(perRequest(name).toFixed(1)),
      added_latency_ms_p50: Number((quantile(latency[name]!, 0.5) - direct50).toFixed(3)),
      added_latency_ms_p99: Number((quantile(latency[name]!, 0.99) - direct99).toFixed(3)),
      requests: CPU_REQUESTS,
      concurrency: CONCURRENCY / 2, // each server's, both at once
    }));
  }
  // Each round's pair ran side by side.
  const ratios = cpu.gateway!.map((g, i) => g / cpu.passthrough![i]!).sort((a, b) => a - b);
  console.log(JSON.stringify({
    bench: "serve",
    gateway_cpu_over_passthrough: Number((perRequest("gateway") / perRequest("passthrough")).toFixed(2)),
    per_round_ratio_median: Number(quantile(ratios, 0.5).toFixed(2)),
    per_round_ratio_min: Number(ratios[0]!.toFixed(2)),
    per_round_ratio_max: Number(ratios.at(-1)!.toFixed(2)),
    per_round_us: { gateway: cpu.gateway!.map((c) => Math.round(c / (CPU_REQUESTS / ROUNDS))), passthrough: cpu.passthrough!.map((c) => Math.round(c / (CPU_REQUESTS / ROUNDS))) },
    direct_latency_ms_p50: Number(direct50.toFixed(3)),
    direct_latency_ms_p99: Number(direct99.toFixed(3)),
  }));
  for (const p of [engine.proc, servers.passthrough.proc, servers.gateway.proc]) p.send("exit");
}

if (process.argv[2] === "child") void child(process.argv[3]!, process.argv[4]);
else await main();
