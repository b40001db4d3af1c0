// The primary of `serve --workers N` when a worker cannot be forked: node
// emits "error" (spawn EMFILE, no descriptor left) and no "exit" on the
// Worker. Unheard, that error ended the primary and every worker with it (a
// connection flood under round_robin took the primary to its descriptor limit
// as a killed worker was started again). node:cluster is replaced here by a
// recording stand-in: the failure cannot be provoked on demand otherwise.
import { EventEmitter } from "node:events";
import { afterEach, describe, expect, it, vi } from "vitest";

/** A worker as the primary sees it: events, a process (no pid: its spawn failed), a channel. */
class FakeWorker extends EventEmitter {
  readonly process: { pid: number | undefined; kill: (signal?: string) => void };
  readonly killed: string[] = [];
  constructor(pid: number | undefined) {
    super();
    this.process = { pid, kill: (signal = "SIGTERM") => void this.killed.push(signal) };
  }
  isConnected(): boolean {
    return this.process.pid !== undefined;
  }
  send(_message: unknown, _handle: unknown, _options: unknown, done?: (error: Error | null) => void): boolean {
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
