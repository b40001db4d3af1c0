// The public prefix index: each rank's picture of which full prompt blocks it
// caches, kept in the wasm core (assembly/prefix-index.ts) in its own instance.
// Prompts enter as token ids (hashed into blocks of `tokensPerBlock`) or as
// caller block keys (engine or trace block ids); namespaces (LoRA task id, cache
// salt) seed the block chain, so equal tokens in different namespaces never match.

import { readKeyWords, readTokens, type TokenIds } from "./arrays.js";
import { checkRank, MAX_KEY_LENGTH } from "./batch.js";
import { AdpInputError, asInputError, readInput, readOptions } from "./errors.js";
import { IndexCore } from "./index-core.js";
import { isTrap, trapError } from "./wasm.js";
import { EngineMap } from "./engine-map.js";
import { parseKvEvents, type EngineHash, type KvEvent } from "./kv-events.js";
import { namespaceKey } from "./namespace.js";
import { readIndexState, type IndexState } from "./prefix-index-state.js";
import { crc32c, decodeSnapshot, encodeSnapshot, SNAPSHOT_KINDS } from "./snapshot-format.js";
import { remapRecords, type RankRemap } from "./rank-remap.js";

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
  /**
   * Most bytes the index takes, its fixed scratch included; beyond it least
   * recently stamped leaves go, across ranks. At most 2^31.
   * @default 2^31 (2 GiB, the most the core's 32-bit memory holds safely)
   */
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
  /** Stored events whose last block was not yet full (TensorRT-LLM): their full blocks applied, that tail left out. */
  partialTails: number;
  /** Why each malformed event was skipped, in order (at most 100). */
  readonly problems: string[];
}

/** The options `createPrefixIndex` accepts. */
export const OPTION_KEYS = new Set(["numRanks", "tokensPerBlock", "capacityBlocksPerRank", "maxMemoryBytes"]);
/** Most ranks an index supports (a rank, and a block's count of ranks holding it, are 16-bit). */
export const MAX_INDEX_RANKS = 65535;

/** Most bytes an index may take, and the budget of one created without `maxMemoryBytes`. */
export const MAX_INDEX_BYTES = 2 ** 31;

/** Whether `v` is an integer in [1, max]. */
const isPositiveInt = (v: unknown, max: number): v is number => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= max;

/** Validates a namespace and returns its 64-bit chain seed as two words. */
export function namespaceSeed(ns: unknown, field = "ns"): readonly [number, number] {
  if (ns === undefined || ns === null) return namespaceKey(null, null);
  if (typeof ns !== "object") throw new AdpInputError(field, "must be an object { loraTaskId?, cacheSalt? }", ns);
  const { loraTaskId, cacheSalt } = readInput(field, () => {
    for (const key of Object.keys(ns)) {
      if (key !== "loraTaskId" && key !== "cacheSalt") throw new AdpInputError(`${field}.${key}`, "is not a namespace field (loraTaskId, cacheSalt)", (ns as Record<string, unknown>)[key]);
    }
    const { loraTaskId, cacheSalt } = ns as PrefixNamespace;
    return { loraTaskId, cacheSalt };
  });
  const lora = loraTaskId ?? null;
  const salt = cacheSalt ?? null;
  if (lora !== null && !(typeof lora === "number" && Number.isSafeInteger(lora))) throw new AdpInputError(`${field}.loraTaskId`, "must be a safe integer or null", lora);
  if (salt !== null && (typeof salt !== "string" || salt.length > MAX_KEY_LENGTH)) {
    throw new AdpInputError(`${field}.cacheSalt`, `must be a string of at most ${MAX_KEY_LENGTH} characters, or null`, salt);
  }
  return namespaceKey(lora, salt);
}

/** How `matchInto` writes into `out`: 1 a genuine Uint32Array, 2 an array, 0 neither or too short. Never throws. */
function outKind(out: unknown, numRanks: number): 0 | 1 | 2 {
  try {
    if (out instanceof Uint32Array && ArrayBuffer.isView(out)) return out.length >= numRanks ? 1 : 0;
    if (Array.isArray(out)) return out.length >= numRanks ? 2 : 0;
  } catch {
    // a revoked Proxy, or a trap that throws: neither
  }
  return 0;
}

/** Bounds one rank's engine map against the blocks the rank holds (EngineMap.bound). */
function boundEngineBlocks(ex: IndexCore["ex"], rank: number, map: EngineMap): void {
  map.bound(ex.indexBlockCount(rank) >>> 0, (k) => ex.indexHolds(rank, k[0], k[1]) !== 0);
}

/** A multi-rank prefix index. Create with {@link createPrefixIndex}. */
export class PrefixIndex {
  #core: IndexCore | null;
  /** Why the core was retired (see #retire), or null. */
  #fault: Error | null = null;
  readonly #numRanks: number;
  readonly #tokensPerBlock: number;
  readonly #options: PrefixIndexOptions;
  /** Per rank: engine block hash → path key (lo, hi) of the block it names. */
  #engineBlocks: EngineMap[];
  /** Per rank: the last event_id seen. */
  #lastEventId: number[];
  readonly #eventCounts: KvEventCounts = { applied: 0, unknownParent: 0, unknownBlock: 0, malformed: 0, ignored: 0, outOfOrder: 0 };

  /** @internal Use {@link createPrefixIndex}. */
  constructor(input: PrefixIndexOptions) {
    const options = readOptions(input, "createPrefixIndex()", OPTION_KEYS, "prefix index option") as Partial<PrefixIndexOptions>;
    const { numRanks, tokensPerBlock = 32, capacityBlocksPerRank, maxMemoryBytes } = options;
    if (!isPositiveInt(numRanks, MAX_INDEX_RANKS)) throw new AdpInputError("numRanks", `must be an integer in [1, ${MAX_INDEX_RANKS}]`, numRanks);
    if (!isPositiveInt(tokensPerBlock, 1 << 20)) throw new AdpInputError("tokensPerBlock", "must be an integer in [1, 2^20]", tokensPerBlock);
    if (capacityBlocksPerRank !== undefined && !isPositiveInt(capacityBlocksPerRank, 2 ** 32 - 1)) {
      throw new AdpInputError("capacityBlocksPerRank", "must be an integer in [1, 2^32)", capacityBlocksPerRank);
    }
    if (maxMemoryBytes !== undefined && !isPositiveInt(maxMemoryBytes, MAX_INDEX_BYTES)) {
      throw new AdpInputError("maxMemoryBytes", "must be an integer in [1, 2^31]", maxMemoryBytes);
    }
    this.#core = new IndexCore(numRanks, tokensPerBlock, capacityBlocksPerRank ?? 0, maxMemoryBytes ?? MAX_INDEX_BYTES, "maxMemoryBytes");
    this.#numRanks = numRanks;
    this.#tokensPerBlock = tokensPerBlock;
    this.#options = { numRanks, tokensPerBlock, ...(capacityBlocksPerRank ? { capacityBlocksPerRank } : {}), ...(maxMemoryBytes ? { maxMemoryBytes } : {}) };
    this.#engineBlocks = Array.from({ length: numRanks }, () => new EngineMap());
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

  /** The core, or a typed error once disposed or retired. */
  #live(): IndexCore {
    if (this.#core === null) throw this.#fault ?? new AdpInputError("PrefixIndex", "has been disposed", "a disposed index");
    return this.#core;
  }

  /**
   * What to throw for `error`, which escaped a call that changes the core: a
   * trap (memory that could not grow, see assembly/pages.ts's mustAlloc) cut
   * the change short, so the core is retired and never read again.
   */
  #retire(error: unknown): unknown {
    if (!isTrap(error) || this.#core === null) return error;
    this.#fault = trapError(this.#core.ex, error);
    this.#core = null;
    return this.#fault;
  }

  /** @internal Why the index was retired (AdpMemoryError, or the core's own fault), or null: what a router throws for it. */
  get fault(): Error | null {
    return this.#fault;
  }

  /**
   * @internal Whether `v` is a PrefixIndex made by this module: a brand check on
   * its private state, which never throws and which a Proxy or a look-alike
   * with the right prototype cannot pass.
   */
  static isIndex(v: unknown): v is PrefixIndex {
    return typeof v === "object" && v !== null && #numRanks in v;
  }

  /** @internal Whether the index can still be used (not disposed). */
  get usable(): boolean {
    return this.#core !== null;
  }

  /**
   * Stamps every full-block prefix of `tokens` in `rank`'s view (adding the
   * missing ones), then evicts to capacity and budget. Returns the tokens the
   * rank held before (what `match(tokens)[rank]` would have said), in one walk.
   */
  insert(rank: number, tokens: ArrayLike<number>, ns?: PrefixNamespace | null): number {
    const core = this.#live();
    checkRank(rank, this.#numRanks, "rank");
    const seed = namespaceSeed(ns);
    const t = readTokens(tokens, "tokens");
    try {
      return core.insertTokens(rank, t, t.length, seed);
    } catch (error) {
      throw this.#retire(error);
    }
  }

  /**
   * Matched tokens per rank: `tokensPerBlock × k` for the longest k-block prefix
   * of `tokens` in each rank's view, from one walk of the prompt. Changes nothing.
   */
  match(tokens: ArrayLike<number>, ns?: PrefixNamespace | null): number[] {
    const core = this.#live();
    const seed = namespaceSeed(ns);
    const t = readTokens(tokens, "tokens");
    core.matchTokens(t, t.length, seed);
    return core.resultArray();
  }

  /** Like {@link match}, writing into `out` (at least `numRanks` long) instead of allocating. */
  matchInto(out: Uint32Array | number[], tokens: ArrayLike<number>, ns?: PrefixNamespace | null): void {
    const core = this.#live();
    const kind = outKind(out, this.#numRanks);
    if (kind === 0) throw new AdpInputError("out", `must be a Uint32Array or array of at least ${this.#numRanks} elements`, out);
    const seed = namespaceSeed(ns);
    const t = readTokens(tokens, "tokens");
    core.matchTokens(t, t.length, seed);
    const result = core.result();
    if (kind === 1) (out as Uint32Array).set(result);
    else {
      try {
        for (let r = 0; r < this.#numRanks; r++) out[r] = result[r]!;
      } catch (error) {
        throw asInputError(error, "out"); // an array Proxy whose set trap throws
      }
    }
  }

  /** Like {@link insert} for a prompt given as caller block keys (one per full block). */
  insertBlocks(rank: number, blockKeys: ArrayLike<number | bigint>, ns?: PrefixNamespace | null): void {
    const core = this.#live();
    checkRank(rank, this.#numRanks, "rank");
    const seed = namespaceSeed(ns);
    const words = readKeyWords(blockKeys, "blockKeys");
    try {
      core.insertKeys(rank, words, words.length / 2, seed);
    } catch (error) {
      throw this.#retire(error);
    }
  }

  /** Like {@link match} for a prompt given as caller block keys. */
  matchBlocks(blockKeys: ArrayLike<number | bigint>, ns?: PrefixNamespace | null): number[] {
    const core = this.#live();
    const seed = namespaceSeed(ns);
    const words = readKeyWords(blockKeys, "blockKeys");
    core.matchKeys(words, words.length / 2, seed);
    return core.resultArray();
  }

  /** @internal The router's probe: matches the first `length` tokens (read by the batch) into `target()` at `offset`. */
  probeInto(tokens: TokenIds, length: number, seed: readonly [number, number], target: () => Uint32Array, offset: number): void {
    const core = this.#live();
    core.matchTokens(tokens, length, seed);
    target().set(core.result(), offset);
  }

  /** @internal The router's probe by block keys (read by the batch): matches the first `count` into `target()` at `offset`. */
  probeBlocksInto(keys: Float64Array, count: number, seed: readonly [number, number], target: () => Uint32Array, offset: number): void {
    const core = this.#live();
    core.matchKeys(keys, count, seed);
    target().set(core.result(), offset);
  }

  /** @internal The router's learning by block keys (read by the batch). */
  insertBlocksValidated(rank: number, keys: Float64Array, seed: readonly [number, number]): void {
    const core = this.#live();
    try {
      core.insertKeys(rank, keys, keys.length, seed);
    } catch (error) {
      throw this.#retire(error);
    }
  }

  /**
   * @internal The hashes (two u32 words per block) of the full blocks of
   * `tokens`, whatever the namespace: what another index takes in
   * `insertBlockHashes` for the same change as inserting the tokens (how
   * gateway replicas share learned prompts in 8 bytes a block).
   */
  blockHashes(tokens: TokenIds): Uint32Array {
    const core = this.#live();
    return core.blockHashes(readTokens(tokens, "tokens"));
  }

  /** @internal Like {@link matchInto} (a Uint32Array `out`) for a prompt given by its first `count` block hashes (from `blockHashes`): its tokens are not hashed again. */
  matchHashesInto(out: Uint32Array, words: Uint32Array, count: number, ns?: PrefixNamespace | null): void {
    const core = this.#live();
    core.matchHashes(words, Math.min(count, words.length >>> 1), namespaceSeed(ns));
    out.set(core.result());
  }

  /** @internal Inserts blocks given by their hashes (from `blockHashes`) into `rank`'s view, in namespace `ns`; returns what {@link insert} of their tokens would. */
  insertBlockHashes(rank: number, words: Uint32Array, ns?: PrefixNamespace | null): number {
    const core = this.#live();
    checkRank(rank, this.#numRanks, "rank");
    if (!(words instanceof Uint32Array) || words.length % 2 !== 0) throw new AdpInputError("words", "must be a Uint32Array of two words per block", words);
    const seed = namespaceSeed(ns);
    try {
      return core.insertHashes(rank, words, words.length / 2, seed);
    } catch (error) {
      throw this.#retire(error);
    }
  }

  /** @internal The router's learning: inserts tokens read by the batch. */
  insertValidated(rank: number, tokens: TokenIds, seed: readonly [number, number]): void {
    const core = this.#live();
    try {
      core.insertTokens(rank, tokens, tokens.length, seed);
    } catch (error) {
      throw this.#retire(error);
    }
  }

  /** Empties one rank's view. */
  clearRank(rank: number): void {
    const core = this.#live();
    checkRank(rank, this.#numRanks, "rank");
    try {
      core.ex.indexClearRank(rank);
    } catch (error) {
      throw this.#retire(error);
    }
    this.#engineBlocks[rank]!.clear();
  }

  /**
   * Applies engine KV-cache events (TensorRT-LLM's or vLLM's JSON shape; see
   * src/kv-events.ts): stored blocks enter the rank's view under one capacity
   * model with inserted ones, a removed block takes its descendants on that rank
   * with it. Events naming an unknown parent or block, and malformed events
   * (any value at all: bigints, cycles, getters that throw), are counted and
   * skipped; nothing throws for bad events. A chain of n stored events, each
   * below the previous one, costs O(n).
   *
   * @param options.rank the rank of events that carry none (single-engine streams)
   * @param options.loraIds LoRA task ids by adapter name, for events that name their adapter (vLLM's `lora_name`)
   */
  applyKvEvents(events: unknown, options: { rank?: number; loraIds?: ReadonlyMap<string, number> } = {}): KvEventsResult {
    const core = this.#live();
    const { fallback, loraIds } = typeof options === "object" && options !== null ? readInput("options", () => ({ fallback: options.rank, loraIds: options.loraIds })) : { fallback: undefined, loraIds: undefined };
    if (fallback !== undefined) checkRank(fallback, this.#numRanks, "options.rank");
    if (loraIds !== undefined && !(loraIds instanceof Map)) throw new AdpInputError("options.loraIds", "must be a Map of adapter names to LoRA task ids", loraIds);
    const result: KvEventsResult = { applied: 0, unknownParent: 0, unknownBlock: 0, malformed: 0, ignored: 0, outOfOrder: 0, partialTails: 0, problems: [] };
    this.applyParsed(parseKvEvents(events, this.#numRanks, this.#tokensPerBlock, fallback, loraIds), result);
    return result;
  }

  /**
   * @internal Applies events already parsed for this index's shape (an engine
   * cache view hands each KV-cache group its own), adding to `result` and to
   * the index's counters.
   */
  applyParsed(parsed: readonly KvEvent[], result: KvEventsResult): void {
    const core = this.#live();
    try {
      this.#applyEvents(core, parsed, result);
    } catch (error) {
      throw this.#retire(error);
    }
  }

  /** applyParsed's work, on the live core. */
  #applyEvents(core: IndexCore, parsed: readonly KvEvent[], result: KvEventsResult): void {
    const ex = core.ex;
    // Events name blocks by key (removals, stores below a parent), so an index fed them keys every
    // node from its first batch, while an engine view's index is still empty, rather than at its
    // first lookup by key, when it may hold millions (a no-op once keyed).
    ex.indexKeyAll();
    const before = { ...result };
    for (const e of parsed) {
      if (e.kind === "malformed") {
        result.malformed++;
        if (result.problems.length < 100) result.problems.push(e.reason);
        continue;
      }
      if (e.kind === "ignored" || e.kind === "stored") result.partialTails += e.partialTail === true ? 1 : 0;
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
          const key = map.take(h);
          if (key !== undefined && ex.indexRemovePath(e.rank, key[0], key[1]) > 0) known++;
          else result.unknownBlock++;
        }
        if (known > 0) result.applied++;
        // A removed block takes its descendants, whose hashes stay behind: bounded here too, not at the next store.
        boundEngineBlocks(ex, e.rank, map);
      } else {
        this.#applyStored(core, e.rank, e.parent, { loraTaskId: e.loraTaskId, cacheSalt: e.cacheSalt }, e.blocks, map) ? result.applied++ : result.unknownParent++;
      }
    }
    for (const k of Object.keys(this.#eventCounts) as (keyof KvEventCounts)[]) this.#eventCounts[k] += result[k] - before[k];
  }

  /** Inserts one stored event's blocks below its parent; false when the rank does not hold the parent. */
  #applyStored(core: IndexCore, rank: number, parent: EngineHash | null, ns: PrefixNamespace, blocks: { hash: EngineHash; tokens: number[] | null }[], map: EngineMap): boolean {
    const ex = core.ex;
    let parentKey: [number, number] | null = null;
    if (parent !== null) {
      const known = map.get(parent);
      if (known === undefined || !ex.indexHolds(rank, known[0], known[1])) return false;
      parentKey = known;
    }
    const n = blocks.length;
    let keys: Uint32Array | null = null;
    if (blocks[0]!.tokens === null) {
      // Keyed blocks: the engine hash is the block key (as its u64 bits).
      keys = new Uint32Array(2 * n);
      for (let i = 0; i < n; i++) {
        const big = BigInt.asUintN(64, BigInt(blocks[i]!.hash));
        keys[2 * i] = Number(big & 0xffffffffn);
        keys[2 * i + 1] = Number(big >> 32n);
      }
    }
    const tokens = keys === null ? blocks.map((b) => b.tokens!) : null;
    const pathKeys = core.insertStored(rank, parentKey, namespaceSeed(ns), n, tokens, keys);
    if (pathKeys === null) return false;
    for (let i = 0; i < pathKeys.length; i++) map.set(blocks[i]!.hash, pathKeys[i]!);
    boundEngineBlocks(ex, rank, map);
    return true;
  }

  /**
   * @internal The path key (lo, hi) of the block an engine hash names on
   * `rank`, if a stored event named it (an engine cache view resolves its
   * other groups' parents through it), else undefined.
   */
  pathKeyOf(rank: number, hash: EngineHash): readonly [number, number] | undefined {
    return this.#core === null ? undefined : this.#engineBlocks[rank]?.get(hash);
  }

  /** Blocks (paths) in one rank's view. */
  blockCount(rank: number): number {
    const core = this.#live();
    checkRank(rank, this.#numRanks, "rank");
    return core.ex.indexBlockCount(rank) >>> 0;
  }

  /** Counters and sizes. */
  stats(): PrefixIndexStats {
    const core = this.#live();
    const ex = core.ex;
    return {
      numRanks: this.#numRanks,
      tokensPerBlock: this.#tokensPerBlock,
      blocks: ex.indexNodeCount() >>> 0,
      residencies: ex.indexResidencyCount() >>> 0,
      bytesInUse: ex.indexBytes() + core.scratchBytes,
      tableBytes: ex.indexTableBytes(),
      reservedBytes: ex.indexReservedBytes() + core.scratchBytes,
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
    const core = this.#live();
    const ex = core.ex;
    const records = core.exportRecords();
    const state: IndexState = {
      pathKeys: PATH_KEY_SCHEME,
      options: this.#options,
      nodes: ex.indexNodeCount() >>> 0,
      stamp: ex.indexStamp() >>> 0,
      evictions: ex.indexEvictions(),
      stampResets: ex.indexStampResets() >>> 0,
      engineBlocks: this.#engineBlocks.map((m) => m.entries()),
      lastEventId: this.#lastEventId.map((v) => (Number.isFinite(v) ? v : null)),
      eventCounts: { ...this.#eventCounts },
      seal: recordsSeal(this.#tokensPerBlock, records),
    };
    return encodeSnapshot(SNAPSHOT_KINDS.prefixIndex, state, [records]);
  }

  /** @internal Loads checked snapshot state into this freshly created index. */
  loadSnapshot(state: IndexState, records: Uint8Array): void {
    const core = this.#live();
    let nodes: number;
    try {
      nodes = core.importRecords(records, state.stamp, state.evictions, state.stampResets);
    } catch (error) {
      throw this.#retire(error);
    }
    if (nodes !== state.nodes) throw new AdpInputError("snapshot", `is not a valid snapshot (prefix index: ${nodes} nodes where its state says ${state.nodes})`, `${records.length} bytes of index records`);
    this.#engineBlocks = state.engineBlocks.map((entries) => new EngineMap(entries));
    // A view's index goes on keyed (its records all entered the table as they were imported).
    if (state.engineBlocks.some((entries) => entries.length > 0)) core.ex.indexKeyAll();
    this.#lastEventId = state.lastEventId.map((v) => v ?? -Infinity);
    Object.assign(this.#eventCounts, state.eventCounts);
  }

  /** Releases the instance; every later call throws. */
  dispose(): void {
    this.#core = null;
  }
}

/**
 * The scheme of the block-path keys a snapshot stores (how the core hashes
 * blocks and chains them); a snapshot of another scheme cannot be matched
 * against, so it is refused. Scheme 1 had no field.
 */
const PATH_KEY_SCHEME = 2;

/**
 * A snapshot's seal over its node records and the block size their keys were
 * hashed with: the records' path keys cannot show their `tokensPerBlock`, so an
 * edit of that option (or of the records) without a matching seal is refused
 * instead of restoring an index that silently matches nothing.
 */
function recordsSeal(tokensPerBlock: number, records: Uint8Array): number {
  const bytes = new Uint8Array(4 + records.length);
  new DataView(bytes.buffer).setUint32(0, tokensPerBlock, true);
  bytes.set(records, 4);
  return crc32c(bytes);
}

/** Rebuilds an index from {@link PrefixIndex.snapshot} bytes (any platform); checks everything first. */
export function restorePrefixIndex(bytes: Uint8Array): PrefixIndex {
  const { state, sections } = decodeSnapshot(bytes, SNAPSHOT_KINDS.prefixIndex);
  return restoreIndexFrom(state, sections);
}

/**
 * @internal Restores an index from a decoded prefix-index snapshot: its state,
 * then its one section of records; with `remap`, onto another set of ranks
 * (see src/rank-remap.ts).
 */
export function restoreIndexFrom(raw: Record<string, unknown>, sections: readonly Uint8Array[], remap?: RankRemap): PrefixIndex {
  if (sections.length !== 1) throw new AdpInputError("snapshot", "is not a valid snapshot (a prefix index has one section of records)", `${sections.length} sections`);
  if (raw.pathKeys !== PATH_KEY_SCHEME) {
    throw new AdpInputError("snapshot", `holds block-path keys of another scheme (this version reads scheme ${PATH_KEY_SCHEME})`, raw.pathKeys ?? 1);
  }
  const options = raw.options as PrefixIndexOptions;
  let index: PrefixIndex;
  try {
    index = new PrefixIndex(remap && typeof options === "object" && options !== null ? { ...options, numRanks: remap.newToOld.length } : options);
  } catch (error) {
    if (error instanceof AdpInputError) throw new AdpInputError("snapshot", `is not a valid snapshot (prefix index options: ${error.message})`, error.received);
    throw error;
  }
  const oldNumRanks = remap ? remap.oldToNew.length : index.numRanks;
  if (remap && options.numRanks !== oldNumRanks) throw new AdpInputError("snapshot", `is not a valid snapshot (its prefix index has ${String(options.numRanks)} ranks, the router ${oldNumRanks})`, options.numRanks);
  const state = readIndexState(raw, oldNumRanks);
  if (raw.seal !== recordsSeal(index.tokensPerBlock, sections[0]!)) {
    throw new AdpInputError("snapshot", "is not a valid snapshot (prefix index records do not match their seal: edited, or written with another tokensPerBlock)", raw.seal);
  }
  if (!remap) {
    index.loadSnapshot(state, sections[0]!);
    return index;
  }
  const { records, nodes } = remapRecords(sections[0]!, remap);
  const pick = <T>(perRank: readonly T[], empty: T): T[] => Array.from(remap.newToOld, (old) => (old < 0 ? empty : perRank[old]!));
  index.loadSnapshot({ ...state, nodes, engineBlocks: pick(state.engineBlocks, []), lastEventId: pick(state.lastEventId, null) }, records);
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
