// The gateway's `tokenizer:` setting, read and checked (tokenizers/tokenizer-config.ts
// builds the tokenizer it names):
//
//   tokenizer: { kind: bytes }                          # the default: UTF-8 bytes of a canonical rendering
//   tokenizer: { kind: huggingface, path: /models/Qwen2.5-7B-Instruct }
//   tokenizer: { kind: huggingface, path: DIR, workers: 4, queue_size: 1024, timeout_ms: 10000 }
//
// `--tokenizer DIR` on the command line is the same as
// `{kind: huggingface, path: DIR}` (the file's workers, queue_size and
// timeout_ms still apply when it names kind huggingface). A relative path is
// taken from the current directory, as --config is.

import { describeValue } from "adp-router";
import { coreShare } from "../common/usable-cores.js";

/** How the gateway tokenizes prompts. */
export type TokenizerSettings =
  /** UTF-8 bytes of a canonical rendering (gateway/src/tokenizers/tokenizer.ts). */
  | { readonly kind: "bytes" }
  /** The engine's tokenizer, from a local folder of its Hugging Face files; the pool's settings are present when the file sets them (else the defaults of tokenizerPoolSettings). */
  | { readonly kind: "huggingface"; readonly path: string; readonly workers?: number; readonly queueSize?: number; readonly timeoutMs?: number; readonly engine?: TokenizerEngine };

/** Whose normalisation of chat messages and tools the rendering follows (gateway/src/tokenizers/chat-inputs.ts). */
export type TokenizerEngine = "tensorrt-llm" | "vllm";
/** The engines whose chat normalisation is followed. */
const ENGINES = ["tensorrt-llm", "vllm"] as const;

/** Tokenizer kinds. */
const KINDS = ["bytes", "huggingface"] as const;
/** The settings of kind huggingface only. */
const POOL_KEYS = ["workers", "queue_size", "timeout_ms", "engine"] as const;
/** Bounds of the pool's settings: [min, max], as readTokenizerSettings and the schema check them. */
const POOL_BOUNDS = { workers: [0, 64], queue_size: [0, 1 << 20], timeout_ms: [10, 600_000] } as const;
/** Jobs waiting for a tokenizer worker by default (past them, 429 tokenizer_busy). */
const QUEUE_SIZE = 1024;
/** A job's time on a worker by default before the worker is replaced and the request answered 503. */
const TIMEOUT_MS = 10_000;

/** Worker threads by default: one per core of this process's share (a worker of `--workers N` has 1/N of them), at least one, at most 8 (a gateway shares its host with other work). */
export function defaultTokenizerWorkers(): number {
  return Math.max(1, Math.min(8, coreShare()));
}

/** The pool settings of a huggingface tokenizer with their defaults filled in. */
export function tokenizerPoolSettings(settings: TokenizerSettings): { workers: number; queueSize: number; timeoutMs: number } {
  const s: { workers?: number; queueSize?: number; timeoutMs?: number } = settings.kind === "huggingface" ? settings : {};
  return { workers: s.workers ?? defaultTokenizerWorkers(), queueSize: s.queueSize ?? QUEUE_SIZE, timeoutMs: s.timeoutMs ?? TIMEOUT_MS };
}

/**
 * Tokens per block of the prefix index by default with an engine's tokenizer:
 * its own KV-cache block (TensorRT-LLM's tokens_per_block and vLLM's
 * block_size default to 32 and 16; 32 is the engine this gateway mirrors).
 * The byte tokenizer's default is 128 bytes, about one such block (config.ts).
 */
export const ENGINE_TOKENS_PER_BLOCK = 32;

/** What reading the setting needs from the configuration's reader (gateway/src/config/config.ts). */
export interface TokenizerSettingReader {
  fail(path: readonly (string | number)[], message: string, where?: string | null): void;
  section(v: unknown, path: (string | number)[], keys: readonly string[]): Record<string, unknown>;
  str(v: unknown, path: (string | number)[], fallback: string): string;
  int(v: unknown, path: (string | number)[], min: number, max: number, fallback: number): number;
}

/** Reads the `tokenizer:` setting, `--tokenizer DIR` (`flag`) over it; problems go to `r`. */
export function readTokenizerSettings(r: TokenizerSettingReader, value: unknown, flag: string | undefined): TokenizerSettings {
  if (flag !== undefined) {
    if (flag.trim() === "") r.fail(["tokenizer"], "must name a folder holding tokenizer.json and tokenizer_config.json", "--tokenizer");
    // The flag names the folder; a file that also says huggingface still sizes its pool.
    const file = value !== null && typeof value === "object" && !Array.isArray(value) && (value as Record<string, unknown>).kind === "huggingface" ? (value as Record<string, unknown>) : {};
    return { kind: "huggingface", path: flag, ...readPoolSettings(r, file) };
  }
  if (value === undefined || value === null) return { kind: "bytes" };
  const s = r.section(value, ["tokenizer"], ["kind", "path", ...POOL_KEYS]);
  const kind = r.str(s.kind, ["tokenizer", "kind"], "bytes");
  if (!(KINDS as readonly string[]).includes(kind)) {
    r.fail(["tokenizer", "kind"], `must be one of ${KINDS.join(", ")}, got ${describeValue(kind)}`);
    return { kind: "bytes" };
  }
  if (kind === "bytes") {
    for (const key of ["path", ...POOL_KEYS]) if (s[key] !== undefined) r.fail(["tokenizer", key], "is a setting of kind huggingface only");
    return { kind: "bytes" };
  }
  const dir = r.str(s.path, ["tokenizer", "path"], "");
  if (s.path === undefined) r.fail(["tokenizer", "path"], "is required: the folder holding the model's tokenizer.json and tokenizer_config.json");
  return { kind: "huggingface", path: dir, ...readPoolSettings(r, s) };
}

/** The pool settings the section `s` sets (absent or refused ones stay absent: their defaults are tokenizerPoolSettings'). */
function readPoolSettings(r: TokenizerSettingReader, s: Record<string, unknown>): { workers?: number; queueSize?: number; timeoutMs?: number; engine?: TokenizerEngine } {
  const out: { workers?: number; queueSize?: number; timeoutMs?: number; engine?: TokenizerEngine } = {};
  if (s.engine !== undefined && s.engine !== null) {
    if ((ENGINES as readonly unknown[]).includes(s.engine)) out.engine = s.engine as TokenizerEngine;
    else r.fail(["tokenizer", "engine"], `must be ${ENGINES.join(" or ")} (whose normalisation of chat messages and tools the rendering follows), got ${describeValue(s.engine)}`);
  }
  for (const [key, field] of [["workers", "workers"], ["queue_size", "queueSize"], ["timeout_ms", "timeoutMs"]] as const) {
    const v = r.int(s[key], ["tokenizer", key], POOL_BOUNDS[key][0], POOL_BOUNDS[key][1], NaN); // NaN: absent, or refused (and recorded)
    if (!Number.isNaN(v)) out[field] = v;
  }
  return out;
}

/** JSON Schema of the `tokenizer:` setting (in the gateway's schema, config.ts). */
export const tokenizerSchema = Object.freeze({
  type: "object",
  additionalProperties: false,
  description: "How prompts become the token ids routing uses: UTF-8 bytes (default), or the engine's Hugging Face tokenizer from a local folder.",
  properties: {
    kind: { enum: [...KINDS], default: "bytes" },
    path: { type: "string", minLength: 1, description: "kind huggingface: the folder holding tokenizer.json and tokenizer_config.json (and chat_template.jinja or chat_template.json, if the model has them)." },
    engine: { enum: [...ENGINES], default: "tensorrt-llm", description: "kind huggingface: the engine whose normalisation of chat messages and tools the rendering follows (TensorRT-LLM dumps \"strict\": null on every tool and refuses undeclared fields; vLLM keeps strict only where sent)." },
    workers: {
      type: "integer",
      minimum: POOL_BOUNDS.workers[0],
      maximum: POOL_BOUNDS.workers[1],
      description: "kind huggingface: worker threads that render and tokenize prompts, one request at a time each (default: the cores, 1 to 8); 0 tokenizes on the event loop, where a long prompt stalls every other request and /health.",
    },
    queue_size: {
      type: "integer",
      minimum: POOL_BOUNDS.queue_size[0],
      maximum: POOL_BOUNDS.queue_size[1],
      default: QUEUE_SIZE,
      description: "kind huggingface: requests that may wait for a tokenizer worker; past them a request is answered 429 tokenizer_busy with retry-after: 1.",
    },
    timeout_ms: {
      type: "integer",
      minimum: POOL_BOUNDS.timeout_ms[0],
      maximum: POOL_BOUNDS.timeout_ms[1],
      default: TIMEOUT_MS,
      description: "kind huggingface: longest a worker may spend on one request; past it the worker is replaced and the request answered 503 tokenize_timeout with retry-after (the other requests carry on).",
    },
  },
  if: { properties: { kind: { const: "huggingface" } }, required: ["kind"] },
  then: { required: ["path"] },
});

