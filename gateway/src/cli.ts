// The `adp-router-gateway` command. Subcommands:
//   serve [options]       run the gateway (command.ts)
//   validate FILE         check a gateway YAML file: every problem with its line, nothing started
//   schema                print the gateway YAML file's JSON Schema

import { createRequire } from "node:module";
import { SERVE_USAGE, serveCommand } from "./command.js";
import { gatewayConfigSchema } from "./config/config-schema.js";
import { VALIDATE_USAGE, validateCommand } from "./validate-command.js";

/** The help text of `adp-router-gateway` itself. */
const USAGE = `Usage: adp-router-gateway <command> [options]

Commands:
  serve [options]       Run the OpenAI-compatible gateway in front of upstream engines:
                          adp-router-gateway serve --upstream http://127.0.0.1:8001 --upstream ...
                          adp-router-gateway serve --config gateway.yaml
  validate FILE         Check a gateway YAML file: every problem with its file and line;
                        exit 0 when it is valid, 1 when not, 2 when it cannot be read.
  schema                Print the JSON Schema of the gateway YAML file.

Options:
  -h, --help            print this help (adp-router-gateway <command> --help: that command's)
  -v, --version         print the version
`;

/** Each command's help text, for `adp-router-gateway help <command>`. */
const COMMAND_USAGE: Readonly<Record<string, string>> = { serve: SERVE_USAGE, validate: VALIDATE_USAGE, schema: "Usage: adp-router-gateway schema\n\nPrints the JSON Schema of the gateway YAML file.\n" };

/** Dispatches a command line; resolves with the exit status. */
async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "serve":
      return serveCommand(rest);
    case "validate":
      return validateCommand(rest);
    case "schema":
      if (rest.length > 0) {
        const help = rest.every((a) => a === "--help" || a === "-h");
        (help ? process.stdout : process.stderr).write(help ? COMMAND_USAGE.schema! : `adp-router-gateway schema: takes no arguments, got ${JSON.stringify(rest[0])}\n\n${COMMAND_USAGE.schema!}`);
        return help ? 0 : 2;
      }
      process.stdout.write(`${JSON.stringify(gatewayConfigSchema, null, 2)}\n`);
      return 0;
    case "-v":
    case "--version":
    case "version":
      process.stdout.write(`${(createRequire(import.meta.url)("../package.json") as { version: string }).version}\n`);
      return 0;
    case undefined:
    case "-h":
    case "--help":
    case "help": {
      const topic = rest[0];
      if (command === "help" && topic !== undefined) {
        if (!Object.hasOwn(COMMAND_USAGE, topic)) {
          process.stderr.write(`adp-router-gateway help: unknown command ${JSON.stringify(topic)}\n\n${USAGE}`);
          return 2;
        }
        process.stdout.write(COMMAND_USAGE[topic]!);
        return 0;
      }
      process.stdout.write(USAGE);
      return command === undefined ? 2 : 0;
    }
    default:
      process.stderr.write(`adp-router-gateway: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (status) => {
    process.exitCode = status;
    if (status === 0 && process.argv[2] === "serve") process.exit(0); // handles (signal listeners) must not keep it alive
  },
  (error: unknown) => {
    process.stderr.write(`adp-router-gateway: ${(error as Error).stack ?? String(error)}\n`);
    process.exitCode = 1;
  },
);
