// Validation of one `route()` call: rank states, the hard cap and the requests,
// normalized into the shape the routers work on. Everything here runs before
// any router state is touched, so a rejected batch changes nothing. Every field
// of the caller's objects is read once into a local and checked there; the
// routers only ever see those copies (see src/arrays.ts).

import { lengthOfTyped, readCountsInto, readSafeKeys, readTokens, typedCounts, typedTokens, type TokenIds } from "./arrays.js";
import { AdpInputError } from "./errors.js";
import { namespaceKey } from "./namespace.js";

/** The chain seed of requests with neither LoRA id nor cache salt (one shared tuple, not one per request). */
const NO_NAMESPACE = namespaceKey(null, null);

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
  /** Token ids, read once (a Uint32Array or Uint8Array given is used as a view of its memory), or null when only a count was given. */
  readonly tokens: TokenIds | null;
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
  /** The request whose row is being read (names the field in a message). */
  #index = 0;
  /** The field being read, named only when a message needs it. */
  readonly #field = (): string => fieldOf(this.#index, ".prefixMatches");
  /** The length rule, built once per batch. */
  readonly #rule: string;
  /** Rows given as Uint32Arrays, copied in `finish` (row k at k; null for a row read already). */
  readonly #typed: (Uint32Array | null)[] = [];
  /** The request each typed row belongs to. */
  readonly #typedIndex: number[] = [];
  /** Whether any row waits in `#typed`. */
  #pending = false;
  constructor(numRanks: number, store: RowStore) {
    this.#numRanks = numRanks;
    this.#row = new Uint32Array(numRanks);
    this.store = store;
    this.#rule = `must hold one matched-token count per rank (${numRanks})`;
  }

  /**
   * Reads `v`, request `index`'s prefixMatches, as the next row; returns its
   * row index. A Uint32Array of the right length needs no check of its
   * elements: it is copied with the others in `finish`.
   */
  add(v: unknown, index: number): number {
    const numRanks = this.#numRanks;
    const row = this.count;
    const typed = typedCounts(v, numRanks);
    this.#typed[row] = typed;
    if (typed !== null) {
      this.#typedIndex[row] = index;
      this.#pending = true;
      return this.count++;
    }
    const at = row * numRanks;
    // A short view is one too small, or one detached by memory growth: ask again.
    if (at + numRanks > this.#view.length) this.#view = this.store.matchRows(numRanks, row + 1);
    this.#index = index;
    readCountsInto(v, this.#view, at, this.#row, this.#field, this.#rule);
    return this.count++;
  }

  /**
   * Copies the rows given as Uint32Arrays. First a loop of independent loads
   * touches every cache line of them, so the memory system fetches them all
   * at once (a caller's arrays are rarely still in the cache, and each lies
   * apart), then each is copied whole. An array detached since `add` (by a
   * caller's getter) is refused here, still before any state changes.
   */
  finish(): void {
    if (!this.#pending) return;
    const numRanks = this.#numRanks;
    const typed = this.#typed;
    const rows = this.count;
    if (rows * numRanks > this.#view.length) this.#view = this.store.matchRows(numRanks, rows);
    let touched = 0;
    for (let row = 0; row < rows; row++) {
      const v = typed[row];
      if (v === null || v === undefined || lengthOfTyped(v) !== numRanks) continue;
      for (let k = 0; k < numRanks; k += 16) touched += v[k]!;
    }
    this.touched = touched;
    const view = this.#view;
    for (let row = 0; row < rows; row++) {
      const v = typed[row];
      if (v === null || v === undefined) continue;
      if (lengthOfTyped(v) !== numRanks) throw new AdpInputError(fieldOf(this.#typedIndex[row]!, ".prefixMatches"), `${this.#rule} (its buffer was detached while the batch was read)`, v);
      view.set(v, row * numRanks);
    }
  }

  /** What the touch loop read (kept so that it is not optimized away). */
  touched = 0;

  /** The rows read, as a view (empty when there are none). */
  view(): Uint32Array {
    return this.#view.subarray(0, this.count * this.#numRanks);
  }
}

/**
 * The path of a request's field in messages (`requests[3].tokens`). Built
 * only when a check fails: the checks themselves build no strings, since
 * doing so for every field of every request cost as much as reading them.
 */
const fieldOf = (index: number, suffix: string): string => `requests[${index}]${suffix}`;

/** Whether `v` is absent: undefined or null. */
const absent = (v: unknown): v is undefined | null => v === undefined || v === null;

/** Whether `v` is an optional string field that passes {@link optionalString} as is. */
const fineString = (v: unknown): boolean => absent(v) || (typeof v === "string" && v.length <= MAX_KEY_LENGTH);

/** Validates one request, reading each of its fields once, and returns its working shape. */
function normalizeRequest(raw: unknown, index: number, numRanks: number, matches: MatchRows): BatchRequest {
  if (!isRecord(raw)) throw new AdpInputError(fieldOf(index, ""), "must be an object", raw);
  const {
    id, tokens: rawTokens, numTokens: rawCount, schedulingParams: params, attentionDpRank, attentionDpRelax: relaxRaw,
    subagentAffinityId, conversationId, loraTaskId: lora, cacheSalt: rawSalt, prefixMatches: rawMatches, blockKeys: rawKeys,
  } = raw;
  // The id's two 32-bit words (CPython's seed key), without a tuple per request.
  let idLo: number;
  let idHi: number;
  if (typeof id === "number" && Number.isSafeInteger(id)) {
    // Not `a % 2^32`: a double remainder is a call into the runtime.
    const a = Math.abs(id);
    idHi = a < TWO_32 ? 0 : Math.floor(a / TWO_32);
    idLo = a - idHi * TWO_32;
  } else {
    [idLo, idHi] = idWords(id, fieldOf(index, ".id"));
  }
  const tokens = absent(rawTokens) ? null : (typedTokens(rawTokens) ?? readTokens(rawTokens, fieldOf(index, ".tokens")));
  let numTokens: number;
  if (rawCount !== undefined) {
    if (!isCount(rawCount, MAX_PROMPT_TOKENS)) {
      throw new AdpInputError(fieldOf(index, ".numTokens"), `must be an integer in [0, ${MAX_PROMPT_TOKENS}]`, rawCount);
    }
    numTokens = rawCount;
  } else if (tokens !== null) {
    numTokens = tokens.length;
  } else {
    throw new AdpInputError(fieldOf(index, ""), "must carry tokens or numTokens", raw);
  }
  if (params !== undefined && typeof params !== "boolean") throw new AdpInputError(fieldOf(index, ".schedulingParams"), "must be a boolean", params);
  const hasParams = params !== false;
  if (!hasParams) {
    const scheduling = { attentionDpRank, attentionDpRelax: relaxRaw, subagentAffinityId };
    for (const [k, v] of Object.entries(scheduling)) {
      if (!absent(v)) {
        throw new AdpInputError(fieldOf(index, `.${k}`), "cannot be set when schedulingParams is false (it lives in SchedulingParams)", v);
      }
    }
  }
  let rank: number | null = null;
  if (!absent(attentionDpRank)) {
    rank = typeof attentionDpRank === "number" && Number.isInteger(attentionDpRank) && attentionDpRank >= 0 && attentionDpRank < numRanks
      ? attentionDpRank
      : checkRank(attentionDpRank, numRanks, fieldOf(index, ".attentionDpRank"));
  }
  if (relaxRaw !== undefined && typeof relaxRaw !== "boolean") throw new AdpInputError(fieldOf(index, ".attentionDpRelax"), "must be a boolean", relaxRaw);
  const subagent = fineString(subagentAffinityId) ? ((subagentAffinityId ?? null) as string | null) : optionalString(subagentAffinityId, fieldOf(index, ".subagentAffinityId"));
  const conversation = fineString(conversationId) ? ((conversationId ?? null) as string | null) : optionalString(conversationId, fieldOf(index, ".conversationId"));
  if (conversation === "") throw new AdpInputError(fieldOf(index, ".conversationId"), "must be non-empty (omit it or pass null for none)", conversation);
  if (!absent(lora) && !(typeof lora === "number" && Number.isSafeInteger(lora))) {
    throw new AdpInputError(fieldOf(index, ".loraTaskId"), "must be a safe integer", lora);
  }
  const matchesRow = absent(rawMatches) ? -1 : matches.add(rawMatches, index);
  const loraTaskId = typeof lora === "number" ? lora : null;
  const cacheSalt = fineString(rawSalt) ? ((rawSalt ?? null) as string | null) : optionalString(rawSalt, fieldOf(index, ".cacheSalt"));
  const blockKeys = absent(rawKeys) ? null : readSafeKeys(rawKeys, fieldOf(index, ".blockKeys"));
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
    namespace: loraTaskId === null && cacheSalt === null ? NO_NAMESPACE : namespaceKey(loraTaskId, cacheSalt),
    matchesRow,
    blockKeys,
  };
}

/**
 * The ids seen in one batch, for duplicate detection: an open-addressing
 * table keyed by an id's value (|id| as two u32 words and its sign, so 5 and
 * 5n are the same id, 5 and -5 are not), reused between batches. A slot is
 * in use when its stamp is the batch's, so nothing is cleared per batch; a
 * `Set` of the ids cost a fifth of validating a request.
 */
class IdTable {
  /** Per slot: the low word of |id|. */
  #lo = new Uint32Array(16);
  /** Per slot: the high word of |id|. */
  #hi = new Uint32Array(16);
  /** Per slot: the batch stamp when in use, the sign in bit 0 (stamp · 2 + sign). */
  #stamp = new Uint32Array(16);
  /** Slots - 1 (slots are a power of two). */
  #mask = 15;
  /** The current batch's stamp (from 1). */
  #batch = 0;
  /** Ids added in this batch. */
  #count = 0;
  /** Slots a table keeps whatever its batches (16 K slots: 192 KiB). */
  static readonly KEEP_SLOTS = 1 << 14;

  /** Back to 16 slots, all free. */
  #reset(): void {
    this.#lo = new Uint32Array(16);
    this.#hi = new Uint32Array(16);
    this.#stamp = new Uint32Array(16);
    this.#mask = 15;
  }

  /**
   * Starts a batch. The table grows as ids arrive (at most half full), not
   * from the batch's length: a caller's array may claim any length.
   */
  begin(): void {
    // A table grown by one huge batch is let go once a batch uses less than a sixteenth of it, so one burst does not hold its memory for good.
    if (this.#stamp.length > IdTable.KEEP_SLOTS && 16 * this.#count < this.#stamp.length) this.#reset();
    this.#count = 0;
    // Stamps are 31-bit batch numbers (times two, plus the sign): start over before they wrap.
    if (++this.#batch >= 2 ** 31) {
      this.#stamp.fill(0);
      this.#batch = 1;
    }
  }

  /** Adds the id of words (`lo`, `hi`) and sign `negative`; false when the batch already holds it. */
  add(lo: number, hi: number, negative: boolean): boolean {
    if (2 * (this.#count + 1) > this.#stamp.length) this.#grow();
    const tag = (this.#batch * 2 + (negative ? 1 : 0)) >>> 0;
    const mask = this.#mask;
    let h = this.#slot(lo, hi, negative);
    for (;;) {
      const t = this.#stamp[h]!;
      if (t >>> 1 !== this.#batch) {
        this.#stamp[h] = tag;
        this.#lo[h] = lo;
        this.#hi[h] = hi;
        this.#count++;
        return true;
      }
      if (t === tag && this.#lo[h] === lo && this.#hi[h] === hi) return false;
      h = (h + 1) & mask;
    }
  }

  /** The home slot of an id. */
  #slot(lo: number, hi: number, negative: boolean): number {
    const h = Math.imul(lo ^ Math.imul(hi ^ (negative ? 0x5bd1e995 : 0), 0x85ebca6b), 0x9e3779b1);
    return (h ^ (h >>> 15)) & this.#mask;
  }

  /** Doubles the table, keeping this batch's ids. */
  #grow(): void {
    const lo = this.#lo;
    const hi = this.#hi;
    const stamp = this.#stamp;
    const size = 2 * stamp.length;
    this.#lo = new Uint32Array(size);
    this.#hi = new Uint32Array(size);
    this.#stamp = new Uint32Array(size);
    this.#mask = size - 1;
    for (let i = 0; i < stamp.length; i++) {
      const t = stamp[i]!;
      if (t >>> 1 !== this.#batch) continue;
      let h = this.#slot(lo[i]!, hi[i]!, (t & 1) === 1);
      while (this.#stamp[h] !== 0) h = (h + 1) & this.#mask;
      this.#stamp[h] = t;
      this.#lo[h] = lo[i]!;
      this.#hi[h] = hi[i]!;
    }
  }
}

/** The table batches borrow; a batch read while another is (from a caller's getter) takes a fresh one. */
let idTable: IdTable | null = new IdTable();

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
  const seen = idTable ?? new IdTable();
  idTable = null;
  try {
    seen.begin();
    for (let i = 0; i < numRequests; i++) {
      const req = normalizeRequest(requests[i], i, numRanks, matches);
      if (!seen.add(req.idLo, req.idHi, req.id < 0)) throw new AdpInputError(`requests[${i}].id`, "must be unique within the batch", req.id);
      out[i] = req;
    }
  } finally {
    idTable = seen;
  }
  matches.finish();
  return { counts, tokens, cap: maxNumActiveRequests, prefixMatches: matches.view(), matchRows: matches.count, matchesStore: matches.store, requests: out };
}
