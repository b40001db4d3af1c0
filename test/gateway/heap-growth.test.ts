// How far a `serve` process lets V8's heap grow (heap-growth.ts) and which
// threads scavenge it (collector-threads.ts): V8's own trace of the limit it
// sets at a full collection shows the old generation's factor in force, a
// burst of surviving allocations in the serve process how far its young
// generation grows, and V8's scavenge traces how many threads took part, in a
// real serve process and with an operator's flags that win.
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import path, { join } from "node:path";
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { capYoungGeneration, HEAP_GROWING_PERCENT, SEMI_SPACE_CAP_MIB, semiSpaceGrowth, setHeapGrowth } from "../../gateway/src/common/heap-growth.js";
import { scavengeOnMainThread } from "../../gateway/src/common/collector-threads.js";
import { oneEngineServeConfig, trackedForCleanup } from "../support/mock-engine.js";

const GATEWAY_CLI = path.resolve("gateway/dist/cli.js");

const tracked = trackedForCleanup();

/**
 * Starts `serve` in front of a mock engine with node flags `nodeFlags`, `env`
 * added to its environment and a preload `onSignal` script that runs on
 * SIGUSR2, which the serve process gets once it listens; resolves with the
 * first match of `pattern` in what it prints after that.
 */
async function serveUntil(nodeFlags: string[], onSignal: string, pattern: RegExp, env: NodeJS.ProcessEnv = {}): Promise<RegExpExecArray> {
  const { dir, config } = await oneEngineServeConfig(tracked);
  const preload = join(dir, "preload.cjs");
  writeFileSync(preload, `process.on("SIGUSR2", ${onSignal});`);
  const child = spawn(process.execPath, [...nodeFlags, "--require", preload, GATEWAY_CLI, "serve", "--workers", "1", "--config", config], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  tracked.children.push(child);
  let stdout = "";
  let listening = -1;
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => reject(new Error(`serve exited ${code} before printing ${pattern}`)));
    child.stdout!.on("data", (d) => {
      stdout += d;
      if (listening < 0 && /^http:\/\/\S+$/m.test(stdout)) {
        listening = stdout.length;
        child.kill("SIGUSR2");
      }
      const match = listening < 0 ? null : pattern.exec(stdout.slice(listening));
      if (match) resolve(match);
    });
  });
}

/** The growing factor of the limit V8 sets at a full collection of a serve process run with node flags `nodeFlags`. */
async function factorAfterFullCollection(nodeFlags: string[]): Promise<number> {
  // V8 prints "[HeapController] Limit: old size: N KB, new limit: M KB (factor)" at each full collection.
  const limit = await serveUntil(["--expose-gc", "--trace-gc-verbose", ...nodeFlags], "() => globalThis.gc()", /\[HeapController\] Limit: [^\n]*\((\d+\.\d)\)\n/);
  return Number(limit[1]);
}

/**
 * A serve process's SIGUSR2 handler that keeps 100,000-200,000 small objects
 * alive over 3 million allocations, yielding to the event loop every 10,000
 * (as requests do): `setup` runs first, `eachTurn` after each 10,000, `end`
 * once all are made.
 */
const churn = (setup: string, eachTurn: string, end: string) => `async () => {
  ${setup}
  let keep = [];
  for (let k = 0; k < 300; k++) {
    for (let i = 0; i < 10000; i++) { keep.push({ a: i, b: [i] }); if (keep.length > 200000) keep = keep.slice(100000); }
    ${eachTurn}
    await new Promise((r) => setImmediate(r));
  }
  ${end}
}`;

/** The most a serve process's young generation commits (both semi-spaces, MiB) over {@link churn}. */
async function youngGenerationPeak(nodeFlags: string[], env: NodeJS.ProcessEnv = {}): Promise<number> {
  const young = churn(
    'const v8 = require("v8"); const young = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === "new_space").space_size; let peak = 0;',
    "peak = Math.max(peak, young());",
    'process.stdout.write("young-peak " + peak / 1048576 + "\\n");',
  );
  const peak = await serveUntil(nodeFlags, young, /^young-peak (\d+(?:\.\d+)?)$/m, env);
  return Number(peak[1]);
}

describe("the old generation's growing factor of a serve process", () => {
  it(`is 1 + ${HEAP_GROWING_PERCENT}/100 in a serve process`, async () => {
    expect(await factorAfterFullCollection([])).toBe(1 + HEAP_GROWING_PERCENT / 100);
  });

  it("is the operator's where node's command line sets one", async () => {
    expect(await factorAfterFullCollection(["--heap-growing-percent=50"])).toBe(1.5);
  });

  it("reads an operator's flag in V8's spellings, and 0 as V8's own factor", () => {
    expect(setHeapGrowth(["--heap-growing-percent=50"])).toBe(50);
    expect(setHeapGrowth(["--heap_growing_percent=75", "--other"])).toBe(75);
    expect(setHeapGrowth(["-heap-growing-percent=60"])).toBe(60);
    expect(setHeapGrowth(["--heap-growing-percent=0"])).toBeNull();
    expect(setHeapGrowth(["--heap-growing-percent=10", "--heap-growing-percent=20"])).toBe(20);
  });
});

describe("the young generation of a serve process", () => {
  const capMiB = SEMI_SPACE_CAP_MIB;

  it(`grows no further than ${SEMI_SPACE_CAP_MIB} MiB semi-spaces`, async () => {
    // Both semi-spaces committed at most; less on a machine whose V8 allows less on its own (under 4 GiB).
    expect(await youngGenerationPeak([], { NODE_OPTIONS: "" })).toBeLessThanOrEqual(2 * capMiB);
  });

  it("grows as the operator's --max-semi-space-size says, on node's command line or in NODE_OPTIONS (quoted too)", async () => {
    // The same churn takes a young generation allowed 32 MiB semi-spaces past the cap.
    expect(await youngGenerationPeak(["--max-semi-space-size=32"], { NODE_OPTIONS: "" })).toBeGreaterThan(2 * capMiB);
    expect(await youngGenerationPeak([], { NODE_OPTIONS: "--max-semi-space-size=32" })).toBeGreaterThan(2 * capMiB);
    expect(await youngGenerationPeak([], { NODE_OPTIONS: '"--max-semi-space-size=32"' })).toBeGreaterThan(2 * capMiB);
  });

  it("keeps an operator's semi-space flags in V8's spellings", () => {
    for (const flag of ["--max-semi-space-size=4", "--max_semi_space_size=4", "-max-semi-space-size=4", "--semi-space-growth-factor=2", "--min-semi-space-size=2"]) {
      expect(capYoungGeneration([flag], "")).toBeNull();
    }
    // NODE_OPTIONS takes --max-semi-space-size alone of them (Node refuses the others there).
    expect(capYoungGeneration([], "--expose-gc --max-semi-space-size=4")).toBeNull();
    expect(capYoungGeneration([], "'--max-semi-space-size=4'")).toBeNull();
    const watch = capYoungGeneration(["--max-old-space-size=512"], "--max-old-space-size=512");
    expect(watch).not.toBeNull();
    watch!.close();
  });

  it("doubles while that stays within the cap, from any size the young generation shrank to", () => {
    const MiB = 1024 * 1024;
    const cap = capMiB * MiB;
    // V8's semi-spaces hold a little less than their size (page headers): 1 MiB holds 0.98.
    expect(semiSpaceGrowth(0.98 * MiB, cap)).toBe(2);
    expect(semiSpaceGrowth(0.98 * 4 * MiB, cap)).toBe(2);
    expect(semiSpaceGrowth(0.98 * 8 * MiB, cap)).toBe(1);
    // An idle process's young generation shrinks to twice what it holds (in 256 KiB steps), then grows again from there.
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 * capMiB }), (quarters) => {
        let size = (quarters * MiB) / 4;
        for (let growths = 0; growths < 10; growths++) size *= semiSpaceGrowth(size, cap);
        // From anywhere up to the cap it ends past half the cap, within the cap.
        expect(size).toBeLessThanOrEqual(cap);
        expect(size).toBeGreaterThan(cap / 2);
      }),
    );
  });
});

/**
 * Scavenges and scavenging tasks while a serve process run with node flags
 * `nodeFlags` runs {@link churn}: V8's --trace-gc prints a line a scavenge,
 * --trace-parallel-scavenge one a task that took part in one (the main
 * thread's, and each helper thread's).
 */
async function scavengeTasks(nodeFlags: string[]): Promise<{ scavenges: number; tasks: number }> {
  // The match's input: all the process printed from listening to the end of the churn.
  const out = (await serveUntil(["--trace-gc", "--trace-parallel-scavenge", ...nodeFlags], churn("", "", 'process.stdout.write("churned\\n");'), /^churned$/m)).input;
  // Helper threads print beside the main thread, so two tasks' lines may share one: count each.
  return { scavenges: (out.match(/: Scavenge /g) ?? []).length, tasks: (out.match(/scavenge\[0x[0-9a-f]+\]: time=/g) ?? []).length };
}

describe("the threads a serve process scavenges on", () => {
  it("are its main thread alone: one task a scavenge", async () => {
    const { scavenges, tasks } = await scavengeTasks([]);
    expect(scavenges).toBeGreaterThan(10);
    expect(tasks).toBe(scavenges);
  });

  it("include V8's helper threads where node's command line asks for them", async () => {
    const { scavenges, tasks } = await scavengeTasks(["--parallel-scavenge"]);
    expect(scavenges).toBeGreaterThan(10);
    expect(tasks).toBeGreaterThan(scavenges);
  });

  it("are the operator's choice where node's command line or NODE_OPTIONS says how the collector uses threads", () => {
    const set: string[] = [];
    const setFlags = (flags: string) => void set.push(flags);
    for (const flag of ["--parallel-scavenge", "--no-parallel-scavenge", "--noparallel-scavenge", "--single-threaded-gc", "--single_threaded", "--no-concurrent-marking", "--noconcurrent_marking", "-parallel-marking"]) {
      expect(scavengeOnMainThread([flag], "", setFlags)).toBe(false);
    }
    expect(scavengeOnMainThread([], "--no-parallel-scavenge", setFlags)).toBe(false);
    expect(set).toEqual([]);
    // Other flags, and names that only begin like one, are not a choice of threads.
    expect(scavengeOnMainThread(["--max-old-space-size=512", "--single-threaded-gc-foo"], "--max-semi-space-size=4", setFlags)).toBe(true);
    expect(set).toEqual(["--no-parallel-scavenge"]);
  });
});
