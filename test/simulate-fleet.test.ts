// `simulate --instances N --ranks R`: several engines behind one gateway,
// routed in two phases. What the rows mean (pinning or not), that every
// request is served once, that pinning into the ranks that hold a prompt is
// worth something on the multi-turn workload, determinism, and the refusals.
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { simulate, toJson } from "../src/simulate/run.js";
import { multiTurnWorkload } from "../src/simulate/workload.js";
import { runFleet } from "../src/simulate/fleet.js";
import { DEFAULT_ENGINE, pathsOf } from "../src/simulate/engine.js";

const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
const workload = () => multiTurnWorkload({ seed: 3, sessions: 160 });

describe("simulate over several engines", () => {
  it("serves every request once on some engine's rank, pinned as the row says", () => {
    const trace = workload();
    const paths = pathsOf(trace.requests);
    for (const kind of ["adp", "instance", "none"] as const) {
      const run = runFleet(trace.requests, paths, trace.blockTokens, { ...DEFAULT_ENGINE, ranks: 4, cacheBlocks: 400 }, 3, kind, { enable_kv_cache_aware_routing: true }, undefined);
      expect(run.routed).toBe(trace.requests.length);
      expect(run.requestsPerRank).toHaveLength(12);
      expect(run.requestsPerRank.reduce((a, b) => a + b, 0)).toBe(trace.requests.length);
      expect(run.requestsPerInstance.reduce((a, b) => a + b, 0)).toBe(trace.requests.length);
      expect(run.pinned).toBe(kind === "none" ? 0 : trace.requests.length);
      // Every request got its first token after it arrived.
      for (let i = 0; i < trace.requests.length; i++) expect(run.ttftMs[i]).toBeGreaterThan(0);
    }
  });

  it("pinning with the engines' KV-cache-aware router beats each engine's own load balancer on hits and prefill", () => {
    const result = simulate(workload(), { instances: 3, ranks: 4, cacheBlocks: 400 });
    expect(result.fleet).toEqual({ instances: 3, ranks_per_instance: 4, load_weight: 0.25, adp_config: { enable_kv_cache_aware_routing: true } });
    expect(result.ranks).toBe(12);
    const row = (kind: string) => result.policies.find((p) => p.policy === kind)!;
    expect(result.policies.map((p) => p.policy)).toEqual(["adp", "instance", "none"]);
    expect(row("adp").prefix_hit_ratio).toBeGreaterThan(row("none").prefix_hit_ratio + 0.05);
    expect(row("adp").prefill_tokens).toBeLessThan(row("none").prefill_tokens);
    expect(row("adp").fleet!.pinned_share).toBe(1);
    expect(row("none").fleet!.pinned_share).toBe(0);
    // Phase 1 follows the cache as TensorRT-LLM's centralized router does: every session shares the
    // system prompt, and at this load (0.25 a request against a matched block) one engine takes them all.
    for (const p of result.policies) expect(p.fleet!.instance_requests_max_over_mean).toBe(3);
  });

  it("is deterministic, and the phase-2 config and load weight change the decisions", () => {
    const strip = (r: ReturnType<typeof simulate>) => JSON.stringify(toJson(r), (k, v) => (k === "route_us_per_request" ? 0 : v));
    const a = simulate(workload(), { instances: 2, ranks: 4, rankRouting: ["adp"] });
    const b = simulate(workload(), { instances: 2, ranks: 4, rankRouting: ["adp"] });
    expect(strip(a)).toBe(strip(b));
    const conversation = simulate(workload(), { instances: 2, ranks: 4, rankRouting: ["adp"], config: { kv_cache_routing_conversation_affinity: true } });
    expect(conversation.fleet!.adp_config).toEqual({ kv_cache_routing_conversation_affinity: true });
    expect(strip(conversation)).not.toBe(strip(a));
    const heavy = simulate(workload(), { instances: 2, ranks: 4, rankRouting: ["instance"], loadWeight: 40 });
    const light = simulate(workload(), { instances: 2, ranks: 4, rankRouting: ["instance"], loadWeight: 0 });
    expect(heavy.policies[0]!.prefix_hit_ratio).not.toBe(light.policies[0]!.prefix_hit_ratio);
    // A heavy load weight spreads what the cache would gather on one engine.
    expect(heavy.policies[0]!.fleet!.instance_requests_max_over_mean).toBeLessThan(1.2);
    expect(light.policies[0]!.fleet!.instance_requests_max_over_mean).toBe(2);
  });

  it("ends when an engine's clock runs to Infinity (costs past what a double holds), as one engine does", () => {
    const trace = multiTurnWorkload({ seed: 3, sessions: 4 });
    const result = simulate(trace, { instances: 2, ranks: 2, prefillMsPerToken: 1e308, rankRouting: ["adp", "none"] });
    expect(result.policies.map((p) => p.policy)).toEqual(["adp", "none"]);
    for (const p of result.policies) expect(p.ttft_ms.p99).toBe(Infinity);
  });

  it("refuses what does not apply to a fleet, naming it", () => {
    const trace = workload();
    expect(() => simulate(trace, { instances: 2, replicas: 2 })).toThrow(/replicas: does not apply with instances/);
    expect(() => simulate(trace, { instances: 2, indexUpdates: "events" })).toThrow(/indexUpdates: does not apply/);
    expect(() => simulate(trace, { instances: 2, policies: ["default"] })).toThrow(/policies: does not apply/);
    expect(() => simulate(trace, { instances: 0 })).toThrow(/instances: must be an integer in \[1, 1024\]/);
    expect(() => simulate(trace, { instances: 2, rankRouting: ["pinned" as never] })).toThrow(/rankRouting: must list kinds among adp, instance, none/);
  });

  it("the CLI: a table naming the engines and each row's pinning; flags that need --instances refused", () => {
    const run = (...args: string[]) => spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "60", ...args], { encoding: "utf8" });
    const ok = run("--instances", "2", "--ranks", "2", "--rank-routing", "adp,none");
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/requests on 2 engines × 2 ranks/);
    expect(ok.stdout).toMatch(/^adp\s/m);
    expect(ok.stdout).toMatch(/^none\s/m);
    expect(ok.stdout).not.toMatch(/^instance\s/m);
    expect(ok.stdout).toMatch(/none: requests per engine max\/mean [\d.]+, pinned 0\.0%/);
    const json = JSON.parse(run("--instances", "2", "--ranks", "2", "--index-updates", "routing", "--json").stdout);
    expect(json.fleet.instances).toBe(2);
    for (const [args, message] of [
      [["--rank-routing", "adp"], /--rank-routing: applies only with --instances/],
      [["--load-weight", "1"], /--load-weight: applies only with --instances/],
      [["--instances", "2", "--replicas", "2"], /--replicas: does not apply with --instances/],
      [["--instances", "2", "--rank-routing", "adp,pinned"], /--rank-routing: must list kinds among adp, instance, none, got "pinned"/],
      [["--instances", "0"], /--instances: must be an integer in \[1, 1024\]/],
      [["--instances", "2", "--index-updates", "events"], /--index-updates: only routing applies with --instances/],
    ] as const) {
      const r = run(...args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(message);
    }
  });
});
