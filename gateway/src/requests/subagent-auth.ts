// TensorRT-LLM's signed sub-agent affinity (PR #19175,
// tensorrt_llm/serve/disagg_auth.py: _sign_subagent_affinity and
// validate_subagent_affinity). A client-supplied `x-trtllm-subagent-affinity-id`
// would let any request steer another conversation's routing, so with an
// `internal_request_auth_key` a context or generation worker takes the hint
// only with `x-trtllm-subagent-affinity-auth: sha256=<hex>`, an HMAC-SHA256 of
// a canonical JSON payload binding the hint to the worker's role, the model,
// the child conversation, the request type and the disaggregated request id;
// an aggregated request's hint is ignored. The gateway checks the same
// signature where a worker's attention-DP router would.

import { createHmac, timingSafeEqual } from "node:crypto";

/** The header carrying the sub-agent affinity signature. */
export const SUBAGENT_AUTH_HEADER = "x-trtllm-subagent-affinity-auth";
/** The header whose value the signature covers (the payload's `purpose`). */
const PURPOSE = "x-trtllm-subagent-affinity-id";

/** What the signature binds, as the request says it. */
export interface SubagentClaim {
  /** The hint (trimmed, as TensorRT-LLM's edge signs it). */
  readonly affinityId: string;
  readonly model: unknown;
  readonly conversationId: string | null;
  /** `disaggregated_params.request_type`, or null for an aggregated request. */
  readonly requestType: unknown;
  /** `disaggregated_params.disagg_request_id` as its integer's exact digits (JavaScript's numbers cannot hold them past 2^53; a string crosses threads), or null. */
  readonly disaggRequestId: string | null;
}

/** The worker role a request type names (TensorRT-LLM's ServerRole names), or null. */
const ROLE_OF: Readonly<Record<string, string>> = { context_only: "CONTEXT", generation_only: "GENERATION" };

/**
 * Python's `json.dumps(value, sort_keys=True, separators=(",", ":"))` for
 * plain values: keys sorted, no spaces, and (ensure_ascii) every character
 * past ASCII as a \uXXXX escape, lower-case hex, surrogate pairs for astral
 * characters, as JavaScript strings already hold them.
 */
export function pythonJson(value: unknown): string {
  if (value === null || typeof value !== "object") {
    const text = JSON.stringify(value ?? null);
    // Python's ensure_ascii escapes all but the printable ASCII it leaves as is: DEL (0x7f) too.
    return text.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  }
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(",")}]`;
  const entries = Object.keys(value).sort().map((k) => `${pythonJson(k)}:${pythonJson((value as Record<string, unknown>)[k])}`);
  return `{${entries.join(",")}}`;
}

/** The signature TensorRT-LLM's edge sends for `claim` to a worker of `role`, under `key`. */
export function subagentSignature(key: string, claim: SubagentClaim, role: string): string {
  const numeral = claim.disaggRequestId;
  const payload = {
    purpose: PURPOSE,
    role,
    model: claim.model ?? null,
    conversation_id: claim.conversationId,
    subagent_affinity_id: claim.affinityId,
    request_type: claim.requestType ?? null,
    disagg_request_id: numeral === null ? null : 0,
  };
  // The id's exact digits in place of the stand-in 0: keys are sorted, so it is the only `"disagg_request_id":0`.
  const json = pythonJson(payload);
  const text = numeral === null ? json : json.replace('"disagg_request_id":0', () => `"disagg_request_id":${numeral}`);
  return `sha256=${createHmac("sha256", key).update(text, "utf8").digest("hex")}`;
}

/**
 * Whether a worker would take the hint: a context or generation request
 * whose signature (`provided`) is the one `key` makes, compared in constant
 * time. An aggregated request's hint is never taken.
 */
export function subagentHintAccepted(key: string, claim: SubagentClaim, provided: string | null): boolean {
  const role = typeof claim.requestType === "string" && Object.hasOwn(ROLE_OF, claim.requestType) ? ROLE_OF[claim.requestType]! : null;
  if (role === null || provided === null) return false;
  const expected = Buffer.from(subagentSignature(key, claim, role), "utf8");
  const given = Buffer.from(provided, "utf8");
  return given.length === expected.length && timingSafeEqual(given, expected);
}
