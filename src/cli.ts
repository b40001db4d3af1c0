// The `adp-router` command. Subcommands:
//   conformance FILE|- [--check]   answer (or check) conformance scenarios
//   validate FILE|-                validate an attention_dp_config JSON file
//   schema                         print the attention_dp_config JSON Schema

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { attentionDpConfigSchema, parseAttentionDpConfig, toAttentionDpConfigInput } from "./config.js";
import { firstDifference, runScenario } from "./conformance.js";

const USAGE = `Usage: adp-router <command> [options]

Commands:
  conformance FILE|- [--check]  Route each JSON-lines scenario and print one answer a line;
                                --check compares with each line's "expected" instead.
  validate FILE|-               Check an attention_dp_config JSON object; print it with defaults.
  schema                        Print the JSON Schema of attention_dp_config.
`;

function readInput(file: string): string {
  return readFileSync(file === "-" ? 0 : file, "utf8");
}

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

function main(argv: string[]): number {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case "conformance":
        return conformance(rest);
      case "validate":
        return validate(rest);
      case "schema":
        process.stdout.write(JSON.stringify(attentionDpConfigSchema, null, 2) + "\n");
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

process.exitCode = main(process.argv.slice(2));
