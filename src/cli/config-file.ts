// Reading an attention_dp_config from the command line: a JSON or YAML file
// (or standard input, or inline JSON), bare or under `attention_dp_config:` as in
// TensorRT-LLM's extra_llm_api_options.yaml, with file:line:col in every error.

import { readFileSync } from "node:fs";
import { LineCounter, isMap, isScalar, parseDocument } from "yaml";
import { parseAttentionDpConfig } from "../config.js";
import { AttentionDpConfigError, describeValue, excerpt } from "../errors.js";

/**
 * A config file (or inline value) that cannot be read, is neither JSON nor
 * YAML, or (given to a flag such as simulate's --config) holds an invalid
 * attention_dp_config. Its message names the file, and the line and column
 * when known, so an editor can jump there; exit status 2, no stack.
 */
export class ConfigFileError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_CONFIG_FILE";
  constructor(message: string) {
    super(message);
    this.name = "ConfigFileError";
  }
}

/** An attention_dp_config as read from a file, with where each of its fields is written. */
export interface ConfigSource {
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
export function readConfigText(text: string, name: string): ConfigSource {
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
export function readConfigFile(file: string): ConfigSource {
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
export function describeConfigError(error: AttentionDpConfigError, source: ConfigSource): string {
  const n = error.issues.length;
  return [
    `Invalid attention_dp_config (${n} problem${n === 1 ? "" : "s"}):`,
    ...error.issues.map((i) => {
      const where = source.locate(i.field);
      return `  ${where ? `${where}: ` : ""}${excerpt(i.field, 200)}: ${i.rule}, got ${describeValue(i.received)}`;
    }),
  ].join("\n");
}

/** The text of FILE, or of standard input for `-`. */
export function readInput(file: string): string {
  return readFileSync(file === "-" ? 0 : file, "utf8");
}

/**
 * The config a flag such as `--config` names: inline JSON when it starts with
 * "{", else a file (- for standard input); checked, with every problem placed
 * in the file. Throws {@link ConfigFileError} naming `flag`.
 */
export function readConfigOption(value: string, flag: string): Record<string, unknown> {
  let source: ConfigSource;
  try {
    source = value.trimStart().startsWith("{") ? readConfigText(value, flag) : readConfigFile(value);
  } catch (error) {
    if (!(error instanceof ConfigFileError)) throw error;
    throw new ConfigFileError(`${flag}: ${error.message}`);
  }
  try {
    parseAttentionDpConfig(source.config);
  } catch (error) {
    if (!(error instanceof AttentionDpConfigError)) throw error;
    // A bad value, not a bad command line: the problems alone, status 2 like any refused flag value.
    throw new ConfigFileError(`${flag}: ${describeConfigError(error, source)}`);
  }
  return source.config as Record<string, unknown>;
}
