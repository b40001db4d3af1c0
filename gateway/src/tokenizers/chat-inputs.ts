// What an engine's OpenAI server hands the chat template: the request's
// messages and tools after its own normalisation, read in the engines'
// source (docs/engines.md, "As the engines do it"):
//
// - TensorRT-LLM: tensorrt_llm/serve/chat_utils.py (parse_chat_message_content,
//   _parse_assistant_message_content, _normalize_tool_call_arguments) and
//   openai_server.py's chat path (`tool.model_dump()` of openai_protocol.py's
//   ChatCompletionToolsParam, whose models forbid unknown fields).
// - vLLM: vllm/entrypoints/chat_utils.py (_parse_chat_message_content,
//   _postprocess_messages) and `tool.model_dump()` of its
//   ChatCompletionToolsParam (extra fields allowed and kept).
//
// Both make a null content "" (a content is the text of its non-empty text
// parts joined by "\n"): no engine hands a template None, so a template that
// would refuse None (Qwen3's first one) renders, and one that tests `is none`
// (DeepSeek-V3's) takes its other branch. Both dump a tool's absent
// description and parameters as null; TensorRT-LLM adds `"strict": null` too.
//
// Platform-neutral (no node: imports): it runs in browsers too.

import { TokenizerRequestError, type ChatMessage } from "./tokenizer.js";

/** The engine whose OpenAI server the rendering follows (they differ in the details above). */
export type ChatEngine = "tensorrt-llm" | "vllm";

/** The engines the rendering can follow. */
export const CHAT_ENGINES: readonly ChatEngine[] = ["tensorrt-llm", "vllm"];

/** An object (not null, not an array), or null. */
export function record(v: unknown): Record<string, unknown> | null {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
}

/** A content as text: a string as is, the non-empty text parts of a list joined by "\n", null as "". */
function contentText(content: unknown, i: number): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw new TokenizerRequestError(`messages[${i}].content must be a string, a list of parts or null`);
  const texts: string[] = [];
  for (const part of content as unknown[]) {
    const t = typeof part === "string" ? part : record(part)?.type === "text" ? record(part)!.text : null;
    if (typeof t === "string" && t !== "") texts.push(t); // both engines skip empty parts
  }
  return texts.join("\n");
}

/** A tool call's arguments as TensorRT-LLM normalises them: a JSON string parsed to an object, an unparsable one kept. */
function tensorrtArguments(v: unknown, where: string): unknown {
  if (v === undefined || v === null) return {};
  if (typeof v !== "string") {
    if (record(v) === null) throw new TokenizerRequestError(`${where}.function.arguments must be an object`);
    return v;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(v);
  } catch {
    return v; // kept as the string, as the engine keeps it
  }
  if (record(parsed) === null) throw new TokenizerRequestError(`${where}.function.arguments must be a JSON object.`);
  return parsed;
}

/** A tool call's arguments as vLLM's _postprocess_messages leaves them: any JSON parsed, an unparsable string or another type as {}. */
function vllmArguments(v: unknown): unknown {
  if (typeof v === "string") {
    try {
      return JSON.parse(v);
    } catch {
      return {};
    }
  }
  return v !== null && typeof v === "object" ? v : {};
}

/** An assistant's tool calls, each with its arguments normalised as `engine` does. */
function toolCalls(calls: unknown, i: number, engine: ChatEngine): Record<string, unknown>[] {
  if (!Array.isArray(calls)) throw new TokenizerRequestError(`messages[${i}].tool_calls must be a list`);
  return calls.map((call: unknown, j) => {
    const where = `messages[${i}].tool_calls[${j}]`;
    const c = record(call);
    const f = record(c?.function);
    if (c === null || f === null) throw new TokenizerRequestError(`${where}.function must be an object`);
    return { ...c, function: { ...f, arguments: engine === "vllm" ? vllmArguments(f.arguments) : tensorrtArguments(f.arguments, where) } };
  });
}

/**
 * The messages as `engine` hands them to the template: {role, content} with
 * the content as text; an assistant's tool calls (arguments normalised) and
 * reasoning, a tool message's tool_call_id; vLLM also keeps a string `name`,
 * drops an empty tool_calls list and names the reasoning both `reasoning` and
 * `reasoning_content`. Anything else (media parts) is dropped.
 */
export function templateMessages(messages: readonly ChatMessage[], engine: ChatEngine = "tensorrt-llm"): Record<string, unknown>[] {
  return messages.map((m, i) => {
    const out: Record<string, unknown> = { role: m.role, content: contentText(m.content, i) };
    const fields = m as unknown as Record<string, unknown>;
    if (m.role === "assistant") {
      const reasoning = engine === "vllm" ? fields.reasoning : (fields.reasoning ?? fields.reasoning_content);
      const calls = fields.tool_calls;
      if (calls !== undefined && calls !== null) {
        const list = toolCalls(calls, i, engine);
        if (engine === "tensorrt-llm" || list.length > 0) out.tool_calls = list;
      }
      if (reasoning !== undefined && reasoning !== null) {
        if (engine === "vllm") out.reasoning = reasoning;
        out.reasoning_content = reasoning;
      }
    } else if (m.role === "tool" && "tool_call_id" in fields) out.tool_call_id = fields.tool_call_id;
    if (engine === "vllm" && typeof fields.name === "string") out.name = fields.name;
    return out;
  });
}

/** The fields the engines' tool models declare, in their order (a dump lists them first). */
const FUNCTION_FIELDS = ["name", "description", "parameters"] as const;

/**
 * One tool as `engine` dumps its pydantic model: {type: "function", function:
 * {name, description, parameters}} with the absent ones null, then (TensorRT-
 * LLM) `strict`, or (vLLM) the other fields as sent. The models' checks are
 * the engine's 400s: `type` must be "function", the declared fields of their
 * types; TensorRT-LLM refuses fields it does not declare.
 */
function templateTool(tool: unknown, i: number, engine: ChatEngine): Record<string, unknown> {
  const t = record(tool);
  const f = record(t?.function);
  if (t === null || f === null || typeof f.name !== "string") throw new TokenizerRequestError(`tools[${i}].function.name must be a string`);
  if (t.type !== undefined && t.type !== "function") throw new TokenizerRequestError(`tools[${i}].type must be "function"`);
  const description = f.description ?? null;
  if (description !== null && typeof description !== "string") throw new TokenizerRequestError(`tools[${i}].function.description must be a string`);
  const parameters = f.parameters ?? null;
  if (parameters !== null && record(parameters) === null) throw new TokenizerRequestError(`tools[${i}].function.parameters must be an object`);
  const fn: Record<string, unknown> = { name: f.name, description, parameters };
  const dumped: Record<string, unknown> = { type: "function", function: fn };
  if (engine === "tensorrt-llm") {
    const strict = f.strict ?? null;
    if (strict !== null && typeof strict !== "boolean") throw new TokenizerRequestError(`tools[${i}].function.strict must be a boolean`);
    fn.strict = strict;
    for (const [where, fields, known] of [[`tools[${i}]`, t, ["type", "function"]], [`tools[${i}].function`, f, [...FUNCTION_FIELDS, "strict"]]] as const) {
      const extra = Object.keys(fields).find((k) => !(known as readonly string[]).includes(k));
      if (extra !== undefined) throw new TokenizerRequestError(`${where}.${extra}: extra inputs are not permitted`);
    }
    return dumped;
  }
  for (const [k, v] of Object.entries(f)) if (!(FUNCTION_FIELDS as readonly string[]).includes(k)) fn[k] = v;
  for (const [k, v] of Object.entries(t)) if (k !== "type" && k !== "function") dumped[k] = v;
  return dumped;
}

/** The request's tools as `engine` dumps them for the template, or null. */
export function templateTools(tools: unknown, engine: ChatEngine = "tensorrt-llm"): Record<string, unknown>[] | null {
  if (tools === undefined || tools === null) return null;
  if (!Array.isArray(tools)) throw new TokenizerRequestError("tools must be a list");
  return tools.map((tool: unknown, i) => templateTool(tool, i, engine));
}
