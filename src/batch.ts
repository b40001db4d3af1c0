// Validation of one `route()` call: rank states, the hard cap and the requests,
// normalized into the shape the routers work on. Everything here runs before
// any router state is touched, so a rejected batch changes nothing. Every field
// of the caller's objects is read once into a local and checked there; the
// routers only ever see those copies (see src/arrays.ts).

import { readCountsInto, readSafeKeys, readTokens } from "./arrays.js";
import { AdpInputError } from "./errors.js";
import { namespaceKey } from "./namespace.js";

/** A request id: a safe integer or a bigint, |id| < 2^64 (engine ids are u64). */
export type RequestId = number | bigint;

/** One rank's load, as the engine reports it (TensorRT-LLM's `RankState`). */
export interface RankState {
  /** The rank; when given it must equal the state's position. */
  readonly rank?: number;
  /** Requests active on the rank. */
  readonly numActiveRequests: number;
  /** Active prompt tokens on the rank (the KV-cache-aware router's load). */
  readonly numActiveTokens: number;
}

/** A new request to place. Field names follow TensorRT-LLM's request attributes. */
export interface RouteRequest {
  /** Engine request id, unique within the batch; seeds the tie-break shuffle. */
  readonly id: RequestId;
  /** Prompt token ids, each an integer in [0, 2^32). */
  readonly tokens?: ArrayLike<number> | Uint32Array;
  /** Prompt length; defaults to `tokens.length` (wins over it when both are given, as upstream). */
  readonly numTokens?: number;
  /**
   * Whether the request carries `SchedulingParams` at all. `false` changes the
   * relax sort key (reference §2) and forbids the three fields that live there.
   * @default true
   */
  readonly schedulingParams?: boolean;
  /** `SchedulingParams.attention_dp_rank`: the rank to pin the request to. */
  readonly attentionDpRank?: number | null;
  /**
   * `SchedulingParams.attention_dp_relax`: false makes the pin strict.
   * @default true
   */
  readonly attentionDpRelax?: boolean;
  /** `SchedulingParams.subagent_affinity_id`: co-locates sibling sub-agents; wins over `conversationId`. */
  readonly subagentAffinityId?: string | null;
  /** `conversation_params.conversation_id`. */
  readonly conversationId?: string | null;
  /** LoRA task id: part of the prefix-cache namespace. */
  readonly loraTaskId?: number | null;
  /** Cache salt: part of the prefix-cache namespace. */
  readonly cacheSalt?: string | null;
  /** Matched prefix tokens per rank, used as given by the KV-cache-aware router. */
  readonly prefixMatches?: ArrayLike<number>;
  /**
   * The prompt as block keys, one per block of the prefix index's
   * `tokensPerBlock` (engine block hashes, a trace's `hash_ids`), for requests
   * that carry a token count but no token ids. Non-negative safe integers.
   */
  readonly blockKeys?: ArrayLike<number>;
}

/** One `route()` call. */
export interface RouteInput {
  /** One state per rank, rank i at index i. */
  readonly rankStates: readonly RankState[];
  /** The hard per-rank cap (`max_num_active_requests`). */
  readonly maxNumActiveRequests: number;
  /** New requests in arrival order. */
  readonly requests: readonly RouteRequest[];
}

/** A validated request, in the routers' working shape. */
export interface BatchRequest {
  /** Position in the input. */
  readonly index: number;
  /** The id as given. */
  readonly id: RequestId;
  /** Low 32 bits of |id|. */
  readonly idLo: number;
  /** High 32 bits of |id|. */
  readonly idHi: number;
  /** Prompt tokens (numTokens, else tokens.length). */
  readonly numTokens: number;
  /** Token ids, read once (a Uint32Array given is used as is), or null when only a count was given. */
  readonly tokens: Uint32Array | null;
  /** Whether the request carries scheduling params. */
  readonly hasParams: boolean;
  /** Target rank, or null. */
  readonly rank: number | null;
  /** attention_dp_relax. */
  readonly relax: boolean;
  /** Conversation key: a non-empty subagent affinity id, else the conversation id, else null. */
  readonly conversationKey: string | null;
  /** LoRA task id, or null. */
  readonly loraTaskId: number | null;
  /** Cache salt, or null. */
  readonly cacheSalt: string | null;
  /** The prefix-cache namespace (LoRA id, salt) as the index's chain seed. */
  readonly namespace: readonly [number, number];
  /** Row of this request's matched tokens per rank in the batch's `prefixMatches`, or -1 when it brought none. */
  readonly matchesRow: number;
  /** Block keys, read once, or null. */
  readonly blockKeys: Float64Array | null;
}

/** A validated batch. */
export interface Batch {
  /** Active requests per rank (the routers update this copy). */
  readonly counts: number[];
  /** Active tokens per rank (the routers update this copy). */
  readonly tokens: number[];
  /** The hard cap. */
  readonly cap: number;
  /** Matched tokens per rank of the requests that brought them, row-major (row · numRanks + rank), read once; exactly their rows. */
  readonly prefixMatches: Uint32Array;
  /** Rows in `prefixMatches` (counted here: the view may be detached by the time it is used). */
  readonly matchRows: number;
  /** Where `prefixMatches` live (a router's core holds them where it scores from). */
  readonly matchesStore: RowStore;
  /** Requests in input order. */
  readonly requests: readonly BatchRequest[];
}

/** Longest conversation or subagent key accepted, in UTF-16 code units. */
export const MAX_KEY_LENGTH = 4096;
/** Largest prompt accepted, in tokens. */
export const MAX_PROMPT_TOKENS = 2 ** 31 - 1;
/** Largest per-rank request count accepted (keeps counts exact in i32). */
const MAX_COUNT = 2 ** 30;
const TWO_32 = 2 ** 32;
/** Ids must have an absolute value below this. */
const U64_LIMIT = 1n << 64n;

/** Whether `v` is a plain object (not null, not an array). */
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
/** Whether `v` is an integer in [0, max]. */
const isCount = (v: unknown, max: number): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= max;

/** The two 32-bit words of |id| (CPython's seed key), or a typed error. */
function idWords(id: unknown, field: string): [number, number] {
  if (typeof id === "number") {
    if (!Number.isSafeInteger(id)) throw new AdpInputError(field, "must be a safe integer or a bigint", id);
    const a = Math.abs(id);
    return [a % TWO_32, Math.floor(a / TWO_32)];
  }
  if (typeof id === "bigint") {
    const a = id < 0n ? -id : id;
    if (a >= U64_LIMIT) throw new AdpInputError(field, "must have an absolute value below 2^64", id);
    return [Number(a & 0xffffffffn), Number(a >> 32n)];
  }
  throw new AdpInputError(field, "must be a safe integer or a bigint", id);
}

/** A string field that may be absent or null; null when it is. */
function optionalString(v: unknown, field: string): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== "string") throw new AdpInputError(field, "must be a string", v);
  if (v.length > MAX_KEY_LENGTH) throw new AdpInputError(field, `must be at most ${MAX_KEY_LENGTH} characters`, v);
  return v;
}

/** Validates a rank index against `numRanks`. */
export function checkRank(v: unknown, numRanks: number, field: string): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v >= numRanks) {
    throw new AdpInputError(field, `must be an integer rank in 0..${numRanks - 1}`, v);
  }
  return v;
}

/**
 * Where a batch's caller `prefixMatches` rows are read to. A KV-cache-aware
 * router's core is one (its match block, which it scores from: the matches
 * are read once and copied nowhere else); {@link ArrayRowStore} is the other.
 */
export interface RowStore {
  /**
   * A view holding at least `rows` rows of numRanks u32, row k at k · numRanks,
   * with the rows written since the batch began kept. It may be detached by
   * the next call or by memory growth (its length then reads 0).
   */
  matchRows(numRanks: number, rows: number): Uint32Array;
}

/** A row store in a plain typed array, grown by doubling. */
export class ArrayRowStore implements RowStore {
  #rows = new Uint32Array(0);

  matchRows(numRanks: number, rows: number): Uint32Array {
    if (rows * numRanks > this.#rows.length) {
      const grown = new Uint32Array(Math.max(rows * numRanks, this.#rows.length * 2, 16 * numRanks));
      grown.set(this.#rows);
      this.#rows = grown;
    }
    return this.#rows;
  }
}

/** The rows of one batch's caller `prefixMatches`, read once into a {@link RowStore}. */
class MatchRows {
  #view: Uint32Array = new Uint32Array(0);
  /** Rows read. */
  count = 0;
  readonly #numRanks: number;
  /** One row, where each is read before its bulk copy into the store. */
  readonly #row: Uint32Array;
  /** Where the rows go. */
  readonly store: RowStore;
  constructor(numRanks: number, store: RowStore) {
    this.#numRanks = numRanks;
    this.#row = new Uint32Array(numRanks);
    this.store = store;
  }

  /** Reads `v` as the next row; returns its row index. */
  add(v: unknown, field: string, rule: string): number {
    const numRanks = this.#numRanks;
    const at = this.count * numRanks;
    // A short view is one too small, or one detached by memory growth: ask again.
    if (at + numRanks > this.#view.length) this.#view = this.store.matchRows(numRanks, this.count + 1);
    readCountsInto(v, this.#view, at, this.#row, field, rule);
    return this.count++;
  }

  /** The rows read, as a view (empty when there are none). */
  view(): Uint32Array {
    return this.#view.subarray(0, this.count * this.#numRanks);
  }
}

/** Validates one request, reading each of its fields once, and returns its working shape. */
function normalizeRequest(raw: unknown, index: number, numRanks: number, matches: MatchRows): BatchRequest {
  const at = `requests[${index}]`;
  if (!isRecord(raw)) throw new AdpInputError(at, "must be an object", raw);
  const {
    id, tokens: rawTokens, numTokens: rawCount, schedulingParams: params, attentionDpRank, attentionDpRelax: relaxRaw,
    subagentAffinityId, conversationId, loraTaskId: lora, cacheSalt: rawSalt, prefixMatches: rawMatches, blockKeys: rawKeys,
  } = raw;
  const [idLo, idHi] = idWords(id, `${at}.id`);
  const tokens = rawTokens === undefined || rawTokens === null ? null : readTokens(rawTokens, `${at}.tokens`);
  let numTokens: number;
  if (rawCount !== undefined) {
    if (!isCount(rawCount, MAX_PROMPT_TOKENS)) {
      throw new AdpInputError(`${at}.numTokens`, `must be an integer in [0, ${MAX_PROMPT_TOKENS}]`, rawCount);
    }
    numTokens = rawCount;
  } else if (tokens !== null) {
    numTokens = tokens.length;
  } else {
    throw new AdpInputError(at, "must carry tokens or numTokens", raw);
  }
  if (params !== undefined && typeof params !== "boolean") throw new AdpInputError(`${at}.schedulingParams`, "must be a boolean", params);
  const hasParams = params !== false;
  if (!hasParams) {
    const scheduling = { attentionDpRank, attentionDpRelax: relaxRaw, subagentAffinityId };
    for (const [k, v] of Object.entries(scheduling)) {
      if (v !== undefined && v !== null) {
        throw new AdpInputError(`${at}.${k}`, "cannot be set when schedulingParams is false (it lives in SchedulingParams)", v);
      }
    }
  }
  const rank = attentionDpRank === undefined || attentionDpRank === null ? null : checkRank(attentionDpRank, numRanks, `${at}.attentionDpRank`);
  if (relaxRaw !== undefined && typeof relaxRaw !== "boolean") throw new AdpInputError(`${at}.attentionDpRelax`, "must be a boolean", relaxRaw);
  const subagent = optionalString(subagentAffinityId, `${at}.subagentAffinityId`);
  const conversation = optionalString(conversationId, `${at}.conversationId`);
  if (conversation === "") throw new AdpInputError(`${at}.conversationId`, "must be non-empty (omit it or pass null for none)", conversation);
  if (lora !== undefined && lora !== null && !(typeof lora === "number" && Number.isSafeInteger(lora))) {
    throw new AdpInputError(`${at}.loraTaskId`, "must be a safe integer", lora);
  }
  const matchesRow = rawMatches === undefined || rawMatches === null
    ? -1
    : matches.add(rawMatches, `${at}.prefixMatches`, `must hold one matched-token count per rank (${numRanks})`);
  const loraTaskId = typeof lora === "number" ? lora : null;
  const cacheSalt = optionalString(rawSalt, `${at}.cacheSalt`);
  const blockKeys = rawKeys === undefined || rawKeys === null ? null : readSafeKeys(rawKeys, `${at}.blockKeys`);
  return {
    index,
    id: id as RequestId,
    idLo,
    idHi,
    numTokens,
    tokens,
    hasParams,
    rank,
    relax: relaxRaw !== false,
    conversationKey: subagent !== null && subagent !== "" ? subagent : conversation,
    loraTaskId,
    cacheSalt,
    namespace: namespaceKey(loraTaskId, cacheSalt),
    matchesRow,
    blockKeys,
  };
}

/** Canonical form of an id for duplicate detection (5 and 5n are the same id). */
const idKey = (id: RequestId): number | bigint =>
  typeof id === "bigint" && id >= BigInt(Number.MIN_SAFE_INTEGER) && id <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(id) : id;

/**
 * Validates one `route()` call for `numRanks` ranks, reading caller
 * `prefixMatches` into `rows` (a router's own; the batch's `prefixMatches`
 * view of them is valid until the store's next use or memory growth).
 */
export function validateBatch(input: unknown, numRanks: number, rows: RowStore = new ArrayRowStore()): Batch {
  return readBatch(input, numRanks, new MatchRows(numRanks, rows));
}

/** {@link validateBatch} reading matches through `matches`. */
function readBatch(input: unknown, numRanks: number, matches: MatchRows): Batch {
  if (!isRecord(input)) throw new AdpInputError("route()", "takes { rankStates, maxNumActiveRequests, requests }", input);
  const { rankStates, maxNumActiveRequests, requests } = input;
  if (!Array.isArray(rankStates) || rankStates.length !== numRanks) {
    throw new AdpInputError("rankStates", `must be an array of ${numRanks} rank states (one per rank)`, rankStates);
  }
  const counts: number[] = new Array(numRanks);
  const tokens: number[] = new Array(numRanks);
  for (let r = 0; r < numRanks; r++) {
    const s: unknown = rankStates[r];
    if (!isRecord(s)) throw new AdpInputError(`rankStates[${r}]`, "must be an object", s);
    const { rank, numActiveRequests, numActiveTokens } = s;
    if (rank !== undefined && rank !== r) throw new AdpInputError(`rankStates[${r}].rank`, `must equal its position ${r}`, rank);
    if (!isCount(numActiveRequests, MAX_COUNT)) {
      throw new AdpInputError(`rankStates[${r}].numActiveRequests`, `must be an integer in [0, ${MAX_COUNT}]`, numActiveRequests);
    }
    if (!isCount(numActiveTokens, Number.MAX_SAFE_INTEGER)) {
      throw new AdpInputError(`rankStates[${r}].numActiveTokens`, "must be a non-negative safe integer", numActiveTokens);
    }
    counts[r] = numActiveRequests;
    tokens[r] = numActiveTokens;
  }
  if (!isCount(maxNumActiveRequests, MAX_COUNT)) {
    throw new AdpInputError("maxNumActiveRequests", `must be an integer in [0, ${MAX_COUNT}]`, maxNumActiveRequests);
  }
  if (!Array.isArray(requests)) throw new AdpInputError("requests", "must be an array", requests);
  const numRequests = requests.length;
  if (numRequests > MAX_COUNT) throw new AdpInputError("requests", `must hold at most ${MAX_COUNT} requests`, numRequests);
  const out: BatchRequest[] = new Array(numRequests);
  const seen = new Set<number | bigint>();
  for (let i = 0; i < numRequests; i++) {
    const req = normalizeRequest(requests[i], i, numRanks, matches);
    const key = idKey(req.id);
    if (seen.has(key)) throw new AdpInputError(`requests[${i}].id`, "must be unique within the batch", req.id);
    seen.add(key);
    out[i] = req;
  }
  return { counts, tokens, cap: maxNumActiveRequests, prefixMatches: matches.view(), matchRows: matches.count, matchesStore: matches.store, requests: out };
}
