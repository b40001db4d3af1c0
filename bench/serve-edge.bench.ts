// The gateway's edge under a hostile prompt and a burst, with an engine's
// tokenizer (tokenizer kind huggingface, the Qwen2.5 fixture): one hostile
// chat body of 4 MB of spaces, then 1,000 concurrent ~2,000-token chats (eight
// system prompts, a question each), while /health is probed every 10 ms.
// Printed per run: /health's latency (p50, p99, max), every chat's status
// (none may be lost: each gets an answer), the hostile request's status and
// time, and the gateway's CPU. Runs, each in fresh child processes:
//   inline-default   tokenizing on the event loop (the code before the pool), default limits: the 4 MB prompt is refused by limits.max_prompt_chars
//   pool-default     the worker pool, default limits
//   inline-allowed   on the event loop, max_prompt_chars raised so 300,000 spaces are tokenized (pathological for the BPE: seconds)
//   pool-allowed     the worker pool, the same 300,000 spaces
// Loopback only, bounded. Run: npm run bench:edge (ADP_BENCH_EDGE_RUNS=pool-default,... picks runs;
// ADP_BENCH_PROFILE=gateway writes the gateway child's CPU profile to build/profiles/).
import { fork, type ChildProcess } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { answerCpuRequests, cpuOf } from "./support/child-cpu.js";
import { createGateway, loadGatewayConfig, loadTokenizer } from "../gateway/src/index.js";

const SELF = fileURLToPath(import.meta.url);
const TOKENIZER = path.join("test", "fixtures", "tokenizers", "qwen2.5");
const CHATS = 1_000;
const ENGINES = 4;
const PROBE_MS = 10;
const RUNS = (process.env.ADP_BENCH_EDGE_RUNS ?? "inline-default,pool-default,inline-allowed,pool-allowed").split(",");

/** Filler words (a linear congruential generator: the same text every run). */
const WORDS = "the of and to in is was for that with as on by at from his her he she it they an be this which or are were had have not but all one their what so up out if about who get there when make can like time no just him know take people into year your good some could them see other than then now look only come its over think also back after use two how our work first well way even new want because any these give day most us cache router token prefix block engine rank".split(" ");

/** `n` words from `seed`. */
function words(n: number, seed: number): string {
  let state = seed;
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    out.push(WORDS[state % WORDS.length]!);
  }
  return out.join(" ");
}

/** Chat `i`: one of eight ~2,000-token system prompts (about 1,600 words) and a question of its own. */
const SYSTEMS = Array.from({ length: 8 }, (_, k) => words(1_600, 17 + k));
const chat = (i: number) => JSON.stringify({ model: "bench-model", messages: [{ role: "system", content: SYSTEMS[i % 8] }, { role: "user", content: `question number ${i}: ${words(12, i)}` }], max_tokens: 16 });

/** A child: `engines` (ENGINES mock engines) or `gateway MODE URLS`; reports its URL(s), then its CPU on request. */
async function child(mode: string, args: string[]): Promise<void> {
  if (mode === "engines") {
    const answer = JSON.stringify({ id: "x", object: "chat.completion", created: 0, model: "bench-model", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] });
    const urls: string[] = [];
    for (let e = 0; e < ENGINES; e++) {
      const server = createServer((req, res) => {
        req.resume();
        req.on("end", () => (req.url === "/health" ? res.end("ok") : res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) }).end(answer)));
      });
      server.keepAliveTimeout = 60_000;
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    }
    process.send!({ urls });
  } else {
    const [run, upstreams] = [args[0]!, args[1]!.split(",")];
    const allowed = run.endsWith("allowed");
    const config = loadGatewayConfig({
      object: { upstreams, listen: { port: 0 }, logging: { level: "silent" }, limits: { max_body_bytes: 8 << 20, ...(allowed ? { max_prompt_chars: 8 << 20 } : {}) }, tokenizer: { kind: "huggingface", path: TOKENIZER } },
    });
    // "inline": the tokenizer given to the gateway runs on the event loop, as every request's did before the pool.
    const gateway = await createGateway(config, run.startsWith("inline") ? { tokenizer: loadTokenizer(config.tokenizer) } : {});
    process.send!({ url: gateway.url });
  }
  answerCpuRequests();
}

/** Forks this file as a child; resolves with it and what it reported. */
function spawnChild(args: string[]): Promise<{ proc: ChildProcess; info: { url?: string; urls?: string[] } }> {
  return new Promise((resolve, reject) => {
    const profile = process.env.ADP_BENCH_PROFILE === args[0] ? ["--cpu-prof", "--cpu-prof-dir=build/profiles"] : [];
    const proc = fork(SELF, ["child", ...args], { stdio: ["ignore", "inherit", "inherit", "ipc"], execArgv: profile });
    proc.once("message", (m) => resolve({ proc, info: m as { url?: string; urls?: string[] } }));
    proc.once("exit", (code) => reject(new Error(`${args[0]} exited ${code}`)));
  });
}

const quantile = (xs: number[], q: number) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))] ?? NaN;

/** One run: the hostile prompt and the burst against a fresh gateway, /health probed throughout. */
async function run(name: string): Promise<void> {
  const engines = await spawnChild(["engines"]);
  const gateway = await spawnChild(["gateway", name, engines.info.urls!.join(",")]);
  const url = gateway.info.url!;
  const chats = new Pool(url, { connections: CHATS, keepAliveTimeout: 30_000 });
  const send = async (body: string) => {
    const started = performance.now();
    try {
      const r = await chats.request({ path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" }, body, headersTimeout: 120_000, bodyTimeout: 120_000 });
      await r.body.dump();
      return { status: r.statusCode, ms: performance.now() - started };
    } catch {
      return { status: 0, ms: performance.now() - started }; // lost: no answer
    }
  };
  for (let i = 0; i < 64; i++) await send(chat(i)); // warm: each system prompt cached
  gateway.proc.send("reset");
  const probe = new Pool(url, { connections: 1 });
  const health: number[] = [];
  let probing = true;
  const prober = (async () => {
    while (probing) {
      const started = performance.now();
      const r = await probe.request({ path: "/health", method: "GET" });
      await r.body.dump();
      health.push(performance.now() - started);
      await new Promise((res) => setTimeout(res, PROBE_MS));
    }
  })();
  await new Promise((res) => setTimeout(res, 200));
  const started = performance.now();
  const spaces = name.endsWith("allowed") ? 300_000 : 4 << 20;
  const hostile = send(JSON.stringify({ model: "bench-model", messages: [{ role: "user", content: " ".repeat(spaces) }] }));
  await new Promise((res) => setTimeout(res, 20)); // the hostile body is in first
  const burst = await Promise.all(Array.from({ length: CHATS }, (_, i) => send(chat(1_000 + i))));
  const bad = await hostile;
  const wall = performance.now() - started;
  probing = false;
  await prober;
  const cpuUs = await cpuOf(gateway.proc);
  const statuses: Record<string, number> = {};
  for (const r of burst) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
  console.log(
    JSON.stringify({
      bench: "serve-edge",
      run: name,
      hostile_prompt_chars: spaces,
      hostile_status: bad.status,
      hostile_ms: Math.round(bad.ms),
      chats: CHATS,
      chat_statuses: statuses,
      lost: burst.filter((r) => r.status === 0).length,
      chat_ms_p50: Math.round(quantile(burst.map((r) => r.ms), 0.5)),
      chat_ms_p99: Math.round(quantile(burst.map((r) => r.ms), 0.99)),
      health_probes: health.length,
      health_ms_p50: Number(quantile(health, 0.5).toFixed(2)),
      health_ms_p99: Number(quantile(health, 0.99).toFixed(2)),
      health_ms_max: Number(Math.max(...health).toFixed(2)),
      wall_ms: Math.round(wall),
      gateway_cpu_ms: Math.round(cpuUs / 1000),
    }),
  );
  await Promise.all([chats.close(), probe.close()]);
  for (const p of [engines.proc, gateway.proc]) p.send("exit");
}

if (process.argv[2] === "child") void child(process.argv[3]!, process.argv.slice(4));
else for (const name of RUNS) await run(name);
