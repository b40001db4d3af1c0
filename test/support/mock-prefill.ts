// What a disaggregated prefill server answers, in each engine's own shape:
//   trtllm  a context server (tensorrt_llm/serve/openai_server.py answering a
//           `context_only` request; openai_protocol.py's DisaggregatedParams on
//           each choice, `prompt_token_ids` at the top), TensorRT-LLM main 00bb903;
//   vllm    a prefill under NixlConnector (nixl_connector.py `request_finished`:
//           kv_transfer_params at the top once the request stopped at its one
//           token), vLLM v0.11;
//   sglang  a prefill server (its ordinary answer: the KV cache goes to the decode
//           server through the bootstrap room, nothing in the body), SGLang v0.5.
// The request's long integers are read from its text, so they echo with every digit.

/** The engine and, for trtllm, how its context phase ended (`length` normally; `stop`: the first token ended it). */
export type PrefillRole = { readonly engine: "trtllm"; readonly finishReason?: string; readonly omit?: "disaggregated_params" | "ctx_request_id"; /** Raw JSON in place of encoded_opaque_state (a hostile engine's). */ readonly opaqueState?: string; /** Raw JSON in place of ctx_request_id (a hostile engine's). */ readonly ctxRequestId?: string } | { readonly engine: "vllm"; readonly noParams?: boolean } | { readonly engine: "sglang" };

/** The prompt's token ids as the mock tokenizes: its UTF-8 bytes (a chat's contents joined). */
export function mockTokenIds(body: { prompt?: unknown; messages?: { content?: unknown }[] }): number[] {
  const text = typeof body.prompt === "string" ? body.prompt : (body.messages ?? []).map((m) => String(m.content ?? "")).join("");
  return [...Buffer.from(text, "utf8")];
}

/** The answer of prefill server `name` to request text `raw` (id `id`). */
export function prefillAnswer(role: PrefillRole, name: string, chat: boolean, id: string, raw: string): string {
  const body = JSON.parse(raw) as { prompt?: unknown; messages?: { content?: unknown }[] };
  const finishReason = role.engine === "trtllm" ? (role.finishReason ?? "length") : "length";
  const choice: Record<string, unknown> = chat ? { index: 0, message: { role: "assistant", content: `first token from ${name}` }, finish_reason: finishReason } : { index: 0, text: `first token from ${name}`, finish_reason: finishReason };
  const usage = { prompt_tokens: mockTokenIds(body).length, completion_tokens: 1, total_tokens: mockTokenIds(body).length + 1 };
  const answer: Record<string, unknown> = { id, object: chat ? "chat.completion" : "text_completion", created: 0, model: "mock-model", choices: [choice], usage };
  const LONG = "__LONG_ID__";
  let requestId = "null";
  if (role.engine === "trtllm") {
    requestId = /"disagg_request_id":(\d+)/.exec(raw)?.[1] ?? "null";
    if (role.omit !== "disaggregated_params") {
      choice.disaggregated_params = { request_type: "context_only", first_gen_tokens: [42], ctx_request_id: role.omit === "ctx_request_id" ? null : LONG, encoded_opaque_state: Buffer.from(`state of ${name}`).toString("base64"), draft_tokens: null, disagg_request_id: LONG, ctx_dp_rank: 0, ctx_info_endpoint: null, schedule_style: 0, conversation_id: null };
    }
    answer.prompt_token_ids = mockTokenIds(body);
  } else if (role.engine === "vllm") {
    answer.kv_transfer_params = role.noParams === true ? null : { do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [1, 2, 3], remote_engine_id: `engine-${name}`, remote_request_id: id, remote_host: "127.0.0.1", remote_port: 5600, tp_size: 1 };
  }
  const text = JSON.stringify(answer).replaceAll(`"${LONG}"`, requestId);
  if (role.engine !== "trtllm") return text;
  const withState = role.opaqueState === undefined ? text : text.replace(/"encoded_opaque_state":"[^"]*"/, `"encoded_opaque_state":${role.opaqueState}`);
  return role.ctxRequestId === undefined ? withState : withState.replace(/"ctx_request_id":[^,]*/, `"ctx_request_id":${role.ctxRequestId}`);
}
