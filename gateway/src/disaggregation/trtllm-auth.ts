// The signature TensorRT-LLM's disaggregated front end puts on a generation
// request (tensorrt_llm/serve/disagg_auth.py, the revision whose sub-agent
// signing requests/subagent-auth.ts follows), made here because in a
// disaggregated deployment the gateway is that front end: `x-trtllm-disagg-auth`
// on a generation request whose hand-over carries `encoded_opaque_state` or
// `ctx_info_endpoint`, HMAC-SHA256 over json.dumps({those two fields},
// sort_keys, compact), a list endpoint as its first element. A worker with
// `internal_request_auth_key` refuses such a request unsigned.
//
// A client's sub-agent hint (`x-trtllm-subagent-affinity-id`) is not
// forwarded to either phase: TensorRT-LLM's front end signs only the hint an
// operator names (`conversation_affinity_header_for_subagents`, off by
// default), and the pools' own routers refuse a client's unsigned hint too.

import { createHmac } from "node:crypto";
import { SUBAGENT_HEADER } from "../requests/openai.js";
import { pythonJson, SUBAGENT_AUTH_HEADER } from "../requests/subagent-auth.js";

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

/** Headers that drop a client's sub-agent hint (see above). */
export const NO_HINT: Readonly<Record<string, null>> = Object.freeze({ [SUBAGENT_HEADER]: null, [SUBAGENT_AUTH_HEADER]: null });
