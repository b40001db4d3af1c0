// The `adp-router` command. Subcommands:
//   simulate [options]             replay a trace through every policy (the main job)
//   tune [options]                 recommend an attention_dp_config for a trace (src/cli/tune-command.ts)
//   conformance FILE|- [--check]   answer (or check) conformance scenarios
//   validate FILE|-                validate an attention_dp_config (JSON or YAML, bare or wrapped)
//   schema                         print the attention_dp_config JSON Schema
//   serve [options]                the gateway, when its package (adp-router-gateway) is installed

import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { ENGINE_HELP, isCount, isNonNegative, isPositive, numberOption, parseCommand, progressBar, readEngine, readWorkload, UsageError, WORKLOAD_AND_ENGINE_FLAGS, WORKLOAD_HELP, type WorkloadAndEngineValues } from "./cli/args.js";
import { describeConfigError, readConfigFile, readConfigOption, readInput } from "./cli/config-file.js";
import { attentionDpConfigSchema, parseAttentionDpConfig, toAttentionDpConfigInput, type AttentionDpConfigInput } from "./config.js";
import { firstDifference, runScenario } from "./conformance.js";
import { renderReport } from "./simulate/report.js";
import { MAX_REPLICAS, type SyncMode } from "./simulate/replicas.js";
import { CONFIG_POLICY, formatTable, POLICIES, simulate, toJson, type IndexUpdates } from "./simulate/run.js";
import { TraceError } from "./simulate/trace.js";
import { TUNE_USAGE, tuneCommand } from "./cli/tune-command.js";
import { AttentionDpConfigError } from "./errors.js";
import { RANK_ROUTING_KINDS, type RankRoutingKind } from "./instances.js";

/** The help text of `adp-router simulate`. */
const SIMULATE_USAGE = `Usage: adp-router simulate [options]

Replays a trace through every routing policy on a simulated attention-DP engine and
compares hit ratio, balance and TTFT. With no options: the bundled Mooncake
conversation trace, 8 ranks.

${WORKLOAD_HELP}
  --policies a,b              ${POLICIES.join(", ")}; ${CONFIG_POLICY} with --config
  --config FILE|JSON          an attention_dp_config: a JSON or YAML file (bare, or under
                              attention_dp_config: as in extra_llm_api_options.yaml), - for
                              standard input, or an inline JSON object
                              ('{"kv_cache_routing_load_balance_weight": 2}'). Adds the policy
                              ${CONFIG_POLICY} (the router it selects, exactly as TensorRT-LLM builds
                              it: what tune recommends) and sets kv_cache_aware's parameters
  --index-updates MODE        routing (learn from own decisions) | events (engine KV events)
  --event-delay MS            events: batches reach the router MS simulated ms late (0)
  --event-drop P              events: share of batches lost, 0 to 1 (0); after a gap that
                              rank's engine view goes on from the next batch, untrusted for
                              --event-stale ms (its match meanwhile from the router's own view)
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
  --instances N               N engines of --ranks ranks each behind one gateway, routed in two
                              phases (TensorRT-LLM's centralized router picks the engine, then
                              a rank); the rows are the rank-routing kinds instead of policies
  --rank-routing a,b          with --instances: adp (the engines' ADP router, --config's or
                              KV-cache-aware, pinned), instance (the centralized router's rank
                              score, pinned), none (each engine's own load balancer) (all three)
  --load-weight X             with --instances: phase 1's weight of a request of load against
                              a matched block (0.25)
  --prefill N --decode M      disaggregated serving: N prefill and M decode servers of --ranks
                              ranks each, against N + M aggregated servers; the rows are the
                              layouts by prefill-side policy (--policies; kv_cache_aware and
                              round_robin), the decode pool routed by TensorRT-LLM's default
  --transfer-ms-per-token X   with --prefill: KV transfer time per prompt token (0.01)
  --decode-config FILE|JSON   with --prefill: the decode pool's attention_dp_config (as --config;
                              TensorRT-LLM's defaults: the load-balancing router)
${ENGINE_HELP}
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
  tune [options]                Search attention_dp_config for the one that serves a trace best
                                (TTFT p90 by default) and print it next to TensorRT-LLM's defaults.
  serve [options]               Run the gateway in front of upstream engines (its own package,
                                adp-router-gateway: adp-router-gateway serve --help).

Options:
  -h, --help                    print this help (adp-router <command> --help: that command's)
  -v, --version                 print the version
`;

/** The gateway's package, loaded by `adp-router serve` when installed (a name in a variable: never bundled). */
const GATEWAY_PACKAGE = "adp-router-gateway";

/** What `adp-router serve` says where the gateway is not installed. */
const NO_GATEWAY = "adp-router serve: the gateway is its own package: npm install adp-router-gateway, then run adp-router-gateway serve\n";

/** The help text of `adp-router serve`. */
const SERVE_USAGE = `Usage: adp-router serve [options]

Runs the gateway, the package adp-router-gateway (npm install adp-router-gateway),
with the options of adp-router-gateway serve (adp-router-gateway serve --help).
`;

/** `adp-router serve`: the gateway's own command where its package is installed, else how to get it. */
async function serveCommand(args: string[]): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(SERVE_USAGE);
    return 0;
  }
  let gateway: { serveCommand(args: string[]): Promise<number> };
  try {
    gateway = (await import(GATEWAY_PACKAGE)) as typeof gateway;
  } catch (error) {
    // Only the package itself missing; a broken installation of it says what broke.
    if ((error as { code?: string }).code !== "ERR_MODULE_NOT_FOUND" || !String((error as Error).message).includes(`'${GATEWAY_PACKAGE}'`)) throw error;
    process.stderr.write(NO_GATEWAY);
    return 1;
  }
  return gateway.serveCommand(args);
}

/** Each command's help text, for `adp-router help <command>` (serve prints its own). */
const COMMAND_USAGE: Readonly<Record<string, string>> = {
  simulate: SIMULATE_USAGE,
  conformance: CONFORMANCE_USAGE,
  validate: VALIDATE_USAGE,
  schema: SCHEMA_USAGE,
  tune: TUNE_USAGE,
  serve: SERVE_USAGE,
};

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

/** The engines of `simulate --instances N` (none without it; its companion flags refused then). */
function readFleetOptions(values: Record<string, string | boolean | undefined>): { instances?: number; rankRouting?: RankRoutingKind[]; loadWeight?: number } {
  const instances = numberOption(values, "instances", (v) => isCount(v) && v <= 1024, "an integer in [1, 1024]");
  if (instances === undefined) {
    for (const flag of ["rank-routing", "load-weight"]) if (values[flag] !== undefined) throw new RangeError(`--${flag}: applies only with --instances`);
    return {};
  }
  // Its rows are the rank-routing kinds: flags that choose other rows or model other things are refused rather than ignored.
  for (const flag of ["policies", "replicas", "sync", "sync-delay-ms"]) if (values[flag] !== undefined) throw new RangeError(`--${flag}: does not apply with --instances (its rows are --rank-routing's kinds)`);
  if (values["index-updates"] !== undefined && values["index-updates"] !== "routing") throw new RangeError("--index-updates: only routing applies with --instances (the gateway sees each rank's cache as its events tell it, at once)");
  const kinds = (values["rank-routing"] as string | undefined)?.split(",").map((k) => k.trim());
  for (const k of kinds ?? []) if (!(RANK_ROUTING_KINDS as readonly string[]).includes(k)) throw new RangeError(`--rank-routing: must list kinds among ${RANK_ROUTING_KINDS.join(", ")}, got ${JSON.stringify(k)}`);
  const loadWeight = numberOption(values, "load-weight", isNonNegative, "a non-negative number");
  return { instances, ...(kinds ? { rankRouting: kinds as RankRoutingKind[] } : {}), ...(loadWeight !== undefined ? { loadWeight } : {}) };
}

/** The pools of `simulate --prefill N --decode M` (none without them; --transfer-ms-per-token refused then). */
function readPoolOptions(values: Record<string, string | boolean | undefined>): { prefill?: number; decode?: number; transferMsPerToken?: number; decodeConfig?: AttentionDpConfigInput } {
  const prefill = numberOption(values, "prefill", (v) => isCount(v) && v <= 1024, "an integer in [1, 1024]");
  const decode = numberOption(values, "decode", (v) => isCount(v) && v <= 1024, "an integer in [1, 1024]");
  if (prefill === undefined && decode === undefined) {
    for (const flag of ["transfer-ms-per-token", "decode-config"]) if (values[flag] !== undefined) throw new RangeError(`--${flag}: applies only with --prefill and --decode`);
    return {};
  }
  if (prefill === undefined || decode === undefined) throw new RangeError(`--${prefill === undefined ? "prefill" : "decode"}: is needed with --${prefill === undefined ? "decode" : "prefill"} (a disaggregated deployment has both pools)`);
  if (values.instances !== undefined) throw new RangeError("--instances: does not apply with --prefill and --decode");
  for (const flag of ["replicas", "sync", "sync-delay-ms"]) if (values[flag] !== undefined) throw new RangeError(`--${flag}: does not apply with --prefill and --decode`);
  const transferMsPerToken = numberOption(values, "transfer-ms-per-token", (v) => isNonNegative(v) && v <= 1000, "a number in [0, 1000]");
  const decodeConfig = values["decode-config"] === undefined ? undefined : readConfigOption(values["decode-config"] as string, "--decode-config");
  return { prefill, decode, ...(transferMsPerToken !== undefined ? { transferMsPerToken } : {}), ...(decodeConfig !== undefined ? { decodeConfig } : {}) };
}

/** `adp-router simulate [options]`; returns the exit status. */
function simulateCommand(args: string[]): number {
  const parsed = parseCommand(
    args,
    {
      ...WORKLOAD_AND_ENGINE_FLAGS,
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
      instances: { type: "string" },
      "rank-routing": { type: "string" },
      "load-weight": { type: "string" },
      prefill: { type: "string" },
      decode: { type: "string" },
      "transfer-ms-per-token": { type: "string" },
      "decode-config": { type: "string" },
      json: { type: "boolean", default: false },
      report: { type: "string" },
    },
    SIMULATE_USAGE,
    false,
  );
  if (parsed === null) return 0;
  // The option table above fixes each flag's type; parseCommand's generic return loses it.
  const values = parsed.values as WorkloadAndEngineValues & {
    [K in "policies" | "config" | "index-updates" | "event-delay" | "event-drop" | "event-seed" | "event-stale" | "replicas" | "sync" | "sync-delay-ms" | "instances" | "rank-routing" | "load-weight" | "prefill" | "decode" | "transfer-ms-per-token" | "decode-config" | "report"]?: string;
  } & { "event-replay"?: boolean; json: boolean };
  const engine = readEngine(values);
  const indexUpdates = values["index-updates"] ?? "routing";
  if (indexUpdates !== "routing" && indexUpdates !== "events") throw new RangeError(`--index-updates: must be routing or events, got ${JSON.stringify(indexUpdates)}`);
  // Event flags would change nothing without events: refuse them rather than ignore them.
  for (const flag of ["event-delay", "event-drop", "event-replay", "event-seed", "event-stale"]) {
    if (values[flag as keyof typeof values] !== undefined && indexUpdates !== "events") throw new RangeError(`--${flag}: applies only with --index-updates events`);
  }
  const events = {
    eventDelayMs: numberOption(values, "event-delay", isNonNegative, "a non-negative number of milliseconds"),
    eventDropRate: numberOption(values, "event-drop", (v) => v >= 0 && v <= 1, "a number from 0 to 1"),
    eventReplay: values["event-replay"],
    eventSeed: numberOption(values, "event-seed", Number.isSafeInteger, "an integer"),
    eventStaleMs: numberOption(values, "event-stale", isPositive, "a positive number of milliseconds"),
  };
  const replicas = numberOption(values, "replicas", (v) => isCount(v) && v <= MAX_REPLICAS, `an integer in [1, ${MAX_REPLICAS}]`);
  if (values.sync !== undefined && values.sync !== "stream" && values.sync !== "none") throw new RangeError(`--sync: must be stream or none, got ${JSON.stringify(values.sync)}`);
  // A delay would change nothing without the stream: refuse it rather than ignore it.
  if (values["sync-delay-ms"] !== undefined && values.sync === "none") throw new RangeError("--sync-delay-ms: applies only with --sync stream");
  const replicaOptions = {
    replicas,
    sync: values.sync as SyncMode | undefined,
    syncDelayMs: numberOption(values, "sync-delay-ms", isNonNegative, "a non-negative number of milliseconds"),
  };
  const config = values.config === undefined ? undefined : readConfigOption(values.config, "--config");
  const policies = values.policies?.split(",").map((p) => p.trim()) ?? (config ? [...POLICIES, CONFIG_POLICY] : undefined);
  if (policies?.includes(CONFIG_POLICY) && config === undefined) throw new RangeError(`--policies: ${CONFIG_POLICY} is the router --config selects: give --config`);
  const fleet = readFleetOptions(values);
  const pools = readPoolOptions(values);
  const trace = readWorkload(values);
  // simulate() reports requests done of requests × policies (src/simulate/run.ts): one bar for the whole run.
  const onProgress = progressBar(values.json);
  const result = simulate(trace, {
    ...engine,
    ...(config ? { config } : {}),
    indexUpdates: indexUpdates as IndexUpdates,
    ...events,
    ...replicaOptions,
    ...(policies && fleet.instances === undefined && (pools.prefill === undefined || values.policies !== undefined) ? { policies } : {}),
    ...fleet,
    ...pools,
    ...(onProgress ? { onProgress } : {}),
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

/** Dispatches a command line; returns the exit status, or null while an asynchronous command (serve, tune) runs. */
function main(argv: string[]): number | null {
  const [command, ...rest] = argv;
  // The gateway is long-lived and owns its own output (logs); every other command writes and exits.
  if (command !== "serve") exitQuietlyOnClosedStdout();
  try {
    switch (command) {
      case "serve":
        void serveCommand(rest).then(
          (status) => {
            process.exitCode = status;
            if (status === 0) process.exit(0); // handles (signal listeners) must not keep it alive
          },
          (error: unknown) => void (process.exitCode = reportFailure(command, error)),
        );
        return null;
      case "simulate":
        return simulateCommand(rest);
      case "tune":
        // Asynchronous (its worker threads answer on the event loop): the status is set when it ends.
        void tuneCommand(rest).then(
          (status) => void (process.exitCode = status),
          (error: unknown) => void (process.exitCode = reportFailure(command, error)),
        );
        return null;
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
    return reportFailure(command, error);
  }
}

/** Reports a command that could not be carried out, in one message without a stack; returns the exit status (1 for an unreadable trace, else 2). */
function reportFailure(command: string | undefined, error: unknown): number {
  // A trace that cannot be read is bad data, not a bad command line: status 1.
  if (error instanceof TraceError) {
    process.stderr.write(`adp-router ${command}: ${error.message}\n`);
    return 1;
  }
  if (error instanceof UsageError) {
    process.stderr.write(`adp-router ${command}: ${error.message}\nRun "adp-router ${command} --help" for usage.\n`);
  } else {
    // A ConfigFileError, or a flag value a check refused (RangeError naming the flag): the message alone, no stack.
    process.stderr.write(`adp-router ${command}: ${(error as Error).message}\n`);
  }
  return 2;
}

const status = main(process.argv.slice(2));
if (status !== null) process.exitCode = status;
