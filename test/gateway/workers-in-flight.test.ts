// limits.max_in_flight_per_upstream under `serve --workers 2`, as a user meets
// it: the built CLI on loopback, keep-alive clients, one slow mock engine. The
// cap is the gateway's: with at least as many clients as it, the engine has
// the cap's requests in flight, as behind one process, and never more, however
// the clients' connections fall between the workers. The router weighs the
// upstream's load from both workers against the whole cap (one that weighed it
// against a worker's share kept the engine near half the cap), and a worker
// borrows the units of the cap its sibling leaves unused (one that could not
// kept the engine at its share when it held every client), and those of a
// sibling that is down.
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { Agent, createServer, request } from "node:http";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { type MockEngine, oneEngineServeConfig, trackedForCleanup } from "../support/mock-engine.js";
import { processParents, startServe } from "../support/processes.js";

const CLI = path.resolve("gateway/dist/cli.js");
const tracked = trackedForCleanup();

/** Sends `count` chats one after another on one keep-alive connection to `url` (their text names `tag`); resolves with their statuses. */
async function client(url: string, count: number, tag = "c"): Promise<number[]> {
  const { hostname, port } = new URL(url);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const statuses: number[] = [];
  for (let i = 0; i < count; i++) {
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: `${tag} turn ${i}` }] });
    statuses.push(
      await new Promise<number>((resolve, reject) => {
        const req = request({ host: hostname, port: Number(port), method: "POST", path: "/v1/chat/completions", agent, headers: { "content-type": "application/json" } }, (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        });
        req.on("error", reject);
        req.end(body);
      }),
    );
  }
  agent.destroy();
  return statuses;
}

/**
 * Waits for `clients` to end, every answer a 200, sampling the engine's
 * requests in flight every 5 ms from `settleMs` on; resolves with the samples.
 */
async function inFlightWhile(engine: MockEngine, clients: readonly Promise<number[]>[], settleMs = 0): Promise<number[]> {
  const samples: number[] = [];
  let sampling = settleMs === 0;
  const sampler = setInterval(() => sampling && samples.push(engine.active), 5);
  const settle = setTimeout(() => (sampling = true), settleMs);
  try {
    const statuses = (await Promise.all(clients)).flat();
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
  } finally {
    clearInterval(sampler);
    clearTimeout(settle);
  }
  return samples;
}

/** The middle of `values` (sorted copies). */
const median = (values: readonly number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/**
 * Starts `serve --workers N` (`workers`; `args`: more of its flags) in front of
 * one mock engine answering after `delayMs`, its configuration capping each
 * upstream at `cap` in flight, with `more` configuration lines (`balance`: the
 * listen socket's connection balance).
 */
async function startCapped(o: { cap: number; workers: number; delayMs: number; balance?: "round_robin"; more?: string; args?: readonly string[] }) {
  const { engine, config } = await oneEngineServeConfig(tracked);
  engine.behaviour.delayMs = o.delayMs;
  const balance = o.balance === undefined ? "" : `, connection_balance: ${o.balance}`;
  writeFileSync(config, `listen: { host: 127.0.0.1, port: 0${balance} }\nlogging: { level: warn }\n${o.more ?? ""}limits: { max_in_flight_per_upstream: ${o.cap} }\nupstreams:\n  - url: ${engine.url}\n`);
  return { engine, ...(await startServe(CLI, ["--config", config, "--workers", String(o.workers), ...(o.args ?? [])], tracked.children)) };
}

/** The samples taken while every client still waited (the last requests drain below the cap), at least 21 of them. */
function steadyOf(samples: readonly number[]): number[] {
  const steady = samples.slice(0, Math.floor(samples.length * 0.7));
  expect(steady.length).toBeGreaterThan(20);
  return steady;
}

describe("limits.max_in_flight_per_upstream with --workers 2", () => {
  it("16 clients, cap 8: the engine has 8 requests in flight most of the time, as behind one process, and never 9", async () => {
    // round_robin: the primary deals the 16 connections out 8 and 8, so each worker has clients for its share.
    const { engine, url, child, exited } = await startCapped({ cap: 8, workers: 2, delayMs: 150, balance: "round_robin" });
    // Sampled once each worker has heard the other's load (its messages go at least every 50 ms).
    const samples = await inFlightWhile(engine, Array.from({ length: 16 }, () => client(url, 8)), 400);
    const steady = steadyOf(samples);
    expect(Math.max(...samples)).toBeLessThanOrEqual(8);
    expect(median(steady)).toBeGreaterThanOrEqual(7);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);

  it("3 workers, cap 1, 6 clients dealt round robin: the unit goes round the workers, whichever holds it", async () => {
    // Worker 1 starts with the one unit. Keeping it for its own backlog, it served its two clients' requests first
    // while the other workers' four clients waited; the unit goes to the worker that has waited longest instead.
    // (Which of a worker's waiting requests starts is the router's choice, as in one process.)
    const { engine, url, child, exited } = await startCapped({ cap: 1, workers: 3, delayMs: 100, balance: "round_robin" });
    // Connected in turn, client c's connection goes to worker c mod 3 + 1 (the primary deals them round robin).
    const samples = await inFlightWhile(engine, Array.from({ length: 6 }, (_, c) => client(url, 10, `client-${c}`)));
    expect(Math.max(...samples)).toBe(1);
    // The first 24 requests the engine served (of 60), by worker: each worker's clients at least 6 times.
    const first = engine.received.filter((r) => r.path === "/v1/chat/completions").slice(0, 24).map((r) => Number(/client-(\d)/.exec(r.raw)![1]) % 3);
    expect([0, 1, 2].map((k) => first.filter((x) => x === k).length >= 6)).toEqual([true, true, true]);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);

  it("3 workers, cap 2, 6 clients dealt round robin: the engine has 2 in flight, never 3 (a worker may start with no unit)", async () => {
    const { engine, url, child, exited } = await startCapped({ cap: 2, workers: 3, delayMs: 100, balance: "round_robin" });
    const samples = await inFlightWhile(engine, Array.from({ length: 6 }, () => client(url, 5)));
    expect(Math.max(...samples)).toBe(2);
    expect(median(samples.slice(20, Math.floor(samples.length * 0.7)))).toBe(2);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);

  for (const policy of ["kv_cache_aware", "centralized"]) it(`${policy}: 8 clients all on one worker, cap 8: it borrows its sibling's units and the engine has 8 in flight, never 9`, async () => {
    const { engine, url, child, exited } = await startCapped({ cap: 8, workers: 2, delayMs: 150, more: `policy: ${policy}\n` });
    // One worker stopped while the eight connect and send their first chats: the other accepts them all, starts its
    // share (4) and asks for more; the stopped one gives its 4 back once it runs again.
    const [stopped] = [...processParents()].filter(([, ppid]) => ppid === child.pid).map(([pid]) => pid);
    process.kill(stopped!, "SIGSTOP");
    const clients = Array.from({ length: 8 }, () => client(url, 8));
    await new Promise((r) => setTimeout(r, 300));
    process.kill(stopped!, "SIGCONT");
    const samples = await inFlightWhile(engine, clients, 300);
    const steady = steadyOf(samples);
    expect(Math.max(...samples)).toBeLessThanOrEqual(8);
    expect(median(steady)).toBeGreaterThanOrEqual(7);
    // Each worker's units on /metrics: the one with the clients holds what it borrowed, and no more than the cap is held.
    const page = await (await fetch(`${url}/metrics`)).text();
    const shares = [...page.matchAll(/^adp_gateway_upstream_in_flight_share\{worker="(\d)",upstream="[^"]*"\} (\d+)$/gm)].map((m) => Number(m[2]));
    expect(shares).toHaveLength(2);
    expect(Math.max(...shares)).toBeGreaterThan(4);
    expect(shares[0]! + shares[1]!).toBeLessThanOrEqual(8);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);

  it("kill -9 of a worker under load, behind an engine that finishes what it started (cap 2): the engine never has more than 2 in flight", async () => {
    // An engine that ignores its clients' hang-ups: a request counts from its arrival to its answer 1 s later.
    let inFlight = 0;
    let most = 0;
    const engine = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        if (req.url === "/health" || req.method === "GET") return void res.writeHead(200, { "content-type": "application/json" }).end('{"object":"list","data":[{"id":"m","object":"model"}]}');
        inFlight++;
        most = Math.max(most, inFlight);
        setTimeout(() => {
          inFlight--;
          res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
        }, 1_000);
      });
    });
    await new Promise<void>((r) => engine.listen(0, "127.0.0.1", r));
    tracked.engines.push({ close: () => new Promise<void>((r) => (engine.closeAllConnections(), engine.close(() => r()))) } as unknown as MockEngine);
    const { dir } = await oneEngineServeConfig(tracked);
    const config = path.join(dir, "killed.yaml");
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0, connection_balance: round_robin }\nlogging: { level: warn }\nlimits: { max_in_flight_per_upstream: 2, queue_timeout_ms: 20000 }\nupstreams:\n  - url: http://127.0.0.1:${(engine.address() as { port: number }).port}\n`);
    const { url, child, exited, stderr } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    // Six clients dealt in turn (three a worker), two requests each; one worker is killed 300 ms in, its request
    // still running at the engine: its units are lent (or taken by its restart) only once that can have ended.
    const clients = Array.from({ length: 6 }, (_, c) => client(url, 2, `k${c}`).catch(() => []));
    await new Promise((r) => setTimeout(r, 300));
    const [victim] = [...processParents()].filter(([, ppid]) => ppid === child.pid).map(([pid]) => pid);
    process.kill(victim!, "SIGKILL");
    await Promise.all(clients);
    for (let i = 0; i < 50 && !stderr().includes("exited (SIGKILL)"); i++) await new Promise((r) => setTimeout(r, 100));
    expect(most).toBe(2);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);

  it("a worker down for as long as its restarts fail leaves all its units, its own share too, to the other: the engine keeps the cap in flight", async () => {
    // Its restarts fail because the tokenizer folder it loads at start is gone since.
    const tokenizer = path.join(mkdtempSync(path.join(tmpdir(), "adp-tokenizer-")), "qwen2.5");
    cpSync(path.resolve("test/fixtures/tokenizers/qwen2.5"), tokenizer, { recursive: true });
    const { engine, url, child, exited, stderr } = await startCapped({ cap: 4, workers: 2, delayMs: 150, args: ["--tokenizer", tokenizer] });
    rmSync(tokenizer, { recursive: true });
    const [victim] = [...processParents()].filter(([, ppid]) => ppid === child.pid).map(([pid]) => pid);
    process.kill(victim!, "SIGKILL");
    for (let i = 0; i < 60 && !stderr().includes("could not start again"); i++) await new Promise((r) => setTimeout(r, 100));
    expect(stderr()).toMatch(/worker [12] could not start again \(exit 2\): trying again in 2 s/);
    // Eight clients, all on the worker that runs: it starts its 2, and the down worker's 2 from the reserve.
    const samples = await inFlightWhile(engine, Array.from({ length: 8 }, () => client(url, 5)), 200);
    const steady = steadyOf(samples);
    expect(Math.max(...samples)).toBeLessThanOrEqual(4);
    expect(median(steady)).toBe(4);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);
});
