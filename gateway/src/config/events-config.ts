// What an upstream's engine tells the gateway about itself, checked like the
// rest of the gateway's configuration: `kv_events:`, where it publishes its
// KV-cache events (kv-events reference §1–2), and `load:`, where its load is
// scraped (§3). Two event transports:
//
//   kv_events: { kind: zmq, endpoint: "tcp://engine:5557", replay_endpoint: "tcp://engine:5558", dp_ranks: 2 }
//   kv_events: { kind: http, path: /kv_cache_events, interval_ms: 200 }
//
// ZeroMQ endpoints are DP rank 0's; rank r publishes (and replays) at the port
// plus r, as both engines offset them.

import { describeValue, excerpt } from "adp-router";
import { MAX_KV_GROUPS, type KvGroupSpec } from "adp-router/engine-cache";

/** Where one upstream's engine publishes its KV-cache events. */
export type KvEventsConfig =
  /** A ZeroMQ PUB stream per DP rank (TensorRT-LLM's and vLLM's msgpack events). */
  | {
      readonly kind: "zmq";
      /** DP rank 0's PUB endpoint (`tcp://HOST:PORT`, or `ipc://PATH` for one rank). */
      readonly endpoint: string;
      /** DP rank 0's replay (ROUTER) endpoint, or null: a gap then cannot be filled. */
      readonly replayEndpoint: string | null;
      /** Whether the gateway binds the endpoint (an engine configured to connect, as vLLM does without `*`). */
      readonly bind: boolean;
      /** The topic subscribed to (a prefix; empty: all). */
      readonly topic: string;
      readonly dpRanks: number;
      readonly staleAfterMs: number;
      /** How long a replay may take before the gap counts as unfilled. */
      readonly replayTimeoutMs: number;
      /** The largest batch taken, bytes: a larger one is refused before it is decoded (counted; the stream is then gapped). */
      readonly maxBatchBytes: number;
      /** The most blocks and tokens one batch may name: a batch over either is refused once decoded, before it is applied. */
      readonly maxBatchBlocks: number;
      readonly maxBatchTokens: number;
      /** CURVE (ZeroMQ's authenticated encryption), or null: plain TCP. */
      readonly curve: CurveConfig | null;
      /** vLLM's KV-cache groups by `group_idx` (a hybrid model's), for events that do not name their kind; empty: as the events say. */
      readonly groups: readonly KvGroupSpec[];
    }
  /** TensorRT-LLM's `/kv_cache_events`, polled (each call drains the engine's buffer). */
  | {
      readonly kind: "http";
      readonly path: string;
      readonly intervalMs: number;
      /** "contiguous": a jump in a rank's event ids is a gap (the engine's buffer overflowed); "sparse": ids only increase (TensorRT-LLM's kv_event_fanout.py drops created and updated events and keeps their ids). */
      readonly eventIds: "contiguous" | "sparse";
      readonly dpRanks: number;
      readonly staleAfterMs: number;
      /** The largest poll answer read, bytes (a larger one is refused unread; every rank is then gapped). */
      readonly maxBatchBytes: number;
      readonly maxBatchBlocks: number;
      readonly maxBatchTokens: number;
    };

/**
 * CURVE on an event stream (Z85 text keys; the gateway's from files). As a
 * client (connect mode): to an engine that is a CURVE server, by its public
 * key, with the gateway's own key pair. As a server (bind mode): with the
 * gateway's secret key, accepting only publishers whose public key is allowed.
 */
export type CurveConfig =
  | { readonly role: "client"; readonly serverPublicKey: string; readonly publicKey: string; readonly secretKey: string }
  | { readonly role: "server"; readonly secretKey: string; readonly allowedClients: readonly string[] };

/** Where an upstream's engine load is scraped, and how old a report may be. */
export interface EngineLoadConfig {
  /** The metrics format: vLLM's or SGLang's Prometheus text, or trtllm-serve's iteration statistics. */
  readonly kind: "vllm" | "sglang" | "trtllm";
  readonly path: string;
  readonly intervalMs: number;
  /** A report older than this excludes the upstream from routing until it reports again (TensorRT-LLM's `load_suspend_s`). */
  readonly maxAgeMs: number;
  /** vLLM: only this model's series (its `model_name` label), or null for all. */
  readonly model: string | null;
}

/** Reads an upstream's `load` setting (null when absent). */
export function readEngineLoad(r: SettingReader, value: unknown, path: (string | number)[]): EngineLoadConfig | null {
  if (value === undefined || value === null) return null;
  const s = r.section(value, path, ["kind", "path", "interval_ms", "max_age_ms", "model"]);
  const kind = r.str(s.kind, [...path, "kind"], "");
  if (kind !== "vllm" && kind !== "sglang" && kind !== "trtllm") {
    r.fail([...path, "kind"], `must be vllm or sglang (Prometheus /metrics) or trtllm (trtllm-serve's /metrics statistics), got ${describeValue(s.kind)}`);
    return null;
  }
  const p = r.str(s.path, [...path, "path"], "/metrics");
  if (!p.startsWith("/")) r.fail([...path, "path"], "must start with /");
  const intervalMs = r.int(s.interval_ms, [...path, "interval_ms"], 50, 600_000, 1_000);
  const maxAgeMs = r.int(s.max_age_ms, [...path, "max_age_ms"], 100, 3_600_000, 3_000);
  if (maxAgeMs <= intervalMs) r.fail([...path, "max_age_ms"], `must be longer than interval_ms (${intervalMs}), or every report would be old before the next`);
  const model = s.model === undefined || s.model === null ? null : r.str(s.model, [...path, "model"], "") || null;
  return { kind, path: p, intervalMs, maxAgeMs, model };
}

/** JSON Schema of `load`. */
export const engineLoadSchema = Object.freeze({
  type: "object",
  additionalProperties: false,
  required: ["kind"],
  description: "Scrape the engine's load on an interval and add it to the gateway's own counts; an upstream whose last report is older than max_age_ms takes no requests until it reports again (its cache view is kept).",
  properties: {
    kind: { enum: ["vllm", "sglang", "trtllm"] },
    path: { type: "string", default: "/metrics" },
    interval_ms: { type: "integer", minimum: 50, default: 1000 },
    max_age_ms: { type: "integer", minimum: 100, default: 3000 },
    model: { type: "string", description: "vLLM: read only this model_name's series." },
  },
});

/** The keys `kv_events` accepts. */
export const KV_EVENTS_KEYS = ["kind", "endpoint", "replay_endpoint", "bind", "topic", "dp_ranks", "stale_after_ms", "replay_timeout_ms", "max_batch_bytes", "max_batch_blocks", "max_batch_tokens", "curve", "groups", "path", "interval_ms", "event_ids"] as const;

/** The per-batch limits both transports share, read from `s`; `bytes`: the default of max_batch_bytes. */
function readBatchLimits(r: SettingReader, s: Record<string, unknown>, path: (string | number)[], bytes: number): { maxBatchBytes: number; maxBatchBlocks: number; maxBatchTokens: number } {
  return {
    maxBatchBytes: r.int(s.max_batch_bytes, [...path, "max_batch_bytes"], 1024, 1 << 30, bytes),
    // 32,768 blocks are a 512K-token prompt in 16-token blocks, prefilled in one step: more than any engine step stores.
    maxBatchBlocks: r.int(s.max_batch_blocks, [...path, "max_batch_blocks"], 1, 1 << 24, 32_768),
    maxBatchTokens: r.int(s.max_batch_tokens, [...path, "max_batch_tokens"], 1, 1 << 26, 1 << 20),
  };
}

/** What reading one setting needs from the configuration's reader (gateway/src/config/config.ts). */
export interface SettingReader {
  fail(path: readonly (string | number)[], message: string): void;
  section(v: unknown, path: (string | number)[], keys: readonly string[]): Record<string, unknown>;
  int(v: unknown, path: (string | number)[], min: number, max: number, fallback: number): number;
  bool(v: unknown, path: (string | number)[], fallback: boolean): boolean;
  str(v: unknown, path: (string | number)[], fallback: string): string;
  /** The trimmed text of the file a setting names, or null (the reason recorded, never the content). */
  file(v: unknown, path: (string | number)[]): string | null;
}

/** A ZeroMQ endpoint checked (`tcp://HOST:PORT` with room for `dpRanks` ports, or `ipc://PATH`); a reason when it is not one. */
export function checkZmqEndpoint(text: string, dpRanks: number, bind: boolean): string | null {
  if (text.startsWith("ipc://")) return text.length > 6 ? (dpRanks === 1 ? null : "an ipc:// endpoint serves one DP rank (use tcp:// with dp_ranks > 1)") : "ipc:// needs a path";
  const m = /^tcp:\/\/(\*|\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(text);
  if (m === null) return `must be tcp://HOST:PORT or ipc://PATH, got ${describeValue(excerpt(text, 80))}`;
  if (m[1] === "*" && !bind) return "names every interface (*), which only a bound socket can: set bind: true, or name the engine's host";
  const port = Number(m[2]);
  if (port < 1 || port + dpRanks - 1 > 65535) return `port ${port} leaves no room for ${dpRanks} DP rank${dpRanks === 1 ? "" : "s"} (rank r uses port + r)`;
  return null;
}

/** Reads an upstream's `kv_events` setting (null when absent). */
export function readKvEvents(r: SettingReader, value: unknown, path: (string | number)[]): KvEventsConfig | null {
  if (value === undefined || value === null) return null;
  const s = r.section(value, path, KV_EVENTS_KEYS);
  const kind = r.str(s.kind, [...path, "kind"], "");
  const dpRanks = r.int(s.dp_ranks, [...path, "dp_ranks"], 1, 1024, 1);
  const staleAfterMs = r.int(s.stale_after_ms, [...path, "stale_after_ms"], 100, 3_600_000, 10_000);
  const only = (keys: readonly string[]) => {
    for (const k of Object.keys(s)) if (!keys.includes(k)) r.fail([...path, k], `is not a setting of kind ${kind} (expected ${keys.join(", ")})`);
  };
  if (kind === "zmq") {
    only(["kind", "endpoint", "replay_endpoint", "bind", "topic", "dp_ranks", "stale_after_ms", "replay_timeout_ms", "max_batch_bytes", "max_batch_blocks", "max_batch_tokens", "curve", "groups"]);
    const bind = r.bool(s.bind, [...path, "bind"], false);
    const endpoint = r.str(s.endpoint, [...path, "endpoint"], "");
    if (s.endpoint === undefined) r.fail([...path, "endpoint"], "is required (the engine's PUB endpoint, e.g. tcp://engine:5557)");
    else if (endpoint) {
      const why = checkZmqEndpoint(endpoint, dpRanks, bind);
      if (why !== null) r.fail([...path, "endpoint"], why);
    }
    let replayEndpoint: string | null = null;
    if (s.replay_endpoint !== undefined && s.replay_endpoint !== null) {
      replayEndpoint = r.str(s.replay_endpoint, [...path, "replay_endpoint"], "") || null;
      const why = replayEndpoint === null ? null : checkZmqEndpoint(replayEndpoint, dpRanks, false);
      if (why !== null) r.fail([...path, "replay_endpoint"], why);
    }
    const topic = s.topic === undefined || s.topic === null ? "" : typeof s.topic === "string" ? s.topic : (r.fail([...path, "topic"], `must be a string, got ${describeValue(s.topic)}`), "");
    const replayTimeoutMs = r.int(s.replay_timeout_ms, [...path, "replay_timeout_ms"], 10, 600_000, 2_000);
    // An engine step's batch is kilobytes (a 2,000-token prompt in 16-token blocks: ~10 KB); 1 MiB decodes in
    // about 4 ms here, 4 MiB in 15 to 30 ms, and 57 MB blocked the loop for 2 s.
    const limits = readBatchLimits(r, s, path, 1 << 20);
    const curve = readCurve(r, s.curve, [...path, "curve"], bind);
    if (curve?.role === "server" && replayEndpoint !== null) r.fail([...path, "replay_endpoint"], "cannot be used with CURVE and bind: true (the replay socket is the engine's, reached as a client): let the engine bind, or drop the replay");
    const groups = readGroups(r, s.groups, [...path, "groups"]);
    return { kind, endpoint, replayEndpoint, bind, topic, dpRanks, staleAfterMs, replayTimeoutMs, ...limits, curve, groups };
  }
  if (kind === "http") {
    only(["kind", "path", "interval_ms", "dp_ranks", "stale_after_ms", "max_batch_bytes", "max_batch_blocks", "max_batch_tokens", "event_ids"]);
    const p = r.str(s.path, [...path, "path"], "/kv_cache_events");
    if (!p.startsWith("/")) r.fail([...path, "path"], "must start with /");
    const intervalMs = r.int(s.interval_ms, [...path, "interval_ms"], 10, 600_000, 200);
    // JSON spells a token as an object (~50 bytes): a 128K-token prompt's stored event is about 6 MB.
    const eventIds = r.str(s.event_ids, [...path, "event_ids"], "contiguous");
    if (eventIds !== "contiguous" && eventIds !== "sparse") r.fail([...path, "event_ids"], `must be contiguous (the engine's own /kv_cache_events) or sparse (behind TensorRT-LLM's kv_event_fanout.py), got ${describeValue(s.event_ids)}`);
    return { kind, path: p, intervalMs, eventIds: eventIds === "sparse" ? "sparse" : "contiguous", dpRanks, staleAfterMs, ...readBatchLimits(r, s, path, 16 << 20) };
  }
  r.fail([...path, "kind"], `must be zmq (an engine's ZeroMQ stream) or http (TensorRT-LLM's /kv_cache_events), got ${describeValue(s.kind)}`);
  return null;
}

/** The group kinds `groups` takes. */
const GROUP_KINDS = ["full_attention", "sliding_window", "mamba"] as const;

/** Reads `kv_events.groups`: one entry per vLLM KV-cache group, in `group_idx` order. */
function readGroups(r: SettingReader, value: unknown, path: (string | number)[]): readonly KvGroupSpec[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || value.length > MAX_KV_GROUPS) {
    r.fail(path, `must be a list of at most ${MAX_KV_GROUPS} KV-cache groups ({kind: full_attention | sliding_window | mamba, sliding_window?}), in group_idx order`);
    return [];
  }
  return value.map((entry: unknown, i) => {
    const g = r.section(entry, [...path, i], ["kind", "sliding_window"]);
    const kind = r.str(g.kind, [...path, i, "kind"], "");
    if (!(GROUP_KINDS as readonly string[]).includes(kind)) r.fail([...path, i, "kind"], `must be one of ${GROUP_KINDS.join(", ")}, got ${describeValue(g.kind)}`);
    if (kind === "sliding_window") {
      if (g.sliding_window === undefined) r.fail([...path, i, "sliding_window"], "is required for a sliding_window group (its window in tokens)");
      return { kind, slidingWindow: r.int(g.sliding_window, [...path, i, "sliding_window"], 1, 2 ** 31, 1) };
    }
    if (g.sliding_window !== undefined) r.fail([...path, i, "sliding_window"], "is only for sliding_window groups");
    return { kind: (GROUP_KINDS as readonly string[]).includes(kind) ? (kind as KvGroupSpec["kind"]) : "full_attention" };
  });
}

/** JSON Schema of a CURVE public key. */
const Z85_KEY_SCHEMA = { type: "string", pattern: "^[0-9A-Za-z.\\-:+=^!/*?&<>()\\[\\]{}@%$#]{40}$", description: "A CURVE public key: 40 characters of Z85." };

/** JSON Schema of the per-batch limits (`bytes`: max_batch_bytes's default). */
const BATCH_LIMITS_SCHEMA = (bytes: number) => ({
  max_batch_bytes: { type: "integer", minimum: 1024, maximum: 1073741824, default: bytes, description: "A larger batch (or poll answer) is refused before it is decoded (counted oversized; the stream is then gapped for a while)." },
  max_batch_blocks: { type: "integer", minimum: 1, maximum: 16777216, default: 32768, description: "A batch naming more blocks (stored and removed) is refused before it is applied (counted oversized; the stream gapped)." },
  max_batch_tokens: { type: "integer", minimum: 1, maximum: 67108864, default: 1048576, description: "A batch carrying more token ids is refused before it is applied (counted oversized; the stream gapped)." },
});

/** JSON Schema of `kv_events`. */
export const kvEventsSchema = Object.freeze({
  description: "Where this upstream's engine publishes its KV-cache events (TensorRT-LLM or vLLM). Routing then matches prompts against the engine's own blocks while the stream is live.",
  oneOf: [
    {
      type: "object",
      additionalProperties: false,
      required: ["kind", "endpoint"],
      properties: {
        kind: { const: "zmq" },
        endpoint: { type: "string", description: "DP rank 0's PUB endpoint, tcp://HOST:PORT (rank r at PORT + r) or ipc://PATH." },
        replay_endpoint: { type: "string", description: "DP rank 0's replay (ROUTER) endpoint; without it a sequence gap cannot be filled." },
        bind: { type: "boolean", default: false, description: "Bind the endpoint instead of connecting (an engine that connects to its consumer)." },
        topic: { type: "string", default: "" },
        dp_ranks: { type: "integer", minimum: 1, maximum: 1024, default: 1 },
        stale_after_ms: { type: "integer", minimum: 100, default: 10000, description: "Silence while requests were routed here after which the picture is stale." },
        replay_timeout_ms: { type: "integer", minimum: 10, default: 2000 },
        curve: {
          description: "CURVE (ZeroMQ's authenticated encryption). Connect mode: the engine's public key (Z85) and files holding the gateway's own key pair. bind: true: a file holding the gateway's secret key, and the publishers' public keys it accepts (others are refused at the handshake and counted).",
          oneOf: [
            {
              type: "object",
              additionalProperties: false,
              required: ["server_public_key", "public_key_file", "secret_key_file"],
              properties: { server_public_key: Z85_KEY_SCHEMA, public_key_file: { type: "string", minLength: 1 }, secret_key_file: { type: "string", minLength: 1 } },
            },
            {
              type: "object",
              additionalProperties: false,
              required: ["secret_key_file"],
              properties: {
                secret_key_file: { type: "string", minLength: 1 },
                allowed_clients: { type: "array", items: Z85_KEY_SCHEMA, description: "Publishers' public keys (not secrets)." },
                allowed_clients_file: { type: "string", minLength: 1, description: "A file of publishers' public keys, one a line (other lines starting with # are comments)." },
              },
            },
          ],
        },
        groups: {
          type: "array",
          maxItems: 16,
          description: "A hybrid model's KV-cache groups in vLLM's group_idx order, for events that do not name their kind (vLLM leaves kv_cache_spec_kind empty): each group's blocks are kept apart and a prompt matches what the engine's lookup would reuse over all of them. Without it, a group is what its events say, else full attention (which can only count fewer tokens than the engine reuses).",
          items: {
            type: "object",
            additionalProperties: false,
            required: ["kind"],
            properties: {
              kind: { enum: ["full_attention", "sliding_window", "mamba"] },
              sliding_window: { type: "integer", minimum: 1, maximum: 2147483648, description: "The window in tokens (sliding_window groups)." },
            },
          },
        },
        ...BATCH_LIMITS_SCHEMA(1048576),
      },
    },
    {
      type: "object",
      additionalProperties: false,
      required: ["kind"],
      properties: {
        kind: { const: "http" },
        path: { type: "string", default: "/kv_cache_events" },
        interval_ms: { type: "integer", minimum: 10, default: 200 },
        event_ids: { enum: ["contiguous", "sparse"], default: "contiguous", description: "contiguous: a jump in a DP rank's event ids is a gap (the engine's buffer overflowed between polls). sparse: ids only increase, for an endpoint served by TensorRT-LLM's kv_event_fanout.py, which forwards stored and removed events only and keeps the engine's ids (an overflow of its buffer cannot be seen then)." },
        dp_ranks: { type: "integer", minimum: 1, maximum: 1024, default: 1 },
        stale_after_ms: { type: "integer", minimum: 100, default: 10000 },
        ...BATCH_LIMITS_SCHEMA(16777216),
      },
    },
  ],
});

/** A CURVE key as ZeroMQ writes it: 40 characters of Z85. */
const Z85_KEY = /^[0-9A-Za-z.\-:+=^!/*?&<>()[\]{}@%$#]{40}$/;

/** Reads `kv_events.curve`: the client's settings in connect mode, the server's with `bind: true`. */
function readCurve(r: SettingReader, value: unknown, path: (string | number)[], bind: boolean): CurveConfig | null {
  if (value === undefined || value === null) return null;
  const s = r.section(value, path, bind ? ["secret_key_file", "allowed_clients", "allowed_clients_file"] : ["server_public_key", "public_key_file", "secret_key_file"]);
  const key = (name: "public_key_file" | "secret_key_file") => {
    if (s[name] === undefined) r.fail([...path, name], "is required: a file holding a CURVE key (40 characters of Z85)");
    const text = r.file(s[name], [...path, name]) ?? "";
    if (text !== "" && !Z85_KEY.test(text)) r.fail([...path, name], `${describeValue(s[name])} does not hold a CURVE key (40 characters of Z85)`);
    return text;
  };
  if (bind) {
    const secretKey = key("secret_key_file");
    const allowed = readAllowedClients(r, s, path);
    return Z85_KEY.test(secretKey) && allowed !== null ? { role: "server", secretKey, allowedClients: allowed } : null;
  }
  const server = r.str(s.server_public_key, [...path, "server_public_key"], "");
  if (!Z85_KEY.test(server)) r.fail([...path, "server_public_key"], "must be the engine's CURVE public key: 40 characters of Z85");
  const publicKey = key("public_key_file");
  const secretKey = key("secret_key_file");
  return Z85_KEY.test(server) && Z85_KEY.test(publicKey) && Z85_KEY.test(secretKey) ? { role: "client", serverPublicKey: server, publicKey, secretKey } : null;
}

/** The publishers' public keys a CURVE server accepts (`allowed_clients` and the lines of `allowed_clients_file`); null when none is valid. */
function readAllowedClients(r: SettingReader, s: Record<string, unknown>, path: (string | number)[]): string[] | null {
  const keys: string[] = [];
  if (s.allowed_clients !== undefined) {
    if (!Array.isArray(s.allowed_clients)) r.fail([...path, "allowed_clients"], "must be a list of CURVE public keys (40 characters of Z85)");
    else s.allowed_clients.forEach((k: unknown, i) => (typeof k === "string" && Z85_KEY.test(k) ? keys.push(k) : r.fail([...path, "allowed_clients", i], `must be a CURVE public key (40 characters of Z85), got ${describeValue(k)}`)));
  }
  if (s.allowed_clients_file !== undefined) {
    const text = r.file(s.allowed_clients_file, [...path, "allowed_clients_file"]) ?? "";
    text.split("\n").forEach((line, i) => {
      // Z85 has "#" in its alphabet: a line of 40 Z85 characters is a key, any other line starting with "#" a comment.
      const k = line.trim();
      if (Z85_KEY.test(k)) keys.push(k);
      else if (k === "" || k.startsWith("#")) return;
      else r.fail([...path, "allowed_clients_file"], `line ${i + 1} of ${describeValue(s.allowed_clients_file)} is not a CURVE public key (40 characters of Z85)`);
    });
  }
  if (keys.length === 0) {
    r.fail(path, "with bind: true needs the publishers it accepts: allowed_clients (public keys) or allowed_clients_file");
    return null;
  }
  return keys;
}
