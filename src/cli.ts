// The `adp-router` command. Subcommands:
//   simulate [options]             replay a trace through every policy (the main job)
//   conformance FILE|- [--check]   answer (or check) conformance scenarios
//   validate FILE|-                validate an attention_dp_config JSON file
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
import { serveCommand } from "./serve/command.js";

/** The help text. */
const USAGE = `Usage: adp-router <command> [options]

Commands:
  simulate [options]            Replay a trace through every routing policy on a simulated
                                attention-DP engine and compare hit ratio, balance and TTFT.
                                With no options: the bundled Mooncake conversation trace, 8 ranks.
      --trace FILE                Mooncake-shaped or native JSON-lines trace (.gz accepted)
      --workload multi-turn       the seeded synthetic multi-turn workload instead
      --seed N, --sessions N      its seed and session count
      --ranks N                   attention-DP ranks (8)
      --policies a,b              ${POLICIES.join(", ")}
      --config JSON               attention_dp_config overrides for kv_cache_aware (snake_case)
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
  conformance FILE|- [--check]  Route each JSON-lines scenario and print one answer a line;
                                --check compares with each line's "expected" instead.
  validate FILE|-               Check an attention_dp_config JSON object; print it with defaults.
  schema                        Print the JSON Schema of attention_dp_config.
  serve [options]               Run the gateway in front of upstream engines (see serve --help):
                                  adp-router serve --upstream http://127.0.0.1:8001 --upstream ...
`;

/** The text of FILE, or of standard input for `-`. */
function readInput(file: string): string {
  return readFileSync(file === "-" ? 0 : file, "utf8");
}

/** `adp-router conformance FILE|- [--check]`; returns the exit status. */
function conformance(args: string[]): number {
  const { values, positionals } = parseArgs({ args, options: { check: { type: "boolean", default: false } }, allowPositionals: true, strict: true });
  if (positionals.length !== 1) {
    process.stderr.write("adp-router conformance: expected one FILE (or - for standard input)\n");
    return 2;
  }
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
  const { positionals } = parseArgs({ args, allowPositionals: true, strict: true });
  if (positionals.length !== 1) {
    process.stderr.write("adp-router validate: expected one FILE (or - for standard input)\n");
    return 2;
  }
  let input: unknown;
  try {
    input = JSON.parse(readInput(positionals[0]!));
  } catch (error) {
    process.stderr.write(`adp-router validate: cannot read ${positionals[0]}: ${(error as Error).message}\n`);
    return 2;
  }
  try {
    process.stdout.write(JSON.stringify(toAttentionDpConfigInput(parseAttentionDpConfig(input)), null, 2) + "\n");
    return 0;
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n`);
    return 1;
  }
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
  const { values } = parseArgs({
    args,
    options: {
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
    strict: true,
  });
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
    try {
      config = JSON.parse(values.config) as Record<string, unknown>;
    } catch (error) {
      throw new RangeError(`--config: must be a JSON object of attention_dp_config fields (${(error as Error).message})`);
    }
    parseAttentionDpConfig(config);
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
  const tty = process.stderr.isTTY === true;
  const started = Date.now();
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
          onProgress: (policy: string, f: number) => {
            const width = 30;
            const done = Math.round(f * width);
            process.stderr.write(`\r${policy.padEnd(26)} [${"#".repeat(done)}${".".repeat(width - done)}] ${(100 * f).toFixed(0).padStart(3)}%  ${((Date.now() - started) / 1000).toFixed(1)} s${f >= 1 ? "\n" : ""}`);
          },
        }
      : {}),
  });
  process.stdout.write(values.json ? JSON.stringify(toJson(result)) + "\n" : formatTable(result) + "\n");
  if (values.report !== undefined) {
    writeFileSync(values.report, renderReport(result, `adp-router simulate ${args.join(" ")}`.trim()));
    if (!values.json) process.stdout.write(`report written to ${values.report}\n`);
  }
  return 0;
}

/** Dispatches a command line; returns the exit status, or null while a server runs. */
function main(argv: string[]): number | null {
  const [command, ...rest] = argv;
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
        process.stdout.write(JSON.stringify(attentionDpConfigSchema, null, 2) + "\n");
        return 0;
      case "--version":
      case "-v":
      case "version":
        process.stdout.write(`${(createRequire(import.meta.url)("../package.json") as { version: string }).version}\n`);
        return 0;
      case undefined:
      case "-h":
      case "--help":
      case "help":
        process.stdout.write(USAGE);
        return command === undefined ? 2 : 0;
      default:
        process.stderr.write(`adp-router: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
        return 2;
    }
  } catch (error) {
    // parseArgs rejects unknown flags with a TypeError naming the flag.
    process.stderr.write(`adp-router ${command}: ${(error as Error).message}\n`);
    return 2;
  }
}

const status = main(process.argv.slice(2));
if (status !== null) process.exitCode = status;
