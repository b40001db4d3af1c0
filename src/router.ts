// The public router: validates its options, picks TensorRT-LLM's router the way
// its factory does (conversation affinity over KV-cache-aware over default) and
// routes batches atomically: a batch that fails validation changes nothing.

import { validateBatch, type Batch, type RouteInput } from "./batch.js";
import { parseAttentionDpConfig, toAttentionDpConfigInput, type AttentionDpConfig, type AttentionDpConfigInput } from "./config.js";
import { RoutingCore } from "./core.js";
import { AdpInputError } from "./errors.js";
import { ConversationRouter } from "./routers/conversation.js";
import { DefaultRouter } from "./routers/default.js";
import { PrefixIndex, restorePrefixIndex, type PrefixIndexOptions } from "./prefix-index.js";
import { decodeSnapshot, encodeSnapshot } from "./snapshot-format.js";
import { KvCacheAwareRouter } from "./routers/kv-cache-aware.js";
import { MetricsCounters, PREFIX_HIT_BOUNDS, type RouterMetrics } from "./metrics.js";
import type { Decision, DecisionRecord, RouteResult, RouterKind, RoutingPolicy } from "./routers/types.js";

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
  /**
   * The router's picture of every rank's prefix cache: index options (a new
   * index over `numRanks` ranks) or an existing index. The KV-cache-aware router
   * probes it for requests without `prefixMatches`.
   * @default none: such requests match nothing
   */
  readonly prefixIndex?: PrefixIndex | Omit<PrefixIndexOptions, "numRanks">;
  /**
   * Insert each routed prompt into the chosen rank's view after the batch is
   * decided, so a router without engine KV events still learns.
   * @default true
   */
  readonly learnFromRouting?: boolean;
  /**
   * Called synchronously for every request of every batch with why it went
   * where it went (explicit rank, warm-up, sticky conversation, overflow, or the
   * per-rank matched tokens, load terms and scores). Records are built only
   * when this is set.
   */
  readonly onDecision?: (record: DecisionRecord) => void;
}

/** A stateful router over `numRanks` attention-DP ranks. */
export interface Router {
  /** Which router decides: follows TensorRT-LLM's factory. */
  readonly kind: RouterKind;
  /** Attention-DP ranks. */
  readonly numRanks: number;
  /** The parsed configuration. */
  readonly config: AttentionDpConfig;
  /** The prefix index the router probes and learns into, or null. */
  readonly prefixIndex: PrefixIndex | null;
  /** Routes one batch; throws {@link AdpInputError} (changing nothing) on bad input. */
  route(input: RouteInput): RouteResult;
  /** Replaces the prefix index (null: requests without `prefixMatches` match nothing). */
  setPrefixIndex(index: PrefixIndex | null): void;
  /** Counters and gauges since creation, as a plain snapshot. */
  metrics(): RouterMetrics;
  /**
   * All routing state as bytes: the configuration, the conversation map in LRU
   * order, the round-robin cursor, the pending warm-up ranks and the prefix
   * index. {@link restoreRouter} on any platform continues with identical decisions.
   */
  snapshot(): Uint8Array;
}

/** The options `createRouter` accepts. */
const OPTION_KEYS = new Set(["numRanks", "attentionDp", "prefixIndex", "learnFromRouting", "onDecision"]);

/** Inserts each placed request's prompt into its rank's view, in input order. */
function learn(index: PrefixIndex, batch: Batch, decision: Decision): void {
  for (const req of batch.requests) {
    const rank = decision.rankOf[req.index]!;
    if (rank < 0) continue;
    const seed = req.namespace;
    if (req.tokens !== null) {
      if (req.tokens.length >= index.tokensPerBlock) index.insertValidated(rank, req.tokens, seed);
    } else if (req.blockKeys !== null && req.blockKeys.length > 0) {
      index.insertBlocksValidated(rank, req.blockKeys, seed);
    }
  }
}

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
  const learnFromRouting = options.learnFromRouting ?? true;
  if (typeof learnFromRouting !== "boolean") throw new AdpInputError("learnFromRouting", "must be a boolean", learnFromRouting);
  const checkIndex = (index: unknown, field: string): PrefixIndex | null => {
    if (index === null) return null;
    if (!(index instanceof PrefixIndex)) throw new AdpInputError(field, "must be a PrefixIndex (createPrefixIndex) or null", index);
    if (index.numRanks !== numRanks) throw new AdpInputError(`${field}.numRanks`, `must equal the router's numRanks (${numRanks})`, index.numRanks);
    return index;
  };
  let index: PrefixIndex | null = null;
  if (options.prefixIndex !== undefined) {
    index = options.prefixIndex instanceof PrefixIndex
      ? checkIndex(options.prefixIndex, "prefixIndex")
      : new PrefixIndex({ ...(options.prefixIndex as Omit<PrefixIndexOptions, "numRanks">), numRanks });
  }
  const onDecision = options.onDecision;
  if (onDecision !== undefined && typeof onDecision !== "function") throw new AdpInputError("onDecision", "must be a function", onDecision);
  const counters = new MetricsCounters(numRanks);
  const kind = routerKindFor(config);
  let policy: RoutingPolicy;
  let kv: KvCacheAwareRouter | null = null;
  if (kind === "conversation") policy = new ConversationRouter(numRanks, config);
  else if (kind === "kv_cache_aware") policy = kv = new KvCacheAwareRouter(new RoutingCore(), numRanks, config);
  else policy = new DefaultRouter(new RoutingCore());
  if (kv) kv.prefixIndex = index;
  const router: Router = {
    kind,
    numRanks,
    config,
    get prefixIndex() {
      return index;
    },
    route(input: RouteInput): RouteResult {
      let batch;
      try {
        batch = validateBatch(input, numRanks);
      } catch (error) {
        counters.rejectedBatches++;
        throw error;
      }
      const decision = policy.route(batch, onDecision !== undefined);
      if (index !== null && learnFromRouting) learn(index, batch, decision);
      counters.count(decision.outcomes, decision.rankOf);
      if (decision.matched) counters.countMatches(decision.matched, batch.requests);
      if (onDecision !== undefined) {
        for (const req of batch.requests) {
          onDecision({ requestId: req.id, router: kind, outcome: decision.outcomes[req.index]!, rank: decision.rankOf[req.index]!, ...decision.details?.[req.index] });
        }
      }
      return decision.result;
    },
    metrics(): RouterMetrics {
      const conv = policy instanceof ConversationRouter ? policy.conversations : null;
      const stats = index?.stats();
      return {
        router: kind,
        numRanks,
        batches: counters.batches,
        rejectedBatches: counters.rejectedBatches,
        decisions: { ...counters.decisions },
        selectionsPerRank: [...counters.selectionsPerRank],
        ...(conv ? { conversations: { tracked: conv.size, maxSessions: conv.maxSize, evictions: conv.evictions } } : {}),
        ...(stats ? { prefixIndex: { blocks: stats.blocks, residencies: stats.residencies, bytesInUse: stats.bytesInUse, evictions: stats.evictions } } : {}),
        ...(kind === "kv_cache_aware" ? { prefixHits: { upperBounds: PREFIX_HIT_BOUNDS, ...counters.prefixHits, counts: [...counters.prefixHits.counts] } } : {}),
      };
    },
    setPrefixIndex(next: PrefixIndex | null): void {
      index = checkIndex(next, "setPrefixIndex()");
      if (kv) kv.prefixIndex = index;
    },
    snapshot(): Uint8Array {
      const conv = policy instanceof ConversationRouter ? policy : null;
      return encodeSnapshot(
        {
          kind: "router",
          numRanks,
          attentionDp: toAttentionDpConfigInput(config),
          learnFromRouting,
          cursor: conv?.cursor ?? 0,
          conversations: conv?.conversations.entries() ?? [],
          pendingWarmup: kv?.pendingWarmup ?? [],
        },
        index ? [index.snapshot()] : [],
      );
    },
  };
  restoreState.set(router, (state) => {
    if (policy instanceof ConversationRouter) {
      policy.cursor = state.cursor as number;
      policy.conversations.restore(state.conversations as [string, number][]);
    }
    if (kv) kv.pendingWarmup = state.pendingWarmup as number[];
  });
  return router;
}

/** Per router: loads a snapshot's policy state (kept out of the public object). */
const restoreState = new WeakMap<Router, (state: Record<string, unknown>) => void>();

/**
 * Rebuilds a router from {@link Router.snapshot} bytes, on any platform; its
 * next decisions equal the original's. Hooks are not part of a snapshot.
 */
export function restoreRouter(bytes: Uint8Array, options: { onDecision?: RouterOptions["onDecision"] } = {}): Router {
  const { state, sections } = decodeSnapshot(bytes);
  if (state.kind !== "router") throw new AdpInputError("snapshot", "is not a router snapshot", state.kind);
  const router = createRouter({
    numRanks: state.numRanks as number,
    attentionDp: state.attentionDp as AttentionDpConfigInput,
    learnFromRouting: state.learnFromRouting as boolean,
    ...(sections.length > 0 ? { prefixIndex: restorePrefixIndex(sections[0]!) } : {}),
    ...(options.onDecision ? { onDecision: options.onDecision } : {}),
  });
  restoreState.get(router)!(state);
  return router;
}
