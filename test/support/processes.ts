// Helpers the gateway's tests (and bench:peers) share for child processes and
// ports: running the built CLI to its exit (the child tracked for cleanup),
// each process's parent from /proc, a loopback port nothing listens on (free),
// and one where connecting hangs.
import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { connect, createServer, type AddressInfo, type Socket } from "node:net";

/**
 * `serve`'s arguments as a test (or bench:peers) runs them: one process (`--workers 1`) unless
 * they name `--workers`. Its default is a worker per core; the tests of
 * workers (workers.test.ts) say so, and the rest test one gateway.
 */
export const oneProcess = (args: readonly string[]): string[] => (args.some((a) => a === "--workers" || a.startsWith("--workers=")) ? [...args] : ["--workers", "1", ...args]);

/** Runs `node CLI ...args` in `env` to its exit, the child pushed onto `children` (killed by the caller's cleanup; here after `timeoutMs`); `serve` runs as one process unless args name --workers. */
export function runCli(cli: string, args: string[], children: ChildProcess[], timeoutMs = 10_000, env: NodeJS.ProcessEnv = process.env): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cli, ...(args[0] === "serve" ? ["serve", ...oneProcess(args.slice(1))] : args)], { stdio: ["ignore", "pipe", "pipe"], env });
    children.push(child);
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (d) => (stdout += d));
    child.stderr!.on("data", (d) => (stderr += d));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("exit", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/** A started `serve`: its process, the URL it printed, its exit, and its standard error so far. */
export interface StartedServe {
  readonly child: ChildProcess;
  readonly url: string;
  readonly exited: Promise<number | null>;
  readonly stderr: () => string;
}

/**
 * Starts `node CLI serve ...args` in `env` (tracked in `children`; one process
 * unless args name --workers, or `asGiven` runs them exactly so) and resolves
 * once it prints its URL; rejects with its stderr when it exits first.
 */
export function startServe(cli: string, args: string[], children: ChildProcess[], env: NodeJS.ProcessEnv = process.env, asGiven = false): Promise<StartedServe> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, "serve", ...(asGiven ? args : oneProcess(args))], { stdio: ["ignore", "pipe", "pipe"], env });
    children.push(child);
    let stdout = "";
    let stderr = "";
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    child.stderr!.on("data", (d) => (stderr += d));
    child.stdout!.on("data", (d) => {
      stdout += d;
      const line = stdout.split("\n").find((l) => /^http:\/\/\S+$/.test(l));
      if (line) resolve({ child, url: line, exited, stderr: () => stderr });
    });
    void exited.then((code) => reject(new Error(`exited ${code}: ${stderr}`)));
  });
}

/** Each live process's parent pid, by pid, from /proc/PID/stat (Linux; no procps needed). */
export function processParents(): Map<number, number> {
  const parents = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // The command name, in parentheses, may hold spaces: the fields after its last ")" are state, then ppid.
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // gone meanwhile
    }
  }
  return parents;
}

/** A loopback port nothing listens on now (free a moment ago): to listen on, or to be refused at. */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/**
 * A port where connecting hangs: a listener in a stopped child process whose
 * accept queue is full, so the kernel drops further SYNs (Linux). `close`
 * lets go of the filling sockets and kills the child.
 */
export async function blackhole(): Promise<{ port: number; close(): Promise<void> }> {
  const child = spawn(process.execPath, ["-e", 'const s = require("node:net").createServer(); s.listen({ port: 0, host: "127.0.0.1", backlog: 1 }, () => { console.log(s.address().port); process.kill(process.pid, "SIGSTOP"); });'], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise<number>((resolve) => child.stdout!.once("data", (d) => resolve(Number(String(d).trim()))));
  const fill: Socket[] = [];
  const close = async () => {
    for (const s of fill) s.destroy();
    child.kill("SIGKILL");
  };
  await sleep(100); // stopped
  // Fill the accept queue until a connection no longer completes.
  for (let i = 0; i < 16; i++) {
    const s = connect(port, "127.0.0.1");
    s.on("error", () => {});
    fill.push(s);
    const done = await Promise.race([new Promise<boolean>((r) => s.once("connect", () => r(true))), sleep(300).then(() => false)]);
    if (!done) break;
  }
  return { port, close };
}

/** Resolves after `ms`. */
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
