// The JSON Schema of the gateway's YAML file (shipped as
// adp-router-gateway/gateway.schema.json), beside the checks in config.ts that it
// describes: editors and CI validate a file with it before a gateway starts.

import { attentionDpConfigSchema } from "adp-router";
import { LEVELS, POLICY_CONFIGS } from "./config.js";
import { engineLoadSchema, kvEventsSchema } from "./events-config.js";
import { syncSchema } from "./sync-config.js";
import { disaggregationSchema, roleSchema } from "./disaggregation-config.js";
import { tokenizerSchema } from "./tokenizer-settings.js";

/** The library's attention_dp_config schema, as a subschema (its own `$schema` stays with the document's root). */
const { $schema: _drop, ...attentionDp } = attentionDpConfigSchema as Record<string, unknown>;

/**
 * JSON Schema (draft 2020-12) of the gateway's YAML file, complete in itself:
 * `attention_dp_config` is the library's schema inlined under `$defs` (every
 * `$ref` is local), so any standard validator compiles it alone. `upstreams`
 * is not required: `--upstream` flags can give them.
 */
export const gatewayConfigSchema = Object.freeze({
  $schema: "https://json-schema.org/draft/2020-12/schema",
  $id: "https://unpkg.com/adp-router-gateway/dist/gateway.schema.json",
  title: "adp-router-gateway configuration",
  type: "object",
  additionalProperties: false,
  $defs: { attention_dp_config: attentionDp },
  properties: {
    listen: {
      type: "object",
      additionalProperties: false,
      properties: {
        host: { type: "string", default: "127.0.0.1" },
        port: { type: "integer", minimum: 0, maximum: 65535, default: 8000 },
        connection_balance: { enum: ["kernel", "round_robin"], default: "kernel", description: "How --workers' processes share the connections: kernel, each worker accepts from the one listen socket as it is free; round_robin, the primary accepts each and hands it to the next free worker in turn (a hop through the primary a connection)." },
      },
    },
    upstreams: {
      type: "array",
      minItems: 1,
      items: {
        oneOf: [
          { type: "string", pattern: "^https?://" },
          {
            type: "object",
            additionalProperties: false,
            required: ["url"],
            properties: {
              url: { type: "string", pattern: "^https?://", description: "Base URL; a trailing /v1 is dropped with a warning (the gateway adds /v1/... itself). Unique after normalization; never the gateway's own address." },
              name: { type: "string", maxLength: 64, description: "Stable name in metric labels, logs and x-adp-upstream-name (default: the URL's host and path); unique in the fleet." },
              api_key: { type: "string" },
              api_key_env: { type: "string", pattern: "^[A-Za-z_][A-Za-z0-9_]*$" },
              drain: { type: "boolean", default: false, description: "Stays a rank, takes no new requests (finishes those it has)." },
              dp_ranks: { type: "integer", minimum: 1, maximum: 1024, description: "The engine's data-parallel (attention-DP) ranks behind this URL (default: kv_events.dp_ranks, else 1)." },
              attention_dp_config: { $ref: "#/$defs/attention_dp_config", description: "This engine's own attention_dp_config (as in its extra_llm_api_options.yaml; TensorRT-LLM's defaults for the rest), which rank_routing: adp runs over its DP ranks. Default: the gateway's." },
              rank_routing: { enum: ["adp", "instance", "none"], description: "How a request is pinned to one of the engine's DP ranks (sent as X-Data-Parallel-Rank): adp runs this library's router (the upstream's attention_dp_config, else the gateway's) over the ranks, instance scores them as TensorRT-LLM's centralized router does (matched blocks - 0.25 x requests in flight, ties in turn), none sends no rank (the engine's balancer picks). Default: adp for an engine with several ranks whose load kind is vllm or sglang, else none." },
              kv_events: kvEventsSchema,
              load: engineLoadSchema,
              ...roleSchema,
            },
          },
        ],
      },
    },
    policy: { enum: Object.keys(POLICY_CONFIGS), default: "kv_cache_aware" },
    attention_dp_config: { $ref: "#/$defs/attention_dp_config", description: "TensorRT-LLM's attention_dp_config, as in extra_llm_api_options.yaml" },
    limits: {
      type: "object",
      additionalProperties: false,
      properties: {
        max_body_bytes: { type: "integer", minimum: 1024, default: 4194304 },
        max_in_flight_per_upstream: { type: "integer", minimum: 1, default: 256 },
        queue_size: { type: "integer", minimum: 0, default: 1024 },
        queue_timeout_ms: { type: "integer", minimum: 0, default: 10000 },
        max_connections: { type: "integer", minimum: 1, default: 8192, description: "Client connections open at once; more are closed as they arrive. With --workers N, the gateway's: a worker past its 1/N share passes a new connection to a worker with room." },
        max_requests_per_connection: { type: "integer", minimum: 0, default: 1000, description: "Requests a client connection serves; its last answer says Connection: close, so the client reconnects (and, with --workers, may reach another worker: listen.connection_balance). 0: no limit." },
        max_receiving_bytes: { type: "integer", minimum: 1024, description: "Bytes of request bodies being received, all client connections together, at most; a body that would pass it is answered 503 and its connection closed. At least max_body_bytes; default 16 times max_body_bytes." },
        max_prompt_chars: { type: "integer", minimum: 1, default: 1048576, description: "A prompt's characters at most, counted before tokenizing (413 prompt_too_large past it)." },
        max_prompt_tokens: { type: "integer", minimum: 1, description: "A prompt's tokens at most (400 context_length_exceeded past it). Default 1048576 with tokenizer kind huggingface, 4194304 (bytes) with the byte tokenizer." },
      },
    },
    timeouts: {
      type: "object",
      additionalProperties: false,
      properties: {
        headers_ms: { type: "integer", minimum: 100, default: 10000, description: "Receiving a request's head (408 past it); at most request_ms." },
        request_ms: { type: "integer", minimum: 100, default: 60000, description: "Receiving a whole request, head and body (408 past it)." },
        keep_alive_ms: { type: "integer", minimum: 1000, default: 65000, description: "An idle client connection is kept this long between requests." },
        connect_ms: { type: "integer", minimum: 1, default: 5000 },
        first_byte_ms: { type: "integer", minimum: 1, default: 300000 },
        idle_ms: { type: "integer", minimum: 1, default: 300000, description: "A response with no progress in either direction (no chunk from the upstream, none taken by the client) is cut and its upstream slot released." },
        max_stream_ms: { type: "integer", minimum: 0, default: 0, description: "A whole exchange with an upstream at most; 0: no bound." },
      },
    },
    health: {
      type: "object",
      additionalProperties: false,
      properties: {
        path: { type: "string", pattern: "^/", default: "/health" },
        interval_ms: { type: "integer", minimum: 100, default: 5000 },
        timeout_ms: { type: "integer", minimum: 10, default: 2000 },
        unhealthy_threshold: { type: "integer", minimum: 1, default: 3 },
        healthy_threshold: { type: "integer", minimum: 1, default: 2 },
        on_start: { enum: ["require", "warn"], default: "require", description: "An upstream with no TCP connection at start: require refuses to start, warn logs it and starts." },
        consecutive_5xx: { type: "integer", minimum: 1, default: 5, description: "Outlier detection: consecutive 5xx answers that eject an upstream." },
        consecutive_gateway_failures: { type: "integer", minimum: 1, default: 5, description: "Outlier detection: consecutive connect errors, resets and timeouts that eject an upstream." },
        base_ejection_ms: { type: "integer", minimum: 10, default: 30000, description: "An outlier ejection lasts this times the number of recent ejections, then passing health checks re-admit." },
        max_ejection_ms: { type: "integer", minimum: 10, default: 300000, description: "The longest outlier ejection." },
        max_ejected_percent: { type: "integer", minimum: 0, maximum: 100, default: 50, description: "Outlier detection ejects no more than this share of the fleet (any cause counted), rounded down; below 100 never the last upstream taking requests." },
      },
    },
    auth: {
      type: "object",
      additionalProperties: false,
      properties: {
        api_keys: { type: "array", items: { type: "string", minLength: 1 }, description: "Client bearer keys (any non-empty length; shorter than 16 characters is warned about at start)." },
        api_keys_env: { type: "string", pattern: "^[A-Za-z_][A-Za-z0-9_]*$", description: "Environment variable holding client keys, comma-separated." },
        admin_api_key: { type: "string", minLength: 1, description: "The admin endpoints' key (/admin/upstreams); without it (or admin_api_key_env) they are off." },
        admin_api_key_env: { type: "string", pattern: "^[A-Za-z_][A-Za-z0-9_]*$", description: "Environment variable holding the admin endpoints' key; without it (or admin_api_key) they are off." },
        internal_request_auth_key_file: { type: "string", minLength: 1, description: "A file holding TensorRT-LLM's internal_request_auth_key: with it, a sub-agent hint (x-trtllm-subagent-affinity-id) is taken only on context or generation requests whose x-trtllm-subagent-affinity-auth is the signature TensorRT-LLM's edge makes (PR #19175); others are routed without it." },
        internal_request_auth_key_env: { type: "string", pattern: "^[A-Za-z_][A-Za-z0-9_]*$", description: "Environment variable holding TensorRT-LLM's internal_request_auth_key (see internal_request_auth_key_file)." },
        protect_metrics: { type: "boolean", default: false },
        protect_health: { type: "boolean", default: false },
      },
    },
    logging: { type: "object", additionalProperties: false, properties: { level: { enum: [...LEVELS], default: "info" } } },
    sync: syncSchema,
    disaggregation: disaggregationSchema(Object.keys(POLICY_CONFIGS)),
    tokenizer: tokenizerSchema,
    routing: {
      type: "object",
      additionalProperties: false,
      properties: {
        tokens_per_block: { type: "integer", minimum: 1, default: 128, description: "Default 128 (bytes) with the byte tokenizer, 32 with tokenizer kind huggingface." },
        index_bytes: { type: "integer", minimum: 1048576, default: 16777216 },
        lora_adapters: { type: "object", additionalProperties: { type: "integer", minimum: 0 }, description: "LoRA task id by model name: such requests route in the adapter's cache namespace." },
        load_weight: { type: "number", minimum: 0, default: 0.25, description: "TensorRT-LLM's centralized router's load weight (policy centralized; rank_routing instance): a request of load against a matched block." },
      },
    },
  },
});
