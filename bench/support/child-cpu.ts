// The CPU-time protocol between a bench and the server children it forks: a
// child answers "reset" (start counting), "cpu" (its CPU time since, µs: every
// thread of the process) and "exit"; the bench asks with `cpuOf`.
import type { ChildProcess } from "node:child_process";

/** In a child: answers the bench's "reset", "cpu" and "exit" messages. */
export function answerCpuRequests(): void {
  let since = process.cpuUsage();
  process.on("message", (m) => {
    if (m === "reset") since = process.cpuUsage();
    if (m === "cpu") {
      const d = process.cpuUsage(since);
      process.send!({ cpuUs: d.user + d.system });
    }
    if (m === "exit") process.exit(0);
  });
}

/** In the bench: a child's CPU time since its last reset (µs). */
export function cpuOf(proc: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    proc.once("message", (m) => resolve((m as { cpuUs: number }).cpuUs));
    proc.send("cpu");
  });
}
