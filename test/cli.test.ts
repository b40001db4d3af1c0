// The built CLI (dist/cli.js), run as a user runs it.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
const fixture = fileURLToPath(new URL("./fixtures/conformance.jsonl", import.meta.url));
const run = (args: string[], input?: string) => spawnSync(process.execPath, [cli, ...args], { input, encoding: "utf8" });

describe("the README's commands in this checkout", () => {
  it("`npx adp-router …` runs the built CLI (executable, with its shebang)", () => {
    const out = spawnSync("npx", ["--no-install", "adp-router", "conformance", "--check", fixture], { encoding: "utf8", cwd: fileURLToPath(new URL("..", import.meta.url)) });
    expect(out.stderr).not.toMatch(/Permission denied/);
    expect(out.status).toBe(0);
    expect(out.stdout).toMatch(/600 passed, 0 failed/);
  });
});

describe("adp-router conformance", () => {
  const lines = readFileSync(fixture, "utf8").trim().split("\n");

  it("prints one answer line per scenario, in input order, in the expected shape", () => {
    const sample = [lines[0], lines[1], lines[2]].join("\n") + "\n";
    const out = run(["conformance", "-"], sample);
    expect(out.status).toBe(0);
    const answers = out.stdout.trim().split("\n").map((l) => JSON.parse(l));
    expect(answers).toHaveLength(3);
    answers.forEach((a, i) => {
      const s = JSON.parse(lines[i]!);
      if (!("error" in a)) expect(a).toEqual(s.expected);
    });
  });

  it("--check reports the summary line and exits 1 with the failing scenario named", () => {
    const s = JSON.parse(lines.find((l) => l.includes('"mode":"balance"'))!);
    const wrong = { ...s, name: "planted", expected: { iterations: s.expected.iterations.map((x: boolean) => !x) } };
    const out = run(["conformance", "--check", "-"], JSON.stringify(s) + "\n" + JSON.stringify(wrong) + "\n");
    expect(out.status).toBe(1);
    expect(out.stdout).toMatch(/FAIL planted: \$\.iterations\[0\]: expected (true|false), got (true|false)/);
    expect(out.stdout.trim().split("\n").at(-1)).toBe("1 passed, 1 failed");
  });

  it("answers a malformed line with an error and goes on; exits 2 on an unreadable file", () => {
    const out = run(["conformance", "-"], "not json\n" + lines.find((l) => l.includes('"mode":"validate"')) + "\n");
    expect(out.status).toBe(0);
    const [first, second] = out.stdout.trim().split("\n").map((l) => JSON.parse(l));
    expect(first.error).toMatch(/line 1: invalid JSON/);
    expect(second).toHaveProperty("config_error");
    expect(run(["conformance", "/nonexistent.jsonl"]).status).toBe(2);
  });
});

describe("adp-router validate and schema", () => {
  it("validates a config with defaults filled, or lists its problems", () => {
    const ok = run(["validate", "-"], '{"enable_kv_cache_aware_routing": true}');
    expect(ok.status).toBe(0);
    expect(JSON.parse(ok.stdout).kv_cache_routing_fair_share_multiplier).toBe(2);
    const bad = run(["validate", "-"], '{"enable_kv_cache_routing": true}');
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('did you mean "enable_kv_cache_aware_routing"');
    expect(JSON.parse(run(["schema"]).stdout).title).toBe("AttentionDpConfig");
    expect(run(["bogus"]).status).toBe(2);
  });
});
