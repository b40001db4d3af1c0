// The public prefix index: each rank's picture of which full prompt blocks it
// caches, kept in the wasm core (assembly/prefix-index.ts) in its own instance.
// Prompts enter as token ids (hashed into blocks of `tokensPerBlock`) or as
// caller block keys (engine or trace block ids); namespaces (LoRA task id, cache
// salt) seed the block chain, so equal tokens in different namespaces never match.

import { AdpInputError } from "./errors.js";
import { checkRank, checkTokens, MAX_KEY_LENGTH } from "./batch.js";
import { parseKvEvents, type EngineHash } from "./kv-events.js";
import { namespaceKey } from "./namespace.js";
import { decodeSnapshot, encodeSnapshot } from "./snapshot-format.js";
import { instantiateCore, type CoreExports } from "./wasm.js";

/** A prefix-cache namespace: TensorRT-LLM scopes reuse by LoRA task id and cache salt. */
export interface PrefixNamespace {
  /** LoRA task id; absent or null = none. */
  readonly loraTaskId?: number | null;
  /** Cache salt; absent or null = none. */
  readonly cacheSalt?: string | null;
}

/** Options of {@link createPrefixIndex}. */
export interface PrefixIndexOptions {
  /** Ranks, each with its own view. */
  readonly numRanks: number;
  /**
   * Tokens per KV-cache block; only full blocks are stored and matched.
   * @default 32
   */
  readonly tokensPerBlock?: number;
  /** Most blocks one rank's view holds; beyond it the rank's least recently stamped leaf goes. */
  readonly capacityBlocksPerRank?: number;
  /** Most bytes the index accounts for; beyond it least recently stamped leaves go, across ranks. */
  readonly maxMemoryBytes?: number;
}

/** Counters and sizes of an index. */
export interface PrefixIndexStats {
  /** Ranks. */
  readonly numRanks: number;
  /** Tokens per block. */
  readonly tokensPerBlock: number;
  /** Distinct block paths held by at least one rank. */
  readonly blocks: number;
  /** (block, rank) residencies. */
  readonly residencies: number;
  /**
   * Bytes the index's live structures take: nodes (32 each), the block hash
   * table at its real size, residency slots, eviction heap entries, per-rank
   * arrays. What `maxMemoryBytes` bounds.
   */
  readonly bytesInUse: number;
  /** Bytes of the block hash table (part of `bytesInUse`; it doubles at half load and never shrinks). */
  readonly tableBytes: number;
  /** Bytes the index's pools hold, used or free (node and residency chunks, table, heaps, pages not yet used). */
  readonly reservedBytes: number;
  /** Bytes of the instance's wasm linear memory (never shrinks; freed on dispose). */
  readonly wasmMemoryBytes: number;
  /** Residencies evicted by capacity or the memory budget. */
  readonly evictions: number;
  /** Times the index started over because its 32-bit stamps ran out (after ~4 billion inserts). */
  readonly stampResets: number;
  /** Engine KV events seen by `applyKvEvents`, by outcome. */
  readonly kvEvents: KvEventCounts;
}

/** Outcomes of engine KV events. */
export interface KvEventCounts {
  /** Events applied (stored, removed, cleared). */
  applied: number;
  /** Stored events whose parent block the rank does not hold (skipped). */
  unknownParent: number;
  /** Block hashes in removed events that the rank does not hold (skipped). */
  unknownBlock: number;
  /** Events that could not be understood (skipped). */
  malformed: number;
  /** Events with no effect on the index (created, updated). */
  ignored: number;
  /** Events whose event_id was not above the previous one for the rank (applied anyway). */
  outOfOrder: number;
}

/** What {@link PrefixIndex.applyKvEvents} did with one call's events. */
export interface KvEventsResult extends KvEventCounts {
  /** Why each malformed event was skipped, in order (at most 100). */
  readonly problems: string[];
}

/** The options `createPrefixIndex` accepts. */
const OPTION_KEYS = new Set(["numRanks", "tokensPerBlock", "capacityBlocksPerRank", "maxMemoryBytes"]);
/** Most ranks an index supports (a rank, and a block's count of ranks holding it, are 16-bit). */
export const MAX_INDEX_RANKS = 65535;

/** `n` rounded up to a multiple of 8. */
const align8 = (n: number): number => (n + 7) & ~7;
/** Whether `v` is an integer in [1, max]. */
const isPositiveInt = (v: unknown, max: number): v is number => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= max;

/** Validates a namespace and returns its 64-bit chain seed as two words. */
export function namespaceSeed(ns: unknown, field = "ns"): readonly [number, number] {
  if (ns === undefined || ns === null) return namespaceKey(null, null);
  if (typeof ns !== "object") throw new AdpInputError(field, "must be an object { loraTaskId?, cacheSalt? }", ns);
  const { loraTaskId, cacheSalt } = ns as PrefixNamespace;
  for (const key of Object.keys(ns)) {
    if (key !== "loraTaskId" && key !== "cacheSalt") throw new AdpInputError(`${field}.${key}`, "is not a namespace field (loraTaskId, cacheSalt)", (ns as Record<string, unknown>)[key]);
  }
  const lora = loraTaskId ?? null;
  const salt = cacheSalt ?? null;
  if (lora !== null && !(typeof lora === "number" && Number.isSafeInteger(lora))) throw new AdpInputError(`${field}.loraTaskId`, "must be a safe integer or null", lora);
  if (salt !== null && (typeof salt !== "string" || salt.length > MAX_KEY_LENGTH)) {
    throw new AdpInputError(`${field}.cacheSalt`, `must be a string of at most ${MAX_KEY_LENGTH} characters, or null`, salt);
  }
  return namespaceKey(lora, salt);
}

/** A multi-rank prefix index. Create with {@link createPrefixIndex}. */
export class PrefixIndex {
  #ex: CoreExports | null;
  readonly #numRanks: number;
  readonly #tokensPerBlock: number;
  readonly #options: PrefixIndexOptions;
  #scratch = 0;
  #scratchBytes = 0;
  /** A u32 view of the whole linear memory, re-created when memory grows. */
  #memory: Uint32Array | null = null;
  /** A view of the per-rank result at the scratch's start (token matches write there). */
  #result: Uint32Array | null = null;
  /** Per rank: engine block hash → path key (lo, hi) of the block it names. */
  #engineBlocks: Map<EngineHash, [number, number]>[];
  /** Per rank: the last event_id seen. */
  #lastEventId: number[];
  readonly #eventCounts: KvEventCounts = { applied: 0, unknownParent: 0, unknownBlock: 0, malformed: 0, ignored: 0, outOfOrder: 0 };

  /** @internal Use {@link createPrefixIndex}. */
  constructor(options: PrefixIndexOptions) {
    if (typeof options !== "object" || options === null) throw new AdpInputError("createPrefixIndex()", "takes an options object", options);
    for (const key of Object.keys(options)) {
      if (!OPTION_KEYS.has(key)) throw new AdpInputError(key, `is not a prefix index option (expected ${[...OPTION_KEYS].join(", ")})`, (options as unknown as Record<string, unknown>)[key]);
    }
    const { numRanks, tokensPerBlock = 32, capacityBlocksPerRank, maxMemoryBytes } = options;
    if (!isPositiveInt(numRanks, MAX_INDEX_RANKS)) throw new AdpInputError("numRanks", `must be an integer in [1, ${MAX_INDEX_RANKS}]`, numRanks);
    if (!isPositiveInt(tokensPerBlock, 1 << 20)) throw new AdpInputError("tokensPerBlock", "must be an integer in [1, 2^20]", tokensPerBlock);
    if (capacityBlocksPerRank !== undefined && !isPositiveInt(capacityBlocksPerRank, 2 ** 32 - 1)) {
      throw new AdpInputError("capacityBlocksPerRank", "must be an integer in [1, 2^32)", capacityBlocksPerRank);
    }
    if (maxMemoryBytes !== undefined && !isPositiveInt(maxMemoryBytes, 2 ** 32)) {
      throw new AdpInputError("maxMemoryBytes", "must be an integer in [1, 2^32]", maxMemoryBytes);
    }
    const ex = instantiateCore();
    if (ex.indexInit(numRanks, tokensPerBlock, capacityBlocksPerRank ?? 0, maxMemoryBytes ?? 0) !== 0) {
      throw new AdpInputError("maxMemoryBytes", `must hold at least one block (${numRanks * 32 + 72} bytes for ${numRanks} ranks)`, maxMemoryBytes);
    }
    this.#ex = ex;
    this.#numRanks = numRanks;
    this.#tokensPerBlock = tokensPerBlock;
    this.#options = { numRanks, tokensPerBlock, ...(capacityBlocksPerRank ? { capacityBlocksPerRank } : {}), ...(maxMemoryBytes ? { maxMemoryBytes } : {}) };
    this.#engineBlocks = Array.from({ length: numRanks }, () => new Map());
    this.#lastEventId = new Array(numRanks).fill(-Infinity);
  }

  /** Ranks. */
  get numRanks(): number {
    return this.#numRanks;
  }

  /** Tokens per block. */
  get tokensPerBlock(): number {
    return this.#tokensPerBlock;
  }

  #core(): CoreExports {
    if (this.#ex === null) throw new AdpInputError("PrefixIndex", "has been disposed", "a disposed index");
    return this.#ex;
  }

  /** Scratch of `bytes` bytes in the instance; its address is stable until the next call. */
  #reserve(bytes: number): number {
    const ex = this.#core();
    if (bytes > this.#scratchBytes) {
      if (this.#scratch !== 0) ex.release(this.#scratch);
      const size = Math.max(bytes, this.#scratchBytes * 2, 1024);
      this.#scratch = ex.allocate(size) >>> 0;
      this.#scratchBytes = size;
    }
    return this.#scratch;
  }

  /**
   * Writes `tokens` into scratch after the per-rank result region (at the
   * scratch's start) and returns their address; room for one block hash per
   * block follows them. The whole array is copied: a typed array's `set` is a
   * memcpy, cheaper than making a `subarray` view of the first `length` tokens.
   */
  #writeTokens(tokens: ArrayLike<number>): number {
    const tokensAt = align8(this.#numRanks * 4);
    const base = this.#reserve(tokensAt + align8(tokens.length * 4) + Math.ceil(tokens.length / this.#tokensPerBlock) * 8);
    this.#u32().set(tokens, (base + tokensAt) >>> 2);
    return base + tokensAt;
  }

  /** The u32 view of linear memory, current after any growth (growth detaches the old buffer, emptying its views). */
  #u32(): Uint32Array {
    if (this.#memory === null || this.#memory.length === 0) this.#memory = new Uint32Array(this.#core().memory.buffer);
    return this.#memory;
  }

  /** Inserts the first `length` tokens (validated) into `rank`'s view. */
  #insertTokens(rank: number, tokens: ArrayLike<number>, length: number, seed: readonly [number, number]): void {
    const ex = this.#core();
    const at = this.#writeTokens(tokens);
    const blocks = at + align8(tokens.length * 4);
    const count = ex.hashBlocks(at, length - (length % this.#tokensPerBlock), blocks);
    ex.indexInsert(rank, seed[0], seed[1], blocks, count);
  }

  /** The view of a token match's per-rank result, current after memory growth or a scratch move. */
  #resultView(): Uint32Array {
    const r = this.#result;
    if (r === null || r.length === 0 || r.byteOffset !== this.#scratch) {
      this.#result = new Uint32Array(this.#core().memory.buffer, this.#scratch, this.#numRanks);
    }
    return this.#result!;
  }

  /** Matches the first `length` tokens (validated); the result is in scratch at the returned address. */
  #matchTokens(tokens: ArrayLike<number>, length: number, seed: readonly [number, number]): number {
    const ex = this.#core();
    const at = this.#writeTokens(tokens);
    const out = this.#scratch;
    ex.indexMatchTokens(seed[0], seed[1], at, length - (length % this.#tokensPerBlock), out);
    return out;
  }

  /** Copies the per-rank result at `out` into a new array. */
  #read(out: number): number[] {
    const memory = this.#u32();
    const at = out >>> 2;
    const result = new Array<number>(this.#numRanks);
    for (let r = 0; r < this.#numRanks; r++) result[r] = memory[at + r]!;
    return result;
  }

  /** Writes block keys into scratch as block hashes; returns [blocksAddress, count, outAddress]. */
  #hashKeys(keys: ArrayLike<number | bigint>, field: string, count = keys.length): [number, number, number] {
    const ex = this.#core();
    const n = count;
    const outAt = n * 8;
    const base = this.#reserve(outAt + this.#numRanks * 4 + 8);
    const words = new Uint32Array(ex.memory.buffer, base, n * 2);
    for (let i = 0; i < n; i++) {
      const k = keys[i];
      if (typeof k === "number" && Number.isSafeInteger(k) && k >= 0) {
        words[2 * i] = k % 2 ** 32;
        words[2 * i + 1] = Math.floor(k / 2 ** 32);
      } else if (typeof k === "bigint" && k >= 0n && k < 1n << 64n) {
        words[2 * i] = Number(k & 0xffffffffn);
        words[2 * i + 1] = Number(k >> 32n);
      } else {
        throw new AdpInputError(`${field}[${i}]`, "must be a block key: a non-negative safe integer or a bigint below 2^64", k);
      }
    }
    ex.hashBlockKeys(base, n);
    return [base, n, base + outAt];
  }

  /**
   * Stamps every full-block prefix of `tokens` in `rank`'s view (adding the
   * missing ones), then evicts to capacity and budget.
   */
  insert(rank: number, tokens: ArrayLike<number>, ns?: PrefixNamespace | null): void {
    checkRank(rank, this.#numRanks, "rank");
    const seed = namespaceSeed(ns);
    const t = checkTokens(tokens, "tokens");
    this.#insertTokens(rank, t, t.length, seed);
  }

  /**
   * Matched tokens per rank: `tokensPerBlock × k` for the longest k-block prefix
   * of `tokens` in each rank's view, from one walk of the prompt. Changes nothing.
   */
  match(tokens: ArrayLike<number>, ns?: PrefixNamespace | null): number[] {
    const seed = namespaceSeed(ns);
    const t = checkTokens(tokens, "tokens");
    return this.#read(this.#matchTokens(t, t.length, seed));
  }

  /** Like {@link match}, writing into `out` (at least `numRanks` long) instead of allocating. */
  matchInto(out: Uint32Array | number[], tokens: ArrayLike<number>, ns?: PrefixNamespace | null): void {
    if (!(out instanceof Uint32Array || Array.isArray(out)) || out.length < this.#numRanks) {
      throw new AdpInputError("out", `must be a Uint32Array or array of at least ${this.#numRanks} elements`, out);
    }
    const seed = namespaceSeed(ns);
    const t = checkTokens(tokens, "tokens");
    this.#matchTokens(t, t.length, seed);
    const result = this.#resultView();
    if (out instanceof Uint32Array) out.set(result);
    else for (let r = 0; r < this.#numRanks; r++) out[r] = result[r]!;
  }

  /** Like {@link insert} for a prompt given as caller block keys (one per full block). */
  insertBlocks(rank: number, blockKeys: ArrayLike<number | bigint>, ns?: PrefixNamespace | null): void {
    checkRank(rank, this.#numRanks, "rank");
    const seed = namespaceSeed(ns);
    const [blocks, count] = this.#hashKeys(blockKeys, "blockKeys");
    this.#core().indexInsert(rank, seed[0], seed[1], blocks, count);
  }

  /** Like {@link match} for a prompt given as caller block keys. */
  matchBlocks(blockKeys: ArrayLike<number | bigint>, ns?: PrefixNamespace | null): number[] {
    const seed = namespaceSeed(ns);
    const [blocks, count, out] = this.#hashKeys(blockKeys, "blockKeys");
    this.#core().indexMatch(seed[0], seed[1], blocks, count, out);
    return this.#read(out);
  }

  /** @internal The router's probe: matches the first `length` validated tokens into `target()` at `offset`. */
  probeInto(tokens: ArrayLike<number>, length: number, seed: readonly [number, number], target: () => Uint32Array, offset: number): void {
    this.#matchTokens(tokens, length, seed);
    target().set(this.#resultView(), offset);
  }

  /** @internal The router's probe by block keys: matches the first `count` validated keys into `target()` at `offset`. */
  probeBlocksInto(keys: ArrayLike<number>, count: number, seed: readonly [number, number], target: () => Uint32Array, offset: number): void {
    const [blocks, , out] = this.#hashKeys(keys, "blockKeys", count);
    this.#core().indexMatch(seed[0], seed[1], blocks, count, out);
    target().set(new Uint32Array(this.#core().memory.buffer, out, this.#numRanks), offset);
  }

  /** @internal The router's learning by block keys (validated). */
  insertBlocksValidated(rank: number, keys: ArrayLike<number>, seed: readonly [number, number]): void {
    const [blocks, count] = this.#hashKeys(keys, "blockKeys");
    this.#core().indexInsert(rank, seed[0], seed[1], blocks, count);
  }

  /** @internal The router's learning: inserts validated tokens. */
  insertValidated(rank: number, tokens: ArrayLike<number>, seed: readonly [number, number]): void {
    this.#insertTokens(rank, tokens, tokens.length, seed);
  }

  /** Empties one rank's view. */
  clearRank(rank: number): void {
    checkRank(rank, this.#numRanks, "rank");
    this.#core().indexClearRank(rank);
    this.#engineBlocks[rank]!.clear();
  }

  /**
   * Applies engine KV-cache events (TensorRT-LLM's or vLLM's JSON shape; see
   * src/kv-events.ts): stored blocks enter the rank's view under one capacity
   * model with inserted ones, a removed block takes its descendants on that rank
   * with it. Events naming an unknown parent or block, and malformed events, are
   * counted and skipped; nothing throws for bad events.
   *
   * @param options.rank the rank of events that carry none (single-engine streams)
   */
  applyKvEvents(events: unknown, options: { rank?: number } = {}): KvEventsResult {
    const ex = this.#core();
    if (options.rank !== undefined) checkRank(options.rank, this.#numRanks, "options.rank");
    const result: KvEventsResult = { applied: 0, unknownParent: 0, unknownBlock: 0, malformed: 0, ignored: 0, outOfOrder: 0, problems: [] };
    const tpb = this.#tokensPerBlock;
    for (const e of parseKvEvents(events, this.#numRanks, tpb, options.rank)) {
      if (e.kind === "malformed") {
        result.malformed++;
        if (result.problems.length < 100) result.problems.push(e.reason);
        continue;
      }
      if (e.kind === "ignored") {
        result.ignored++;
        continue;
      }
      if (e.eventId !== null) {
        if (e.eventId <= this.#lastEventId[e.rank]!) result.outOfOrder++;
        else this.#lastEventId[e.rank] = e.eventId;
      }
      const map = this.#engineBlocks[e.rank]!;
      if (e.kind === "cleared") {
        ex.indexClearRank(e.rank);
        map.clear();
        result.applied++;
      } else if (e.kind === "removed") {
        let known = 0;
        for (const h of e.hashes) {
          const key = map.get(h);
          map.delete(h);
          if (key !== undefined && ex.indexRemovePath(e.rank, key[0], key[1]) > 0) known++;
          else result.unknownBlock++;
        }
        if (known > 0) result.applied++;
      } else {
        this.#applyStored(e.rank, e.parent, e.loraTaskId, e.blocks, map) ? result.applied++ : result.unknownParent++;
      }
    }
    for (const k of Object.keys(this.#eventCounts) as (keyof KvEventCounts)[]) this.#eventCounts[k] += result[k];
    return result;
  }

  /** Inserts one stored event's blocks below its parent; false when the rank does not hold the parent. */
  #applyStored(rank: number, parent: EngineHash | null, lora: number | null, blocks: { hash: EngineHash; tokens: number[] | null }[], map: Map<EngineHash, [number, number]>): boolean {
    const ex = this.#core();
    const tpb = this.#tokensPerBlock;
    let parentKey: [number, number] | undefined;
    if (parent !== null) {
      parentKey = map.get(parent);
      if (parentKey === undefined || !ex.indexHolds(rank, parentKey[0], parentKey[1])) return false;
    }
    const n = blocks.length;
    const keysAt = n * 8;
    const tokensAt = keysAt + n * 8;
    const base = this.#reserve(tokensAt + n * tpb * 4);
    if (blocks[0]!.tokens === null) {
      // Keyed blocks: the engine hash is the block key (safe integers only).
      const words = new Uint32Array(ex.memory.buffer, base, n * 2);
      for (let i = 0; i < n; i++) {
        const k = blocks[i]!.hash;
        const big = BigInt.asUintN(64, BigInt(k));
        words[2 * i] = Number(big & 0xffffffffn);
        words[2 * i + 1] = Number(big >> 32n);
      }
      ex.hashBlockKeys(base, n);
    } else {
      const tokenView = new Uint32Array(ex.memory.buffer, base + tokensAt, n * tpb);
      blocks.forEach((b, i) => tokenView.set(b.tokens!, i * tpb));
      ex.hashBlocks(base + tokensAt, n * tpb, base);
    }
    let held: number;
    if (parentKey === undefined) {
      const seed = namespaceSeed({ loraTaskId: lora });
      held = ex.indexInsert(rank, seed[0], seed[1], base, n);
      ex.indexPathKeys(seed[0], seed[1], base, held, base + keysAt);
    } else {
      held = ex.indexInsertBelow(rank, parentKey[0], parentKey[1], base, n, base + keysAt);
      if (held < 0) return false;
    }
    const keys = new Uint32Array(ex.memory.buffer, base + keysAt, held * 2);
    for (let i = 0; i < held; i++) map.set(blocks[i]!.hash, [keys[2 * i]!, keys[2 * i + 1]!]);
    // Evicted paths leave stale entries behind; sweep them once they dominate.
    if (map.size > 2 * (ex.indexBlockCount(rank) >>> 0) + 1024) {
      for (const [h, k] of map) if (!ex.indexHolds(rank, k[0], k[1])) map.delete(h);
    }
    return true;
  }

  /** Blocks (paths) in one rank's view. */
  blockCount(rank: number): number {
    checkRank(rank, this.#numRanks, "rank");
    return this.#core().indexBlockCount(rank) >>> 0;
  }

  /** Counters and sizes. */
  stats(): PrefixIndexStats {
    const ex = this.#core();
    return {
      numRanks: this.#numRanks,
      tokensPerBlock: this.#tokensPerBlock,
      blocks: ex.indexNodeCount() >>> 0,
      residencies: ex.indexResidencyCount() >>> 0,
      bytesInUse: ex.indexBytes(),
      tableBytes: ex.indexTableBytes(),
      reservedBytes: ex.indexReservedBytes(),
      wasmMemoryBytes: ex.memory.buffer.byteLength,
      evictions: ex.indexEvictions(),
      stampResets: ex.indexStampResets() >>> 0,
      kvEvents: { ...this.#eventCounts },
    };
  }

  /**
   * Every block path each rank holds, with its stamps, the engine block-hash
   * maps and the event counters, as bytes that {@link restorePrefixIndex} turns
   * back into an index that matches and evicts exactly as this one would.
   */
  snapshot(): Uint8Array {
    const ex = this.#core();
    const size = ex.indexExportBytes();
    const base = this.#reserve(Math.max(size, 8));
    const nodes = ex.indexExport(base) >>> 0;
    const blob = new Uint8Array(ex.memory.buffer, base, size).slice();
    return encodeSnapshot(
      {
        kind: "prefix-index",
        pathKeys: PATH_KEY_SCHEME,
        options: this.#options,
        nodes,
        stamp: ex.indexStamp() >>> 0,
        evictions: ex.indexEvictions(),
        stampResets: ex.indexStampResets() >>> 0,
        engineBlocks: this.#engineBlocks.map((m) => [...m]),
        lastEventId: this.#lastEventId.map((v) => (Number.isFinite(v) ? v : null)),
        eventCounts: this.#eventCounts,
      },
      [blob],
    );
  }

  /** @internal Loads snapshot state into this freshly created index. */
  loadSnapshot(state: Record<string, unknown>, blob: Uint8Array): void {
    const ex = this.#core();
    const base = this.#reserve(Math.max(blob.length, 8));
    new Uint8Array(ex.memory.buffer, base, blob.length).set(blob);
    ex.indexImport(base, state.nodes as number, state.stamp as number, state.evictions as number, state.stampResets as number);
    this.#engineBlocks = (state.engineBlocks as [EngineHash, [number, number]][][]).map((entries) => new Map(entries));
    this.#lastEventId = (state.lastEventId as (number | null)[]).map((v) => v ?? -Infinity);
    Object.assign(this.#eventCounts, state.eventCounts);
  }

  /** Releases the instance; every later call throws. */
  dispose(): void {
    this.#ex = null;
  }
}

/**
 * The scheme of the block-path keys a snapshot stores (how the core hashes
 * blocks and chains them); a snapshot of another scheme cannot be matched
 * against, so it is refused. Scheme 1 had no field.
 */
const PATH_KEY_SCHEME = 2;

/** Rebuilds an index from {@link PrefixIndex.snapshot} bytes (any platform). */
export function restorePrefixIndex(bytes: Uint8Array): PrefixIndex {
  const { state, sections } = decodeSnapshot(bytes);
  if (state.kind !== "prefix-index" || sections.length !== 1) throw new AdpInputError("snapshot", "is not a prefix index snapshot", state.kind);
  if (state.pathKeys !== PATH_KEY_SCHEME) {
    throw new AdpInputError("snapshot", `holds block-path keys of another scheme (this version reads scheme ${PATH_KEY_SCHEME})`, state.pathKeys ?? 1);
  }
  const index = new PrefixIndex(state.options as PrefixIndexOptions);
  index.loadSnapshot(state, sections[0]!);
  return index;
}

/**
 * Creates a multi-rank prefix index in its own wasm instance.
 *
 * @example
 * ```ts
 * const index = createPrefixIndex({ numRanks: 8, tokensPerBlock: 32 });
 * index.insert(3, promptTokens);
 * index.match(nextPromptTokens); // [0, 0, 0, 512, 0, 0, 0, 0]: matched tokens per rank
 * ```
 */
export function createPrefixIndex(options: PrefixIndexOptions): PrefixIndex {
  return new PrefixIndex(options);
}
