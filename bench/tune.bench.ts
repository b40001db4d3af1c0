// How `adp-router tune` should spend its budget, measured (README "Choosing a search"):
//   1. coarse-to-fine against random search, same budget, three seeds, three objectives;
//   2. whether a prefix of the trace ranks configs as the whole trace does (what
//      successive halving on prefixes would rely on): Spearman's rank correlation of
//      each objective between the first 1/9 or 1/3 of the trace and all of it.
// Run: npm run build && node scripts/run-bench.mjs tune [budget]
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { gunzipSync } from "node:zlib";
import { parseTrace, type Trace } from "../src/simulate/trace.js";
import { compareTunePoints, tune } from "../src/simulate/tune.js";
import { TunePool } from "../src/cli/tune-pool.js";
import type { TuneObjective, TunePoint } from "../src/simulate/tune-types.js";

const budget = Number(process.argv[2] ?? 64);
const trace = parseTrace(gunzipSync(readFileSync(new URL("../../traces/mooncake_conversation_trace.jsonl.gz", import.meta.url))).toString("utf8"), "bundled", 512);
const worker = new URL("../../dist/tune-worker.js", import.meta.url);
const workers = availableParallelism();

/** A pool over `t`, closed after `f`. */
async function withPool<T>(t: Trace, f: (pool: TunePool) => Promise<T>): Promise<T> {
  const pool = new TunePool(worker, workers, { trace: t, engine: {} });
  try {
    return await f(pool);
  } finally {
    await pool.close();
  }
}

const objectives: TuneObjective[] = ["ttft_p90", "ttft_p99", "hit_ratio"];
console.log(`tune strategies on the bundled trace, budget ${budget}, ${workers} workers: best objective found (seeds 1, 2, 3)\n`);
console.log("objective   strategy         seed 1     seed 2     seed 3     s/run");
let coarse: readonly TunePoint[] = [];
for (const objective of objectives) {
  for (const strategy of ["coarse-to-fine", "random"] as const) {
    const found: string[] = [];
    let seconds = 0;
    for (const seed of [1, 2, 3]) {
      const t0 = performance.now();
      const result = await withPool(trace, (pool) => tune(trace, { objective, strategy, seed, budget }, pool.evaluate));
      seconds += (performance.now() - t0) / 1000;
      found.push(result.best === null ? "none" : String(result.best.metrics[objective]));
      if (coarse.length === 0) coarse = result.points.filter((p) => p.stage === "coarse");
    }
    console.log(`${objective.padEnd(10)}  ${strategy.padEnd(15)}  ${found.map((f) => f.padStart(9)).join("  ")}  ${(seconds / 3).toFixed(1).padStart(8)}`);
  }
}

/** Ranks of `xs` (ties share their mean rank). */
function ranks(xs: readonly number[]): number[] {
  const order = xs.map((x, i) => [x, i] as const).sort((a, b) => a[0] - b[0]);
  const r = new Array<number>(xs.length);
  for (let i = 0; i < order.length; ) {
    let j = i;
    while (j + 1 < order.length && order[j + 1]![0] === order[i]![0]) j++;
    for (let k = i; k <= j; k++) r[order[k]![1]] = (i + j) / 2;
    i = j + 1;
  }
  return r;
}

/** Spearman's rank correlation of two equally long series. */
function spearman(a: readonly number[], b: readonly number[]): number {
  const ra = ranks(a);
  const rb = ranks(b);
  const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
  const ma = mean(ra);
  const mb = mean(rb);
  let num = 0;
  let da = 0;
  let db = 0;
  for (let i = 0; i < ra.length; i++) {
    num += (ra[i]! - ma) * (rb[i]! - mb);
    da += (ra[i]! - ma) ** 2;
    db += (rb[i]! - mb) ** 2;
  }
  return num / Math.sqrt(da * db);
}

console.log(`\nDo trace prefixes rank configs as the whole trace does? ${coarse.length} coarse configs (seed 1), Spearman's rho against the whole trace\n`);
console.log("prefix    requests   " + objectives.map((o) => o.padStart(10)).join("") + "   best of whole trace, rank on prefix (by ttft_p90)");
for (const fraction of [1 / 9, 1 / 3]) {
  const prefix: Trace = { ...trace, requests: trace.requests.slice(0, Math.round(trace.requests.length * fraction)) };
  const metrics = await withPool(prefix, (pool) => pool.evaluate(coarse.map((p) => p.config)));
  const rhos = objectives.map((o) => spearman(coarse.map((p) => p.metrics[o] as number), metrics.map((m) => m[o] as number)));
  const wholeBest = [...coarse].sort(compareTunePoints("ttft_p90", "min"))[0]!;
  const onPrefix = coarse
    .map((p, i) => ({ ...p, id: p.id, metrics: metrics[i]!, objective: metrics[i]!.ttft_p90 }))
    .sort(compareTunePoints("ttft_p90", "min"))
    .findIndex((p) => p.id === wholeBest.id);
  console.log(`${fraction === 1 / 9 ? "1/9" : "1/3"}       ${String(prefix.requests.length).padStart(8)}   ${rhos.map((r) => r.toFixed(2).padStart(10)).join("")}   #${onPrefix + 1} of ${coarse.length}`);
}
