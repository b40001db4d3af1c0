// `adp-router-gateway`: the gateway for embedding, and its commands. Node only
// (HTTP server, undici, pino, yaml, zeromq, NATS); the routing itself is the
// library's (adp-router), which stays dependency-free.
//
//   import { createGateway, loadGatewayConfig } from "adp-router-gateway";
//   const gateway = await createGateway(loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:8001"], port: 0 } }));
//   console.log(gateway.url);
//   await gateway.close();

export { SERVE_USAGE, serveCommand } from "./command.js";
export { VALIDATE_USAGE, validateCommand } from "./validate-command.js";
export { createGateway, createGatewayReader, GatewayListenError, type Gateway, type GatewayOptions } from "./gateway.js";
export { createRequestReader, type RequestReader, type RequestReaderOptions, type TokenizeStats } from "./requests/request-reader.js";
export { ExchangeError, reasonOf, type ExchangeReason } from "./fleet/upstream-errors.js";
export { UpstreamHealth, EJECTION_CAUSES, type EjectionCause, type HealthSettings, type TrafficVerdict } from "./fleet/outlier.js";
export { TokenTiming } from "./proxy/token-timing.js";
export { checkUpstreamEntry, checkUpstreamUrl, defaultUpstreamName, fleetProblems, GatewayConfigError, isGatewayConfig, loadGatewayConfig, POLICY_CONFIGS, type ConfigIssue, type GatewayConfig, type GatewayConfigObject, type GatewayFlags, type LoadOptions, type UpstreamConfig, type UpstreamObject } from "./config/config.js";
export { gatewayConfigSchema } from "./config/config-schema.js";
export { HttpError, NO_PROMPT_LIMITS, SESSION_HEADERS, SUBAGENT_HEADER, type PromptLimits, type RoutedRequest } from "./requests/openai.js";
export { TokenPool, TokenizerRequestError, Utf8ByteTokenizer, type ChatMessage, type RequestFields, type Tokenizer } from "./tokenizers/tokenizer.js";
export { HuggingFaceTokenizer, TokenizerFilesError, type HuggingFaceTokenizerFiles, type HuggingFaceTokenizerOptions } from "./tokenizers/hf-tokenizer.js";
export { ChatTemplateSyntaxError } from "./tokenizers/chat-template.js";
export { loadHuggingFaceTokenizer, loadTokenizer, TokenizerLoadError } from "./tokenizers/tokenizer-loading.js";
export type { TokenizerSettings } from "./config/tokenizer-settings.js";
export { RoutingState, type EngineFeeds, type IndexUpdate, type IndexUpdateSource, type StateEntry, type StateLog } from "./fleet/routing-state.js";
export { createGatewayRouter } from "./fleet/fleet.js";
export { engineStatus, EventFreshness, type EventFreshnessOptions, type EventSourceCounters, type FeedStatus, type SequenceStep } from "./events/event-freshness.js";
export { EngineViews, type EngineViewShape, type EngineViewsOptions } from "./events/engine-views.js";
export { checkZmqEndpoint, type KvEventsConfig } from "./config/events-config.js";
export { ZmqEventSource, rankEndpoint, type ZmqEventSourceOptions } from "./events/zmq-events.js";
export { TrtllmHttpEventSource, type HttpEventSourceOptions, type PolledEngine } from "./events/http-events.js";
export { Replication, type SyncCounters, type SyncState } from "./replication/replication.js";
export { checkNatsUrl, type SyncConfig } from "./config/sync-config.js";
export { decodeEntry, encodeEntry, SyncEntryError, type SharedEntry, type SyncMessage } from "./replication/entry-codec.js";
