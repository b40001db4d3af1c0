// The OpenAI-compatible request side: what the gateway reads from a request
// body and its headers to route it, and OpenAI-style error bodies. The body is
// parsed once (the prompt is needed); it is forwarded as the bytes received.

import { TokenizerRequestError, type ChatMessage, type Tokenizer } from "./tokenizer.js";

/** An error the gateway answers itself, OpenAI-style. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type = status >= 500 ? "server_error" : "invalid_request_error",
    readonly code: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "HttpError";
  }

  /** The response body: `{"error": {"message", "type", "param", "code"}}`. */
  body(): string {
    return JSON.stringify({ error: { message: this.message, type: this.type, param: null, code: this.code } });
  }
}

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
  readonly tokens: Uint32Array;
  readonly conversationId: string | null;
  readonly subagentId: string | null;
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

/** An id field: a non-empty string (numbers are taken as their text) of at most MAX_ID characters. */
function idOf(v: unknown, field: string): string | null {
  if (v === undefined || v === null) return null;
  const text = typeof v === "string" ? v.trim() : typeof v === "number" && Number.isFinite(v) ? String(v) : null;
  if (text === null) throw new HttpError(400, `${field} must be a string`);
  if (text === "") throw new HttpError(400, `${field} must be non-empty`);
  if (text.length > MAX_ID) throw new HttpError(400, `${field} must be at most ${MAX_ID} characters`);
  return text;
}

/**
 * Parses and checks a chat or completion request body (bytes as received)
 * and reads its routing fields; throws HttpError 400 for anything malformed.
 */
export function readRequest(kind: "chat" | "completion", raw: Buffer, headers: Record<string, string | string[] | undefined>, tokenizer: Tokenizer, loraAdapters: ReadonlyMap<string, number> = new Map()): RoutedRequest {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch {
    throw new HttpError(400, "the request body is not valid JSON");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new HttpError(400, "the request body must be a JSON object");
  const b = body as Record<string, unknown>;
  if (typeof b.model !== "string" || b.model === "") throw new HttpError(400, "model must be a non-empty string");
  if (b.stream !== undefined && b.stream !== null && typeof b.stream !== "boolean") throw new HttpError(400, "stream must be a boolean");
  let tokens: Uint32Array;
  if (kind === "chat") {
    const messages = b.messages;
    if (!Array.isArray(messages) || messages.length === 0) throw new HttpError(400, "messages must be a non-empty array");
    for (const [i, m] of messages.entries()) {
      if (typeof m !== "object" || m === null || Array.isArray(m) || typeof (m as ChatMessage).role !== "string") throw new HttpError(400, `messages[${i}] must be an object with a string role`);
    }
    try {
      tokens = tokenizer.encodeChat(messages as ChatMessage[], b);
    } catch (error) {
      if (error instanceof RangeError) throw new HttpError(400, "messages are nested too deeply"); // JSON.stringify of the parts recursed too far
      if (error instanceof TokenizerRequestError) throw new HttpError(400, error.message); // the chat template refused it, as the engine would
      throw error;
    }
  } else {
    const prompt = b.prompt;
    let text: string | number[];
    if (typeof prompt === "string") text = prompt;
    else if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => typeof t === "string")) text = prompt.join("");
    else if (Array.isArray(prompt) && prompt.length > 0 && prompt.every((t) => typeof t === "number" && t >>> 0 === t)) text = prompt as number[];
    else throw new HttpError(400, "prompt must be a string, a list of strings or a list of token ids");
    try {
      tokens = tokenizer.encodePrompt(text, b);
    } catch (error) {
      if (error instanceof TokenizerRequestError) throw new HttpError(400, error.message);
      throw error;
    }
  }
  const params = b.conversation_params;
  let conversationId: string | null = null;
  if (params !== undefined && params !== null) {
    if (typeof params !== "object" || Array.isArray(params)) throw new HttpError(400, "conversation_params must be an object");
    conversationId = idOf((params as Record<string, unknown>).conversation_id, "conversation_params.conversation_id");
  }
  if (conversationId === null) {
    for (const name of SESSION_HEADERS) {
      conversationId = header(headers, name);
      if (conversationId !== null) break;
    }
    if (conversationId !== null && conversationId.length > MAX_ID) throw new HttpError(400, `the session header must be at most ${MAX_ID} characters`);
  }
  const subagentId = idOf(header(headers, SUBAGENT_HEADER), SUBAGENT_HEADER);
  const cacheSalt = idOf(b.cache_salt, "cache_salt");
  return { kind, model: b.model, stream: b.stream === true, tokens, conversationId, subagentId, cacheSalt, loraTaskId: loraAdapters.get(b.model) ?? null };
}
