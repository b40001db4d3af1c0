// What the gateway's batching window costs in latency: requests that arrive in
// one event-loop turn are routed together, so a request waits for the end of
// the turn it arrived in (one `setImmediate`) before it is placed. This runs
// two gateways side by side in front of the same engines, one batching (the
// default) and one placing each request alone as it arrives (`placement:
// "per-request"`, the same router with no window), and one pass straight to an
// engine; it reports the latency each adds over going direct, one request at a
// time and 16 in flight, in alternating rounds so the machine's drift falls on
// both alike, plus arrival-to-placement time measured inside the gateway.
//
//   node scripts/run-bench.mjs serve-batching            (ROUNDS=8 REQUESTS=1500 by default)

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import { Pool } from "undici";
import { createGateway, type Gateway } from "../gateway/src/index.js";
import { sendChats } from "./support/chat-load.js";

const ROUNDS = Number(process.env.ROUNDS ?? 8);
const REQUESTS = Number(process.env.REQUESTS ?? 1500);
const ENGINES = 4;

const answer = JSON.stringify({ id: "c", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] });

/** A minimal engine: reads the body, answers a small chat completion. */
async function engine(): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(answer) }).end(answer));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** A 4 KB chat body: a shared system prompt and a per-request question. */
const SYSTEM = "You are a helpful assistant that answers carefully and briefly. ".repeat(56);
const body = (i: number) => JSON.stringify({ model: "m", messages: [{ role: "system", content: SYSTEM }, { role: "user", content: `question ${i % 97}` }] });

/** Sends `n` requests through `pool` with `concurrency` in flight; returns each one's latency (ms). */
function load(pool: Pool, n: number, concurrency: number, offset: number): Promise<number[]> {
  return sendChats(pool, n, concurrency, (i) => body(offset + i));
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};
const median = (xs: number[]) => pct(xs, 50);

const engines = await Promise.all(Array.from({ length: ENGINES }, engine));
const silent = pino({ level: "silent" });
const config = { upstreams: engines.map((e) => e.url), listen: { port: 0 }, logging: { level: "silent" as const } };
const gateways: Record<"batched" | "per-request", Gateway> = {
  batched: await createGateway(config, { logger: silent }),
  "per-request": await createGateway(config, { logger: silent, placement: "per-request" }),
};
const pools = {
  direct: new Pool(engines[0]!.url, { connections: 32 }),
  batched: new Pool(gateways.batched.url, { connections: 32 }),
  "per-request": new Pool(gateways["per-request"].url, { connections: 32 }),
};
type Mode = keyof typeof pools;

// Arrival-to-placement inside the gateway: how long a request waits for its batch (one event-loop turn).
const turn: number[] = [];
for (let i = 0; i < 2000; i++) {
  const t0 = performance.now();
  await new Promise<void>((r) => setImmediate(r));
  turn.push((performance.now() - t0) * 1000);
}

console.log(`serve-batching: ${ENGINES} engines in process, ${ROUNDS} rounds of ${REQUESTS} requests per mode (4 KB chat bodies), modes alternating`);
for (const concurrency of [1, 16]) {
  const results: Record<Mode, { p50: number[]; p99: number[] }> = { direct: { p50: [], p99: [] }, batched: { p50: [], p99: [] }, "per-request": { p50: [], p99: [] } };
  for (const mode of Object.keys(pools) as Mode[]) await load(pools[mode], 500, concurrency, 0); // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    const order: Mode[] = round % 2 === 0 ? ["direct", "batched", "per-request"] : ["per-request", "batched", "direct"];
    for (const mode of order) {
      const xs = await load(pools[mode], REQUESTS, concurrency, round * REQUESTS);
      results[mode].p50.push(pct(xs, 50));
      results[mode].p99.push(pct(xs, 99));
    }
  }
  const direct = { p50: median(results.direct.p50), p99: median(results.direct.p99) };
  console.log(`\n${concurrency} in flight (median over rounds; added = over going direct to an engine, p50 ${direct.p50.toFixed(3)} ms, p99 ${direct.p99.toFixed(3)} ms)`);
  for (const mode of ["batched", "per-request"] as const) {
    const p50 = median(results[mode].p50);
    const p99 = median(results[mode].p99);
    console.log(`  ${mode.padEnd(12)} p50 ${p50.toFixed(3)} ms (added ${(p50 - direct.p50).toFixed(3)})  p99 ${p99.toFixed(3)} ms (added ${(p99 - direct.p99).toFixed(3)})`);
  }
  const cost50 = median(results.batched.p50) - median(results["per-request"].p50);
  const cost99 = median(results.batched.p99) - median(results["per-request"].p99);
  console.log(`  batching window cost: p50 ${cost50 >= 0 ? "+" : ""}${(cost50 * 1000).toFixed(0)} µs, p99 ${cost99 >= 0 ? "+" : ""}${(cost99 * 1000).toFixed(0)} µs`);
}
console.log(`\none event-loop turn (setImmediate) on an idle loop: p50 ${pct(turn, 50).toFixed(1)} µs, p99 ${pct(turn, 99).toFixed(1)} µs`);

await Promise.all(Object.values(pools).map((p) => p.close()));
await Promise.all(Object.values(gateways).map((g) => g.close()));
for (const e of engines) e.server.close();
