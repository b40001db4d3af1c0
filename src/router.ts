// The public router: validates its options, picks TensorRT-LLM's router the way
// its factory does (conversation affinity over KV-cache-aware over default) and
// routes batches atomically: a batch that fails validation changes nothing.

import { validateBatch, type RouteInput } from "./batch.js";
import { parseAttentionDpConfig, type AttentionDpConfig, type AttentionDpConfigInput } from "./config.js";
import { RoutingCore } from "./core.js";
import { AdpInputError } from "./errors.js";
import { ConversationRouter } from "./routers/conversation.js";
import { DefaultRouter } from "./routers/default.js";
import { KvCacheAwareRouter } from "./routers/kv-cache-aware.js";
import type { RouteResult, RouterKind, RoutingPolicy } from "./routers/types.js";

/** Largest rank count accepted. */
export const MAX_RANKS = 65536;

/** Options of {@link createRouter}. */
export interface RouterOptions {
  /** Attention-DP ranks (TensorRT-LLM's `tp_size` under attention DP). */
  readonly numRanks: number;
  /**
   * `attention_dp_config`, in TensorRT-LLM's snake_case or as parsed by `parseAttentionDpConfig`.
   * @default {} (the default router)
   */
  readonly attentionDp?: AttentionDpConfigInput | AttentionDpConfig;
}

/** A stateful router over `numRanks` attention-DP ranks. */
export interface Router {
  /** Which router decides: follows TensorRT-LLM's factory. */
  readonly kind: RouterKind;
  /** Attention-DP ranks. */
  readonly numRanks: number;
  /** The parsed configuration. */
  readonly config: AttentionDpConfig;
  /** Routes one batch; throws {@link AdpInputError} (changing nothing) on bad input. */
  route(input: RouteInput): RouteResult;
}

const OPTION_KEYS = new Set(["numRanks", "attentionDp"]);

/** Which router TensorRT-LLM's factory builds for `config`. */
export function routerKindFor(config: AttentionDpConfig): RouterKind {
  if (config.kvCacheRoutingConversationAffinity) return "conversation";
  if (config.enableKvCacheAwareRouting) return "kv_cache_aware";
  return "default";
}

/**
 * Creates a router. Synchronous: the wasm core compiles on first use.
 *
 * @example
 * ```ts
 * const router = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true } });
 * const { assignments } = router.route({
 *   rankStates: [0, 1, 2, 3].map(() => ({ numActiveRequests: 0, numActiveTokens: 0 })),
 *   maxNumActiveRequests: 8,
 *   requests: [{ id: 1, tokens: [1, 2, 3] }],
 * });
 * ```
 */
export function createRouter(options: RouterOptions): Router {
  if (typeof options !== "object" || options === null) throw new AdpInputError("createRouter()", "takes an options object", options);
  for (const key of Object.keys(options)) {
    if (!OPTION_KEYS.has(key)) throw new AdpInputError(key, `is not a createRouter option (expected ${[...OPTION_KEYS].join(", ")})`, (options as unknown as Record<string, unknown>)[key]);
  }
  const { numRanks } = options;
  if (typeof numRanks !== "number" || !Number.isInteger(numRanks) || numRanks < 1 || numRanks > MAX_RANKS) {
    throw new AdpInputError("numRanks", `must be an integer in [1, ${MAX_RANKS}]`, numRanks);
  }
  const config = parseAttentionDpConfig(options.attentionDp ?? {});
  const kind = routerKindFor(config);
  let policy: RoutingPolicy;
  if (kind === "conversation") policy = new ConversationRouter(numRanks, config);
  else if (kind === "kv_cache_aware") policy = new KvCacheAwareRouter(new RoutingCore(), numRanks, config);
  else policy = new DefaultRouter(new RoutingCore());
  return {
    kind,
    numRanks,
    config,
    route: (input: RouteInput): RouteResult => policy.route(validateBatch(input, numRanks)),
  };
}
