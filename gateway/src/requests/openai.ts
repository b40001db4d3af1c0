// The OpenAI-compatible request side: what the gateway reads from a request
// body and its headers to route it, and OpenAI-style error bodies. The body is
// parsed once (the prompt is needed); it is forwarded as the bytes received.

import type { TokenIds } from "adp-router";
import { TokenizerRequestError, type ChatMessage, type Tokenizer } from "../tokenizers/tokenizer.js";
import { SUBAGENT_AUTH_HEADER, type SubagentClaim } from "./subagent-auth.js";
import { parseJsonKeepingIntegers } from "../common/json-integers.js";
import { elideLongLiterals, LONG_LITERAL_BYTES, restoreElsewhere, type ElidedBody } from "./long-literals.js";
import { JsonShape, jsonShapeProblem } from "../common/json-shape.js";

/** The error code of a status when no more precise one is given (every error body's code is a string). */
const CODES: Readonly<Record<number, string>> = {
  400: "invalid_request",
  401: "invalid_api_key",
  404: "not_found",
  405: "method_not_allowed",
  408: "request_timeout",
  409: "conflict",
  413: "payload_too_large",
  429: "rate_limit_exceeded",
  431: "headers_too_large",
  499: "client_closed",
  500: "internal_error",
  502: "upstream_error",
  503: "service_unavailable",
  504: "upstream_timeout",
};

/** An error the gateway answers itself, OpenAI-style. */
export class HttpError extends Error {
  /** A stable machine-readable code (never null). */
  readonly code: string;
  constructor(
    readonly status: number,
    message: string,
    readonly type = status >= 500 ? "server_error" : "invalid_request_error",
    code: string | null = null,
    readonly headers: Record<string, string> = {},
    /** The request field at fault, when one is. */
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = "HttpError";
    this.code = code ?? CODES[status] ?? (status >= 500 ? "server_error" : "invalid_request");
  }

  /** The response body: `{"error": {"message", "type", "param", "code"}}`. */
  body(): string {
    return JSON.stringify({ error: { message: this.message, type: this.type, param: this.param, code: this.code } });
  }
}

/** A 400 about one field of the request body. */
const bad = (message: string, param: string, code = "invalid_value") => new HttpError(400, message, "invalid_request_error", code, {}, param);

/** TensorRT-LLM's session headers, in the order its serve edge reads them (the body's id wins). */
export const SESSION_HEADERS = ["x-session-id", "x-correlation-id", "x-session-affinity", "x-multi-turn-session-id"] as const;
/** The header carrying a sub-agent affinity id. */
export const SUBAGENT_HEADER = "x-trtllm-subagent-affinity-id";
/** Longest conversation, sub-agent or salt id taken (the library's limit). */
const MAX_ID = 4096;

/** What routing needs from one request. */
export interface RoutedRequest {
  /** `chat` or `completion`. */
  readonly kind: "chat" | "completion";
  readonly model: string;
  readonly stream: boolean;
  readonly tokens: TokenIds;
  readonly conversationId: string | null;
  readonly subagentId: string | null;
  /** What a signature of the sub-agent hint binds, and the signature sent (null: no hint); checked where the key is (scheduler.ts). */
  readonly subagentClaim: (SubagentClaim & { readonly signature: string | null }) | null;
  readonly cacheSalt: string | null;
  /** The LoRA task id the model name maps to (routing.lora_adapters), or null. */
  readonly loraTaskId: number | null;
}

/** A header's first value, trimmed, or null. */
function header(headers: Record<string, string | string[] | undefined>, name: string): string | null {
  const v = headers[name];
  const text = (Array.isArray(v) ? v[0] : v)?.trim();
  return text ? text : null;
}

/** An id field: a non-empty string (numbers are taken as their text) of at most MAX_ID characters, trimmed unless `trim` is false. */
function idOf(v: unknown, field: string, trim = true): string | null {
  if (v === undefined || v === null) return null;
  const text = typeof v === "string" ? (trim ? v.trim() : v) : typeof v === "number" && Number.isFinite(v) ? String(v) : null;
  if (text === null) throw bad(`${field} must be a string`, field);
  if (text === "") throw bad(`${field} must be non-empty`, field);
  if (text.length > MAX_ID) throw bad(`${field} must be at most ${MAX_ID} characters`, field);
  return text;
}

/**
 * A JSON object from a request body (bytes as received, or its text); HttpError 400 `invalid_json` or
 * `invalid_request` (with `what` as the message) otherwise. Bytes are first walked for their structure
 * (json-shape.ts), unless `shape` says a walk of them did already, or stopped past a bound.
 */
export function parseJsonObject(raw: Buffer | string, what = "the request body must be a JSON object", shape: JsonShape | null = null): Record<string, unknown> {
  const problem = shape !== null && (shape.walked || shape.problem !== null) ? shape.problem : typeof raw === "string" ? null : jsonShapeProblem(raw);
  if (problem !== null) throw new HttpError(400, problem, "invalid_request_error", "invalid_request");
  let body: unknown;
  try {
    body = JSON.parse(typeof raw === "string" ? raw : raw.toString("utf8"));
  } catch {
    throw new HttpError(400, "the request body is not valid JSON", "invalid_request_error", "invalid_json");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new HttpError(400, what, "invalid_request_error", "invalid_request");
  return body as Record<string, unknown>;
}

/** Bounds on one request's prompt, checked before and after tokenizing (the gateway's limits.max_prompt_chars and max_prompt_tokens). */
export interface PromptLimits {
  /** Most characters of the prompt's text (a chat's strings: messages, tools, documents); past it 413 before any tokenizing. */
  readonly maxPromptChars: number;
  /** Most token ids of the prompt (as tokenized, or as given); past it 400 `context_length_exceeded`. */
  readonly maxPromptTokens: number;
}

/** No bound: what readRequest applies unless told otherwise. */
export const NO_PROMPT_LIMITS: PromptLimits = Object.freeze({ maxPromptChars: Infinity, maxPromptTokens: Infinity });

/** Deepest nesting the prompt's characters are counted through (messages are a few levels deep, tool schemas a few more). */
const MAX_PROMPT_DEPTH = 128;

/** The 413 of a prompt of at least `chars` characters, over `limit`. */
const tooManyChars = (chars: number, limit: number, param: string) =>
  new HttpError(413, `the prompt is ${chars}+ characters, over limits.max_prompt_chars (${limit})`, "invalid_request_error", "prompt_too_large", {}, param);

/** The 400 of a prompt of `tokens` token ids, over `limit`. */
const tooManyTokens = (tokens: number, limit: number, param: string) =>
  new HttpError(400, `the prompt is ${tokens} tokens, over limits.max_prompt_tokens (${limit})`, "invalid_request_error", "context_length_exceeded", {}, param);

/**
 * `count` plus the characters of everything under `root` (a parsed JSON
 * value) that a renderer can print: strings, object keys, and numbers,
 * booleans and nulls at their JSON length (a chat template's `tojson` of tool
 * schemas and arguments, the byte tokenizer's JSON of non-text parts), walked
 * with an explicit stack (a body nests as deep as it likes; the
 * call stack must not follow it). Returns as soon as the count passes `limit`,
 * so a huge prompt costs a scan up to the limit only. Throws 400 past
 * MAX_PROMPT_DEPTH: no real chat request nests that deep, and the renderers after this recurse.
 */
function countChars(root: unknown, count: number, limit: number, param: string): number {
  const values: unknown[] = [root];
  const depths: number[] = [0];
  while (values.length > 0) {
    const v = values.pop();
    const depth = depths.pop()!;
    if (typeof v === "string") count += v.length;
    else if (typeof v === "number" || typeof v === "boolean") count += String(v).length;
    else if (v === null) count += 4;
    else if (typeof v === "object") {
      if (depth >= MAX_PROMPT_DEPTH) throw bad(`${param} are nested too deeply`, param);
      // Each element or member costs at least its separator: a million `{}` or `0` are a million characters, not none.
      if (Array.isArray(v)) {
        count += v.length + 2;
        for (const x of v) {
          values.push(x);
          depths.push(depth + 1);
        }
      } else {
        for (const k in v) {
          count += k.length + 4;
          values.push((v as Record<string, unknown>)[k]);
          depths.push(depth + 1);
        }
        count += 2;
      }
    }
    if (count > limit) return count;
  }
  return count;
}

/**
 * countChars of a list of flat objects (each value a string, number, boolean
 * or null: the usual chat messages) without its walk's stacks, or -1 for
 * anything else (then the walk counts it). Stops once past `limit`.
 */
function flatListChars(list: unknown, limit: number): number {
  if (!Array.isArray(list)) return -1;
  let count = list.length + 2;
  for (let i = 0; i < list.length && count <= limit; i++) {
    const m = list[i] as Record<string, unknown> | null;
    if (typeof m !== "object" || m === null || Array.isArray(m)) return -1;
    for (const k in m) {
      const v = m[k];
      count += k.length + 4;
      if (typeof v === "string") count += v.length;
      else if (typeof v === "number" || typeof v === "boolean") count += String(v).length;
      else if (v === null) count += 4;
      else return -1;
    }
    count += 2;
  }
  return count;
}

/**
 * Refuses (413) a chat whose messages, tools and documents hold more than
 * `limit` characters; the walk stops at the limit. `elided`: the characters
 * the body's set-aside literals hold beyond their placeholders; a count over
 * the limit with them returns false (the caller reads the body whole again,
 * for the walk's own message).
 */
function checkChatChars(b: Record<string, unknown>, limit: number, elided = 0): boolean {
  if (limit === Infinity) return true;
  // The usual chat (flat messages, no tools or documents) is counted in one pass; a count over the limit is
  // counted again by the walk, which stops where its message says.
  const flat = b.tools === undefined && b.documents === undefined ? flatListChars(b.messages, limit - elided) : -1;
  if (flat >= 0 && flat + elided <= limit) return true;
  let count = elided;
  for (const param of ["messages", "tools", "documents"] as const) {
    count = countChars(b[param], count, limit, param);
    if (count > limit) {
      if (elided > 0) return false;
      throw tooManyChars(count, limit, "messages");
    }
  }
  return true;
}

/**
 * Keeps the placeholders where the byte tokenizer reads a prompt's text (a
 * message's content, a text part's text, a completion's prompt or prompts)
 * and puts every other one back as its text; returns the characters the kept
 * ones hold beyond their own length (what the prompt's count must add).
 */
function keepPromptLiterals(kind: "chat" | "completion", b: Record<string, unknown>, elided: ElidedBody): number {
  const kept = new Map<object, string | null>();
  let found = 0;
  let extra = 0;
  const note = (s: unknown): boolean => {
    if (typeof s !== "string" || elided.indexOf(s) < 0) return false;
    found++;
    extra += elided.lengthOf(s) - s.length;
    return true;
  };
  if (kind === "chat" && Array.isArray(b.messages)) {
    for (const m of b.messages as unknown[]) {
      if (typeof m !== "object" || m === null || Array.isArray(m)) continue;
      const content = (m as Record<string, unknown>).content;
      if (typeof content === "string") {
        if (note(content)) kept.set(m, "content");
      } else if (Array.isArray(content)) {
        for (const part of content as unknown[]) {
          const p = part as { type?: unknown; text?: unknown } | null;
          if (p !== null && typeof p === "object" && !Array.isArray(p) && p.type === "text" && note(p.text)) kept.set(p, "text");
        }
      }
    }
  } else if (kind === "completion") {
    const prompt = b.prompt;
    if (typeof prompt === "string") {
      if (note(prompt)) kept.set(b, "prompt");
    } else if (Array.isArray(prompt) && prompt.every((x) => typeof x === "string")) {
      let any = false;
      for (const x of prompt) any = note(x) || any;
      if (any) kept.set(prompt, null);
    }
  }
  if (found < elided.count) restoreElsewhere(b, elided, kept);
  return extra;
}

/**
 * The last body parsed, kept only so that the hidden classes ("maps") of its
 * objects outlive V8's mark-compacts. A map whose every object has died is
 * collected, and each inline cache that named it is cleared, which resets the
 * tier-up count of the functions reading bodies: over 3,000 trace requests
 * `readRequest` was reset 25 times, always just after a mark-compact, and
 * never optimized; with this, 3 times, and optimized (docs/performance.md).
 */
let lastBody: object | null = null;
/** The largest body kept so (a body of up to MAX_JSON_ITEMS objects could hold tens of MiB of heap). */
const KEPT_BODY_BYTES = 256 * 1024;

/**
 * Parses and checks a chat or completion request body (bytes as received)
 * and reads its routing fields; throws HttpError 400 for anything malformed,
 * 413 for a prompt over `limits.maxPromptChars` (counted before any
 * rendering or tokenizing, the costly part), 400 `context_length_exceeded`
 * for one over `limits.maxPromptTokens`.
 */
export function readRequest(
  kind: "chat" | "completion",
  raw: Buffer,
  headers: Record<string, string | string[] | undefined>,
  tokenizer: Tokenizer,
  loraAdapters: ReadonlyMap<string, number> = new Map(),
  limits: PromptLimits = NO_PROMPT_LIMITS,
  whole = false,
): RoutedRequest {
  // A tokenizer of bytes reads a long prompt's text from the body as it came (long-literals.ts); `whole`: parse all of it.
  // The walk that finds the literals also counts the body's structure (json-shape.ts), which is then not walked again.
  const shape = whole || tokenizer.readsLiterals !== true || raw.length < LONG_LITERAL_BYTES ? null : new JsonShape();
  const elided = shape === null ? null : elideLongLiterals(raw, shape);
  const b = parseJsonObject(elided === null ? raw : elided.text, undefined, shape);
  // Kept while the body is of a request's usual size: a larger one is not held until the next request comes.
  if (raw.length <= KEPT_BODY_BYTES) lastBody = b;
  const extra = elided === null ? 0 : keepPromptLiterals(kind, b, elided);
  const literals = elided ?? undefined;
  if (b.model === undefined || b.model === null) throw bad("model is required", "model", "missing_field");
  if (typeof b.model !== "string" || b.model === "") throw bad("model must be a non-empty string", "model");
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== "boolean") throw bad("stream must be a boolean", "stream");
  let tokens: TokenIds;
  if (kind === "chat") {
    const messages = b.messages;
    if (messages === undefined || messages === null) throw bad("messages is required", "messages", "missing_field");
    if (!Array.isArray(messages) || messages.length === 0) throw bad("messages must be a non-empty array", "messages");
    for (const [i, m] of messages.entries()) {
      if (typeof m !== "object" || m === null || Array.isArray(m) || typeof (m as ChatMessage).role !== "string") throw bad(`messages[${i}] must be an object with a string role`, `messages[${i}]`);
    }
    if (!checkChatChars(b, limits.maxPromptChars, extra)) return readRequest(kind, raw, headers, tokenizer, loraAdapters, limits, true);
    try {
      tokens = tokenizer.encodeChat(messages as ChatMessage[], b, literals);
    } catch (error) {
      if (error instanceof RangeError) throw bad("messages are nested too deeply", "messages"); // JSON.stringify of the parts recursed too far
      if (error instanceof TokenizerRequestError) throw bad(error.message, "messages"); // the chat template refused it, as the engine would
      throw error;
    }
  } else {
    const prompt = b.prompt;
    if (prompt === undefined || prompt === null) throw bad("prompt is required", "prompt", "missing_field");
    // A batch (a list of strings, or of token-id lists, as OpenAI takes) is routed on its first
    // prompt: one upstream serves the whole request, and a batch's prompts usually share its prefix.
    const ids = (t: unknown): t is number[] => Array.isArray(t) && t.length > 0 && t.every((x) => typeof x === "number" && x >>> 0 === x);
    let text: string | number[];
    if (typeof prompt === "string") text = prompt;
    else if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => typeof t === "string")) text = prompt[0] as string;
    else if (ids(prompt)) text = prompt;
    else if (Array.isArray(prompt) && prompt.length > 0 && prompt.every(ids)) text = prompt[0] as number[];
    else throw bad("prompt must be a string, a list of strings, a list of token ids or a list of token-id lists", "prompt");
    // Only the routed (first) prompt is tokenized here, but the engine runs them all: the bounds take the whole batch.
    const batch = Array.isArray(prompt) && prompt.length > 0 && typeof prompt[0] !== "number" ? (prompt as (string | number[])[]) : [text];
    let chars = 0;
    let given = 0;
    for (const p of batch) if (typeof p === "string") chars += elided === null ? p.length : elided.lengthOf(p);
    else given += p.length;
    if (chars > limits.maxPromptChars) throw tooManyChars(chars, limits.maxPromptChars, "prompt");
    if (given > limits.maxPromptTokens) throw tooManyTokens(given, limits.maxPromptTokens, "prompt");
    try {
      tokens = tokenizer.encodePrompt(text, b, literals);
    } catch (error) {
      if (error instanceof TokenizerRequestError) throw bad(error.message, "prompt");
      throw error;
    }
  }
  if (tokens.length > limits.maxPromptTokens) {
    const n = tokens.length;
    tokenizer.release?.(tokens);
    throw tooManyTokens(n, limits.maxPromptTokens, kind === "chat" ? "messages" : "prompt");
  }
  let who: ReturnType<typeof identityOf>;
  try {
    who = identityOf(b, raw, headers);
  } catch (error) {
    tokenizer.release?.(tokens); // refused after tokenizing: its ids go back to the tokenizer's pool, not to the GC
    throw error;
  }
  const { conversationId, subagentId, subagentClaim, cacheSalt } = who;
  return { kind, model: b.model, stream: b.stream === true, tokens, conversationId, subagentId, subagentClaim, cacheSalt, loraTaskId: loraAdapters.get(b.model) ?? null };
}

/** A request's conversation, sub-agent hint and cache salt, from its body and headers; throws HttpError 400 for a malformed one. */
function identityOf(b: Record<string, unknown>, raw: Buffer, headers: Record<string, string | string[] | undefined>): Pick<RoutedRequest, "conversationId" | "subagentId" | "subagentClaim" | "cacheSalt"> {
  const params = b.conversation_params;
  let conversationId: string | null = null;
  if (params !== undefined && params !== null) {
    if (typeof params !== "object" || Array.isArray(params)) throw bad("conversation_params must be an object", "conversation_params");
    conversationId = idOf((params as Record<string, unknown>).conversation_id, "conversation_params.conversation_id");
  }
  if (conversationId === null) {
    for (const name of SESSION_HEADERS) {
      conversationId = header(headers, name);
      if (conversationId !== null) break;
    }
    if (conversationId !== null && conversationId.length > MAX_ID) throw new HttpError(400, `the session header must be at most ${MAX_ID} characters`, "invalid_request_error", "invalid_header");
  }
  const subagentId = idOf(header(headers, SUBAGENT_HEADER), SUBAGENT_HEADER);
  // The engines hash the salt as sent: trimmed, " a" would match the blocks of "a", which the engine keeps apart.
  const cacheSalt = idOf(b.cache_salt, "cache_salt", false);
  const subagentClaim = subagentId === null ? null : claimOf(b, raw, subagentId, header(headers, SUBAGENT_AUTH_HEADER));
  return { conversationId, subagentId, subagentClaim, cacheSalt };
}

/**
 * What a sub-agent hint's signature binds, as TensorRT-LLM reads the body:
 * `conversation_params.conversation_id` as sent (no session header, no trim),
 * `disaggregated_params.request_type` and its `disagg_request_id` with every
 * digit (a 63-bit id). A value no signature can cover makes the claim
 * unsignable (no request type: the hint is then refused).
 */
function claimOf(b: Record<string, unknown>, raw: Buffer, affinityId: string, signature: string | null): SubagentClaim & { readonly signature: string | null } {
  const record = (v: unknown) => (typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : null);
  const params = record(b.disaggregated_params);
  const conversation = record(b.conversation_params)?.conversation_id;
  const conversationId = typeof conversation === "string" ? conversation : null;
  const requestType = typeof params?.request_type === "string" ? params.request_type : null;
  const id = params?.disagg_request_id;
  let disaggRequestId: string | null = null;
  let signable = id === undefined || id === null;
  if (typeof id === "number") {
    // The exact numeral: JSON.parse rounds an id past 2^53 (TensorRT-LLM's snowflake ids pass it within days).
    const exact = record(record(parseJsonKeepingIntegers(raw.toString("utf8")))?.disaggregated_params)?.disagg_request_id;
    const text = typeof exact === "number" ? String(exact) : typeof exact === "string" ? exact : "";
    signable = /^-?\d+$/.test(text);
    disaggRequestId = text;
  }
  return { affinityId, model: b.model, conversationId, requestType: signable ? requestType : null, disaggRequestId, signature };
}
