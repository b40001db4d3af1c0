// A real nats-server with JetStream on a free loopback port, for the
// replication tests (Debian's package; .ci/run installs it). Without it the
// suites that need it say so loudly and are skipped.

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { connect as connectTcp, createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";

/** Whether a nats-server binary can be run here. */
export const hasNatsServer = spawnSync("nats-server", ["--version"], { stdio: "ignore" }).status === 0;
if (!hasNatsServer) console.warn("SKIPPED: the NATS replication suites need nats-server (Debian's package nats-server; .ci/run installs it)");

/** Servers still running: killed when the test process exits, whatever ended it (a failed close, a timeout). */
const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const p of running) p.kill("SIGKILL");
});

/** A free loopback port. */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Resolves once something accepts connections on `port`. */
async function accepting(port: number, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const c = connectTcp(port, "127.0.0.1", () => (c.destroy(), resolve(true)));
      c.on("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nats-server did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A running nats-server. */
export interface NatsServer {
  readonly url: string;
  readonly port: number;
  /** Stops it (SIGKILL) and starts it again on the same port and store. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** How a test's nats-server runs: JetStream on or off, and configuration text added to its file (authorization, tls). */
export interface NatsServerOptions {
  readonly jetstream?: boolean;
  readonly conf?: string;
}

/** Starts nats-server (with JetStream in a fresh store directory unless told not to) on a free loopback port. */
export async function startNatsServer(options: NatsServerOptions = {}): Promise<NatsServer> {
  const port = await freePort();
  const store = mkdtempSync(path.join(tmpdir(), "adp-nats-"));
  const file = path.join(store, "nats.conf");
  const jetstream = options.jetstream ?? true;
  writeFileSync(file, `host: 127.0.0.1\nport: ${port}\n${jetstream ? `jetstream { store_dir: ${JSON.stringify(path.join(store, "js"))} }\n` : ""}${options.conf ?? ""}\n`);
  let proc: ChildProcess | null = null;
  const run = async () => {
    const p = spawn("nats-server", ["-c", file], { stdio: "ignore" });
    proc = p;
    running.add(p);
    p.once("exit", () => running.delete(p));
    await accepting(port);
  };
  const kill = async () => {
    const p = proc;
    proc = null;
    if (p === null || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGKILL");
    await exited;
  };
  await run();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    async restart() {
      await kill();
      await run();
    },
    stop: kill,
  };
}
