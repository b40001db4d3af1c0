// The routing policies a configuration names (`policy:`, `--policy`, each
// disaggregated pool's `policy:`) and the attention_dp_config each starts
// from, read with the file's own `attention_dp_config:` block over it.

import { AttentionDpConfigError, describeValue, parseAttentionDpConfig, type AttentionDpConfig } from "adp-router";

/** Routing policies `--policy` names, and the attention_dp_config each starts from. */
export const POLICY_CONFIGS = Object.freeze({
  kv_cache_aware: { enable_kv_cache_aware_routing: true },
  conversation: { kv_cache_routing_conversation_affinity: true },
  default: {},
  // Phase 1 is TensorRT-LLM's centralized router (fleet/centralized-selection.ts); the config is phase 2 adp's.
  centralized: { enable_kv_cache_aware_routing: true },
} as const);
/** A policy name. */
export type PolicyName = keyof typeof POLICY_CONFIGS;

/** A pool's routing: the router's configuration, and whether phase 1 is TensorRT-LLM's centralized router. */
export interface PoolRouting {
  readonly attentionDp: AttentionDpConfig;
  readonly centralized: boolean;
}

/** What reading a policy needs from the configuration's reader. */
interface PolicyReader {
  fail(path: readonly (string | number)[], message: string, where?: string | null): void;
  readonly where: (path: readonly (string | number)[]) => string | null;
}

/**
 * A policy and an attention_dp_config block read together: the policy's
 * settings, with the block's over them (or, when `policyWins` (a `--policy`
 * flag picks the router), under them). Problems go to `r` at `path`.
 */
export function readPolicy(r: PolicyReader, policyName: string | undefined, block: unknown, path: readonly (string | number)[], fallback: PolicyName, policyWins = false, policyWhere?: string | null): PoolRouting {
  let base: Record<string, unknown> = { ...POLICY_CONFIGS[fallback] };
  const name = policyName ?? fallback;
  if (!Object.hasOwn(POLICY_CONFIGS, name)) r.fail([...path, "policy"], `must be one of ${Object.keys(POLICY_CONFIGS).join(", ")}, got ${describeValue(name)}`, policyWhere ?? r.where([...path, "policy"]));
  else base = { ...POLICY_CONFIGS[name as PolicyName] };
  let attentionDp = parseAttentionDpConfig(base);
  if (block !== undefined && block !== null) {
    if (typeof block !== "object" || Array.isArray(block)) r.fail([...path, "attention_dp_config"], `must be a mapping, got ${describeValue(block)}`);
    else {
      try {
        attentionDp = parseAttentionDpConfig(policyWins ? { ...block, ...base } : { ...base, ...block });
      } catch (error) {
        if (!(error instanceof AttentionDpConfigError)) throw error;
        for (const issue of error.issues) r.fail([...path, "attention_dp_config", issue.field], `${issue.rule}, got ${describeValue(issue.received)}`, r.where([...path, "attention_dp_config", issue.field]));
      }
    }
  }
  return { attentionDp, centralized: name === "centralized" };
}
