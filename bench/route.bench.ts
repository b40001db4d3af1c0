// Route cost per request of the KV-cache-aware router, wasm core against plain
// TypeScript, at 8, 72 and 256 ranks with 256-request batches. Prints one JSON
// line per measurement (medians over many batches). Run: npm run bench
import { Bench } from "tinybench";
import { mulberry32 } from "../src/simulate/workload.js";
import { ConversationMap, createRouter, type RouteRequest } from "../src/index.js";
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

for (const numRanks of [8, 72, 256]) {
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

// Conversation affinity under churn: every request opens a new conversation, so
// once 65,536 sessions are bound each one evicts the least recent. The map alone
// is timed against the `Map`-front eviction it replaced (`keys().next()` walks
// over every entry deleted since the last rehash).
{
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
