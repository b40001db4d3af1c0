// adp-router: TensorRT-LLM's attention-DP request routers as a library.

export { init } from "./wasm.js";
export { createRouter, restoreRouter, routerKindFor, bindConversation, MAX_RANKS, type RestoreOptions, type Router, type RouterOptions } from "./router.js";
export type { RouteResult, RouterKind, DecisionRecord, DecisionOutcome, ScoringExplanation } from "./routers/types.js";
export type { PrefixHitMetrics, RouterMetrics } from "./metrics.js";
export { MAX_KEY_LENGTH, type RankState, type RequestId, type RouteInput, type RouteRequest } from "./batch.js";
export type { TokenIds } from "./arrays.js";
export {
  parseAttentionDpConfig,
  isAttentionDpConfig,
  toAttentionDpConfigInput,
  attentionDpConfigSchema,
  NEW_CONVERSATION_PLACEMENTS,
  type AttentionDpConfig,
  type AttentionDpConfigInput,
  type NewConversationPlacement,
} from "./config.js";
export { BalanceGate, createBalanceGate, type BalanceGateOptions, type BalanceGateMetrics, type RankIterationLoad } from "./balance-gate.js";
export {
  createPrefixIndex,
  restorePrefixIndex,
  PrefixIndex,
  MAX_INDEX_RANKS,
  MAX_INDEX_BYTES,
  type PrefixIndexOptions,
  type PrefixIndexStats,
  type PrefixNamespace,
  type KvEventsResult,
} from "./prefix-index.js";
export { ConversationMap } from "./conversation-map.js";
export { sliceKvEvents, type KvEventSlices } from "./kv-event-slices.js";
export { AttentionDpConfigError, AdpInputError, AdpHookError, AdpMemoryError, describeValue, excerpt, type InputIssue } from "./errors.js";
export {
  createInstanceRouter,
  InstanceRouter,
  RANK_ROUTING_KINDS,
  DEFAULT_LOAD_WEIGHT,
  type RankRoutingKind,
  type InstanceOptions,
  type InstanceRouterOptions,
  type InstanceRankState,
  type InstanceState,
  type InstanceRequest,
  type InstancesInput,
  type InstancePlacement,
} from "./instances.js";
export { runScenario, firstDifference, toRouteInput, type ScenarioAnswer } from "./conformance.js";
