// The CLI behaves as users of command-line tools expect (issue #14): every
// command answers --help, the tool answers --version; a config is read from
// JSON or YAML, bare or under `attention_dp_config:` as in TensorRT-LLM's
// extra_llm_api_options.yaml, and a parse error names file, line and column;
// a closed pipe (`| head`) ends a command quietly; `npm pack` in a fresh
// clone builds and ships dist/. Runs the built CLI (npm run build first).
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
const cli = path.join(root, "dist", "cli.js");
const fixture = path.join(root, "test", "fixtures", "conformance.jsonl");
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as { version: string; scripts: Record<string, string> };

/** Runs the built CLI to completion. */
const run = (args: string[], input?: string) => spawnSync(process.execPath, [cli, ...args], { input, encoding: "utf8", cwd: root });

/** What a user error must never show: a stack frame. */
const STACK = /^\s+at .+\(.*:\d+:\d+\)$|^\s+at .+:\d+:\d+$/m;

const work = mkdtempSync(path.join(tmpdir(), "adp-cli-conventions-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** Writes `text` to a file of the scratch directory and returns its path. */
function file(name: string, text: string): string {
  const p = path.join(work, name);
  writeFileSync(p, text);
  return p;
}

/** The command names the top-level help lists, so a command added later is held to --help too. */
function listedCommands(): string[] {
  const usage = run(["--help"]).stdout;
  const section = usage.slice(usage.indexOf("Commands:"), usage.indexOf("Options:"));
  return [...section.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!);
}

describe("--help and --version", () => {
  it("the top-level help lists every command dispatched today", () => {
    expect(listedCommands()).toEqual(expect.arrayContaining(["simulate", "conformance", "validate", "schema", "serve"]));
  });

  it.each(["--help", "-h", "help"])("`adp-router %s` prints the usage on stdout and exits 0", (flag) => {
    const out = run([flag]);
    expect(out.status).toBe(0);
    expect(out.stdout).toMatch(/^Usage: adp-router <command>/);
    expect(out.stderr).toBe("");
  });

  it("`adp-router <command> --help` (and -h, and `help <command>`) prints that command's usage and exits 0, for every listed command", () => {
    for (const command of listedCommands()) {
      const long = run([command, "--help"]);
      expect(long.status, `${command} --help: ${long.stderr}`).toBe(0);
      expect(long.stdout, command).toMatch(new RegExp(`^Usage: adp-router ${command}\\b`));
      expect(long.stderr, command).toBe("");
      expect(run([command, "-h"]).stdout, `${command} -h`).toBe(long.stdout);
      expect(run(["help", command]).stdout, `help ${command}`).toBe(long.stdout);
    }
  });

  it("simulate --help documents its flags (the flags parsed are the flags shown)", () => {
    const help = run(["simulate", "--help"]).stdout;
    for (const flag of ["--trace", "--workload", "--config", "--ranks", "--json", "--report", "--replicas", "--help"]) expect(help).toContain(flag);
  });

  it.each(["--version", "-v", "version"])("`adp-router %s` prints package.json's version", (flag) => {
    const out = run([flag]);
    expect(out.status).toBe(0);
    expect(out.stdout).toBe(`${pkg.version}\n`);
  });

  it("bad usage exits 2 with one clear message naming the problem and where to look, never a stack", () => {
    const none = run([]);
    expect(none.status).toBe(2);
    expect(none.stdout).toBe("");
    expect(none.stderr).toMatch(/^Usage: adp-router/);
    const flag = run(["simulate", "--bogus"]);
    expect(flag.status).toBe(2);
    expect(flag.stderr).toMatch(/^adp-router simulate: Unknown option '--bogus'.*\nRun "adp-router simulate --help" for usage\.\n$/);
    const extra = run(["validate", "a.json", "b.json"]);
    expect(extra.status).toBe(2);
    expect(extra.stderr).toBe('adp-router validate: expected one FILE (or - for standard input)\nRun "adp-router validate --help" for usage.\n');
    expect(run(["help", "bogus"]).status).toBe(2);
    expect(run(["schema", "extra"]).status).toBe(2);
    for (const out of [none, flag, extra]) expect(out.stderr).not.toMatch(STACK);
  });
});

describe("a config in JSON or YAML, bare or under attention_dp_config:", () => {
  /** One config written every way a user keeps it. */
  const forms = {
    "bare JSON": '{"enable_kv_cache_aware_routing": true, "kv_cache_routing_load_balance_weight": 100}',
    "bare YAML": "enable_kv_cache_aware_routing: true\nkv_cache_routing_load_balance_weight: 100\n",
    "wrapped YAML with other keys (extra_llm_api_options.yaml)":
      "enable_attention_dp: true\nkv_cache_config:\n  enable_block_reuse: true\n  free_gpu_memory_fraction: 0.85\nattention_dp_config:\n  enable_kv_cache_aware_routing: true\n  kv_cache_routing_load_balance_weight: 100\nmax_batch_size: 256\n",
    "wrapped JSON": '{"max_batch_size": 8, "attention_dp_config": {"enable_kv_cache_aware_routing": true, "kv_cache_routing_load_balance_weight": 100}}',
  };

  it("validate reads every form to the same config", () => {
    const outputs = Object.entries(forms).map(([name, text]) => {
      const out = run(["validate", file(`${name.replace(/\W+/g, "-")}.yaml`, text)]);
      expect(out.status, `${name}: ${out.stderr}`).toBe(0);
      return JSON.parse(out.stdout) as Record<string, unknown>;
    });
    expect(outputs[0]!.kv_cache_routing_load_balance_weight).toBe(100);
    for (const o of outputs) expect(o).toEqual(outputs[0]);
    // From standard input too, and a bare `attention_dp_config:` is TensorRT-LLM's None: every default.
    expect(JSON.parse(run(["validate", "-"], forms["bare YAML"]).stdout)).toEqual(outputs[0]);
    const empty = run(["validate", "-"], "model: x\nattention_dp_config:\n");
    expect(empty.status).toBe(0);
    expect(JSON.parse(empty.stdout)).toEqual(JSON.parse(run(["validate", "-"], "{}").stdout));
  });

  it("a YAML or JSON parse error names the file, line and column, shows the line, exits 2, no stack", () => {
    const yaml = file("broken.yaml", "attention_dp_config:\n  enable_kv_cache_aware_routing: true\n  kv_cache_routing_load_balance_weight: [1, 2\n");
    const y = run(["validate", yaml]);
    expect(y.status).toBe(2);
    expect(y.stderr).toMatch(new RegExp(`^adp-router validate: ${yaml.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:\\d+:\\d+: not valid JSON or YAML: `));
    expect(y.stderr).not.toMatch(STACK);
    const json = file("broken.json", '{\n  "enable_kv_cache_aware_routing": true,\n  "kv_cache_routing_load_balance_weight" 2\n}\n');
    const j = run(["validate", json]);
    expect(j.status).toBe(2);
    expect(j.stderr).toContain(`${json}:3:42: not valid JSON or YAML: `);
    expect(j.stderr).toContain('   3 |   "kv_cache_routing_load_balance_weight" 2');
    expect(j.stderr).not.toMatch(STACK);
  });

  it("an invalid field is placed at its file, line and column; exit 1 (the file was read, the config is wrong)", () => {
    const out = run(["validate", file("typo.yaml", "max_batch_size: 8\nattention_dp_config:\n  enable_kv_cache_aware_routing: true\n  kv_cache_routing_load_balanc_weight: 2\n")]);
    expect(out.status).toBe(1);
    expect(out.stderr).toContain(`typo.yaml:4:3: kv_cache_routing_load_balanc_weight: is not an attention_dp_config field (did you mean "kv_cache_routing_load_balance_weight"?)`);
  });

  it("an unreadable or empty file exits 2 with one line", () => {
    const missing = run(["validate", path.join(work, "nonexistent.yaml")]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/cannot read .*nonexistent\.yaml: no such file\n$/);
    const empty = run(["validate", file("empty.yaml", "\n")]);
    expect(empty.status).toBe(2);
    expect(empty.stderr).toMatch(/empty\.yaml: is empty/);
  });

  /** The metrics of one small deterministic simulate run (not its timings). */
  const metrics = (args: string[]) => {
    const out = run(["simulate", "--workload", "multi-turn", "--sessions", "20", "--policies", "kv_cache_aware", "--json", ...args]);
    expect(out.status, out.stderr).toBe(0);
    const { policies } = JSON.parse(out.stdout) as { policies: Record<string, unknown>[] };
    return policies.map(({ route_us_per_request: _timing, ...rest }) => rest);
  };

  it("simulate --config takes a file in any form (or - or inline JSON) and applies it", () => {
    const inline = metrics(["--config", '{"kv_cache_routing_load_balance_weight": 100}']);
    expect(inline).not.toEqual(metrics([])); // the setting changes the result, so applying it is observable
    for (const [name, text] of Object.entries(forms)) {
      expect(metrics(["--config", file(`sim-${name.replace(/\W+/g, "-")}.yaml`, text)]), name).toEqual(inline);
    }
    const out = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "20", "--policies", "kv_cache_aware", "--json", "--config", "-"], { input: forms["bare YAML"], encoding: "utf8" });
    expect(out.status).toBe(0);
  });

  it("simulate --config errors name the flag, the file, line and column; exit 2, no stack", () => {
    const broken = run(["simulate", "--config", file("sim-broken.yaml", "attention_dp_config:\n  a: [1\n")]);
    expect(broken.status).toBe(2);
    expect(broken.stderr).toMatch(/^adp-router simulate: --config: .*sim-broken\.yaml:\d+:\d+: not valid JSON or YAML/);
    const missing = run(["simulate", "--config", "no-such-config.yaml"]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toBe("adp-router simulate: --config: cannot read no-such-config.yaml: no such file\n");
    const invalid = run(["simulate", "--config", file("sim-typo.yaml", "attention_dp_config:\n  kv_cache_routing_load_balance_weight: heavy\n")]);
    expect(invalid.status).toBe(2);
    expect(invalid.stderr).toContain("sim-typo.yaml:2:3: kv_cache_routing_load_balance_weight: must be");
    for (const out of [broken, missing, invalid]) expect(out.stderr).not.toMatch(STACK);
  });
});

describe("a closed pipe ends a command quietly (`adp-router … | head`)", () => {
  /** Runs `args` with standard output's reader gone before the first write; resolves with status and stderr. */
  const withClosedStdout = (command: string[]) =>
    new Promise<{ status: number | null; stderr: string }>((resolve) => {
      const child = spawn(process.execPath, command, { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
      child.stdout.destroy(); // closes our end: the child's next write gets EPIPE
      let stderr = "";
      child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
      child.on("close", (status) => resolve({ status, stderr }));
    });

  it("the harness is sound: a plain Node program writing to the closed pipe does crash with a stack", async () => {
    const out = await withClosedStdout(["-e", 'process.stdout.write("x\\n".repeat(1000))']);
    expect(out.status).not.toBe(0);
    expect(out.stderr).toMatch(/EPIPE/);
  });

  it.each([
    ["conformance", fixture],
    ["conformance", "--check", fixture],
    ["schema"],
    ["simulate", "--workload", "multi-turn", "--sessions", "20", "--json"],
    ["simulate", "--workload", "multi-turn", "--sessions", "20"],
    ["--help"],
    ["simulate", "--help"],
  ])("adp-router %s … exits 0 with nothing on stderr", async (...args) => {
    const out = await withClosedStdout([cli, ...args]);
    expect(out.stderr).toBe("");
    expect(out.status).toBe(0);
  });

  it("`adp-router conformance FILE | head -n 1` in a shell: one line out, status 0, nothing on stderr", () => {
    // 600 answers are ~200 KB, far beyond a pipe's buffer, so the write outlives head.
    const out = spawnSync("bash", ["-c", 'node "$0" conformance "$1" | head -n 1; echo "status=${PIPESTATUS[0]}" >&2', cli, fixture], { encoding: "utf8" });
    expect(out.stdout.trim().split("\n")).toHaveLength(1);
    expect(out.stderr).toBe("status=0\n");
  });
});

describe("npm pack in a fresh clone", () => {
  it("package.json has a prepack script that runs the build", () => {
    expect(pkg.scripts.prepack).toMatch(/\bnpm run build\b|scripts\/build\.mjs/);
  });

  it(
    "packs dist/ from a checkout that has never been built",
    () => {
      // A fresh clone: the files git would check out (plus new ones not ignored), no dist/, build/ or src/generated/.
      const clone = path.join(work, "clone");
      const files = execFileSync("git", ["ls-files", "-co", "--exclude-standard", "-z"], { cwd: root, encoding: "utf8" }).split("\0").filter((f) => f !== "");
      for (const f of files) {
        mkdirSync(path.dirname(path.join(clone, f)), { recursive: true });
        try {
          cpSync(path.join(root, f), path.join(clone, f));
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error; // deleted in the working tree
        }
      }
      symlinkSync(path.join(root, "node_modules"), path.join(clone, "node_modules")); // npm ci's result, shared
      const out = execFileSync("npm", ["pack", "--dry-run", "--json"], { cwd: clone, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      const [manifest] = JSON.parse(out.slice(out.indexOf("["))) as [{ files: { path: string }[] }];
      const packed = manifest.files.map((f) => f.path);
      for (const f of ["dist/cli.js", "dist/index.js", "dist/simulate.js", "dist/types/index.d.ts", "dist/config.schema.json"]) expect(packed).toContain(f);
      // The gateway's package, from the same clone (built by the library's pack above).
      const gatewayOut = execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: path.join(clone, "gateway"), encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
      const [gatewayManifest] = JSON.parse(gatewayOut.slice(gatewayOut.indexOf("["))) as [{ files: { path: string }[] }];
      const gatewayPacked = gatewayManifest.files.map((f) => f.path);
      for (const f of ["dist/cli.js", "dist/index.js", "dist/tokenize-worker.js", "dist/batch-decode-worker.js", "dist/types/index.d.ts", "dist/gateway.schema.json"]) expect(gatewayPacked).toContain(f);
    },
    180_000,
  );
});
