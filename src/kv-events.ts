// Engine KV-cache events, parsed into one shape. Two dialects are accepted:
//
// TensorRT-LLM (`KVCacheEventSerializer`, as `/kv_cache_events` serves them):
//   {"event_id", "data": {"type": "stored", "parent_hash", "blocks": [{"block_hash",
//    "tokens": [{"token_id", ...}], "lora_id"?}]} | {"type": "removed", "block_hashes"}
//    | {"type": "created" | "updated", ...}, "window_size", "attention_dp_rank"?}
// vLLM (`KVEventBatch` as JSON objects):
//   {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
//    "lora_id"?} | {"type": "BlockRemoved", "block_hashes"} | {"type": "AllBlocksCleared"},
//   alone or in a batch {"events": [...], "data_parallel_rank"?}.
//
// Parsing never throws and reads the caller's objects once: whatever arrives
// (bigints, cycles, getters that throw, revoked proxies) becomes plain values
// or a `malformed` event with a bounded reason, and the index counts it and
// goes on. Nothing received is serialized whole into a reason.

import { describeValue } from "./errors.js";

/** An engine block hash, normalized: a safe integer, or a decimal string beyond 2^53. */
export type EngineHash = number | string;

/** One event in the index's terms. */
export type KvEvent =
  | { kind: "stored"; rank: number; eventId: number | null; parent: EngineHash | null; loraTaskId: number | null; blocks: { hash: EngineHash; tokens: number[] | null }[] }
  | { kind: "removed"; rank: number; eventId: number | null; hashes: EngineHash[] }
  | { kind: "cleared"; rank: number; eventId: number | null }
  | { kind: "ignored"; eventId: number | null }
  | { kind: "malformed"; reason: string };

/** Whether `v` is a plain object. */
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Longest engine hash accepted as a decimal string (a 128-bit integer has 39 digits). */
const MAX_HASH_DIGITS = 40;
/** Engine hashes are integers of at most 128 bits. */
const HASH_LIMIT = 1n << 128n;

/** Normalizes an engine block hash; null when it is not an integer of at most 128 bits. */
export function engineHash(v: unknown): EngineHash | null {
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

/** Token ids from `[{token_id}]` or `[id]`, or null when any is invalid. */
function tokenIds(v: unknown): number[] | null {
  if (!Array.isArray(v)) return null;
  const out: number[] = [];
  for (const t of v) {
    const id = isObject(t) ? t.token_id : t;
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id >= 2 ** 32) return null;
    out.push(id);
  }
  return out;
}

/** The event's rank, or a reason it has none. */
function rankOf(raw: unknown, numRanks: number, fallback: number | undefined): number | string {
  const r = raw ?? fallback ?? (numRanks === 1 ? 0 : undefined);
  if (r === undefined) return "no attention_dp_rank / data_parallel_rank (pass { rank } for a single-rank stream)";
  if (typeof r !== "number" || !Number.isInteger(r) || r < 0 || r >= numRanks) return `rank ${describeValue(r)} outside 0..${numRanks - 1}`;
  return r;
}

/** An event id, or null. */
const eventIdOf = (v: unknown): number | null => (typeof v === "number" && Number.isSafeInteger(v) ? v : null);
/** A LoRA id, or null. */
const loraOf = (v: unknown): number | null => (typeof v === "number" && Number.isSafeInteger(v) ? v : null);

/** One TensorRT-LLM event (`{event_id, data, attention_dp_rank}`). */
function parseTrtllm(e: Record<string, unknown>, numRanks: number, tokensPerBlock: number, fallbackRank: number | undefined): KvEvent {
  const data = e.data as Record<string, unknown>;
  const eventId = eventIdOf(e.event_id);
  const type = data.type;
  if (type === "created" || type === "updated") return { kind: "ignored", eventId };
  const rank = rankOf(e.attention_dp_rank, numRanks, fallbackRank);
  if (typeof rank === "string") return { kind: "malformed", reason: rank };
  if (type === "removed") {
    const hashes = hashList(data.block_hashes);
    return hashes === null ? { kind: "malformed", reason: "removed: block_hashes must be a list of integers" } : { kind: "removed", rank, eventId, hashes };
  }
  if (type !== "stored") return { kind: "malformed", reason: `unknown event type ${describeValue(type)}` };
  const parent = data.parent_hash === null || data.parent_hash === undefined ? null : engineHash(data.parent_hash);
  if (parent === null && data.parent_hash !== null && data.parent_hash !== undefined) return { kind: "malformed", reason: "stored: parent_hash must be an integer or null" };
  const list = data.blocks;
  if (!Array.isArray(list) || list.length === 0) return { kind: "malformed", reason: "stored: blocks must be a non-empty list" };
  const blocks: { hash: EngineHash; tokens: number[] | null }[] = [];
  const rawTokens: unknown[] = [];
  let lora: number | null = null;
  for (let i = 0; i < list.length; i++) {
    const b: unknown = list[i];
    if (!isObject(b)) return { kind: "malformed", reason: "stored: each block must be an object" };
    const hash = engineHash(b.block_hash);
    if (hash === null) return { kind: "malformed", reason: "stored: a block needs an integer block_hash and tokens [{token_id}]" };
    rawTokens.push(b.tokens);
    lora = loraOf(b.lora_id) ?? lora;
    blocks.push({ hash, tokens: null });
  }
  // Blocks without tokens are keyed by their hash (a trace's or simulator's block
  // ids); an event's blocks either all carry tokens or none do.
  if (rawTokens.every((t) => t === undefined || t === null)) return { kind: "stored", rank, eventId, parent, loraTaskId: lora, blocks };
  for (let i = 0; i < blocks.length; i++) {
    const tokens = tokenIds(rawTokens[i]);
    if (tokens === null) return { kind: "malformed", reason: "stored: a block needs an integer block_hash and tokens [{token_id}]" };
    if (tokens.length !== tokensPerBlock) return { kind: "malformed", reason: `stored: a block holds ${tokens.length} tokens, the index's blocks ${tokensPerBlock}` };
    blocks[i]!.tokens = tokens;
  }
  return { kind: "stored", rank, eventId, parent, loraTaskId: lora, blocks };
}

/** One vLLM event (`{type: "BlockStored" | "BlockRemoved" | "AllBlocksCleared", ...}`). */
function parseVllm(e: Record<string, unknown>, numRanks: number, tokensPerBlock: number, batchRank: unknown, fallbackRank: number | undefined): KvEvent {
  const rank = rankOf(e.data_parallel_rank ?? batchRank, numRanks, fallbackRank);
  if (typeof rank === "string") return { kind: "malformed", reason: rank };
  switch (e.type) {
    case "AllBlocksCleared":
      return { kind: "cleared", rank, eventId: null };
    case "BlockRemoved": {
      const hashes = hashList(e.block_hashes);
      return hashes === null ? { kind: "malformed", reason: "BlockRemoved: block_hashes must be a list of integers" } : { kind: "removed", rank, eventId: null, hashes };
    }
    case "BlockStored": {
      const hashes = hashList(e.block_hashes);
      const tokens = tokenIds(e.token_ids);
      const parent = e.parent_block_hash === null || e.parent_block_hash === undefined ? null : engineHash(e.parent_block_hash);
      if (hashes === null || tokens === null || hashes.length === 0) return { kind: "malformed", reason: "BlockStored: needs block_hashes and token_ids" };
      if (parent === null && e.parent_block_hash !== null && e.parent_block_hash !== undefined) return { kind: "malformed", reason: "BlockStored: parent_block_hash must be an integer or null" };
      const size = e.block_size ?? tokensPerBlock;
      if (size !== tokensPerBlock) return { kind: "malformed", reason: `BlockStored: block_size ${describeValue(size)}, the index's blocks ${tokensPerBlock}` };
      if (tokens.length !== hashes.length * tokensPerBlock) return { kind: "malformed", reason: "BlockStored: token_ids must fill block_hashes.length full blocks" };
      const blocks = hashes.map((hash, i) => ({ hash, tokens: tokens.slice(i * tokensPerBlock, (i + 1) * tokensPerBlock) }));
      return { kind: "stored", rank, eventId: null, parent, loraTaskId: loraOf(e.lora_id), blocks };
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

/** Parses one event (or a vLLM batch of them) into `out`; never throws. */
function parseOne(e: unknown, numRanks: number, tokensPerBlock: number, fallbackRank: number | undefined, out: KvEvent[]): void {
  try {
    if (!isObject(e)) {
      out.push({ kind: "malformed", reason: "an event must be an object" });
      return;
    }
    const inner = e.events;
    if (Array.isArray(inner)) {
      const batchRank = e.data_parallel_rank;
      const n = lengthOf(inner);
      if (n < 0) out.push(UNREADABLE);
      for (let i = 0; i < n; i++) {
        const item = itemAt(inner, i);
        if (item === null) out.push(UNREADABLE);
        else {
          const v = item.value;
          out.push(parseGuarded(() => (isObject(v) ? parseVllm(v, numRanks, tokensPerBlock, batchRank, fallbackRank) : { kind: "malformed", reason: "an event must be an object" })));
        }
      }
    } else if (isObject(e.data)) {
      out.push(parseGuarded(() => parseTrtllm(e, numRanks, tokensPerBlock, fallbackRank)));
    } else if (typeof e.type === "string") {
      out.push(parseGuarded(() => parseVllm(e, numRanks, tokensPerBlock, undefined, fallbackRank)));
    } else {
      out.push({ kind: "malformed", reason: "not a TensorRT-LLM ({data}) or vLLM ({type}) KV event" });
    }
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

/** Parses one event, a list of events, or a vLLM batch into {@link KvEvent}s; never throws. */
export function parseKvEvents(input: unknown, numRanks: number, tokensPerBlock: number, fallbackRank?: number): KvEvent[] {
  const out: KvEvent[] = [];
  let isList: boolean;
  try {
    isList = Array.isArray(input);
  } catch {
    return [UNREADABLE]; // a revoked proxy
  }
  if (!isList) {
    parseOne(input, numRanks, tokensPerBlock, fallbackRank, out);
    return out;
  }
  const list = input as unknown[];
  const n = lengthOf(list);
  if (n < 0) return [UNREADABLE];
  for (let i = 0; i < n; i++) {
    const item = itemAt(list, i);
    if (item === null) out.push(UNREADABLE);
    else parseOne(item.value, numRanks, tokensPerBlock, fallbackRank, out);
  }
  return out;
}
