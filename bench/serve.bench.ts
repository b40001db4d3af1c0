// The gateway's cost per proxied request: CPU time of the gateway process per
// non-streaming chat completion (a 4 KB body), side by side with a minimal
// pass-through proxy on the same HTTP stack (node:http in, undici Pool out)
// that neither parses nor routes; plus the latency each adds over going
// direct to the engine (p50, p99, one request at a time). Each server runs in
// its own child process so its CPU time is its own; the engine and the load
// generator run in others. Loopback only, bounded. Run: npm run bench:serve
// (ADP_BENCH_PROFILE=gateway, gateway-hf or passthrough writes that child's CPU
// profile to build/profiles/; ADP_BENCH_NODE_ARGS passes V8 flags such as
// --trace-gc to the servers).
//
// Then the engines' tokenizers (tokenizer kind huggingface): their CPU time
// per ~2,000-token prompt, in process (a chat prompt with nothing cached, the
// next turn of a conversation whose prefix is cached, a completion prompt, and
// the library's plain encode for comparison), and a gateway routing by one of
// them against the pass-through, side by side as above, with ~2,000-token chat
// bodies (a shared system prompt, a question of their own). The check printed:
// the gateway's CPU per request within 2x the pass-through's plus the
// tokenizer's measured cost per request of that body. ADP_BENCH_TOKENIZER
// names model folders (comma-separated; default: the test fixtures; the first
// is the gateway's); ADP_BENCH_SERVE_PHASES=bytes, huggingface or pool runs one part.
//
// Then (phase pool) the tokenizer on the event loop against the tokenizer pool
// (worker threads, the default for kind huggingface), each side by side with
// the pass-through, on a ~2,000-token chat mix: eight system prompts, every
// sixteenth request a new one (its segments cold), a question each. CPU per
// request counts every thread of the gateway process, workers included.
import { fork, type ChildProcess } from "node:child_process";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { answerCpuRequests, cpuOf } from "./support/child-cpu.js";
import { createGateway, loadGatewayConfig, loadHuggingFaceTokenizer, loadTokenizer, type HuggingFaceTokenizer } from "../gateway/src/index.js";
import { sendChats } from "./support/chat-load.js";

const SELF = fileURLToPath(import.meta.url);
const CONCURRENCY = 16;
const CPU_REQUESTS = 18_000;
/** Rounds (the ratio is reported per round too). */
const ROUNDS = 9;
/** Requests each server serves before measuring. */
const WARM_UP_REQUESTS = 30_000;
const LATENCY_REQUESTS = 1800;
/** The huggingface-mode run: fewer requests (each costs more), the same shape. */
const HF = { cpuRequests: 10_000, rounds: 5, warmUp: 12_000, latency: 500 };
/** Tokens of the huggingface-mode bodies and of the in-process prompts (about). */
const PROMPT_TOKENS = 2_000;
/** Model folders for the tokenizer figures (the first serves the huggingface-mode gateway). */
const TOKENIZERS = (process.env.ADP_BENCH_TOKENIZER ?? ["qwen2.5", "mistral-v1"].map((f) => path.join("test", "fixtures", "tokenizers", f)).join(",")).split(",").filter(Boolean);
/** Which parts run. */
const PHASES = new Set((process.env.ADP_BENCH_SERVE_PHASES ?? "bytes,huggingface,pool").split(","));

/** A 4 KB chat body (a system prompt and a question). */
function body(i: number): string {
  const system = "You are a helpful assistant that answers briefly. ".repeat(70);
  const text = JSON.stringify({ model: "bench-model", messages: [{ role: "system", content: system }, { role: "user", content: `question number ${i}` }], max_tokens: 16 });
  return text;
}

/** Filler words for the tokenizer's prompts (a linear congruential generator: the same text every run). */
const WORDS = "the of and to in is was for that with as on by at from his her he she it they an be this which or are were had have not but all one their what so up out if about who get there when make can like time no just him know take people into year your good some could them see other than then now look only come its over think also back after use two how our work first well way even new want because any these give day most us cache router token prefix block engine rank".split(" ");

/** `n` words of filler text from `seed`. */
function words(n: number, seed: number): string {
  let state = seed;
  let text = "";
  for (let i = 0; i < n; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    text += WORDS[state % WORDS.length]! + (state % 13 === 0 ? ". " : " ");
  }
  return text.trimEnd();
}

/** Filler text of about `tokens` tokens by `tok` (grown until it is). */
function textOf(tok: HuggingFaceTokenizer, tokens: number, seed: number): string {
  let n = tokens / 2;
  while (tok.encodeUncached(words(n, seed), false).length < tokens) n = Math.ceil(n * 1.1);
  return words(n, seed);
}

/** The huggingface-mode chat body: a shared system prompt (~PROMPT_TOKENS tokens) and question `i`. */
function hfBody(system: string, i: number): string {
  return JSON.stringify({ model: "bench-model", messages: [{ role: "system", content: system }, { role: "user", content: `question number ${i}` }], max_tokens: 16 });
}

/** CPU time (µs) of `f(i)` per call: the median of five batches of `reps` calls, after one unmeasured batch (JIT, caches, GC). */
function cpuPerCall(f: (i: number) => void, reps: number): number {
  const batches: number[] = [];
  for (let b = 0; b < 6; b++) {
    const since = process.cpuUsage();
    for (let i = 0; i < reps; i++) f(b * reps + i);
    const d = process.cpuUsage(since);
    if (b > 0) batches.push((d.user + d.system) / reps);
  }
  return quantile(batches, 0.5);
}

/**
 * One tokenizer's CPU cost per ~PROMPT_TOKENS-token prompt, in process: a
 * conversation rendered and encoded with nothing cached, its next turn with
 * its prefix cached, a completion prompt, the library's plain encode of the
 * same chat text, and rendering alone; plus the huggingface-mode body's cost
 * (the gateway's tokenizer work per request in that run).
 */
function tokenizerCosts(dir: string): Record<string, unknown> {
  const tok = loadHuggingFaceTokenizer(dir);
  const turns = (n: number) => Array.from({ length: n }, (_, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: "" }));
  // Seven turns (user first and last) sharing ~PROMPT_TOKENS tokens, then the next turn.
  const texts = turns(7).map((_, i) => textOf(tok, PROMPT_TOKENS / 7, 11 + i));
  const conversation = [{ role: "system", content: "You are a helpful assistant." }, ...turns(7).map((t, i) => ({ ...t, content: texts[i]! }))];
  const chatTokens = tok.encodeUncached(tok.render(conversation), false).length;
  const prompt = textOf(tok, PROMPT_TOKENS, 99);
  const vary = (i: number) => [...conversation.slice(0, -1), { role: "user", content: `${texts[6]} ${i}` }];
  const system = textOf(tok, PROMPT_TOKENS, 7);
  const body = (i: number) => JSON.parse(hfBody(system, i)) as { messages: { role: string; content: string }[] };
  const cold = cpuPerCall((i) => {
    tok.clearCache();
    tok.release(tok.encodeChat(vary(i)));
  }, 20);
  tok.encodeChat(conversation);
  const nextTurn = cpuPerCall((i) => tok.release(tok.encodeChat([...conversation, { role: "assistant", content: `answer ${i}` }, { role: "user", content: `next question ${i}` }])), 100);
  const completion = cpuPerCall((i) => tok.release(tok.encodePrompt(`${prompt} ${i}`)), 20);
  const library = cpuPerCall((i) => tok.encodeUncached(tok.render(vary(i)), false), 8);
  const render = cpuPerCall((i) => tok.render(vary(i)), 100);
  tok.encodeChat(body(0).messages);
  const gatewayBody = cpuPerCall((i) => tok.release(tok.encodeChat(body(i).messages)), 100);
  return {
    bench: "serve-tokenizer",
    tokenizer: dir,
    segmented: tok.segmented,
    wordwise: tok.wordwise,
    chat_tokens: chatTokens,
    chat_cold_us: Math.round(cold),
    chat_next_turn_us: Math.round(nextTurn),
    completion_tokens: tok.encodeUncached(prompt, true).length,
    completion_us: Math.round(completion),
    library_plain_chat_us: Math.round(library),
    render_us: Math.round(render),
    gateway_body_tokens: tok.encodeUncached(tok.render(body(0).messages), false).length,
    gateway_body_us: Math.round(gatewayBody),
  };
}

/** What a child process runs: `engine`, `gateway URL`, `gateway-hf URL` or `passthrough URL`; it reports its URL, then its CPU time on request. */
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
  } else if (mode === "gateway-hf") {
    // The tokenizer given to the gateway runs on the event loop (as every request's did before the pool).
    const config = loadGatewayConfig({ flags: { upstreams: [upstream!], port: 0, logLevel: "silent", tokenizer: TOKENIZERS[0]! } });
    const gateway = await createGateway(config, { tokenizer: loadTokenizer(config.tokenizer) });
    url = gateway.url;
  } else if (mode === "gateway-hf-pool") {
    const config = loadGatewayConfig({ flags: { upstreams: [upstream!], port: 0, logLevel: "silent", tokenizer: TOKENIZERS[0]! } });
    const gateway = await createGateway(config);
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
  answerCpuRequests();
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

/** Sends `n` requests (bodies from `bodyOf`) with `concurrency` in flight; returns each one's latency (ms). */
async function load(url: string, n: number, concurrency: number, bodyOf: (i: number) => string = body): Promise<number[]> {
  const pool = new Pool(url, { connections: concurrency, keepAliveTimeout: 30_000 });
  const latencies = await sendChats(pool, n, concurrency, bodyOf);
  await pool.close();
  return latencies;
}

const quantile = (xs: number[], q: number) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

/** How one side-by-side run goes: the gateway's child mode, the request counts, the bodies. */
interface Phase {
  readonly gateway: "gateway" | "gateway-hf" | "gateway-hf-pool";
  readonly cpuRequests: number;
  readonly rounds: number;
  readonly warmUp: number;
  readonly latency: number;
  readonly bodyOf: (i: number) => string;
  /** Printed with each line (which run it is). */
  readonly label: Record<string, unknown>;
}

/**
 * A gateway and the pass-through loaded side by side in front of one engine;
 * prints each server's CPU per request and added latency, and their ratio.
 * Resolves with the CPU per request (µs) of each.
 */
async function sideBySide(phase: Phase): Promise<{ passthrough: number; gateway: number }> {
  const engine = await spawnChild("engine");
  const servers = { passthrough: await spawnChild("passthrough", engine.url), gateway: await spawnChild(phase.gateway, engine.url) };
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
  await Promise.all(both.map(([, s]) => load(s.url, phase.warmUp, CONCURRENCY / 2, phase.bodyOf)));
  for (let round = 0; round < phase.rounds; round++) {
    for (const [, s] of both) s.proc.send("reset");
    await Promise.all(both.map(([, s]) => load(s.url, phase.cpuRequests / phase.rounds, CONCURRENCY / 2, phase.bodyOf)));
    for (const [name, s] of both) cpu[name]!.push(await cpuOf(s.proc));
    latency.direct!.push(...(await load(engine.url, phase.latency / phase.rounds, 1, phase.bodyOf)));
    for (const [name, s] of Object.entries(servers)) latency[name]!.push(...(await load(s.url, phase.latency / phase.rounds, 1, phase.bodyOf)));
  }
  const perRequest = (name: string) => cpu[name]!.reduce((a, b) => a + b, 0) / phase.cpuRequests;
  const direct50 = quantile(latency.direct!, 0.5);
  const direct99 = quantile(latency.direct!, 0.99);
  for (const name of ["passthrough", "gateway"]) {
    console.log(JSON.stringify({
      bench: "serve",
      ...phase.label,
      server: name === "gateway" ? phase.gateway : name,
      cpu_us_per_request: Number(perRequest(name).toFixed(1)),
      added_latency_ms_p50: Number((quantile(latency[name]!, 0.5) - direct50).toFixed(3)),
      added_latency_ms_p99: Number((quantile(latency[name]!, 0.99) - direct99).toFixed(3)),
      requests: phase.cpuRequests,
      concurrency: CONCURRENCY / 2, // each server's, both at once
    }));
  }
  // Each round's pair ran side by side.
  const ratios = cpu.gateway!.map((g, i) => g / cpu.passthrough![i]!).sort((a, b) => a - b);
  console.log(JSON.stringify({
    bench: "serve",
    ...phase.label,
    gateway_cpu_over_passthrough: Number((perRequest("gateway") / perRequest("passthrough")).toFixed(2)),
    per_round_ratio_median: Number(quantile(ratios, 0.5).toFixed(2)),
    per_round_ratio_min: Number(ratios[0]!.toFixed(2)),
    per_round_ratio_max: Number(ratios.at(-1)!.toFixed(2)),
    per_round_us: { gateway: cpu.gateway!.map((c) => Math.round(c / (phase.cpuRequests / phase.rounds))), passthrough: cpu.passthrough!.map((c) => Math.round(c / (phase.cpuRequests / phase.rounds))) },
    direct_latency_ms_p50: Number(direct50.toFixed(3)),
    direct_latency_ms_p99: Number(direct99.toFixed(3)),
  }));
  for (const p of [engine.proc, servers.passthrough.proc, servers.gateway.proc]) p.send("exit");
  return { passthrough: perRequest("passthrough"), gateway: perRequest("gateway") };
}

async function main(): Promise<void> {
  if (PHASES.has("pool")) await poolPhase();
  if (PHASES.has("bytes")) await sideBySide({ gateway: "gateway", cpuRequests: CPU_REQUESTS, rounds: ROUNDS, warmUp: WARM_UP_REQUESTS, latency: LATENCY_REQUESTS, bodyOf: body, label: {} });
  if (!PHASES.has("huggingface")) return;
  // The tokenizers' own cost first, alone on the machine (no server running).
  const costs = TOKENIZERS.map((dir) => tokenizerCosts(dir));
  for (const c of costs) console.log(JSON.stringify(c));
  const system = textOf(loadHuggingFaceTokenizer(TOKENIZERS[0]!), PROMPT_TOKENS, 7);
  const hf = await sideBySide({ gateway: "gateway-hf", ...HF, cpuRequests: HF.cpuRequests, bodyOf: (i) => hfBody(system, i), label: { tokenizer: TOKENIZERS[0], body_tokens: costs[0]!.gateway_body_tokens } });
  const tokenizerUs = costs[0]!.gateway_body_us as number;
  console.log(JSON.stringify({
    bench: "serve",
    tokenizer: TOKENIZERS[0],
    check: "gateway-hf CPU per request <= 2 x pass-through's + the tokenizer's cost per request of that body",
    gateway_hf_us: Math.round(hf.gateway),
    bound_us: Math.round(2 * hf.passthrough + tokenizerUs),
    passthrough_us: Math.round(hf.passthrough),
    tokenizer_us: tokenizerUs,
    within: hf.gateway <= 2 * hf.passthrough + tokenizerUs,
  }));
}

/** The pool phase: the same chat mix through the tokenizer on the event loop, then through the pool. */
async function poolPhase(): Promise<void> {
  const tok = loadHuggingFaceTokenizer(TOKENIZERS[0]!);
  const systems = Array.from({ length: 8 }, (_, k) => textOf(tok, PROMPT_TOKENS, 31 + k));
  // Every sixteenth request a system prompt never seen (its segments cold), else one of eight (warm).
  const mix = (i: number) => hfBody(i % 16 === 15 ? `${words(40, i)} ${systems[i % 8]}` : systems[i % 8]!, i);
  const label = { tokenizer: TOKENIZERS[0], body: "chat mix: 8 system prompts of ~2,000 tokens, 1 in 16 cold" };
  const inline = await sideBySide({ gateway: "gateway-hf", ...HF, bodyOf: mix, label: { ...label, tokenizing: "event loop" } });
  const pool = await sideBySide({ gateway: "gateway-hf-pool", ...HF, bodyOf: mix, label: { ...label, tokenizing: "worker pool" } });
  console.log(JSON.stringify({ bench: "serve", ...label, pool_cpu_over_event_loop: Number((pool.gateway / inline.gateway).toFixed(2)), event_loop_us: Math.round(inline.gateway), pool_us: Math.round(pool.gateway) }));
}

if (process.argv[2] === "child") void child(process.argv[3]!, process.argv[4]);
else await main();
