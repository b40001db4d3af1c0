// Helpers the gateway's tests share for child processes and ports: running
// the built CLI to its exit (the child tracked for cleanup), and a loopback
// port nothing listens on.
import { spawn, type ChildProcess } from "node:child_process";
import { createServer, type AddressInfo } from "node:net";

/** Runs `node CLI ...args` to its exit, the child pushed onto `children` (killed by the caller's cleanup; here after `timeoutMs`). */
export function runCli(cli: string, args: string[], children: ChildProcess[], timeoutMs = 10_000): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [cli, ...args], { stdio: ["ignore", "pipe", "pipe"] });
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

/** A loopback port nothing listens on (one that was free a moment ago). */
export async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}
