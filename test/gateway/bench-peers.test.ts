// `npm run bench:peers` installs nothing: on a machine without `haproxy` or
// `wrk` it names what is missing and how to get it, and stops (exit 2)
// before it starts an engine or a gateway.
import { spawnSync } from "node:child_process";
import { mkdtempSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";

/** A PATH holding `sh` and `node` only (so `command -v haproxy` finds nothing). */
function barePath(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "adp-bare-path-"));
  symlinkSync("/bin/sh", path.join(dir, "sh"));
  symlinkSync(process.execPath, path.join(dir, "node"));
  return dir;
}

describe("npm run bench:peers", () => {
  it("without haproxy and wrk it says how to get them and stops, exit 2, starting nothing", () => {
    const run = spawnSync(process.execPath, ["scripts/run-bench.mjs", "peers"], { encoding: "utf8", env: { ...process.env, PATH: barePath() }, timeout: 60_000 });
    expect(run.stderr).toContain("bench:peers needs haproxy and wrk (Debian: apt-get install haproxy wrk); it installs nothing itself.");
    expect(run.status).toBe(2);
    expect(run.stdout).toBe(""); // no engines' line, no round
  }, 60_000);
});
