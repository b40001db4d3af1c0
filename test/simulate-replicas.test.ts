// `simulate --replicas`: gateway replicas sharing one stream of entries. The
// spread of requests and the stream's order and delay (on fake routers), one
// replica reproducing the single-gateway figures exactly, what sharing buys on
// the bundled trace and the multi-turn workload, the entry sizes against the
// gateway's own encoder, and the flags.
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { Encoder } from "@msgpack/msgpack";
import { describe, expect, it } from "vitest";
import type { RouteRequest } from "../src/batch.js";
import { encodeEntry } from "../gateway/src/replication/entry-codec.js";
import { BATCH_ID_LENGTH, bindingEntryBytes, kvEventsEntryBytes, learnEntryBytes, msgpackSize, ORIGIN_LENGTH, UPSTREAM_URL_LENGTH } from "../src/simulate/entry-size.js";
import { ReplicatedSide } from "../src/simulate/replicas.js";
import type { ReplicaRouter } from "../src/simulate/router-sides.js";
import { simulate, toJson, type PolicyResult, type SimulateOptions } from "../src/simulate/run.js";
import { parseTrace, spreadArrivals, type Trace } from "../src/simulate/trace.js";
import { multiTurnWorkload } from "../src/simulate/workload.js";
import { expectCliRefusals, expectRefusals } from "./support/refusals.js";

const bundled = fileURLToPath(new URL("../traces/mooncake_conversation_trace.jsonl.gz", import.meta.url));
const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
let bundledTrace: Trace | undefined;
/** The bundled Mooncake trace, read once for the file. */
const loadBundled = () => (bundledTrace ??= parseTrace(gunzipSync(readFileSync(bundled)).toString("utf8"), "mooncake_conversation_trace.jsonl"));

/** A policy's figures without the router's wall-clock cost (the only thing that differs between identical runs). */
/** (The overload verdict is not a figure of these runs: none is overloaded.) */
const figures = ({ route_us_per_request: _, overloaded: _o, overload_reason: _why, ...p }: PolicyResult) => p;
/** A run's figures by policy, without the sharing report. */
const outcome = (trace: Trace, options: SimulateOptions) => simulate(trace, options).policies.map(({ sync: _, ...p }) => figures(p));

/** The six policies on the bundled trace as the simulator gave them before replicas existed (README's first table, to the digit). */
const BUNDLED_BEFORE_REPLICAS = [
  { policy: "round_robin", prefix_hit_ratio: 0.1363, prefill_tokens: 124669920, prefill_work_max_over_mean: 1.0442, requests_max_over_mean: 1.0001, ttft_ms: { p50: 171.8, p90: 673.9, p99: 1968.9 } },
  { policy: "default", prefix_hit_ratio: 0.1787, prefill_tokens: 118407851, prefill_work_max_over_mean: 1.9373, requests_max_over_mean: 1.1996, ttft_ms: { p50: 171.8, p90: 644.9, p99: 1679.7 } },
  { policy: "kv_cache_aware", prefix_hit_ratio: 0.3603, prefill_tokens: 91594992, prefill_work_max_over_mean: 1.0879, requests_max_over_mean: 1.046, ttft_ms: { p50: 170.2, p90: 505, p99: 1571.6 } },
  { policy: "conversation:round_robin", prefix_hit_ratio: 0.1387, prefill_tokens: 124310277, prefill_work_max_over_mean: 1.0836, requests_max_over_mean: 1.0001, ttft_ms: { p50: 171.8, p90: 673.9, p99: 1945.5 } },
  { policy: "conversation:least_queued", prefix_hit_ratio: 0.1308, prefill_tokens: 125477179, prefill_work_max_over_mean: 1.2712, requests_max_over_mean: 1.2508, ttft_ms: { p50: 171.9, p90: 675.4, p99: 2018.1 } },
  { policy: "conversation:least_tokens", prefix_hit_ratio: 0.1348, prefill_tokens: 124884265, prefill_work_max_over_mean: 1.0727, requests_max_over_mean: 1.028, ttft_ms: { p50: 171.5, p90: 655.9, p99: 1726.4 } },
];

/** The multi-turn workload (seed 1, 400 sessions) before replicas existed: conversation bindings matter here. */
const MULTI_TURN_BEFORE_REPLICAS = [
  { policy: "round_robin", prefix_hit_ratio: 0.5531, prefill_tokens: 3509376, prefill_work_max_over_mean: 1.0776, requests_max_over_mean: 1, ttft_ms: { p50: 33.6, p90: 81.1, p99: 124.1 } },
  { policy: "default", prefix_hit_ratio: 0.5847, prefill_tokens: 3260672, prefill_work_max_over_mean: 1.7026, requests_max_over_mean: 1.9594, ttft_ms: { p50: 31.7, p90: 77.8, p99: 125.2 } },
  { policy: "kv_cache_aware", prefix_hit_ratio: 0.8044, prefill_tokens: 1535872, prefill_work_max_over_mean: 1.8028, requests_max_over_mean: 1.8376, ttft_ms: { p50: 18.1, p90: 30.9, p99: 76.2 } },
  { policy: "conversation:round_robin", prefix_hit_ratio: 0.8481, prefill_tokens: 1192512, prefill_work_max_over_mean: 1.1425, requests_max_over_mean: 1.0886, ttft_ms: { p50: 17.1, p90: 23.7, p99: 31.8 } },
  { policy: "conversation:least_queued", prefix_hit_ratio: 0.8481, prefill_tokens: 1192512, prefill_work_max_over_mean: 2.3253, requests_max_over_mean: 2.3358, ttft_ms: { p50: 17.2, p90: 23.8, p99: 32.5 } },
  { policy: "conversation:least_tokens", prefix_hit_ratio: 0.8481, prefill_tokens: 1192512, prefill_work_max_over_mean: 1.1142, requests_max_over_mean: 1.0996, ttft_ms: { p50: 17.1, p90: 23.7, p99: 30.4 } },
];

/** Two ranks, both empty. */
const idle = () => [0, 1].map(() => ({ numActiveRequests: 0, numActiveTokens: 0 }));

/**
 * A replica router that sends every request to rank `rank`, learning and
 * binding nothing itself, and records what it was given and taught.
 */
function fakeRouter(rank: number) {
  const log: string[] = [];
  const bindings = new Map<string, number>();
  const router: ReplicaRouter = {
    discountCached: false,
    eventCounts: null,
    onEngineBatch: null,
    learn: (r, keys) => void log.push(`learn ${keys.join(".")}@${r}`),
    bind: (key, r) => void bindings.set(key, r),
    route(states, _cap, requests) {
      log.push(`route ${requests.map((q) => q.id).join(",")} on ${states.map((s) => s.numActiveRequests).join("/")}`);
      return requests.map(() => rank);
    },
  };
  return { router, log, bindings };
}

/** Request `id` with blocks [id] of a conversation (or none). */
const req = (id: number, conversationId: string | null = null): RouteRequest => ({ id, numTokens: 64, blockKeys: [id], conversationId });

describe("ReplicatedSide: spread, order and delay of the stream", () => {
  it("spreads requests round-robin by arrival index; every replica routes its share on the same loads", () => {
    const fakes = [fakeRouter(0), fakeRouter(1), fakeRouter(0)];
    const side = new ReplicatedSide(fakes.map((f) => f.router), { replicas: 3, sync: "none", delayMs: 0 });
    const states = [{ numActiveRequests: 4, numActiveTokens: 9 }, { numActiveRequests: 7, numActiveTokens: 9 }];
    expect(side.route(states, 8, [0, 1, 2, 3, 4, 5, 6].map((i) => req(i)), 0)).toEqual([0, 1, 0, 0, 1, 0, 0]);
    expect(fakes.map((f) => f.log)).toEqual([["route 0,3,6 on 4/7"], ["route 1,4 on 4/7"], ["route 2,5 on 4/7"]]);
  });

  it("another replica's learn entry arrives delayMs later, never within the iteration that made it, in stream order", () => {
    const [a, b] = [fakeRouter(0), fakeRouter(1)];
    const side = new ReplicatedSide([a.router, b.router], { replicas: 2, sync: "stream", delayMs: 50 });
    side.route(idle(), 8, [req(0), req(1), req(2)], 0); // replica 0 places 0 and 2, replica 1 places 1
    side.route(idle(), 8, [req(3)], 49);
    expect(a.log.filter((l) => l.startsWith("learn"))).toEqual([]);
    expect(b.log.filter((l) => l.startsWith("learn"))).toEqual([]);
    side.route(idle(), 8, [req(4), req(5)], 50);
    expect(a.log.filter((l) => l.startsWith("learn"))).toEqual(["learn 1@1"]);
    expect(b.log.filter((l) => l.startsWith("learn"))).toEqual(["learn 0@0", "learn 2@0"]);
    // Applied before the replica routes: the stream is read at the start of an iteration.
    expect(b.log.slice(-3)).toEqual(["learn 0@0", "learn 2@0", "route 5 on 0/0"]);
    // Delay 0: an entry still reaches the others only in a later iteration, not the one that made it.
    const [c, d] = [fakeRouter(0), fakeRouter(1)];
    const same = new ReplicatedSide([c.router, d.router], { replicas: 2, sync: "stream", delayMs: 0 });
    same.route(idle(), 8, [req(0), req(1)], 10);
    expect(d.log).toEqual(["route 1 on 0/0"]);
    same.route(idle(), 8, [req(2), req(3)], 10);
    expect(d.log).toEqual(["route 1 on 0/0", "learn 0@0", "route 3 on 0/0"]);
  });

  it("sync none: the others' entries never arrive, and nothing is counted as published", () => {
    const [a, b] = [fakeRouter(0), fakeRouter(1)];
    const side = new ReplicatedSide([a.router, b.router], { replicas: 2, sync: "none", delayMs: 0 });
    side.route(idle(), 8, [req(0, "c"), req(1, "c")], 0);
    side.route(idle(), 8, [req(2)], 1e12);
    expect([...a.log, ...b.log].filter((l) => l.startsWith("learn"))).toEqual([]);
    expect(a.bindings.size + b.bindings.size).toBe(0);
    expect(side.report(3, 1000)).toMatchObject({ entries: 0, bytes: 0, bindings_moved: 0 });
  });

  it("bindings: one a placement; the latest to arrive holds, so two replicas binding one conversation at once end with each other's", () => {
    const [a, b] = [fakeRouter(0), fakeRouter(1)];
    const side = new ReplicatedSide([a.router, b.router], { replicas: 2, sync: "stream", delayMs: 5 });
    side.route(idle(), 8, [req(0, "conv"), req(1, "conv")], 0); // replica 0 binds conv to rank 0, replica 1 to rank 1
    side.route(idle(), 8, [req(2)], 5);
    expect(a.bindings.get("conv")).toBe(1);
    expect(b.bindings.get("conv")).toBe(0);
    const report = side.report(3, 1000);
    // Each replica: a learn entry (its number 0), then the binding (1); replica 0 then learns request 2 (2), still in flight.
    expect(report).toMatchObject({ binding_entries: 2, learn_entries: 3, bindings_moved: 2, entries: 5, entries_in_flight_at_end: 1 });
    expect(report.bytes).toBe(2 * (learnEntryBytes(2, 0) + bindingEntryBytes("conv", 1)) + learnEntryBytes(2, 2));
  });
});

describe("entry sizes, against the gateway's encoder", () => {
  const origin = "gw-1#0123abcd";
  const url = "http://10.0.1.17:8000";
  const ns = { loraTaskId: null, cacheSalt: null };
  it("the example origin and URL are the lengths the estimate assumes", () => {
    expect([origin.length, url.length]).toEqual([ORIGIN_LENGTH, UPSTREAM_URL_LENGTH]);
  });

  it("learn entries: block hashes 8 bytes each, every bin and counter width", () => {
    for (const blocks of [1, 31, 32, 8191, 8192, 40000]) {
      for (const counter of [0, 127, 128, 255, 256, 65535, 65536, 2 ** 32]) {
        const bytes = encodeEntry({ origin, counter, url, entry: { op: "learn-blocks", upstream: 0, hashes: new Uint32Array(2 * blocks).fill(7), namespace: ns } });
        expect(learnEntryBytes(blocks, counter), `${blocks} blocks, counter ${counter}`).toBe(bytes.length);
      }
    }
  });

  it("binding and kv-events entries", () => {
    for (const key of ["session-1", "session-399", "k".repeat(40), "ü".repeat(20)]) {
      expect(bindingEntryBytes(key, 300)).toBe(encodeEntry({ origin, counter: 300, url, entry: { op: "bind", upstream: 0, key } }).length);
    }
    const events = [
      { event_id: 0, data: { type: "stored", parent_hash: null, blocks: [1, 2, 3].map((block_hash) => ({ block_hash })) }, attention_dp_rank: 3 },
      { event_id: 0, data: { type: "stored", parent_hash: 2 ** 40, blocks: Array.from({ length: 40 }, (_, i) => ({ block_hash: 1000 + i })) }, attention_dp_rank: 3 },
      { event_id: 0, data: { type: "removed", block_hashes: [5, 6] }, attention_dp_rank: 3 },
    ];
    const id = "tcp://10.0.1.17:5557|12345|1764547200.123456|q2Lk3dZ1pUe0a9Xw7vB4nA";
    expect(id.length).toBe(BATCH_ID_LENGTH);
    expect(kvEventsEntryBytes(events, 9)).toBe(encodeEntry({ origin, counter: 9, url, entry: { op: "kv-events", upstream: 0, events, id } }).length);
  });

  it("msgpackSize equals the encoded length of assorted values", () => {
    const encoder = new Encoder({ useBigInt64: true, ignoreUndefined: true });
    const values: unknown[] = [
      null, true, 0, 127, 128, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, Number.MAX_SAFE_INTEGER, -1, -32, -33, -128, -129, -32768, -32769, -(2 ** 31), -(2 ** 31) - 1,
      0.5, 2 ** 60, Number.NaN, 1n, "", "a".repeat(31), "a".repeat(32), "a".repeat(255), "a".repeat(256), "a".repeat(70000), "é€😀", new Uint8Array(255), new Uint8Array(256), new Uint8Array(70000),
      Array.from({ length: 15 }, () => 1), Array.from({ length: 16 }, () => 1), Array.from({ length: 70000 }, () => 1),
      { a: 1, b: undefined, c: [1, { d: "x" }] }, Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, i])),
    ];
    for (const v of values) expect(msgpackSize(v), String(v).slice(0, 30)).toBe(encoder.encode(v).length);
  });
});

describe("one replica is the single gateway", () => {
  it("bundled trace: replicas 1 (synced or not) gives every policy's figures of the simulator before replicas, to the digit", () => {
    const trace = loadBundled();
    expect(outcome(trace, {})).toEqual(BUNDLED_BEFORE_REPLICAS);
    expect(outcome(trace, { replicas: 1 })).toEqual(BUNDLED_BEFORE_REPLICAS);
    expect(outcome(trace, { replicas: 1, sync: "none" })).toEqual(BUNDLED_BEFORE_REPLICAS);
  });

  it("multi-turn workload (conversation bindings on every turn): the same", () => {
    expect(outcome(multiTurnWorkload(), { replicas: 1, syncDelayMs: 0 })).toEqual(MULTI_TURN_BEFORE_REPLICAS);
  });

  it("with engine events, lossy: the same as before replicas", () => {
    const [kv] = simulate(loadBundled(), { replicas: 1, policies: ["kv_cache_aware"], indexUpdates: "events", eventDropRate: 0.1 }).policies;
    expect(kv!.prefix_hit_ratio).toBe(0.3348);
    expect(kv!.prefill_tokens).toBe(95365646);
    expect(kv!.event_feed).toMatchObject({ batches_published: 9270, batches_dropped: 925, gaps: 826, placements_while_gapped: 3209, engine_view_blocks_at_end: 146760 });
  });
});

describe("what sharing buys", () => {
  it("is deterministic: the same flags give the same report (router cost aside)", () => {
    const trace = multiTurnWorkload({ seed: 4, sessions: 80 });
    const run = () => (toJson(simulate(trace, { ranks: 4, replicas: 3, syncDelayMs: 20 })) as { policies: PolicyResult[] }).policies.map(figures);
    expect(run()).toEqual(run());
  });

  it("bundled trace, kv_cache_aware: synced replicas keep far more reuse than independent ones, and a delay nothing outlives is independence", () => {
    const trace = loadBundled();
    const kv = (o: SimulateOptions) => simulate(trace, { policies: ["kv_cache_aware"], ...o }).policies[0]!;
    const one = kv({ replicas: 1 }).prefix_hit_ratio;
    for (const replicas of [2, 8]) {
      const synced = kv({ replicas });
      const none = kv({ replicas, sync: "none" });
      expect(synced.prefix_hit_ratio, `${replicas} replicas`).toBeGreaterThan(none.prefix_hit_ratio + 0.05);
      expect(synced.prefix_hit_ratio).toBeLessThanOrEqual(one);
      expect(synced.prefix_hit_ratio).toBeGreaterThan(0.95 * one);
    }
    const never = kv({ replicas: 8, syncDelayMs: 1e12 });
    expect(figures(never).prefix_hit_ratio).toBe(kv({ replicas: 8, sync: "none" }).prefix_hit_ratio);
    expect(never.sync!.entries_in_flight_at_end).toBe(never.sync!.entries);
    const minute = kv({ replicas: 8, syncDelayMs: 60_000 }).prefix_hit_ratio;
    expect(minute).toBeLessThan(kv({ replicas: 8 }).prefix_hit_ratio);
    expect(minute).toBeGreaterThan(kv({ replicas: 8, sync: "none" }).prefix_hit_ratio);
  });

  it("bundled trace with its 3-second ticks spread: 8 synced replicas at 5 ms keep at least 97% of one replica's hit ratio (independent ones do not)", () => {
    const trace = spreadArrivals(loadBundled());
    const kv = (o: SimulateOptions) => simulate(trace, { policies: ["kv_cache_aware"], ...o }).policies[0]!.prefix_hit_ratio;
    const one = kv({ replicas: 1 });
    expect(kv({ replicas: 8, syncDelayMs: 5 })).toBeGreaterThanOrEqual(0.97 * one);
    expect(kv({ replicas: 8, sync: "none" })).toBeLessThan(0.8 * one);
  });

  it("spreadArrivals: a tick's requests spread evenly until the next tick, in order; distinct times and the requests untouched", () => {
    const at = (arrivalMs: number, n: number) => ({ arrivalMs, inputLength: n, outputLength: 1, blocks: [n], conversationId: null });
    const trace: Trace = { name: "t", blockTokens: 512, requests: [at(0, 1), at(0, 2), at(0, 3), at(0, 4), at(3000, 5), at(5000, 6), at(9000, 7), at(9000, 8)] };
    const spread = spreadArrivals(trace);
    // Gaps 3000, 2000, 4000: the last tick spreads over their median, 3000.
    expect(spread.requests.map((r) => r.arrivalMs)).toEqual([0, 750, 1500, 2250, 3000, 5000, 9000, 10500]);
    expect(spread.requests.map((r) => r.inputLength)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(spread.name).toContain("spread");
    expect(trace.requests[1]!.arrivalMs).toBe(0); // the input is not changed
    const distinct = spreadArrivals({ ...trace, requests: [at(0, 1), at(10, 2)] });
    expect(distinct.requests.map((r) => r.arrivalMs)).toEqual([0, 10]);
    expect(spreadArrivals({ ...trace, requests: [] }).requests).toEqual([]);
  });

  it("multi-turn, conversation affinity: shared bindings keep conversations whole across replicas; independent replicas scatter them", () => {
    const trace = multiTurnWorkload();
    const [one] = outcome(trace, { replicas: 1, policies: ["conversation:least_tokens"] });
    const [synced] = simulate(trace, { replicas: 8, policies: ["conversation:least_tokens"] }).policies;
    const [none] = outcome(trace, { replicas: 8, sync: "none", policies: ["conversation:least_tokens"] });
    expect(synced!.prefix_hit_ratio).toBe(one!.prefix_hit_ratio);
    expect(none!.prefix_hit_ratio).toBeLessThan(0.8 * one!.prefix_hit_ratio);
    // A binding per turn; turns come 20-90 s apart, so at 5 ms none moves a conversation.
    expect(synced!.sync).toMatchObject({ binding_entries: trace.requests.length, learn_entries: 0, kv_event_entries: 0, bindings_moved: 0 });
    const [late] = simulate(trace, { replicas: 8, syncDelayMs: 60_000, policies: ["conversation:least_tokens"] }).policies;
    expect(late!.sync!.bindings_moved).toBeGreaterThan(0);
    expect(late!.prefix_hit_ratio).toBeLessThan(one!.prefix_hit_ratio);
    expect(late!.prefix_hit_ratio).toBeGreaterThan(none!.prefix_hit_ratio);
  });

  it("counts add up: an entry per placement, bytes and rates from the same counts; load-only policies share nothing", () => {
    const trace = multiTurnWorkload({ seed: 2, sessions: 120 });
    const result = simulate(trace, { ranks: 4, replicas: 4, rateScale: 2 });
    const spanS = (trace.requests.at(-1)!.arrivalMs - trace.requests[0]!.arrivalMs) / 2 / 1000;
    for (const p of result.policies) {
      const s = p.sync!;
      expect(s.entries, p.policy).toBe(s.learn_entries + s.binding_entries + s.kv_event_entries);
      expect(s.learn_entries, p.policy).toBe(p.policy === "kv_cache_aware" ? trace.requests.length : 0);
      expect(s.binding_entries, p.policy).toBe(p.policy.startsWith("conversation:") ? trace.requests.length : 0);
      expect(s.entries_per_second).toBeCloseTo(s.entries / spanS, 1);
      expect(s.bytes_per_routed_request).toBeCloseTo(s.bytes / trace.requests.length, 2);
      if (s.learn_entries > 0) {
        // At least the prompt's block hashes, 8 bytes a 32-token block, and at most ~60 bytes of fields around them.
        const hashBytes = trace.requests.reduce((n, r) => n + 8 * Math.floor(r.inputLength / 32), 0);
        expect(s.bytes).toBeGreaterThan(hashBytes);
        expect(s.bytes).toBeLessThan(hashBytes + 60 * s.learn_entries);
      }
    }
    expect(result.replicas).toEqual({ replicas: 4, spread: "round-robin", sync: "stream", sync_delay_ms: 5 });
  });

  it("with engine events: one kv-events entry per engine batch, however many replicas ingested it", () => {
    const trace = multiTurnWorkload({ seed: 2, sessions: 120 });
    const run = (replicas: number) => simulate(trace, { ranks: 4, replicas, policies: ["kv_cache_aware"], indexUpdates: "events" }).policies[0]!;
    const one = run(1);
    expect(one.sync!.kv_event_entries).toBe(one.event_feed!.batches_delivered);
    const four = run(4);
    // Each replica's subscription counts every batch: the stream holds each once.
    expect(four.sync!.kv_event_entries).toBeGreaterThanOrEqual((four.event_feed!.batches_delivered) / 4);
    expect(four.sync!.kv_event_entries).toBeLessThanOrEqual(four.event_feed!.batches_published / 4);
    expect(four.sync!.learn_entries).toBe(trace.requests.length);
  });
});

describe("bad replica options", () => {
  it("the library throws AdpInputError naming the option", () => {
    const trace = multiTurnWorkload({ sessions: 3 });
    const cases: [SimulateOptions, string][] = [
      [{ replicas: 0 }, "replicas"],
      [{ replicas: 1.5 }, "replicas"],
      [{ replicas: "2" as never }, "replicas"],
      [{ replicas: 1025 }, "replicas"],
      [{ sync: "nats" as never }, "sync"],
      [{ syncDelayMs: -1 }, "syncDelayMs"],
      [{ syncDelayMs: Number.NaN }, "syncDelayMs"],
      [{ syncDelayMs: Infinity }, "syncDelayMs"],
      [{ replicas: 2, sync: "none", syncDelayMs: 5 }, "syncDelayMs"],
    ];
    expectRefusals((options: SimulateOptions) => simulate(trace, options), cases);
  });

  it("the CLI rejects them with exit status 2 and the flag's name", () => {
    const cases: [string[], string][] = [
      [["--replicas", "0"], '--replicas: must be an integer in [1, 1024], got "0"'],
      [["--replicas", "two"], '--replicas: must be an integer in [1, 1024], got "two"'],
      [["--sync", "nats"], '--sync: must be stream or none, got "nats"'],
      [["--sync-delay-ms=-5"], '--sync-delay-ms: must be a non-negative number of milliseconds, got "-5"'],
      [["--replicas", "2", "--sync", "none", "--sync-delay-ms", "5"], "--sync-delay-ms: applies only with --sync stream"],
    ];
    expectCliRefusals(cli, ["simulate", "--workload", "multi-turn", "--sessions", "5"], cases);
  });

  it("the CLI's --replicas run: the JSON states the replicas and each policy's stream; the table says it in words", () => {
    const args = ["simulate", "--workload", "multi-turn", "--sessions", "40", "--ranks", "4", "--policies", "round_robin,kv_cache_aware,conversation:least_tokens", "--replicas", "3", "--sync-delay-ms", "20"];
    const out = spawnSync(process.execPath, [cli, ...args, "--json"], { encoding: "utf8" });
    expect(out.status, out.stderr).toBe(0);
    const json = JSON.parse(out.stdout);
    expect(Object.keys(json)).toEqual(["trace", "ranks", "requests", "optimum_prefix_hit_ratio", "index_updates", "replicas", "policies"]);
    expect(json.replicas).toEqual({ replicas: 3, spread: "round-robin", sync: "stream", sync_delay_ms: 20 });
    expect(json.policies[1].sync.learn_entries).toBe(json.requests);
    const table = spawnSync(process.execPath, [cli, ...args], { encoding: "utf8" }).stdout;
    expect(table).toContain("replicas: 3 gateway replicas, requests spread over them round-robin in arrival order, each taking the others' entries 20 ms after they were made");
    expect(table).toMatch(/kv_cache_aware stream: [\d,]+ entries \([\d,]+ learn\), 1\.000 a routed request/);
    expect(table).toMatch(/conversation:least_tokens stream: [\d,]+ entries \([\d,]+ binding\)/);
    expect(table).not.toContain("round_robin stream");
    // Without replica flags the table and JSON are as they were.
    const plain = JSON.parse(spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "10", "--ranks", "2", "--json"], { encoding: "utf8" }).stdout);
    expect(plain.replicas).toBeUndefined();
    expect(plain.policies[0].sync).toBeUndefined();
  });
});
