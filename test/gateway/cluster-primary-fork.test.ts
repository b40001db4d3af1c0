// The primary of `serve --workers N` with node:cluster replaced by a recording
// stand-in, for what cannot be provoked on demand otherwise:
//   - a worker that cannot be forked: node emits "error" (spawn EMFILE, no
//     descriptor left) and no "exit" on the Worker. Unheard, that error ended
//     the primary and every worker with it (a connection flood under
//     round_robin took the primary to its descriptor limit as a killed worker
//     was started again);
//   - a reload while a worker starts: it must still reach that worker.
import { EventEmitter } from "node:events";
import { afterEach, describe, expect, it, vi } from "vitest";

/** A worker as the primary sees it: events, a process (no pid: its spawn failed), a channel. */
class FakeWorker extends EventEmitter {
  readonly process: { pid: number | undefined; kill: (signal?: string) => void };
  readonly killed: string[] = [];
  /** The messages sent to it, in order. */
  readonly sent: unknown[] = [];
  constructor(pid: number | undefined) {
    super();
    this.process = { pid, kill: (signal = "SIGTERM") => void this.killed.push(signal) };
  }
  isConnected(): boolean {
    return this.process.pid !== undefined;
  }
  send(message: unknown, _handle: unknown, _options: unknown, done?: (error: Error | null) => void): boolean {
    this.sent.push(message);
    done?.(null);
    return true;
  }
}

const state = vi.hoisted(() => ({ forks: [] as unknown[], failAt: new Set<number>() }));
vi.mock("node:cluster", () => {
  const cluster = {
    SCHED_NONE: 1,
    SCHED_RR: 2,
    schedulingPolicy: 0,
    isWorker: false,
    setupPrimary: () => {},
    fork: () => {
      const n = state.forks.length + 1;
      const w = new FakeWorker(state.failAt.has(n) ? undefined : 1000 + n);
      state.forks.push(w);
      // node reports a failed spawn on the next tick, as an "error" only.
      if (w.process.pid === undefined) process.nextTick(() => w.emit("error", Object.assign(new Error("spawn /usr/bin/node EMFILE"), { code: "EMFILE" })));
      return w;
    },
  };
  return { default: cluster };
});

const { runPrimary } = await import("../../gateway/src/workers/cluster-primary.js");
const { askConfig, ConfigKeeper, isConfigMessage } = await import("../../gateway/src/workers/config-relay.js");

afterEach(() => {
  state.forks.length = 0;
  state.failAt.clear();
  vi.restoreAllMocks();
  for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.removeAllListeners(signal);
});

describe("the primary when a worker cannot be forked", () => {
  it("a worker whose spawn fails at start is a worker that could not start: the others are stopped, exit 1 (the primary lives to say so)", async () => {
    const said: string[] = [];
    vi.spyOn(process.stderr, "write").mockImplementation((text) => (said.push(String(text)), true));
    state.failAt.add(2);
    const status = runPrimary(2);
    await new Promise((r) => setTimeout(r, 20));
    expect(said.join("")).toContain("worker 2 could not be started: spawn /usr/bin/node EMFILE");
    expect(said.join("")).toContain("worker 2 could not start (exit 1): stopping the others");
    // Worker 1 had not said it listens: it is sent SIGTERM, and its exit ends the primary.
    const first = state.forks[0] as FakeWorker;
    expect(first.killed).toEqual(["SIGTERM"]);
    first.emit("exit", 0, null);
    expect(await status).toBe(1);
  });

  it("a restart whose spawn fails is tried again later while the others serve", async () => {
    const said: string[] = [];
    vi.spyOn(process.stderr, "write").mockImplementation((text) => (said.push(String(text)), true));
    vi.spyOn(process.stdout, "write").mockImplementation(() => true);
    state.failAt.add(3);
    const status = runPrimary(2);
    const [one, two] = state.forks as FakeWorker[];
    for (const w of [one!, two!]) w.emit("message", { type: "adp-gateway-listening", url: "http://127.0.0.1:1" });
    // Worker 1 dies; its restart (fork 3, a second after its start) fails to spawn; the next try (fork 4) comes 2 s later.
    one!.emit("exit", null, "SIGKILL");
    expect(said.join("")).toContain("worker 1 exited (SIGKILL): starting it again");
    await new Promise((r) => setTimeout(r, 1_100));
    expect(state.forks).toHaveLength(3);
    expect(said.join("")).toContain("worker 1 could not be started: spawn /usr/bin/node EMFILE");
    expect(said.join("")).toContain("worker 1 could not start again (exit 1): trying again in 2 s");
    await new Promise((r) => setTimeout(r, 2_100));
    expect(state.forks).toHaveLength(4);
    expect((state.forks[3] as FakeWorker).process.pid).toBe(1004);
    // Stopping: every worker is told, and the primary resolves once they exit.
    process.emit("SIGTERM", "SIGTERM");
    for (const w of [two!, state.forks[3] as FakeWorker]) w.emit("exit", 0, null);
    expect(await status).toBe(0);
  }, 10_000);
});

describe("the primary's configuration texts", () => {
  const listening = { type: "adp-gateway-listening", url: "http://127.0.0.1:1" };
  const ask = { type: "adp-gateway-config", op: "ask" };
  /** The reloads a worker was sent, by their text. */
  const reloads = (w: FakeWorker) => w.sent.filter((m) => (m as { action?: string }).action === "reload").map((m) => (m as { text?: string }).text);

  it("a reload while a worker starts reaches it once it listens; one that asks after the reload is given its text, and no reload", async () => {
    vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    vi.spyOn(process.stdout, "write").mockImplementation(() => true);
    let file = "first";
    // The key file a setting names, as the primary read it at start and at the reload (workers take these texts).
    const status = runPrimary(2, "kernel", new ConfigKeeper({ text: "first", files: [["key.txt", "one"]] }, async () => ({ text: file, files: [["key.txt", "two"]] })));
    const [one, two] = state.forks as FakeWorker[];
    for (const w of [one!, two!]) w.emit("message", ask);
    expect(one!.sent).toEqual([{ type: "adp-gateway-config", op: "texts", start: "first", reloaded: null, startFiles: [["key.txt", "one"]], reloadedFiles: [], carried: [] }]);
    one!.emit("message", listening);
    // Worker 2 asked, and has not said it listens when the reload comes: it reads no message yet.
    file = "second";
    process.emit("SIGHUP", "SIGHUP");
    await new Promise((r) => setTimeout(r, 10));
    expect(reloads(one!)).toEqual(["second"]);
    expect(one!.sent.at(-1)).toEqual({ type: "adp-gateway-control", action: "reload", text: "second", files: [["key.txt", "two"]] });
    expect(reloads(two!)).toEqual([]);
    two!.emit("message", listening);
    expect(reloads(two!)).toEqual(["second"]);
    expect(two!.sent.at(-1)).toEqual({ type: "adp-gateway-control", action: "reload", text: "second", files: [["key.txt", "two"]] });
    // Worker 1 dies; its restart asks after the reload: the texts carry it, and listening sends nothing more.
    one!.emit("exit", null, "SIGKILL");
    await new Promise((r) => setTimeout(r, 1_100));
    const three = state.forks[2] as FakeWorker;
    three.emit("message", ask);
    expect(three.sent).toEqual([{ type: "adp-gateway-config", op: "texts", start: "first", reloaded: "second", startFiles: [["key.txt", "one"]], reloadedFiles: [["key.txt", "two"]], carried: [] }]);
    three.emit("message", listening);
    expect(reloads(three)).toEqual([]);
    process.emit("SIGTERM", "SIGTERM");
    for (const w of [two!, three]) w.emit("exit", 0, null);
    expect(await status).toBe(0);
  }, 10_000);

  it("a SIGHUP whose file cannot be taken is said by the primary and sends nothing", async () => {
    const said: string[] = [];
    vi.spyOn(process.stderr, "write").mockImplementation((text) => (said.push(String(text)), true));
    vi.spyOn(process.stdout, "write").mockImplementation(() => true);
    const status = runPrimary(1, "kernel", new ConfigKeeper({ text: "first", files: [] }, async () => {
      throw new Error("upstreams[0].url: has no scheme");
    }));
    const [one] = state.forks as FakeWorker[];
    one!.emit("message", ask);
    one!.emit("message", listening);
    process.emit("SIGHUP", "SIGHUP");
    await new Promise((r) => setTimeout(r, 10));
    expect(said.join("")).toContain("adp-router-gateway serve: SIGHUP: the configuration was not reloaded: upstreams[0].url: has no scheme");
    expect(reloads(one!)).toEqual([]);
    process.emit("SIGTERM", "SIGTERM");
    one!.emit("exit", 0, null);
    expect(await status).toBe(0);
  });

  it("reads reloads one after another, on the port the workers listen on: a slow read's text reaches the workers before a later quick one's", async () => {
    vi.spyOn(process.stderr, "write").mockImplementation(() => true);
    vi.spyOn(process.stdout, "write").mockImplementation(() => true);
    const ports: (number | null)[] = [];
    let reads = 0;
    const status = runPrimary(1, "kernel", new ConfigKeeper({ text: "first", files: [] }, async (port) => {
      ports.push(port);
      // The first read waits (a DNS lookup of an upstream on the gateway's port can take seconds).
      return ++reads === 1 ? new Promise((r) => setTimeout(() => r({ text: "slow", files: [] }), 50)) : { text: "quick", files: [] };
    }));
    const [one] = state.forks as FakeWorker[];
    one!.emit("message", ask);
    one!.emit("message", { type: "adp-gateway-listening", url: "http://127.0.0.1:8123" });
    process.emit("SIGHUP", "SIGHUP");
    process.emit("SIGHUP", "SIGHUP");
    await new Promise((r) => setTimeout(r, 100));
    expect(reloads(one!)).toEqual(["slow", "quick"]);
    expect(ports).toEqual([8123, 8123]);
    process.emit("SIGTERM", "SIGTERM");
    one!.emit("exit", 0, null);
    expect(await status).toBe(0);
  });

  it("a worker takes only a whole answer for its ask, and gives up when none comes in time", async () => {
    const listeners = new Set<(m: unknown) => void>();
    const asked: unknown[] = [];
    const texts = askConfig((m) => asked.push(m), (l) => listeners.add(l), (l) => listeners.delete(l), 1_000);
    expect(asked).toEqual([ask]);
    const files = { startFiles: [], reloadedFiles: [] };
    for (const m of [
      { type: "adp-gateway-config", op: "texts", start: 1, reloaded: null, ...files, carried: [] },
      { type: "adp-gateway-config", op: "texts", start: "a", ...files, carried: [] },
      { type: "adp-gateway-config", op: "texts", start: "a", reloaded: null, ...files },
      { type: "adp-gateway-config", op: "texts", start: "a", reloaded: null, carried: [] },
      { type: "adp-gateway-config", op: "texts", start: "a", reloaded: null, startFiles: [["k"]], reloadedFiles: [], carried: [] },
      { type: "adp-gateway-config", op: "texts", start: "a", reloaded: null, startFiles: [], reloadedFiles: [["k", 1]], carried: [] },
      { type: "adp-gateway-control", action: "reload", text: "b" },
    ]) {
      expect(isConfigMessage(m) && m.op === "texts").toBe(false);
      for (const l of listeners) l(m);
    }
    for (const l of listeners) l({ type: "adp-gateway-config", op: "texts", start: "a", reloaded: "b", startFiles: [["key", "one"]], reloadedFiles: [["key", "two"]], carried: [["http://e", -2]] });
    expect(await texts).toEqual({ start: "a", reloaded: "b", startFiles: [["key", "one"]], reloadedFiles: [["key", "two"]], carried: [["http://e", -2]] });
    expect(listeners.size).toBe(0);
    await expect(askConfig(() => {}, (l) => listeners.add(l), (l) => listeners.delete(l), 50)).rejects.toThrow("the primary did not send the configuration within 0.05 s");
    expect(listeners.size).toBe(0);
  });
});

