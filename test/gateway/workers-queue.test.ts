// limits.queue_size under `serve --workers 2`, as a user meets it: the built
// CLI on loopback, one slow mock engine, a burst of clients. The queue is the
// gateway's: however the clients' connections fall between the workers, the
// gateway holds queue_size waiting requests and answers the rest 429
// queue_full, as one process would. (Split in shares, a worker holding every
// client answered 429 past its half while its sibling's half sat empty.)
import { readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { oneEngineServeConfig, trackedForCleanup } from "../support/mock-engine.js";
import { processParents, startServe } from "../support/processes.js";

const CLI = path.resolve("gateway/dist/cli.js");
const tracked = trackedForCleanup();

/** One chat on a connection of its own: its status and, for a refusal, its error code. */
function chat(url: string, i: number): Promise<{ status: number; code: string | null }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port: Number(port), method: "POST", path: "/v1/chat/completions", agent: false, headers: { "content-type": "application/json" } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const status = res.statusCode ?? 0;
        const code = status === 200 ? null : ((JSON.parse(Buffer.concat(chunks).toString("utf8")) as { error?: { code?: string } }).error?.code ?? null);
        resolve({ status, code });
      });
    });
    req.on("error", reject);
    req.end(JSON.stringify({ model: "m", messages: [{ role: "user", content: `burst ${i}` }] }));
  });
}

/** A worker's slot (1-based), from the environment its primary started it with. */
const slotOf = (pid: number): number => Number(/(?:^|\0)ADP_GATEWAY_WORKER=(\d+)\0/.exec(readFileSync(`/proc/${pid}/environ`, "latin1"))![1]);

/** Counts of each outcome of `answers` ("200", "429 queue_full", ...). */
const outcomes = (answers: readonly { status: number; code: string | null }[]): Record<string, number> => {
  const counts: Record<string, number> = {};
  for (const a of answers) {
    const key = a.code === null ? String(a.status) : `${a.status} ${a.code}`;
    counts[key] = (counts[key] ?? 0) + 1;
  }
  return counts;
};

/**
 * Sends `n` chats at once while worker `stopped` is stopped (the other accepts
 * them all), and lets it run again once `refusals` have been answered (then
 * all have reached the running worker, if it refuses no sooner than it should)
 * or 3 s have passed; resolves with their answers.
 */
async function burstOnOne(url: string, n: number, stopped: number, refusals: number): Promise<{ status: number; code: string | null }[]> {
  process.kill(stopped, "SIGSTOP");
  try {
    const answers = Array.from({ length: n }, (_, i) => chat(url, i));
    let refused = 0;
    for (const a of answers) void a.then((x) => x.status !== 200 && refused++);
    for (let i = 0; i < 300 && refused < refusals; i++) await new Promise((r) => setTimeout(r, 10));
    process.kill(stopped, "SIGCONT");
    return await Promise.all(answers);
  } finally {
    process.kill(stopped, "SIGCONT");
  }
}

describe("limits.queue_size with --workers 2", () => {
  it("8 chats at once, all on one worker (the other stopped), cap 2, queue_size 4: the worker's units start as many, 4 wait, the rest are refused; then the other way round", async () => {
    const { engine, config } = await oneEngineServeConfig(tracked);
    engine.behaviour.delayMs = 300;
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: warn }\nlimits: { max_in_flight_per_upstream: 2, queue_size: 4, queue_timeout_ms: 20000 }\nupstreams:\n  - url: ${engine.url}\n`);
    const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    const workers = [...processParents()].filter(([, ppid]) => ppid === child.pid).map(([pid]) => pid);
    expect(workers).toHaveLength(2);
    // The units of the cap each worker holds now (they move to where requests wait, and stay), by worker slot.
    const units = async () => {
      const page = await (await fetch(`${url}/metrics`)).text();
      return new Map([...page.matchAll(/^adp_gateway_upstream_in_flight_share\{worker="(\d)",upstream="[^"]*"\} (\d+)$/gm)].map((m) => [Number(m[1]), Number(m[2])]));
    };
    // What waits in the gateway, from /metrics (a worker's page answers for both).
    const queued = async () => {
      const page = await (await fetch(`${url}/metrics`)).text();
      return [...page.matchAll(/^adp_gateway_bound_used\{worker="\d",bound="queued_requests"\} (\d+)$/gm)].reduce((t, m) => t + Number(m[1]), 0);
    };
    for (const stopped of workers) {
      // The units of the cap the running worker holds start as many; the stopped worker cannot lend its own, and
      // units in neither (the primary's) can come; the gateway's 4 queue slots, lent by the primary, hold 4. With
      // the queue split in shares the running worker held 2 past its room and refused the rest.
      const held = await units();
      const room = held.get(slotOf(workers.find((p) => p !== stopped)!))!;
      const free = 2 - room - held.get(slotOf(stopped))!;
      const answers = await burstOnOne(url, 8, stopped, 4 - room - free);
      const started = (outcomes(answers)["200"] ?? 0) - 4;
      expect(started).toBeGreaterThanOrEqual(room);
      expect(started).toBeLessThanOrEqual(room + free);
      expect(outcomes(answers)).toEqual({ "200": 4 + started, "429 queue_full": 4 - started });
    }
    // None waits now (each burst's slots went back: the second burst's worker had all four), and each worker's page
    // gives the gateway's queue_size as the bound.
    expect(await queued()).toBe(0);
    const page = await (await fetch(`${url}/metrics`)).text();
    expect(page.match(/^adp_gateway_bound_limit\{worker="\d",bound="queued_requests"\} 4$/gm)).toHaveLength(2);
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 60_000);

  it("queue_size 0, cap 1, two workers dealt connections in turn: every chat one at a time is served (the worker without the unit borrows it, no queue slot needed)", async () => {
    const { engine, config } = await oneEngineServeConfig(tracked);
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0, connection_balance: round_robin }\nlogging: { level: warn }\nlimits: { max_in_flight_per_upstream: 1, queue_size: 0 }\nupstreams:\n  - url: ${engine.url}\n`);
    const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    const answers = [];
    for (let i = 0; i < 10; i++) answers.push(await chat(url, i));
    expect(outcomes(answers)).toEqual({ "200": 10 });
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);

  for (const [queueSize, taken] of [[4, 6], [0, 2]] as const) it(`12 chats at once, connections dealt to both workers in turn, cap 2, queue_size ${queueSize}: ${taken} taken and the rest refused, as one process answers them`, async () => {
    const { engine, config } = await oneEngineServeConfig(tracked);
    engine.behaviour.delayMs = 500;
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0, connection_balance: round_robin }\nlogging: { level: warn }\nlimits: { max_in_flight_per_upstream: 2, queue_size: ${queueSize}, queue_timeout_ms: 20000 }\nupstreams:\n  - url: ${engine.url}\n`);
    const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    // Each worker starts its unit and sees its sibling's unit unused (their reports are a message late): counted as
    // room in both, the one unit took a request in each (8 of 12 taken with a queue of 4, 4 with none).
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => chat(url, i)));
    expect(outcomes(answers)).toEqual({ "200": taken, "429 queue_full": 12 - taken });
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);
});
