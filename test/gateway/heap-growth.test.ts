// The old generation's growing factor a `serve` process sets (heap-growth.ts):
// V8's own trace of the limit it sets at a full collection shows the factor
// in force, in a real serve process and with an operator's flag that wins.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path, { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { HEAP_GROWING_PERCENT, setHeapGrowth } from "../../gateway/src/common/heap-growth.js";
import { startMockEngine } from "../support/mock-engine.js";

const GATEWAY_CLI = path.resolve("gateway/dist/cli.js");

const open: { close(): Promise<void> }[] = [];
const children: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  await Promise.all(open.splice(0).map((o) => o.close()));
});

/**
 * Starts `serve` with node flags `nodeFlags` and V8's heap-limit trace on,
 * has it collect its whole heap once it listens (SIGUSR2 to a preload that
 * calls gc), and returns the growing factor of the limit V8 then set.
 */
async function factorAfterFullCollection(nodeFlags: string[]): Promise<number> {
  const engine = await startMockEngine("e0");
  open.push(engine);
  const dir = mkdtempSync(join(tmpdir(), "adp-heap-"));
  dirs.push(dir);
  const config = join(dir, "gateway.yaml");
  writeFileSync(config, `listen: { host: 127.0.0.1, port: 0 }\nlogging: { level: warn }\nupstreams:\n  - url: ${engine.url}\n`);
  const preload = join(dir, "collect.cjs");
  writeFileSync(preload, `process.on("SIGUSR2", () => globalThis.gc());`);
  const child = spawn(process.execPath, ["--expose-gc", "--trace-gc-verbose", ...nodeFlags, "--require", preload, GATEWAY_CLI, "serve", "--config", config], { stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let stdout = "";
  let listening = -1;
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => reject(new Error(`serve exited ${code} before a full collection`)));
    child.stdout!.on("data", (d) => {
      stdout += d;
      if (listening < 0 && /^http:\/\/\S+$/m.test(stdout)) {
        listening = stdout.length;
        child.kill("SIGUSR2");
      }
      // V8 prints "[HeapController] Limit: old size: N KB, new limit: M KB (factor)" at each full collection.
      const limit = listening < 0 ? null : /\[HeapController\] Limit: [^\n]*\((\d+\.\d)\)\n/.exec(stdout.slice(listening));
      if (limit) resolve(Number(limit[1]));
    });
  });
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
