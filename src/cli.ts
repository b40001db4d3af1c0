// The `adp-router` command. Subcommands:
//   simulate [options]             replay a trace through every policy (the main job)
//   conformance FILE|- [--check]   answer (or check) conformance scenarios
//   validate FILE|-                validate an attention_dp_config (JSON or YAML, bare or wrapped)
//   schema                         print the attention_dp_config JSON Schema
//   serve [options]                the gateway (src/serve/command.ts)

import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { gunzipSync } from "node:zlib";
import { parseArgs } from "node:util";
import { attentionDpConfigSchema, parseAttentionDpConfig, toAttentionDpConfigInput } from "./config.js";
import { firstDifference, runScenario } from "./conformance.js";
import { DEFAULT_ENGINE } from "./simulate/engine.js";
import { renderReport } from "./simulate/report.js";
import { MAX_REPLICAS, type SyncMode } from "./simulate/replicas.js";
import { formatTable, POLICIES, simulate, toJson, type IndexUpdates } from "./simulate/run.js";
import { parseTrace, TraceError, type Trace } from "./simulate/trace.js";
import { multiTurnWorkload } from "./simulate/workload.js";
import { SERVE_USAGE, serveCommand } from "./serve/command.js";
import { LineCounter, isMap, isScalar, parseDocument } from "yaml";
import { AttentionDpConfigError, describeValue, excerpt } from "./errors.js";

/** The help text of `adp-router simulate`. */
const SIMULATE_USAGE = `Usage: adp-router simulate [options]

Replays a trace through every routing policy on a simulated attention-DP engine and
compares hit ratio, balance and TTFT. With no options: the bundled Mooncake
conversation trace, 8 ranks.

  --trace FILE                Mooncake-shaped or native JSON-lines trace (.gz accepted)
  --workload multi-turn       the seeded synthetic multi-turn workload instead
  --seed N, --sessions N      its seed and session count
  --ranks N                   attention-DP ranks (8)
  --policies a,b              ${POLICIES.join(", ")}
  --config FILE|JSON          attention_dp_config for kv_cache_aware: a JSON or YAML file
                              (bare, or under attention_dp_config: as in
                              extra_llm_api_options.yaml), - for standard input, or an
                              inline JSON object ('{"kv_cache_routing_load_balance_weight": 2}')
  --index-updates MODE        routing (learn from own decisions) | events (engine KV events)
  --event-delay MS            events: batches reach the router MS simulated ms late (0)
  --event-drop P              events: share of batches lost, 0 to 1 (0); a gap empties that
                              rank's engine view, rebuilt from the next batch
  --event-replay              events: fill gaps by replaying the lost batches instead
  --event-seed N              events: seed of which batches are lost (1)
  --event-stale MS            events: the gateway's stale_after_ms (10000): a rank whose stream
                              is silent that long while sent requests, or rebuilding after a
                              gap, is matched on the router's own placements
  --replicas N                gateway replicas, each with its own router; requests spread over
                              them round-robin in arrival order (1)
  --sync MODE                 stream (replicas share learned prompts and conversation bindings
                              through one ordered stream) | none (independent replicas)
  --sync-delay-ms MS          stream: the other replicas apply an entry MS simulated ms after
                              it was made, at the earliest in the next iteration (5)
  --rate-scale X              replay X times faster (1)
  --block-tokens N            tokens per hash_ids block of a trace (512)
  --max-num-tokens N          per-rank iteration token budget (${DEFAULT_ENGINE.maxNumTokens})
  --max-active N              per-rank active-request cap (${DEFAULT_ENGINE.maxNumActiveRequests})
  --iteration-base-ms X       fixed cost per iteration (${DEFAULT_ENGINE.iterationBaseMs})
  --prefill-ms-per-token X    prefill cost per uncached token (${DEFAULT_ENGINE.prefillMsPerToken})
  --decode-ms-per-request X   decode cost per running request (${DEFAULT_ENGINE.decodeMsPerRequest})
  --cache-blocks N            per-rank true cache capacity in blocks, 0 = unbounded (0)
  --json                      print one JSON object instead of the table
  --report FILE.html          also write a self-contained HTML report
  -h, --help                  print this help
`;

/** The help text of `adp-router conformance`. */
const CONFORMANCE_USAGE = `Usage: adp-router conformance FILE|- [--check]

Routes each JSON-lines scenario of FILE (- for standard input) and prints one answer a line.

  --check                     compare each answer with the line's "expected" instead; print
                              FAIL lines and a summary, exit 1 if any failed
  -h, --help                  print this help
`;

/** The help text of `adp-router validate`. */
const VALIDATE_USAGE = `Usage: adp-router validate FILE|-

Checks an attention_dp_config and prints it as JSON with every default filled in. FILE
(- for standard input) is JSON or YAML, either the bare block or a file with an
attention_dp_config: key such as TensorRT-LLM's extra_llm_api_options.yaml (its other
keys are ignored). Exits 1 when the config is invalid, 2 when FILE cannot be read or parsed.

  -h, --help                  print this help
`;

/** The help text of `adp-router schema`. */
const SCHEMA_USAGE = `Usage: adp-router schema

Prints the JSON Schema of attention_dp_config.

  -h, --help                  print this help
`;

/** The help text of `adp-router` itself. */
const USAGE = `Usage: adp-router <command> [options]

Commands:
  simulate [options]            Replay a trace through every routing policy on a simulated
                                attention-DP engine and compare hit ratio, balance and TTFT.
  conformance FILE|- [--check]  Route each JSON-lines scenario and print one answer a line.
  validate FILE|-               Check an attention_dp_config (JSON or YAML); print it with defaults.
  schema                        Print the JSON Schema of attention_dp_config.
  serve [options]               Run the gateway in front of upstream engines:
                                  adp-router serve --upstream http://127.0.0.1:8001 --upstream ...

Options:
  -h, --help                    print this help (adp-router <command> --help: that command's)
  -v, --version                 print the version
`;

/** Each command's help text, for `adp-router help <command>` (serve prints its own). */
const COMMAND_USAGE: Readonly<Record<string, string>> = {
  simulate: SIMULATE_USAGE,
  conformance: CONFORMANCE_USAGE,
  validate: VALIDATE_USAGE,
  schema: SCHEMA_USAGE,
  serve: SERVE_USAGE,
};

/**
 * A command line that cannot be acted on (an unknown flag, a missing or extra
 * argument): the message is for the user, the exit status is 2, and the
 * command's `--help` is pointed at.
 */
class UsageError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_USAGE";
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/**
 * A config file (or inline value) that cannot be read, is neither JSON nor
 * YAML, or (given to a flag such as simulate's --config) holds an invalid
 * attention_dp_config. Its message names the file, and the line and column
 * when known, so an editor can jump there; exit status 2, no stack.
 */
class ConfigFileError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_CONFIG_FILE";
  constructor(message: string) {
    super(message);
    this.name = "ConfigFileError";
  }
}

/** An attention_dp_config as read from a file, with where each of its fields is written. */
interface ConfigSource {
  /** The snake_case block (unwrapped from `attention_dp_config:` when it was wrapped). */
  readonly config: unknown;
  /** `FILE:LINE:COLUMN` of a top-level field of the block, when the text was YAML (or JSON) the parser could place. */
  readonly locate: (field: string) => string | undefined;
}

/** The key under which TensorRT-LLM's `extra_llm_api_options.yaml` nests the block. */
const WRAPPER_KEY = "attention_dp_config";

/**
 * `name:LINE:COL: message`, then the line itself and a caret under the column,
 * the way esbuild and compilers show a position (editors jump to the first line).
 */
function pointAt(name: string, text: string, lines: LineCounter, offset: number, message: string): string {
  const { line, col } = lines.linePos(offset);
  const source = excerpt(text.split(/\r?\n/)[line - 1] ?? "", 200);
  return `${name}:${line}:${col}: ${message}\n  ${String(line).padStart(4)} | ${source}\n       | ${" ".repeat(Math.max(0, Math.min(col - 1, source.length)))}^`;
}

/**
 * Reads an attention_dp_config from JSON or YAML `text` (`name` names it in
 * messages). Users keep the block in TensorRT-LLM's `extra_llm_api_options.yaml`
 * under `attention_dp_config:`, next to keys that are not ours, so a mapping
 * with that key is unwrapped and its other keys ignored; anything else is the
 * bare block. JSON is tried first so JSON text keeps JSON's meaning exactly;
 * the YAML parse also serves to place fields and errors by line and column.
 */
function readConfigText(text: string, name: string): ConfigSource {
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    const first = doc.errors[0];
    if (first !== undefined) {
      const message = excerpt(first.message.split("\n")[0] ?? "invalid YAML", 200);
      throw new ConfigFileError(pointAt(name, text, lines, first.pos[0], `not valid JSON or YAML: ${message}`));
    }
    value = doc.toJS({ maxAliasCount: 100 });
  }
  if (value === null || value === undefined) throw new ConfigFileError(`${name}: is empty; expected an attention_dp_config mapping (bare, or under ${WRAPPER_KEY}:)`);
  const wrapped = typeof value === "object" && !Array.isArray(value) && Object.hasOwn(value, WRAPPER_KEY);
  // `attention_dp_config:` with nothing under it is TensorRT-LLM's None: every default.
  const config = wrapped ? ((value as Record<string, unknown>)[WRAPPER_KEY] ?? {}) : value;
  const locate = (field: string): string | undefined => {
    if (doc.errors.length > 0) return undefined; // JSON that YAML reads differently: no reliable positions
    const block = wrapped ? doc.get(WRAPPER_KEY, true) : doc.contents;
    if (!isMap(block)) return undefined;
    const pair = block.items.find((p) => isScalar(p.key) && p.key.value === field);
    const offset = pair !== undefined && isScalar(pair.key) ? pair.key.range?.[0] : undefined;
    if (offset === undefined) return undefined;
    const { line, col } = lines.linePos(offset);
    return `${name}:${line}:${col}`;
  };
  return { config, locate };
}

/** Reads FILE (or standard input for `-`) as an attention_dp_config; `ConfigFileError` when it cannot. */
function readConfigFile(file: string): ConfigSource {
  let text: string;
  try {
    text = readInput(file);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new ConfigFileError(`cannot read ${file}: ${code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a directory" : (error as Error).message}`);
  }
  return readConfigText(text, file === "-" ? "<stdin>" : file);
}

/**
 * The problems of an invalid config, each prefixed with where its field is
 * written in the file when that is known, so the user can go straight there.
 */
function describeConfigError(error: AttentionDpConfigError, source: ConfigSource): string {
  const n = error.issues.length;
  return [
    `Invalid attention_dp_config (${n} problem${n === 1 ? "" : "s"}):`,
    ...error.issues.map((i) => {
      const where = source.locate(i.field);
      return `  ${where ? `${where}: ` : ""}${excerpt(i.field, 200)}: ${i.rule}, got ${describeValue(i.received)}`;
    }),
  ].join("\n");
}

/**
 * Parses a command's flags with `--help`/`-h` added; prints `usage` and returns
 * null when help was asked for, so every command answers `--help` the same way.
 */
function parseCommand(
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

/** The text of FILE, or of standard input for `-`. */
function readInput(file: string): string {
  return readFileSync(file === "-" ? 0 : file, "utf8");
}

/** `adp-router conformance FILE|- [--check]`; returns the exit status. */
function conformance(args: string[]): number {
  const parsed = parseCommand(args, { check: { type: "boolean", default: false } }, CONFORMANCE_USAGE, true);
  if (parsed === null) return 0;
  const { values, positionals } = parsed;
  if (positionals.length !== 1) throw new UsageError("expected one FILE (or - for standard input)");
  let text: string;
  try {
    text = readInput(positionals[0]!);
  } catch (error) {
    process.stderr.write(`adp-router conformance: cannot read ${positionals[0]}: ${(error as Error).message}\n`);
    return 2;
  }
  const out: string[] = [];
  let passed = 0;
  let failed = 0;
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "") continue;
    let scenario: unknown;
    let answer;
    try {
      scenario = JSON.parse(line);
      answer = runScenario(scenario);
    } catch (error) {
      answer = { error: `line ${i + 1}: invalid JSON (${(error as Error).message})` };
    }
    if (!values.check) {
      out.push(JSON.stringify(answer));
      continue;
    }
    const s = scenario as { name?: unknown; expected?: unknown } | undefined;
    const name = typeof s?.name === "string" ? s.name : `line ${i + 1}`;
    const diff = firstDifference(s?.expected, answer);
    if (diff === null) {
      passed++;
    } else {
      failed++;
      out.push(`FAIL ${name}: ${diff}`);
    }
  }
  if (values.check) out.push(`${passed} passed, ${failed} failed`);
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
  return values.check && failed > 0 ? 1 : 0;
}

/** `adp-router validate FILE|-`; returns the exit status. */
function validate(args: string[]): number {
  const parsed = parseCommand(args, {}, VALIDATE_USAGE, true);
  if (parsed === null) return 0;
  if (parsed.positionals.length !== 1) throw new UsageError("expected one FILE (or - for standard input)");
  const source = readConfigFile(parsed.positionals[0]!);
  try {
    process.stdout.write(JSON.stringify(toAttentionDpConfigInput(parseAttentionDpConfig(source.config)), null, 2) + "\n");
    return 0;
  } catch (error) {
    if (!(error instanceof AttentionDpConfigError)) throw error;
    process.stderr.write(`${describeConfigError(error, source)}\n`);
    return 1;
  }
}

/** `adp-router schema`; returns the exit status. */
function schema(args: string[]): number {
  if (parseCommand(args, {}, SCHEMA_USAGE, false) === null) return 0;
  process.stdout.write(JSON.stringify(attentionDpConfigSchema, null, 2) + "\n");
  return 0;
}

/** The trace `simulate` replays when given none. */
const BUNDLED_TRACE = "mooncake_conversation_trace.jsonl";

/** Reads a trace file (gzip allowed), or the bundled trace when `file` is undefined. */
function readTrace(file: string | undefined, blockTokens: number): Trace {
  if (file === undefined) {
    const url = new URL(`../traces/${BUNDLED_TRACE}.gz`, import.meta.url);
    return parseTrace(gunzipSync(readFileSync(url)).toString("utf8"), BUNDLED_TRACE, blockTokens);
  }
  const raw = readFileSync(file === "-" ? 0 : file);
  return parseTrace((file.endsWith(".gz") ? gunzipSync(raw) : raw).toString("utf8"), file, blockTokens);
}

/** A numeric option, checked; undefined when absent. */
function numberOption(values: Record<string, unknown>, name: string, check: (v: number) => boolean, rule: string): number | undefined {
  const raw = values[name];
  if (raw === undefined) return undefined;
  const v = Number(raw);
  if (!Number.isFinite(v) || !check(v)) throw new RangeError(`--${name}: must be ${rule}, got ${JSON.stringify(raw)}`);
  return v;
}

/** `adp-router simulate [options]`; returns the exit status. */
function simulateCommand(args: string[]): number {
  const parsed = parseCommand(
    args,
    {
      trace: { type: "string" },
      workload: { type: "string" },
      seed: { type: "string" },
      sessions: { type: "string" },
      ranks: { type: "string" },
      policies: { type: "string" },
      config: { type: "string" },
      "index-updates": { type: "string" },
      "event-delay": { type: "string" },
      "event-drop": { type: "string" },
      "event-replay": { type: "boolean" },
      "event-seed": { type: "string" },
      "event-stale": { type: "string" },
      replicas: { type: "string" },
      sync: { type: "string" },
      "sync-delay-ms": { type: "string" },
      "rate-scale": { type: "string" },
      "block-tokens": { type: "string" },
      "max-num-tokens": { type: "string" },
      "max-active": { type: "string" },
      "iteration-base-ms": { type: "string" },
      "prefill-ms-per-token": { type: "string" },
      "decode-ms-per-request": { type: "string" },
      "cache-blocks": { type: "string" },
      json: { type: "boolean", default: false },
      report: { type: "string" },
    },
    SIMULATE_USAGE,
    false,
  );
  if (parsed === null) return 0;
  // The option table above fixes each flag's type; parseCommand's generic return loses it.
  const values = parsed.values as {
    [K in "trace" | "workload" | "seed" | "sessions" | "ranks" | "policies" | "config" | "index-updates" | "event-delay" | "event-drop" | "event-seed" | "event-stale" | "replicas" | "sync" | "sync-delay-ms" | "rate-scale" | "block-tokens" | "max-num-tokens" | "max-active" | "iteration-base-ms" | "prefill-ms-per-token" | "decode-ms-per-request" | "cache-blocks" | "report"]?: string;
  } & { "event-replay"?: boolean; json: boolean };
  const int = (v: number) => Number.isInteger(v) && v >= 1;
  const pos = (v: number) => v > 0;
  const nonNeg = (v: number) => v >= 0;
  const ranks = numberOption(values, "ranks", (v) => int(v) && v <= 4096, "an integer in [1, 4096]") ?? 8;
  const blockTokens = numberOption(values, "block-tokens", int, "a positive integer") ?? 512;
  if (values.workload !== undefined && values.workload !== "multi-turn") throw new RangeError(`--workload: must be "multi-turn", got ${JSON.stringify(values.workload)}`);
  if (values.workload !== undefined && values.trace !== undefined) throw new RangeError("--workload and --trace: give one or the other");
  const indexUpdates = values["index-updates"] ?? "routing";
  if (indexUpdates !== "routing" && indexUpdates !== "events") throw new RangeError(`--index-updates: must be routing or events, got ${JSON.stringify(indexUpdates)}`);
  // Event flags would change nothing without events: refuse them rather than ignore them.
  for (const flag of ["event-delay", "event-drop", "event-replay", "event-seed", "event-stale"]) {
    if (values[flag as keyof typeof values] !== undefined && indexUpdates !== "events") throw new RangeError(`--${flag}: applies only with --index-updates events`);
  }
  const events = {
    eventDelayMs: numberOption(values, "event-delay", nonNeg, "a non-negative number of milliseconds"),
    eventDropRate: numberOption(values, "event-drop", (v) => v >= 0 && v <= 1, "a number from 0 to 1"),
    eventReplay: values["event-replay"],
    eventSeed: numberOption(values, "event-seed", Number.isSafeInteger, "an integer"),
    eventStaleMs: numberOption(values, "event-stale", pos, "a positive number of milliseconds"),
  };
  const replicas = numberOption(values, "replicas", (v) => int(v) && v <= MAX_REPLICAS, `an integer in [1, ${MAX_REPLICAS}]`);
  if (values.sync !== undefined && values.sync !== "stream" && values.sync !== "none") throw new RangeError(`--sync: must be stream or none, got ${JSON.stringify(values.sync)}`);
  // A delay would change nothing without the stream: refuse it rather than ignore it.
  if (values["sync-delay-ms"] !== undefined && values.sync === "none") throw new RangeError("--sync-delay-ms: applies only with --sync stream");
  const replicaOptions = {
    replicas,
    sync: values.sync as SyncMode | undefined,
    syncDelayMs: numberOption(values, "sync-delay-ms", nonNeg, "a non-negative number of milliseconds"),
  };
  let config: Record<string, unknown> | undefined;
  if (values.config !== undefined) {
    // An inline object starts with "{"; anything else names a file (or - for standard input).
    let source: ConfigSource;
    try {
      source = values.config.trimStart().startsWith("{") ? readConfigText(values.config, "--config") : readConfigFile(values.config);
    } catch (error) {
      if (!(error instanceof ConfigFileError)) throw error;
      throw new ConfigFileError(`--config: ${error.message}`);
    }
    try {
      parseAttentionDpConfig(source.config);
    } catch (error) {
      if (!(error instanceof AttentionDpConfigError)) throw error;
      // A bad value, not a bad command line: the problems alone, status 2 like any refused flag value.
      throw new ConfigFileError(`--config: ${describeConfigError(error, source)}`);
    }
    config = source.config as Record<string, unknown>;
  }
  let trace: Trace;
  try {
    trace = values.workload === "multi-turn"
      ? multiTurnWorkload({ seed: numberOption(values, "seed", Number.isInteger, "an integer") ?? 1, sessions: numberOption(values, "sessions", int, "a positive integer") ?? 400 })
      : readTrace(values.trace, blockTokens);
  } catch (error) {
    if (error instanceof TraceError) {
      process.stderr.write(`adp-router simulate: ${error.message}
`);
      return 1;
    }
    throw error;
  }
  // A progress bar on a terminal only, never with --json, and only once the run has taken a second.
  const tty = process.stderr.isTTY === true && values.json !== true;
  const started = Date.now();
  let drawn = false;
  const result = simulate(trace, {
    ranks,
    ...(config ? { config } : {}),
    indexUpdates: indexUpdates as IndexUpdates,
    ...events,
    ...replicaOptions,
    ...(values.policies ? { policies: values.policies.split(",").map((p) => p.trim()) } : {}),
    rateScale: numberOption(values, "rate-scale", pos, "a positive number"),
    maxNumTokens: numberOption(values, "max-num-tokens", int, "a positive integer"),
    maxNumActiveRequests: numberOption(values, "max-active", int, "a positive integer"),
    iterationBaseMs: numberOption(values, "iteration-base-ms", nonNeg, "a non-negative number"),
    prefillMsPerToken: numberOption(values, "prefill-ms-per-token", nonNeg, "a non-negative number"),
    decodeMsPerRequest: numberOption(values, "decode-ms-per-request", nonNeg, "a non-negative number"),
    cacheBlocks: numberOption(values, "cache-blocks", (v) => Number.isInteger(v) && v >= 0, "a non-negative integer"),
    ...(tty
      ? {
          // simulate() now reports requests done of requests × policies (src/simulate/run.ts): one bar for the whole run.
          onProgress: (doneRequests: number, total: number) => {
            if (!drawn && Date.now() - started < 1_000) return;
            drawn = true;
            const width = 30;
            const f = total > 0 ? doneRequests / total : 1;
            const done = Math.round(f * width);
            process.stderr.write(`\r[${"#".repeat(done)}${".".repeat(width - done)}] ${(100 * f).toFixed(0).padStart(3)}%  ${((Date.now() - started) / 1000).toFixed(1)} s${f >= 1 ? "\n" : ""}`);
          },
        }
      : {}),
  });
  process.stdout.write(values.json ? JSON.stringify(toJson(result)) + "\n" : formatTable(result) + "\n");
  // An engine that cannot keep up makes every latency figure meaningless: say so, whatever the output format.
  for (const p of result.policies) {
    if (p.overloaded) process.stderr.write(`warning: ${p.policy}: the simulated engine is overloaded: ${p.overload_reason ?? "its queue outgrew what it serves"} (lower --rate-scale, or add --ranks)\n`);
  }
  if (values.report !== undefined) {
    writeFileSync(values.report, renderReport(result, `adp-router simulate ${args.join(" ")}`.trim()));
    if (!values.json) process.stdout.write(`report written to ${values.report}\n`);
  }
  return 0;
}

/**
 * Ends the process quietly, status 0, once the reader of standard output has
 * gone (`adp-router conformance FILE | head`): the reader asked for no more, so
 * there is nothing to report, and Node would otherwise die on the unhandled
 * EPIPE 'error' event with a stack trace. Any other write failure is reported
 * in one line, status 1.
 */
function exitQuietlyOnClosedStdout(): void {
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE" || error.code === "ERR_STREAM_DESTROYED") process.exit(0);
    process.stderr.write(`adp-router: cannot write to standard output: ${error.message}\n`);
    process.exit(1);
  });
}

/** Dispatches a command line; returns the exit status, or null while a server runs. */
function main(argv: string[]): number | null {
  const [command, ...rest] = argv;
  // The gateway is long-lived and owns its own output (logs); every other command writes and exits.
  if (command !== "serve") exitQuietlyOnClosedStdout();
  try {
    switch (command) {
      case "serve":
        void serveCommand(rest).then((status) => {
          process.exitCode = status;
          if (status === 0) process.exit(0); // handles (signal listeners) must not keep it alive
        });
        return null;
      case "simulate":
        return simulateCommand(rest);
      case "conformance":
        return conformance(rest);
      case "validate":
        return validate(rest);
      case "schema":
        return schema(rest);
      case "--version":
      case "-v":
      case "version":
        process.stdout.write(`${(createRequire(import.meta.url)("../package.json") as { version: string }).version}\n`);
        return 0;
      case "-h":
      case "--help":
      case "help": {
        // `adp-router help simulate` is `adp-router simulate --help`.
        const topic = rest[0];
        if (topic === undefined) {
          process.stdout.write(USAGE);
          return 0;
        }
        // Own keys only: "constructor" and the like are not commands.
        if (!Object.hasOwn(COMMAND_USAGE, topic)) {
          process.stderr.write(`adp-router help: unknown command ${JSON.stringify(topic)}\n\n${USAGE}`);
          return 2;
        }
        process.stdout.write(COMMAND_USAGE[topic]!);
        return 0;
      }
      case undefined:
        // No command is a usage error: the help goes to standard error, status 2.
        process.stderr.write(USAGE);
        return 2;
      default:
        process.stderr.write(`adp-router: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
        return 2;
    }
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`adp-router ${command}: ${error.message}\nRun "adp-router ${command} --help" for usage.\n`);
    } else {
      // A ConfigFileError, or a flag value a check refused (RangeError naming the flag): the message alone, no stack.
      process.stderr.write(`adp-router ${command}: ${(error as Error).message}\n`);
    }
    return 2;
  }
}

const status = main(process.argv.slice(2));
if (status !== null) process.exitCode = status;
