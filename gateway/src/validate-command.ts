// `adp-router-gateway validate FILE`: reads a gateway YAML file as `serve`
// would and lists every problem with its file and line, starting nothing (no
// listener, no upstream contacted, no worker). Secret files and environment
// variables the file names are read, as at start, so a missing key file is a
// problem here too; their contents are never printed.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { GatewayConfigError, loadGatewayConfig } from "./config/config.js";
import type { ConfigIssue } from "./config/config-types.js";

/** The help text of `adp-router-gateway validate`. */
export const VALIDATE_USAGE = `Usage: adp-router-gateway validate FILE

Checks a gateway YAML file as serve reads it, without starting anything: prints
every problem as FILE:LINE: field: message (warnings too), then a summary.
Exits 0 when the file is valid, 1 when it is not, 2 when it cannot be read.

  -h, --help            print this help
`;

/** One problem as a line. */
const line = (kind: string, i: ConfigIssue) => `${i.where ?? "(no line)"}: ${kind}${i.field}: ${i.message}\n`;

/** Runs `adp-router-gateway validate`; resolves with the exit status. */
export async function validateCommand(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args, options: { help: { type: "boolean", short: "h" } }, allowPositionals: true, strict: true });
  } catch (error) {
    process.stderr.write(`adp-router-gateway validate: ${(error as Error).message}\n\n${VALIDATE_USAGE}`);
    return 2;
  }
  if (parsed.values.help) {
    process.stdout.write(VALIDATE_USAGE);
    return 0;
  }
  if (parsed.positionals.length !== 1) {
    process.stderr.write(`adp-router-gateway validate: give one FILE\n\n${VALIDATE_USAGE}`);
    return 2;
  }
  const name = parsed.positionals[0]!;
  let text: string;
  try {
    text = readFileSync(name, "utf8");
  } catch (error) {
    process.stderr.write(`adp-router-gateway validate: cannot read ${name}: ${(error as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (error as Error).message}\n`);
    return 2;
  }
  try {
    const config = loadGatewayConfig({ file: { name, text } });
    for (const w of config.warnings) process.stdout.write(line("warning: ", w));
    const upstreams = config.upstreams.length;
    const d = config.disaggregation;
    const pools = d === null ? "" : ` in pools of ${d.protocol}: ${config.upstreams.filter((u) => u.role === "prefill").length} prefill, ${config.upstreams.filter((u) => u.role === "decode").length} decode`;
    process.stdout.write(`${name}: valid (${upstreams} upstream${upstreams === 1 ? "" : "s"}${pools}, listening on ${config.listen.host}:${config.listen.port}${config.warnings.length > 0 ? `, ${config.warnings.length} warning${config.warnings.length === 1 ? "" : "s"}` : ""})\n`);
    return 0;
  } catch (error) {
    if (!(error instanceof GatewayConfigError)) throw error;
    for (const i of error.issues) process.stdout.write(line("", i));
    process.stdout.write(`${name}: ${error.issues.length} problem${error.issues.length === 1 ? "" : "s"}\n`);
    return 1;
  }
}
