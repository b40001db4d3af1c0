// The gateway's configuration: a YAML file (`adp-router-gateway serve --config FILE`)
// and command-line flags over it, checked field by field the way esbuild checks
// its options: every problem is listed at once, each with the file and line it
// is on, and nothing starts until the whole configuration is valid.
//
// The file holds the gateway's own settings (snake_case) and TensorRT-LLM's
// `attention_dp_config:` block exactly as a user writes it in
// `extra_llm_api_options.yaml`, checked by the library's own parser.

import { readFileSync, statSync } from "node:fs";
import { LineCounter, parseDocument, isMap, isSeq, type Node } from "yaml";
import { DEFAULT_LOAD_WEIGHT, parseAttentionDpConfig, type AttentionDpConfig } from "adp-router";
import { AttentionDpConfigError, describeValue, excerpt } from "adp-router";
import { readPolicy } from "./policies.js";
import { readDisaggregation, readRole } from "./disaggregation-config.js";
import { ENGINE_TOKENS_PER_BLOCK, readTokenizerSettings } from "./tokenizer-settings.js";
import { readEngineLoad, readKvEvents, type EngineLoadConfig, type KvEventsConfig } from "./events-config.js";
import { readSyncSettings } from "./sync-config.js";
import type { UpstreamConfig, GatewayConfig, GatewayFlags, GatewayConfigObject, ConfigIssue, RankRoutingKind, ConnectionBalance } from "./config-types.js";

export type { UpstreamConfig, GatewayConfig, GatewayFlags, GatewayConfigObject, UpstreamObject, ConfigIssue } from "./config-types.js";

export { POLICY_CONFIGS, type PolicyName } from "./policies.js";

/** A configuration that cannot start the gateway; lists every problem. */
export class GatewayConfigError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_GATEWAY_CONFIG";
  readonly issues: readonly ConfigIssue[];
  constructor(issues: readonly ConfigIssue[]) {
    super(
      [`Invalid gateway configuration (${issues.length} problem${issues.length === 1 ? "" : "s"}):`, ...issues.map((i) => `  ${i.where ? `${i.where}: ` : ""}${i.field}: ${i.message}`)].join("\n"),
    );
    this.name = "GatewayConfigError";
    this.issues = issues;
  }
}

/** The keys each section accepts, for unknown-key errors. */
const SECTIONS: Record<string, readonly string[]> = {
  "": ["listen", "upstreams", "policy", "attention_dp_config", "limits", "timeouts", "health", "auth", "logging", "routing", "tokenizer", "sync", "disaggregation"],
  listen: ["host", "port", "connection_balance"],
  "upstreams[]": ["url", "name", "api_key", "api_key_env", "drain", "kv_events", "load", "dp_ranks", "rank_routing", "attention_dp_config", "role", "bootstrap_port"],
  limits: ["max_body_bytes", "max_in_flight_per_upstream", "queue_size", "queue_timeout_ms", "max_connections", "max_requests_per_connection", "max_receiving_bytes", "max_prompt_chars", "max_prompt_tokens"],
  timeouts: ["headers_ms", "request_ms", "keep_alive_ms", "connect_ms", "first_byte_ms", "idle_ms", "max_stream_ms"],
  health: ["path", "interval_ms", "timeout_ms", "unhealthy_threshold", "healthy_threshold", "on_start", "consecutive_5xx", "consecutive_gateway_failures", "base_ejection_ms", "max_ejection_ms", "max_ejected_percent"],
  auth: ["api_keys", "api_keys_env", "admin_api_key", "admin_api_key_env", "protect_metrics", "protect_health", "internal_request_auth_key_file", "internal_request_auth_key_env"],
  logging: ["level"],
  routing: ["tokens_per_block", "index_bytes", "lora_adapters", "load_weight"],
};

/**
 * Tokens per block of the gateway's prefix index by default with the byte
 * tokenizer. Its tokens are UTF-8 bytes, about four to an engine's token, so 128
 * of them stand for an engine's 32-token block (and a prompt walks a quarter of
 * the blocks it would at 32: bench:serve).
 */
const BYTE_BLOCK = 128;

/** A prompt's characters at most by default (about 256k engine tokens of English). */
const MAX_PROMPT_CHARS = 1 << 20;
/**
 * A prompt's tokens at most by default: an engine's tokens (as many as the
 * character bound gives, so the two agree), or with the byte tokenizer its
 * bytes (the body's default bound: UTF-8 takes up to 4 bytes a character).
 */
const MAX_PROMPT_TOKENS = { huggingface: 1 << 20, bytes: 4 << 20 } as const;

/** Problems reported at most; the rest are counted. */
const MAX_ISSUES = 100;

/** Log levels pino knows. */
export const LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
/**
 * How `--workers`' processes share the listen socket's connections: `kernel`,
 * each worker accepts from the one socket as it is free (no hop through the
 * primary: Envoy's default, and node:cluster's SCHED_NONE); `round_robin`,
 * the primary accepts each and hands it to the next free worker in turn
 * (node:cluster's default, SCHED_RR).
 */
export const CONNECTION_BALANCES: readonly ConnectionBalance[] = ["kernel", "round_robin"];

/** The largest file a setting names that is read (a key, a creds file, a certificate: kilobytes). */
const MAX_SETTING_FILE_BYTES = 1 << 20;

/** Logs each warning of a configuration (at start, on a reload, for an admin addition), with where it is. */
export function logConfigWarnings(log: { warn(fields: object, message: string): void }, warnings: readonly ConfigIssue[]): void {
  for (const w of warnings) log.warn({ field: w.field, ...(w.where === null ? {} : { where: w.where }) }, `configuration: ${w.field}: ${w.message}`);
}

/** A setting's path as written in messages: `upstreams[1].url`. */
export const fieldName = (path: readonly (string | number)[]): string => path.reduce<string>((s, p) => (typeof p === "number" ? `${s}[${p}]` : s ? `${s}.${p}` : p), "");

/** Where each path of the YAML document is (`FILE:LINE`). */
type Locator = (path: readonly (string | number)[]) => string | null;

/** Reads one configuration: the file's text (or none) and the flags. */
export class Reader {
  readonly issues: ConfigIssue[] = [];
  /** What is accepted but worth a warning at start. */
  readonly warnings: ConfigIssue[] = [];
  /** Problems past MAX_ISSUES, counted only. */
  omitted = 0;
  /** `settingFiles`: the texts of setting files already read, by name (used in place of the file; those read here are added). */
  constructor(
    readonly where: Locator,
    readonly settingFiles: Map<string, string> | null = null,
  ) {}

  /** Records a problem at `path`. */
  fail(path: readonly (string | number)[], message: string, where?: string | null): void {
    // A file of thousands of bad keys is reported by its first hundred (finding each line costs a scan).
    if (this.issues.length >= MAX_ISSUES) {
      this.omitted++;
      return;
    }
    where ??= this.where(path);
    this.issues.push({ field: excerpt(fieldName(path) || "(file)", 120), message, where });
  }

  /** Whether a problem is already recorded at `path`. */
  failedAt(path: readonly (string | number)[]): boolean {
    const field = excerpt(fieldName(path), 120);
    return this.issues.some((i) => i.field === field);
  }

  /** Records a warning at `path` (the configuration is still valid). */
  warn(path: readonly (string | number)[], message: string, where?: string | null): void {
    this.warnings.push({ field: excerpt(fieldName(path), 120), message, where: where ?? this.where(path) });
  }

  /** `v` as a mapping of known keys (else records why and returns {}). */
  section(v: unknown, path: (string | number)[], keys: readonly string[]): Record<string, unknown> {
    if (v === undefined || v === null) return {};
    if (typeof v !== "object" || Array.isArray(v)) {
      this.fail(path, `must be a mapping, got ${describeValue(v)}`);
      return {};
    }
    const out = v as Record<string, unknown>;
    for (const k of Object.keys(out)) if (!keys.includes(k)) this.fail([...path, k], `is not a setting here (expected ${keys.join(", ")})`);
    return out;
  }

  /** An integer in [min, max], or `fallback` when absent. */
  int(v: unknown, path: (string | number)[], min: number, max: number, fallback: number): number {
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
      this.fail(path, `must be an integer in [${min}, ${max}], got ${describeValue(v)}`);
      return fallback;
    }
    return v;
  }

  /** A finite number in [min, max], or `fallback` when absent. */
  num(v: unknown, path: (string | number)[], min: number, max: number, fallback: number): number {
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) {
      this.fail(path, `must be a number in [${min}, ${max}], got ${describeValue(v)}`);
      return fallback;
    }
    return v;
  }

  /** A boolean, or `fallback` when absent. */
  bool(v: unknown, path: (string | number)[], fallback: boolean): boolean {
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "boolean") {
      this.fail(path, `must be true or false, got ${describeValue(v)}`);
      return fallback;
    }
    return v;
  }

  /** One of `choices`, or `fallback` when absent (or not one of them, recorded). */
  oneOf<T extends string>(v: unknown, path: (string | number)[], choices: readonly T[], fallback: T): T {
    const text = this.str(v, path, fallback);
    if ((choices as readonly string[]).includes(text)) return text as T;
    this.fail(path, `must be one of ${choices.join(", ")}, got ${describeValue(text)}`);
    return fallback;
  }

  /** A non-empty string, or `fallback` when absent. */
  str(v: unknown, path: (string | number)[], fallback: string): string {
    if (v === undefined || v === null) return fallback;
    if (typeof v !== "string" || v.length === 0) {
      this.fail(path, `must be a non-empty string, got ${describeValue(v)}`);
      return fallback;
    }
    return v;
  }

  /** A secret (an API key): a non-empty string, its value never in a message (only its type). */
  secret(v: unknown, path: (string | number)[]): string | null {
    if (v === undefined || v === null) return null;
    if (typeof v !== "string" || v.trim().length === 0) {
      this.fail(path, `must be a non-empty string (a key; got ${v === "" || typeof v === "string" ? "an empty string" : `a ${Array.isArray(v) ? "list" : typeof v}`}; a number-like key must be quoted)`);
      return null;
    }
    return v;
  }

  /**
   * The trimmed text of the file a setting names (a key, a creds file, a
   * certificate), or null when absent or unusable (the reason recorded, never
   * the file's content).
   */
  file(v: unknown, path: (string | number)[]): string | null {
    if (v === undefined || v === null) return null;
    const name = this.str(v, path, "");
    if (name === "") return null;
    const given = this.settingFiles?.get(name);
    if (given !== undefined) return given;
    try {
      if (statSync(name).size > MAX_SETTING_FILE_BYTES) {
        this.fail(path, `${describeValue(name)} is over ${MAX_SETTING_FILE_BYTES} bytes (not a key or certificate file)`);
        return null;
      }
      const text = readFileSync(name, "utf8").trim();
      if (text === "") this.fail(path, `${describeValue(name)} is empty`);
      else this.settingFiles?.set(name, text);
      return text === "" ? null : text;
    } catch (error) {
      this.fail(path, `${describeValue(name)} cannot be read (${(error as NodeJS.ErrnoException).code ?? "error"})`);
      return null;
    }
  }

  /** The value of environment variable `name`, read from `env`. */
  env(name: unknown, path: (string | number)[], env: Record<string, string | undefined>): string | null {
    if (name === undefined || name === null) return null;
    if (typeof name !== "string" || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
      this.fail(path, `must name an environment variable, got ${describeValue(name)}`);
      return null;
    }
    const value = env[name];
    if (value === undefined || value === "") {
      this.fail(path, `names ${name}, which is not set`);
      return null;
    }
    return value;
  }
}

/**
 * An upstream URL checked: `http:` or `https:`, a host, no credentials, query
 * or fragment; the path (if any) is kept as the base the API paths join.
 * Returns the normalized URL (lower-case host, no default port, no trailing
 * slash, no trailing `/v1`: the gateway adds `/v1/...` itself, so the OpenAI
 * `base_url` habit would send every request to `/v1/v1/...`; `warning` then
 * says so) or a reason.
 */
export function checkUpstreamUrl(text: string): { url: string; warning?: string } | { why: string } {
  // "localhost:8001" parses as a URL of scheme "localhost:": ask for the scheme first.
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:\/\//.test(text)) return { why: `has no scheme (write it as http://${excerpt(text, 60)})` };
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { why: `is not a valid URL: ${excerpt(text, 60)}` };
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return { why: `must be an http:// or https:// URL, got ${url.protocol}//` };
  if (!url.hostname) return { why: "has no host" };
  if (url.username || url.password) return { why: "must not carry credentials (set api_key instead)" };
  if (url.search || url.hash) return { why: "must not carry a query or fragment" };
  // Unreserved characters written as escapes are those characters (RFC 3986 §6.2.2.2): `/%76%31` is `/v1`.
  const path = url.pathname.replace(/%(4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|3[0-9]|2D|2E|5F|7E)/gi, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))).replace(/\/+$/, "");
  const base = `${url.protocol}//${url.host}`;
  if (/\/v1$/i.test(path)) {
    const kept = `${base}${path.slice(0, -3)}`;
    return { url: kept, warning: `ends in ${path.slice(-3)}, which the gateway adds itself (it sends ${path.slice(-3)}/chat/completions under the base URL): taken as ${kept}` };
  }
  return { url: `${base}${path}` };
}

/** The name an upstream gets when none is configured: its URL's host and path. */
export function defaultUpstreamName(url: string): string {
  const u = new URL(url);
  return excerpt(`${u.host}${u.pathname === "/" ? "" : u.pathname}`, 64);
}

/** Calls `report` for each key set twice in one mapping of `node` (with its source offset), in one pass. */
function duplicateKeys(node: unknown, report: (key: string, offset: number) => void): void {
  const stack = [node];
  while (stack.length > 0) {
    const n = stack.pop();
    if (isMap(n)) {
      const seen = new Set<unknown>();
      for (const pair of n.items) {
        const key = pair.key as { value?: unknown; range?: [number, number, number] } | null;
        const value = key !== null && typeof key === "object" && "value" in key ? key.value : key;
        if (seen.has(value)) report(String(value), key?.range?.[0] ?? 0);
        seen.add(value);
        stack.push(pair.value);
      }
    } else if (isSeq(n)) stack.push(...n.items);
  }
}

/** The line of each YAML path, from the document's source ranges. */
function locator(file: string, doc: ReturnType<typeof parseDocument>, lines: LineCounter): Locator {
  return (path) => {
    let node: unknown = doc.contents;
    let last: Node | null = (node as Node | null) ?? null;
    for (const key of path) {
      if (isMap(node)) {
        const pair = node.items.find((p) => (p.key as { value?: unknown } | null)?.value === key);
        if (!pair) break;
        last = (pair.key as Node) ?? last;
        node = pair.value;
        if (node && (node as Node).range) last = (pair.key as Node) ?? (node as Node);
      } else if (isSeq(node) && typeof key === "number") {
        node = node.items[key];
        if (!node) break;
        last = node as Node;
      } else break;
    }
    const offset = last?.range?.[0];
    return offset === undefined ? file : `${file}:${lines.linePos(offset).line}`;
  };
}

/** One upstream entry of the file (a URL, or a mapping), checked; null when it has a problem (recorded in `r`). */
function readUpstream(r: Reader, entry: unknown, path: (string | number)[], env: Record<string, string | undefined>): UpstreamConfig | null {
  const u = typeof entry === "string" ? { url: entry } : r.section(entry, path, SECTIONS["upstreams[]"]!);
  const text = r.str(u.url, [...path, "url"], "");
  if (!text) {
    if (u.url === undefined) r.fail([...path, "url"], "is required");
    return null;
  }
  const checked = checkUpstreamUrl(text);
  if ("why" in checked) {
    r.fail([...path, "url"], checked.why);
    return null;
  }
  if (checked.warning !== undefined) r.warn([...path, "url"], checked.warning);
  const name = r.str(u.name, [...path, "name"], defaultUpstreamName(checked.url));
  // It goes out as a header value and a metric label: visible ASCII only (a header with another character throws in Node).
  if (!/^[\x21-\x7e]{1,64}$/.test(name)) r.fail([...path, "name"], `must be 1 to 64 visible ASCII characters (no spaces): it is sent as the x-adp-upstream-name header and labels metrics, got ${describeValue(excerpt(name, 80))}`);
  if (u.api_key !== undefined && u.api_key_env !== undefined) r.fail([...path, "api_key"], "set api_key or api_key_env, not both");
  const apiKey = u.api_key !== undefined ? r.secret(u.api_key, [...path, "api_key"]) : r.env(u.api_key_env, [...path, "api_key_env"], env);
  const kvEvents = readKvEvents(r, u.kv_events, [...path, "kv_events"]);
  const load = readEngineLoad(r, u.load, [...path, "load"]);
  const { dpRanks, rankRouting } = readRankRouting(r, u, path, kvEvents, load);
  const attentionDp = readEngineAttentionDp(r, u.attention_dp_config, [...path, "attention_dp_config"]);
  const { role, bootstrapPort } = readRole(r, u, path);
  return { url: checked.url, name: excerpt(name, 64), apiKey, drain: r.bool(u.drain, [...path, "drain"], false), kvEvents, load, dpRanks, rankRouting, attentionDp, role, bootstrapPort };
}

/** An upstream's engine's own `attention_dp_config` (as in its extra_llm_api_options.yaml: TensorRT-LLM's defaults for the rest), or null. */
function readEngineAttentionDp(r: Reader, block: unknown, path: (string | number)[]): AttentionDpConfig | null {
  if (block === undefined || block === null) return null;
  if (typeof block !== "object" || Array.isArray(block)) {
    r.fail(path, `must be a mapping, got ${describeValue(block)}`);
    return null;
  }
  try {
    return parseAttentionDpConfig(block);
  } catch (error) {
    if (!(error instanceof AttentionDpConfigError)) throw error;
    for (const issue of error.issues) r.fail([...path, issue.field], `${issue.rule}, got ${describeValue(issue.received)}`);
    return null;
  }
}

/**
 * An upstream's DP ranks (`dp_ranks`, else its events') and how a request is
 * pinned to one (`rank_routing`). By default `adp` where the engine is known
 * to take a rank (`load: { kind: vllm | sglang }`: both honour
 * `X-Data-Parallel-Rank`) and has several, else `none`: the gateway sees each
 * rank's cache (its events) and the load it sent there, which the engine's own
 * balancer (vLLM's least-loaded, SGLang's round robin) does not weigh.
 */
function readRankRouting(r: Reader, u: Record<string, unknown>, path: (string | number)[], kvEvents: KvEventsConfig | null, load: EngineLoadConfig | null): { dpRanks: number; rankRouting: RankRoutingKind } {
  const fromEvents = kvEvents?.dpRanks ?? null;
  const dpRanks = u.dp_ranks === undefined || u.dp_ranks === null ? (fromEvents ?? 1) : r.int(u.dp_ranks, [...path, "dp_ranks"], 1, 1024, 1);
  if (fromEvents !== null && dpRanks !== fromEvents) r.fail([...path, "dp_ranks"], `is ${dpRanks}, but kv_events.dp_ranks is ${fromEvents}${kvEvents !== null && (u.kv_events as Record<string, unknown> | undefined)?.dp_ranks === undefined ? " (its default)" : ""}: the engine has one number of DP ranks (set both, or kv_events.dp_ranks alone)`);
  const takesRank = (load?.kind === "vllm" || load?.kind === "sglang") && kvEvents?.kind !== "http";
  const fallback: RankRoutingKind = dpRanks > 1 && takesRank ? "adp" : "none";
  const kind = u.rank_routing === undefined || u.rank_routing === null ? fallback : r.str(u.rank_routing, [...path, "rank_routing"], fallback);
  if (kind !== "adp" && kind !== "instance" && kind !== "none") {
    r.fail([...path, "rank_routing"], `must be adp (this library's router over the engine's ranks), instance (TensorRT-LLM's centralized router's rank score) or none (the engine's own balancer picks), got ${describeValue(u.rank_routing)}`);
    return { dpRanks, rankRouting: "none" };
  }
  if (kind !== "none" && (load?.kind === "trtllm" || kvEvents?.kind === "http")) r.fail([...path, "rank_routing"], "cannot pin a rank of trtllm-serve (its load kind trtllm, or its /kv_cache_events polled): its OpenAI server takes no rank from a request (use none: its own attention-DP router picks)");
  if (kind !== "none" && u.rank_routing !== undefined && dpRanks < 2) r.warn([...path, "rank_routing"], `has no effect on an engine of one DP rank (set dp_ranks, or kv_events.dp_ranks)`);
  if (u.attention_dp_config !== undefined && u.attention_dp_config !== null && (kind !== "adp" || dpRanks < 2)) r.warn([...path, "attention_dp_config"], "is run only by rank_routing: adp over several DP ranks: here it has no effect");
  return { dpRanks, rankRouting: dpRanks > 1 ? kind : "none" };
}

/**
 * One upstream entry checked as the file's entries are (what the admin
 * endpoint adds): its configuration, or a {@link GatewayConfigError} listing
 * its problems.
 */
export function checkUpstreamEntry(entry: unknown, env: Record<string, string | undefined> = process.env): UpstreamConfig & { readonly warnings: readonly ConfigIssue[] } {
  const r = new Reader(() => null);
  const u = readUpstream(r, entry, ["upstream"], env);
  if (r.issues.length > 0 || u === null) throw new GatewayConfigError(r.issues.length > 0 ? r.issues : [{ field: "upstream", message: "is not a valid upstream", where: null }]);
  return { ...u, warnings: r.warnings };
}

/**
 * Problems of a fleet as a whole: an upstream whose URL (after normalization)
 * or name is another's. `field` names an upstream by its place in `upstreams`.
 */
export function fleetProblems(upstreams: readonly Pick<UpstreamConfig, "url" | "name">[], field: (i: number) => (string | number)[] = (i) => ["upstreams", i]): { path: (string | number)[]; message: string }[] {
  const problems: { path: (string | number)[]; message: string }[] = [];
  const urls = new Map<string, number>();
  const names = new Map<string, number>();
  upstreams.forEach((u, i) => {
    const sameUrl = urls.get(u.url);
    const sameName = names.get(u.name);
    if (sameUrl !== undefined) problems.push({ path: [...field(i), "url"], message: `is the URL of ${fieldName(field(sameUrl))} again (${excerpt(u.url, 100)}, after normalization): each engine is listed once` });
    else if (sameName !== undefined) problems.push({ path: [...field(i), "name"], message: `${JSON.stringify(u.name)} is the name of ${fieldName(field(sameName))} too: names label metrics and logs, so each is unique (set name: on one)` });
    if (sameUrl === undefined) urls.set(u.url, i);
    if (sameName === undefined) names.set(u.name, i);
  });
  return problems;
}

/**
 * Worker `slot`'s share (1-based) of `config`'s limits, `n` workers in all, as
 * a checked configuration: the requests in flight per upstream and the
 * client connections are the gateway's (an operator sizes an engine's
 * concurrency with them, whatever the cores), and the n shares add up to each
 * (the first workers take one more where n does not divide it; at least 1
 * connection each, so each stays within its setting's bounds). The queue is
 * the gateway's too, kept whole here: the workers ask their primary for its
 * slots (workers/queue-lending.ts). The in-flight cap is split exactly into `inFlightShare` (0 for
 * some where it is below n: workers lend each other units of it) and kept
 * whole too, for the router; the connections into `connectionShare` and kept
 * whole too, the bound /metrics shows. The other limits bound one request,
 * one connection or one process's memory: each worker's own.
 */
export function workerShare(config: GatewayConfig, n: number, slot: number): GatewayConfig {
  if (n <= 1) return config;
  const next: GatewayConfig = { ...config, limits: limitsShare(config.limits, n, slot) };
  CHECKED.add(next);
  return next;
}

/** Worker `slot`'s share of `limits`, `n` workers in all (see workerShare); slot 1's is the largest. */
export function limitsShare(limits: GatewayConfig["limits"], n: number, slot = 1): GatewayConfig["limits"] {
  const exact = (total: number) => Math.floor(total / n) + (slot <= total % n ? 1 : 0);
  const share = { ...limits };
  share.connectionShare = Math.max(1, exact(limits.maxConnections));
  // The in-flight cap stays whole beside the share: the router weighs an upstream's load from every worker
  // (theirs come in their messages, sibling-log.ts) against the gateway's cap, as one process would. The shares
  // add up to the cap exactly, 0 for some with fewer units than workers: a worker borrows what it lacks
  // (workers/in-flight-lending.ts).
  share.inFlightShare = exact(limits.maxInFlightPerUpstream);
  return share;
}

/** `config` with its upstreams replaced by `upstreams` (at least one), as a checked configuration (what reload takes). */
export function withUpstreams(config: GatewayConfig, upstreams: readonly UpstreamConfig[]): GatewayConfig {
  if (upstreams.length === 0) throw new GatewayConfigError([{ field: "upstreams", message: "at least one upstream is required", where: null }]);
  const problems = fleetProblems(upstreams);
  if (problems.length > 0) throw new GatewayConfigError(problems.map((p) => ({ field: `upstreams[${p.path[1]}].${p.path[2]}`, message: p.message, where: null })));
  const next: GatewayConfig = { ...config, upstreams: [...upstreams], warnings: [] }; // the start's warnings were said at the start
  CHECKED.add(next);
  return next;
}

/** Keys shorter than this are accepted, with a warning in the log at start. */
export const SHORT_KEY = 16;

/** Configurations {@link loadGatewayConfig} checked (what `createGateway` takes). */
const CHECKED = new WeakSet<object>();

/** Whether `v` is a configuration {@link loadGatewayConfig} returned. */
export function isGatewayConfig(v: unknown): v is GatewayConfig {
  return typeof v === "object" && v !== null && CHECKED.has(v);
}

/** Options of {@link loadGatewayConfig}. */
export interface LoadOptions {
  /** The YAML text and its file name (for messages); none: flags only. */
  readonly file?: { readonly name: string; readonly text: string };
  /**
   * The settings as a plain object shaped like the YAML file (snake_case keys,
   * `upstreams: ["http://…"]` or `[{ url, name, api_key }]`), checked by the
   * same rules; in place of `file`.
   */
  readonly object?: GatewayConfigObject;
  readonly flags?: GatewayFlags;
  /** Where `*_env` settings are read (process.env by default). */
  readonly env?: Record<string, string | undefined>;
  /**
   * The texts of the setting files (`*_file`: keys, key lists) by the name
   * the configuration gives: a name found here is not read again, and one read
   * is added. `serve --workers N`'s primary collects them, and its workers
   * load the same texts, whatever the files hold since.
   */
  readonly settingFiles?: Map<string, string>;
}

/**
 * Checks a configuration (a YAML file, flags over it) and returns it with
 * defaults filled. Throws one {@link GatewayConfigError} listing every problem.
 */
export function loadGatewayConfig(options: LoadOptions = {}): GatewayConfig {
  const env = options.env ?? process.env;
  const flags = options.flags ?? {};
  let raw: Record<string, unknown> = {};
  let where: Locator = () => null;
  const early: ConfigIssue[] = [];
  if (options.file) {
    const lines = new LineCounter();
    // yaml's own duplicate-key check compares every pair of keys (quadratic in a
    // file of many keys): ours takes one set per mapping.
    const doc = parseDocument(options.file.text, { lineCounter: lines, uniqueKeys: false, prettyErrors: false });
    const seen = new Set<string>();
    for (const e of doc.errors) {
      // Without prettyErrors the error carries its offset, not its line: the line counter turns one into the other.
      const where = `${options.file.name}:${lines.linePos(e.pos[0]).line}`;
      const message = excerpt(e.message.split("\n")[0] ?? "invalid YAML", 200);
      if (seen.has(where + message)) continue; // one mistake can raise the same error several times
      seen.add(where + message);
      early.push({ field: "(file)", message, where });
      if (early.length >= MAX_ISSUES) break;
    }
    if (early.length === 0) duplicateKeys(doc.contents, (key, offset) => {
      if (early.length < MAX_ISSUES) early.push({ field: excerpt(key, 120), message: "is set twice in one mapping", where: `${options.file!.name}:${lines.linePos(offset).line}` });
    });
    // A file that does not parse stops here; a key set twice is listed with whatever else is wrong (its last value read).
    if (early.length > 0 && doc.errors.length > 0) throw new GatewayConfigError(early);
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (error) {
      throw new GatewayConfigError([{ field: "(file)", message: excerpt((error as Error).message, 200), where: options.file.name }]);
    }
    if (value !== null && value !== undefined) {
      if (typeof value !== "object" || Array.isArray(value)) throw new GatewayConfigError([{ field: "(file)", message: "must be a mapping of settings", where: `${options.file.name}:1` }]);
      raw = value as Record<string, unknown>;
    }
    where = locator(options.file.name, doc, lines);
  } else if (options.object !== undefined) {
    const value: unknown = options.object;
    if (typeof value !== "object" || value === null || Array.isArray(value)) throw new GatewayConfigError([{ field: "(config)", message: `must be an object of settings, got ${describeValue(value)}`, where: null }]);
    raw = value as Record<string, unknown>;
  }
  const r = new Reader(where, options.settingFiles ?? null);
  r.issues.push(...early);
  const top = r.section(raw, [], SECTIONS[""]!);

  const listen = r.section(top.listen, ["listen"], SECTIONS.listen!);
  let host = r.str(listen.host, ["listen", "host"], "127.0.0.1");
  if (flags.host !== undefined) {
    if (flags.host.trim() === "") r.fail(["host"], "must be an address or host name (an empty one would listen on every interface: write 0.0.0.0 or :: for that)", "--host");
    else host = flags.host;
  }
  if (host.trim() === "") r.fail(["listen", "host"], "must be an address or host name");
  if (host.length > 255) r.fail(["listen", "host"], `must be at most 255 characters, got ${host.length}`);
  let port = r.int(listen.port, ["listen", "port"], 0, 65535, 8000);
  const connectionBalance = r.oneOf(listen.connection_balance, ["listen", "connection_balance"], CONNECTION_BALANCES, "kernel");
  if (flags.port !== undefined) {
    if (!Number.isInteger(flags.port) || flags.port < 0 || flags.port > 65535) r.fail(["port"], `must be an integer in [0, 65535], got ${describeValue(flags.port)}`, "--port");
    else port = flags.port;
  }

  const upstreams: UpstreamConfig[] = [];
  const flagged = [...(flags.upstreams ?? []).map((t) => [t, null] as const), ...(flags.prefill ?? []).map((t) => [t, "prefill"] as const), ...(flags.decode ?? []).map((t) => [t, "decode"] as const)];
  if (flagged.length > 0) {
    flagged.forEach(([text, role], i) => {
      const flag = role === null ? "--upstream" : `--${role}`;
      const checked = checkUpstreamUrl(text);
      if ("why" in checked) r.fail(["upstream", i], checked.why, flag);
      else {
        if (checked.warning !== undefined) r.warn(["upstream", i], checked.warning, flag);
        upstreams.push({ url: checked.url, name: defaultUpstreamName(checked.url), apiKey: null, drain: false, kvEvents: null, load: null, dpRanks: 1, rankRouting: "none", attentionDp: null, role, bootstrapPort: null });
      }
    });
  } else if (top.upstreams !== undefined) {
    if (!Array.isArray(top.upstreams)) r.fail(["upstreams"], `must be a list of upstreams, got ${describeValue(top.upstreams)}`);
    else {
      top.upstreams.forEach((entry: unknown, i) => {
        const u = readUpstream(r, entry, ["upstreams", i], env);
        if (u !== null) upstreams.push(u);
      });
    }
  }
  if (upstreams.length === 0 && r.issues.length === 0) {
    const pooled = flags.disaggregation !== undefined || (typeof top.disaggregation === "object" && top.disaggregation !== null);
    r.fail(["upstreams"], pooled ? "at least one upstream is required (upstreams: in the file with role: prefill or decode, or --prefill URL and --decode URL)" : "at least one upstream is required (upstreams: in the file, or --upstream URL)", options.file ? options.file.name : pooled ? "--prefill" : "--upstream");
  }
  if ((flags.upstreams?.length ?? 0) > 0 && (flags.prefill?.length ?? 0) + (flags.decode?.length ?? 0) > 0) r.fail(["upstream"], "cannot be mixed with --prefill and --decode: give each server its pool", "--upstream");
  const fromFlags = flagged.length > 0;
  for (const p of fleetProblems(upstreams, (i) => (fromFlags ? ["upstream", i] : ["upstreams", i]))) r.fail(fromFlags ? p.path.slice(0, 2) : p.path, p.message, fromFlags ? "--upstream" : undefined);

  const policyName = flags.policy ?? (top.policy === undefined ? undefined : r.str(top.policy, ["policy"], "kv_cache_aware"));
  // A --policy flag picks the router; the file's block tunes it.
  const { attentionDp, centralized } = readPolicy(r, policyName, top.attention_dp_config, [], "kv_cache_aware", flags.policy !== undefined, flags.policy !== undefined ? "--policy" : undefined);

  // --disaggregation sets the protocol over the file's section (or makes one); roles from flags are --prefill and --decode.
  const section = flags.disaggregation === undefined ? top.disaggregation : { ...(typeof top.disaggregation === "object" && top.disaggregation !== null ? top.disaggregation : {}), protocol: flags.disaggregation };
  const disaggregation = readDisaggregation(r, section, upstreams, fromFlags, policyName);

  const limits = r.section(top.limits, ["limits"], SECTIONS.limits!);
  const timeouts = r.section(top.timeouts, ["timeouts"], SECTIONS.timeouts!);
  const health = r.section(top.health, ["health"], SECTIONS.health!);
  const auth = r.section(top.auth, ["auth"], SECTIONS.auth!);
  const logging = r.section(top.logging, ["logging"], SECTIONS.logging!);
  const routing = r.section(top.routing, ["routing"], SECTIONS.routing!);
  const tokenizer = readTokenizerSettings(r, top.tokenizer, flags.tokenizer);
  const sync = readSyncSettings(r, top.sync, { ...(flags.sync === undefined ? {} : { sync: flags.sync }), ...(flags.replicaId === undefined ? {} : { replicaId: flags.replicaId }) }, env);

  // Keys are trimmed (a client's bearer token is); any non-empty key is taken (short ones are warned about at start).
  const goodKey = (k: unknown): k is string => typeof k === "string" && k.trim().length > 0;
  const apiKeys: string[] = [];
  if (auth.api_keys !== undefined && auth.api_keys !== null) {
    if (!Array.isArray(auth.api_keys) || !auth.api_keys.every(goodKey)) r.fail(["auth", "api_keys"], "must be a list of non-empty keys");
    else apiKeys.push(...(auth.api_keys as string[]).map((k) => k.trim()));
  }
  const fromEnv = r.env(auth.api_keys_env, ["auth", "api_keys_env"], env);
  if (fromEnv !== null) {
    const keys = fromEnv.split(",").map((k) => k.trim()).filter((k) => k.length > 0);
    if (keys.length === 0) r.fail(["auth", "api_keys_env"], "names a variable that holds no key (comma-separated keys)");
    else apiKeys.push(...keys);
  }

  // The admin key, inline or (better: a key in a file ends up in repositories) from the environment.
  let adminApiKey: string | null = null;
  if (auth.admin_api_key !== undefined && auth.admin_api_key !== null && auth.admin_api_key_env !== undefined && auth.admin_api_key_env !== null) r.fail(["auth", "admin_api_key"], "set admin_api_key or admin_api_key_env, not both");
  else if (auth.admin_api_key !== undefined && auth.admin_api_key !== null) {
    adminApiKey = r.secret(auth.admin_api_key, ["auth", "admin_api_key"])?.trim() ?? null;
  } else {
    const fromAdminEnv = r.env(auth.admin_api_key_env, ["auth", "admin_api_key_env"], env);
    if (fromAdminEnv !== null) {
      if (fromAdminEnv.trim() === "") r.fail(["auth", "admin_api_key_env"], "names a variable that holds only spaces");
      else adminApiKey = fromAdminEnv.trim();
    }
  }

  // TensorRT-LLM's internal_request_auth_key (the key its edge signs sub-agent hints with): from a file or the environment only.
  let internalRequestAuthKey: string | null = null;
  const keyFile = auth.internal_request_auth_key_file;
  const keyEnv = auth.internal_request_auth_key_env;
  if (keyFile !== undefined && keyFile !== null && keyEnv !== undefined && keyEnv !== null) r.fail(["auth", "internal_request_auth_key_file"], "set internal_request_auth_key_file or internal_request_auth_key_env, not both");
  else if (keyFile !== undefined && keyFile !== null) internalRequestAuthKey = r.file(keyFile, ["auth", "internal_request_auth_key_file"]);
  else {
    const fromKeyEnv = r.env(keyEnv, ["auth", "internal_request_auth_key_env"], env);
    if (fromKeyEnv !== null) {
      if (fromKeyEnv.trim() === "") r.fail(["auth", "internal_request_auth_key_env"], "names a variable that holds only spaces");
      else internalRequestAuthKey = fromKeyEnv;
    }
  }
  if (internalRequestAuthKey === "") {
    r.fail(["auth", "internal_request_auth_key_file"], "names an empty file");
    internalRequestAuthKey = null;
  }

  const loraAdapters = new Map<string, number>();
  if (routing.lora_adapters !== undefined && routing.lora_adapters !== null) {
    const adapters = routing.lora_adapters;
    if (typeof adapters !== "object" || Array.isArray(adapters)) r.fail(["routing", "lora_adapters"], `must map model names to LoRA task ids, got ${describeValue(adapters)}`);
    else {
      for (const [model, id] of Object.entries(adapters as Record<string, unknown>)) {
        if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 0) r.fail(["routing", "lora_adapters", model], `must be a LoRA task id (a non-negative integer), got ${describeValue(id)}`);
        else loraAdapters.set(model, id);
      }
    }
  }

  const levelText = flags.logLevel ?? r.str(logging.level, ["logging", "level"], "info");
  if (!(LEVELS as readonly string[]).includes(levelText)) r.fail(["logging", "level"], `must be one of ${LEVELS.join(", ")}, got ${describeValue(levelText)}`, flags.logLevel !== undefined ? "--log-level" : where(["logging", "level"]));
  const path = r.str(health.path, ["health", "path"], "/health");
  if (!path.startsWith("/")) r.fail(["health", "path"], "must start with /");
  const onStart = flags.allowUnreachable === true ? "warn" : r.str(health.on_start, ["health", "on_start"], "require");
  if (onStart !== "require" && onStart !== "warn") r.fail(["health", "on_start"], `must be require or warn, got ${describeValue(onStart)}`);

  const requestMs = r.int(timeouts.request_ms, ["timeouts", "request_ms"], 100, 3_600_000, 60_000);
  const maxBodyBytes = r.int(limits.max_body_bytes, ["limits", "max_body_bytes"], 1024, 1 << 30, 4 << 20);
  // Bodies being received, all connections together: by default sixteen of the largest.
  const maxReceivingBytes = r.int(limits.max_receiving_bytes, ["limits", "max_receiving_bytes"], 1024, 2 ** 40, 16 * maxBodyBytes);
  if (maxReceivingBytes < maxBodyBytes) r.fail(["limits", "max_receiving_bytes"], `is ${maxReceivingBytes}, below limits.max_body_bytes (${maxBodyBytes}): a largest body could never be received`);
  const maxInFlightPerUpstream = r.int(limits.max_in_flight_per_upstream, ["limits", "max_in_flight_per_upstream"], 1, 1 << 20, 256);
  const maxConnections = r.int(limits.max_connections, ["limits", "max_connections"], 1, 1 << 20, 8192);
  const config: GatewayConfig = {
    warnings: r.warnings,
    listen: { host, port, connectionBalance },
    upstreams,
    attentionDp,
    limits: {
      maxBodyBytes,
      maxReceivingBytes,
      maxInFlightPerUpstream,
      inFlightShare: maxInFlightPerUpstream,
      queueSize: r.int(limits.queue_size, ["limits", "queue_size"], 0, 1 << 20, 1024),
      queueTimeoutMs: r.int(limits.queue_timeout_ms, ["limits", "queue_timeout_ms"], 0, 3_600_000, 10_000),
      maxConnections,
      connectionShare: maxConnections,
      maxRequestsPerConnection: r.int(limits.max_requests_per_connection, ["limits", "max_requests_per_connection"], 0, 1 << 30, 1000),
      maxPromptChars: r.int(limits.max_prompt_chars, ["limits", "max_prompt_chars"], 1, 1 << 30, MAX_PROMPT_CHARS),
      maxPromptTokens: r.int(limits.max_prompt_tokens, ["limits", "max_prompt_tokens"], 1, 1 << 30, MAX_PROMPT_TOKENS[tokenizer.kind]),
    },
    timeouts: {
      // Node requires the head's bound to be within the whole request's.
      headersMs: Math.min(requestMs, r.int(timeouts.headers_ms, ["timeouts", "headers_ms"], 100, 3_600_000, 10_000)),
      requestMs,
      // Node announces it in whole seconds (Keep-Alive: timeout=N): under a second would read as 0.
      keepAliveMs: r.int(timeouts.keep_alive_ms, ["timeouts", "keep_alive_ms"], 1_000, 3_600_000, 65_000),
      connectMs: r.int(timeouts.connect_ms, ["timeouts", "connect_ms"], 1, 600_000, 5_000),
      firstByteMs: r.int(timeouts.first_byte_ms, ["timeouts", "first_byte_ms"], 1, 3_600_000, 300_000),
      idleMs: r.int(timeouts.idle_ms, ["timeouts", "idle_ms"], 1, 3_600_000, 300_000),
      maxStreamMs: r.int(timeouts.max_stream_ms, ["timeouts", "max_stream_ms"], 0, 86_400_000, 0),
    },
    health: {
      path,
      intervalMs: r.int(health.interval_ms, ["health", "interval_ms"], 100, 3_600_000, 5_000),
      timeoutMs: r.int(health.timeout_ms, ["health", "timeout_ms"], 10, 600_000, 2_000),
      unhealthyThreshold: r.int(health.unhealthy_threshold, ["health", "unhealthy_threshold"], 1, 1000, 3),
      healthyThreshold: r.int(health.healthy_threshold, ["health", "healthy_threshold"], 1, 1000, 2),
      onStart: onStart === "warn" ? "warn" : "require",
      consecutive5xx: r.int(health.consecutive_5xx, ["health", "consecutive_5xx"], 1, 1000, 5),
      consecutiveGatewayFailures: r.int(health.consecutive_gateway_failures, ["health", "consecutive_gateway_failures"], 1, 1000, 5),
      baseEjectionMs: r.int(health.base_ejection_ms, ["health", "base_ejection_ms"], 10, 3_600_000, 30_000),
      maxEjectionMs: r.int(health.max_ejection_ms, ["health", "max_ejection_ms"], 10, 86_400_000, 300_000),
      maxEjectedPercent: r.int(health.max_ejected_percent, ["health", "max_ejected_percent"], 0, 100, 50),
    },
    auth: {
      apiKeys,
      protectMetrics: r.bool(auth.protect_metrics, ["auth", "protect_metrics"], false),
      protectHealth: r.bool(auth.protect_health, ["auth", "protect_health"], false),
      adminApiKey,
      internalRequestAuthKey,
    },
    logging: { level: levelText as GatewayConfig["logging"]["level"] },
    tokenizer,
    sync,
    routing: {
      tokensPerBlock: r.int(routing.tokens_per_block, ["routing", "tokens_per_block"], 1, 1 << 16, tokenizer.kind === "huggingface" ? ENGINE_TOKENS_PER_BLOCK : BYTE_BLOCK),
      indexBytes: r.int(routing.index_bytes, ["routing", "index_bytes"], 1 << 20, 2 ** 31, 16 << 20),
      loraAdapters,
      loadWeight: r.num(routing.load_weight, ["routing", "load_weight"], 0, 1e6, DEFAULT_LOAD_WEIGHT),
    },
    centralized,
    disaggregation,
  };
  // Replication and the admin endpoints change one fleet's state: a disaggregated gateway runs two.
  if (disaggregation !== null && sync !== null) r.fail(["sync"], "cannot be combined with disaggregation: (yet): replicas share one fleet's routing state, and a disaggregated gateway runs two pools");
  if (disaggregation?.protocol === "trtllm" && internalRequestAuthKey === null) r.warn(["disaggregation", "protocol"], "trtllm without auth.internal_request_auth_key_file (or _env): generation requests go unsigned, which TensorRT-LLM workers with an internal_request_auth_key refuse (and newer releases will require)");
  if (disaggregation !== null && adminApiKey !== null) r.fail(["auth", auth.admin_api_key_env !== undefined && auth.admin_api_key_env !== null ? "admin_api_key_env" : "admin_api_key"], "cannot be combined with disaggregation: (yet): the admin endpoints change one fleet, and a disaggregated gateway runs two pools");
  if (r.omitted > 0) r.issues.push({ field: "(file)", message: `and ${r.omitted} more problems`, where: null });
  if (r.issues.length > 0) throw new GatewayConfigError(r.issues);
  CHECKED.add(config);
  return config;
}
