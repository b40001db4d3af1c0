// Which threads a `serve` process's garbage collector runs on. A gateway's
// young generation is scavenged every few hundred requests; V8 splits each
// scavenge over helper threads by default, which costs more CPU in all (the
// helpers' work-stealing and their waking) to shorten the pause where idle
// cores wait. A gateway shares its machine with its clients and engines, and
// on this project's 2-core bench the helpers bought nothing: under `wrk`,
// small requests cost 0.92-0.98 (median 0.96) of the CPU with the main thread
// scavenging alone, at more requests/s and pauses as short (1.0-1.2 against
// 1.1-1.3 ms on average), docs/performance.md. V8 reads `parallel_scavenge`
// at each scavenge, so a running process can turn it off; the rest of
// `--single-threaded-gc` (marking, compaction, sweeping: rare here) it takes
// only at start, which `--workers`' workers get (workers/cluster-primary.ts).

import { setFlagsFromString } from "node:v8";
import { operatorFlag } from "./heap-growth.js";

/** A V8 flag that sets how the garbage collector uses threads (an operator's choice, kept). */
const GC_THREADS_FLAG = /^--?(?:no[-_]?)?(?:single[-_]threaded(?:[-_]gc)?|parallel[-_](?:scavenge|marking|compaction|pointer[-_]update)|concurrent[-_](?:marking|sweeping))(?:=|$)/;

/** Whether node's command line (`execArgv`) or NODE_OPTIONS says how the collector uses threads: the operator's choice. */
export const collectorThreadsChosen = (execArgv: readonly string[], nodeOptions = ""): boolean => operatorFlag(GC_THREADS_FLAG, execArgv, nodeOptions) !== null;

/**
 * Scavenges this process's young generation on its main thread alone unless
 * node's command line (`execArgv`) or NODE_OPTIONS already says how the
 * collector uses threads; returns whether it set that (false: the operator's
 * choice kept). `setFlags` is V8's, injectable for tests.
 */
export function scavengeOnMainThread(execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? "", setFlags: (flags: string) => void = setFlagsFromString): boolean {
  if (collectorThreadsChosen(execArgv, nodeOptions)) return false;
  setFlags("--no-parallel-scavenge");
  return true;
}
