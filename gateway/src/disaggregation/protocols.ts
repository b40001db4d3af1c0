// The engines' hand-over of a request from its prefill (context) server to its
// decode (generation) server, as each engine's own front end does it; every
// body is the client's, byte for byte, but for the members set here
// (json-members.ts). A client's own protocol fields are dropped: which server
// holds which KV cache is the gateway's to say.
//
//   trtllm  tensorrt_llm/serve/openai_disagg_service.py (context first, the default
//           schedule style), openai_protocol.py, disagg_utils.py; TensorRT-LLM main,
//           commit 00bb903 (2026). JSON bodies (not the msgpack of X-TRTLLM-Msgpack).
//   vllm    tests/v1/kv_connector/nixl_integration/toy_proxy_server.py with
//           vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py (vLLM v0.11).
//   sglang  python/sglang/srt/disaggregation/mini_lb.py (SGLang v0.5): the same
//           body with bootstrap_host, bootstrap_port and bootstrap_room to both servers.

import { arrayElements, memberText, objectMembers, withMembers } from "./json-members.js";
import { JsonShape, jsonShapeProblem, MAX_JSON_DEPTH } from "../common/json-shape.js";

/** An answer from a prefill server that is not what its protocol defines (the client gets a 502 naming it). */
export class HandOffError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HandOffError";
  }
}

/** What a prefill server's answer says comes next. */
export type HandOff =
  /**
   * The decode request: the client's body with these members set (undefined:
   * removed); `params`, TensorRT-LLM's hand-over as values (what its signature covers).
   */
  | { readonly kind: "decode"; readonly members: ReadonlyMap<string, string | undefined>; readonly params?: Readonly<Record<string, unknown>> }
  /** TensorRT-LLM: the context phase ended the request (its finish reason neither length nor not_finished); `answer` is the client's. */
  | { readonly kind: "finished"; readonly answer: string };

/**
 * `text` parsed, if it is a JSON object; else a HandOffError. Its nesting is
 * counted first, with a client body's bound (json-shape.ts): an engine's
 * answer nested 500,000 deep held the event loop 424-791 ms in JSON.parse.
 * Its size is the capture's bound, which grows with the prompt; its objects
 * and strings are not bounded as a body's are (a vLLM prefill's
 * `prompt_logprobs` holds 6 objects and members and 5 strings a token).
 */
function objectOf(text: string, what: string): Record<string, unknown> {
  const problem = jsonShapeProblem(Buffer.from(text), new JsonShape(MAX_JSON_DEPTH, Infinity, Infinity, `the ${what}`));
  if (problem !== null) throw new HandOffError(problem);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new HandOffError(`the ${what} is not JSON`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new HandOffError(`the ${what} is not a JSON object`);
  return value as Record<string, unknown>;
}

// ---- TensorRT-LLM ---------------------------------------------------------

/** TensorRT-LLM's DisaggScheduleStyle.CONTEXT_FIRST. */
const CONTEXT_FIRST = "0";

/**
 * The context request (`_get_ctx_request`): the client's body with
 * `disaggregated_params` asking for the context phase only, not streamed.
 * The context server itself caps it at one token.
 */
export function trtllmContextBody(client: string, id: bigint, conversationId: string | null): string {
  const params = `{"request_type":"context_only","disagg_request_id":${id},"schedule_style":${CONTEXT_FIRST},"conversation_id":${JSON.stringify(conversationId)}}`;
  return withMembers(client, new Map([["disaggregated_params", params], ["stream", "false"], ["stream_options", "null"]]));
}

/**
 * The generation request from the context server's answer
 * (`_verify_ctx_response`, `_need_gen`, `_get_gen_request`): exactly one
 * choice carrying `disaggregated_params` with both request ids; those params
 * go on as `generation_only`, with the context's usage, and the prompt becomes
 * the token ids the context server read. A choice that finished for another
 * reason than length ends the request there: its answer is the client's.
 */
export function trtllmHandOff(kind: "chat" | "completion", answer: string, id: bigint, conversationId: string | null): HandOff {
  const parsed = objectOf(answer, "context server's answer");
  const choices = parsed.choices;
  if (!Array.isArray(choices) || choices.length !== 1) throw new HandOffError(`the context server returned ${Array.isArray(choices) ? choices.length : "no"} choices, expecting 1`);
  const choice = choices[0] as Record<string, unknown> | null;
  const params = typeof choice === "object" && choice !== null ? choice.disaggregated_params : undefined;
  if (typeof params !== "object" || params === null || Array.isArray(params)) throw new HandOffError(`the context server did not return disaggregated_params (finish_reason ${JSON.stringify(choice?.finish_reason ?? null)})`);
  const p = params as Record<string, unknown>;
  for (const field of ["ctx_request_id", "disagg_request_id"]) if (p[field] === undefined || p[field] === null) throw new HandOffError(`the context server's disaggregated_params has no ${field}`);
  // TensorRT-LLM's types: an optional string, and an optional string or list of strings (what the signature covers).
  const text = (v: unknown) => v === undefined || v === null || typeof v === "string";
  if (!text(p.encoded_opaque_state)) throw new HandOffError("the context server's encoded_opaque_state is not a string");
  if (!text(p.ctx_info_endpoint) && !(Array.isArray(p.ctx_info_endpoint) && p.ctx_info_endpoint.every((e) => typeof e === "string"))) throw new HandOffError("the context server's ctx_info_endpoint is not a string or a list of strings");
  const choicesAt = objectMembers(answer).filter((m) => m.key === "choices").at(-1)!.valueStart;
  const choiceAt = arrayElements(answer, choicesAt)[0]!;
  if (choice!.finish_reason !== "length" && choice!.finish_reason !== "not_finished") {
    // `_need_gen`: the context's own answer, less its hand-over.
    const finished = withMembers(answer, new Map([["choices", `[${withMembers(answer, new Map([["disaggregated_params", undefined]]), choiceAt)}]`]]));
    return { kind: "finished", answer: finished };
  }
  const paramsText = memberText(answer, "disaggregated_params", choiceAt)!;
  // Passed on to the generation server as written: a request id there (TensorRT-LLM's are uint64), every digit kept.
  const ctxId = memberText(paramsText, "ctx_request_id");
  if (ctxId === null || !/^\d{1,20}$/.test(ctxId) || BigInt(ctxId) >= 1n << 64n) throw new HandOffError("the context server's ctx_request_id is not a request id (an integer in [0, 2^64))");
  const generation = withMembers(
    paramsText,
    new Map([
      ["request_type", '"generation_only"'],
      ["schedule_style", CONTEXT_FIRST],
      ["conversation_id", JSON.stringify(conversationId)],
      ["ctx_usage", memberText(answer, "usage") ?? "null"],
      ["disagg_request_id", String(id)],
    ]),
  );
  const members = new Map<string, string | undefined>([["disaggregated_params", generation]]);
  const ids = memberText(answer, "prompt_token_ids");
  if (ids !== null && ids !== "null") members.set(kind === "completion" ? "prompt" : "prompt_token_ids", ids);
  return { kind: "decode", members, params: p };
}

/**
 * Why TensorRT-LLM's disaggregated front end refuses a request before any
 * server sees it, or null: a completion's prompt must be one string or one
 * list of token ids (`openai_completion`), and one choice comes back from the
 * context server (`_verify_ctx_response`), so `n` must be 1.
 */
export function trtllmRefusal(kind: "chat" | "completion", client: string): { message: string; param: string } | null {
  // Only the two members are read (the reader parsed the whole body already): a string prompt is never parsed again.
  const nText = memberText(client, "n");
  const n: unknown = nText === null ? null : JSON.parse(nText);
  if (n !== null && n !== 1) return { message: "n must be 1 with disaggregation: the context server answers one choice", param: "n" };
  if (kind !== "completion") return null;
  const promptText = memberText(client, "prompt");
  if (promptText?.startsWith('"')) return null;
  const prompt: unknown = promptText === null ? undefined : JSON.parse(promptText);
  const one = (p: unknown) => typeof p === "string" || (Array.isArray(p) && p.every((x) => Number.isInteger(x)));
  if (one(prompt) || (Array.isArray(prompt) && prompt.length === 1 && one(prompt[0]))) return null;
  return { message: "prompt must be one string or one list of token ids with disaggregation (TensorRT-LLM's disaggregated server takes no batch)", param: "prompt" };
}

/**
 * The streamed form of a context answer that ended the request: its one
 * choice as one chunk, its usage when the client asked (`include_usage`),
 * then `[DONE]`. TensorRT-LLM's own front end sends `[DONE]` alone here
 * (`done_generator`), which leaves a streaming client without its answer.
 */
export function finishedAsStream(kind: "chat" | "completion", answer: string, includeUsage: boolean): string {
  const a = JSON.parse(answer) as { id?: unknown; created?: unknown; model?: unknown; choices: Record<string, unknown>[]; usage?: unknown };
  const c = a.choices[0]!;
  const message = (c.message ?? {}) as Record<string, unknown>;
  const choice = kind === "chat" ? { index: 0, delta: { role: message.role ?? "assistant", content: message.content ?? "" }, finish_reason: c.finish_reason ?? null } : { index: 0, text: c.text ?? "", finish_reason: c.finish_reason ?? null };
  const head = { id: a.id ?? null, object: kind === "chat" ? "chat.completion.chunk" : "text_completion", created: a.created ?? 0, model: a.model ?? null };
  const usage = includeUsage ? `data: ${JSON.stringify({ ...head, choices: [], usage: a.usage ?? null })}\n\n` : "";
  return `data: ${JSON.stringify({ ...head, choices: [choice] })}\n\n${usage}data: [DONE]\n\n`;
}

// ---- vLLM -----------------------------------------------------------------

/** What the proxy asks of a NIXL-style prefill: keep the KV for a remote decode. */
const REMOTE_DECODE = '{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}';

/**
 * The prefill request (toy_proxy_server.py `send_request_to_service`): the
 * client's body asking for a remote decode, one token, not streamed, with
 * stream_options, min_tokens and min_completion_tokens removed
 * (max_completion_tokens set to 1 only when the client sent it).
 */
export function vllmPrefillBody(client: string): string {
  const sent = new Set(objectMembers(client).map((m) => m.key));
  const members = new Map<string, string | undefined>([
    ["kv_transfer_params", REMOTE_DECODE],
    ["stream", "false"],
    ["max_tokens", "1"],
    ["stream_options", undefined],
    ["min_tokens", undefined],
    ["min_completion_tokens", undefined],
  ]);
  if (sent.has("max_completion_tokens")) members.set("max_completion_tokens", "1");
  return withMembers(client, members);
}

/**
 * The decode request from the prefill's answer: its top-level
 * `kv_transfer_params` as the engine wrote them (null or absent: the prefill
 * kept no KV for it, and the decode server prefills the prompt itself).
 */
export function vllmHandOff(answer: string): HandOff {
  const params = objectOf(answer, "prefill server's answer").kv_transfer_params;
  if (params !== undefined && params !== null && (typeof params !== "object" || Array.isArray(params))) throw new HandOffError("the prefill server's kv_transfer_params is not an object");
  const text = params === undefined || params === null ? undefined : memberText(answer, "kv_transfer_params")!;
  return { kind: "decode", members: new Map([["kv_transfer_params", text]]) };
}

// ---- SGLang ---------------------------------------------------------------

/**
 * The body both servers get (mini_lb.py): the client's with the prefill
 * server's bootstrap address (`bootstrap_port` null: the server's default)
 * and the request's room.
 */
export function sglangBody(client: string, host: string, port: number | null, room: bigint): string {
  return withMembers(client, new Map([["bootstrap_host", JSON.stringify(host)], ["bootstrap_port", port === null ? "null" : String(port)], ["bootstrap_room", String(room)]]));
}

/** The client's body less the protocol's own members (a client does not choose where KV caches move). */
export function withoutHandOff(client: string): string {
  return withMembers(client, new Map(["disaggregated_params", "kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room"].map((k) => [k, undefined])));
}
