// Route cost per request of the KV-cache-aware router, wasm core against plain
// TypeScript, at 8, 72 and 256 ranks with 256-request batches; then the whole
// public call on batches shaped like real traffic (shared system prompts, token
// ids, prefixMatches for every rank; prompts from the bundled trace) with the
// per-rank arrays typed and plain. Prints one JSON line per measurement
// (medians over many batches). Run: npm run bench:route [-- SECTION], SECTION
// one of kv_route, realistic, conversation_churn (default: all).
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { Bench } from "tinybench";
import { mulberry32 } from "../src/simulate/workload.js";
import { ConversationMap, createRouter, type RouteInput, type RouteRequest } from "../src/index.js";
import { RoutingCore } from "../src/core.js";
import { oracleScoreKvAware, portScoreKvAware, type OracleKvRequest } from "../test/oracle/routing-loops.js";

const BATCH = 256;
const PROMPT = 2000;


interface Workload {
  name: string;
  counts: number[];
  tokens: number[];
  requests: { id: number; numTokens: number; matches: number[] }[];
}

/** Busy ranks with distinct loads; 40% of requests match 1–4 blocks-deep prefixes on a few ranks. */
function busy(numRanks: number): Workload {
  const rand = mulberry32(numRanks);
  const counts = Array.from({ length: numRanks }, () => Math.floor(rand() * 8));
  const tokens = counts.map((c) => c * PROMPT + Math.floor(rand() * 1000));
  const requests = Array.from({ length: BATCH }, (_, i) => {
    const matches = new Array(numRanks).fill(0);
    if (rand() < 0.4) for (let k = 0; k < 3; k++) matches[Math.floor(rand() * numRanks)] = 32 * Math.floor(1 + rand() * 60);
    return { id: 1_000_000 + i, numTokens: PROMPT - 200 + Math.floor(rand() * 400), matches };
  });
  return { name: "busy", counts, tokens, requests };
}

/** Idle ranks, no cache: every request ties on every rank, so every one pays the MT19937 shuffle. */
function idleTies(numRanks: number): Workload {
  return {
    name: "idle-ties",
    counts: new Array(numRanks).fill(0),
    tokens: new Array(numRanks).fill(0),
    requests: Array.from({ length: BATCH }, (_, i) => ({ id: 5_000_000_000 + i, numTokens: PROMPT, matches: new Array(numRanks).fill(0) })),
  };
}

const config = { enable_kv_cache_aware_routing: true };

/** Prints one JSON line per task of a finished run: `fields`, the task, its median µs per request of a BATCH-request call. */
function report(bench: Bench, fields: Record<string, unknown>): void {
  for (const task of bench.tasks) {
    const result = task.result as { latency?: { p50?: number; samplesCount?: number } } | undefined;
    const median = result?.latency?.p50 ?? NaN; // ms per batch
    console.log(JSON.stringify({ ...fields, impl: task.name, us_per_request_median: Number(((median * 1000) / BATCH).toFixed(3)), samples: result?.latency?.samplesCount ?? 0 }));
  }
}

/** The section to run (argv), or all. */
const only = process.argv[2];
/** Whether section `name` runs. */
const runs = (name: string): boolean => only === undefined || only === name;

for (const numRanks of runs("kv_route") ? [8, 72, 256] : []) {
  for (const w of [busy(numRanks), idleTies(numRanks)]) {
    const cap = 4096;
    const router = createRouter({ numRanks, attentionDp: config });
    const input = {
      rankStates: w.counts.map((c, r) => ({ numActiveRequests: c, numActiveTokens: w.tokens[r]! })),
      maxNumActiveRequests: cap,
      requests: w.requests.map((q): RouteRequest => ({ id: q.id, numTokens: q.numTokens, prefixMatches: q.matches })),
    };
    const oracleRequests: OracleKvRequest[] = w.requests.map((q) => ({ id: BigInt(q.id), numTokens: q.numTokens, matches: q.matches }));
    const core = new RoutingCore();
    const rows = w.requests.length + 1;
    const expected = router.route(input).assignments.flat().length;
    if (expected !== BATCH) throw new Error("benchmark batch not fully placed");

    let seen = 0;
    const hooked = createRouter({ numRanks, attentionDp: config, onDecision: () => void seen++ });
    const bench = new Bench({ time: 400, warmup: true, warmupTime: 100 });
    bench
      .add("route() wasm, whole public call", () => {
        router.route(input);
      })
      .add("route() wasm, whole public call, onDecision set", () => {
        hooked.route(input);
      })
      .add("scoring loop wasm", () => {
        const v = core.reserveKvBatch(numRanks, BATCH, rows);
        v.counts.set(w.counts);
        v.tokens.set(w.tokens);
        for (let i = 0; i < BATCH; i++) {
          const q = w.requests[i]!;
          v.matches.set(q.matches, (i + 1) * numRanks);
          v.requests[4 * i] = q.numTokens;
          v.requests[4 * i + 1] = q.id % 2 ** 32;
          v.requests[4 * i + 2] = Math.floor(q.id / 2 ** 32);
          v.requests[4 * i + 3] = i + 1;
        }
        core.scoreKvAware(BATCH, 2 * Math.ceil(BATCH / numRanks) + 8, 1.0, 0.1);
      })
      .add("scoring loop plain TS, same algorithm", () => {
        portScoreKvAware(Int32Array.from(w.counts), Float64Array.from(w.tokens), oracleRequests, 2 * Math.ceil(BATCH / numRanks) + 8, 1.0, 0.1);
      })
      .add("scoring loop plain TS, reference transcription (shuffle every request)", () => {
        oracleScoreKvAware(Int32Array.from(w.counts), Float64Array.from(w.tokens), oracleRequests, 2 * Math.ceil(BATCH / numRanks) + 8, 1.0, 0.1);
      });
    await bench.run();
    report(bench, { bench: "kv_route", workload: w.name, ranks: numRanks, batch: BATCH });
  }
}

// ---- realistic batches (issue #15) ----------------------------------------------------
//
// The whole public call on batches shaped like real traffic, at 72 ranks: token
// ids as a Uint32Array and prefixMatches for every rank. Each workload runs
// with prefixMatches as Uint32Arrays ("typed") and as plain number arrays
// ("plain"); tokens stay Uint32Arrays in both (as an engine passes them).

/** Ranks of the realistic workloads. */
const REAL_RANKS = 72;
/** Tokens per cached block (TensorRT-LLM's default tokens_per_block). */
const BLOCK = 32;

/** One realistic batch: the call as typed arrays, and the same call with plain per-rank arrays. */
interface RealBatch {
  typed: RouteInput;
  plain: RouteInput;
}

/** `input` with every request's prefixMatches as a plain array. */
function withPlainMatches(input: RouteInput): RouteInput {
  return { ...input, requests: input.requests.map((q) => ({ ...q, prefixMatches: Array.from(q.prefixMatches!) })) };
}

/** Busy ranks with distinct loads (as the busy workload). */
function busyStates(numRanks: number, rand: () => number): RouteInput["rankStates"] {
  return Array.from({ length: numRanks }, () => {
    const c = Math.floor(rand() * 8);
    return { numActiveRequests: c, numActiveTokens: c * PROMPT + Math.floor(rand() * 1000) };
  });
}

/**
 * 256 requests of `length()` tokens, each opening with one of four shared
 * 256-token system prompts and going on with its own tokens; prefixMatches
 * for every rank, about 30% of them non-zero (the system prompt, sometimes a
 * few blocks more), the rest 0.
 */
function sharedPrefix(numRanks: number, seed: number, idle: boolean, length: (rand: () => number) => number, matchShare: number): RealBatch {
  const rand = mulberry32(seed);
  const systems = Array.from({ length: 4 }, (_, s) => Uint32Array.from({ length: 256 }, (_, i) => 1000 + s * 7919 + i * 31));
  const requests = Array.from({ length: BATCH }, (_, i): RouteRequest => {
    const n = length(rand);
    const tokens = new Uint32Array(n);
    tokens.set(systems[Math.floor(rand() * 4)]!);
    for (let k = 256; k < n; k++) tokens[k] = Math.floor(rand() * 150_000);
    const prefixMatches = new Uint32Array(numRanks);
    for (let r = 0; r < numRanks; r++) if (rand() < matchShare) prefixMatches[r] = 256 + BLOCK * Math.floor(rand() < 0.2 ? rand() * 8 : 0);
    return { id: 7_000_000 + i, tokens, prefixMatches };
  });
  const rankStates = idle ? Array.from({ length: numRanks }, () => ({ numActiveRequests: 0, numActiveTokens: 0 })) : busyStates(numRanks, rand);
  const typed: RouteInput = { rankStates, maxNumActiveRequests: 4096, requests };
  return { typed, plain: withPlainMatches(typed) };
}

/** The bundled trace's prompts as block-key lists (hash_ids), in arrival order. */
function traceBlocks(): number[][] {
  const text = gunzipSync(readFileSync(new URL("../../traces/mooncake_conversation_trace.jsonl.gz", import.meta.url))).toString("utf8");
  return text.split("\n").filter((l) => l.trim() !== "").map((l) => (JSON.parse(l) as { hash_ids: number[] }).hash_ids);
}

/**
 * Batches of 256 consecutive prompts of the bundled trace, starting at
 * request 2,048: token ids derived from the hash_ids (512 tokens a block,
 * equal ids giving equal tokens, so shared prefixes stay shared), and
 * prefixMatches for every rank from a cache where each of the 2,048 earlier
 * prompts sits on rank (its index mod numRanks): a rank matches the blocks
 * of the prompt it holds in a row from the first, capped at the probe
 * `tokens[:-1]`.
 */
function traceBatches(numRanks: number, count: number): RealBatch[] {
  const prompts = traceBlocks();
  const WARM = 2048;
  const held = Array.from({ length: numRanks }, () => new Set<number>());
  for (let i = 0; i < WARM; i++) for (const h of prompts[i]!) held[i % numRanks]!.add(h);
  const rand = mulberry32(15);
  const batches: RealBatch[] = [];
  for (let b = 0; b < count; b++) {
    const requests = Array.from({ length: BATCH }, (_, i): RouteRequest => {
      const blocks = prompts[WARM + b * BATCH + i]!;
      // The trace gives blocks, not the last block's length: 1–512 tokens, from the seed.
      const n = (blocks.length - 1) * 512 + 1 + Math.floor(rand() * 512);
      const tokens = new Uint32Array(n);
      for (let k = 0; k < n; k++) tokens[k] = (Math.imul(blocks[k >> 9]!, 0x9e3779b1) + (k & 511)) >>> 0;
      const prefixMatches = new Uint32Array(numRanks);
      for (let r = 0; r < numRanks; r++) {
        let m = 0;
        while (m < blocks.length && held[r]!.has(blocks[m]!)) m++;
        prefixMatches[r] = Math.min(m * 512, Math.floor((n - 1) / BLOCK) * BLOCK);
      }
      return { id: 9_000_000 + b * BATCH + i, tokens, prefixMatches };
    });
    const typed: RouteInput = { rankStates: busyStates(numRanks, rand), maxNumActiveRequests: 4096, requests };
    batches.push({ typed, plain: withPlainMatches(typed) });
  }
  return batches;
}

if (runs("realistic")) {
  const numRanks = REAL_RANKS;
  const workloads: { name: string; batches: RealBatch[] }[] = [
    { name: "shared-prefix", batches: Array.from({ length: 8 }, (_, s) => sharedPrefix(numRanks, 1 + s, false, (rand) => 1000 + Math.floor(rand() * 2001), 0.3)) },
    // Idle ranks, equal lengths, no cache: every request ties on (score, load) and pays the shuffle.
    { name: "shared-prefix, all tie", batches: Array.from({ length: 8 }, (_, s) => sharedPrefix(numRanks, 101 + s, true, () => 2000, 0)) },
    { name: "trace", batches: traceBatches(numRanks, 8) },
  ];
  for (const w of workloads) {
    const router = createRouter({ numRanks, attentionDp: config });
    for (const b of w.batches) {
      const placed = router.route(b.typed).assignments.flat().length;
      const again = router.route(b.plain);
      if (placed !== BATCH || JSON.stringify(again) !== JSON.stringify(router.route(b.typed))) throw new Error(`${w.name}: batch not fully placed, or typed and plain differ`);
    }
    let next = 0;
    const bench = new Bench({ time: 1000, warmup: true, warmupTime: 200 });
    bench
      .add("route() whole public call, typed prefixMatches", () => {
        router.route(w.batches[next++ % w.batches.length]!.typed);
      })
      .add("route() whole public call, plain prefixMatches", () => {
        router.route(w.batches[next++ % w.batches.length]!.plain);
      });
    await bench.run();
    report(bench, { bench: "kv_route_realistic", workload: w.name, ranks: numRanks, batch: BATCH });
  }
}

// Conversation affinity under churn: every request opens a new conversation, so
// once 65,536 sessions are bound each one evicts the least recent. The map alone
// is timed against the `Map`-front eviction it replaced (`keys().next()` walks
// over every entry deleted since the last rehash).
if (runs("conversation_churn")) {
  const numRanks = 8;
  const router = createRouter({ numRanks, attentionDp: { kv_cache_routing_conversation_affinity: true } });
  const rankStates = Array.from({ length: numRanks }, () => ({ numActiveRequests: 0, numActiveTokens: 0 }));
  let next = 0;
  const batch = () => ({
    rankStates,
    maxNumActiveRequests: 4096,
    requests: Array.from({ length: BATCH }, (): RouteRequest => ({ id: next, numTokens: 512, conversationId: `conv-${next++}` })),
  });
  for (let i = 0; i < 300; i++) router.route(batch()); // 76,800 conversations: the map is full
  const map = new ConversationMap(65_536);
  const front = new Map<string, number>();
  for (let i = 0; i < 70_000; i++) {
    map.record(`c${i}`, i & 7);
    front.set(`c${i}`, i & 7);
    if (front.size > 65_536) front.delete(front.keys().next().value!);
  }
  let k = 70_000;
  const bench = new Bench({ time: 400, warmup: true, warmupTime: 100 });
  bench
    .add("route() conversation affinity, every request a new conversation", () => {
      router.route(batch());
    })
    .add("ConversationMap.record evicting the least recent (256 records)", () => {
      for (let i = 0; i < BATCH; i++) map.record(`c${k++}`, i & 7);
    })
    .add("Map front eviction, the baseline it replaced (256 records)", () => {
      for (let i = 0; i < BATCH; i++) {
        front.set(`c${k++}`, i & 7);
        if (front.size > 65_536) front.delete(front.keys().next().value!);
      }
    });
  await bench.run();
  report(bench, { bench: "conversation_churn", ranks: numRanks, sessions: 65_536 });
}
