// `adp-router/serve`: the gateway for embedding. Node only (HTTP server,
// undici, pino, yaml); the library entry stays dependency-free without it.
//
//   import { createGateway } from "adp-router/serve";
//   const gateway = await createGateway({ upstreams: ["http://127.0.0.1:8001"], listen: { port: 0 } });
//   console.log(gateway.url);
//   await gateway.close();

export { createGateway, createGatewayReader, GatewayListenError, type Gateway, type GatewayOptions } from "./gateway.js";
export { createRequestReader, type RequestReader, type RequestReaderOptions, type TokenizeStats } from "./request-reader.js";
export { ExchangeError, reasonOf, type ExchangeReason } from "./exchange.js";
export { UpstreamHealth, EJECTION_CAUSES, type EjectionCause, type HealthSettings, type TrafficVerdict } from "./outlier.js";
export { TokenTiming } from "./token-timing.js";
export { checkUpstreamEntry, checkUpstreamUrl, defaultUpstreamName, fleetProblems, GatewayConfigError, isGatewayConfig, loadGatewayConfig, POLICY_CONFIGS, type ConfigIssue, type GatewayConfig, type GatewayConfigObject, type GatewayFlags, type LoadOptions, type UpstreamConfig, type UpstreamObject } from "./config.js";
export { gatewayConfigSchema } from "./config-schema.js";
export { HttpError, NO_PROMPT_LIMITS, SESSION_HEADERS, SUBAGENT_HEADER, type PromptLimits, type RoutedRequest } from "./openai.js";
export { TokenPool, TokenizerRequestError, Utf8ByteTokenizer, type ChatMessage, type RequestFields, type Tokenizer } from "./tokenizer.js";
export { HuggingFaceTokenizer, TokenizerFilesError, type HuggingFaceTokenizerFiles, type HuggingFaceTokenizerOptions } from "./hf-tokenizer.js";
export { ChatTemplateSyntaxError } from "./chat-template.js";
export { loadHuggingFaceTokenizer, loadTokenizer, TokenizerLoadError, type TokenizerSettings } from "./tokenizer-config.js";
export { RoutingState, type EngineFeeds, type IndexUpdate, type IndexUpdateSource, type StateEntry, type StateLog } from "./routing-state.js";
export { createGatewayRouter } from "./fleet.js";
export { engineStatus, EventFreshness, type EventFreshnessOptions, type EventSourceCounters, type FeedStatus, type SequenceStep } from "./event-freshness.js";
export { EngineViews, type EngineViewShape, type EngineViewsOptions } from "./engine-views.js";
export { checkZmqEndpoint, type KvEventsConfig } from "./events-config.js";
export { ZmqEventSource, rankEndpoint, type ZmqEventSourceOptions } from "./zmq-events.js";
export { TrtllmHttpEventSource, type HttpEventSourceOptions, type PolledEngine } from "./http-events.js";
export { Replication, type SyncCounters, type SyncState } from "./sync/replication.js";
export { checkNatsUrl, type SyncConfig } from "./sync/sync-config.js";
export { decodeEntry, encodeEntry, SyncEntryError, type SharedEntry, type SyncMessage } from "./sync/entry-codec.js";
