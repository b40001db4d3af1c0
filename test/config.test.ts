import { describe, expect, it } from "vitest";
import { AttentionDpConfigError, attentionDpConfigSchema, parseAttentionDpConfig, toAttentionDpConfigInput } from "../src/index.js";

const issuesOf = (input: unknown) => {
  try {
    parseAttentionDpConfig(input);
  } catch (e) {
    expect(e).toBeInstanceOf(AttentionDpConfigError);
    return (e as AttentionDpConfigError).issues;
  }
  throw new Error("expected a config error");
};

describe("parseAttentionDpConfig", () => {
  it("fills TensorRT-LLM's defaults and freezes the result", () => {
    const c = parseAttentionDpConfig({});
    expect(c).toEqual({
      enableBalance: false, timeoutIters: 50, batchingWaitIters: 10, enableKvCacheAwareRouting: false,
      kvCacheRoutingLoadBalanceWeight: 1.0, kvCacheRoutingMatchRateThreshold: 0.1, kvCacheRoutingFairShareMultiplier: 2.0,
      kvCacheRoutingColdStartWarmup: false, kvCacheRoutingAccountForInTransfer: false, kvCacheRoutingConversationAffinity: false,
      kvCacheRoutingMaxSessions: 65536, kvCacheRoutingNewConvPlacement: "round_robin",
    });
    expect(Object.isFrozen(c)).toBe(true);
    expect(parseAttentionDpConfig(c)).toBe(c);
    expect(toAttentionDpConfigInput(parseAttentionDpConfig({ kv_cache_routing_max_sessions: 3 })).kv_cache_routing_max_sessions).toBe(3);
  });

  it("rejects unknown keys and suggests the nearest field", () => {
    const [issue] = issuesOf({ enable_kv_cache_routing: true });
    expect(issue!.field).toBe("enable_kv_cache_routing");
    expect(issue!.rule).toContain('did you mean "enable_kv_cache_aware_routing"');
    expect(issuesOf({ enableBalance: true })[0]!.rule).toContain('did you mean "enable_balance"');
    expect(issuesOf({ __proto__x: 1, zzz: 2 }).map((i) => i.field)).toEqual(["__proto__x", "zzz"]);
    expect(issuesOf(JSON.parse('{"__proto__": 1}'))[0]!.field).toBe("__proto__");
  });

  it("is strict about JSON types: no numbers from strings, no booleans from numbers, integers must be integers", () => {
    expect(issuesOf({ timeout_iters: "5" })[0]!.rule).toBe("must be an integer");
    expect(issuesOf({ timeout_iters: 5.5 })[0]!.rule).toBe("must be an integer");
    expect(issuesOf({ enable_balance: 1 })[0]!.rule).toContain("boolean");
    expect(issuesOf({ kv_cache_routing_load_balance_weight: "1.5" })[0]!.rule).toBe("must be a finite number");
    expect(issuesOf({ kv_cache_routing_load_balance_weight: NaN })[0]!.rule).toBe("must be a finite number");
    expect(issuesOf({ batching_wait_iters: null })[0]!.field).toBe("batching_wait_iters");
    expect(issuesOf({ kv_cache_routing_new_conv_placement: "Round_Robin" })[0]!.rule).toContain('"round_robin", "least_queued" or "least_tokens"');
    expect(parseAttentionDpConfig({ timeout_iters: 5.0 }).timeoutIters).toBe(5);
  });

  it("rejects negative iters only when enable_balance is true, batching_wait_iters first", () => {
    expect(parseAttentionDpConfig({ timeout_iters: -1, batching_wait_iters: -3 }).timeoutIters).toBe(-1);
    expect(issuesOf({ enable_balance: true, timeout_iters: -1, batching_wait_iters: -3 }).map((i) => i.field)).toEqual(["batching_wait_iters", "timeout_iters"]);
    expect(issuesOf({ enable_balance: true, timeout_iters: -1 })[0]!.rule).toBe("must be greater or equal to 0 when enable_balance is true");
  });

  it("accepts what TensorRT-LLM accepts: negative weights, multipliers below 1, max_sessions 0", () => {
    expect(() => parseAttentionDpConfig({ kv_cache_routing_load_balance_weight: -1, kv_cache_routing_fair_share_multiplier: 0.25, kv_cache_routing_max_sessions: 0 })).not.toThrow();
  });

  it("reports every problem in one error whose message names field, rule and value", () => {
    let message = "";
    try {
      parseAttentionDpConfig({ enable_balance: "yes", timeout_iters: 1.5, bogus: true });
    } catch (e) {
      message = (e as Error).message;
      expect((e as AttentionDpConfigError).code).toBe("ERR_ADP_CONFIG");
    }
    expect(message).toContain('enable_balance: must be a boolean (true or false), got "yes" (string)');
    expect(message).toContain("timeout_iters: must be an integer, got 1.5 (number)");
    expect(message).toContain("bogus: is not an attention_dp_config field");
    expect(issuesOf(null)[0]!.field).toBe("attention_dp_config");
    expect(issuesOf([])[0]!.rule).toBe("must be an object");
  });

  it("exports a JSON Schema with the same twelve fields and defaults", () => {
    const props = attentionDpConfigSchema.properties as Record<string, { default: unknown }>;
    expect(Object.keys(props)).toHaveLength(12);
    const defaults = Object.fromEntries(Object.entries(props).map(([k, v]) => [k, v.default]));
    expect(toAttentionDpConfigInput(parseAttentionDpConfig(defaults))).toEqual(defaults);
    expect(attentionDpConfigSchema.additionalProperties).toBe(false);
  });
});
