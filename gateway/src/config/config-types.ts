// The shapes of the gateway's configuration: what `loadGatewayConfig`
// (gateway/src/config/config.ts) returns, the flags it takes over the file, and the plain
// object `createGateway` accepts in place of a file.

import type { AttentionDpConfig } from "adp-router";
import type { TokenizerSettings } from "./tokenizer-settings.js";
import type { EngineLoadConfig, KvEventsConfig } from "./events-config.js";
import type { SyncConfig } from "./sync-config.js";
import type { PoolRouting } from "./policies.js";

/** One upstream engine: a rank of the gateway's router. */
export interface UpstreamConfig {
  /** Base URL, `http://` or `https://` (a path, if any, is the base the API paths join). */
  readonly url: string;
  /**
   * Its stable name: in metric labels, log lines and the `x-adp-upstream-name`
   * answer header (configured, else the URL's host and path; unique in the fleet).
   */
  readonly name: string;
  /** The API key sent to this upstream as `Authorization: Bearer …` in place of the client's. */
  readonly apiKey: string | null;
  /** Whether it is drained: it stays a rank but takes no new requests. */
  readonly drain: boolean;
  /** Where its engine publishes its KV-cache events, or null (the gateway learns from its own placements). */
  readonly kvEvents: KvEventsConfig | null;
  /** Where its engine's load is scraped, or null (the gateway counts only its own requests). */
  readonly load: EngineLoadConfig | null;
  /** Its engine's data-parallel (attention-DP) ranks. */
  readonly dpRanks: number;
  /** How a request is pinned to one of them: this library's router over them, TensorRT-LLM's centralized router's rank score, or not at all. */
  readonly rankRouting: RankRoutingKind;
  /** Its engine's own attention_dp_config, which phase 2 (`adp`) runs over its ranks, or null: the gateway's. */
  readonly attentionDp: AttentionDpConfig | null;
  /** Its pool under `disaggregation:` (a context/prefill or generation/decode server), or null: it serves whole requests. */
  readonly role: UpstreamRole | null;
  /** An SGLang prefill server's bootstrap port (its `--disaggregation-bootstrap-port`), or null: the server's default (8998). */
  readonly bootstrapPort: number | null;
}

/** The pool an upstream belongs to in disaggregated serving. */
export type UpstreamRole = "prefill" | "decode";

/** The wire protocol that hands a request from its prefill server to its decode server: the engines'. */
export type DisaggregationProtocol = "trtllm" | "vllm" | "sglang";

/** Prefill/decode disaggregation (`disaggregation:`): two pools, each routed by its own router. */
export interface DisaggregationConfig {
  readonly protocol: DisaggregationProtocol;
  /**
   * TensorRT-LLM's conditional disaggregation (`conditional_disagg_config`):
   * a request whose prompt a generation server holds in part, with at most
   * this many tokens left to prefill, is served whole there; null: off.
   */
  readonly maxLocalPrefillLength: number | null;
  /** This gateway's node in the 64-bit request ids it makes (TensorRT-LLM's `node_id`, 0..255). */
  readonly nodeId: number;
  /** The context (prefill) pool's routing. */
  readonly prefill: PoolRouting;
  /** The generation (decode) pool's routing. */
  readonly decode: PoolRouting;
}

/** How the gateway picks an upstream's DP rank for a request (phase 2). */
export type RankRoutingKind = "adp" | "instance" | "none";

/** How `--workers`' processes share the listen socket's connections (config.ts: CONNECTION_BALANCES). */
export type ConnectionBalance = "kernel" | "round_robin";

/** The gateway's whole configuration, checked, with defaults filled. */
export interface GatewayConfig {
  /** What the configuration accepted but the gateway logs a warning about at start (a URL it rewrote, say). */
  readonly warnings: readonly ConfigIssue[];
  /** Where it listens; `connectionBalance`: how `--workers`' processes share its connections (CONNECTION_BALANCES). */
  readonly listen: { readonly host: string; readonly port: number; readonly connectionBalance: ConnectionBalance };
  readonly upstreams: readonly UpstreamConfig[];
  /** The routers' configuration (the policy's, overridden by `attention_dp_config`). */
  readonly attentionDp: AttentionDpConfig;
  /**
   * Whether phase 1 (the upstream) is TensorRT-LLM's centralized router's
   * choice (`policy: centralized`) rather than the router `attentionDp` selects.
   */
  readonly centralized: boolean;
  readonly limits: {
    /** Largest request body accepted (413 past it). */
    readonly maxBodyBytes: number;
    /** In-flight requests one upstream takes from the whole gateway: the router's `maxNumActiveRequests`. */
    readonly maxInFlightPerUpstream: number;
    /**
     * In-flight requests this process may start on one upstream: all of
     * `maxInFlightPerUpstream` in one process; with N workers this worker's
     * share at its start (the shares add up to it; workers lend each other
     * what they leave unused: workers/in-flight-lending.ts).
     */
    readonly inFlightShare: number;
    /** Requests waiting for capacity at most, the whole gateway's (429 past it; with N workers the primary lends them: workers/queue-lending.ts). */
    readonly queueSize: number;
    /** How long a request waits for capacity before 429. */
    readonly queueTimeoutMs: number;
    /** Client connections open at once at most, the whole gateway's (more are closed as they arrive). */
    readonly maxConnections: number;
    /**
     * Client connections this process holds at most: all of `maxConnections`
     * in one process; with N workers this worker's share (the shares add up
     * to it; a connection past a worker's share goes to a worker with room:
     * workers/connection-overflow.ts).
     */
    readonly connectionShare: number;
    /** Requests a client connection serves at most (its last answer closes it; 0: no limit). */
    readonly maxRequestsPerConnection: number;
    /** Bytes of request bodies being received, all client connections together, at most (503 for the body past it). */
    readonly maxReceivingBytes: number;
    /** A prompt's characters at most, counted before it is tokenized (413 past it). */
    readonly maxPromptChars: number;
    /** A prompt's tokens at most, as the tokenizer counts them (400 past it; with the byte tokenizer a token is a byte). */
    readonly maxPromptTokens: number;
  };
  readonly timeouts: {
    /** Receiving a request's head from a client (408 past it). */
    readonly headersMs: number;
    /** Receiving a whole request from a client (head and body; 408 past it). */
    readonly requestMs: number;
    /** How long an idle client connection is kept open between requests. */
    readonly keepAliveMs: number;
    /** Connecting to an upstream. */
    readonly connectMs: number;
    /** From sending the request to the upstream's response headers (504 past it). */
    readonly firstByteMs: number;
    /**
     * A response in progress with no progress in either direction: no chunk from
     * the upstream, and none taken by the client (it stopped reading); the stream
     * is cut and its upstream slot released.
     */
    readonly idleMs: number;
    /** A whole exchange with an upstream at most, from sending to the answer's end; 0: no bound. */
    readonly maxStreamMs: number;
  };
  readonly health: {
    /** Path of the upstreams' health endpoint. */
    readonly path: string;
    readonly intervalMs: number;
    readonly timeoutMs: number;
    /** Consecutive failed health checks that eject an upstream. */
    readonly unhealthyThreshold: number;
    /** Consecutive passing checks that re-admit it (after an outlier ejection, only those once its ejection time is over). */
    readonly healthyThreshold: number;
    /** Outlier detection: consecutive 5xx answers that eject an upstream (an answer under 500 resets the count). */
    readonly consecutive5xx: number;
    /** Outlier detection: consecutive gateway failures (connect errors, resets, timeouts) that eject it (any answer resets the count). */
    readonly consecutiveGatewayFailures: number;
    /** An outlier ejection lasts this times the number of times the upstream was ejected (recently) ... */
    readonly baseEjectionMs: number;
    /** ... and at most this. */
    readonly maxEjectionMs: number;
    /** Outlier detection leaves at most this percentage of the fleet ejected (any cause), rounded down; below 100 it never ejects the last upstream taking requests. */
    readonly maxEjectedPercent: number;
    /**
     * An upstream that cannot be reached (no TCP connection) when the gateway
     * starts: "require" refuses to start, naming it; "warn" logs it and starts
     * with it unhealthy (it takes requests once its health checks pass).
     */
    readonly onStart: "require" | "warn";
  };
  readonly auth: {
    /** Client API keys (bearer tokens, any non-empty length; shorter than 16 characters: a warning at start); empty: no client auth. */
    readonly apiKeys: readonly string[];
    /** Whether `/metrics` needs a client key too (when keys are set). */
    readonly protectMetrics: boolean;
    /** Whether `/health` needs a client key too (when keys are set). */
    readonly protectHealth: boolean;
    /** The key of the admin endpoints (`/admin/…`), which are off without one (`admin_api_key` or `admin_api_key_env`). */
    readonly adminApiKey: string | null;
    /**
     * TensorRT-LLM's `internal_request_auth_key`, or null: with it, a sub-agent
     * hint (`x-trtllm-subagent-affinity-id`) is taken only on context or
     * generation requests signed as TensorRT-LLM's edge signs them.
     */
    readonly internalRequestAuthKey: string | null;
  };
  readonly logging: {
    readonly level: "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
  };
  /** How prompts become token ids: UTF-8 bytes, or the engine's tokenizer (tokenizer-config.ts). */
  readonly tokenizer: TokenizerSettings;
  /** The NATS server its replicas share one routing state through, or null (a gateway of its own). */
  readonly sync: SyncConfig | null;
  /** Prefill/decode disaggregation, or null: every upstream serves whole requests. */
  readonly disaggregation: DisaggregationConfig | null;
  readonly routing: {
    /** Tokens per block of the gateway's prefix index. */
    readonly tokensPerBlock: number;
    /** LoRA task ids by model name: a request for such a model routes in its adapter's cache namespace. */
    readonly loraAdapters: ReadonlyMap<string, number>;
    /** The prefix index's memory budget. */
    readonly indexBytes: number;
    /** TensorRT-LLM's centralized router's load weight: a request of load against a matched block (policy centralized, rank_routing instance). */
    readonly loadWeight: number;
  };
}

/** Command-line settings, which override the file's. */
export interface GatewayFlags {
  readonly upstreams?: readonly string[];
  /** `--prefill URL` and `--decode URL`: upstreams of those roles (with `--upstream`'s, in place of the file's). */
  readonly prefill?: readonly string[];
  readonly decode?: readonly string[];
  /** `--disaggregation PROTOCOL`: `disaggregation.protocol` (the section's other settings from the file). */
  readonly disaggregation?: string;
  readonly host?: string;
  readonly port?: number;
  readonly policy?: string;
  readonly logLevel?: string;
  /** `--tokenizer DIR`: the engine's Hugging Face tokenizer from that folder. */
  readonly tokenizer?: string;
  /** `--sync nats://HOST:PORT`: share the routing state with the other replicas there. */
  readonly sync?: string;
  /** `--replica-id ID`: this replica's name in the cluster. */
  readonly replicaId?: string;
  /** `--allow-unreachable`: health.on_start "warn". */
  readonly allowUnreachable?: boolean;
}

/**
 * A configuration written as an object shaped like the YAML file (what
 * `createGateway` also takes): snake_case keys, every section optional but
 * `upstreams` (unless flags give them). Checked by {@link loadGatewayConfig}.
 */
export interface GatewayConfigObject {
  readonly listen?: { readonly host?: string; readonly port?: number; readonly connection_balance?: ConnectionBalance };
  /** createGateway only: `listen.port` (as `--port`), `listen.host` (as `--host`). */
  readonly port?: number;
  readonly host?: string;
  readonly upstreams?: readonly (string | UpstreamObject)[];
  readonly policy?: string;
  readonly attention_dp_config?: Readonly<Record<string, unknown>>;
  readonly limits?: {
    readonly max_body_bytes?: number;
    readonly max_in_flight_per_upstream?: number;
    readonly queue_size?: number;
    readonly queue_timeout_ms?: number;
    readonly max_connections?: number;
    readonly max_requests_per_connection?: number;
    readonly max_receiving_bytes?: number;
    readonly max_prompt_chars?: number;
    readonly max_prompt_tokens?: number;
  };
  readonly timeouts?: {
    readonly headers_ms?: number;
    readonly request_ms?: number;
    readonly keep_alive_ms?: number;
    readonly connect_ms?: number;
    readonly first_byte_ms?: number;
    readonly idle_ms?: number;
    readonly max_stream_ms?: number;
  };
  readonly health?: {
    readonly path?: string;
    readonly interval_ms?: number;
    readonly timeout_ms?: number;
    readonly unhealthy_threshold?: number;
    readonly healthy_threshold?: number;
    readonly on_start?: "require" | "warn";
    readonly consecutive_5xx?: number;
    readonly consecutive_gateway_failures?: number;
    readonly base_ejection_ms?: number;
    readonly max_ejection_ms?: number;
    readonly max_ejected_percent?: number;
  };
  readonly auth?: { readonly api_keys?: readonly string[]; readonly api_keys_env?: string; readonly admin_api_key?: string; readonly admin_api_key_env?: string; readonly protect_metrics?: boolean; readonly protect_health?: boolean; readonly internal_request_auth_key_file?: string; readonly internal_request_auth_key_env?: string };
  readonly logging?: { readonly level?: string };
  readonly routing?: { readonly tokens_per_block?: number; readonly index_bytes?: number; readonly lora_adapters?: Readonly<Record<string, number>> };
  readonly tokenizer?: unknown;
  readonly sync?: unknown;
  readonly disaggregation?: unknown;
}

/** One upstream as the YAML file (or the admin endpoint's body) writes it. */
export interface UpstreamObject {
  readonly url: string;
  readonly name?: string;
  readonly api_key?: string;
  readonly api_key_env?: string;
  readonly drain?: boolean;
  readonly kv_events?: unknown;
  readonly load?: unknown;
  readonly role?: UpstreamRole;
  readonly bootstrap_port?: number;
}

/** One problem in a configuration, where it is. */
export interface ConfigIssue {
  /** The field, as a path (`upstreams[1].url`). */
  readonly field: string;
  /** What is wrong. */
  readonly message: string;
  /** `FILE:LINE` or `--flag`, when known. */
  readonly where: string | null;
}
