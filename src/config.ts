// TensorRT-LLM's `AttentionDpConfig`: the field table, the strict parser and the
// JSON Schema, all derived from one table so they cannot drift apart.
//
// Input is TensorRT-LLM's snake_case (a block pasted from its YAML or JSON
// works). The rules are TensorRT-LLM's minus
// pydantic's lax coercions: unknown keys, `null`, wrong JSON types and
// non-integers for integer fields are rejected, and, only when `enable_balance`
// is true, negative `batching_wait_iters` / `timeout_iters`. Only snake_case
// keys are accepted, as TensorRT-LLM does; a camelCase key is reported as
// unknown with its snake_case spelling suggested.

import { AttentionDpConfigError, type InputIssue } from "./errors.js";

/** How conversation-affinity routing places a request that has no pinned rank. */
export type NewConversationPlacement = "round_robin" | "least_queued" | "least_tokens";

/** The three placement literals, in TensorRT-LLM's order. */
export const NEW_CONVERSATION_PLACEMENTS: readonly NewConversationPlacement[] = Object.freeze([
  "round_robin",
  "least_queued",
  "least_tokens",
]);

/** A parsed, frozen `attention_dp_config` with every default filled. */
export interface AttentionDpConfig {
  /**
   * Hold context requests until every rank has context work (reference §8).
   * @default false
   */
  readonly enableBalance: boolean;
  /**
   * Iterations an imbalanced gate may hold before releasing anyway.
   * @default 50
   */
  readonly timeoutIters: number;
  /**
   * Iterations a balanced gate waits to batch more context work.
   * @default 10
   */
  readonly batchingWaitIters: number;
  /**
   * Route by prefix-cache affinity weighed against load.
   * @default false
   */
  readonly enableKvCacheAwareRouting: boolean;
  /**
   * β, the weight of the load term; higher favours balance over cache affinity.
   * @default 1.0
   */
  readonly kvCacheRoutingLoadBalanceWeight: number;
  /**
   * Matches count only when the best match rate is strictly above this.
   * @default 0.1
   */
  readonly kvCacheRoutingMatchRateThreshold: number;
  /**
   * Per-rank active-request cap within a batch, as a multiple of the ceil fair share.
   * @default 2.0
   */
  readonly kvCacheRoutingFairShareMultiplier: number;
  /**
   * Round-robin the first `numRanks` relaxed requests so every rank warms up.
   * @default false
   */
  readonly kvCacheRoutingColdStartWarmup: boolean;
  /**
   * Fold requests still streaming KV to a generation server into the load
   * (rank-state construction only; a router outside the engine takes rank
   * states as given).
   * @default false
   */
  readonly kvCacheRoutingAccountForInTransfer: boolean;
  /**
   * Pin each conversation to its first-turn rank (wins over KV-cache-aware routing).
   * @default false
   */
  readonly kvCacheRoutingConversationAffinity: boolean;
  /**
   * LRU bound of the conversation→rank map (the router clamps it to at least 1).
   * @default 65536
   */
  readonly kvCacheRoutingMaxSessions: number;
  /**
   * Placement of requests with no pinned rank under conversation affinity.
   * @default "round_robin"
   */
  readonly kvCacheRoutingNewConvPlacement: NewConversationPlacement;
}

/** `attention_dp_config` as TensorRT-LLM spells it (every field optional). */
export interface AttentionDpConfigInput {
  enable_balance?: boolean;
  timeout_iters?: number;
  batching_wait_iters?: number;
  enable_kv_cache_aware_routing?: boolean;
  kv_cache_routing_load_balance_weight?: number;
  kv_cache_routing_match_rate_threshold?: number;
  kv_cache_routing_fair_share_multiplier?: number;
  kv_cache_routing_cold_start_warmup?: boolean;
  kv_cache_routing_account_for_in_transfer?: boolean;
  kv_cache_routing_conversation_affinity?: boolean;
  kv_cache_routing_max_sessions?: number;
  kv_cache_routing_new_conv_placement?: NewConversationPlacement;
}

/** The JSON type a field takes. */
type FieldKind = "boolean" | "integer" | "number" | "placement";

/** One field: its names, kind, default and description. */
interface FieldSpec {
  readonly snake: keyof AttentionDpConfigInput;
  readonly camel: keyof AttentionDpConfig;
  readonly kind: FieldKind;
  readonly default: boolean | number | string;
  readonly description: string;
}

/** Builds a {@link FieldSpec}. */
const field = (
  snake: keyof AttentionDpConfigInput,
  camel: keyof AttentionDpConfig,
  kind: FieldKind,
  dflt: boolean | number | string,
  description: string,
): FieldSpec => ({ snake, camel, kind, default: dflt, description });

/** The twelve fields, in TensorRT-LLM's order. */
const FIELDS: readonly FieldSpec[] = [
  field("enable_balance", "enableBalance", "boolean", false, "Whether to enable the attention-DP context balance gate."),
  field("timeout_iters", "timeoutIters", "integer", 50, "The number of iterations to timeout."),
  field("batching_wait_iters", "batchingWaitIters", "integer", 10, "The number of iterations to wait for batching."),
  field("enable_kv_cache_aware_routing", "enableKvCacheAwareRouting", "boolean", false, "Enable KV cache-aware routing across attention-DP ranks."),
  field("kv_cache_routing_load_balance_weight", "kvCacheRoutingLoadBalanceWeight", "number", 1.0, "Weight (beta) of the load-balance term in KV cache-aware routing."),
  field("kv_cache_routing_match_rate_threshold", "kvCacheRoutingMatchRateThreshold", "number", 0.1, "Cache-affinity gate: matches count only when the best match rate is strictly above this."),
  field("kv_cache_routing_fair_share_multiplier", "kvCacheRoutingFairShareMultiplier", "number", 2.0, "Per-rank active-request cap within a batch, as a multiplier of the ceil fair share."),
  field("kv_cache_routing_cold_start_warmup", "kvCacheRoutingColdStartWarmup", "boolean", false, "Round-robin the first tp_size relaxed requests after router init."),
  field("kv_cache_routing_account_for_in_transfer", "kvCacheRoutingAccountForInTransfer", "boolean", false, "Fold requests still streaming KV to the GEN worker into the per-rank load."),
  field("kv_cache_routing_conversation_affinity", "kvCacheRoutingConversationAffinity", "boolean", false, "Pin every conversation to its first-turn rank; takes precedence over KV cache-aware routing."),
  field("kv_cache_routing_max_sessions", "kvCacheRoutingMaxSessions", "integer", 65536, "LRU cap on the conversation->rank map."),
  field("kv_cache_routing_new_conv_placement", "kvCacheRoutingNewConvPlacement", "placement", "round_robin", "Placement of requests with no pinned rank in conversation-affinity routing."),
];

/** Fields by snake_case name. */
const BY_NAME = new Map<string, FieldSpec>(FIELDS.map((f) => [f.snake, f]));

/** Each kind's predicate: null when the value is acceptable, else the rule it broke. */
const CHECKS: Record<FieldKind, (v: unknown) => string | null> = {
  boolean: (v) => (typeof v === "boolean" ? null : "must be a boolean (true or false)"),
  integer: (v) => (typeof v === "number" && Number.isInteger(v) ? null : "must be an integer"),
  number: (v) => (typeof v === "number" && Number.isFinite(v) ? null : "must be a finite number"),
  placement: (v) =>
    typeof v === "string" && (NEW_CONVERSATION_PLACEMENTS as readonly string[]).includes(v)
      ? null
      : `must be one of "round_robin", "least_queued" or "least_tokens"`,
};

/** Levenshtein distance, for suggesting the nearest field name. */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = row;
  }
  return prev[b.length]!;
}

/** The field name closest to an unknown key, or null when none is close. */
function nearestField(key: string): string | null {
  // The distance is at least the difference in length, and a suggestion needs
  // it within a third of the key's length: past 60 characters (every field is
  // at most 40) no field can qualify, so huge keys cost nothing.
  if (key.length > 60) return null;
  // camelCase input (enableBalance) is compared in snake_case (enable_balance).
  const wanted = key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`).toLowerCase();
  let best: string | null = null;
  let bestDistance = Infinity;
  for (const f of FIELDS) {
    const d = editDistance(wanted, f.snake);
    if (d < bestDistance) {
      bestDistance = d;
      best = f.snake;
    }
  }
  return bestDistance <= Math.max(3, Math.floor(key.length / 3)) ? best : null;
}

/** Configs returned by `parseAttentionDpConfig` (so parsing one again is free). */
const PARSED = new WeakSet<object>();

/** Whether `value` is a config returned by `parseAttentionDpConfig`. */
export function isAttentionDpConfig(value: unknown): value is AttentionDpConfig {
  return typeof value === "object" && value !== null && PARSED.has(value);
}

/** The own entries of a config object, read once; a config that is no object, or throws while read, is refused. */
function readEntries(input: unknown): [string, unknown][] {
  const refuse = (rule: string, received: unknown): never => {
    throw new AttentionDpConfigError([{ field: "attention_dp_config", rule, received }]);
  };
  try {
    if (typeof input !== "object" || input === null || Array.isArray(input)) refuse("must be an object", input);
    const source = input as Record<string, unknown>;
    return Object.keys(source).map((key) => [key, source[key]]);
  } catch (error) {
    if (error instanceof AttentionDpConfigError) throw error;
    return refuse("threw while it was read (a getter or Proxy trap of the caller's value)", error);
  }
}

/**
 * Validates an `attention_dp_config` and returns it frozen, camelCase, with
 * defaults filled. Throws one {@link AttentionDpConfigError} listing every problem.
 *
 * @example
 * ```ts
 * const config = parseAttentionDpConfig({ enable_kv_cache_aware_routing: true });
 * config.kvCacheRoutingFairShareMultiplier; // 2
 * ```
 */
export function parseAttentionDpConfig(input: unknown = {}): AttentionDpConfig {
  if (isAttentionDpConfig(input)) return input;
  const issues: InputIssue[] = [];
  const values = new Map<FieldSpec, unknown>();
  for (const [key, value] of readEntries(input)) {
    const spec = BY_NAME.get(key);
    if (spec === undefined) {
      const near = nearestField(key);
      issues.push({ field: key, rule: `is not an attention_dp_config field${near ? ` (did you mean "${near}"?)` : ""}`, received: value });
      continue;
    }
    values.set(spec, value);
    const problem = CHECKS[spec.kind](value);
    if (problem !== null) issues.push({ field: key, rule: problem, received: value });
  }
  const out: Record<string, unknown> = {};
  for (const f of FIELDS) out[f.camel] = values.has(f) ? values.get(f) : f.default;
  if (out.enableBalance === true) {
    for (const f of [FIELDS[2]!, FIELDS[1]!]) {
      const v = out[f.camel];
      if (typeof v === "number" && v < 0) {
        issues.push({ field: f.snake, rule: "must be greater or equal to 0 when enable_balance is true", received: v });
      }
    }
  }
  if (issues.length > 0) throw new AttentionDpConfigError(issues);
  const config = Object.freeze(out) as unknown as AttentionDpConfig;
  PARSED.add(config);
  return config;
}

/** Converts a parsed config back to TensorRT-LLM's snake_case form. */
export function toAttentionDpConfigInput(config: AttentionDpConfig): Required<AttentionDpConfigInput> {
  const out: Record<string, unknown> = {};
  for (const f of FIELDS) out[f.snake] = config[f.camel];
  return out as unknown as Required<AttentionDpConfigInput>;
}

/** JSON Schema (draft 2020-12) of `attention_dp_config` in TensorRT-LLM's snake_case. */
export const attentionDpConfigSchema = Object.freeze({
  $schema: "https://json-schema.org/draft/2020-12/schema",
  title: "AttentionDpConfig",
  description: "TensorRT-LLM attention-DP routing configuration, as accepted by adp-router.",
  type: "object",
  additionalProperties: false,
  properties: Object.fromEntries(
    FIELDS.map((f) => [
      f.snake,
      f.kind === "placement"
        ? { enum: [...NEW_CONVERSATION_PLACEMENTS], default: f.default, description: f.description }
        : { type: f.kind, default: f.default, description: f.description },
    ]),
  ),
  if: { properties: { enable_balance: { const: true } }, required: ["enable_balance"] },
  then: { properties: { timeout_iters: { minimum: 0 }, batching_wait_iters: { minimum: 0 } } },
});
