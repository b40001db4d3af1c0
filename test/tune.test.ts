// `adp-router tune`: its search (deterministic, within budget, constraints kept),
// its outputs (--json, --out, --report, the table), and the promise that makes it
// honest: `simulate --config BEST.yaml --policies config` reports exactly the
// metrics tune reported for BEST.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { simulate, type PolicyResult } from "../src/simulate/run.js";
import { metricsOf, tune } from "../src/simulate/tune.js";
import type { TuneResult } from "../src/simulate/tune-types.js";
import { multiTurnWorkload } from "../src/simulate/workload.js";

const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), "adp-tune-"));
/** The small workload every CLI case here runs on. */
const WORKLOAD = ["--workload", "multi-turn", "--sessions", "60", "--ranks", "4"];

/** Runs the CLI; its status and output. */
function run(args: string[]) {
  const out = spawnSync(process.execPath, [cli, ...args], { encoding: "utf8" });
  return { status: out.status, stdout: out.stdout, stderr: out.stderr };
}

/** `simulate`'s figures in tune's metric names (tune reports exactly these). */
const asTuneMetrics = metricsOf;

describe("adp-router tune", () => {
  const out = path.join(dir, "best.yaml");
  const report = path.join(dir, "tune.html");
  const first = run(["tune", ...WORKLOAD, "--budget", "16", "--json", "--out", out, "--report", report, "--workers", "2"]);
  const result = JSON.parse(first.stdout) as TuneResult & { engine: object };

  it("prints {objective, baseline, best, evaluated} within the budget, the baseline being TensorRT-LLM's defaults", () => {
    expect(first.status, first.stderr).toBe(0);
    expect(first.stderr).toBe(""); // --json: no progress bar, no table
    expect(result.objective).toBe("ttft_p90");
    expect(result.baseline.config).toEqual({});
    expect(result.evaluated).toBeLessThanOrEqual(16);
    expect(result.evaluated).toBe(result.points.length);
    expect(result.points[0]!.config).toEqual({});
    // Every point distinct, the best among them and no worse than any feasible one.
    expect(new Set(result.points.map((p) => JSON.stringify(p.config))).size).toBe(result.points.length);
    const feasible = result.points.filter((p) => p.feasible);
    expect(result.best!.metrics.ttft_p90).toBe(Math.min(...feasible.map((p) => p.metrics.ttft_p90)));
    expect(result.best!.metrics.ttft_p90).toBeLessThan(result.baseline.metrics.ttft_p90);
    // Router kinds are searched: both tunable routers appear.
    expect(new Set(result.points.map((p) => p.kind))).toEqual(new Set(["default", "kv_cache_aware", "conversation"]));
  });

  it("simulate --config on the --out file reproduces the best's metrics exactly, and on the baseline the default router's", () => {
    const yaml = readFileSync(out, "utf8");
    expect(yaml).toMatch(/^attention_dp_config:\n/m);
    expect(yaml).toContain("# Reproduce: adp-router simulate --config");
    const sim = run(["simulate", ...WORKLOAD, "--config", out, "--policies", "config", "--json"]);
    expect(sim.status, sim.stderr).toBe(0);
    const row = (JSON.parse(sim.stdout) as { policies: PolicyResult[] }).policies[0]!;
    expect(asTuneMetrics(row)).toEqual(result.best!.metrics);
    const defaults = run(["simulate", ...WORKLOAD, "--policies", "default", "--json"]);
    expect(asTuneMetrics((JSON.parse(defaults.stdout) as { policies: PolicyResult[] }).policies[0]!)).toEqual(result.baseline.metrics);
  });

  it("is deterministic: the same flags give the same JSON, with one worker or two; another seed searches elsewhere", () => {
    const again = run(["tune", ...WORKLOAD, "--budget", "16", "--json", "--workers", "1"]);
    expect(again.stdout).toBe(first.stdout);
    const other = run(["tune", ...WORKLOAD, "--budget", "16", "--json", "--search-seed", "2"]);
    const otherPoints = (JSON.parse(other.stdout) as TuneResult).points.map((p) => JSON.stringify(p.config));
    expect(otherPoints).not.toEqual(result.points.map((p) => JSON.stringify(p.config)));
  });

  it("writes an HTML report of every evaluated point", () => {
    const html = readFileSync(report, "utf8");
    expect(html).toMatch(/^<!doctype html>/i);
    expect(html).toContain("attention_dp_config");
  });

  it("prints a table of the best against the defaults, the YAML to paste and what it means", () => {
    const text = run(["tune", ...WORKLOAD, "--budget", "8"]);
    expect(text.status, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^best\s+(kv_cache_aware|conversation|default)\s/m);
    expect(text.stdout).toMatch(/^TensorRT-LLM defaults\s+default\s/m);
    expect(text.stdout).toContain("Paste into extra_llm_api_options.yaml:");
    expect(text.stdout).toContain("  attention_dp_config:\n");
    expect(text.stdout).toContain("What it sets:");
    expect(text.stdout).toMatch(/8 simulations on \d+ workers? in [\d.]+ s/);
  });

  it("--config: the user's current config (YAML, wrapped as in extra_llm_api_options.yaml) is simulated and shown beside the best", () => {
    const mine = path.join(dir, "mine.yaml");
    writeFileSync(mine, "max_batch_size: 64\nattention_dp_config:\n  enable_kv_cache_aware_routing: true\n  kv_cache_routing_load_balance_weight: 7\n");
    const out = JSON.parse(run(["tune", ...WORKLOAD, "--budget", "8", "--json", "--config", mine]).stdout) as TuneResult;
    expect(out.current!.config).toEqual({ enable_kv_cache_aware_routing: true, kv_cache_routing_load_balance_weight: 7 });
    expect(out.points[1]!.stage).toBe("current");
    const sim = run(["simulate", ...WORKLOAD, "--config", mine, "--policies", "config", "--json"]);
    expect(asTuneMetrics((JSON.parse(sim.stdout) as { policies: PolicyResult[] }).policies[0]!)).toEqual(out.current!.metrics);
    expect(run(["tune", ...WORKLOAD, "--budget", "8", "--config", mine]).stdout).toMatch(/^your config \(--config\)\s+kv_cache_aware\s/m);
    const bad = run(["tune", ...WORKLOAD, "--config", '{"kv_cache_routing_load_balance_weight": "heavy"}']);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--config: Invalid attention_dp_config");
  });

  it("keeps constraints, and says so (exit 1) when nothing meets them", () => {
    const bounded = JSON.parse(run(["tune", ...WORKLOAD, "--budget", "16", "--json", "--max-prefill-imbalance", "1.3"]).stdout) as TuneResult;
    expect(bounded.constraints).toEqual({ max_prefill_imbalance: 1.3 });
    expect(bounded.constraints_met).toBe(true);
    expect(bounded.best!.metrics.prefill_imbalance).toBeLessThanOrEqual(1.3);
    for (const p of bounded.points) expect(p.feasible).toBe(!p.metrics.overloaded && p.metrics.prefill_imbalance <= 1.3);
    const impossible = run(["tune", ...WORKLOAD, "--budget", "6", "--json", "--min-hit-ratio", "0.99", "--out", path.join(dir, "none.yaml")]);
    expect(impossible.status).toBe(1);
    expect(impossible.stderr).toMatch(/no config to recommend: .*min_hit_ratio 0\.99 is above the trace's optimum hit ratio 0\.8\d+/);
    expect(impossible.stderr).toContain("nothing written to");
    const none = JSON.parse(impossible.stdout) as TuneResult;
    expect([none.constraints_met, none.best]).toEqual([false, null]);
    expect(() => readFileSync(path.join(dir, "none.yaml"))).toThrow(); // no block to paste when nothing qualifies
    // Every config overloaded: said as such, not as a constraint.
    const overloaded = run(["tune", ...WORKLOAD, "--budget", "4", "--rate-scale", "2000", "--max-active", "2"]);
    expect(overloaded.status).toBe(1);
    expect(overloaded.stdout).toContain("No config to recommend: the simulated engine is overloaded under every config");
    expect(overloaded.stdout).not.toContain("Paste into");
  });

  it("optimises the objective asked for, in its direction", () => {
    const hit = JSON.parse(run(["tune", ...WORKLOAD, "--budget", "10", "--json", "--objective", "hit_ratio"]).stdout) as TuneResult;
    expect(hit.direction).toBe("max");
    expect(hit.best!.metrics.hit_ratio).toBe(Math.max(...hit.points.filter((p) => p.feasible).map((p) => p.metrics.hit_ratio)));
  });

  it.each([
    [["--objective", "speed"], "--objective: must be one of ttft_p50, ttft_p90, ttft_p99, hit_ratio, prefill_imbalance"],
    [["--budget", "0"], "--budget: must be an integer in [1, 100000]"],
    [["--budget", "2.5"], "--budget: must be an integer"],
    [["--max-prefill-imbalance", "0.5"], "--max-prefill-imbalance: must be a number of at least 1"],
    [["--min-hit-ratio", "2"], "--min-hit-ratio: must be a number from 0 to 1"],
    [["--workers", "0"], "--workers: must be an integer in [1, 256]"],
    [["--search-seed", "4294967296"], "--search-seed: must be an integer in [0, 4294967295]"],
    [["--out", path.join(dir, "no-such-folder", "best.yaml")], "--out: cannot write"],
    [["--report", dir], "is a folder"],
    [["--trace", path.join(dir, "missing.jsonl")], "missing.jsonl"],
    [["--frobnicate"], "Unknown option '--frobnicate'"],
  ])("%j: one clear message, non-zero exit, no stack", (args, message) => {
    const r = run(["tune", ...args]);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain(message);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

describe("adp-router tune --instances: phase 2's config for a fleet", () => {
  it("tunes the engines' ADP router with ranks pinned, and its reproduce command gives the same figures", () => {
    const fleetOut = path.join(dir, "fleet-best.yaml");
    const r = run(["tune", ...WORKLOAD, "--instances", "2", "--budget", "8", "--workers", "1", "--out", fleetOut, "--json"]);
    expect(r.status, r.stderr).toBe(0);
    const fleet = JSON.parse(r.stdout) as TuneResult & { engine: { instances: number } };
    expect(fleet.instances).toBe(2);
    expect(fleet.engine.instances).toBe(2);
    const yaml = readFileSync(fleetOut, "utf8");
    expect(yaml).toContain("--instances 2 --rank-routing adp");
    const sim = run(["simulate", ...WORKLOAD, "--config", fleetOut, "--instances", "2", "--rank-routing", "adp", "--json"]);
    expect(sim.status, sim.stderr).toBe(0);
    expect(asTuneMetrics((JSON.parse(sim.stdout) as { policies: PolicyResult[] }).policies[0]!)).toEqual(fleet.best!.metrics);
    // Its baseline is the default router pinned, not one engine's figures.
    const one = run(["simulate", ...WORKLOAD, "--policies", "default", "--json"]);
    expect(asTuneMetrics((JSON.parse(one.stdout) as { policies: PolicyResult[] }).policies[0]!)).not.toEqual(fleet.baseline.metrics);
    const table = run(["tune", ...WORKLOAD, "--instances", "2", "--budget", "4", "--workers", "2"]);
    expect(table.status, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/requests on 2 engines × 4 ranks, each request's rank pinned/);
    expect(table.stdout).toMatch(/Paste into each of the gateway's upstreams/);
    const refused = run(["tune", ...WORKLOAD, "--load-weight", "1"]);
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(/--load-weight: applies only with --instances/);
  });
});

describe("tune() in the library", () => {
  const trace = multiTurnWorkload({ seed: 3, sessions: 30 });

  it("spends the budget exactly, baseline first, and reports each point as simulate does", async () => {
    const progress: number[] = [];
    const result = await tune(trace, { budget: 9, engine: { ranks: 2 }, onProgress: (done) => progress.push(done) });
    expect(result.evaluated).toBe(9);
    expect(progress.at(-1)).toBe(9);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
    const p = result.points[5]!;
    const row = simulate(trace, { ranks: 2, config: p.config, policies: ["config"] }).policies[0]!;
    expect(asTuneMetrics(row)).toEqual(p.metrics);
    expect(p.objective).toBe(p.metrics.ttft_p90);
  });

  it("refuses bad options with typed errors before simulating anything", async () => {
    let calls = 0;
    const evaluate = async () => {
      calls++;
      return [];
    };
    await expect(tune(trace, { budget: 0 }, evaluate)).rejects.toThrow(/budget/);
    await expect(tune(trace, { objective: "fast" as never }, evaluate)).rejects.toThrow(/objective/);
    await expect(tune(trace, { constraints: { min_hit_ratio: Number.NaN } }, evaluate)).rejects.toThrow(/min_hit_ratio/);
    await expect(tune(trace, { strategy: "grid" as never }, evaluate)).rejects.toThrow(/strategy/);
    expect(calls).toBe(0);
  });
});
