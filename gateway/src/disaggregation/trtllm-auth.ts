// The signatures TensorRT-LLM's disaggregated front end puts on the requests it
// sends its workers (tensorrt_llm/serve/disagg_auth.py, the revision whose
// sub-agent signing requests/subagent-auth.ts follows), made here because in a
// disaggregated deployment the gateway is that front end:
//   - `x-trtllm-disagg-auth` on a generation request whose hand-over carries
//     `encoded_opaque_state` or `ctx_info_endpoint`: HMAC-SHA256 over
//     json.dumps({those two fields}, sort_keys, compact), a list endpoint as its
//     first element. A worker with `internal_request_auth_key` refuses such a
//     request unsigned.
//   - the sub-agent hint (`x-trtllm-subagent-affinity-id` and `-auth`) signed for
//     each phase's role, request type and disaggregated request id
//     (`build_subagent_affinity_headers`); a client's own signature could never
//     match the gateway's new id. Without a key the hint is not forwarded (a
//     worker without one raises on it).

import { createHmac } from "node:crypto";
import type { RoutedRequest } from "../requests/openai.js";
import { SUBAGENT_HEADER } from "../requests/openai.js";
import { pythonJson, SUBAGENT_AUTH_HEADER, subagentSignature } from "../requests/subagent-auth.js";

/** The header a generation worker checks its hand-over's signature in. */
export const DISAGG_AUTH_HEADER = "x-trtllm-disagg-auth";

/** The hand-over fields the signature covers (`_INTERNAL_DISAGG_AUTH_FIELDS`). */
export const SIGNED_FIELDS = ["encoded_opaque_state", "ctx_info_endpoint"] as const;

/** `x-trtllm-disagg-auth` for hand-over `params` under `key`, or null when it needs none (neither field set) or there is no key. */
export function disaggAuth(key: string | null, params: Readonly<Record<string, unknown>>): string | null {
  const values = SIGNED_FIELDS.map((f) => params[f] ?? null);
  if (key === null || values.every((v) => v === null)) return null;
  const endpoint = params.ctx_info_endpoint;
  const payload = { encoded_opaque_state: params.encoded_opaque_state ?? null, ctx_info_endpoint: Array.isArray(endpoint) ? (endpoint[0] ?? null) : (endpoint ?? null) };
  return `sha256=${createHmac("sha256", key).update(pythonJson(payload), "utf8").digest("hex")}`;
}

/** The sub-agent headers of one phase: the hint signed for its role (null values remove the client's). */
export function affinityHeaders(key: string | null, request: RoutedRequest, requestType: "context_only" | "generation_only", id: bigint): Record<string, string | null> {
  const affinityId = request.subagentId?.trim() ?? "";
  if (key === null || affinityId === "") return { [SUBAGENT_HEADER]: null, [SUBAGENT_AUTH_HEADER]: null };
  const claim = { affinityId, model: request.model, conversationId: request.conversationId, requestType, disaggRequestId: String(id) };
  return { [SUBAGENT_HEADER]: affinityId, [SUBAGENT_AUTH_HEADER]: subagentSignature(key, claim, requestType === "context_only" ? "CONTEXT" : "GENERATION") };
}
