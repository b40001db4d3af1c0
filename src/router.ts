// The public router: validates its options, picks TensorRT-LLM's router the way
// its factory does (conversation affinity over KV-cache-aware over default) and
// routes batches atomically: a batch that fails validation changes nothing.

import { ArrayRowStore, checkRank, MAX_KEY_LENGTH, validateBatch, type Batch, type RouteInput, type RowStore } from "./batch.js";
import { parseAttentionDpConfig, toAttentionDpConfigInput, type AttentionDpConfig, type AttentionDpConfigInput } from "./config.js";
import { RoutingCore } from "./core.js";
import { AdpHookError, AdpInputError, AdpMemoryError, asInputError, readOptions } from "./errors.js";
import { ConversationRouter } from "./routers/conversation.js";
import { DefaultRouter } from "./routers/default.js";
import { OPTION_KEYS as INDEX_OPTION_KEYS, PrefixIndex, restoreIndexFrom, type PrefixIndexOptions } from "./prefix-index.js";
import { readRouterState, type RouterState } from "./router-state.js";
import { readRankRemap, type RankRemap } from "./rank-remap.js";
import { decodeSnapshot, encodeSnapshot, SNAPSHOT_KINDS } from "./snapshot-format.js";
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
   * when this is set. Hooks run after the batch is committed: one that throws
   * never loses the result (see `onHookError`).
   */
  readonly onDecision?: (record: DecisionRecord) => void;
  /**
   * Called with each error an `onDecision` hook throws (and the record it was
   * given); every record is still delivered and `route()` returns normally.
   * @default none: `route()` throws an {@link AdpHookError} carrying the
   * committed result once every record was delivered
   */
  readonly onHookError?: (error: unknown, record: DecisionRecord) => void;
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
const OPTION_KEYS = new Set(["numRanks", "attentionDp", "prefixIndex", "learnFromRouting", "onDecision", "onHookError"]);
/** The options `restoreRouter` accepts (hooks are not part of a snapshot). */
const RESTORE_KEYS = new Set(["onDecision", "onHookError", "ranks"]);

/** The options of {@link restoreRouter}. */
export interface RestoreOptions extends Pick<RouterOptions, "onDecision" | "onHookError"> {
  /**
   * Restores onto another set of ranks (a fleet that changed): `ranks[i]` is
   * the snapshot's rank whose state new rank i keeps (its cache view, its
   * conversations, its pending warm-up), or null for a new, empty rank (which
   * gets a warm-up request when cold-start warm-up is on). Ranks not listed
   * are dropped with their state. Absent: the snapshot's ranks as they were.
   */
  readonly ranks?: readonly (number | null)[];
}

/** A router state moved onto the ranks of `remap`. */
function remapRouterState(state: RouterState, remap: RankRemap): RouterState {
  const numRanks = remap.newToOld.length;
  const conversations: [string, number][] = [];
  for (const [key, rank] of state.conversations) if (remap.oldToNew[rank]! >= 0) conversations.push([key, remap.oldToNew[rank]!]);
  const warmupOn = routerKindFor(state.config) === "kv_cache_aware" && state.config.kvCacheRoutingColdStartWarmup;
  const pending = new Set(state.pendingWarmup.map((r) => remap.oldToNew[r]!).filter((r) => r >= 0));
  if (warmupOn) remap.newToOld.forEach((old, r) => old < 0 && pending.add(r));
  const cursor = state.cursor < state.numRanks && remap.oldToNew[state.cursor]! >= 0 ? remap.oldToNew[state.cursor]! : 0;
  return { ...state, numRanks, conversations, pendingWarmup: [...pending].sort((a, b) => a - b), cursor };
}

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

/**
 * Delivers every record of a committed batch to `onDecision`. A hook that
 * throws stops nothing: its errors go to `onHookError`, or, without one, the
 * first is thrown once all records were delivered, as an AdpHookError that
 * carries the committed result.
 */
function report(onDecision: (record: DecisionRecord) => void, onHookError: RouterOptions["onHookError"], kind: RouterKind, batch: Batch, decision: Decision): void {
  let first: { error: unknown } | null = null;
  for (const req of batch.requests) {
    const record: DecisionRecord = { requestId: req.id, router: kind, outcome: decision.outcomes[req.index]!, rank: decision.rankOf[req.index]!, ...decision.details?.[req.index] };
    try {
      onDecision(record);
    } catch (error) {
      if (onHookError === undefined) first ??= { error };
      else {
        try {
          onHookError(error, record);
        } catch (hookError) {
          first ??= { error: hookError };
        }
      }
    }
  }
  if (first !== null) throw new AdpHookError(first.error, decision.result);
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
export function createRouter(input: RouterOptions): Router {
  const options = readOptions(input, "createRouter()", OPTION_KEYS, "createRouter option") as Partial<RouterOptions>;
  const { numRanks } = options;
  if (typeof numRanks !== "number" || !Number.isInteger(numRanks) || numRanks < 1 || numRanks > MAX_RANKS) {
    throw new AdpInputError("numRanks", `must be an integer in [1, ${MAX_RANKS}]`, numRanks);
  }
  const config = parseAttentionDpConfig(options.attentionDp ?? {});
  const learnFromRouting = options.learnFromRouting ?? true;
  if (typeof learnFromRouting !== "boolean") throw new AdpInputError("learnFromRouting", "must be a boolean", learnFromRouting);
  const checkIndex = (index: unknown, field: string): PrefixIndex | null => {
    if (index === null) return null;
    if (!PrefixIndex.isIndex(index)) throw new AdpInputError(field, "must be a PrefixIndex (createPrefixIndex) or null", index);
    if (index.numRanks !== numRanks) throw new AdpInputError(`${field}.numRanks`, `must equal the router's numRanks (${numRanks})`, index.numRanks);
    return index;
  };
  let index: PrefixIndex | null = null;
  const given = options.prefixIndex;
  if (given !== undefined) {
    index = PrefixIndex.isIndex(given)
      ? checkIndex(given, "prefixIndex")
      : new PrefixIndex({ ...(readOptions(given, "prefixIndex", INDEX_OPTION_KEYS, "prefix index option") as Omit<PrefixIndexOptions, "numRanks">), numRanks });
  }
  const { onDecision, onHookError } = options;
  if (onDecision !== undefined && typeof onDecision !== "function") throw new AdpInputError("onDecision", "must be a function", onDecision);
  if (onHookError !== undefined && typeof onHookError !== "function") throw new AdpInputError("onHookError", "must be a function", onHookError);
  const counters = new MetricsCounters(numRanks);
  const kind = routerKindFor(config);
  let policy: RoutingPolicy;
  let kv: KvCacheAwareRouter | null = null;
  // Caller prefixMatches are read into the store the policy scores from: the
  // KV-cache-aware router's core (read once, copied nowhere), else a buffer.
  let rowStore: RowStore = new ArrayRowStore();
  if (kind === "conversation") policy = new ConversationRouter(numRanks, config);
  else if (kind === "kv_cache_aware") {
    const core = new RoutingCore();
    policy = kv = new KvCacheAwareRouter(core, numRanks, config);
    rowStore = core;
  } else policy = new DefaultRouter(new RoutingCore());
  /** Whether a batch is being read: a caller's getter may not route on this router meanwhile (it would reuse the rows being read). */
  let reading = false;
  if (kv) kv.prefixIndex = index;
  const router: Router = {
    kind,
    numRanks,
    config,
    get prefixIndex() {
      return index;
    },
    route(input: RouteInput): RouteResult {
      // Everything that can fail runs before any state changes: validation
      // (which copies every input it keeps), the index's liveness, and the
      // routers' own scratch checks, which come before their first write.
      if (reading) throw new AdpInputError("route()", "was called on this router while it was reading a batch (from a getter or Proxy of that batch)", input);
      if (index !== null && index.fault !== null) throw index.fault; // retired: its memory could not grow, or its core trapped
      let batch;
      reading = true;
      try {
        batch = validateBatch(input, numRanks, rowStore);
        if (index !== null && !index.usable) throw new AdpInputError("prefixIndex", "has been disposed (setPrefixIndex(null) or a new index first)", "a disposed index");
      } catch (error) {
        counters.rejectedBatches++;
        throw asInputError(error, "route() input");
      } finally {
        reading = false;
      }
      const decision = policy.route(batch, onDecision !== undefined);
      // The batch is routed and the policy's state has it, whatever its learning does: it is counted and reported.
      let learning: { error: unknown } | null = null;
      try {
        if (index !== null && learnFromRouting) learn(index, batch, decision);
      } catch (error) {
        learning = { error }; // the index retired itself (AdpMemoryError, or its core's own fault)
      }
      counters.count(decision.outcomes, decision.rankOf);
      if (decision.matched) counters.countMatches(decision.matched, batch.requests);
      if (learning !== null) {
        try {
          if (onDecision !== undefined) report(onDecision, onHookError, kind, batch, decision);
        } catch {
          // Every record was delivered; the index's error is the one to throw (the batch's result rides on it).
        }
        const { error } = learning;
        throw error instanceof AdpMemoryError ? new AdpMemoryError(error.cause, decision.result) : error;
      }
      if (onDecision !== undefined) report(onDecision, onHookError, kind, batch, decision);
      return decision.result;
    },
    metrics(): RouterMetrics {
      const conv = policy instanceof ConversationRouter ? policy.conversations : null;
      const stats = index?.usable ? index.stats() : undefined; // a disposed or retired index has none
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
        SNAPSHOT_KINDS.router,
        {
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
  binders.set(router, (key, rank) => {
    if (!(policy instanceof ConversationRouter)) return false;
    policy.conversations.record(key, rank);
    return true;
  });
  restoreState.set(router, (state) => {
    if (policy instanceof ConversationRouter) {
      policy.cursor = state.cursor;
      policy.conversations.restore(state.conversations);
    }
    if (kv) kv.pendingWarmup = state.pendingWarmup;
  });
  return router;
}

/** Per router: loads a snapshot's checked policy state (kept out of the public object). */
const restoreState = new WeakMap<Router, (state: RouterState) => void>();
/** Per router: records a conversation's rank (kept out of the public object). */
const binders = new WeakMap<Router, (key: string, rank: number) => boolean>();

/**
 * Records that conversation `key` (a conversation or sub-agent id)
 * is on `rank`, as the conversation router records a placement: how a gateway
 * replica takes another replica's binding. Returns false, changing nothing,
 * when the router keeps no conversations; throws AdpInputError for a bad key
 * or rank.
 */
export function bindConversation(router: Router, key: string, rank: number): boolean {
  const bind = binders.get(router);
  if (bind === undefined) throw new AdpInputError("router", "must be a router from createRouter or restoreRouter", router);
  if (typeof key !== "string" || key.length === 0 || key.length > MAX_KEY_LENGTH) throw new AdpInputError("key", `must be a string of 1 to ${MAX_KEY_LENGTH} characters`, key);
  checkRank(rank, router.numRanks, "rank");
  return bind(key, rank);
}

/**
 * Rebuilds a router from {@link Router.snapshot} bytes, on any platform; its
 * next decisions equal the original's (with `ranks`, those of a router whose
 * ranks were renumbered, dropped or added as listed). Hooks are not part of a snapshot.
 * Everything is checked before the router exists (the container's checksum,
 * every field of its state, every node of its prefix index), and the new
 * router is built aside: bad bytes give AdpInputError naming `snapshot`.
 */
export function restoreRouter(bytes: Uint8Array, input: RestoreOptions = {}): Router {
  const options = readOptions(input, "restoreRouter()", RESTORE_KEYS, "restoreRouter option") as RestoreOptions;
  const { state: raw, sections } = decodeSnapshot(bytes, SNAPSHOT_KINDS.router);
  const saved = readRouterState(raw, MAX_RANKS);
  const remap = options.ranks === undefined ? undefined : readRankRemap(options.ranks, saved.numRanks, MAX_RANKS);
  const state = remap ? remapRouterState(saved, remap) : saved;
  if (sections.length > 1) throw new AdpInputError("snapshot", "is not a valid snapshot (a router has at most one prefix index section)", `${sections.length} sections`);
  let index: PrefixIndex | undefined;
  if (sections.length === 1) {
    const inner = decodeSnapshot(sections[0]!, SNAPSHOT_KINDS.prefixIndex);
    index = restoreIndexFrom(inner.state, inner.sections, remap);
    if (index.numRanks !== state.numRanks) throw new AdpInputError("snapshot", `is not a valid snapshot (its prefix index has ${index.numRanks} ranks, the router ${state.numRanks})`, index.numRanks);
  }
  const router = createRouter({
    numRanks: state.numRanks,
    attentionDp: state.config,
    learnFromRouting: state.learnFromRouting,
    ...(index ? { prefixIndex: index } : {}),
    ...(options.onDecision ? { onDecision: options.onDecision } : {}),
    ...(options.onHookError ? { onHookError: options.onHookError } : {}),
  });
  restoreState.get(router)!(state);
  return router;
}
