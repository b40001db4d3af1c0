// What the commands share on the command line: flag parsing with --help, the
// usage error, numeric flags, and the trace and simulated engine that
// `simulate` and `tune` both take.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { gunzipSync } from "node:zlib";
import { DEFAULT_ENGINE, type EngineOptions } from "../simulate/engine.js";
import { parseTrace, spreadArrivals, type Trace } from "../simulate/trace.js";
import { multiTurnWorkload } from "../simulate/workload.js";

/**
 * A command line that cannot be acted on (an unknown flag, a missing or extra
 * argument): the message is for the user, the exit status is 2, and the
 * command's `--help` is pointed at.
 */
export class UsageError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_USAGE";
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/**
 * Parses a command's flags with `--help`/`-h` added; prints `usage` and returns
 * null when help was asked for, so every command answers `--help` the same way.
 */
export function parseCommand(
  args: string[],
  options: NonNullable<NonNullable<Parameters<typeof parseArgs>[0]>["options"]>,
  usage: string,
  allowPositionals: boolean,
): { values: Record<string, string | boolean | undefined>; positionals: string[] } | null {
  let parsed;
  try {
    parsed = parseArgs({ args, options: { ...options, help: { type: "boolean", short: "h" } }, allowPositionals, strict: true });
  } catch (error) {
    // parseArgs's TypeError names the flag; keep its message, drop its stack.
    throw new UsageError((error as Error).message);
  }
  if ((parsed.values as { help?: boolean }).help === true) {
    process.stdout.write(usage);
    return null;
  }
  return { values: parsed.values as Record<string, string | boolean | undefined>, positionals: parsed.positionals };
}

/** The trace `simulate` replays when given none. */
export const BUNDLED_TRACE = "mooncake_conversation_trace.jsonl";

/** Reads a trace file (gzip allowed), or the bundled trace when `file` is undefined. */
export function readTrace(file: string | undefined, blockTokens: number): Trace {
  if (file === undefined) {
    const url = new URL(`../traces/${BUNDLED_TRACE}.gz`, import.meta.url);
    return parseTrace(gunzipSync(readFileSync(url)).toString("utf8"), BUNDLED_TRACE, blockTokens);
  }
  const raw = readFileSync(file === "-" ? 0 : file);
  return parseTrace((file.endsWith(".gz") ? gunzipSync(raw) : raw).toString("utf8"), file === "-" ? "<stdin>" : file, blockTokens);
}

/** A numeric option, checked; undefined when absent. */
export function numberOption(values: Record<string, unknown>, name: string, check: (v: number) => boolean, rule: string): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const v = Number(raw);
  if (!Number.isFinite(v) || !check(v)) throw new RangeError(`--${name}: must be ${rule}, got ${JSON.stringify(raw)}`);
  return v;
}


/** The flags of the trace and the simulated engine, shared by `simulate` and `tune` (parseArgs options). */
export const WORKLOAD_AND_ENGINE_FLAGS = {
  trace: { type: "string" },
  workload: { type: "string" },
  seed: { type: "string" },
  sessions: { type: "string" },
  ranks: { type: "string" },
  "rate-scale": { type: "string" },
  "block-tokens": { type: "string" },
  "max-num-tokens": { type: "string" },
  "max-active": { type: "string" },
  "iteration-base-ms": { type: "string" },
  "prefill-ms-per-token": { type: "string" },
  "decode-ms-per-request": { type: "string" },
  "cache-blocks": { type: "string" },
  "arrival-spread": { type: "boolean" },
} as const;

/** The help lines of {@link WORKLOAD_AND_ENGINE_FLAGS}, for a command's usage text. */
export const WORKLOAD_HELP = `  --trace FILE                Mooncake-shaped or native JSON-lines trace (.gz accepted)
  --workload multi-turn       the seeded synthetic multi-turn workload instead
  --seed N, --sessions N      its seed and session count
  --ranks N                   attention-DP ranks (8)
  --arrival-spread            requests that share a timestamp arrive spread evenly until the
                              next one, not at once (for traces whose clock ticks coarsely: the
                              bundled trace's arrivals fall on 3-second ticks)`;

/** The help lines of the serving model's flags. */
export const ENGINE_HELP = `  --rate-scale X              replay X times faster (1)
  --block-tokens N            tokens per hash_ids block of a trace (512)
  --max-num-tokens N          per-rank iteration token budget (${DEFAULT_ENGINE.maxNumTokens})
  --max-active N              per-rank active-request cap (${DEFAULT_ENGINE.maxNumActiveRequests})
  --iteration-base-ms X       fixed cost per iteration (${DEFAULT_ENGINE.iterationBaseMs})
  --prefill-ms-per-token X    prefill cost per uncached token (${DEFAULT_ENGINE.prefillMsPerToken})
  --decode-ms-per-request X   decode cost per running request (${DEFAULT_ENGINE.decodeMsPerRequest})
  --cache-blocks N            per-rank true cache capacity in blocks, 0 = unbounded (0)`;

/** The parsed values of {@link WORKLOAD_AND_ENGINE_FLAGS}. */
export type WorkloadAndEngineValues = { readonly [K in Exclude<keyof typeof WORKLOAD_AND_ENGINE_FLAGS, "arrival-spread">]?: string } & { readonly "arrival-spread"?: boolean };

/** Whether `v` is a positive integer (a count of something). */
export const isCount = (v: number) => Number.isInteger(v) && v >= 1;
/** Whether `v` is above 0. */
export const isPositive = (v: number) => v > 0;
/** Whether `v` is 0 or more. */
export const isNonNegative = (v: number) => v >= 0;

/**
 * The trace the flags name: the bundled one, a file, or the seeded multi-turn
 * workload. Throws RangeError naming the flag, or the trace's TraceError.
 */
export function readWorkload(values: WorkloadAndEngineValues): Trace {
  const blockTokens = numberOption(values, "block-tokens", isCount, "a positive integer") ?? 512;
  if (values.workload !== undefined && values.workload !== "multi-turn") throw new RangeError(`--workload: must be "multi-turn", got ${JSON.stringify(values.workload)}`);
  if (values.workload !== undefined && values.trace !== undefined) throw new RangeError("--workload and --trace: give one or the other");
  // Without the synthetic workload they would change nothing: refuse them rather than ignore them.
  for (const flag of ["seed", "sessions"] as const) if (values[flag] !== undefined && values.workload === undefined) throw new RangeError(`--${flag}: applies only with --workload multi-turn`);
  const trace = values.workload === "multi-turn"
    ? multiTurnWorkload({ seed: numberOption(values, "seed", Number.isInteger, "an integer") ?? 1, sessions: numberOption(values, "sessions", isCount, "a positive integer") ?? 400 })
    : readTrace(values.trace, blockTokens);
  return values["arrival-spread"] === true ? spreadArrivals(trace) : trace;
}

/** The simulated engine the flags describe (absent flags left out: the simulator's defaults). Throws RangeError naming the flag. */
export function readEngine(values: WorkloadAndEngineValues): Partial<EngineOptions> & { readonly ranks: number } {
  const engine = {
    ranks: numberOption(values, "ranks", (v) => isCount(v) && v <= 4096, "an integer in [1, 4096]") ?? 8,
    rateScale: numberOption(values, "rate-scale", isPositive, "a positive number"),
    maxNumTokens: numberOption(values, "max-num-tokens", isCount, "a positive integer"),
    maxNumActiveRequests: numberOption(values, "max-active", isCount, "a positive integer"),
    iterationBaseMs: numberOption(values, "iteration-base-ms", isNonNegative, "a non-negative number"),
    prefillMsPerToken: numberOption(values, "prefill-ms-per-token", isNonNegative, "a non-negative number"),
    decodeMsPerRequest: numberOption(values, "decode-ms-per-request", isNonNegative, "a non-negative number"),
    cacheBlocks: numberOption(values, "cache-blocks", (v) => Number.isInteger(v) && v >= 0, "a non-negative integer"),
  };
  // Left out rather than undefined: the engine's options travel to tune's workers and print in its output.
  return Object.fromEntries(Object.entries(engine).filter(([, v]) => v !== undefined)) as Partial<EngineOptions> & { ranks: number };
}

/**
 * A progress bar on standard error for a long run: only on a terminal, never
 * when the output is JSON, and only once the run has taken a second. Returns
 * the `(done, total)` callback, or undefined when no bar is wanted.
 */
export function progressBar(json: boolean, unit = ""): ((done: number, total: number) => void) | undefined {
  if (process.stderr.isTTY !== true || json) return undefined;
  const started = Date.now();
  let drawn = false;
  return (done, total) => {
    if (!drawn && Date.now() - started < 1_000) return;
    drawn = true;
    const width = 30;
    const f = total > 0 ? Math.min(1, done / total) : 1;
    const filled = Math.round(f * width);
    const count = unit ? `  ${done}/${total} ${unit}` : "";
    process.stderr.write(`\r[${"#".repeat(filled)}${".".repeat(width - filled)}] ${(100 * f).toFixed(0).padStart(3)}%${count}  ${((Date.now() - started) / 1000).toFixed(1)} s${f >= 1 ? "\n" : ""}`);
  };
}
