// limits.max_connections under `serve --workers 2`, as a user meets it: the
// built CLI on loopback, real client connections, a mock engine behind. The
// limit is the gateway's, whichever worker accepts a connection: a worker at
// its share passes the connection on to one with room, and one no worker has
// room for is closed at once (not handed back and forth).
import { readFileSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import path from "node:path";
import { Agent, request } from "undici";
import { describe, expect, it } from "vitest";
import { oneEngineServeConfig, trackedForCleanup } from "../support/mock-engine.js";
import { processParents, startServe } from "../support/processes.js";
import { limitsShare, loadGatewayConfig } from "../../gateway/src/config/config.js";

const CLI = path.resolve("gateway/dist/cli.js");
const tracked = trackedForCleanup();

/** A connection to `url` that sent one chat and read its answer, left open; resolves with it and the answer's status line. */
function chatConnection(url: string, content: string): Promise<{ socket: Socket; status: string }> {
  const { hostname, port } = new URL(url);
  const body = JSON.stringify({ model: "m", messages: [{ role: "user", content }] });
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let text = "";
    socket.setEncoding("latin1");
    socket.on("error", reject);
    socket.on("close", () => reject(new Error(`closed before its answer (${JSON.stringify(text.slice(0, 40))})`)));
    socket.on("data", (d: string) => {
      text += d;
      const head = text.indexOf("\r\n\r\n");
      const length = /\r\ncontent-length: (\d+)/i.exec(text);
      if (head >= 0 && length !== null && text.length >= head + 4 + Number(length[1])) {
        socket.removeAllListeners("close");
        socket.removeAllListeners("data");
        resolve({ socket, status: text.slice(0, text.indexOf("\r\n")) });
      }
    });
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
}

/** Opens a connection to `url` and resolves with whether the gateway closed it within `ms` (unanswered: nothing sent). */
function closedWithin(url: string, ms: number): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    socket.on("error", () => {});
    const timer = setTimeout(() => (socket.destroy(), resolve(false)), ms);
    socket.on("close", () => (clearTimeout(timer), resolve(true)));
  });
}

/** CPU ticks (1/100 s) `pid` has used, from /proc. */
const ticks = (pid: number): number => {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return Number(fields[11]) + Number(fields[12]);
};

/** /metrics' text, tried again each 100 ms while the gateway refuses the connection (it may be full a moment); with the tries refused. */
async function scrape(url: string): Promise<{ text: string; refused: number }> {
  for (let refused = 0; ; refused++) {
    try {
      return { text: await (await fetch(`${url}/metrics`)).text(), refused };
    } catch (error) {
      if (refused >= 30) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** The sum over every worker of a /metrics counter (each sample labelled worker="N"). */
const summed = (text: string, name: string): number => [...text.matchAll(new RegExp(`^${name}\\{worker="\\d+"\\} (\\d+)$`, "gm"))].reduce((t, m) => t + Number(m[1]), 0);

describe("limits.max_connections with --workers 2", () => {
  for (const balance of ["kernel", "round_robin"] as const) {
    it(`${balance}: every worker's share serves (4 of max_connections 4 answered), the rest are closed at once, the primary stays idle`, async () => {
      const { engine, config } = await oneEngineServeConfig(tracked);
      writeFileSync(config, `listen: { host: 127.0.0.1, port: 0, connection_balance: ${balance} }\nlogging: { level: warn }\nlimits: { max_connections: 4 }\nupstreams:\n  - url: ${engine.url}\n`);
      const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
      // Four connections one after another: whichever worker accepts each, all four are served.
      const open: Socket[] = [];
      for (let i = 0; i < 4; i++) {
        const { socket, status } = await chatConnection(url, `hello ${i}`);
        expect(status).toBe("HTTP/1.1 200 OK");
        open.push(socket);
      }
      // Past the gateway's limit: closed at once, each, while the four stay served.
      const before = ticks(child.pid!);
      const extra = await Promise.all(Array.from({ length: 6 }, () => closedWithin(url, 3_000)));
      expect(extra).toEqual(extra.map(() => true));
      await new Promise((r) => setTimeout(r, 1_000));
      // No hand-off back and forth: the primary spent well under a fifth of a core over those seconds (it spun at 60% before).
      expect(ticks(child.pid!) - before).toBeLessThan(40);
      for (const socket of open) expect(socket.destroyed).toBe(false);
      open.pop()!.destroy();
      // The six, and any scrape that found the gateway still full while that connection's close was on its way.
      const { text, refused } = await scrape(url);
      expect(summed(text, "adp_gateway_client_connections_refused_total")).toBe(6 + refused);
      // Each worker's page gives the gateway's limit as the bound (it gave its share, 2) and its own connections as
      // the use: the sum of the uses is what the limit holds (the three left open and the scrape's, one closing maybe).
      const bound = (kind: string) => [...text.matchAll(new RegExp(`^adp_gateway_bound_${kind}\\{worker="\\d",bound="client_connections"\\} (\\d+)$`, "gm"))].map((m) => Number(m[1]));
      expect(bound("limit")).toEqual([4, 4]);
      expect(bound("used").reduce((t, n) => t + n, 0)).toBeGreaterThanOrEqual(4);
      expect(bound("used").reduce((t, n) => t + n, 0)).toBeLessThanOrEqual(5);
      for (const socket of open) socket.destroy();
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
    }, 30_000);
  }

  it("kernel: connections one worker accepts past its share are served by the other (passed_total counts them), none refused", async () => {
    const { engine, config } = await oneEngineServeConfig(tracked);
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: warn }\nlimits: { max_connections: 8 }\nupstreams:\n  - url: ${engine.url}\n`);
    const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    // One worker stopped while the eight arrive: the other accepts them all, serves its four and passes four on,
    // which wait for the stopped one (the primary queues them) and are served once it runs again.
    const [stopped] = [...processParents()].filter(([, ppid]) => ppid === child.pid).map(([pid]) => pid);
    process.kill(stopped!, "SIGSTOP");
    const pending = Array.from({ length: 8 }, (_, i) => chatConnection(url, `burst ${i}`));
    await new Promise((r) => setTimeout(r, 500));
    process.kill(stopped!, "SIGCONT");
    const held = await Promise.all(pending);
    expect(held.map((h) => h.status)).toEqual(held.map(() => "HTTP/1.1 200 OK"));
    held.pop()!.socket.destroy();
    const { text, refused } = await scrape(url);
    // The four, and each scrape connection that reached a worker still at its share (one that found both full, while
    // the close was on its way, was refused and tried again).
    const passed = summed(text, "adp_gateway_client_connections_passed_total");
    expect(passed).toBeGreaterThanOrEqual(4);
    expect(passed).toBeLessThanOrEqual(5 + refused);
    expect(summed(text, "adp_gateway_client_connections_refused_total")).toBe(refused);
    for (const h of held) h.socket.destroy();
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);
});

describe("/health with --workers 2", () => {
  it("names the worker that answered (round_robin deals each new connection to the next worker: both answer)", async () => {
    const { engine, config } = await oneEngineServeConfig(tracked);
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0, connection_balance: round_robin }\nlogging: { level: warn }\nupstreams:\n  - url: ${engine.url}\n`);
    const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    const answered: unknown[] = [];
    for (let i = 0; i < 4; i++) {
      // A client of its own each time: a new connection.
      const agent = new Agent();
      const body = (await (await request(`${url}/health`, { dispatcher: agent })).body.json()) as { status: string; worker?: unknown };
      await agent.close();
      expect(body.status).toBe("ok");
      answered.push(body.worker);
    }
    expect(new Set(answered)).toEqual(new Set([1, 2]));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);
});

describe("limits.max_connections with --workers 3", () => {
  it("a connection goes on through full workers to the one with room; one none has room for is refused once", async () => {
    const { engine, config } = await oneEngineServeConfig(tracked);
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: warn }\nlimits: { max_connections: 6 }\nupstreams:\n  - url: ${engine.url}\n`);
    const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "3"], tracked.children);
    // Workers 2 and 3 stopped while six arrive: worker 1 serves two and passes four to worker 2 (next after it), which
    // once running serves two and passes two on to worker 3.
    const [, second, third] = [...processParents()].filter(([, ppid]) => ppid === child.pid).map(([pid]) => pid).sort((a, b) => a - b);
    process.kill(second!, "SIGSTOP");
    process.kill(third!, "SIGSTOP");
    const pending = Array.from({ length: 6 }, (_, i) => chatConnection(url, `three ${i}`));
    await new Promise((r) => setTimeout(r, 400));
    process.kill(second!, "SIGCONT");
    await new Promise((r) => setTimeout(r, 300));
    process.kill(third!, "SIGCONT");
    const held = await Promise.all(pending);
    expect(held.map((h) => h.status)).toEqual(held.map(() => "HTTP/1.1 200 OK"));
    // The seventh: every worker full, closed unanswered.
    expect(await closedWithin(url, 3_000)).toBe(true);
    held.pop()!.socket.destroy();
    const { text, refused } = await scrape(url);
    expect(summed(text, "adp_gateway_client_connections_refused_total")).toBe(1 + refused);
    expect(summed(text, "adp_gateway_client_connections_passed_total")).toBeGreaterThanOrEqual(6);
    for (const h of held) h.socket.destroy();
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);
});

describe("the workers' shares of the gateway's limits", () => {
  it("add up to each limit (the first workers take one more where N does not divide it), at least 1 each", () => {
    const { limits } = loadGatewayConfig({ file: { name: "g.yaml", text: "limits: { max_connections: 4, max_in_flight_per_upstream: 256, queue_size: 1 }\nupstreams:\n  - url: http://127.0.0.1:1\n" } });
    const shares = [1, 2, 3].map((slot) => limitsShare(limits, 3, slot));
    expect(shares.map((s) => s.connectionShare)).toEqual([2, 1, 1]);
    // Kept whole beside the share: it is the bound each worker's /metrics shows (the sum of their use is held to it).
    expect(shares.every((s) => s.maxConnections === 4)).toBe(true);
    expect(shares.map((s) => s.inFlightShare)).toEqual([86, 85, 85]);
    // The router weighs every worker's requests on an upstream against the gateway's cap, kept whole.
    expect(shares.every((s) => s.maxInFlightPerUpstream === 256)).toBe(true);
    // The queue stays whole: the primary lends its slots (workers-queue.test.ts); a share of it let each worker hold
    // one waiting request past a queue_size of 1 (three in all), and one past 0.
    expect(shares.map((s) => s.queueSize)).toEqual([1, 1, 1]);
    expect(limitsShare({ ...limits, queueSize: 0 }, 3, 2).queueSize).toBe(0);
    // The other limits are each worker's whole.
    expect(shares.every((s) => s.maxBodyBytes === limits.maxBodyBytes && s.maxReceivingBytes === limits.maxReceivingBytes)).toBe(true);
  });
});
