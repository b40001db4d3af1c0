// adp-router/engine-cache: an engine's KV cache per DP rank and KV-cache group
// (hybrid models, variable sliding windows), fed by its KV events and matched
// as the engine's own lookup would reuse. Apart from the main entry so routing
// alone does not carry it.

export { createEngineCacheView, restoreEngineCacheView, EngineCacheView, type EngineCacheViewOptions, type KvGroupKind, type KvGroupSpec } from "./engine-cache.js";
export { MAX_KV_GROUPS } from "./kv-events.js";
