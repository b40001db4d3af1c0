// `adp-router tune`: recommends an attention_dp_config for a trace and an engine
// shape. Reads the flags, runs the search (src/simulate/tune.ts) on a pool of
// worker threads, prints the best configs against TensorRT-LLM's defaults and the
// YAML block to paste, and writes --out, --json and --report.

import { accessSync, constants, statSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import path from "node:path";
import { readConfigOption } from "./config-file.js";
import { ENGINE_HELP, isCount, numberOption, parseCommand, progressBar, readEngine, readWorkload, WORKLOAD_AND_ENGINE_FLAGS, WORKLOAD_HELP, type WorkloadAndEngineValues } from "./args.js";
import { parseAttentionDpConfig, type AttentionDpConfigInput } from "../config.js";
import { routerKindFor } from "../router.js";
import { compareTunePoints, inlineEvaluator, MAX_TUNE_BUDGET, tune, tunePools, type PoolsTuneResult, type TuneEvaluator, type TuneShape } from "../simulate/tune.js";
import { TunePool } from "./tune-pool.js";
import { attentionDpConfigYaml, tuneReportHtml } from "../simulate/tune-report.js";
import { TUNE_OBJECTIVES, type TunedConfig, type TuneMetrics, type TuneObjective, type TuneResult } from "../simulate/tune-types.js";

/** The help text of `adp-router tune`. */
export const TUNE_USAGE = `Usage: adp-router tune [options]

Searches TensorRT-LLM's routers and their attention_dp_config parameters for the
config that serves a trace best on a simulated attention-DP engine, and prints it
against TensorRT-LLM's defaults with the YAML block to paste into
extra_llm_api_options.yaml. Deterministic: the same flags give the same answer.
\`adp-router simulate --config BEST.yaml --policies config\` with the same trace and
engine flags reproduces the figures it reports.

${WORKLOAD_HELP}
${ENGINE_HELP}
  --instances N               tune for N engines of --ranks ranks each behind the gateway, which
                              pins each request's rank with the engines' ADP router: the config is
                              that router's (phase 2 adp; simulate --instances N --rank-routing adp)
  --load-weight X             with --instances: phase 1's weight of a request of load (0.25)
  --prefill N --decode M      tune a disaggregated deployment's two pools (simulate --prefill N
                              --decode M, its disaggregated row): the prefill pool's config first
                              (half the budget, decode on the defaults), then the decode pool's
  --transfer-ms-per-token X   with --prefill: KV transfer time per prompt token (0.01)
  --config FILE|JSON          the attention_dp_config you run now (JSON or YAML, bare or under
                              attention_dp_config: as in extra_llm_api_options.yaml, - for
                              standard input): simulated too and shown beside the best
  --objective NAME            what to optimise (ttft_p90): ttft_p50, ttft_p90, ttft_p99,
                              prefill_imbalance (all minimised) or hit_ratio (maximised)
  --max-prefill-imbalance X   only recommend configs whose prefill max/mean is at most X
  --min-hit-ratio X           only recommend configs whose prefix hit ratio is at least X
  --budget N                  simulations to run at most, the baseline included (64)
  --search-seed N             seed of the search's sampling (1)
  --workers N                 worker threads (this machine's cores: ${availableParallelism()})
  --out FILE.yaml             write the recommended attention_dp_config there
  --json                      print one JSON object instead of the table
  --report FILE.html          also write an HTML report of every evaluated config
  -h, --help                  print this help
`;

/** How many of the best configs the table shows (then the best of each router kind not among them). */
const TABLE_ROWS = 3;

/** `adp-router tune [options]`; resolves to the exit status. */
export async function tuneCommand(args: string[]): Promise<number> {
  const parsed = parseCommand(
    args,
    {
      ...WORKLOAD_AND_ENGINE_FLAGS,
      config: { type: "string" },
      objective: { type: "string" },
      "max-prefill-imbalance": { type: "string" },
      "min-hit-ratio": { type: "string" },
      budget: { type: "string" },
      "search-seed": { type: "string" },
      workers: { type: "string" },
      out: { type: "string" },
      instances: { type: "string" },
      "load-weight": { type: "string" },
      prefill: { type: "string" },
      decode: { type: "string" },
      "transfer-ms-per-token": { type: "string" },
      json: { type: "boolean", default: false },
      report: { type: "string" },
    },
    TUNE_USAGE,
    false,
  );
  if (parsed === null) return 0;
  const values = parsed.values as WorkloadAndEngineValues & {
    [K in "config" | "objective" | "max-prefill-imbalance" | "min-hit-ratio" | "budget" | "search-seed" | "workers" | "out" | "report" | "instances" | "load-weight" | "prefill" | "decode" | "transfer-ms-per-token"]?: string;
  } & { json: boolean };
  const engine: TuneShape = { ...readEngine(values), ...readFleetShape(values), ...readPoolShape(values) };
  const objective = (values.objective ?? "ttft_p90") as TuneObjective;
  if (!(TUNE_OBJECTIVES as readonly string[]).includes(objective)) throw new RangeError(`--objective: must be one of ${TUNE_OBJECTIVES.join(", ")}, got ${JSON.stringify(values.objective)}`);
  const maxImbalance = numberOption(values, "max-prefill-imbalance", (v) => v >= 1, "a number of at least 1 (max/mean is never below 1)");
  const minHit = numberOption(values, "min-hit-ratio", (v) => v >= 0 && v <= 1, "a number from 0 to 1");
  const budget = numberOption(values, "budget", (v) => isCount(v) && v <= MAX_TUNE_BUDGET, `an integer in [1, ${MAX_TUNE_BUDGET}]`) ?? 64;
  const seed = numberOption(values, "search-seed", (v) => Number.isInteger(v) && v >= 0 && v <= 0xffffffff, "an integer in [0, 4294967295]") ?? 1;
  // More threads than simulations would idle.
  const workers = Math.min(budget, numberOption(values, "workers", (v) => isCount(v) && v <= 256, "an integer in [1, 256]") ?? availableParallelism());
  // Where the results go is checked before the search, not found unwritable after minutes of it.
  for (const flag of ["out", "report"] as const) if (values[flag] !== undefined) checkWritable(values[flag]!, `--${flag}`);
  const current = values.config === undefined ? undefined : readConfigOption(values.config, "--config");
  const trace = readWorkload(values);

  if (engine.prefill !== undefined) return tunePoolsCommand(args, values, engine, { objective, budget, seed, workers, maxImbalance, minHit, trace });
  const started = Date.now();
  // One worker is this thread: no pool to start, and the same figures (each stage's candidates depend only on earlier stages).
  const pool = workers > 1 ? new TunePool(new URL("./tune-worker.js", import.meta.url), workers, { trace, engine }) : null;
  const evaluate: TuneEvaluator = pool?.evaluate ?? inlineEvaluator(trace, engine);
  let result: TuneResult;
  try {
    const onProgress = progressBar(values.json, "simulations");
    result = await tune(
      trace,
      {
        objective,
        budget,
        seed,
        engine,
        ...(current ? { current } : {}),
        constraints: { ...(maxImbalance !== undefined ? { max_prefill_imbalance: maxImbalance } : {}), ...(minHit !== undefined ? { min_hit_ratio: minHit } : {}) },
        ...(onProgress ? { onProgress } : {}),
      },
      evaluate,
    );
  } finally {
    await pool?.close();
  }
  const seconds = (Date.now() - started) / 1000;
  const reproduce = reproduceCommand(values, values.out ?? "best.yaml", engine);
  // The results first: a file that cannot be written after all loses nothing printed.
  process.stdout.write(values.json ? JSON.stringify({ ...result, engine }) + "\n" : formatTune(result, seconds, workers, reproduce, values.out !== undefined));
  let status = 0;
  const write = (flag: string, file: string, text: string, what: string) => {
    try {
      writeFileSync(file, text);
      if (!values.json) process.stdout.write(`${what} written to ${file}\n`);
    } catch (error) {
      process.stderr.write(`adp-router tune: ${flag}: cannot write ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}\n`);
      status = 1;
    }
  };
  if (values.out !== undefined) {
    if (result.best !== null) write("--out", values.out, bestYaml(result, result.best, `adp-router tune ${args.map(shellWord).join(" ")}`.trim(), reproduce), "config");
    else process.stderr.write(`adp-router tune: --out: nothing written to ${values.out}: there is no config to recommend\n`);
  }
  if (values.report !== undefined) write("--report", values.report, tuneReportHtml(result), "report");
  if (result.best === null) {
    process.stderr.write(`adp-router tune: no config to recommend: ${result.infeasible_reason}\n`);
    return 1;
  }
  return status;
}

/**
 * Refuses (RangeError naming the flag) a path the results could not be
 * written to: a folder, or a file in a folder that does not exist or is not
 * writable. Nothing is created yet.
 */
function checkWritable(file: string, flag: string): void {
  let stat;
  try {
    stat = statSync(file);
  } catch {
    stat = null; // not there yet: its folder must be
  }
  if (stat?.isDirectory()) throw new RangeError(`${flag}: ${file} is a folder; give a file name`);
  try {
    accessSync(stat ? file : path.dirname(path.resolve(file)), constants.W_OK);
  } catch (error) {
    throw new RangeError(`${flag}: cannot write ${file}: ${(error as NodeJS.ErrnoException).code === "ENOENT" ? "its folder does not exist" : "not writable"}`);
  }
}

/** `word` as one shell word: as it is when it needs no quoting, else in single quotes. */
const shellWord = (word: string) => (/^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`);

// ── Output ─────────────────────────────────────────────────────────────────

/** The `simulate` command line that reproduces tune's figures for the config in `file`. */
function reproduceCommand(values: WorkloadAndEngineValues, file: string, shape: TuneShape): string {
  const flags: string[] = [];
  for (const key of Object.keys(WORKLOAD_AND_ENGINE_FLAGS) as (keyof typeof WORKLOAD_AND_ENGINE_FLAGS)[]) {
    const v = values[key];
    if (v === true) flags.push(`--${key}`);
    else if (typeof v === "string") flags.push(`--${key} ${shellWord(v)}`);
  }
  // A fleet's row is phase 2 adp's, the config every engine's router.
  const rows = shape.instances === undefined ? "--policies config" : `--instances ${shape.instances} --rank-routing adp${shape.loadWeight !== undefined ? ` --load-weight ${shape.loadWeight}` : ""}`;
  return `adp-router simulate --config ${shellWord(file)} ${rows}${flags.length > 0 ? " " + flags.join(" ") : ""}`;
}

/** The pools `--prefill N --decode M` describe (nothing without them). */
function readPoolShape(values: Record<string, string | boolean | undefined>): { prefill?: number; decode?: number; transferMsPerToken?: number } {
  const prefill = numberOption(values, "prefill", (v) => isCount(v) && v <= 1024, "an integer in [1, 1024]");
  const decode = numberOption(values, "decode", (v) => isCount(v) && v <= 1024, "an integer in [1, 1024]");
  const transferMsPerToken = numberOption(values, "transfer-ms-per-token", (v) => v >= 0 && v <= 1000, "a number in [0, 1000]");
  if (prefill === undefined && decode === undefined) {
    if (transferMsPerToken !== undefined) throw new RangeError("--transfer-ms-per-token: applies only with --prefill and --decode");
    return {};
  }
  if (prefill === undefined || decode === undefined) throw new RangeError(`--${prefill === undefined ? "prefill" : "decode"}: is needed with --${prefill === undefined ? "decode" : "prefill"} (a disaggregated deployment has both pools)`);
  for (const flag of ["instances", "config", "report"]) if (values[flag] !== undefined) throw new RangeError(`--${flag}: does not apply with --prefill and --decode`);
  return { prefill, decode, ...(transferMsPerToken !== undefined ? { transferMsPerToken } : {}) };
}

/** What a pools search takes from the flags already read. */
interface PoolsSearch {
  readonly objective: TuneObjective;
  readonly budget: number;
  readonly seed: number;
  readonly workers: number;
  readonly maxImbalance: number | undefined;
  readonly minHit: number | undefined;
  readonly trace: ReturnType<typeof readWorkload>;
}

/** `tune --prefill N --decode M`: both pools' searches (tunePools), each printed as one search is; resolves to the exit status. */
async function tunePoolsCommand(args: string[], values: WorkloadAndEngineValues & { out?: string; json: boolean }, engine: TuneShape, search: PoolsSearch): Promise<number> {
  const { trace, workers } = search;
  const started = Date.now();
  const workerPools: TunePool[] = [];
  let result: PoolsTuneResult;
  try {
    const onProgress = progressBar(values.json, "simulations");
    const evaluatorFor = (shape: TuneShape): TuneEvaluator => {
      if (workers <= 1) return inlineEvaluator(trace, shape);
      const pool = new TunePool(new URL("./tune-worker.js", import.meta.url), workers, { trace, engine: shape });
      workerPools.push(pool);
      return pool.evaluate;
    };
    const constraints = { ...(search.maxImbalance !== undefined ? { max_prefill_imbalance: search.maxImbalance } : {}), ...(search.minHit !== undefined ? { min_hit_ratio: search.minHit } : {}) };
    result = await tunePools(trace, { objective: search.objective, budget: search.budget, seed: search.seed, engine, constraints, ...(onProgress ? { onProgress } : {}) }, evaluatorFor);
  } finally {
    for (const pool of workerPools) await pool.close();
  }
  const seconds = (Date.now() - started) / 1000;
  const best = (r: TuneResult) => (r.best ?? r.baseline).config;
  const flags = reproduceCommand(values, "-", engine).replace(/^adp-router simulate --config - --policies config/, "");
  const layout = `--prefill ${engine.prefill} --decode ${engine.decode}${engine.transferMsPerToken !== undefined ? ` --transfer-ms-per-token ${engine.transferMsPerToken}` : ""}`;
  const reproduce = `adp-router simulate ${layout} --policies config --config ${shellWord(JSON.stringify(best(result.prefill)))} --decode-config ${shellWord(JSON.stringify(best(result.decode)))}${flags} (its disaggregated:config row)`;
  if (values.json) process.stdout.write(JSON.stringify({ ...result, engine }) + "\n");
  else {
    for (const pool of ["prefill", "decode"] as const) {
      process.stdout.write(`== the ${pool} pool${pool === "decode" ? " (the prefill pool on its best)" : " (the decode pool on TensorRT-LLM's defaults)"}\n`);
      process.stdout.write(formatTune(result[pool], seconds, workers, reproduce, true, `the gateway's disaggregation.${pool}, beside policy: default (so the block alone picks the router)`));
    }
  }
  if (values.out !== undefined) {
    // policy: default under each pool, so its block alone picks the router (as simulate --config runs it); the protocol is the user's.
    const yaml = `# adp-router tune ${args.map(shellWord).join(" ")}\n# Reproduce: ${reproduce}\n# Merge into the gateway file's disaggregation: section (which names the engines' protocol).\ndisaggregation:\n  prefill:\n    policy: default\n${indent(attentionDpConfigYaml(best(result.prefill)), 4)}  decode:\n    policy: default\n${indent(attentionDpConfigYaml(best(result.decode)), 4)}`;
    try {
      writeFileSync(values.out, yaml);
      if (!values.json) process.stdout.write(`config written to ${values.out}\n`);
    } catch (error) {
      process.stderr.write(`adp-router tune: --out: cannot write ${values.out}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}\n`);
      return 1;
    }
  }
  if (result.prefill.best === null || result.decode.best === null) {
    process.stderr.write(`adp-router tune: no config to recommend: ${(result.prefill.best === null ? result.prefill : result.decode).infeasible_reason}\n`);
    return 1;
  }
  return 0;
}

/** The fleet `--instances` describes (nothing without it; --load-weight alone refused). */
function readFleetShape(values: Record<string, string | boolean | undefined>): { instances?: number; loadWeight?: number } {
  const instances = numberOption(values, "instances", (v) => isCount(v) && v <= 1024, "an integer in [1, 1024]");
  const loadWeight = numberOption(values, "load-weight", (v) => v >= 0, "a non-negative number");
  if (instances === undefined && loadWeight !== undefined) throw new RangeError("--load-weight: applies only with --instances");
  return { ...(instances !== undefined ? { instances } : {}), ...(loadWeight !== undefined ? { loadWeight } : {}) };
}

/** The router settings of a config in a few words, for the table. */
function settings(config: AttentionDpConfigInput): string {
  const c = parseAttentionDpConfig(config);
  switch (routerKindFor(c)) {
    case "default":
      return "load balance only";
    case "conversation":
      return `${c.kvCacheRoutingNewConvPlacement}, fair share ×${c.kvCacheRoutingFairShareMultiplier}`;
    case "kv_cache_aware":
      return `β ${c.kvCacheRoutingLoadBalanceWeight}, threshold ${c.kvCacheRoutingMatchRateThreshold}, fair share ×${c.kvCacheRoutingFairShareMultiplier}${c.kvCacheRoutingColdStartWarmup ? ", warm-up" : ""}`;
  }
}

/** One table row's cells. */
function row(label: string, config: AttentionDpConfigInput, m: TuneMetrics): string[] {
  return [label, routerKindFor(parseAttentionDpConfig(config)), m.ttft_p50.toFixed(1), m.ttft_p90.toFixed(1), m.ttft_p99.toFixed(1), m.hit_ratio.toFixed(3), m.prefill_imbalance.toFixed(3), settings(config) + (m.overloaded ? " (overloaded)" : "")];
}

/** The figure `objective` names, with its unit. */
const describeObjective = (objective: TuneObjective, v: number) => (objective.startsWith("ttft") ? `${v.toFixed(1)} ms` : v.toFixed(4));

/** The terminal output: the best configs against the defaults, the change, the YAML, what it means. */
function formatTune(result: TuneResult, seconds: number, workers: number, reproduce: string, saved: boolean, target?: string): string {
  const better = result.direction === "min" ? "lower" : "higher";
  const sorted = [...result.points].filter((p) => p.feasible).sort(compareTunePoints(result.objective, result.direction));
  const kvDefaults = result.points.find((p) => p.stage === "defaults" && p.kind === "kv_cache_aware");
  // The best few, then the best of each router kind not among them: near-twins of the best say less than the runner-up router.
  const shown = sorted.slice(0, TABLE_ROWS);
  for (const kind of ["kv_cache_aware", "conversation"] as const) {
    const first = sorted.find((p) => p.kind === kind);
    if (first !== undefined && !shown.includes(first)) shown.push(first);
  }
  const rows = [
    ["", "router", "TTFT p50 ms", "p90", "p99", "hit ratio", "prefill max/mean", "settings"],
    ...shown.map((p) => row(p === sorted[0] ? "best" : `#${sorted.indexOf(p) + 1}`, p.config, p.metrics)),
    row("TensorRT-LLM defaults", result.baseline.config, result.baseline.metrics),
    ...(result.current ? [row("your config (--config)", result.current.config, result.current.metrics)] : []),
    ...(kvDefaults ? [row("kv_cache_aware as shipped", kvDefaults.config, kvDefaults.metrics)] : []),
  ];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const line = (r: string[]) => r.map((cell, c) => (c >= 2 && c <= 6 ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!))).join("  ").trimEnd();
  const table = [line(rows[0]!), widths.map((w) => "-".repeat(w)).join("  "), ...rows.slice(1).map(line)].join("\n");
  const constraints = Object.entries(result.constraints).map(([k, v]) => `${k} ${v}`).join(", ");
  const shape = result.instances === undefined ? `${result.ranks} ranks` : `${result.instances} engines × ${result.ranks} ranks, each request's rank pinned by the engines' ADP router (the config tuned)`;
  const header = `tune: trace ${result.trace}: ${result.requests} requests on ${shape}; objective ${result.objective} (${better} is better)${constraints ? `; constraints ${constraints}` : ""}
${result.evaluated} simulation${result.evaluated === 1 ? "" : "s"} on ${workers} worker${workers === 1 ? "" : "s"} in ${seconds.toFixed(1)} s

${table}
`;
  if (result.best === null) return `${header}\nNo config to recommend: ${result.infeasible_reason}.\n`;
  const b = result.best.metrics[result.objective] as number;
  const base = result.baseline.metrics[result.objective] as number;
  const change = base === 0 ? "" : ` (${b >= base ? "+" : ""}${(((b - base) / base) * 100).toFixed(1)}%)`;
  return `${header}
${result.objective}: ${describeObjective(result.objective, b)} with the best config against ${describeObjective(result.objective, base)} with TensorRT-LLM's defaults${change}.
The simulator is deterministic: running the same command again gives the same figures.

Paste into ${target ?? (result.instances === undefined ? "extra_llm_api_options.yaml" : "each of the gateway's upstreams (its attention_dp_config, which phase 2 adp runs)")}:

${indent(attentionDpConfigYaml(result.best.config), 2)}
What it sets:
${explain(result.best.config).map((l) => `  ${l}`).join("\n")}

Reproduce its figures${saved ? "" : " (save the block above as best.yaml, or pass --out)"}: ${reproduce}
`;
}

/** `text` with every line indented by `n` spaces. */
const indent = (text: string, n: number) => text.split("\n").map((l) => (l ? " ".repeat(n) + l : l)).join("\n");

/** What each field of a recommended config does, one line each, in users' words. */
function explain(config: AttentionDpConfigInput): string[] {
  const c = parseAttentionDpConfig(config);
  const kind = routerKindFor(c);
  if (kind === "default") return ["nothing: TensorRT-LLM's defaults (the load-balancing router) served this trace best"];
  if (kind === "conversation") {
    return [
      "kv_cache_routing_conversation_affinity: every turn of a conversation goes to the rank of its first turn",
      `kv_cache_routing_new_conv_placement: ${c.kvCacheRoutingNewConvPlacement}: how a new conversation (or a request without one) picks its rank`,
      `kv_cache_routing_fair_share_multiplier: ${c.kvCacheRoutingFairShareMultiplier}: a rank takes at most this many times its fair share of a batch`,
    ];
  }
  return [
    "enable_kv_cache_aware_routing: each request goes to the rank whose cache holds most of its prompt, traded against load",
    `kv_cache_routing_load_balance_weight: ${c.kvCacheRoutingLoadBalanceWeight}: how much a rank's load counts against the tokens it has cached (default 1; lower favours the cache)`,
    `kv_cache_routing_match_rate_threshold: ${c.kvCacheRoutingMatchRateThreshold}: a match counts only above this share of the prompt (default 0.1)`,
    `kv_cache_routing_fair_share_multiplier: ${c.kvCacheRoutingFairShareMultiplier}: a rank takes at most this many times its fair share of a batch (default 2)`,
    `kv_cache_routing_cold_start_warmup: ${c.kvCacheRoutingColdStartWarmup}: ${c.kvCacheRoutingColdStartWarmup ? "the first requests are spread over every rank so each caches the shared prefix" : "no round-robin warm-up (the default)"}`,
  ];
}

/** The --out file: a comment saying where it came from and how to check it, then the block. */
function bestYaml(result: TuneResult, best: TunedConfig, command: string, reproduce: string): string {
  const base = result.baseline.metrics;
  return `# ${command}
# ${result.objective} ${describeObjective(result.objective, best.metrics[result.objective] as number)} (TensorRT-LLM's defaults: ${describeObjective(result.objective, base[result.objective] as number)}) on ${result.trace}, ${result.ranks} ranks.
# Reproduce: ${reproduce}
${attentionDpConfigYaml(best.config)}`;
}
