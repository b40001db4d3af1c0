// The simulator end to end: trace parsing, the serving model's figures on the
// bundled trace and the multi-turn workload, determinism, the CLI.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { simulate, toJson } from "../src/simulate/run.js";
import { optimumHitRatio, parseTrace, TraceError } from "../src/simulate/trace.js";
import { multiTurnWorkload } from "../src/simulate/workload.js";
import { expectCliRefusals } from "./support/refusals.js";

const bundled = fileURLToPath(new URL("../traces/mooncake_conversation_trace.jsonl.gz", import.meta.url));
const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
const loadBundled = () => parseTrace(gunzipSync(readFileSync(bundled)).toString("utf8"), "mooncake_conversation_trace.jsonl");

describe("traces", () => {
  it("reads the bundled Mooncake trace: 12,031 requests, optimum hit ratio 0.366", () => {
    const trace = loadBundled();
    expect(trace.requests).toHaveLength(12031);
    expect(optimumHitRatio(trace)).toBeCloseTo(0.366, 3);
  });

  it("names the file and line of a malformed request", () => {
    const good = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}';
    const cases: [string, RegExp][] = [
      [`${good}\n{"timestamp": 1, "input_length": 600}`, /t\.jsonl:2: "output_length"/],
      [`${good}\nnot json`, /t\.jsonl:2: not JSON/],
      [`${good}\n{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1]}`, /t\.jsonl:2: "hash_ids" holds 1 blocks/],
      [`{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`, /t\.jsonl:2: arrivals must not go back/],
      [`{"arrival_ms": 0, "input_length": 3, "output_length": 5, "tokens": [1, 2]}`, /t\.jsonl:1: "tokens" holds 2 ids/],
    ];
    for (const [text, message] of cases) expect(() => parseTrace(text, "t.jsonl")).toThrow(message);
    expect(() => parseTrace("\n", "t.jsonl")).toThrow(TraceError);
  });

  it("reads the native shape with token ids and conversation ids", () => {
    const t = parseTrace('{"arrival_ms": 0, "input_length": 4, "output_length": 2, "tokens": [1,2,3,4], "conversation_id": "c"}\n{"arrival_ms": 9, "input_length": 5, "output_length": 2, "tokens": [1,2,3,4,5], "conversation_id": "c"}', "n.jsonl", 2);
    expect(t.requests[1]!.blocks.slice(0, 2)).toEqual(t.requests[0]!.blocks);
    expect(t.requests[1]!.blocks).toHaveLength(3);
    expect(t.requests[0]!.conversationId).toBe("c");
  });
});

describe("simulate", () => {
  it("bundled trace at 8 ranks: KV-cache-aware ≥ 95% of the optimum with prefill max/mean ≤ 1.15; round-robin far below", () => {
    const result = simulate(loadBundled(), { ranks: 8, policies: ["round_robin", "kv_cache_aware"] });
    const [rr, kv] = result.policies;
    expect(kv!.prefix_hit_ratio / result.optimum_prefix_hit_ratio).toBeGreaterThanOrEqual(0.95);
    expect(kv!.prefill_work_max_over_mean).toBeLessThanOrEqual(1.15);
    expect(rr!.prefix_hit_ratio / result.optimum_prefix_hit_ratio).toBeLessThan(0.5);
    expect(kv!.prefill_tokens).toBeLessThan(rr!.prefill_tokens);
  });

  it("multi-turn workload: conversation affinity ≥ 90% of that workload's optimum, for every placement", () => {
    const result = simulate(multiTurnWorkload({ seed: 3, sessions: 150 }), { ranks: 8 });
    for (const p of result.policies.filter((x) => x.policy.startsWith("conversation:"))) {
      expect(p.prefix_hit_ratio / result.optimum_prefix_hit_ratio, p.policy).toBeGreaterThanOrEqual(0.9);
    }
  });

  it("is deterministic: the same trace and options give the same figures (router cost aside)", () => {
    const trace = multiTurnWorkload({ seed: 9, sessions: 60 });
    const strip = (r: ReturnType<typeof simulate>) => (toJson(r) as { policies: { route_us_per_request?: number }[] }).policies.map(({ route_us_per_request: _, ...p }) => p);
    expect(strip(simulate(trace, { ranks: 4 }))).toEqual(strip(simulate(trace, { ranks: 4 })));
    expect(multiTurnWorkload({ seed: 9, sessions: 60 })).toEqual(trace);
  });

  it("learning from engine KV events reaches the same reuse as learning from routing on the bundled trace", () => {
    const trace = loadBundled();
    const [byRouting] = simulate(trace, { policies: ["kv_cache_aware"], indexUpdates: "routing" }).policies;
    const [byEvents] = simulate(trace, { policies: ["kv_cache_aware"], indexUpdates: "events", cacheBlocks: 30000 }).policies;
    expect(byEvents!.prefix_hit_ratio).toBeGreaterThan(0.9 * byRouting!.prefix_hit_ratio);
  });
});

describe("adp-router simulate (CLI)", () => {
  it("--json prints one object with the documented fields", () => {
    const out = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "40", "--ranks", "4", "--json"], { encoding: "utf8" });
    expect(out.status).toBe(0);
    const json = JSON.parse(out.stdout);
    expect(Object.keys(json)).toEqual(["trace", "ranks", "requests", "optimum_prefix_hit_ratio", "index_updates", "policies"]);
    expect(json.index_updates).toEqual({ mode: "routing" });
    expect(json.policies.map((p: { policy: string }) => p.policy)).toEqual([
      "round_robin", "default", "kv_cache_aware", "conversation:round_robin", "conversation:least_queued", "conversation:least_tokens",
    ]);
    expect(Object.keys(json.policies[0])).toEqual(["policy", "prefix_hit_ratio", "prefill_tokens", "prefill_work_max_over_mean", "requests_max_over_mean", "ttft_ms", "route_us_per_request", "overloaded", "overload_reason"]);
    expect(json.policies.map((p: { overloaded: boolean }) => p.overloaded)).toEqual(Array(6).fill(false));
  });

  it("stops cleanly on a malformed trace line, naming the file and line; rejects bad options by name", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "adp-sim-"));
    const file = path.join(dir, "bad.jsonl");
    writeFileSync(file, '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n{"timestamp": 1}\n');
    const out = spawnSync(process.execPath, [cli, "simulate", "--trace", file], { encoding: "utf8" });
    expect(out.status).toBe(1);
    expect(out.stderr).toContain(`${file}:2:`);
    const bad = spawnSync(process.execPath, [cli, "simulate", "--ranks", "0"], { encoding: "utf8" });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--ranks: must be an integer in [1, 4096], got \"0\"");
    expect(spawnSync(process.execPath, [cli, "simulate", "--config", '{"enable_kv_cache_routing": true}'], { encoding: "utf8" }).stderr).toContain("did you mean");
  });

  it("--index-updates events with --event-* flags: the JSON states the event model and counts each policy's batches; the table says it in words", () => {
    const args = ["simulate", "--workload", "multi-turn", "--sessions", "40", "--ranks", "4", "--cache-blocks", "400", "--policies", "round_robin,kv_cache_aware", "--index-updates", "events", "--event-delay", "250", "--event-drop", "0.2", "--event-seed", "3", "--event-stale", "5000"];
    const out = spawnSync(process.execPath, [cli, ...args, "--json"], { encoding: "utf8" });
    expect(out.status, out.stderr).toBe(0);
    const json = JSON.parse(out.stdout);
    expect(json.index_updates).toEqual({ mode: "events", event_delay_ms: 250, event_drop_rate: 0.2, event_replay: false, event_seed: 3, event_stale_ms: 5000 });
    const [rr, kv] = json.policies;
    expect(rr.event_feed).toBeUndefined(); // round-robin has no index
    const f = kv.event_feed;
    expect(f.batches_dropped).toBeGreaterThan(0);
    expect(f.gaps).toBeGreaterThan(0);
    expect(f.batches_published).toBe(f.batches_delivered + f.batches_dropped + f.batches_in_flight_at_end);
    const again = JSON.parse(spawnSync(process.execPath, [cli, ...args, "--json"], { encoding: "utf8" }).stdout);
    const noCost = (j: { policies: { route_us_per_request: number }[] }) => j.policies.map(({ route_us_per_request: _, ...p }) => p);
    expect(noCost(again)).toEqual(noCost(json));
    const table = spawnSync(process.execPath, [cli, ...args], { encoding: "utf8" }).stdout;
    expect(table).toContain("index updates: engine KV events, delivered 250 ms after publication; 20% of batches lost (seed 3), no replay");
    expect(table).toMatch(new RegExp(`kv_cache_aware event batches: ${f.batches_published.toLocaleString("en-US")} published, .* ${f.batches_dropped.toLocaleString("en-US")} dropped`));
    // A plain routing run's table is as it was: no event lines.
    expect(spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "10", "--ranks", "2"], { encoding: "utf8" }).stdout).not.toContain("index updates");
  });

  it("rejects bad --event-* flags by name with exit status 2, and event flags without --index-updates events", () => {
    const cases: [string[], string][] = [
      [["--index-updates", "events", "--event-drop", "1.5"], '--event-drop: must be a number from 0 to 1, got "1.5"'],
      [["--index-updates", "events", "--event-drop", "lots"], '--event-drop: must be a number from 0 to 1, got "lots"'],
      [["--index-updates", "events", "--event-delay=-5"], '--event-delay: must be a non-negative number of milliseconds, got "-5"'],
      [["--index-updates", "events", "--event-seed", "1.5"], '--event-seed: must be an integer, got "1.5"'],
      [["--index-updates", "events", "--event-stale", "0"], '--event-stale: must be a positive number of milliseconds, got "0"'],
      [["--event-delay", "50"], "--event-delay: applies only with --index-updates events"],
      [["--index-updates", "routing", "--event-replay"], "--event-replay: applies only with --index-updates events"],
      [["--index-updates", "events", "--event-replay=yes"], "event-replay"],
      [["--index-updates", "events", "--event-dely", "50"], "--event-dely"],
    ];
    expectCliRefusals(cli, ["simulate", "--workload", "multi-turn", "--sessions", "5"], cases);
  });

  it("--report writes a self-contained page with the three charts", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "adp-sim-"));
    const file = path.join(dir, "r.html");
    const out = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "30", "--ranks", "4", "--report", file], { encoding: "utf8" });
    expect(out.status).toBe(0);
    const html = readFileSync(file, "utf8");
    expect(html.match(/<svg /g)!.length).toBe(2 + 6);
    expect(html).not.toMatch(/<script|https?:\/\/(?!www\.w3)/);
    expect(html).toContain("learned from the router's own placements");
    const events = path.join(dir, "e.html");
    const withEvents = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "30", "--ranks", "4", "--policies", "kv_cache_aware", "--index-updates", "events", "--event-drop", "0.1", "--report", events], { encoding: "utf8" });
    expect(withEvents.status).toBe(0);
    const page = readFileSync(events, "utf8");
    expect(page).toContain("learned from engine KV events");
    expect(page).toContain("10% of batches lost (seed 1)");
    expect(page).toMatch(/kv_cache_aware event batches: [\d,]+ published/);
  });
});
