// `simulate --prefill P --decode M`: a disaggregated deployment against an
// aggregated one of as many servers. Every request is prefilled once and
// decoded once; its first token comes after its prefill, its KV transfer and
// a decode step; the prefill pool's router decides the hits; decode runs free
// of prefill interference; determinism; the refusals.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { parse } from "yaml";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { formatTable, simulate, toJson } from "../src/simulate/run.js";
import { multiTurnWorkload } from "../src/simulate/workload.js";
import { runPools } from "../src/simulate/pools.js";
import { adpRouter } from "../src/simulate/router-sides.js";
import { DEFAULT_ENGINE, pathsOf } from "../src/simulate/engine.js";
import { evaluateConfig, tunePools } from "../src/simulate/tune.js";
import { parseAttentionDpConfig } from "../src/config.js";
import { loadGatewayConfig } from "../gateway/src/index.js";

const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
const workload = () => multiTurnWorkload({ seed: 5, sessions: 160 });

describe("simulate with prefill and decode pools", () => {
  it("prefills every request once on the prefill pool and decodes it once on the decode pool; its first token follows its transfer", () => {
    const trace = workload();
    const paths = pathsOf(trace.requests);
    const opts = { ...DEFAULT_ENGINE, ranks: 2, cacheBlocks: 400 };
    const layout = { prefill: 2, decode: 3, transferMsPerToken: 0.05 };
    const run = runPools(trace.requests, paths, trace.blockTokens, opts, layout, adpRouter("kv_cache_aware", 4, trace.blockTokens, undefined, null), adpRouter("default", 6, trace.blockTokens, undefined, null));
    const n = trace.requests.length;
    expect(run.requestsPerRank).toHaveLength(4);
    expect(run.requestsPerRank.reduce((a, b) => a + b, 0)).toBe(n);
    expect(run.decodeRequestsPerRank).toHaveLength(6);
    expect(run.decodeRequestsPerRank.reduce((a, b) => a + b, 0)).toBe(n);
    trace.requests.forEach((req, i) => expect(run.ttftMs[i]).toBeGreaterThan(layout.transferMsPerToken * req.inputLength + opts.iterationBaseMs));
    const mean = trace.requests.reduce((t, r) => t + r.inputLength, 0) / n;
    expect(run.meanTransferMs).toBeCloseTo(layout.transferMsPerToken * mean, 6);

    const whole = runPools(trace.requests, paths, trace.blockTokens, opts, { whole: 5 }, adpRouter("kv_cache_aware", 10, trace.blockTokens, undefined, null), null);
    expect(whole.requestsPerRank).toHaveLength(10);
    expect(whole.decodeRequestsPerRank).toEqual([]);
    expect(whole.meanTransferMs).toBe(0);
  });

  it("the prefill pool's router decides the hits; decode free of prefill runs at the decode step's pace; aggregated pays prefill between tokens", () => {
    // Unbounded caches: a prefill request leaves its rank at its first token, so the KV-cache-aware router follows the shared
    // system prompt onto one rank (its load term never grows); with a small cache that rank thrashes (docs/disaggregation.md).
    const result = simulate(workload(), { prefill: 2, decode: 2, ranks: 2 });
    expect(result.pools).toEqual({ prefill_servers: 2, decode_servers: 2, aggregated_servers: 4, ranks_per_server: 2, transfer_ms_per_token: 0.01, decode_config: {} });
    expect(result.policies.map((p) => p.policy)).toEqual(["aggregated:kv_cache_aware", "aggregated:round_robin", "disaggregated:kv_cache_aware", "disaggregated:round_robin"]);
    const row = (name: string) => result.policies.find((p) => p.policy === name)!;
    expect(row("disaggregated:kv_cache_aware").prefix_hit_ratio).toBeGreaterThan(row("disaggregated:round_robin").prefix_hit_ratio + 0.05);
    expect(row("aggregated:kv_cache_aware").prefix_hit_ratio).toBeGreaterThan(row("aggregated:round_robin").prefix_hit_ratio + 0.05);
    // A decode server never prefills a prompt: its tokens come one iteration apart, of the base cost and its batch's decode work.
    const disaggregated = row("disaggregated:kv_cache_aware").pools!.itl_ms;
    expect(disaggregated.p99).toBeLessThan(DEFAULT_ENGINE.iterationBaseMs + 2);
    expect(row("aggregated:kv_cache_aware").pools!.itl_ms.p99).toBeGreaterThan(disaggregated.p99);
    expect(formatTable(result)).toMatch(/disaggregated:kv_cache_aware: time between output tokens p50/);
  });

  it("kv_cache_routing_account_for_in_transfer: a prefill rank counts what it handed over until its decode begins, so a shared prompt no longer draws every request to one rank", () => {
    const run = (config: object) => simulate(workload(), { prefill: 2, decode: 2, ranks: 2, cacheBlocks: 400, policies: ["kv_cache_aware"], layouts: ["disaggregated"], config }).policies[0]!;
    const plain = run({});
    const counted = run({ kv_cache_routing_account_for_in_transfer: true });
    expect(plain.requests_max_over_mean).toBe(4); // every request on one of the four prefill ranks
    expect(counted.requests_max_over_mean).toBeLessThan(3);
    expect(counted.prefix_hit_ratio).toBeGreaterThan(plain.prefix_hit_ratio);
    // Round robin has no such state: the setting changes nothing there.
    const rr = (config: object) => simulate(workload(), { prefill: 2, decode: 2, ranks: 2, cacheBlocks: 400, policies: ["round_robin"], layouts: ["disaggregated"], config }).policies[0]!;
    expect(rr({ kv_cache_routing_account_for_in_transfer: true }).ttft_ms).toEqual(rr({}).ttft_ms);
  });

  it("the decode pool runs the router its config selects", () => {
    const conversation = simulate(workload(), { prefill: 1, decode: 2, ranks: 2, policies: ["kv_cache_aware"], layouts: ["disaggregated"], decodeConfig: { kv_cache_routing_conversation_affinity: true } });
    const plain = simulate(workload(), { prefill: 1, decode: 2, ranks: 2, policies: ["kv_cache_aware"], layouts: ["disaggregated"] });
    expect(conversation.pools!.decode_config).toEqual({ kv_cache_routing_conversation_affinity: true });
    expect(conversation.policies[0]!.pools!.itl_ms).not.toEqual(plain.policies[0]!.pools!.itl_ms);
    expect(() => simulate(workload(), { prefill: 1, decode: 1, decodeConfig: { kv_cache_routing_load_balance_weight: "x" } as never })).toThrow(/kv_cache_routing_load_balance_weight/);
  });

  it("is deterministic; the transfer time moves the first token", () => {
    const strip = (r: ReturnType<typeof simulate>) => JSON.stringify(toJson(r), (k, v) => (k === "route_us_per_request" ? 0 : v));
    const a = simulate(workload(), { prefill: 1, decode: 1, ranks: 2, policies: ["kv_cache_aware"] });
    const b = simulate(workload(), { prefill: 1, decode: 1, ranks: 2, policies: ["kv_cache_aware"] });
    expect(strip(a)).toBe(strip(b));
    const slow = simulate(workload(), { prefill: 1, decode: 1, ranks: 2, policies: ["kv_cache_aware"], transferMsPerToken: 1 });
    expect(slow.policies[1]!.ttft_ms.p50).toBeGreaterThan(a.policies[1]!.ttft_ms.p50);
    expect(slow.policies[0]!.ttft_ms).toEqual(a.policies[0]!.ttft_ms); // aggregated: no transfer
  });

  it("refuses a half layout and what does not apply to it", () => {
    expect(() => simulate(workload(), { prefill: 2 })).toThrow(/decode: is needed/);
    expect(() => simulate(workload(), { prefill: 0, decode: 1 })).toThrow(/prefill: must be an integer in \[1, 1024\]/);
    expect(() => simulate(workload(), { prefill: 1, decode: 1, transferMsPerToken: -1 })).toThrow(/transferMsPerToken/);
    expect(() => simulate(workload(), { prefill: 1, decode: 1, replicas: 2 })).toThrow(/replicas: does not apply/);
    expect(() => simulate(workload(), { prefill: 1, decode: 1, indexUpdates: "events" })).toThrow(/indexUpdates: does not apply/);
    const half = spawnSync(process.execPath, [cli, "simulate", "--decode", "2"], { encoding: "utf8" });
    expect(half.status).toBe(2);
    expect(half.stderr).toMatch(/--prefill: is needed with --decode/);
    const stray = spawnSync(process.execPath, [cli, "simulate", "--transfer-ms-per-token", "1"], { encoding: "utf8" });
    expect(stray.status).toBe(2);
    expect(stray.stderr).toMatch(/--transfer-ms-per-token: applies only with --prefill/);
  });

  it("the command prints the four rows with their time between tokens", () => {
    const out = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "80", "--prefill", "1", "--decode", "1", "--ranks", "2"], { encoding: "utf8" });
    expect(out.status).toBe(0);
    for (const row of ["aggregated:kv_cache_aware", "aggregated:round_robin", "disaggregated:kv_cache_aware", "disaggregated:round_robin"]) expect(out.stdout).toContain(row);
    expect(out.stdout).toMatch(/on 2 servers × 2 ranks/);
    expect(out.stdout).toMatch(/disaggregated:round_robin: time between output tokens p50 [\d.]+ ms/);
  });

  it("tune searches both pools: the prefill pool's config on the defaults' decode, then the decode pool's on the best prefill; each figure is simulate's disaggregated row", async () => {
    const trace = multiTurnWorkload({ seed: 2, sessions: 60 });
    const engine = { prefill: 1, decode: 2, ranks: 2, cacheBlocks: 300 };
    const result = await tunePools(trace, { budget: 10, engine });
    expect(result.prefill.evaluated + result.decode.evaluated).toBe(10);
    const bestPrefill = (result.prefill.best ?? result.prefill.baseline).config;
    for (const p of result.prefill.points) {
      const row = simulate(trace, { ...engine, policies: ["config"], layouts: ["disaggregated"], config: p.config }).policies[0]!;
      expect(p.metrics.ttft_p90).toBe(row.ttft_ms.p90);
    }
    for (const p of result.decode.points) expect(p.metrics).toEqual(evaluateConfig(trace, { ...engine, pool: "decode", other: bestPrefill }, p.config));
    expect(JSON.stringify(await tunePools(trace, { budget: 10, engine }))).toBe(JSON.stringify(result));
    await expect(tunePools(trace, { budget: 10, engine: { ranks: 2 } })).rejects.toThrow(/engine.prefill and engine.decode/);
  });

  it("tune --prefill --decode on worker threads gives the figures of one thread, and --out holds both pools' blocks", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "tune-pools-"));
    const args = ["tune", "--workload", "multi-turn", "--sessions", "60", "--prefill", "1", "--decode", "1", "--ranks", "2", "--budget", "8"];
    const one = spawnSync(process.execPath, [cli, ...args, "--workers", "1", "--json"], { encoding: "utf8" });
    const two = spawnSync(process.execPath, [cli, ...args, "--workers", "2", "--json"], { encoding: "utf8" });
    expect(one.status).toBe(0);
    const strip = (text: string) => { const { engine: _e, ...r } = JSON.parse(text); return r; };
    expect(strip(two.stdout)).toEqual(strip(one.stdout));
    const out = path.join(dir, "pools.yaml");
    const text = spawnSync(process.execPath, [cli, ...args, "--out", out], { encoding: "utf8" });
    expect(text.status).toBe(0);
    expect(text.stdout).toMatch(/== the prefill pool/);
    expect(text.stdout).toMatch(/Paste into the gateway's disaggregation\.decode, beside policy: default/);
    const saved = parse(readFileSync(out, "utf8")) as { disaggregation: { prefill: { policy: string; attention_dp_config: object }; decode: { policy: string; attention_dp_config: object } } };
    expect([saved.disaggregation.prefill.policy, saved.disaggregation.decode.policy]).toEqual(["default", "default"]);
    // Merged into a gateway file, each pool runs exactly the router tune scored.
    const gateway = loadGatewayConfig({ object: { disaggregation: { protocol: "vllm", ...saved.disaggregation }, upstreams: [{ url: "http://a:1", role: "prefill" }, { url: "http://b:1", role: "decode" }] } as never });
    expect(gateway.disaggregation!.prefill.attentionDp).toEqual(parseAttentionDpConfig(saved.disaggregation.prefill.attention_dp_config));
    expect(gateway.disaggregation!.decode.attentionDp).toEqual(parseAttentionDpConfig(saved.disaggregation.decode.attention_dp_config));
    expect(saved.disaggregation.prefill.attention_dp_config).toEqual(strip(one.stdout).prefill.best.config);
    expect(saved.disaggregation.decode.attention_dp_config).toEqual(strip(one.stdout).decode.best.config);
    rmSync(dir, { recursive: true });
    const refused = spawnSync(process.execPath, [cli, ...args, "--instances", "2"], { encoding: "utf8" });
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(/--instances: does not apply with --prefill/);
  }, 60_000);
});
