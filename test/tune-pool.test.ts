// tune's worker pool: answers in the configs' order whatever worker answers
// first, and every way a worker can fail ends the search with an error rather
// than a wait that never ends.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { TunePool } from "../src/cli/tune-pool.js";

const dir = mkdtempSync(path.join(tmpdir(), "adp-tune-pool-"));
/** A stub worker script whose message handler is `body` (given `job`, `config`, `parentPort`). */
function stub(name: string, body: string): URL {
  const file = path.join(dir, `${name}.mjs`);
  writeFileSync(file, `import { parentPort } from "node:worker_threads";\nparentPort.on("message", async ({ job, config }) => { ${body} });\n`);
  return pathToFileURL(file);
}
const data = { trace: { name: "t", blockTokens: 512, requests: [] }, engine: {} };
/** Metrics whose p90 names the config's weight, so order can be checked. */
const answer = "parentPort.postMessage({ job, metrics: { ttft_p50: 0, ttft_p90: config.w, ttft_p99: 0, hit_ratio: 0, prefill_imbalance: 1, requests_imbalance: 1, overloaded: false } });";

describe("TunePool", () => {
  it("answers in the configs' order, even when later jobs finish first", async () => {
    // Earlier jobs sleep longer, so answers arrive out of order.
    const pool = new TunePool(stub("ok", `await new Promise((r) => setTimeout(r, 40 - config.w * 4)); ${answer}`), 3, data);
    try {
      const metrics = await pool.evaluate(Array.from({ length: 9 }, (_, w) => ({ w }) as never));
      expect(metrics.map((m) => m.ttft_p90)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
    } finally {
      await pool.close();
    }
  });

  it.each([
    ["exits with status 0 mid-search", "process.exit(0);", /exited \(status 0\)/],
    ["exits with status 3", "process.exit(3);", /exited \(status 3\)/],
    ["throws", "throw new Error('worker broke');", /worker broke/],
    ["answers an error", "parentPort.postMessage({ job, error: 'no such router' });", /no such router/],
  ])("a worker that %s fails the search instead of hanging", async (name, body, message) => {
    const pool = new TunePool(stub(name.replace(/\W+/g, "-"), body), 2, data);
    try {
      await expect(pool.evaluate([{ w: 1 } as never, { w: 2 } as never])).rejects.toThrow(message);
    } finally {
      await pool.close();
    }
  });
});
