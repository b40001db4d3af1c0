// `adp-router/simulate`: the trace replayer as a library (platform-neutral), for
// notebooks, pages and custom studies; the CLI's `simulate` command wraps it.
export { simulate, formatTable, toJson, POLICIES, CONFIG_POLICY, type SimulateOptions, type SimulationResult, type PolicyResult, type IndexUpdates, type IndexUpdatesReport, type EventReport, type ReplicasReport } from "./simulate/run.js";
export { DEFAULT_SYNC_DELAY_MS, MAX_REPLICAS, type ReplicaOptions, type SyncMode, type SyncReport } from "./simulate/replicas.js";
export { DEFAULT_EVENT_MODEL, type EventModel, type EventOptions, type EventFeedCounts } from "./simulate/event-feed.js";
export { parseTrace, optimumHitRatio, spreadArrivals, TraceError, type Trace, type TraceRequest } from "./simulate/trace.js";
export { multiTurnWorkload, type MultiTurnOptions } from "./simulate/workload.js";
export { DEFAULT_ENGINE, type EngineOptions } from "./simulate/engine.js";
export { renderReport } from "./simulate/report.js";
export { tuneReportHtml, paretoFront } from "./simulate/tune-report.js";
export { tune, inlineEvaluator, evaluateConfig, compareTunePoints, MAX_TUNE_BUDGET, type TuneOptions, type TuneEvaluator } from "./simulate/tune.js";
export { TUNE_OBJECTIVES, type TuneObjective, type TuneMetrics, type TuneConstraints, type TunePoint, type TunedConfig, type TuneResult } from "./simulate/tune-types.js";
