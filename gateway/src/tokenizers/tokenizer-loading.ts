// What the gateway's `tokenizer:` setting builds (config/tokenizer-settings.ts
// reads it): how prompts become the token ids the gateway routes by.
//
//   tokenizer: { kind: bytes }                          # the default: UTF-8 bytes of a canonical rendering
//   tokenizer: { kind: huggingface, path: /models/Qwen2.5-7B-Instruct }
//   tokenizer: { kind: huggingface, path: DIR, workers: 4, queue_size: 1024, timeout_ms: 10000 }
//
// `huggingface` loads the engine's own tokenizer from a local folder (never
// the network): tokenizer.json and tokenizer_config.json, and
// chat_template.jinja or chat_template.json where the model keeps its chat
// template there. `--tokenizer DIR` on the command line is the same as
// `{kind: huggingface, path: DIR}` (the file's workers, queue_size and
// timeout_ms still apply when it names kind huggingface). A relative path is
// taken from the current directory, as --config is.
//
// Rendering and encoding a long prompt costs tens of milliseconds to seconds
// (BPE is quadratic in a word's length), so a Hugging Face tokenizer runs on
// `workers` worker threads (request-reader.ts), never on the event loop that
// answers /health, unless `workers: 0` asks for that.

import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { ChatTemplateSyntaxError } from "./chat-template.js";
import { HuggingFaceTokenizer, TokenizerFilesError, type HuggingFaceTokenizerOptions } from "./hf-tokenizer.js";
import { Utf8ByteTokenizer, type Tokenizer } from "./tokenizer.js";
import type { TokenizerSettings } from "../config/tokenizer-settings.js";

/** A tokenizer that cannot be built from its settings: one message naming the file at fault. */
export class TokenizerLoadError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_TOKENIZER_LOAD";
  constructor(message: string) {
    super(message);
    this.name = "TokenizerLoadError";
  }
}

/** A file of `dir` read as text, or null when it is not there; throws TokenizerLoadError when it cannot be read. */
function readText(dir: string, name: string, required: boolean): string | null {
  const file = path.join(dir, name);
  if (!existsSync(file)) {
    if (required) throw new TokenizerLoadError(`${file}: no such file (the tokenizer folder must hold tokenizer.json and tokenizer_config.json)`);
    return null;
  }
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    throw new TokenizerLoadError(`${file}: cannot be read: ${(error as Error).message}`);
  }
}

/** `text` parsed as JSON, or TokenizerLoadError naming the file. */
function parseJson(dir: string, name: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new TokenizerLoadError(`${path.join(dir, name)}: not valid JSON: ${(error as Error).message}`);
  }
}

/** The Hugging Face tokenizer in folder `dir` (`options` as HuggingFaceTokenizer's, its name set here); throws TokenizerLoadError with one clear message. */
export function loadHuggingFaceTokenizer(dir: string, options: Omit<HuggingFaceTokenizerOptions, "name"> = {}): HuggingFaceTokenizer {
  let stat;
  try {
    stat = statSync(dir);
  } catch {
    throw new TokenizerLoadError(`${dir}: no such folder (tokenizer.path or --tokenizer must name the folder holding the model's tokenizer.json and tokenizer_config.json)`);
  }
  if (!stat.isDirectory()) throw new TokenizerLoadError(`${dir}: not a folder (tokenizer.path or --tokenizer names the folder holding tokenizer.json, not the file)`);
  const tokenizer = parseJson(dir, "tokenizer.json", readText(dir, "tokenizer.json", true)!);
  const config = parseJson(dir, "tokenizer_config.json", readText(dir, "tokenizer_config.json", true)!);
  const jinja = readText(dir, "chat_template.jinja", false);
  const jsonText = readText(dir, "chat_template.json", false);
  const chatTemplateJson = jsonText === null ? null : parseJson(dir, "chat_template.json", jsonText);
  try {
    return new HuggingFaceTokenizer({ tokenizer, config, chatTemplateJinja: jinja, chatTemplateJson }, { ...options, name: `huggingface:${path.basename(path.resolve(dir))}` });
  } catch (error) {
    // The files' own errors name the file; say which folder it is in.
    if (error instanceof TokenizerFilesError || error instanceof ChatTemplateSyntaxError) throw new TokenizerLoadError(path.join(dir, error.file) + error.message.slice(error.file.length));
    throw new TokenizerLoadError(`${dir}: the tokenizer cannot be built: ${(error as Error).message}`);
  }
}

/** The tokenizer `settings` name (what `createGateway(config, { tokenizer })` takes); throws TokenizerLoadError. */
export function loadTokenizer(settings: TokenizerSettings): Tokenizer {
  return settings.kind === "huggingface" ? loadHuggingFaceTokenizer(settings.path, settings.engine === undefined ? {} : { engine: settings.engine }) : new Utf8ByteTokenizer();
}
