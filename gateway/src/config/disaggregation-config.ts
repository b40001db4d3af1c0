// Prefill/decode disaggregation's settings: the `disaggregation:` section
// (the engines' protocol, TensorRT-LLM's conditional disaggregation, each
// pool's policy and attention_dp_config) and each upstream's `role:` and
// `bootstrap_port:`, checked against each other; and the configuration each
// pool runs on (its upstreams and its routing, the rest shared).

import { describeValue } from "adp-router";
import type { DisaggregationConfig, DisaggregationProtocol, GatewayConfig, UpstreamConfig, UpstreamRole } from "./config-types.js";
import { POLICY_CONFIGS, readPolicy, type PolicyName } from "./policies.js";

/** The keys `disaggregation:` and each pool under it accept. */
export const DISAGGREGATION_KEYS = ["protocol", "max_local_prefill_length", "node_id", "prefill", "decode"] as const;
const POOL_KEYS = ["policy", "attention_dp_config"] as const;
/** The protocols, with what each follows (docs/disaggregation.md names the files and versions). */
const PROTOCOLS: readonly DisaggregationProtocol[] = ["trtllm", "vllm", "sglang"];

/** What reading these settings needs from the configuration's reader (config.ts). */
interface DisaggregationReader {
  fail(path: readonly (string | number)[], message: string, where?: string | null): void;
  /** Whether a problem is already recorded at `path` (one mistake, one message). */
  failedAt(path: readonly (string | number)[]): boolean;
  readonly where: (path: readonly (string | number)[]) => string | null;
  section(v: unknown, path: (string | number)[], keys: readonly string[]): Record<string, unknown>;
  int(v: unknown, path: (string | number)[], min: number, max: number, fallback: number): number;
  str(v: unknown, path: (string | number)[], fallback: string): string;
}

/** An upstream's `role` and `bootstrap_port` (checked against `disaggregation:` once all are read). */
export function readRole(r: DisaggregationReader, u: Record<string, unknown>, path: (string | number)[]): { role: UpstreamRole | null; bootstrapPort: number | null } {
  let role: UpstreamRole | null = null;
  if (u.role !== undefined && u.role !== null) {
    if (u.role === "prefill" || u.role === "decode") role = u.role;
    else {
      // TensorRT-LLM's own words for the two roles.
      const meant = u.role === "context" || u.role === "ctx" ? " (did you mean prefill?)" : u.role === "generation" || u.role === "gen" ? " (did you mean decode?)" : "";
      r.fail([...path, "role"], `must be prefill (a context server) or decode (a generation server), got ${describeValue(u.role)}${meant}`);
    }
  }
  const bootstrapPort = u.bootstrap_port === undefined || u.bootstrap_port === null ? null : r.int(u.bootstrap_port, [...path, "bootstrap_port"], 1, 65535, 8998);
  return { role, bootstrapPort };
}

/**
 * The `disaggregation:` section, or null without one, checked with the
 * upstreams' roles: with it every upstream has one and each pool at least one
 * upstream; without it no upstream has one. `fromFlags`: the upstreams came
 * from flags. `topPolicy` is the prefill pool's default (the file's
 * `policy:`, else kv_cache_aware).
 */
export function readDisaggregation(r: DisaggregationReader, value: unknown, upstreams: readonly UpstreamConfig[], fromFlags: boolean, topPolicy: string | undefined): DisaggregationConfig | null {
  if (value === undefined || value === null) {
    upstreams.forEach((u, i) => {
      if (u.role !== null) r.fail(["upstreams", i, "role"], "takes effect only with a disaggregation: section or --disaggregation PROTOCOL: without one every upstream serves whole requests");
    });
    return null;
  }
  const s = r.section(value, ["disaggregation"], DISAGGREGATION_KEYS);
  const protocol = r.str(s.protocol, ["disaggregation", "protocol"], "");
  if (s.protocol === undefined) r.fail(["disaggregation", "protocol"], `is required: ${PROTOCOLS.join(", ")} (the engines' own hand-over of a request from prefill to decode)`);
  else if (!(PROTOCOLS as readonly string[]).includes(protocol)) {
    const meant = /^(tensorrt[-_ ]?llm|trt[-_]?llm|trt)$/i.test(protocol) ? " (did you mean trtllm?)" : "";
    r.fail(["disaggregation", "protocol"], `must be one of ${PROTOCOLS.join(", ")}, got ${describeValue(s.protocol)}${meant}`);
  }
  const maxLocal = s.max_local_prefill_length === undefined || s.max_local_prefill_length === null ? null : r.int(s.max_local_prefill_length, ["disaggregation", "max_local_prefill_length"], 0, 1 << 30, 0);
  if (maxLocal !== null && protocol !== "trtllm" && PROTOCOLS.includes(protocol as DisaggregationProtocol)) r.fail(["disaggregation", "max_local_prefill_length"], `is TensorRT-LLM's conditional disaggregation: protocol ${protocol} has none`);
  const nodeId = r.int(s.node_id, ["disaggregation", "node_id"], 0, 255, 0);
  const pool = (name: "prefill" | "decode", fallback: PolicyName) => {
    const p = r.section(s[name], ["disaggregation", name], POOL_KEYS);
    const policy = p.policy === undefined || p.policy === null ? undefined : r.str(p.policy, ["disaggregation", name, "policy"], fallback);
    return readPolicy(r, policy, p.attention_dp_config, ["disaggregation", name], fallback);
  };
  // The file's policy (checked where it is read): a name that is not one falls back here too.
  const prefill = pool("prefill", topPolicy !== undefined && Object.hasOwn(POLICY_CONFIGS, topPolicy) ? (topPolicy as PolicyName) : "kv_cache_aware");
  // Conditional disaggregation matches prompts against the generation servers (TensorRT-LLM asserts a KvCacheAwareRouter there).
  const decode = pool("decode", maxLocal !== null ? "kv_cache_aware" : "default");
  if (maxLocal !== null && !decode.attentionDp.enableKvCacheAwareRouting) r.fail(["disaggregation", "decode", "policy"], "must route by prefix (kv_cache_aware, or enable_kv_cache_aware_routing) with max_local_prefill_length: conditional disaggregation serves a request whole on the generation server holding its prompt");
  if (fromFlags && upstreams.length > 0 && upstreams.every((u) => u.role === null)) r.fail(["disaggregation"], "needs each upstream's role: list them under upstreams: with role: prefill or role: decode, or give --prefill URL and --decode URL (--upstream gives none)");
  else {
    // A role already refused (a misspelt one) is one mistake: not also missing, nor its pool empty.
    const misspelt = upstreams.map((_u, i) => r.failedAt(["upstreams", i, "role"]));
    upstreams.forEach((u, i) => {
      if (u.role === null && !misspelt[i]) r.fail(["upstreams", i, "role"], "is required with disaggregation: prefill (a context server) or decode (a generation server)");
      if (u.bootstrapPort !== null && (protocol !== "sglang" || u.role !== "prefill")) r.fail(["upstreams", i, "bootstrap_port"], "is an SGLang prefill server's bootstrap port: it needs protocol sglang and role prefill");
    });
    for (const role of ["prefill", "decode"] as const) {
      if (upstreams.length > 0 && !upstreams.some((u) => u.role === role) && !misspelt.includes(true)) r.fail(["upstreams"], `has no upstream of role ${role}: disaggregation needs at least one prefill and one decode server`);
    }
  }
  return { protocol: protocol as DisaggregationProtocol, maxLocalPrefillLength: maxLocal, nodeId, prefill, decode };
}

/**
 * The configuration one pool runs on: its upstreams and its routing, with the
 * rest (limits, timeouts, health, tokenizer, index budget) shared. A fleet
 * and a scheduler built from it know nothing of the other pool.
 */
export function poolConfig(config: GatewayConfig, role: UpstreamRole): GatewayConfig {
  const d = config.disaggregation;
  if (d === null) return config;
  const routing = d[role];
  return { ...config, upstreams: config.upstreams.filter((u) => u.role === role), attentionDp: routing.attentionDp, centralized: routing.centralized };
}

/** The JSON Schema of `disaggregation:` (config-schema.ts); `$defs/attention_dp_config` is the document's. */
export function disaggregationSchema(policies: readonly string[]): Record<string, unknown> {
  const pool = (what: string) => ({
    type: "object",
    additionalProperties: false,
    description: `The ${what} pool's routing.`,
    properties: { policy: { enum: [...policies] }, attention_dp_config: { $ref: "#/$defs/attention_dp_config" } },
  });
  return {
    type: "object",
    additionalProperties: false,
    required: ["protocol"],
    description: "Prefill/decode disaggregation: upstreams of role prefill serve each request's prompt, those of role decode its generation, each pool routed by its own policy.",
    properties: {
      protocol: { enum: [...PROTOCOLS], description: "The engines' hand-over: trtllm (disaggregated_params, trtllm-serve disaggregated), vllm (kv_transfer_params, NIXL-style connectors), sglang (bootstrap_host/port/room, sent to both at once)." },
      max_local_prefill_length: { type: "integer", minimum: 0, description: "trtllm only: TensorRT-LLM's conditional disaggregation. A request a generation server holds in part, with at most this many tokens left to prefill, is served whole there. Needs a prefix-aware decode policy." },
      node_id: { type: "integer", minimum: 0, maximum: 255, default: 0, description: "This gateway's node in the 64-bit request ids (disagg_request_id, bootstrap_room) it makes: distinct per gateway in front of the same engines." },
      prefill: pool("prefill (context)"),
      decode: pool("decode (generation)"),
    },
  };
}

/** The JSON Schema of an upstream's `role` and `bootstrap_port`. */
export const roleSchema = Object.freeze({
  role: { enum: ["prefill", "decode"], description: "With disaggregation: this upstream's pool, prefill (a context server) or decode (a generation server)." },
  bootstrap_port: { type: "integer", minimum: 1, maximum: 65535, description: "protocol sglang, role prefill: the server's --disaggregation-bootstrap-port (default: the server's own, 8998)." },
});
