// What an engine's KV cache would reuse for a prompt, KV-cache group by group.
//
// A hybrid model keeps one cache per KV-cache group (vLLM: full-attention,
// sliding-window and Mamba layers each in their own group; TensorRT-LLM with
// variable sliding windows: one radix tree per attention window), and the
// engine reuses a prefix only as far as every group allows. The view keeps each
// group apart (engine-cache-groups.ts) and matches as the engines' own lookups
// do (docs/engines.md, "Hybrid models and attention windows"):
//
//   full attention (and TensorRT-LLM's windows, and a group whose kind is not
//     known): the contiguous prefix it holds from the first block.
//   sliding window (vLLM's SlidingWindowManager.find_longest_cache_hit): only
//     the cdiv(window - 1, block) blocks right before the hit point must be
//     held; scanning from the right; without such a run, the leading run.
//   Mamba (MambaManager.find_longest_cache_hit): the last held block at or
//     before the hit point.
//
// The engine's hit is vLLM's HybridKVCacheCoordinator fixed point: start from
// the whole probe, let each group (full attention first) cut it to what it
// allows below the current length, and repeat until no group cuts it. With
// only full-attention groups that is their minimum (TensorRT-LLM's VSWA reuse
// since PR #10875). A declared group that has heard nothing is empty, and an
// unknown group reads as full attention: both only ever count fewer tokens
// than the engine reuses.

import { typedTokens, type TokenIds } from "./arrays.js";
import { AdpInputError, readInput, readOptions } from "./errors.js";
import { checkRank } from "./batch.js";
import { boundBlocks, chain, clearBlocks, dropBlock, holdBlock, keyOfWords, keyText, kindNamed, presenceHit, u64, type Group, type KvGroupKind, type KvGroupSpec, type PathKey, type PresenceGroup, type PrefixGroup } from "./engine-cache-groups.js";
import { encodeViewSnapshot, readViewState } from "./engine-cache-state.js";
import { MAX_KV_GROUPS, parseKvEvents, type KvEvent, type KvGroupRef } from "./kv-events.js";
import { createPrefixIndex, namespaceSeed, MAX_INDEX_BYTES, MAX_INDEX_RANKS, type PrefixIndex, type KvEventsResult, type PrefixIndexStats, type PrefixNamespace } from "./prefix-index.js";
import { decodeSnapshot, SNAPSHOT_KINDS } from "./snapshot-format.js";

export type { KvGroupKind, KvGroupSpec } from "./engine-cache-groups.js";

/** Options of {@link createEngineCacheView}. */
export interface EngineCacheViewOptions {
  /** The engine's data-parallel ranks. */
  readonly numRanks: number;
  /** Tokens per KV-cache block. */
  readonly tokensPerBlock: number;
  /** Memory budget of each full-attention group's index; a sliding-window or Mamba group holds at most this / 128 blocks over all ranks. */
  readonly maxMemoryBytes?: number;
  /** vLLM's groups by `group_idx`, for engines whose events do not name their kind (group i is `groups[i]`). */
  readonly groups?: readonly KvGroupSpec[];
}

/** The options {@link createEngineCacheView} takes. */
const OPTION_KEYS = new Set(["numRanks", "tokensPerBlock", "maxMemoryBytes", "groups"]);

/** Bytes one block of a sliding-window or Mamba group is reckoned at (its map entries and key, measured at about 130). */
export const PRESENCE_BLOCK_BYTES = 128;

/** Counters of a fresh result. */
const emptyResult = (): KvEventsResult => ({ applied: 0, unknownParent: 0, unknownBlock: 0, malformed: 0, ignored: 0, outOfOrder: 0, partialTails: 0, problems: [] });
/** The counters a view keeps over its life. */
const COUNTED = ["applied", "unknownParent", "unknownBlock", "malformed", "ignored", "outOfOrder", "partialTails"] as const;

/**
 * An engine's KV cache per data-parallel rank and KV-cache group, fed by its
 * KV events, matched as the engine's lookup would reuse.
 */
export class EngineCacheView {
  readonly #numRanks: number;
  readonly #tokensPerBlock: number;
  readonly #maxMemoryBytes: number;
  readonly #declared: readonly KvGroupSpec[];
  /** Groups: the declared ones first (g0, g1, …), then others in the order first seen (the events' order). */
  #groups: Group[] = [];
  /** Hashes tokens into block hashes when no full-attention group has an index to (a small index of its own). */
  #hasher: PrefixIndex | null = null;
  readonly #counts = emptyResult();
  #disposed = false;
  /** Why the view was retired (a group's index retired: AdpMemoryError, or the core's own fault), or null. */
  #fault: Error | null = null;

  /** @internal Use {@link createEngineCacheView}. */
  constructor(input: EngineCacheViewOptions) {
    const { numRanks, tokensPerBlock, maxMemoryBytes, groups } = readOptions(input, "createEngineCacheView()", OPTION_KEYS, "engine cache view option") as Partial<EngineCacheViewOptions>;
    if (!Number.isSafeInteger(numRanks) || numRanks! < 1 || numRanks! > MAX_INDEX_RANKS) throw new AdpInputError("numRanks", `must be an integer in [1, ${MAX_INDEX_RANKS}]`, numRanks);
    if (!Number.isSafeInteger(tokensPerBlock) || tokensPerBlock! < 1 || tokensPerBlock! > 1 << 20) throw new AdpInputError("tokensPerBlock", "must be an integer in [1, 2^20]", tokensPerBlock);
    if (maxMemoryBytes !== undefined && (!Number.isSafeInteger(maxMemoryBytes) || maxMemoryBytes < 1 || maxMemoryBytes > MAX_INDEX_BYTES)) throw new AdpInputError("maxMemoryBytes", "must be an integer in [1, 2^31]", maxMemoryBytes);
    this.#numRanks = numRanks!;
    this.#tokensPerBlock = tokensPerBlock!;
    this.#maxMemoryBytes = maxMemoryBytes ?? MAX_INDEX_BYTES;
    this.#declared = readGroupSpecs(groups);
    // Declared groups exist from the start: one that has heard nothing is an empty cache, not an absent one.
    this.#groups = this.#declared.map((d, i) => this.makeGroup(`g${i}`, d.kind, d.slidingWindow ?? null, false));
  }

  /** Data-parallel ranks. */
  get numRanks(): number {
    return this.#numRanks;
  }

  /** Tokens per block. */
  get tokensPerBlock(): number {
    return this.#tokensPerBlock;
  }

  /** The groups it was made with (`options.groups`). */
  get declaredGroups(): readonly KvGroupSpec[] {
    return this.#declared;
  }

  /** The options it was made with (for its snapshot). */
  get options(): EngineCacheViewOptions {
    return { numRanks: this.#numRanks, tokensPerBlock: this.#tokensPerBlock, maxMemoryBytes: this.#maxMemoryBytes, groups: this.#declared };
  }

  /** The groups it holds: key, kind, and the sliding window where there is one. */
  get groups(): { key: string; kind: KvGroupKind; slidingWindow: number | null }[] {
    return this.#groups.map((g) => ({ key: g.key, kind: g.kind, slidingWindow: g.kind === "full_attention" ? null : g.window }));
  }

  /**
   * A typed error once disposed, or the error that retired it: once one
   * group's index retires (its memory could not grow), the view's groups no
   * longer describe one cache, so the whole view retires with it.
   */
  #live(): void {
    if (this.#fault !== null) throw this.#fault;
    if (this.#disposed) throw new AdpInputError("EngineCacheView", "has been disposed", "a disposed view");
    const fault = this.#groupFault();
    if (fault !== null) {
      this.dispose();
      this.#fault = fault;
      throw fault;
    }
  }

  /** The error that retired one of its indexes (a group's, or the hasher), or null. */
  #groupFault(): Error | null {
    for (const g of this.#groups) if (g.kind === "full_attention" && g.index.fault !== null) return g.index.fault;
    return this.#hasher?.fault ?? null;
  }

  /** @internal Whether the view can still be used (neither disposed nor retired). */
  get usable(): boolean {
    return this.#fault === null && !this.#disposed && this.#groupFault() === null;
  }

  /**
   * The group a stored event names, made when first seen (its kind as the
   * event says, else as declared, else assumed full attention); a group only
   * assumed and still empty takes the kind a later event names. Null when the
   * view holds as many groups as it may.
   */
  #groupFor(ref: KvGroupRef): Group | null {
    const at = this.#groups.findIndex((g) => g.key === ref.key);
    const named = kindNamed(ref.kind);
    if (at >= 0) {
      const known = this.#groups[at]!;
      const window = ref.slidingWindow;
      if (known.assumed && named !== undefined && named !== known.kind && this.#isEmpty(known)) {
        this.#disposeGroup(known);
        this.#groups[at] = this.makeGroup(ref.key, named, window, false);
      }
      return this.#groups[at]!;
    }
    if (this.#groups.length >= MAX_KV_GROUPS) return null;
    const group = this.makeGroup(ref.key, named ?? "full_attention", ref.slidingWindow, named === undefined);
    this.#groups.push(group);
    return group;
  }

  /** @internal A new empty group (a sliding window without a size reads as full attention). */
  makeGroup(key: string, kind: KvGroupKind, window: number | null, assumed: boolean): Group {
    if (kind === "mamba" || (kind === "sliding_window" && window !== null)) {
      const need = kind === "mamba" ? 1 : Math.ceil((window! - 1) / this.#tokensPerBlock);
      const perRank = <T>(make: () => T): T[] => Array.from({ length: this.#numRanks }, make);
      return { key, assumed, kind, need, window: kind === "mamba" ? null : window, byHash: perRank(() => new Map()), held: perRank(() => new Map()) };
    }
    return { key, assumed: assumed || kind !== "full_attention", kind: "full_attention", index: createPrefixIndex({ numRanks: this.#numRanks, tokensPerBlock: this.#tokensPerBlock, maxMemoryBytes: this.#maxMemoryBytes }) };
  }

  /** Whether a group holds no block on any rank. */
  #isEmpty(g: Group): boolean {
    if (g.kind !== "full_attention") return g.byHash.every((m) => m.size === 0);
    for (let r = 0; r < this.#numRanks; r++) if (g.index.blockCount(r) > 0) return false;
    return true;
  }

  /** Frees a group's index. */
  #disposeGroup(g: Group): void {
    if (g.kind === "full_attention") g.index.dispose();
  }

  /** The full-attention groups. */
  #fullGroups(): (Group & PrefixGroup)[] {
    return this.#groups.filter((g): g is Group & PrefixGroup => g.kind === "full_attention");
  }

  /** The index that hashes tokens into block hashes. */
  #hashIndex(): PrefixIndex {
    const full = this.#fullGroups()[0];
    if (full !== undefined) return full.index;
    // Its budget holds one piece of hashing scratch whatever the block size.
    this.#hasher ??= createPrefixIndex({ numRanks: 1, tokensPerBlock: this.#tokensPerBlock, maxMemoryBytes: Math.min(MAX_INDEX_BYTES, Math.max(1 << 20, 64 * this.#tokensPerBlock * 4)) });
    return this.#hasher;
  }

  /**
   * Applies engine KV events (as {@link PrefixIndex.applyKvEvents} does), each
   * to the group it names: vLLM's `group_idx`, TensorRT-LLM's `window_size`.
   */
  applyKvEvents(events: unknown, options: { rank?: number; loraIds?: ReadonlyMap<string, number> } = {}): KvEventsResult {
    this.#live();
    const { rank, loraIds } = typeof options === "object" && options !== null ? readInput("options", () => ({ rank: options.rank, loraIds: options.loraIds })) : { rank: undefined, loraIds: undefined };
    if (rank !== undefined) checkRank(rank, this.#numRanks, "options.rank");
    if (loraIds !== undefined && !(loraIds instanceof Map)) throw new AdpInputError("options.loraIds", "must be a Map of adapter names to LoRA task ids", loraIds);
    const result = emptyResult();
    try {
      this.#applyAll(events, rank, loraIds, result);
    } catch (error) {
      this.#live(); // a group's index that retired retires the view, and its error is thrown
      throw error;
    }
    for (const k of COUNTED) this.#counts[k] += result[k];
    return result;
  }

  /** Applies the parsed events to their groups, counting into `result`. */
  #applyAll(events: unknown, rank: number | undefined, loraIds: ReadonlyMap<string, number> | undefined, result: KvEventsResult): void {
    // Consecutive events of one full-attention group go to its index in one call (a plain model: the whole batch).
    let run: KvEvent[] = [];
    let runIndex: PrefixIndex | null = null;
    const flush = () => {
      if (runIndex !== null && run.length > 0) runIndex.applyParsed(run, result);
      run = [];
      runIndex = null;
    };
    for (const e of parseKvEvents(events, this.#numRanks, this.#tokensPerBlock, rank, loraIds)) {
      if (e.kind === "malformed" || e.kind === "ignored" || e.kind === "cleared") {
        flush();
        this.#count(e, result);
        continue;
      }
      // A removal never makes a group: it names no kind, and its blocks cannot be held where nothing was stored.
      const group = e.kind === "removed" ? (this.#groups.find((g) => g.key === e.group.key) ?? null) : this.#groupFor(e.group);
      if (group === null) {
        flush();
        if (e.kind === "removed") result.unknownBlock += e.hashes.length;
        else this.#malformed(result, `more than ${MAX_KV_GROUPS} KV-cache groups`);
        continue;
      }
      if (group.kind === "full_attention") {
        if (runIndex !== group.index) flush();
        runIndex = group.index;
        run.push(e);
      } else {
        flush();
        this.#applyPresence(group, e, result);
      }
    }
    flush();
  }

  /** Counts an event that names no group (malformed, ignored) or empties its rank (cleared). */
  #count(e: KvEvent & { kind: "malformed" | "ignored" | "cleared" }, result: KvEventsResult): void {
    if (e.kind === "malformed") this.#malformed(result, e.reason);
    else if (e.kind === "ignored") {
      result.ignored++;
      if (e.partialTail === true) result.partialTails++;
    } else {
      this.#clear(e.rank);
      result.applied++;
    }
  }

  /** Counts a malformed event and keeps its reason (the first hundred). */
  #malformed(result: KvEventsResult, reason: string): void {
    result.malformed++;
    if (result.problems.length < 100) result.problems.push(reason);
  }

  /** Most blocks a presence group holds per rank (and a hash named at all). */
  #presenceBound(): number {
    return Math.max(1024, Math.floor(this.#maxMemoryBytes / PRESENCE_BLOCK_BYTES / this.#numRanks));
  }

  /** @internal The bound a snapshot's presence lists are checked against. */
  get presenceBound(): number {
    return this.#presenceBound();
  }

  /** Applies a stored or removed event to a presence group: blocks enter and leave one by one. */
  #applyPresence(group: Group & PresenceGroup, e: KvEvent & { kind: "stored" | "removed" }, result: KvEventsResult): void {
    if (e.kind === "removed") {
      let known = 0;
      for (const h of e.hashes) dropBlock(group, e.rank, h) ? known++ : result.unknownBlock++;
      if (known > 0) result.applied++;
      return;
    }
    if (e.blocks[0]!.tokens === null) {
      result.ignored++; // a presence group is found by tokens; keyed blocks (traces) name none
      return;
    }
    const keys = this.#pathKeys(group, e);
    if (keys === null) {
      result.unknownParent++;
      return;
    }
    keys.forEach((k, i) => holdBlock(group, e.rank, e.blocks[i]!.hash, k));
    boundBlocks(group, e.rank, this.#presenceBound());
    result.applied++;
  }

  /**
   * The path keys of a stored event's blocks (tokens given): from its
   * namespace's seed, or below its parent, which the group itself or any
   * full-attention group of the rank names; null when none does.
   */
  #pathKeys(group: Group & PresenceGroup, e: KvEvent & { kind: "stored" }): PathKey[] | null {
    let key: bigint;
    if (e.parent === null) {
      const seed = namespaceSeed({ loraTaskId: e.loraTaskId, cacheSalt: e.cacheSalt });
      key = u64(seed[0], seed[1]);
    } else {
      const own = group.byHash[e.rank]!.get(e.parent);
      const viaFull = own === undefined ? this.#fullGroups().map((g) => g.index.pathKeyOf(e.rank, e.parent!)).find((k) => k !== undefined) : undefined;
      if (own === undefined && viaFull === undefined) return null;
      key = own !== undefined ? BigInt(`0x${own}`) : keyOfWords(viaFull!);
    }
    const tpb = this.#tokensPerBlock;
    const tokens = new Uint32Array(e.blocks.length * tpb);
    e.blocks.forEach((b, i) => tokens.set(b.tokens!, i * tpb));
    const words = this.#hashIndex().blockHashes(tokens);
    const out: PathKey[] = [];
    for (let i = 0; i < e.blocks.length; i++) {
      key = chain(key, u64(words[2 * i]!, words[2 * i + 1]!));
      out.push(keyText(key));
    }
    return out;
  }

  /** Empties one rank of every group. */
  #clear(rank: number): void {
    for (const g of this.#groups) {
      if (g.kind === "full_attention") g.index.clearRank(rank);
      else clearBlocks(g, rank);
    }
  }

  /** Empties one rank's view (every group). */
  clearRank(rank: number): void {
    this.#live();
    checkRank(rank, this.#numRanks, "rank");
    this.#clear(rank);
  }

  /**
   * Writes into `out` (one slot per rank) the tokens of `probe` each rank's
   * engine would reuse: the probe is the prompt's tokens but its last, as the
   * engines look up at most that many.
   */
  matchInto(out: Uint32Array, given: TokenIds, ns?: PrefixNamespace | null): void {
    this.#live();
    const n = this.#numRanks;
    if (!(out instanceof Uint32Array) || out.length < n) throw new AdpInputError("out", `must be a Uint32Array of at least ${n} slots`, out);
    const probe = typedTokens(given);
    if (probe === null) throw new AdpInputError("probe", "must be a Uint32Array or Uint8Array", given);
    const groups = this.#groups;
    if (groups.length === 0) {
      out.fill(0, 0, n);
      return;
    }
    // One full-attention group (a plain model, one TensorRT-LLM window): its prefix is the engine's hit.
    if (groups.length === 1 && groups[0]!.kind === "full_attention") {
      groups[0]!.index.matchInto(out, probe, ns);
      return;
    }
    const tpb = this.#tokensPerBlock;
    // Each rank's bound from the full-attention groups (their minimum), in blocks.
    const bound = new Uint32Array(n).fill(Math.floor(probe.length / tpb));
    const scratch = new Uint32Array(n);
    let presence = false;
    for (const g of groups) {
      if (g.kind !== "full_attention") {
        presence = true;
        continue;
      }
      g.index.matchInto(scratch, probe, ns);
      for (let r = 0; r < n; r++) bound[r] = Math.min(bound[r]!, Math.floor(scratch[r]! / tpb));
    }
    let longest = 0;
    for (let r = 0; r < n; r++) longest = Math.max(longest, bound[r]!);
    // Presence groups look only below the bound: the probe's keys are needed that far.
    const keys = presence && longest > 0 ? this.#probeKeys(probe, longest, ns) : [];
    for (let r = 0; r < n; r++) {
      let hit = bound[r]!;
      // The fixed point: full attention is downward-closed (its bound stands); each presence group may cut the hit.
      for (;;) {
        let cur = hit;
        for (const g of groups) if (g.kind !== "full_attention") cur = Math.min(cur, presenceHit(g, g.held[r]!, keys, cur));
        if (cur >= hit) break;
        hit = cur;
      }
      out[r] = hit * tpb;
    }
  }

  /** Each rank's reuse of `probe` (see {@link matchInto}), as a plain array. */
  match(probe: ArrayLike<number>, ns?: PrefixNamespace | null): number[] {
    const out = new Uint32Array(this.#numRanks);
    this.matchInto(out, typedTokens(probe) ?? Uint32Array.from(probe), ns);
    return [...out];
  }

  /** The path keys of the probe's first `count` blocks in namespace `ns`. */
  #probeKeys(probe: TokenIds, count: number, ns: PrefixNamespace | null | undefined): PathKey[] {
    const seed = namespaceSeed(ns ?? null);
    const words = this.#hashIndex().blockHashes(probe.subarray(0, count * this.#tokensPerBlock));
    let key = u64(seed[0], seed[1]);
    const out: PathKey[] = [];
    for (let i = 0; i < count; i++) {
      key = chain(key, u64(words[2 * i]!, words[2 * i + 1]!));
      out.push(keyText(key));
    }
    return out;
  }

  /** Blocks (residencies over all groups) one rank holds. */
  blockCount(rank: number): number {
    this.#live();
    checkRank(rank, this.#numRanks, "rank");
    return this.#groups.reduce((n, g) => n + (g.kind === "full_attention" ? g.index.blockCount(rank) : g.byHash[rank]!.size), 0);
  }

  /** Counters and sizes, summed over the groups (a full group's index reports as a prefix index does). */
  stats(): PrefixIndexStats & { groups: number } {
    this.#live();
    const parts = this.#fullGroups().map((g) => g.index.stats());
    const presenceBlocks = this.#groups.reduce((n, g) => n + (g.kind === "full_attention" ? 0 : g.byHash.reduce((m, s) => m + s.size, 0)), 0);
    const sum = (pick: (s: PrefixIndexStats) => number) => parts.reduce((n, s) => n + pick(s), 0);
    const { applied, unknownParent, unknownBlock, malformed, ignored, outOfOrder } = this.#counts;
    return {
      numRanks: this.#numRanks,
      tokensPerBlock: this.#tokensPerBlock,
      blocks: sum((s) => s.blocks) + presenceBlocks,
      residencies: sum((s) => s.residencies) + presenceBlocks,
      bytesInUse: sum((s) => s.bytesInUse) + presenceBlocks * PRESENCE_BLOCK_BYTES,
      tableBytes: sum((s) => s.tableBytes),
      reservedBytes: sum((s) => s.reservedBytes),
      wasmMemoryBytes: sum((s) => s.wasmMemoryBytes),
      evictions: sum((s) => s.evictions),
      stampResets: sum((s) => s.stampResets),
      kvEvents: { applied, unknownParent, unknownBlock, malformed, ignored, outOfOrder },
      groups: this.#groups.length,
    };
  }

  /** The view as bytes {@link restoreEngineCacheView} turns back into one that matches and evicts as this one would. */
  snapshot(): Uint8Array {
    this.#live();
    const { problems: _problems, ...counts } = this.#counts;
    void _problems;
    return encodeViewSnapshot(this.options, this.#groups, counts);
  }

  /** @internal Takes the groups and counters of a checked snapshot (a fresh view only). */
  adoptState(groups: Group[], counts: Readonly<Record<(typeof COUNTED)[number], number>>): void {
    if (this.#groups.some((g) => !this.#isEmpty(g))) throw new AdpInputError("EngineCacheView", "takes a snapshot's state only while empty", "a view holding blocks");
    for (const g of this.#groups) this.#disposeGroup(g);
    this.#groups = groups;
    for (const k of COUNTED) this.#counts[k] = counts[k];
  }

  /** Releases the view; every later call throws. */
  dispose(): void {
    for (const g of this.#groups) this.#disposeGroup(g);
    this.#hasher?.dispose();
    this.#groups = [];
    this.#disposed = true;
  }
}

/** The configured groups, checked (read once: a getter that throws is a typed error). */
function readGroupSpecs(groups: unknown): readonly KvGroupSpec[] {
  if (groups === undefined) return [];
  const list = readInput("groups", () => (Array.isArray(groups) && groups.length <= MAX_KV_GROUPS ? groups.map((g: unknown) => (typeof g === "object" && g !== null ? { kind: (g as Record<string, unknown>).kind, slidingWindow: (g as Record<string, unknown>).slidingWindow } : { kind: g, slidingWindow: undefined })) : null));
  if (list === null) throw new AdpInputError("groups", `must be a list of at most ${MAX_KV_GROUPS} KV-cache groups`, groups);
  return list.map(({ kind, slidingWindow: w }, i) => {
    if (kind !== "full_attention" && kind !== "sliding_window" && kind !== "mamba") throw new AdpInputError(`groups[${i}].kind`, 'must be "full_attention", "sliding_window" or "mamba"', kind);
    if (kind === "sliding_window") {
      if (typeof w !== "number" || !Number.isSafeInteger(w) || w < 1 || w > 2 ** 31) throw new AdpInputError(`groups[${i}].slidingWindow`, "must be the window in tokens, an integer in [1, 2^31]", w);
      return Object.freeze({ kind, slidingWindow: w });
    }
    if (w !== undefined) throw new AdpInputError(`groups[${i}].slidingWindow`, "is only for sliding_window groups", w);
    return Object.freeze({ kind });
  });
}

/**
 * A new empty engine cache view: what an engine's KV cache holds per DP rank
 * and KV-cache group, matched as its own lookup would reuse.
 *
 * @example
 * ```ts
 * const view = createEngineCacheView({ numRanks: 2, tokensPerBlock: 16, groups: [{ kind: "full_attention" }, { kind: "sliding_window", slidingWindow: 32 }] });
 * view.applyKvEvents(batch); // vLLM's KVEventBatch, decoded
 * view.matchInto(out, promptTokens.subarray(0, promptTokens.length - 1));
 * ```
 */
export function createEngineCacheView(options: EngineCacheViewOptions): EngineCacheView {
  return new EngineCacheView(options);
}

/** An engine cache view from {@link EngineCacheView.snapshot}'s bytes (untrusted: checked whole; a typed error otherwise). */
export function restoreEngineCacheView(bytes: Uint8Array): EngineCacheView {
  const { state, sections } = decodeSnapshot(bytes, SNAPSHOT_KINDS.engineCache);
  const options = state.options;
  if (typeof options !== "object" || options === null || Array.isArray(options)) throw new AdpInputError("snapshot", "is not a valid engine cache view snapshot (no options)", "engine cache view");
  const view = new EngineCacheView(options as EngineCacheViewOptions);
  try {
    const { groups, counts } = readViewState(state, sections, view);
    view.adoptState(groups, counts);
    return view;
  } catch (error) {
    view.dispose();
    throw error;
  }
}
