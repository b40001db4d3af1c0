// limits.max_connections under `serve --workers 2`, as a user meets it: the
// built CLI on loopback, real client connections, a mock engine behind. The
// limit is the gateway's, whichever worker accepts a connection: a worker at
// its share passes the connection on to one with room, and one no worker has
// room for is closed at once (not handed back and forth).
import { readFileSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { oneEngineServeConfig, trackedForCleanup } from "../support/mock-engine.js";
import { startServe } from "../support/processes.js";
import { isOverflowMessage, MAX_PASSING, OVERFLOW_MESSAGE, relayOverflow, type NativeHandle, type OverflowMessage, type OverflowTarget } from "../../gateway/src/workers/connection-overflow.js";

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
      await new Promise((r) => setTimeout(r, 200));
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(summed(metrics, "adp_gateway_client_connections_refused_total")).toBe(6);
      for (const socket of open) socket.destroy();
      child.kill("SIGTERM");
      expect(await exited).toBe(0);
    }, 30_000);
  }

  it("kernel: a burst that one worker accepts is passed on to the other up to its share (counted in passed_total)", async () => {
    const { engine, config } = await oneEngineServeConfig(tracked);
    writeFileSync(config, `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: warn }\nlimits: { max_connections: 8 }\nupstreams:\n  - url: ${engine.url}\n`);
    const { url, child, exited } = await startServe(CLI, ["--config", config, "--workers", "2"], tracked.children);
    const held = await Promise.all(Array.from({ length: 8 }, (_, i) => chatConnection(url, `burst ${i}`)));
    expect(held.map((h) => h.status)).toEqual(held.map(() => "HTTP/1.1 200 OK"));
    for (const h of held.splice(0, 2)) h.socket.destroy();
    await new Promise((r) => setTimeout(r, 200));
    const metrics = await (await fetch(`${url}/metrics`)).text();
    // Each worker holds at most its 4; whatever a worker accepted past that went to the other (none refused).
    expect(summed(metrics, "adp_gateway_client_connections_refused_total")).toBe(0);
    expect(metrics).toMatch(/^adp_gateway_client_connections_passed_total\{worker="1"\} \d+$/m);
    for (const h of held) h.socket.destroy();
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  }, 30_000);
});

describe("the primary's overflow relay", () => {
  /** A worker that records what it was sent; `fails`: its channel is closed. */
  const target = (slot: number, fails = false) => {
    const sent: { message: OverflowMessage; handle: NativeHandle | undefined }[] = [];
    const t: OverflowTarget & { sent: typeof sent } = {
      slot,
      sent,
      send: (message, handle, done) => {
        sent.push({ message, handle });
        done(fails ? new Error("closed") : null);
      },
    };
    return t;
  };
  const handle = () => {
    const h = { closed: 0, readStop: () => 0, close: () => void h.closed++ };
    return h;
  };
  const pass = (tried: number[]): OverflowMessage => ({ type: OVERFLOW_MESSAGE, op: "pass", tried });

  it("offers a connection to the next worker after its sender that has not had it, and closes its own copy once sent", () => {
    const [w1, w2, w3] = [target(1), target(2), target(3)];
    const h = handle();
    relayOverflow(pass([2]), h, w2, [w1, w2, w3]);
    expect(w3.sent).toEqual([{ message: { type: OVERFLOW_MESSAGE, op: "take", tried: [2] }, handle: h }]);
    expect(w1.sent).toEqual([]);
    expect(h.closed).toBe(1);
    // From the last worker, it wraps to the first that has not had it.
    const h2 = handle();
    relayOverflow(pass([1, 3]), h2, w3, [w1, w2, w3]);
    expect(w2.sent.map((s) => s.message.op)).toEqual(["take"]);
  });

  it("with no worker left (all had it) or an offer that cannot be sent, closes it and tells its sender, which counts the refusal", () => {
    const [w1, w2] = [target(1), target(2, true)];
    const h = handle();
    relayOverflow(pass([2, 1]), h, w1, [w1, w2]);
    expect(h.closed).toBe(1);
    expect(w1.sent).toEqual([{ message: { type: OVERFLOW_MESSAGE, op: "refused", tried: [2, 1] }, handle: undefined }]);
    const h2 = handle();
    const w3 = target(3);
    relayOverflow(pass([3]), h2, w3, [w2, w3]);
    expect(w2.sent.map((s) => s.message.op)).toEqual(["take"]);
    expect(h2.closed).toBe(1);
    expect(w3.sent.map((s) => s.message.op)).toEqual(["refused"]);
  });

  it("checks a message whole", () => {
    expect(isOverflowMessage(pass([1]))).toBe(true);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "steal", tried: [] })).toBe(false);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "pass", tried: ["1"] })).toBe(false);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "pass", tried: Array.from({ length: 2000 }, () => 1) })).toBe(false);
    expect(isOverflowMessage({ type: "other", op: "pass", tried: [] })).toBe(false);
    expect(MAX_PASSING).toBeGreaterThan(0);
  });
});
