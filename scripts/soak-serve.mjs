// Soak of the gateway: many proxied requests (mostly whole answers, some
// streamed, conversations by session header, prompts sharing system prompts)
// through one gateway in front of mock engines on loopback, sampling the
// gateway process's memory, and checking it stays flat after warm-up and that
// every request's load was released.
//
//   npm run soak:serve                          1,000,000 requests
//   node scripts/soak-serve.mjs --requests N
//
// The gateway runs in this process (its memory is what is sampled); the
// engines run in child processes. Prints one JSON line; exits 1 on growth,
// a failed request or a leaked load.
import { fork } from "node:child_process";
import { createServer } from "node:http";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import v8 from "node:v8";
import vm from "node:vm";
import { Pool } from "undici";
import { createGateway, loadGatewayConfig } from "../gateway/dist/index.js";

const SELF = fileURLToPath(import.meta.url);

/** A mock engine child: whole answers, or three SSE chunks when asked to stream. */
async function engine() {
  const answer = JSON.stringify({ id: "x", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] });
  const server = createServer(async (req, res) => {
    let text = "";
    for await (const c of req) text += c;
    if (text.includes('"stream":true')) {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < 3; i++) res.write(`data: {"choices":[{"index":0,"delta":{"content":"${i}"}}]}\n\n`);
      res.end("data: [DONE]\n\n");
    } else res.writeHead(200, { "content-type": "application/json" }).end(answer);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  process.send({ url: `http://127.0.0.1:${server.address().port}` });
}

/** Starts an engine child; resolves with it and its URL. */
function startEngine() {
  return new Promise((resolve, reject) => {
    const proc = fork(SELF, ["--engine"], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    proc.once("message", (m) => resolve({ proc, url: m.url }));
    proc.once("exit", (code) => reject(new Error(`engine exited ${code}`)));
  });
}

/**
 * Runs the soak; returns its figures. `sessions` distinct conversations cycle;
 * one request in `streamEvery` streams; `samples` memory samples are taken.
 */
export async function soakServe({ requests = 1_000_000, engines = 2, concurrency = 32, sessions = 100_000, streamEvery = 10, warmupFraction = 0.3, samples = 20 } = {}) {
  const children = [];
  for (let i = 0; i < engines; i++) children.push(await startEngine());
  const gateway = await createGateway(loadGatewayConfig({ flags: { upstreams: children.map((c) => c.url), port: 0, logLevel: "silent", policy: "kv_cache_aware" } }));
  const systems = Array.from({ length: 8 }, (_, i) => `System prompt number ${i}. `.repeat(30));
  const client = new Pool(gateway.url, { connections: concurrency, keepAliveTimeout: 30_000 });
  const figures = [];
  const sampleEvery = Math.max(1, Math.floor(requests / samples));
  let next = 0;
  let done = 0;
  let failed = 0;
  const started = performance.now();
  const worker = async () => {
    while (next < requests) {
      const i = next++;
      const session = i % sessions;
      const stream = i % streamEvery === 0;
      const body = JSON.stringify({ model: "m", stream, messages: [{ role: "system", content: systems[session % systems.length] }, { role: "user", content: `session ${session} turn ${Math.floor(i / sessions)}` }] });
      const response = await client.request({ path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json", "x-session-id": `s-${session}` }, body });
      await response.body.dump();
      if (response.statusCode !== 200) failed++;
      done++;
      if (done % sampleEvery === 0) {
        // A full collection first: the sample is then what is live, whatever the
        // collector's timing (without it, a run whose last third saw no major GC
        // read as a rising floor).
        collect();
        const m = process.memoryUsage();
        const metrics = gateway.router.metrics();
        figures.push({ done, rss: m.rss, heapUsed: m.heapUsed, indexBytes: metrics.prefixIndex?.bytesInUse ?? 0 });
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (performance.now() - started) / 1000;
  await client.close();
  const text = gateway.metrics();
  const inFlight = [...text.matchAll(/adp_gateway_upstream_in_flight_requests\{upstream="[^"]+"\} (\d+)/g)];
  // One series per engine, or the leak check would pass on a renamed metric.
  if (inFlight.length !== engines) throw new Error(`expected ${engines} in-flight series in /metrics, found ${inFlight.length}`);
  const leaked = inFlight.reduce((a, m) => a + Number(m[1]), 0);
  await gateway.close(5_000);
  for (const c of children) c.proc.kill();
  const warm = figures.find((f) => f.done >= requests * warmupFraction) ?? figures[0];
  const last = figures[figures.length - 1];
  const afterWarm = figures.filter((f) => f.done >= warm.done);
  const peak = (k) => Math.max(...afterWarm.map((f) => f[k]));
  return {
    requests: done,
    failed,
    leaked_in_flight: leaked,
    seconds: Number(seconds.toFixed(1)),
    requests_per_s: Math.round(done / seconds),
    heap_used_mib: { after_warmup: mib(warm.heapUsed), peak: mib(peak("heapUsed")), final: mib(last.heapUsed) },
    rss_mib: { after_warmup: mib(warm.rss), peak: mib(peak("rss")), final: mib(last.rss) },
    index_bytes: { after_warmup: warm.indexBytes, final: last.indexBytes },
    // Flat: the live heap (each sample after a full collection) does not rise from
    // the first third after warm-up to the last; a leak lifts it.
    flat: floor(afterWarm.slice(-Math.ceil(afterWarm.length / 3))) <= floor(afterWarm.slice(0, Math.ceil(afterWarm.length / 3))) * 1.25 + (8 << 20),
  };
}

const mib = (b) => Number((b / 2 ** 20).toFixed(1));
/** A full garbage collection, exposed at run time (the test runner's workers start without --expose-gc). */
const collect = (() => {
  v8.setFlagsFromString("--expose-gc");
  return vm.runInNewContext("gc");
})();
/** The lowest heap of some samples. */
const floor = (figures) => Math.min(...figures.map((f) => f.heapUsed));

if (process.argv[2] === "--engine") await engine();
else if (process.argv[1] === SELF) {
  const { values } = parseArgs({ options: { requests: { type: "string" }, concurrency: { type: "string" } } });
  for (const [name, value] of Object.entries(values)) {
    if (!/^[1-9][0-9]*$/.test(value)) {
      console.error(`soak-serve: --${name} must be a positive integer, got ${JSON.stringify(value)}`);
      process.exit(2);
    }
  }
  const figures = await soakServe({ ...(values.requests ? { requests: Number(values.requests) } : {}), ...(values.concurrency ? { concurrency: Number(values.concurrency) } : {}) });
  console.log(JSON.stringify(figures));
  process.exitCode = figures.flat && figures.failed === 0 && figures.leaked_in_flight === 0 ? 0 : 1;
}
