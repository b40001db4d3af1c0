// Engine KV-cache events, parsed into one shape. Two dialects are accepted:
//
// TensorRT-LLM (`KVCacheEventSerializer`, as `/kv_cache_events` serves them):
//   {"event_id", "data": {"type": "stored", "parent_hash", "blocks": [{"block_hash",
//    "tokens": [{"token_id", ...}], "lora_id"?}]} | {"type": "removed", "block_hashes"}
//    | {"type": "created" | "updated", ...}, "window_size", "attention_dp_rank"?}
// vLLM (`KVEventBatch`, as its msgpack decodes: maps or positional arrays):
//   {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
//    "lora_id"?, "medium"?, "lora_name"?, "extra_keys"?} | {"type": "BlockRemoved", "block_hashes"}
//   | {"type": "AllBlocksCleared"}, or the same as arrays whose first element is the tag
//   (["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//   lora_name, extra_keys, ...], older vLLM and TensorRT-LLM's stream), alone or in a batch
//   {"ts", "events": [...], "data_parallel_rank"?} or [ts, events, data_parallel_rank?].
//
// Block hashes are opaque keys: integers (numbers, bigints or decimal strings, at
// most 128 bits) or bytes (vLLM's sha256 hashes, kept whole as "0x…" hex). Token
// ids may arrive as numbers, bigints or decimal strings (TensorRT-LLM).
//
// Events of a tier other than the GPU's (`medium` "CPU", say) are ignored:
// an offloaded block's removal does not take the GPU's copy with it.
//
// Namespaces follow what the engine hashes: a stored chain's LoRA adapter is its
// `lora_name` (through the caller's name → task id map; an adapter it does not
// know is ignored, as no request of its can ask for those blocks) or `lora_id`;
// its cache salt is the string its first block's `extra_keys` carries besides
// the adapter's name; a TensorRT-LLM chain's is its first block's `cache_salt`.
// Blocks whose extra keys name anything else (multimodal
// inputs, prompt embeddings) are not token-addressable: a stored event's blocks
// from the first such one on are left out.
//
// Parsing never throws and reads the caller's objects once: whatever arrives
// (bigints, cycles, getters that throw, revoked proxies) becomes plain values
// or a `malformed` event with a bounded reason, and the index counts it and
// goes on. Nothing received is serialized whole into a reason.

import { MAX_KEY_LENGTH } from "./batch.js";
import { describeValue } from "./errors.js";

/** An engine block hash, normalized: a safe integer, a decimal string beyond 2^53, or "0x…" hex for a byte hash. */
export type EngineHash = number | string;

/**
 * The KV-cache group an event names: vLLM's `group_idx` (with the spec kind and
 * sliding window its stored events may carry) or TensorRT-LLM's attention
 * `window_size` (each window keeps its own radix tree). Events without one are
 * in group "g0" (vLLM's only group) or "w" (TensorRT-LLM without a window).
 */
export interface KvGroupRef {
  readonly key: string;
  /** vLLM's `kv_cache_spec_kind` ("full_attention", "sliding_window", "mamba", …), or null when the event does not say. */
  readonly kind: string | null;
  /** vLLM's `kv_cache_spec_sliding_window` in tokens, or null. */
  readonly slidingWindow: number | null;
}

/** One event in the index's terms. */
export type KvEvent =
  | { kind: "stored"; rank: number; eventId: number | null; parent: EngineHash | null; loraTaskId: number | null; cacheSalt: string | null; blocks: { hash: EngineHash; tokens: number[] | null }[]; partialTail?: true; group: KvGroupRef }
  | { kind: "removed"; rank: number; eventId: number | null; hashes: EngineHash[]; group: KvGroupRef }
  | { kind: "cleared"; rank: number; eventId: number | null }
  | { kind: "ignored"; eventId: number | null; partialTail?: true }
  | { kind: "malformed"; reason: string };

/** Whether `v` is a plain object. */
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Longest engine hash accepted as a decimal string (a 128-bit integer has 39 digits). */
const MAX_HASH_DIGITS = 40;
/** Engine hashes are integers of at most 128 bits. */
const HASH_LIMIT = 1n << 128n;

/** Most bytes of a byte block hash (vLLM's are 32). */
const MAX_HASH_BYTES = 64;
/** A byte hash's canonical form. */
const HEX_HASH = /^0x[0-9a-f]{2,128}$/;
/** Hex digits of a byte. */
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, "0"));

/** Normalizes an engine block hash; null when it is neither an integer of at most 128 bits nor 1..64 bytes. */
export function engineHash(v: unknown): EngineHash | null {
  if (v instanceof Uint8Array) {
    if (v.length === 0 || v.length > MAX_HASH_BYTES) return null;
    let hex = "0x";
    for (let i = 0; i < v.length; i++) hex += HEX[v[i]!];
    return hex;
  }
  if (typeof v === "string" && v.startsWith("0x")) return HEX_HASH.test(v) && v.length % 2 === 0 ? v : null;
  if (typeof v === "number") return Number.isSafeInteger(v) ? v : Number.isInteger(v) && Math.abs(v) < 2 ** 128 ? String(BigInt(v)) : null;
  if (typeof v === "bigint") {
    if (v <= -HASH_LIMIT || v >= HASH_LIMIT) return null;
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
  }
  if (typeof v === "string" && v.length <= MAX_HASH_DIGITS + 1 && /^-?\d+$/.test(v)) return engineHash(BigInt(v));
  return null;
}

/** A list of engine hashes, or null when any is not an integer. */
function hashList(v: unknown): EngineHash[] | null {
  if (!Array.isArray(v)) return null;
  const out: EngineHash[] = [];
  for (const h of v) {
    const k = engineHash(h);
    if (k === null) return null;
    out.push(k);
  }
  return out;
}

/** A token id as a number (from a number, a bigint or a decimal string), or -1 when it is not one in [0, 2^32). */
export function tokenId(v: unknown): number {
  const n = typeof v === "number" ? v : typeof v === "bigint" ? Number(v) : typeof v === "string" && /^\d{1,10}$/.test(v) ? Number(v) : -1;
  return Number.isInteger(n) && n >= 0 && n < 2 ** 32 ? n : -1;
}

/** Token ids from `[{token_id}]` or `[id]`, or null when any is invalid. */
function tokenIds(v: unknown): number[] | null {
  if (!Array.isArray(v)) return null;
  const out: number[] = [];
  for (const t of v) {
    const id = tokenId(isObject(t) ? t.token_id : t);
    if (id < 0) return null;
    out.push(id);
  }
  return out;
}

/** Field names of vLLM's events in their positional (array) encoding, after the tag. */
export const POSITIONAL: Record<string, readonly string[]> = {
  BlockStored: ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"],
  BlockRemoved: ["block_hashes", "medium", "group_idx"],
  AllBlocksCleared: [],
};

/** A positional event (`["BlockStored", …]`) as its map encoding; null when it is not one. */
function fromPositional(e: unknown[]): Record<string, unknown> | null {
  const names = typeof e[0] === "string" && Object.hasOwn(POSITIONAL, e[0]) ? POSITIONAL[e[0]]! : null;
  if (names === null) return null;
  const out: Record<string, unknown> = { type: e[0] };
  for (let i = 0; i < names.length && i + 1 < e.length; i++) out[names[i]!] = e[i + 1];
  return out;
}

/** What a stored chain's extra keys say: its cache salt, and how many leading blocks are token-addressable. */
function readExtraKeys(extra: unknown, blocks: number, loraName: string | null, root: boolean): { cacheSalt: string | null; addressable: number } | string {
  if (extra === undefined || extra === null) return { cacheSalt: null, addressable: blocks };
  if (!Array.isArray(extra)) return "BlockStored: extra_keys must be a list (one entry per block) or null";
  let cacheSalt: string | null = null;
  for (let i = 0; i < blocks; i++) {
    const keys: unknown = extra[i];
    if (keys === undefined || keys === null) continue;
    if (!Array.isArray(keys)) return "BlockStored: each extra_keys entry must be a list or null";
    let others = 0;
    for (const k of keys) {
      if (k === loraName && loraName !== null) continue;
      // vLLM puts the salt in the first block of a prompt only; elsewhere any key is an input we cannot see.
      if (i === 0 && root && typeof k === "string" && k.length <= MAX_KEY_LENGTH && cacheSalt === null) cacheSalt = k;
      else others++;
    }
    if (others > 0) return { cacheSalt, addressable: i };
  }
  return { cacheSalt, addressable: blocks };
}

/**
 * The first block whose `mm_keys` entry names a multimodal input (TensorRT-LLM's
 * KV cache manager v2 streaming events, aligned with block_hashes), or `blocks`:
 * such a block's hash covers the image, which the tokens do not show.
 */
function firstMultimodal(mm: unknown, blocks: number): number {
  if (!Array.isArray(mm)) return blocks;
  for (let i = 0; i < Math.min(blocks, mm.length); i++) {
    const keys: unknown = mm[i];
    if (Array.isArray(keys) ? keys.length > 0 : keys !== null && keys !== undefined) return i;
  }
  return blocks;
}

/** The event's rank, or a reason it has none. */
function rankOf(raw: unknown, numRanks: number, fallback: number | undefined): number | string {
  // msgpack decodes a 64-bit integer as a bigint, whatever its value.
  const r = (typeof raw === "bigint" && raw >= 0n && raw < 65536n ? Number(raw) : raw) ?? fallback ?? (numRanks === 1 ? 0 : undefined);
  if (r === undefined) return "no attention_dp_rank / data_parallel_rank (pass { rank } for a single-rank stream)";
  if (typeof r !== "number" || !Number.isInteger(r) || r < 0 || r >= numRanks) return `rank ${describeValue(r)} outside 0..${numRanks - 1}`;
  return r;
}

/** An event id, or null. */
const eventIdOf = (v: unknown): number | null => (typeof v === "number" && Number.isSafeInteger(v) ? v : typeof v === "bigint" && v >= 0n && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : null);
/** A LoRA id, or null. */
const loraOf = (v: unknown): number | null => (typeof v === "number" && Number.isSafeInteger(v) ? v : null);

/** Most KV-cache groups an engine names (vLLM's groups, TensorRT-LLM's windows). */
export const MAX_KV_GROUPS = 16;
/** A group ref. */
const groupRef = (key: string, kind: string | null, slidingWindow: number | null): KvGroupRef => ({ key, kind, slidingWindow });

/** A small non-negative integer (a group index or window size) from a number or bigint, or -1. */
function smallInt(v: unknown, max: number): number {
  const n = typeof v === "bigint" ? (v >= 0n && v <= BigInt(max) ? Number(v) : -1) : v;
  return typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= max ? n : -1;
}

/** A vLLM event's group, or a reason it names none properly. */
function vllmGroup(e: Record<string, unknown>): KvGroupRef | string {
  const raw = e.group_idx;
  const idx = raw === undefined || raw === null ? 0 : smallInt(raw, MAX_KV_GROUPS - 1);
  if (idx < 0) return `group_idx ${describeValue(raw)} outside 0..${MAX_KV_GROUPS - 1}`;
  const kind = typeof e.kv_cache_spec_kind === "string" && e.kv_cache_spec_kind.length <= 64 ? e.kv_cache_spec_kind : null;
  const window = smallInt(e.kv_cache_spec_sliding_window, 2 ** 31);
  return groupRef(`g${idx}`, kind, window > 0 ? window : null);
}

/** A TensorRT-LLM event's attention window, as a group, or a reason. */
function trtllmGroup(e: Record<string, unknown>): KvGroupRef | string {
  if (e.window_size === undefined || e.window_size === null) return groupRef("w", null, null);
  const w = smallInt(e.window_size, 2 ** 31);
  return w > 0 ? groupRef(`w${w}`, null, null) : `window_size ${describeValue(e.window_size)} is not a positive integer`;
}

/**
 * The namespace of a TensorRT-LLM block's `cache_salt`: the request's salt
 * string, as TensorRT-LLM keeps it in its events (PR #13051) and mixes its id
 * into the chain's root, so a request with that `cache_salt` matches it. A salt
 * longer than a request's may be, or one given as a number (its id, which the
 * gateway cannot compute from a request's salt), is a namespace no request
 * names: fewer tokens, never a wrong match.
 */
function trtllmSalt(v: unknown): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "string" && v.length <= MAX_KEY_LENGTH) return v;
  // A bigint's decimal text is as long as it is: only a 64-bit id (TensorRT-LLM's) is kept as it is.
  const id = typeof v === "number" || (typeof v === "bigint" && v >= 0n && v < 1n << 64n) ? String(v) : "?";
  return `\u0000trtllm-salt:${id}`;
}

/** One TensorRT-LLM event (`{event_id, data, attention_dp_rank}`). */
function parseTrtllm(e: Record<string, unknown>, numRanks: number, tokensPerBlock: number, fallbackRank: number | undefined): KvEvent {
  const data = e.data as Record<string, unknown>;
  const eventId = eventIdOf(e.event_id);
  const type = data.type;
  if (type === "created" || type === "updated") return { kind: "ignored", eventId };
  const rank = rankOf(e.attention_dp_rank, numRanks, fallbackRank);
  if (typeof rank === "string") return { kind: "malformed", reason: rank };
  // kv_event_fanout.py's own event after an event-id gap (no event_id): what the rank holds is unknown.
  if (type === "all_cleared") return { kind: "cleared", rank, eventId };
  if (type !== "removed" && type !== "stored") return { kind: "malformed", reason: `unknown event type ${describeValue(type)}` };
  const group = trtllmGroup(e);
  if (typeof group === "string") return { kind: "malformed", reason: group };
  if (type === "removed") {
    const hashes = hashList(data.block_hashes);
    return hashes === null ? { kind: "malformed", reason: "removed: block_hashes must be a list of integers" } : { kind: "removed", rank, eventId, hashes, group };
  }
  const parent = data.parent_hash === null || data.parent_hash === undefined ? null : engineHash(data.parent_hash);
  if (parent === null && data.parent_hash !== null && data.parent_hash !== undefined) return { kind: "malformed", reason: "stored: parent_hash must be an integer or null" };
  const list = data.blocks;
  if (!Array.isArray(list) || list.length === 0) return { kind: "malformed", reason: "stored: blocks must be a non-empty list" };
  const blocks: { hash: EngineHash; tokens: number[] | null }[] = [];
  const rawTokens: unknown[] = [];
  let lora: number | null = null;
  let salt: string | null = null;
  for (let i = 0; i < list.length; i++) {
    const b: unknown = list[i];
    if (!isObject(b)) return { kind: "malformed", reason: "stored: each block must be an object" };
    const hash = engineHash(b.block_hash);
    if (hash === null) return { kind: "malformed", reason: "stored: a block needs an integer block_hash and tokens [{token_id}]" };
    rawTokens.push(b.tokens);
    lora = loraOf(b.lora_id) ?? lora;
    salt ??= trtllmSalt(b.cache_salt);
    blocks.push({ hash, tokens: null });
  }
  // Blocks without tokens are keyed by their hash (a trace's or simulator's block
  // ids); an event's blocks either all carry tokens or none do.
  if (rawTokens.every((t) => t === undefined || t === null)) return { kind: "stored", rank, eventId, parent, loraTaskId: lora, cacheSalt: salt, blocks, group };
  let partialTail = false;
  for (let i = 0; i < blocks.length; i++) {
    const tokens = tokenIds(rawTokens[i]);
    if (tokens === null) return { kind: "malformed", reason: "stored: a block needs an integer block_hash and tokens [{token_id}]" };
    // A last block not yet full (the engine stores a prompt's tail block too): no other request can reuse it until
    // the engine stores it full, so the event's full blocks are kept and the tail left out.
    if (i === blocks.length - 1 && tokens.length > 0 && tokens.length < tokensPerBlock) {
      partialTail = true;
      blocks.length = i;
      break;
    }
    if (tokens.length !== tokensPerBlock) return { kind: "malformed", reason: `stored: a block holds ${tokens.length} tokens, the index's blocks ${tokensPerBlock}` };
    blocks[i]!.tokens = tokens;
  }
  if (blocks.length === 0) return { kind: "ignored", eventId, partialTail: true };
  // A block whose multimodal keys feed its hash is not addressable by tokens: keep the blocks before it.
  const mm = list.findIndex((b) => Array.isArray((b as Record<string, unknown>).mm_keys) && ((b as Record<string, unknown>).mm_keys as unknown[]).length > 0);
  if (mm === 0) return { kind: "ignored", eventId };
  if (mm > 0 && mm < blocks.length) blocks.length = mm;
  return { kind: "stored", rank, eventId, parent, loraTaskId: lora, cacheSalt: salt, blocks, group, ...(partialTail ? { partialTail: true as const } : {}) };
}

/** What parsing needs besides the events: the index's shape and the caller's stream. */
interface ParseContext {
  readonly numRanks: number;
  readonly tokensPerBlock: number;
  /** The rank of events that carry none. */
  readonly fallbackRank: number | undefined;
  /** LoRA task ids by adapter name (vLLM's `lora_name`). */
  readonly loraIds: ReadonlyMap<string, number> | undefined;
}

/** One vLLM event (`{type: "BlockStored" | "BlockRemoved" | "AllBlocksCleared", ...}`). */
function parseVllm(e: Record<string, unknown>, ctx: ParseContext, batchRank: unknown): KvEvent {
  const { tokensPerBlock } = ctx;
  const rank = rankOf(e.data_parallel_rank ?? batchRank, ctx.numRanks, ctx.fallbackRank);
  if (typeof rank === "string") return { kind: "malformed", reason: rank };
  // A tier other than the GPU's (vLLM's CPU offload): its blocks come and go without the GPU's, and routing is on the GPU's.
  if (typeof e.medium === "string" && e.medium !== "GPU" && e.type !== "AllBlocksCleared") return { kind: "ignored", eventId: null };
  switch (e.type) {
    case "AllBlocksCleared":
      return { kind: "cleared", rank, eventId: null };
    case "BlockRemoved": {
      const hashes = hashList(e.block_hashes);
      const group = vllmGroup(e);
      if (typeof group === "string") return { kind: "malformed", reason: `BlockRemoved: ${group}` };
      return hashes === null ? { kind: "malformed", reason: "BlockRemoved: block_hashes must be a list of integers or byte strings" } : { kind: "removed", rank, eventId: null, hashes, group };
    }
    case "BlockStored": {
      const group = vllmGroup(e);
      if (typeof group === "string") return { kind: "malformed", reason: `BlockStored: ${group}` };
      const hashes = hashList(e.block_hashes);
      const tokens = tokenIds(e.token_ids);
      const parent = e.parent_block_hash === null || e.parent_block_hash === undefined ? null : engineHash(e.parent_block_hash);
      if (hashes === null || tokens === null || hashes.length === 0) return { kind: "malformed", reason: "BlockStored: needs block_hashes and token_ids" };
      if (parent === null && e.parent_block_hash !== null && e.parent_block_hash !== undefined) return { kind: "malformed", reason: "BlockStored: parent_block_hash must be an integer, a byte string or null" };
      const size = e.block_size === undefined || e.block_size === null ? tokensPerBlock : tokenId(e.block_size);
      if (size !== tokensPerBlock) return { kind: "malformed", reason: `BlockStored: block_size ${describeValue(e.block_size)}, the index's blocks ${tokensPerBlock}` };
      if (tokens.length !== hashes.length * tokensPerBlock) return { kind: "malformed", reason: "BlockStored: token_ids must fill block_hashes.length full blocks" };
      const loraName = typeof e.lora_name === "string" ? e.lora_name : null;
      let loraTaskId = loraOf(typeof e.lora_id === "bigint" ? Number(e.lora_id) : e.lora_id);
      if (loraName !== null) {
        const id = ctx.loraIds?.get(loraName);
        if (id === undefined) return { kind: "ignored", eventId: null };
        loraTaskId = id;
      }
      const extra = readExtraKeys(e.extra_keys, hashes.length, loraName, parent === null);
      if (typeof extra === "string") return { kind: "malformed", reason: extra };
      const addressable = Math.min(extra.addressable, firstMultimodal(e.mm_keys, hashes.length));
      if (addressable === 0) return { kind: "ignored", eventId: null };
      const blocks = hashes.slice(0, addressable).map((hash, i) => ({ hash, tokens: tokens.slice(i * tokensPerBlock, (i + 1) * tokensPerBlock) }));
      return { kind: "stored", rank, eventId: null, parent, loraTaskId, cacheSalt: extra.cacheSalt, blocks, group };
    }
    default:
      return { kind: "malformed", reason: `unknown event type ${describeValue(e.type)}` };
  }
}

/** A malformed event for a value whose reading threw (a getter, a revoked proxy). */
const UNREADABLE: KvEvent = { kind: "malformed", reason: "reading the event threw" };

/** `list[i]`, or UNREADABLE's marker when reading it throws. */
function itemAt(list: unknown[], i: number): { value: unknown } | null {
  try {
    return { value: list[i] };
  } catch {
    return null;
  }
}

/** A list's length, or -1 when reading it throws. */
function lengthOf(list: unknown[]): number {
  try {
    const n = list.length;
    return Number.isSafeInteger(n) && n >= 0 ? n : -1;
  } catch {
    return -1;
  }
}

/** A vLLM event as a map (positional events read by their field names), or null when it is neither. */
function vllmEvent(v: unknown): Record<string, unknown> | null {
  if (isObject(v)) return v;
  return Array.isArray(v) ? fromPositional(v) : null;
}

/** Whether `e` is a positional event batch `[ts, events, data_parallel_rank?]`. */
const isPositionalBatch = (e: unknown[]): boolean => (e.length === 2 || e.length === 3) && typeof e[0] === "number" && Array.isArray(e[1]);

/** Parses the events of one vLLM batch into `out`. */
function parseBatch(inner: unknown[], batchRank: unknown, ctx: ParseContext, out: KvEvent[]): void {
  const n = lengthOf(inner);
  if (n < 0) out.push(UNREADABLE);
  for (let i = 0; i < n; i++) {
    const item = itemAt(inner, i);
    if (item === null) out.push(UNREADABLE);
    else {
      const v = item.value;
      out.push(parseGuarded(() => {
        const e = vllmEvent(v);
        return e === null ? { kind: "malformed", reason: "an event must be a map or a tagged list" } : parseVllm(e, ctx, batchRank);
      }));
    }
  }
}

/** Parses one event (or a vLLM batch of them) into `out`; never throws. */
function parseOne(e: unknown, ctx: ParseContext, out: KvEvent[]): void {
  try {
    if (Array.isArray(e)) {
      if (isPositionalBatch(e)) parseBatch(e[1] as unknown[], e[2], ctx, out);
      else {
        const event = fromPositional(e);
        out.push(event === null ? { kind: "malformed", reason: "a list is neither a tagged event nor a batch [ts, events, rank]" } : parseGuarded(() => parseVllm(event, ctx, undefined)));
      }
      return;
    }
    if (!isObject(e)) {
      out.push({ kind: "malformed", reason: "an event must be an object" });
      return;
    }
    const inner = e.events;
    if (Array.isArray(inner)) parseBatch(inner, e.data_parallel_rank, ctx, out);
    else if (isObject(e.data)) out.push(parseGuarded(() => parseTrtllm(e, ctx.numRanks, ctx.tokensPerBlock, ctx.fallbackRank)));
    else if (typeof e.type === "string") out.push(parseGuarded(() => parseVllm(e, ctx, undefined)));
    else out.push({ kind: "malformed", reason: "not a TensorRT-LLM ({data}) or vLLM ({type}) KV event" });
  } catch {
    out.push(UNREADABLE);
  }
}

/** The parser's result, or UNREADABLE when reading the event threw. */
function parseGuarded(parse: () => KvEvent): KvEvent {
  try {
    return parse();
  } catch {
    return UNREADABLE;
  }
}

/**
 * Parses one event, a list of events, or a vLLM batch (map or positional) into
 * {@link KvEvent}s; never throws.
 */
export function parseKvEvents(input: unknown, numRanks: number, tokensPerBlock: number, fallbackRank?: number, loraIds?: ReadonlyMap<string, number>): KvEvent[] {
  const ctx: ParseContext = { numRanks, tokensPerBlock, fallbackRank, loraIds };
  const out: KvEvent[] = [];
  let isList: boolean;
  try {
    // A positional batch or event is a list too: it is one batch or event, not a list of events.
    isList = Array.isArray(input) && !isPositionalBatch(input) && !(typeof input[0] === "string" && Object.hasOwn(POSITIONAL, input[0]));
  } catch {
    return [UNREADABLE]; // a revoked proxy
  }
  if (!isList) {
    parseOne(input, ctx, out);
    return out;
  }
  const list = input as unknown[];
  const n = lengthOf(list);
  if (n < 0) return [UNREADABLE];
  for (let i = 0; i < n; i++) {
    const item = itemAt(list, i);
    if (item === null) out.push(UNREADABLE);
    else parseOne(item.value, ctx, out);
  }
  return out;
}
