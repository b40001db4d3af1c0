// `adp-router/serve`: the gateway for embedding. Node only (HTTP server,
// undici, pino, yaml); the library entry stays dependency-free without it.
//
//   import { createGateway, loadGatewayConfig } from "adp-router/serve";
//   const gateway = await createGateway(loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:8001"], port: 0 } }));
//   console.log(gateway.url);
//   await gateway.close();

export { createGateway, GatewayListenError, type Gateway, type GatewayOptions } from "./gateway.js";
export { checkUpstreamUrl, gatewayConfigSchema, GatewayConfigError, isGatewayConfig, loadGatewayConfig, POLICY_CONFIGS, type ConfigIssue, type GatewayConfig, type GatewayFlags, type LoadOptions, type UpstreamConfig } from "./config.js";
export { HttpError, SESSION_HEADERS, SUBAGENT_HEADER, type RoutedRequest } from "./openai.js";
export { TokenPool, Utf8ByteTokenizer, type ChatMessage, type Tokenizer } from "./tokenizer.js";
export { RoutingState, type IndexUpdate, type IndexUpdateSource, type StateEntry, type StateLog } from "./routing-state.js";
export { createGatewayRouter } from "./fleet.js";
export { EventFreshness, type EventFreshnessOptions, type FeedStatus, type SequenceStep } from "./event-freshness.js";
