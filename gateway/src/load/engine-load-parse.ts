// What an engine says of its own load, read from its metrics endpoint: per DP
// rank (the engine's own attention-DP or data-parallel ranks, not the
// gateway's), requests running and waiting, KV-cache usage and active prompt
// tokens when the engine gives them, and the engine's total. Pure functions
// that never throw: a body that cannot be read is a typed problem, counted by
// the scraper (engine-load.ts), never an exception.
//
// Formats:
// - vLLM, `GET /metrics` (Prometheus text, vllm/v1/metrics/loggers.py): the
//   gauges `vllm:num_requests_running`, `vllm:num_requests_waiting` and
//   `vllm:kv_cache_usage_perc` (a fraction despite its name; before vLLM 0.10
//   `vllm:gpu_cache_usage_perc`), labelled `model_name` and `engine` (the
//   engine index, which is the DP rank; V0 had no `engine` label: rank 0).
// - SGLang, `GET /metrics` (Prometheus text, python/sglang/srt/metrics/
//   collector.py): `sglang:num_running_reqs`, `sglang:num_queue_reqs`,
//   `sglang:token_usage`, labelled `model_name` and, with attention DP,
//   `dp_rank` (no label: rank 0).
// - TensorRT-LLM `trtllm-serve`, `GET /metrics` (docs/source/commands/
//   trtllm-serve.rst): a JSON list of iteration statistics, each serialized by
//   cpp/tensorrt_llm/executor/jsonSerialization.cpp (`numActiveRequests`,
//   `numQueuedRequests`, `kvCacheStats.{usedNumBlocks,maxNumBlocks,...}`,
//   `inflightBatchingStats`, ...). The list holds the iterations run since the
//   previous GET (the endpoint drains a queue), oldest first; with attention
//   DP, recent releases tag each row `attentionDpRank` (base_worker.py's
//   `_stats_serializer`; `rank` under TLLM_METRICS_ALL_RANKS=1). An empty list
//   means no iteration ran since the last scrape: an idle engine.
// - TensorRT-LLM's centralized router's `WorkerLoadReport`
//   (tensorrt_llm/serve/kv_cache_router/messages.py): `num_active_requests`,
//   `num_queued_requests`, `num_active_tokens` (0 from reporters that do not
//   supply it), `worker_id` ("instance" or "instance:rankN").

import { PrometheusPageParse, parsePrometheusTextStepped, type PrometheusParse, type PrometheusSample } from "./engine-load-prometheus.js";
import { JsonShape, jsonShapeProblem, MAX_JSON_DEPTH, MAX_JSON_ITEMS, MAX_JSON_STRINGS } from "../common/json-shape.js";

/** The engines whose load format is understood. */
export type EngineKind = "vllm" | "sglang" | "trtllm";

/** One DP rank's load inside an engine. */
export interface RankLoad {
  /** The engine's DP rank (vLLM's `engine` label; TensorRT-LLM's `attentionDpRank`). */
  readonly rank: number;
  /** The model it serves, when the format says (vLLM's `model_name`), else null. */
  readonly model: string | null;
  /** Requests in its running batch. */
  readonly running: number;
  /** Requests queued for it. */
  readonly waiting: number;
  /** Its KV cache's used fraction, in [0, 1], or null when not reported. */
  readonly kvUsage: number | null;
  /** Prompt tokens of its active requests (TensorRT-LLM's RankState unit), or null when not reported. */
  readonly activeTokens: number | null;
}

/** An engine's total over its ranks. */
export interface EngineLoad {
  /** Sums over the ranks. */
  readonly running: number;
  readonly waiting: number;
  /** The mean of the ranks that report it (as vLLM's own logger aggregates it), or null when none does. */
  readonly kvUsage: number | null;
  /** The sum when every rank reports it (a partial sum would understate), else null. */
  readonly activeTokens: number | null;
}

/** One scrape's reading of an engine. */
export interface EngineLoadReport {
  readonly engine: EngineKind;
  /** Its ranks, by model (null first) then rank. Empty: an idle TensorRT-LLM engine (no iteration since the last scrape). */
  readonly ranks: readonly RankLoad[];
  readonly total: EngineLoad;
}

/** Why a body could not be read as a load report. */
export type LoadProblemKind =
  /** Not the format at all: not Prometheus text, not JSON. */
  | "syntax"
  /** The format, without the metrics the load needs. */
  | "missing"
  /** A count that is not a non-negative integer (NaN requests, -1 waiting). */
  | "value"
  /** The metrics, arranged unexpectedly (an `engine` label that is not a rank, a row that is not an object). */
  | "shape";

/** A body that could not be read, and why (never holds the body beyond a short excerpt). */
export interface LoadProblem {
  readonly kind: LoadProblemKind;
  readonly message: string;
}

/** A body read as a report, or the problem that stopped it. */
export type LoadParse = { readonly ok: true; readonly report: EngineLoadReport } | { readonly ok: false; readonly problem: LoadProblem };

/** Options of {@link parseVllmMetrics}. */
export interface VllmParseOptions {
  /** Read only the series of this `model_name` (an endpoint that serves several); by default every series counts. */
  readonly model?: string;
}

/** The largest count believed (the router's own bound on a rank's requests). */
const MAX_COUNT = 2 ** 30;
/** The largest DP rank believed. */
const MAX_RANK = 2 ** 20;
/** How an engine's Prometheus page says its load: gauge names, the label naming the DP rank, how duplicate series add up. */
interface PrometheusDialect {
  readonly engine: "vllm" | "sglang";
  /** Requests in the running batch, and in the queue. */
  readonly running: string;
  readonly waiting: string;
  /** The KV cache's used fraction, under its current name and an older one (or the same). */
  readonly kvUsage: string;
  readonly kvUsageOld: string;
  /** The label naming the DP rank (absent: rank 0). */
  readonly rankLabel: string;
  /** Series of one (model, rank) that differ by other labels: "sum" (vLLM: one per API-server process), "max" (SGLang: one per pipeline stage, the same requests). */
  readonly combine: "sum" | "max";
}

/** vLLM (vllm/v1/metrics/loggers.py): `engine` is the DP rank; `gpu_cache_usage_perc` before vLLM 0.10 (0.10 served both). */
const VLLM: PrometheusDialect = { engine: "vllm", running: "vllm:num_requests_running", waiting: "vllm:num_requests_waiting", kvUsage: "vllm:kv_cache_usage_perc", kvUsageOld: "vllm:gpu_cache_usage_perc", rankLabel: "engine", combine: "sum" };
/**
 * SGLang (python/sglang/srt/metrics/collector.py, SchedulerMetricsCollector):
 * each DP rank's scheduler labels its gauges `dp_rank` (with attention DP) beside
 * model_name, engine_type, tp_rank, pp_rank and moe_ep_rank; `token_usage` is
 * the used fraction of its KV pool.
 */
const SGLANG: PrometheusDialect = { engine: "sglang", running: "sglang:num_running_reqs", waiting: "sglang:num_queue_reqs", kvUsage: "sglang:token_usage", kvUsageOld: "sglang:token_usage", rankLabel: "dp_rank", combine: "max" };

/** A failed parse. */
const problem = (kind: LoadProblemKind, message: string): LoadParse => ({ ok: false, problem: { kind, message } });
/** A received string cut to a bounded excerpt for a message (a body is never quoted whole). */
const excerpt = (s: string, max = 60) => (s.length > max ? `${s.slice(0, max)}...` : s);

/** One rank's readings as they accumulate over the series. */
interface RankAccumulator {
  readonly model: string | null;
  readonly rank: number;
  running: number | null;
  waiting: number | null;
  kv: number | null;
  kvOld: number | null;
}

/**
 * Reads vLLM's Prometheus page. Series of one (model, engine) pair that
 * differ by other labels (one per API-server process, in some
 * multiprocess setups) add up for the counts and give their largest KV
 * usage. A rank without both counts is a "missing" problem; a KV usage that
 * is NaN, infinite or outside [0, 1] is not reported (null).
 */
export function parseVllmMetrics(text: string, options: VllmParseOptions = {}): LoadParse {
  return parsePrometheusLoad(text, VLLM, options);
}

/**
 * Reads SGLang's Prometheus page, as parseVllmMetrics reads vLLM's: per
 * (model, dp_rank), the series of its pipeline stages or tensor ranks count
 * the same requests, so their largest value is taken.
 */
export function parseSglangMetrics(text: string, options: VllmParseOptions = {}): LoadParse {
  return parsePrometheusLoad(text, SGLANG, options);
}

/** Reads a Prometheus page in `dialect`. */
function parsePrometheusLoad(text: string, dialect: PrometheusDialect, options: VllmParseOptions): LoadParse {
  const load = new PageLoad(dialect, options);
  const page = new PrometheusPageParse(text, load.reads, load.take);
  page.step();
  return load.finish(page.result);
}

/**
 * A Prometheus page's samples in a dialect, summed per (model, DP rank) as
 * the parse reads them: a page's samples are not held (a 3.9 MiB page of
 * 23,293 ranks' series took 51-59 MiB of heap at its peak held whole, 32
 * read this way).
 */
class PageLoad {
  readonly #dialect: PrometheusDialect;
  readonly #options: VllmParseOptions;
  readonly #byRank = new Map<string, RankAccumulator>();
  /** The first problem a sample had (the samples after it are not read). */
  #problem: LoadParse | null = null;

  /** The loads `dialect` says, of `options.model` only when given. */
  constructor(dialect: PrometheusDialect, options: VllmParseOptions) {
    this.#dialect = dialect;
    this.#options = options;
  }

  /** Whether a sample of metric `name` is read (the parse holds nothing of the others). */
  readonly reads = (name: string): boolean => {
    const d = this.#dialect;
    return this.#problem === null && (name === d.running || name === d.waiting || name === d.kvUsage || name === d.kvUsageOld);
  };

  /** Adds one sample `reads` let through (the parse's keep) to its rank's sums. */
  readonly take = (s: PrometheusSample): void => {
    const d = this.#dialect;
    const model = s.labels.get("model_name") ?? null;
    if (this.#options.model !== undefined && model !== this.#options.model) return;
    const engine = s.labels.get(d.rankLabel);
    let rank = 0;
    if (engine !== undefined) {
      if (!/^\d{1,7}$/.test(engine) || Number(engine) > MAX_RANK) {
        this.#problem = problem("shape", `line ${s.line}: the ${d.rankLabel} label ${JSON.stringify(excerpt(engine))} is not a DP rank`);
        return;
      }
      rank = Number(engine);
    }
    const key = `${model === null ? "-" : `+${model}`}\u0000${rank}`;
    let acc = this.#byRank.get(key);
    if (acc === undefined) {
      acc = { model, rank, running: null, waiting: null, kv: null, kvOld: null };
      this.#byRank.set(key, acc);
    }
    if (s.name === d.running || s.name === d.waiting) {
      const count = asCount(s.value);
      if (count === null) this.#problem = problem("value", `line ${s.line}: ${s.name} is ${String(s.value)}, not a count of requests`);
      else if (s.name === d.running) acc.running = this.#add(acc.running, count);
      else acc.waiting = this.#add(acc.waiting, count);
    } else {
      const fraction = Number.isFinite(s.value) && s.value >= 0 && s.value <= 1 ? s.value : null;
      if (fraction === null) return;
      if (s.name === d.kvUsage) acc.kv = Math.max(acc.kv ?? 0, fraction);
      if (s.name === d.kvUsageOld) acc.kvOld = Math.max(acc.kvOld ?? 0, fraction);
    }
  };

  /** A rank's count so far and one more series of it, as the dialect adds them up. */
  #add(sum: number | null, count: number): number {
    return sum === null ? count : this.#dialect.combine === "sum" ? sum + count : Math.max(sum, count);
  }

  /** The ranks' loads once `page` is read whole: its syntax problem first, then the samples' first, then what is missing. */
  finish(page: PrometheusParse): LoadParse {
    const { running: RUNNING, waiting: WAITING } = this.#dialect;
    if (!page.ok) {
      const p = page.problem;
      return problem("syntax", `not Prometheus text: line ${p.line}: expected ${p.rule} (${page.problems} bad line${page.problems === 1 ? "" : "s"}): ${JSON.stringify(p.excerpt)}`);
    }
    if (this.#problem !== null) return this.#problem;
    const forModel = this.#options.model === undefined ? "" : ` for model ${JSON.stringify(excerpt(this.#options.model))}`;
    if (![...this.#byRank.values()].some((a) => a.running !== null)) return problem("missing", `no ${RUNNING} series${forModel}`);
    const ranks: RankLoad[] = [];
    for (const a of this.#byRank.values()) {
      const where = `${a.model === null ? "" : `model_name=${JSON.stringify(excerpt(a.model))},`}${this.#dialect.rankLabel}="${a.rank}"`;
      if (a.running === null) return problem("missing", `no ${RUNNING}{${where}} beside its other series`);
      if (a.waiting === null) return problem("missing", `no ${WAITING}{${where}} beside ${RUNNING}`);
      // The current name wins when a release serves both (0.10 did, the old one deprecated).
      ranks.push({ rank: a.rank, model: a.model, running: a.running, waiting: a.waiting, kvUsage: a.kv ?? a.kvOld, activeTokens: null });
    }
    return { ok: true, report: report(this.#dialect.engine, ranks) };
  }
}

/**
 * Reads TensorRT-LLM's `/metrics` JSON: a list of iteration statistics
 * (oldest first; the last row of each rank is its load now), or rows in the
 * centralized router's `WorkerLoadReport` shape, or one such object. A
 * string is parsed as JSON first; a row that is itself a JSON string (an
 * older server encoded rows twice) is parsed again.
 */
export function parseTrtllmMetrics(body: unknown): LoadParse {
  let value = body;
  if (typeof body === "string") {
    // Its structure counted first, as a client's body's is: 8 MiB of small rows held the event loop 220 ms in JSON.parse.
    // Bounds five times a body's: a row of the documented statistics has 41 objects and members and 39 strings,
    // 12,000 of them fit (the server keeps 1,000 by default). Lists and objects are bounded too, each and in all: a
    // list of numbers is one array to the other counts, and 8 MiB of zeros held the loop in JSON.parse.
    const lengths = { list: MAX_JSON_ITEMS, members: 1024, elements: 5 * MAX_JSON_ITEMS };
    const shape = jsonShapeProblem(Buffer.from(body), new JsonShape(MAX_JSON_DEPTH, 5 * MAX_JSON_ITEMS, 5 * MAX_JSON_STRINGS, "the answer", lengths));
    if (shape !== null) return problem("shape", shape);
    try {
      value = JSON.parse(body);
    } catch (error) {
      return problem("syntax", `not JSON: ${excerpt((error as Error).message, 120)}: ${JSON.stringify(excerpt(body.trimStart()))}`);
    }
  }
  const rows = Array.isArray(value) ? value : [value];
  const latest = new Map<number, RankLoad>();
  for (let i = 0; i < rows.length; i++) {
    let row: unknown = rows[i];
    if (typeof row === "string") {
      try {
        row = JSON.parse(row);
      } catch {
        return problem("shape", `row ${i} is a string, not an iteration's statistics`);
      }
    }
    if (typeof row !== "object" || row === null || Array.isArray(row)) return problem("shape", `row ${i} is not an object`);
    const read = readTrtllmRow(row as Record<string, unknown>, i);
    if (!read.ok) return read;
    latest.set(read.rank.rank, read.rank); // later rows are newer
  }
  const ranks = [...latest.values()].sort((a, b) => a.rank - b.rank);
  return { ok: true, report: report("trtllm", ranks) };
}

/** Reads `body` in the format of `engine`. */
export function parseEngineLoad(engine: EngineKind, body: string, options: VllmParseOptions = {}): LoadParse {
  return engine === "vllm" ? parseVllmMetrics(body, options) : engine === "sglang" ? parseSglangMetrics(body, options) : parseTrtllmMetrics(body);
}

/**
 * Reads `body` as parseEngineLoad does, a Prometheus page a step of lines a
 * turn of the event loop (`turn`, which may reject to stop it; at most
 * `stepLines` a turn, PAGE_STEP_LINES by default).
 */
export async function parseEngineLoadStepped(engine: EngineKind, body: string, options: VllmParseOptions, turn: () => Promise<void>, stepLines?: number): Promise<LoadParse> {
  if (engine === "trtllm") return parseTrtllmMetrics(body);
  const load = new PageLoad(engine === "vllm" ? VLLM : SGLANG, options);
  return load.finish(await parsePrometheusTextStepped(body, turn, { keep: load.reads, take: load.take, ...(stepLines === undefined ? {} : { stepLines }) }));
}

/** One TensorRT-LLM row as a rank's load, or the problem with it. */
function readTrtllmRow(row: Record<string, unknown>, i: number): { ok: true; rank: RankLoad } | { ok: false; problem: LoadProblem } {
  const fail = (kind: LoadProblemKind, message: string) => ({ ok: false as const, problem: { kind, message: `row ${i}: ${message}` } });
  const own = (key: string): unknown => (Object.hasOwn(row, key) ? row[key] : undefined);
  const count = (key: string, required: boolean): number | null | false => {
    const v = own(key);
    if (v === undefined || v === null) return required ? false : null;
    return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= MAX_COUNT ? v : false;
  };
  const isIteration = own("numActiveRequests") !== undefined;
  const isLoadReport = !isIteration && own("num_active_requests") !== undefined;
  if (!isIteration && !isLoadReport) return fail("missing", "neither numActiveRequests (iteration statistics) nor num_active_requests (a WorkerLoadReport)");
  const rank = isIteration ? rankOfIteration(own("attentionDpRank"), own("rank")) : rankOfLoadReport(own("dp_rank") ?? own("rank"), own("worker_id"));
  if (rank === null) return fail("shape", "its rank is not a non-negative integer");
  const runningKey = isIteration ? "numActiveRequests" : "num_active_requests";
  const waitingKey = isIteration ? "numQueuedRequests" : "num_queued_requests";
  const running = count(runningKey, true);
  if (running === false || running === null) return fail("value", `${runningKey} is not a count of requests`);
  // Every serializer writes the queue length; a row without it (a hand-made report) has nothing queued.
  const waiting = count(waitingKey, false);
  if (waiting === false) return fail("value", `${waitingKey} is not a count of requests`);
  let kvUsage: number | null = null;
  let activeTokens: number | null = null;
  if (isIteration) {
    kvUsage = kvUsageOf(own("kvCacheStats"));
  } else {
    const tokens = count("num_active_tokens", false);
    if (tokens === false) return fail("value", "num_active_tokens is not a count of tokens");
    // The router's reporters send 0 when they do not measure tokens; 0 means "none" only when nothing runs.
    activeTokens = tokens === null || (tokens === 0 && running > 0) ? null : tokens;
  }
  return { ok: true, rank: { rank, model: null, running, waiting: waiting ?? 0, kvUsage, activeTokens } };
}

/** An iteration row's rank: `attentionDpRank`, else `rank`, else 0 (a row from before ranks were tagged). */
function rankOfIteration(attentionDpRank: unknown, rank: unknown): number | null {
  const v = attentionDpRank ?? rank;
  if (v === undefined || v === null) return 0;
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= MAX_RANK ? v : null;
}

/** A load report's rank: its own field, else the `:rankN` suffix of its worker id, else 0. */
function rankOfLoadReport(field: unknown, workerId: unknown): number | null {
  if (field !== undefined && field !== null) return typeof field === "number" && Number.isInteger(field) && field >= 0 && field <= MAX_RANK ? field : null;
  if (typeof workerId === "string") {
    const m = /:rank(\d{1,7})$/.exec(workerId);
    if (m !== null && Number(m[1]) <= MAX_RANK) return Number(m[1]);
  }
  return 0;
}

/** `kvCacheStats`' used fraction: used over max blocks (or max less free), null when it cannot be told. */
function kvUsageOf(stats: unknown): number | null {
  if (typeof stats !== "object" || stats === null || Array.isArray(stats)) return null;
  const s = stats as Record<string, unknown>;
  const num = (k: string) => (Object.hasOwn(s, k) && typeof s[k] === "number" && Number.isFinite(s[k]) && (s[k] as number) >= 0 ? (s[k] as number) : null);
  const max = num("maxNumBlocks");
  if (max === null || max === 0) return null;
  const free = num("freeNumBlocks");
  const used = num("usedNumBlocks") ?? (free === null ? null : max - free);
  if (used === null || used < 0) return null;
  return Math.min(1, used / max);
}

/** A gauge's value as a count of requests (gauges are floats in the format), or null. */
function asCount(value: number): number | null {
  if (!Number.isFinite(value) || value < 0 || value > MAX_COUNT) return null;
  return Math.round(value) + 0; // -0 (a sample written "-0") is 0
}

/** A report over `ranks`, sorted, with its total. */
function report(engine: EngineKind, ranks: RankLoad[]): EngineLoadReport {
  ranks.sort((a, b) => (a.model === b.model ? a.rank - b.rank : a.model === null ? -1 : b.model === null ? 1 : a.model < b.model ? -1 : 1));
  const kv = ranks.map((r) => r.kvUsage).filter((k): k is number => k !== null);
  const tokens = ranks.map((r) => r.activeTokens);
  return {
    engine,
    ranks,
    total: {
      running: ranks.reduce((n, r) => n + r.running, 0),
      waiting: ranks.reduce((n, r) => n + r.waiting, 0),
      kvUsage: kv.length === 0 ? null : kv.reduce((a, b) => a + b, 0) / kv.length,
      activeTokens: ranks.length > 0 && tokens.every((t) => t !== null) ? (tokens as number[]).reduce((a, b) => a + b, 0) : null,
    },
  };
}
