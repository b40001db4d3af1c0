// adp-router-gateway against HAProxy, side by side in one run: what a platform
// team pays per request for routing by prefix instead of a C proxy's round
// robin or body hash. Four mock engines (one child process) keep an LRU prefix
// cache of ENGINE_CACHE_BLOCKS blocks each and answer after a prefill cost of
// the blocks they missed; the bundled Mooncake trace's first TRACE_REQUESTS
// requests become text prompts (each hash id a BLOCK_BYTES-byte chunk, so
// requests sharing leading hash ids share a literal prefix), sent open-loop at
// RATE× the trace's speed. Peers: the gateway (kv_cache_aware, its defaults),
// HAProxy round robin, HAProxy hashing the first 8 KiB of the body, and (with
// ADP_BENCH_PEERS naming it) node-pass, a bare node:http + undici relay: the
// floor of any gateway written in Node on node:http and undici; net-pass, a
// bare relay on `net` sockets with its own minimal HTTP/1.1 framing (the
// floor of a Node gateway with its own HTTP path; net-pass-wN, the same in N
// processes sharing the port as `serve --workers N` does); baseline, another build's
// gateway (ADP_BENCH_BASELINE_CLI=path/to/gateway/dist/cli.js: before and
// after in one run; baseline-wN with --workers N); a `-image` suffix (gateway-image,
// gateway-w2-image) runs that gateway with the allocator setting its container image
// sets (gateway/Dockerfile's MALLOC_TRIM_THRESHOLD_). Per peer
// and round (ROUNDS interleaved rounds, medians printed), after WARMUP_REQUESTS
// trace-shaped requests it serves unmeasured:
//   - CPU per 1,000 trace requests of the peer's whole process tree (/proc),
//     its peak RSS (the tree's, and its largest process's), end-to-end p50 on the trace, the engines' prefix hit ratio
//     and how evenly the requests spread;
//   - saturated small requests (wrk, WRK_CONNECTIONS connections): requests/s,
//     the share of the CPU spent in the kernel (syscalls: a floor no proxy escapes),
//     CPU per 1,000, and the engines' and the whole machine's CPU per 1,000 (what
//     two cores' requests/s divides: the peer's, the engines', wrk's and the kernel's);
//   - saturated streamed chats (wrk, STREAM_CONNECTIONS connections, `"stream": true`): the engines
//     answer STREAM_TOKENS server-sent events a request, each written on its own (as an engine
//     writes each token it makes), then `data: [DONE]`: requests/s and CPU per 1,000, as above;
//   - saturated small chats each on a connection of its own (wrk, CLOSE_CONNECTIONS clients sending
//     `Connection: close`): what accepting and closing connections costs, as above;
//   - added latency, one small request at a time: p50 through it minus direct.
// It installs nothing: without `haproxy` or `wrk` it says how to get them.
// Run: npm run bench:peers (ADP_BENCH_PEERS=gateway,gateway-w2,haproxy-rr,... picks
// peers, gateway-wN being serve --workers N;
// ADP_BENCH_GATEWAY_ARGS adds serve flags, ADP_BENCH_GATEWAY_NODE_ARGS node flags such as --cpu-prof (for node-pass too); ADP_BENCH_PEERS_ROUNDS, _RATE, _REQUESTS, _WARMUP resize it; _PHASES=trace,small,stream,close,latency picks measurements;
// ADP_BENCH_PEERS_TRACE_PROFILER runs a command over the measured trace alone, its {pid}
// replaced by the peer's pid ({pids}: its process tree's, comma-separated) and sent SIGINT when the trace ends, e.g.
// "perf record -e cpu-clock -p {pid} -o /tmp/trace.perf" with ADP_BENCH_GATEWAY_NODE_ARGS=--perf-basic-prof;
// ADP_BENCH_GATEWAY_STDOUT appends a gateway's stdout to a file, where V8's --trace-gc writes;
// ADP_BENCH_PEERS_PER_PROCESS prints each process's CPU seconds over the trace, and their kernel part).
// A round runs its peers at once, idle but for their turn: each measures its trace alone, then the saturated phases
// take turns (SATURATED_WINDOWS windows a peer after SETTLE_WINDOWS unmeasured, ADP_BENCH_PEERS_WINDOWS; each window's
// requests/s on the round's line).
// Besides the medians, each peer's saturated requests/s against HAProxy round robin's is printed by round (`by_round`),
// with the engines' CPU per request in the two windows as a ratio too: the engines' work is the same behind every
// peer, so that ratio shows where the machine's speed moved between the windows.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import cluster from "node:cluster";
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { Pool } from "undici";
import { oneProcess, processParents } from "../test/support/processes.js";

const SELF = fileURLToPath(import.meta.url);
const ROOT = path.resolve(path.dirname(SELF), "..", "..");
const ENGINES = 4;
const ENGINE_CACHE_BLOCKS = 2_000;
const BLOCK_BYTES = 2_048;
const TRACE_REQUESTS = Number(process.env.ADP_BENCH_PEERS_REQUESTS ?? 3_000);
const RATE = Number(process.env.ADP_BENCH_PEERS_RATE ?? 25);
/**
 * Requests each peer serves before any of its phases is measured: the trace's first
 * WARMUP_REQUESTS with every prompt's first byte changed (so no block of them
 * is a block of the measured trace), at 4× RATE. A gateway serves millions of
 * requests in one process; without this, V8's compiling of its hot paths is
 * counted against it: TurboFan optimizes a function called once a request only
 * after several thousand calls, and after 1,000 requests it still made 111-113
 * compilations over the 3,000 measured (`--trace-opt`; 13% of the gateway's CPU
 * there by perf), after 5,000 24-26 (57-91 ms of compiling, about 5%), and 26
 * after 12,000; 5 once the warm-up was split over two client pools (warmUp) and
 * routing stopped making a hidden class per request. A function called once a
 * batch takes longer still: the scheduler's #flush (1,507 bytes of bytecode)
 * needs 13 profiler ticks, ~4,300 batches, and after 5,000 requests it and the
 * router's batch functions were first optimized inside the measured window
 * (30-60 ms of compiling there, with no full collection and no deoptimization
 * in it, 4 runs); hence 10,000. HAProxy has nothing to warm,
 * and gets the same requests. A peer
 * of N worker processes gets N times as many, so each process is as warm as one
 * gateway.
 */
const WARMUP_REQUESTS = Number(process.env.ADP_BENCH_PEERS_WARMUP ?? 10_000);
const ROUNDS = Number(process.env.ADP_BENCH_PEERS_ROUNDS ?? 3);
const WRK_CONNECTIONS = 256;
const WRK_SECONDS = 8;
/** The saturated phases' windows a peer (WRK_SECONDS split among them; saturatedWindows). */
const SATURATED_WINDOWS = Number(process.env.ADP_BENCH_PEERS_WINDOWS ?? 4);
/** Unmeasured 1-second saturated windows a peer before them (saturatedWindows). */
const SETTLE_WINDOWS = 3;
const LATENCY_REQUESTS = 1_000;
/** Tokens a streamed answer carries, each its own server-sent event, and the connections streaming at once. */
const STREAM_TOKENS = 32;
const STREAM_CONNECTIONS = 64;
/** Clients of the `close` phase, each opening a connection per request. */
const CLOSE_CONNECTIONS = 64;
/** An engine's prefill cost: a fixed part and a part per block it missed (ms). */
const ENGINE_BASE_MS = 2;
const ENGINE_MS_PER_MISSED_BLOCK = 0.25;
const PEERS = (process.env.ADP_BENCH_PEERS ?? "gateway,gateway-w2,haproxy-rr,haproxy-hash").split(",");
/** The measurements taken: `trace`, `small` (saturated), `latency` (one at a time). */
const PHASES = new Set((process.env.ADP_BENCH_PEERS_PHASES ?? "trace,small,stream,close,latency").split(","));

/** Filler words for the prompts' chunks. */
const WORDS = "the of and to in is was for that with as on by at from his her he she it they an be this which or are were had have not but all one their what so up out if about who get there when make can like time no just him know take people into year your good some could them see other than then now look only come its over think also back after use two how our work first well way even new want because any these give day most us cache router token prefix block engine rank".split(" ");

/** Hash id `h`'s chunk: BLOCK_BYTES bytes of words drawn from `h` (a linear congruential generator: the same text every run). */
function chunk(h: number): string {
  let state = (h * 2654435761 + 1) % 2147483648;
  let text = "";
  while (text.length < BLOCK_BYTES) {
    state = (state * 1103515245 + 12345) % 2147483648;
    text += WORDS[state % WORDS.length]! + " ";
  }
  return text.slice(0, BLOCK_BYTES);
}

/** One trace request as the load generator sends it. */
interface TraceCall {
  readonly atMs: number;
  readonly body: string;
}

/**
 * The bundled trace's first `n` requests as chat bodies, arrivals divided by
 * `rate`; for a `warmup`, each prompt's first byte is a `~`, so none of its
 * blocks is one of the trace's, and past the trace's 12,031 requests it runs
 * again after its last, its first byte another (`}`, `|`, ...: none of its
 * blocks is one of an earlier pass's either).
 */
function traceCalls(n: number, rate = RATE, warmup = false): TraceCall[] {
  const all = gunzipSync(readFileSync(path.join(ROOT, "traces", "mooncake_conversation_trace.jsonl.gz"))).toString("utf8").split("\n").filter(Boolean);
  const records = all.slice(0, warmup ? all.length : n).map((line) => JSON.parse(line) as { timestamp: number; hash_ids: number[] });
  const span = records[records.length - 1]!.timestamp + 1_000;
  const chunks = new Map<number, string>();
  return Array.from({ length: Math.min(n, warmup ? Infinity : records.length) }, (_, i) => {
    const pass = Math.floor(i / records.length);
    const r = records[i % records.length]!;
    const text = r.hash_ids.map((h) => chunks.get(h) ?? (chunks.set(h, chunk(h)), chunks.get(h)!)).join("");
    const content = warmup ? `${String.fromCharCode(0x7e - pass)}${text.slice(1)}` : text;
    return { atMs: (r.timestamp + pass * span) / rate, body: JSON.stringify({ model: "bench-model", messages: [{ role: "user", content }], max_tokens: 1 }) };
  });
}

/** The optimum hit ratio of the calls' blocks (one infinite cache) and that of one pooled LRU of all engines' blocks. */
function yardsticks(calls: readonly TraceCall[]): { optimum: number; pooled: number } {
  const infinite = new Set<string>();
  const pooled = new Lru(ENGINE_CACHE_BLOCKS * ENGINES);
  let hitsInfinite = 0;
  let hitsPooled = 0;
  let total = 0;
  for (const call of calls) {
    const keys = blockKeys(JSON.parse(call.body).messages[0].content as string);
    let i = 0;
    while (i < keys.length && infinite.has(keys[i]!)) i++;
    hitsInfinite += i;
    hitsPooled += pooled.visit(keys);
    for (const k of keys) infinite.add(k);
    total += keys.length;
  }
  return { optimum: hitsInfinite / total, pooled: hitsPooled / total };
}

/** A prompt's block keys: each whole BLOCK_BYTES block named by its prefix chain (its index and its text's start). */
function blockKeys(content: string): string[] {
  const keys: string[] = [];
  let chain = "";
  for (let at = 0; at + BLOCK_BYTES <= content.length; at += BLOCK_BYTES) {
    chain = `${keys.length}:${chain.length > 64 ? chain.slice(0, 64) : chain}:${content.slice(at, at + 48)}`;
    keys.push(chain);
  }
  return keys;
}

/** An LRU of block keys: `visit` counts the leading blocks held, then holds them all (most recent last). */
class Lru {
  readonly #capacity: number;
  readonly #keys = new Map<string, true>();
  constructor(capacity: number) {
    this.#capacity = capacity;
  }
  visit(keys: readonly string[]): number {
    let hit = 0;
    while (hit < keys.length && this.#keys.has(keys[hit]!)) hit++;
    for (const k of keys) {
      this.#keys.delete(k);
      this.#keys.set(k, true);
    }
    while (this.#keys.size > this.#capacity) this.#keys.delete(this.#keys.keys().next().value!);
    return hit;
  }
}

// ── The engines' child ─────────────────────────────────────────────────────

/**
 * A streamed chat answer as vLLM's OpenAI server writes it
 * (vllm/entrypoints/openai/serving_chat.py, chat_completion_stream_generator,
 * at 003fe59: a first event with the role and empty content, one
 * `chat.completion.chunk` event a token, the last with its finish and stop
 * reasons, then `data: [DONE]`; no usage event unless stream_options asks):
 * STREAM_TOKENS token events, each written in its own turn so that each is its
 * own write (on loopback, its own segment), as an engine writes each token it
 * makes.
 */
function streamAnswer(res: ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8" });
  const event = (delta: string, finish = "null") => `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench-model","choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]}\n\n`;
  let i = 0;
  const next = () => {
    if (i === 0) res.write(event('{"role":"assistant","content":""}'));
    if (i < STREAM_TOKENS - 1) res.write(event(`{"content":" t${i}"}`));
    else return void res.end(event(`{"content":" t${i}"}`, '"stop","stop_reason":null') + "data: [DONE]\n\n");
    i++;
    setImmediate(next);
  };
  next();
}

/** In the engines' child: ENGINES mock engines, each with its LRU; prints their URLs. `GET /stats` sums their counters; `POST /reset` empties them. */
async function engines(): Promise<void> {
  const answer = JSON.stringify({ id: "x", object: "chat.completion", created: 0, model: "bench-model", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
  const freshStats = () => Array.from({ length: ENGINES }, () => ({ requests: 0, hits: 0, blocks: 0, lru: new Lru(ENGINE_CACHE_BLOCKS) }));
  const stats = freshStats();
  const urls: string[] = [];
  for (let e = 0; e < ENGINES; e++) {
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        if (req.url === "/stats") {
          res.end(JSON.stringify(stats.map(({ requests, hits, blocks }) => ({ requests, hits, blocks }))));
          return;
        }
        if (req.url === "/reset") {
          stats.splice(0, ENGINES, ...freshStats());
          res.end("ok");
          return;
        }
        if (req.method !== "POST") {
          res.end("ok");
          return;
        }
        const s = stats[e]!;
        const request = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { messages: { content: string }[]; stream?: boolean };
        const content = request.messages.map((m) => m.content).join("");
        const keys = blockKeys(content);
        const hit = s.lru.visit(keys);
        s.requests++;
        s.hits += hit;
        s.blocks += keys.length;
        const delay = ENGINE_BASE_MS + ENGINE_MS_PER_MISSED_BLOCK * (keys.length - hit);
        if (request.stream === true) setTimeout(() => streamAnswer(res), delay);
        else setTimeout(() => res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) }).end(answer), delay);
      });
    });
    server.keepAliveTimeout = 60_000;
    server.maxConnections = 100_000;
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  }
  process.stdout.write(JSON.stringify(urls) + "\n");
}

/**
 * In a pass-through child: the floor of any Node gateway, a node:http server
 * relaying each request over undici's dispatch API (as the gateway's
 * exchange does) to the engines in turn, with no reading, routing or
 * logging; listens on `port`.
 */
async function passThrough(port: number, urls: readonly string[]): Promise<void> {
  const pools = urls.map((u) => new Pool(u, { connections: 512 }));
  let next = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const pool = pools[next++ % pools.length]!;
      pool.dispatch(
        { path: req.url ?? "/", method: "POST", headers: { "content-type": "application/json" }, body: Buffer.concat(chunks) },
        {
          onRequestStart() {},
          onResponseStart(_c, status, headers) {
            res.writeHead(status, { "content-type": "application/json", "content-length": String(headers["content-length"] ?? "") });
          },
          onResponseData(_c, chunk) {
            res.write(chunk);
          },
          onResponseEnd() {
            res.end();
          },
          onResponseError() {
            res.destroy();
          },
        },
      );
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
}

/**
 * In a net-pass child: a relay on bare `net` sockets, each side framed by
 * hand (Content-Length only, one request per connection at a time, no
 * checks): what Node costs per request with no HTTP library; listens on `port`.
 */
async function netPass(port: number, urls: readonly string[]): Promise<void> {
  const targets = urls.map((u) => new URL(u));
  const idle: Socket[][] = targets.map(() => []);
  const CRLF2 = Buffer.from("\r\n\r\n");
  /** The length of the message whose head ends at `end` in `buf`, or -1 while it is incomplete. */
  const whole = (buf: Buffer): number => {
    const end = buf.indexOf(CRLF2);
    if (end < 0) return -1;
    const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(buf.toString("latin1", 0, end))?.[1] ?? 0);
    return buf.length >= end + 4 + length ? end + 4 + length : -1;
  };
  let next = 0;
  const upstream = (i: number, answer: (bytes: Buffer) => void): Socket => {
    const s = idle[i]!.pop() ?? connect({ host: targets[i]!.hostname, port: Number(targets[i]!.port), noDelay: true }).on("error", () => {});
    let buf: Buffer | null = null;
    s.removeAllListeners("data");
    s.on("data", (d: Buffer) => {
      buf = buf === null ? d : Buffer.concat([buf, d]);
      const n = whole(buf);
      if (n < 0) return;
      idle[i]!.push(s);
      answer(buf.subarray(0, n));
    });
    return s;
  };
  const server = createNetServer((client) => {
    client.setNoDelay(true);
    let buf: Buffer | null = null;
    client.on("error", () => {});
    client.on("data", (d: Buffer) => {
      buf = buf === null ? d : Buffer.concat([buf, d]);
      for (let n = whole(buf); n >= 0 && buf !== null; n = buf === null ? -1 : whole(buf)) {
        const got: Buffer = buf;
        const end = got.indexOf(CRLF2);
        const head = got.toString("latin1", 0, end);
        const body = got.subarray(end + 4, n);
        const target = head.split(" ")[1] ?? "/";
        buf = n < got.length ? got.subarray(n) : null;
        const i = next++ % targets.length;
        const s = upstream(i, (answer) => client.write(answer));
        s.cork();
        s.write(`POST ${target} HTTP/1.1\r\nhost: ${targets[i]!.host}\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n`);
        s.write(body);
        s.uncork();
      }
    });
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
}

/**
 * net-pass in `workers` processes sharing the port (node:cluster, as `serve
 * --workers` shares it): what a Node relay with no routing state pays for a
 * second process on the same cores. One process is netPass itself.
 */
async function netPassProcesses(port: number, urls: readonly string[], workers: number): Promise<void> {
  if (workers <= 1 || cluster.isWorker) return netPass(port, urls);
  for (let i = 0; i < workers; i++) cluster.fork();
  // A worker that dies ends the peer (the bench then sees it fail), as the gateway's primary would not hide it.
  cluster.on("exit", () => process.exit(1));
  await new Promise<void>((resolve) => {
    let listening = 0;
    cluster.on("listening", () => {
      if (++listening === workers) resolve();
    });
  });
}

// ── Peers ──────────────────────────────────────────────────────────────────

/** A running peer: its URL and the process to measure (its tree). */
interface Peer {
  readonly name: string;
  readonly url: string;
  readonly proc: ChildProcess;
  /** Its processes that serve requests (a `-wN` gateway's workers; else 1). */
  readonly processes: number;
}

/** The allocator settings the gateway's container image sets: gateway/Dockerfile's ENV instructions' MALLOC_* variables (so the two agree). */
function imageEnv(): Record<string, string> {
  // ENV instructions only (continued lines joined), not comments.
  const instructions = readFileSync(path.join(ROOT, "gateway", "Dockerfile"), "utf8").replace(/\\\n/g, " ").split("\n");
  const env: Record<string, string> = {};
  for (const line of instructions) {
    if (!/^ENV\s/.test(line)) continue;
    for (const m of line.matchAll(/\b(MALLOC_[A-Z_]+)=(\S+)/g)) env[m[1]!] = m[2]!;
  }
  if (env.MALLOC_TRIM_THRESHOLD_ === undefined) throw new Error("gateway/Dockerfile's ENV sets no MALLOC_TRIM_THRESHOLD_ for the -image peers");
  return env;
}

/** This process's environment without allocator settings (a peer that is not `-image` runs with glibc's defaults, whatever the shell exported). */
function plainEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of Object.keys(env)) if (name.startsWith("MALLOC_") || name === "GLIBC_TUNABLES") delete env[name];
  return env;
}

/** Starts peer `name` in front of `urls`; resolves once it answers. */
async function startPeer(name: string, urls: readonly string[], dir: string): Promise<Peer> {
  const port = await freePort();
  let proc: ChildProcess;
  const node = (process.env.ADP_BENCH_GATEWAY_NODE_ARGS ?? "").split(" ").filter(Boolean);
  /** A `-wN` gateway's worker count, or null. */
  const workers = /-w(\d+)/.exec(name)?.[1] ?? null;
  if (/^(?:gateway|baseline)(?:-w\d+)?(?:-image)?$/.test(name)) {
    // The gateway's default health checks (every 5 s), as deployed: the first one's new shapes through the upstream
    // client deoptimize the proxy path once, in the warm-up (with checks 60 s apart it fell in the measured trace).
    const yaml = `listen: { host: 127.0.0.1, port: ${port} }\nlogging: { level: warn }\nlimits: { max_in_flight_per_upstream: 4096, queue_size: 8192, max_connections: 16384 }\nupstreams:\n${urls.map((u) => `  - url: ${u}\n`).join("")}`;
    const file = path.join(dir, `gateway-${port}.yaml`);
    writeFileSync(file, yaml);
    const flags = (process.env.ADP_BENCH_GATEWAY_ARGS ?? "").split(" ").filter(Boolean);
    // serve's own default is a worker per core: `gateway` and `baseline` are one process unless the extra flags say, `-w2` two.
    const extra = workers === null ? oneProcess(flags) : [...flags, "--workers", workers];
    const cli = name.startsWith("baseline") ? process.env.ADP_BENCH_BASELINE_CLI : path.join(ROOT, "gateway", "dist", "cli.js");
    if (cli === undefined || !existsSync(cli)) throw new Error("peer baseline needs ADP_BENCH_BASELINE_CLI: another build's gateway/dist/cli.js");
    const env = name.endsWith("-image") ? { ...plainEnv(), ...imageEnv() } : plainEnv();
    // Appended to, each peer's output after a line naming it.
    const stdout = process.env.ADP_BENCH_GATEWAY_STDOUT ? openSync(process.env.ADP_BENCH_GATEWAY_STDOUT, "a") : "ignore";
    if (stdout !== "ignore") writeSync(stdout, `# ${name}\n`);
    proc = spawn(process.execPath, [...node, cli, "serve", "--config", file, ...extra], { stdio: ["ignore", stdout, "inherit"], env });
    if (stdout !== "ignore") closeSync(stdout); // the child has its own copy
  } else if (/^net-pass(?:-w\d+)?$/.test(name)) {
    proc = spawn(process.execPath, [...node, SELF, "net-pass", String(port), JSON.stringify(urls), workers ?? "1"], { stdio: ["ignore", "ignore", "inherit"] });
  } else if (name === "node-pass") {
    proc = spawn(process.execPath, [...node, SELF, "pass", String(port), JSON.stringify(urls)], { stdio: ["ignore", "ignore", "inherit"] });
  } else {
    const balance = name === "haproxy-rr" ? "balance roundrobin" : "balance hash req.body,bytes(0,8192)\n  hash-type consistent";
    const cfg = `global\n  maxconn 9000\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n  option http-keep-alive\nfrontend fe\n  bind 127.0.0.1:${port}\n  option http-buffer-request\n  default_backend be\nbackend be\n  ${balance}\n${urls.map((u, i) => `  server e${i} ${new URL(u).host} maxconn 4096\n`).join("")}`;
    const file = path.join(dir, `${name}-${port}.cfg`);
    writeFileSync(file, cfg);
    proc = spawn("haproxy", ["-f", file], { stdio: ["ignore", "ignore", "inherit"] });
  }
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"model":"m","messages":[{"role":"user","content":"up?"}]}' });
      await r.text();
      if (r.status === 200) return { name, url, proc, processes: Number(workers ?? 1) };
    } catch {
      // not listening yet
    }
    await sleep(50);
  }
  throw new Error(`${name} did not start`);
}

/** A free loopback port. */
function freePort(): Promise<number> {
  const s = createServer();
  return new Promise((resolve) => s.listen(0, "127.0.0.1", () => {
    const port = (s.address() as AddressInfo).port;
    s.close(() => resolve(port));
  }));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The pids of `root` and its descendants, from /proc. */
function tree(root: number): number[] {
  const parent = processParents();
  const out = [root];
  for (let i = 0; i < out.length; i++) for (const [pid, ppid] of parent) if (ppid === out[i]) out.push(pid);
  return out;
}

/** CPU seconds (user + system, every thread) of process `pid` alone now, or its system (kernel) part alone; 0 once it is gone. */
function processCpu(pid: number, part: "all" | "system" = "all"): number {
  const tick = 100; // CLK_TCK on Linux
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return ((part === "all" ? Number(fields[11]) : 0) + Number(fields[12])) / tick;
  } catch {
    return 0; // gone
  }
}

/** CPU seconds (user + system, every thread) of `root`'s process tree now, or the system part alone. */
function cpuSeconds(root: number, part: "all" | "system" = "all"): number {
  return tree(root).reduce((sum, pid) => sum + processCpu(pid, part), 0);
}

/** Resident memory of `root`'s process tree now, MiB: all of it, or (`largest`) its largest process's. */
function rssMiB(root: number, part: "all" | "largest" = "all"): number {
  let kb = 0;
  for (const pid of tree(root)) {
    try {
      const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
      const own = m ? Number(m[1]) : 0;
      kb = part === "all" ? kb + own : Math.max(kb, own);
    } catch {
      // gone
    }
  }
  return kb / 1024;
}

/** A value's quantile. */
const quantile = (xs: readonly number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
};

/** The median of the rounds' values: the middle one, or the mean of the middle two when the rounds are even. */
const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length === 0 ? NaN : s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

// ── Measurements ───────────────────────────────────────────────────────────

/** Sends `calls` to `url` open-loop (each at its `atMs`); their latencies and how many failed. */
async function openLoop(url: string, calls: readonly TraceCall[]): Promise<{ latencies: number[]; failed: number }> {
  const pool = new Pool(url, { connections: 512, pipelining: 1 });
  const latencies: number[] = [];
  let failed = 0;
  const start = performance.now();
  await Promise.all(
    calls.map(async (call) => {
      const wait = call.atMs - (performance.now() - start);
      if (wait > 0) await sleep(wait);
      const t0 = performance.now();
      try {
        const r = await pool.request({ path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" }, body: call.body });
        await r.body.text();
        if (r.statusCode !== 200) failed++;
      } catch {
        failed++;
      }
      latencies.push(performance.now() - t0);
    }),
  );
  await pool.close();
  return { latencies, failed };
}

/**
 * Serves `warmup` through `peer`, unmeasured, in two halves over two client
 * pools, so that the peer has seen its clients' connections close (every
 * measured phase begins with the warm-up's connections closing) and has served
 * thousands of requests since; a peer that fails any of them is broken, and the
 * bench stops.
 */
async function warmUp(peer: Peer, warmup: readonly TraceCall[]): Promise<void> {
  const half = Math.ceil(warmup.length / 2);
  let failed = 0;
  for (const part of [warmup.slice(0, half), warmup.slice(half)]) {
    const t0 = part[0]?.atMs ?? 0;
    failed += (await openLoop(peer.url, part.map((c) => ({ ...c, atMs: c.atMs - t0 })))).failed;
  }
  if (failed > 0) throw new Error(`${peer.name}: ${failed} of ${warmup.length} warm-up requests failed`);
}

/** The trace through `peer` open-loop; its CPU per 1,000, peak RSS, e2e p50, the engines' hit ratio and spread. */
async function traceRun(peer: Peer, calls: readonly TraceCall[], enginesUrl: string) {
  await fetch(`${enginesUrl}/reset`, { method: "POST" }).then((r) => r.text());
  let peakRss = rssMiB(peer.proc.pid!);
  let peakProcess = rssMiB(peer.proc.pid!, "largest");
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, rssMiB(peer.proc.pid!));
    peakProcess = Math.max(peakProcess, rssMiB(peer.proc.pid!, "largest"));
  }, 200);
  const profiler = await startProfiler(peer.proc.pid!);
  const cpu0 = cpuSeconds(peer.proc.pid!);
  const perProcess0 = tree(peer.proc.pid!).map((pid) => [pid, { all: processCpu(pid), system: processCpu(pid, "system") }] as const);
  const { latencies, failed } = await openLoop(peer.url, calls);
  const cpu = cpuSeconds(peer.proc.pid!) - cpu0;
  await stopProfiler(profiler);
  // For profiling: each process's CPU seconds over the trace (the primary's first).
  if (process.env.ADP_BENCH_PEERS_PER_PROCESS) {
    const per = (part: "all" | "system") => perProcess0.map(([pid, s]) => +(processCpu(pid, part) - s[part]).toFixed(3));
    console.log(JSON.stringify({ peer: peer.name, trace_cpu_s_per_process: per("all"), trace_system_s_per_process: per("system") }));
  }
  clearInterval(sampler);
  const stats = (await (await fetch(`${enginesUrl}/stats`)).json()) as { requests: number; hits: number; blocks: number }[];
  const requests = stats.map((s) => s.requests);
  const mean = requests.reduce((a, b) => a + b, 0) / requests.length;
  return {
    cpu_s_per_1000: (cpu / calls.length) * 1000,
    peak_rss_mib: peakRss,
    peak_process_rss_mib: peakProcess,
    e2e_p50_ms: quantile(latencies, 0.5),
    hit_ratio: stats.reduce((t, s) => t + s.hits, 0) / Math.max(1, stats.reduce((t, s) => t + s.blocks, 0)),
    requests_max_over_mean: Math.max(...requests) / Math.max(mean, 1),
    failed,
  };
}

/** ADP_BENCH_PEERS_TRACE_PROFILER's command started on `pid` (after a second for it to attach), or null when unset. */
async function startProfiler(pid: number): Promise<ChildProcess | null> {
  const command = process.env.ADP_BENCH_PEERS_TRACE_PROFILER;
  if (!command) return null;
  const [file, ...args] = command.replaceAll("{pids}", tree(pid).join(",")).replaceAll("{pid}", String(pid)).split(" ").filter(Boolean);
  const child = spawn(file!, args, { stdio: ["ignore", "ignore", "inherit"] });
  const started = await Promise.race([new Promise<Error>((resolve) => child.once("error", resolve)), sleep(1000).then(() => null)]);
  if (started !== null) throw new Error(`ADP_BENCH_PEERS_TRACE_PROFILER did not start: ${started.message}`);
  return child;
}

/** Stops a profiler with SIGINT (perf writes its data then), SIGKILL after 30 s; resolves once it exited. */
async function stopProfiler(child: ChildProcess | null): Promise<void> {
  if (child === null || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGINT");
  const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  await exited;
  clearTimeout(killer);
}

/** Busy CPU seconds of the whole machine now (every core, from /proc/stat: all but idle and iowait). */
function machineCpu(): number {
  const stat = readFileSync("/proc/stat", "utf8");
  const fields = stat.slice(4, stat.indexOf("\n")).trim().split(/\s+/).map(Number);
  return fields.reduce((t, v, i) => (i === 3 || i === 4 ? t : t + v), 0) / 100; // USER_HZ
}

/** The saturated phases' requests: a small chat answered whole, and one streamed (STREAM_TOKENS events), with the connections each is sent on. */
/** A small chat answered whole (one token). */
const SMALL_BODY = '{"model":"bench-model","messages":[{"role":"user","content":"a small question"}],"max_tokens":1}';
const SATURATING = {
  small: { body: SMALL_BODY, connections: WRK_CONNECTIONS, close: false },
  stream: { body: `{"model":"bench-model","messages":[{"role":"user","content":"a small question"}],"max_tokens":${STREAM_TOKENS},"stream":true}`, connections: STREAM_CONNECTIONS, close: false },
  // Each small chat on a connection of its own (Connection: close): what a client without a pool costs.
  close: { body: SMALL_BODY, connections: CLOSE_CONNECTIONS, close: true },
} as const;

/** One saturated window's sums: what `wrk` got through `peer`, and the CPU the engines and the machine spent meanwhile. */
interface Window {
  /** Requests `wrk` completed, and how many of them were not 2xx. */
  readonly requests: number;
  readonly non2xx: number;
  /** CPU seconds of the engines' process, and of the whole machine (busy, every core). */
  readonly enginesCpu: number;
  readonly machineCpu: number;
  /** The peer's resident memory after the window, MiB: its process tree's, and its largest process's. */
  readonly rss: number;
  readonly processRss: number;
}

/** `wrk` saturating `peer` for `seconds` with `kind`'s request, written to `script`. */
function saturatedWindow(peer: Peer, script: string, engines: number, kind: keyof typeof SATURATING, seconds: number): Window {
  const engines0 = cpuSeconds(engines);
  const machine0 = machineCpu();
  const out = spawnSync("wrk", ["-t", "2", "-c", String(SATURATING[kind].connections), "-d", `${seconds}s`, "-s", script, `${peer.url}/v1/chat/completions`], { encoding: "utf8" });
  const enginesCpu = cpuSeconds(engines) - engines0;
  const machine = machineCpu() - machine0;
  const requests = Number(/(\d+) requests in/.exec(out.stdout)?.[1] ?? 0);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out.stdout)?.[1] ?? 0);
  return { requests, non2xx, enginesCpu, machineCpu: machine, rss: rssMiB(peer.proc.pid!), processRss: rssMiB(peer.proc.pid!, "largest") };
}

/**
 * `wrk` saturating each of `peers` with small chats (or streamed ones), in
 * SATURATED_WINDOWS windows a peer taken in turn (the order rotated each
 * time), WRK_SECONDS a peer in all: requests/s and CPU per 1,000, also the
 * engines' and the whole machine's (their sum with the peer's is what
 * requests/s divides two cores by). A VM's speed moves by tens of percent
 * within a minute (the same gateway made 10,300 and 15,100 requests/s in two
 * 5-second runs a minute apart, HAProxy 16,600 and 18,000 between them), so
 * the peers share its moods in short turns rather than each having its own
 * 8 seconds. A peer's CPU is its tree's over all the windows (work it leaves
 * for later, such as a garbage collection, is still its own); the engines'
 * and the machine's are summed over its windows. Also each window's
 * requests/s, for the round's line. Each peer first has SETTLE_WINDOWS
 * unmeasured, as it had WARMUP_REQUESTS before its trace.
 */
function saturatedWindows(peers: readonly Peer[], dir: string, engines: number, kind: keyof typeof SATURATING): Map<string, { figures: Record<string, number>; windows: number[] }> {
  const script = path.join(dir, `${kind}.lua`);
  const close = SATURATING[kind].close ? 'wrk.headers["Connection"] = "close"\n' : "";
  writeFileSync(script, `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n${close}wrk.body = '${SATURATING[kind].body}'\n`);
  const seconds = WRK_SECONDS / SATURATED_WINDOWS;
  // First SETTLE_WINDOWS each, unmeasured: the trace's warm-up did not take these requests' paths through a gateway,
  // nor open and drop hundreds of connections at once as each wrk does (a gateway's first 2-second window made 6,700
  // requests/s against 12,000; in a process's first six 1-second wrk runs V8 compiled 103 functions and deoptimized 36,
  // 7 µs of compiling a request). After five such runs, four 2-second runs cost what one 8-second run costs.
  for (let w = 0; w < SETTLE_WINDOWS; w++) for (const peer of peers) saturatedWindow(peer, script, engines, kind, 1);
  const own0 = peers.map((p) => ({ all: cpuSeconds(p.proc.pid!), system: cpuSeconds(p.proc.pid!, "system"), rss: rssMiB(p.proc.pid!), processRss: rssMiB(p.proc.pid!, "largest") }));
  const windows = peers.map((): Window[] => []);
  for (let w = 0; w < SATURATED_WINDOWS; w++) {
    for (let i = 0; i < peers.length; i++) {
      const at = (i + w) % peers.length;
      windows[at]!.push(saturatedWindow(peers[at]!, script, engines, kind, seconds));
    }
  }
  return new Map(
    peers.map((peer, i) => {
      const cpu = cpuSeconds(peer.proc.pid!) - own0[i]!.all;
      const sys = cpuSeconds(peer.proc.pid!, "system") - own0[i]!.system;
      const sum = (k: keyof Window) => windows[i]!.reduce((t, x) => t + x[k], 0);
      const requests = sum("requests");
      const per1000 = (s: number) => (requests === 0 ? NaN : (s / requests) * 1000);
      const figures: Record<string, number> = {
        requests_per_s: requests / WRK_SECONDS,
        cpu_s_per_1000: per1000(cpu),
        engines_cpu_s_per_1000: per1000(sum("enginesCpu")),
        machine_cpu_s_per_1000: per1000(sum("machineCpu")),
        kernel_share: cpu === 0 ? NaN : sys / cpu,
        rss_mib: Math.max(own0[i]!.rss, ...windows[i]!.map((x) => x.rss)),
        process_rss_mib: Math.max(own0[i]!.processRss, ...windows[i]!.map((x) => x.processRss)),
        non_2xx: sum("non2xx"),
      };
      return [peer.name, { figures, windows: windows[i]!.map((x) => Math.round(x.requests / seconds)) }];
    }),
  );
}

/** p50 latency of LATENCY_REQUESTS small chats one at a time to `url`. */
async function oneAtATime(url: string): Promise<number> {
  const pool = new Pool(url, { connections: 1 });
  const times: number[] = [];
  for (let i = 0; i < LATENCY_REQUESTS; i++) {
    const t0 = performance.now();
    const r = await pool.request({ path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" }, body: SMALL_BODY });
    await r.body.text();
    if (i >= 100) times.push(performance.now() - t0);
  }
  await pool.close();
  return quantile(times, 0.5);
}

// ── Main ───────────────────────────────────────────────────────────────────

async function main(): Promise<void> {
  const missing = ["haproxy", "wrk"].filter((c) => spawnSync("sh", ["-c", `command -v ${c}`]).status !== 0);
  if (missing.length > 0) {
    process.stderr.write(`bench:peers needs ${missing.join(" and ")} (Debian: apt-get install ${missing.join(" ")}); it installs nothing itself.\n`);
    process.exitCode = 2;
    return;
  }
  if (!existsSync(path.join(ROOT, "gateway", "dist", "cli.js"))) throw new Error("build first: npm run build");
  const dir = mkdtempSync(path.join(tmpdir(), "adp-peers-"));
  const enginesProc = spawn(process.execPath, [SELF, "engines"], { stdio: ["ignore", "pipe", "inherit"] });
  const urls = await new Promise<string[]>((resolve) => enginesProc.stdout!.once("data", (d: Buffer) => resolve(JSON.parse(d.toString("utf8")) as string[])));
  const calls = traceCalls(TRACE_REQUESTS);
  const warmup = traceCalls(WARMUP_REQUESTS, 4 * RATE, true);
  /** The warm-up of a peer of `n` processes, made once per count. */
  const warmups = new Map<number, TraceCall[]>([[1, warmup]]);
  const warmupOf = (n: number) => warmups.get(n) ?? warmups.set(n, traceCalls(WARMUP_REQUESTS * n, 4 * RATE, true)).get(n)!;
  const bytes = calls.reduce((t, c) => t + c.body.length, 0) / calls.length;
  const { optimum, pooled } = yardsticks(calls);
  console.log(JSON.stringify({ bench: "peers", engines: ENGINES, engine_cache_blocks: ENGINE_CACHE_BLOCKS, block_bytes: BLOCK_BYTES, trace_requests: calls.length, warmup_requests: warmup.length, mean_body_bytes: Math.round(bytes), rate: RATE, rounds: ROUNDS, optimum_hit_ratio: round(optimum), pooled_lru_hit_ratio: round(pooled) }));
  const direct = await oneAtATime(urls[0]!);
  const results = new Map<string, Record<string, number>[]>();
  try {
    for (let round = 0; round < ROUNDS; round++) {
      // All of a round's peers run at once (idle but for their turn), so that the saturated phases can take turns.
      const peers: Peer[] = [];
      try {
        const rows = new Map<string, Record<string, number>>();
        const windows = new Map<string, Record<string, number[]>>();
        for (const name of PEERS) {
          const peer = await startPeer(name, urls, dir);
          peers.push(peer);
          await warmUp(peer, warmupOf(peer.processes));
          rows.set(name, PHASES.has("trace") ? prefix("trace_", await traceRun(peer, calls, urls[0]!)) : {});
          windows.set(name, {});
        }
        for (const kind of ["small", "stream", "close"] as const) {
          if (!PHASES.has(kind)) continue;
          // net-pass frames by Content-Length only and node-pass copies it: neither relays a chunked stream.
          const taking = kind !== "stream" ? peers : peers.filter((p) => !/^(net|node)-pass/.test(p.name));
          for (const [name, m] of saturatedWindows(taking, dir, enginesProc.pid!, kind)) {
            Object.assign(rows.get(name)!, prefix(`${kind}_`, m.figures));
            windows.get(name)![`${kind}_windows_requests_per_s`] = m.windows;
          }
        }
        for (const peer of peers) {
          const row = rows.get(peer.name)!;
          if (PHASES.has("latency")) row.added_latency_p50_ms = (await oneAtATime(peer.url)) - direct;
          console.log(JSON.stringify({ round, peer: peer.name, ...roundAll(row), ...windows.get(peer.name) }));
          results.set(peer.name, [...(results.get(peer.name) ?? []), row]);
        }
      } finally {
        for (const peer of peers) {
          peer.proc.kill("SIGTERM");
          if (peer.proc.exitCode === null && peer.proc.signalCode === null) await new Promise((r) => peer.proc.once("exit", r));
        }
      }
    }
  } finally {
    enginesProc.kill();
  }
  summary(results, direct);
}

/** The figures compared with HAProxy's, as the issue's targets name them. */
const COMPARED = ["trace_cpu_s_per_1000", "small_cpu_s_per_1000", "small_requests_per_s", "stream_cpu_s_per_1000", "stream_requests_per_s", "close_cpu_s_per_1000", "close_requests_per_s", "trace_peak_rss_mib", "small_rss_mib", "trace_peak_process_rss_mib", "small_process_rss_mib", "trace_hit_ratio"] as const;

/** Medians per peer, then each figure of the others as a ratio to each HAProxy's. */
function summary(results: Map<string, Record<string, number>[]>, direct: number): void {
  const medians = new Map([...results].map(([name, rows]) => [name, Object.fromEntries(Object.keys(rows[0]!).map((k) => [k, median(rows.map((r) => r[k]!))]))]));
  for (const [name, m] of medians) console.log(JSON.stringify({ peer: name, medians: roundAll(m), direct_p50_ms: round(direct, 3) }));
  for (const [name, m] of medians) {
    if (name.startsWith("haproxy")) continue; // node-pass is compared too: what any Node gateway pays
    for (const base of ["haproxy-rr", "haproxy-hash"]) {
      const b = medians.get(base);
      if (b === undefined) continue;
      const ratios = Object.fromEntries(COMPARED.filter((k) => m[k] !== undefined && b[k] !== undefined).map((k) => [k, round(m[k]! / b[k]!, 2)]));
      console.log(JSON.stringify({ peer: name, vs: base, ratios }));
    }
    byRound(results, name);
    // Workers should route as one gateway: their hit ratio against the one process's.
    const single = name.replace(/-w\d+/, "");
    const one = single === name ? undefined : medians.get(single);
    if (one?.trace_hit_ratio !== undefined && m.trace_hit_ratio !== undefined) {
      // The one process's own rounds, against their median: how far noise alone moves the ratio.
      const rounds = results.get(single)!.map((r) => r.trace_hit_ratio! / one.trace_hit_ratio!);
      const noise = { one_process_rounds_min: round(Math.min(...rounds), 3), one_process_rounds_max: round(Math.max(...rounds), 3) };
      console.log(JSON.stringify({ peer: name, vs: single, ratios: { trace_hit_ratio: round(m.trace_hit_ratio / one.trace_hit_ratio, 3) }, noise }));
    }
  }
}

/**
 * Each round's saturated requests/s of `name` against HAProxy round robin's,
 * beside the engines' CPU per 1,000 requests in the two windows: the engines
 * do the same work whichever peer is in front, so where that ratio is far from
 * 1 the machine ran at another speed in one of the windows (a VM's
 * neighbours), and the round's requests/s ratio says as much about that.
 */
function byRound(results: Map<string, Record<string, number>[]>, name: string): void {
  const rows = results.get(name)!;
  const base = results.get("haproxy-rr");
  if (base === undefined) return;
  const ratio = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? undefined : round(a / b, 2));
  const rounds = rows.map((r, i) => {
    const b = base[i];
    if (b === undefined) return {};
    return Object.fromEntries(
      (["small", "stream", "close"] as const).flatMap((phase) => {
        const rps = ratio(r[`${phase}_requests_per_s`], b[`${phase}_requests_per_s`]);
        return rps === undefined ? [] : [[`${phase}_requests_per_s`, rps], [`${phase}_engines_cpu_s_per_1000`, ratio(r[`${phase}_engines_cpu_s_per_1000`], b[`${phase}_engines_cpu_s_per_1000`])]];
      }),
    );
  });
  if (rounds.some((r) => Object.keys(r).length > 0)) console.log(JSON.stringify({ peer: name, vs: "haproxy-rr", by_round: rounds }));
}

const round = (x: number, digits = 3) => Number(x.toFixed(digits));
const roundAll = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, round(v)]));
const prefix = (p: string, o: Record<string, number>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [`${p}${k}`, v]));

if (process.argv[2] === "engines") await engines();
else if (process.argv[2] === "net-pass") await netPassProcesses(Number(process.argv[3]), JSON.parse(process.argv[4]!) as string[], Number(process.argv[5] ?? 1));
else if (process.argv[2] === "pass") await passThrough(Number(process.argv[3]), JSON.parse(process.argv[4]!) as string[]);
else await main();
