// How many cores a `serve` process may use: the CPUs its affinity mask allows
// (os.availableParallelism), fewer where its cgroup's CPU quota allows less (a
// container limited to 2 CPUs on a 64-core host may use 2, not 64). A quota of
// 1.5 CPUs is 2 cores, as Go (GOMAXPROCS since 1.25) and the JVM round it.
// `serve --workers auto` (its default) starts a worker for each, at most
// MAX_AUTO_WORKERS, and each process's tokenizer threads default to its share
// (coreShare): workers beyond the cores only wait for them, and each costs a
// whole gateway's memory and every sibling's index work.
//
// The quota is cgroup v2's `cpu.max` ("max 100000", or "QUOTA PERIOD" in
// microseconds) or v1's `cpu.cfs_quota_us` over `cpu.cfs_period_us` (-1: none),
// taken at each level from the process's own cgroup up to the root (a parent's
// quota bounds its children; the smallest wins). A container usually sees its
// own cgroup as the root, which the walk reaches too. Anything unreadable or
// malformed is no quota: the affinity mask alone then decides.

import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";

/** Reads a small kernel file's text, or null when it cannot be read (injectable for tests). */
export type ReadText = (path: string) => string | null;

/** Where cgroup v2's unified hierarchy and v1's cpu controller are mounted (v1's under either name). */
const V2_ROOT = "/sys/fs/cgroup";
const V1_ROOTS = ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"] as const;
/** Most levels of a cgroup path walked (a real hierarchy has a handful). */
const MAX_LEVELS = 64;
/** Longest kernel file read, bytes (these hold one short line; /proc/self/cgroup a line per controller). */
const MAX_TEXT = 64 * 1024;

/** A kernel file's text, or null (missing, unreadable, or implausibly long). */
const readKernelFile: ReadText = (path) => {
  try {
    const text = readFileSync(path, "utf8");
    return text.length > MAX_TEXT ? null : text;
  } catch {
    return null;
  }
};

/** `path` and each of its parents up to "/" (at most MAX_LEVELS), as cgroup paths ("" for the root). */
function levels(path: string): string[] {
  const parts = path.split("/").filter((p) => p !== "" && p !== "." && p !== "..");
  const out: string[] = [];
  for (let n = Math.min(parts.length, MAX_LEVELS); n >= 0; n--) out.push(n === 0 ? "" : `/${parts.slice(0, n).join("/")}`);
  return out;
}

/** CPUs a cgroup v2 `cpu.max` allows ("QUOTA PERIOD"), or null for "max" or anything malformed. */
export function cpuMaxCores(text: string): number | null {
  const m = /^(\d{1,15}) (\d{1,15})\s*$/.exec(text.trim());
  if (m === null) return null;
  const quota = Number(m[1]);
  const period = Number(m[2]);
  return quota > 0 && period > 0 ? quota / period : null;
}

/** CPUs a cgroup v1 quota and period allow, or null for -1 (no quota) or anything malformed. */
export function cfsCores(quotaText: string, periodText: string): number | null {
  const quota = Number(quotaText.trim());
  const period = Number(periodText.trim());
  return Number.isSafeInteger(quota) && Number.isSafeInteger(period) && quota > 0 && period > 0 ? quota / period : null;
}

/** The smallest CPU quota on this process's cgroup path (v2, else v1), in CPUs, or null when none is set or none can be read. */
export function cgroupQuota(read: ReadText = readKernelFile): number | null {
  const own = read("/proc/self/cgroup");
  if (own === null) return null;
  let least: number | null = null;
  const take = (cores: number | null) => {
    if (cores !== null && (least === null || cores < least)) least = cores;
  };
  for (const line of own.split("\n")) {
    // "hierarchy-ID:controllers:path"; the path may itself hold colons.
    const [id, controllers, ...rest] = line.split(":");
    const path = rest.join(":");
    if (id === undefined || controllers === undefined || rest.length === 0) continue;
    if (id === "0" && controllers === "") {
      for (const level of levels(path)) {
        const text = read(`${V2_ROOT}${level}/cpu.max`);
        if (text !== null) take(cpuMaxCores(text));
      }
    } else if (controllers.split(",").includes("cpu")) {
      for (const root of V1_ROOTS) {
        for (const level of levels(path)) {
          const quota = read(`${root}${level}/cpu.cfs_quota_us`);
          const period = quota === null ? null : read(`${root}${level}/cpu.cfs_period_us`);
          if (quota !== null && period !== null) take(cfsCores(quota, period));
        }
      }
    }
  }
  return least;
}

/** The cores this process may use: the CPUs it may run on, within its cgroup's quota (rounded up), at least 1. */
export function usableCores(parallelism: number = availableParallelism(), quota: number | null = cgroupQuota()): number {
  const cpus = Math.max(1, Math.floor(parallelism));
  return quota === null ? cpus : Math.max(1, Math.min(cpus, Math.ceil(quota)));
}

/**
 * Most workers `--workers auto` starts, whatever the cores: each worker learns
 * every sibling's prompts into its own index and links to each (work and
 * sockets that grow with the count), and 8 take well over 100,000 small
 * requests/s. An explicit `--workers N` may ask for more.
 */
export const MAX_AUTO_WORKERS = 8;

/** The workers `--workers auto` starts for `cores` usable cores. */
export const autoWorkers = (cores: number = usableCores()): number => Math.min(cores, MAX_AUTO_WORKERS);

/** The environment variable a worker of `serve --workers N` finds N in (set by its primary). */
export const WORKERS_ENV = "ADP_GATEWAY_WORKERS";

/** This process's share of the usable cores: all of them, or 1/N in a worker of N (at least 1). */
export function coreShare(cores: number = usableCores(), env: NodeJS.ProcessEnv = process.env): number {
  const n = Number(env[WORKERS_ENV] ?? 1);
  return Number.isSafeInteger(n) && n > 1 ? Math.max(1, Math.floor(cores / n)) : cores;
}
