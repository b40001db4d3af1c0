// The shapes of the gateway's configuration: what `loadGatewayConfig`
// (src/serve/config.ts) returns, the flags it takes over the file, and the plain
// object `createGateway` accepts in place of a file.

import type { AttentionDpConfig } from "../config.js";
import type { TokenizerSettings } from "./tokenizer-config.js";
import type { EngineLoadConfig, KvEventsConfig } from "./events-config.js";
import type { SyncConfig } from "./sync/sync-config.js";

/** One upstream engine: a rank of the gateway's router. */
export interface UpstreamConfig {
  /** Base URL, `http://` or `https://` (a path, if any, is the base the API paths join). */
  readonly url: string;
  /** A short name for logs (defaults to the URL's host). Metrics label upstreams by index. */
  readonly name: string;
  /** The API key sent to this upstream as `Authorization: Bearer …` in place of the client's. */
  readonly apiKey: string | null;
  /** Whether it is drained: it stays a rank but takes no new requests. */
  readonly drain: boolean;
  /** Where its engine publishes its KV-cache events, or null (the gateway learns from its own placements). */
  readonly kvEvents: KvEventsConfig | null;
  /** Where its engine's load is scraped, or null (the gateway counts only its own requests). */
  readonly load: EngineLoadConfig | null;
}

/** The gateway's whole configuration, checked, with defaults filled. */
export interface GatewayConfig {
  readonly listen: { readonly host: string; readonly port: number };
  readonly upstreams: readonly UpstreamConfig[];
  /** The routers' configuration (the policy's, overridden by `attention_dp_config`). */
  readonly attentionDp: AttentionDpConfig;
  readonly limits: {
    /** Largest request body accepted (413 past it). */
    readonly maxBodyBytes: number;
    /** In-flight requests one upstream takes: the router's `maxNumActiveRequests`. */
    readonly maxInFlightPerUpstream: number;
    /** Requests waiting for capacity at most (429 past it). */
    readonly queueSize: number;
    /** How long a request waits for capacity before 429. */
    readonly queueTimeoutMs: number;
  };
  readonly timeouts: {
    /** Receiving a whole request from a client (headers and body). */
    readonly requestMs: number;
    /** Connecting to an upstream. */
    readonly connectMs: number;
    /** From sending the request to the upstream's response headers (504 past it). */
    readonly firstByteMs: number;
    /** Between two chunks of an upstream's response body. */
    readonly idleMs: number;
  };
  readonly health: {
    /** Path of the upstreams' health endpoint. */
    readonly path: string;
    readonly intervalMs: number;
    readonly timeoutMs: number;
    /**
     * Consecutive failures that eject an upstream: failed checks, or proxied
     * requests that failed on it (connect errors, broken connections, 5xx
     * answers; a 2xx-4xx answer resets that count).
     */
    readonly unhealthyThreshold: number;
    /** Consecutive passing checks that re-admit it (after a passive ejection, only checks once it has lasted `intervalMs` count). */
    readonly healthyThreshold: number;
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
  };
  readonly logging: {
    readonly level: "fatal" | "error" | "warn" | "info" | "debug" | "trace" | "silent";
  };
  /** How prompts become token ids: UTF-8 bytes, or the engine's tokenizer (tokenizer-config.ts). */
  readonly tokenizer: TokenizerSettings;
  /** The NATS server its replicas share one routing state through, or null (a gateway of its own). */
  readonly sync: SyncConfig | null;
  readonly routing: {
    /** Tokens per block of the gateway's prefix index. */
    readonly tokensPerBlock: number;
    /** LoRA task ids by model name: a request for such a model routes in its adapter's cache namespace. */
    readonly loraAdapters: ReadonlyMap<string, number>;
    /** The prefix index's memory budget. */
    readonly indexBytes: number;
  };
}

/** Command-line settings, which override the file's. */
export interface GatewayFlags {
  readonly upstreams?: readonly string[];
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
  readonly listen?: { readonly host?: string; readonly port?: number };
  /** createGateway only: `listen.port` (as `--port`), `listen.host` (as `--host`). */
  readonly port?: number;
  readonly host?: string;
  readonly upstreams?: readonly (string | UpstreamObject)[];
  readonly policy?: string;
  readonly attention_dp_config?: Readonly<Record<string, unknown>>;
  readonly limits?: { readonly max_body_bytes?: number; readonly max_in_flight_per_upstream?: number; readonly queue_size?: number; readonly queue_timeout_ms?: number };
  readonly timeouts?: { readonly request_ms?: number; readonly connect_ms?: number; readonly first_byte_ms?: number; readonly idle_ms?: number };
  readonly health?: { readonly path?: string; readonly interval_ms?: number; readonly timeout_ms?: number; readonly unhealthy_threshold?: number; readonly healthy_threshold?: number; readonly on_start?: "require" | "warn" };
  readonly auth?: { readonly api_keys?: readonly string[]; readonly api_keys_env?: string; readonly admin_api_key?: string; readonly admin_api_key_env?: string; readonly protect_metrics?: boolean; readonly protect_health?: boolean };
  readonly logging?: { readonly level?: string };
  readonly routing?: { readonly tokens_per_block?: number; readonly index_bytes?: number; readonly lora_adapters?: Readonly<Record<string, number>> };
  readonly tokenizer?: unknown;
  readonly sync?: unknown;
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
