// `adp-router-gateway validate FILE` as a user runs it (the built CLI): every
// problem with its file and line, exit 0/1/2, and nothing started (an upstream
// that cannot be reached, a port that is taken, change nothing).
import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";

const CLI = path.resolve("gateway/dist/cli.js");
const dir = mkdtempSync(path.join(tmpdir(), "adp-validate-"));

/** Writes `text` as FILE and runs validate on it. */
function validate(name: string, text: string | null) {
  const file = path.join(dir, name);
  if (text !== null) writeFileSync(file, text);
  return spawnSync(process.execPath, [CLI, "validate", file], { encoding: "utf8", timeout: 10_000 });
}

describe("adp-router-gateway validate", () => {
  it("a valid file: one summary line, exit 0, with nothing started (its port stays free, its upstream is never asked)", async () => {
    const listener = createServer();
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", r));
    const port = (listener.address() as { port: number }).port;
    let contacted = 0;
    listener.on("connection", (s) => {
      contacted++;
      s.destroy();
    });
    // The upstream is the listener itself: a started gateway would health-check it.
    const r = validate("good.yaml", `listen: { port: 0 }\nupstreams:\n  - url: http://127.0.0.1:${port}\n  - http://127.0.0.1:9\npolicy: conversation\n`);
    listener.close();
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`${path.join(dir, "good.yaml")}: valid (2 upstreams, listening on 127.0.0.1:0)\n`);
    expect(contacted).toBe(0);
  });

  it("every problem listed with its file and line (unknown keys, bad values, a key set twice), then a count; exit 1", () => {
    const r = validate("bad.yaml", ["listen: { port: 99999 }", "upstreams:", "  - url: ftp://engine", "limits:", "  queue_size: -1", "  queue_sise: 3", "policy: fastest", "policy: default", ""].join("\n"));
    const file = path.join(dir, "bad.yaml");
    expect(r.status).toBe(1);
    const lines = r.stdout.trim().split("\n");
    expect(lines.at(-1)).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: \\d+ problems$`));
    for (const [line, field] of [[1, "listen.port"], [3, "upstreams[0].url"], [5, "limits.queue_size"], [6, "limits.queue_sise"], [8, "policy"]] as const) {
      expect(lines.some((l) => l.startsWith(`${file}:${line}: `) && l.includes(field)), `${field} at line ${line} in:\n${r.stdout}`).toBe(true);
    }
  });

  it("an SGLang engine: its ZeroMQ events as kind zmq, its load as kind sglang", () => {
    const r = validate("sglang.yaml", "upstreams:\n  - url: http://127.0.0.1:9\n    kv_events: { kind: zmq, endpoint: tcp://127.0.0.1:5557, dp_ranks: 2 }\n    load: { kind: sglang }\n");
    expect(r.stdout).toContain("valid (1 upstream");
    expect(r.status).toBe(0);
    expect(validate("tgi.yaml", "upstreams:\n  - url: http://127.0.0.1:9\n    load: { kind: tgi }\n").stdout).toContain("must be vllm or sglang");
  });

  it("a file that cannot be read, or no file: exit 2 and one message", () => {
    const missing = validate("missing.yaml", null);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toBe(`adp-router-gateway validate: cannot read ${path.join(dir, "missing.yaml")}: no such file\n`);
    const none = spawnSync(process.execPath, [CLI, "validate"], { encoding: "utf8" });
    expect(none.status).toBe(2);
  });

  it("an attention_dp_config with a misspelt key is a problem of the gateway file, at its line", () => {
    const r = validate("adp.yaml", "upstreams: [http://127.0.0.1:9]\nattention_dp_config:\n  enable_kv_cache_aware_routing: true\n  kv_cache_routing_fair_share_multipler: 2\n");
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("kv_cache_routing_fair_share_multipler");
    expect(r.stdout).toContain('did you mean "kv_cache_routing_fair_share_multiplier"');
  });
});

describe("adp-router-gateway's commands", () => {
  it("each prints its usage for --help, -h and help <command>, and schema prints the schema", () => {
    for (const command of ["serve", "validate", "schema"]) {
      const long = spawnSync(process.execPath, [CLI, command, "--help"], { encoding: "utf8" });
      expect(long.status, command).toBe(0);
      expect(long.stdout, command).toMatch(new RegExp(`^Usage: adp-router-gateway ${command}\\b`));
      expect(spawnSync(process.execPath, [CLI, command, "-h"], { encoding: "utf8" }).stdout).toBe(long.stdout);
      expect(spawnSync(process.execPath, [CLI, "help", command], { encoding: "utf8" }).stdout).toBe(long.stdout);
    }
    const schema = spawnSync(process.execPath, [CLI, "schema"], { encoding: "utf8" });
    expect((JSON.parse(schema.stdout) as { title: string }).title).toBe("adp-router-gateway configuration");
    expect(spawnSync(process.execPath, [CLI, "schema", "extra"], { encoding: "utf8" }).status).toBe(2);
  });
});
