// What an engine's KV cache would reuse for a prompt, KV-cache group by group.
//
// A hybrid model keeps one cache per KV-cache group (vLLM: full-attention,
// sliding-window and Mamba layers each in their own group; TensorRT-LLM with
// variable sliding windows: one radix tree per attention window), and the
// engine reuses a prefix only as far as every group allows. The view keeps each
// group apart and matches as the engines' own lookups do (docs/engine-events.md):
//
//   full attention (and TensorRT-LLM's windows, and any group whose kind is not
//     known): the contiguous prefix it holds from the first block; a removed
//     block takes its descendants with it. A prefix-index per group.
//   sliding window (vLLM's SlidingWindowManager.find_longest_cache_hit): only the
//     cdiv(window - 1, block) blocks right before the hit point must be held, so
//     blocks come and go one by one (no descendants) and the longest hit is
//     found scanning from the right; without such a run, the leading run.
//   Mamba (MambaManager.find_longest_cache_hit): the last held block at or
//     before the hit point (its state there is all the engine needs).
//
// The engine's hit is vLLM's HybridKVCacheCoordinator fixed point: start from
// the whole probe, let each group (full attention first) cut it to what it
// allows below the current length, and repeat until no group cuts it. With
// only full-attention groups that is their minimum (TensorRT-LLM's VSWA reuse
// since PR #10875). Reading an unknown group as full attention only ever counts
// fewer tokens than the engine reuses, never more.
//
// Blocks of the sliding-window and Mamba groups are identified by their path
// keys (the prefix index's chained block hashes: the namespace seed, then each
// block's tokens), so a probe finds them from its tokens; the engine hash →
// path key map per rank, shared by all groups, resolves their parents.

import { AdpInputError, readInput } from "./errors.js";
import { checkRank } from "./batch.js";
import { MAX_KV_GROUPS, parseKvEvents, type EngineHash, type KvEvent, type KvGroupRef } from "./kv-events.js";
import { createPrefixIndex, namespaceSeed, restorePrefixIndex, MAX_INDEX_BYTES, MAX_INDEX_RANKS, PrefixIndex, type KvEventsResult, type PrefixIndexStats, type PrefixNamespace } from "./prefix-index.js";
import { decodeSnapshot, encodeSnapshot, SNAPSHOT_KINDS } from "./snapshot-format.js";

/** How a group's cache is looked up. */
export type KvGroupKind = "full_attention" | "sliding_window" | "mamba";

/** A KV-cache group as configured (vLLM's `group_idx`-th group), when its events do not say what it is. */
export interface KvGroupSpec {
  readonly kind: KvGroupKind;
  /** The sliding window in tokens (sliding_window only). */
  readonly slidingWindow?: number;
}

/** Options of {@link createEngineCacheView}. */
export interface EngineCacheViewOptions {
  /** The engine's data-parallel ranks. */
  readonly numRanks: number;
  /** Tokens per KV-cache block. */
  readonly tokensPerBlock: number;
  /** Memory budget of each full-attention group's index; the other groups hold at most this / 64 blocks each over all ranks. */
  readonly maxMemoryBytes?: number;
  /** vLLM's groups by `group_idx`, for engines whose events do not name their kind (group i is `groups[i]`). */
  readonly groups?: readonly KvGroupSpec[];
}

/** vLLM's spec kinds read as the ones the view knows (others: full attention, which can only under-count). */
const KIND_OF: Readonly<Record<string, KvGroupKind>> = {
  full_attention: "full_attention",
  mla_attention: "full_attention",
  sink_full_attention: "full_attention",
  sliding_window: "sliding_window",
  sliding_window_mla: "sliding_window",
  mamba: "mamba",
};

/** Bytes one block of a sliding-window or Mamba group is reckoned at (two map entries and a key string). */
const PRESENCE_BLOCK_BYTES = 64;

/** A block's path key, as 16 hex digits. */
type PathKey = string;

/** A group looked up by presence (sliding window, Mamba): per rank, engine hash → path key, and the keys held. */
interface PresenceGroup {
  readonly kind: "sliding_window" | "mamba";
  /** Blocks before the hit point that must be held (sliding window: cdiv(window - 1, block)). */
  readonly need: number;
  readonly window: number | null;
  readonly byHash: Map<EngineHash, PathKey>[];
  readonly held: Set<PathKey>[];
}

/** A group looked up as a prefix (full attention, TensorRT-LLM windows). */
interface PrefixGroup {
  readonly kind: "full_attention";
  readonly index: PrefixIndex;
}

/** One group of the view. */
type Group = { readonly key: string } & (PrefixGroup | PresenceGroup);

/** 2^64 - 1, for u64 arithmetic on bigints. */
const U64 = (1n << 64n) - 1n;
/** The prefix index's chain multiplier (assembly/prefix-index/table.ts `chain`). */
const CHAIN_MUL = 0x9e3779b97f4a7c15n;

/** The prefix index's `chain(parent, block)`: rotl(parent, 23) * φ ^ block, in u64. */
function chain(parent: bigint, block: bigint): bigint {
  const rot = ((parent << 23n) | (parent >> 41n)) & U64;
  return ((rot * CHAIN_MUL) & U64) ^ block;
}

/** A u64 from two u32 words. */
const u64 = (lo: number, hi: number): bigint => (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
/** A path key's text form. */
const keyText = (k: bigint): PathKey => k.toString(16).padStart(16, "0");

/** Counters of a fresh result. */
const emptyResult = (): KvEventsResult => ({ applied: 0, unknownParent: 0, unknownBlock: 0, malformed: 0, ignored: 0, outOfOrder: 0, partialTails: 0, problems: [] });

/**
 * An engine's KV cache per data-parallel rank and KV-cache group, fed by its
 * KV events, matched as the engine's lookup would reuse. With one group it is
 * exactly a {@link PrefixIndex}.
 */
export class EngineCacheView {
  readonly #numRanks: number;
  readonly #tokensPerBlock: number;
  readonly #maxMemoryBytes: number;
  readonly #declared: readonly KvGroupSpec[];
  /** Groups in the order first seen (deterministic: the events' order). */
  #groups: Group[] = [];
  /** Per rank: engine hash → path key, for the parents of presence groups' blocks (kept while any group is one). */
  #chains: Map<EngineHash, bigint>[];
  /** Hashes tokens into block hashes (the first full group's index, or one of its own). */
  #hasher: PrefixIndex | null = null;
  readonly #counts = emptyResult();
  #disposed = false;

  /** @internal Use {@link createEngineCacheView}. */
  constructor(options: EngineCacheViewOptions) {
    const { numRanks, tokensPerBlock, maxMemoryBytes, groups } = readInput("options", () => ({ numRanks: options.numRanks, tokensPerBlock: options.tokensPerBlock, maxMemoryBytes: options.maxMemoryBytes, groups: options.groups }));
    if (!Number.isSafeInteger(numRanks) || numRanks < 1 || numRanks > MAX_INDEX_RANKS) throw new AdpInputError("numRanks", `must be an integer in [1, ${MAX_INDEX_RANKS}]`, numRanks);
    if (!Number.isSafeInteger(tokensPerBlock) || tokensPerBlock < 1 || tokensPerBlock > 1 << 20) throw new AdpInputError("tokensPerBlock", "must be an integer in [1, 2^20]", tokensPerBlock);
    if (maxMemoryBytes !== undefined && (!Number.isSafeInteger(maxMemoryBytes) || maxMemoryBytes < 1 || maxMemoryBytes > MAX_INDEX_BYTES)) throw new AdpInputError("maxMemoryBytes", "must be an integer in [1, 2^31]", maxMemoryBytes);
    this.#numRanks = numRanks;
    this.#tokensPerBlock = tokensPerBlock;
    this.#maxMemoryBytes = maxMemoryBytes ?? MAX_INDEX_BYTES;
    this.#declared = readGroupSpecs(groups);
    this.#chains = Array.from({ length: numRanks }, () => new Map());
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

  /** The groups seen so far: key, kind, and the sliding window where there is one. */
  get groups(): { key: string; kind: KvGroupKind; slidingWindow: number | null }[] {
    return this.#groups.map((g) => ({ key: g.key, kind: g.kind, slidingWindow: g.kind === "full_attention" ? null : g.window }));
  }

  /** A typed error once disposed. */
  #live(): void {
    if (this.#disposed) throw new AdpInputError("EngineCacheView", "has been disposed", "a disposed view");
  }

  /** Whether any group is looked up by presence (then chains are kept). */
  get #hybrid(): boolean {
    return this.#groups.some((g) => g.kind !== "full_attention") || this.#declared.some((d) => d.kind !== "full_attention");
  }

  /** The group an event names, made when first seen; null when the view holds as many as it may. */
  #group(ref: KvGroupRef): Group | null {
    const known = this.#groups.find((g) => g.key === ref.key);
    if (known !== undefined) return known;
    if (this.#groups.length >= MAX_KV_GROUPS) return null;
    const declared = ref.key.startsWith("g") ? this.#declared[Number(ref.key.slice(1))] : undefined;
    const kind = (ref.kind !== null ? KIND_OF[ref.kind] : undefined) ?? declared?.kind ?? "full_attention";
    const window = ref.slidingWindow ?? declared?.slidingWindow ?? null;
    const group = this.#makeGroup(ref.key, kind, window);
    this.#groups.push(group);
    return group;
  }

  /** A new empty group (a sliding window without a size is read as full attention). */
  #makeGroup(key: string, kind: KvGroupKind, window: number | null): Group {
    if (kind === "mamba" || (kind === "sliding_window" && window !== null)) {
      const need = kind === "mamba" ? 1 : Math.ceil((window! - 1) / this.#tokensPerBlock);
      return { key, kind, need, window, byHash: this.#perRank(() => new Map()), held: this.#perRank(() => new Set()) };
    }
    return { key, kind: "full_attention", index: createPrefixIndex({ numRanks: this.#numRanks, tokensPerBlock: this.#tokensPerBlock, maxMemoryBytes: this.#maxMemoryBytes }) };
  }

  /** One value per rank. */
  #perRank<T>(make: () => T): T[] {
    return Array.from({ length: this.#numRanks }, make);
  }

  /** The index that hashes tokens into block hashes. */
  #hashIndex(): PrefixIndex {
    const full = this.#groups.find((g): g is Group & PrefixGroup => g.kind === "full_attention");
    if (full !== undefined) return full.index;
    this.#hasher ??= createPrefixIndex({ numRanks: 1, tokensPerBlock: this.#tokensPerBlock, maxMemoryBytes: 1 << 20 });
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
    const parsed = parseKvEvents(events, this.#numRanks, this.#tokensPerBlock, rank, loraIds);
    const result = emptyResult();
    // Consecutive events of one full-attention group go to its index in one call (a plain model: the whole batch).
    let run: KvEvent[] = [];
    let runIndex: PrefixIndex | null = null;
    const flush = () => {
      if (runIndex !== null && run.length > 0) runIndex.applyParsed(run, result);
      run = [];
      runIndex = null;
    };
    for (const e of parsed) {
      if (e.kind === "malformed" || e.kind === "ignored") {
        flush();
        if (e.kind === "malformed") {
          result.malformed++;
          if (result.problems.length < 100) result.problems.push(e.reason);
        } else {
          result.ignored++;
          if (e.partialTail === true) result.partialTails++;
        }
        continue;
      }
      if (e.kind === "cleared") {
        flush();
        this.#clear(e.rank);
        result.applied++;
        continue;
      }
      const group = this.#group(e.group);
      if (group === null) {
        flush();
        result.malformed++;
        if (result.problems.length < 100) result.problems.push(`more than ${MAX_KV_GROUPS} KV-cache groups`);
        continue;
      }
      if (this.#hybrid) this.#track(e);
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
    for (const k of ["applied", "unknownParent", "unknownBlock", "malformed", "ignored", "outOfOrder", "partialTails"] as const) this.#counts[k] += result[k];
    return result;
  }

  /** Records a stored event's blocks' path keys in its rank's chain map (the parents presence groups resolve). */
  #track(e: KvEvent & { kind: "stored" | "removed" }): void {
    if (e.kind !== "stored" || e.blocks[0]!.tokens === null) return;
    const keys = this.#pathKeys(e);
    if (keys === null) return;
    const map = this.#chains[e.rank]!;
    keys.forEach((k, i) => {
      map.delete(e.blocks[i]!.hash);
      map.set(e.blocks[i]!.hash, k);
    });
    // Oldest first out: a parent forgotten only makes a later block's event unknown.
    const bound = this.#presenceBound();
    for (const h of map.keys()) {
      if (map.size <= bound) break;
      map.delete(h);
    }
  }

  /** Most blocks a presence group holds over all ranks (and the chain maps' bound per rank). */
  #presenceBound(): number {
    return Math.max(1024, Math.floor(this.#maxMemoryBytes / PRESENCE_BLOCK_BYTES / this.#numRanks));
  }

  /** The path keys of a stored event's blocks (tokens given), or null when its parent is not known. */
  #pathKeys(e: KvEvent & { kind: "stored" }): bigint[] | null {
    let key: bigint;
    if (e.parent === null) {
      const seed = namespaceSeed({ loraTaskId: e.loraTaskId, cacheSalt: e.cacheSalt });
      key = u64(seed[0], seed[1]);
    } else {
      const parent = this.#chains[e.rank]!.get(e.parent);
      if (parent === undefined) return null;
      key = parent;
    }
    const tokens = new Uint32Array(e.blocks.length * this.#tokensPerBlock);
    e.blocks.forEach((b, i) => tokens.set(b.tokens!, i * this.#tokensPerBlock));
    const words = this.#hashIndex().blockHashes(tokens);
    const out: bigint[] = [];
    for (let i = 0; i < e.blocks.length; i++) {
      key = chain(key, u64(words[2 * i]!, words[2 * i + 1]!));
      out.push(key);
    }
    return out;
  }

  /** Applies a stored or removed event to a presence group: blocks enter and leave one by one. */
  #applyPresence(group: Group & PresenceGroup, e: KvEvent & { kind: "stored" | "removed" }, result: KvEventsResult): void {
    const byHash = group.byHash[e.rank]!;
    const held = group.held[e.rank]!;
    if (e.kind === "removed") {
      let known = 0;
      for (const h of e.hashes) {
        const k = byHash.get(h);
        if (k === undefined) {
          result.unknownBlock++;
          continue;
        }
        byHash.delete(h);
        held.delete(k);
        known++;
      }
      if (known > 0) result.applied++;
      return;
    }
    if (e.blocks[0]!.tokens === null) {
      result.ignored++; // a presence group is found by tokens; keyed blocks (traces) name none
      return;
    }
    const path = this.#pathKeysKnown(e);
    if (path === null) {
      result.unknownParent++;
      return;
    }
    path.forEach((k, i) => {
      const text = keyText(k);
      byHash.set(e.blocks[i]!.hash, text);
      held.add(text);
    });
    const bound = this.#presenceBound();
    for (const h of byHash.keys()) {
      if (byHash.size <= bound) break;
      held.delete(byHash.get(h)!);
      byHash.delete(h);
    }
    result.applied++;
  }

  /** A stored event's path keys from the chain map (recorded by #track), or computed when the map has them not. */
  #pathKeysKnown(e: KvEvent & { kind: "stored" }): bigint[] | null {
    const map = this.#chains[e.rank]!;
    const recorded = e.blocks.map((b) => map.get(b.hash));
    if (recorded.every((k) => k !== undefined)) return recorded as bigint[];
    return this.#pathKeys(e);
  }

  /** Empties one rank of every group. */
  #clear(rank: number): void {
    for (const g of this.#groups) {
      if (g.kind === "full_attention") g.index.clearRank(rank);
      else {
        g.byHash[rank]!.clear();
        g.held[rank]!.clear();
      }
    }
    this.#chains[rank]!.clear();
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
  matchInto(out: Uint32Array, probe: Uint32Array, ns?: PrefixNamespace | null): void {
    this.#live();
    if (!(out instanceof Uint32Array) || out.length < this.#numRanks) throw new AdpInputError("out", `must be a Uint32Array of at least ${this.#numRanks} slots`, out);
    if (!(probe instanceof Uint32Array)) throw new AdpInputError("probe", "must be a Uint32Array of token ids", probe);
    const only = this.#groups.length === 1 ? this.#groups[0]! : null;
    // One full-attention group (a plain model, one TensorRT-LLM window): its prefix is the engine's hit.
    if (only !== null && only.kind === "full_attention") {
      only.index.matchInto(out, probe, ns);
      return;
    }
    const tpb = this.#tokensPerBlock;
    const maxBlocks = Math.floor(probe.length / tpb);
    const full = this.#groups.filter((g): g is Group & PrefixGroup => g.kind === "full_attention");
    const presence = this.#groups.filter((g): g is Group & PresenceGroup => g.kind !== "full_attention");
    if (this.#groups.length === 0) {
      out.fill(0, 0, this.#numRanks);
      return;
    }
    // Each full group's contiguous prefix, in blocks, per rank.
    const fullBlocks = full.map((g) => {
      const m = new Uint32Array(this.#numRanks);
      g.index.matchInto(m, probe, ns);
      return m;
    });
    const keys = presence.length > 0 ? this.#probeKeys(probe, maxBlocks, ns) : [];
    for (let r = 0; r < this.#numRanks; r++) {
      let hit = maxBlocks;
      for (;;) {
        let cur = hit;
        for (const m of fullBlocks) cur = Math.min(cur, Math.floor(m[r]! / tpb));
        for (const g of presence) cur = Math.min(cur, presenceHit(g, g.held[r]!, keys, cur));
        if (cur >= hit) break;
        hit = cur;
      }
      out[r] = hit * tpb;
    }
  }

  /** Each rank's reuse of `probe` (see {@link matchInto}), as a plain array. */
  match(probe: ArrayLike<number>, ns?: PrefixNamespace | null): number[] {
    const out = new Uint32Array(this.#numRanks);
    this.matchInto(out, probe instanceof Uint32Array ? probe : Uint32Array.from(probe), ns);
    return [...out];
  }

  /** The path keys of the probe's first `count` blocks in namespace `ns`. */
  #probeKeys(probe: Uint32Array, count: number, ns: PrefixNamespace | null | undefined): PathKey[] {
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
    return this.#groups.reduce((n, g) => n + (g.kind === "full_attention" ? g.index.blockCount(rank) : g.held[rank]!.size), 0);
  }

  /** Counters and sizes, summed over the groups (a full group's index reports as a prefix index does). */
  stats(): PrefixIndexStats & { groups: number } {
    this.#live();
    const parts = this.#groups.filter((g): g is Group & PrefixGroup => g.kind === "full_attention").map((g) => g.index.stats());
    const presenceBlocks = this.#groups.reduce((n, g) => n + (g.kind === "full_attention" ? 0 : g.held.reduce((m, s) => m + s.size, 0)), 0);
    const chainEntries = this.#chains.reduce((n, m) => n + m.size, 0);
    const sum = (pick: (s: PrefixIndexStats) => number) => parts.reduce((n, s) => n + pick(s), 0);
    const { problems: _problems, partialTails: _tails, ...kvEvents } = this.#counts;
    void _problems, _tails;
    return {
      numRanks: this.#numRanks,
      tokensPerBlock: this.#tokensPerBlock,
      blocks: sum((s) => s.blocks) + presenceBlocks,
      residencies: sum((s) => s.residencies) + presenceBlocks,
      bytesInUse: sum((s) => s.bytesInUse) + (presenceBlocks + chainEntries) * PRESENCE_BLOCK_BYTES,
      tableBytes: sum((s) => s.tableBytes),
      reservedBytes: sum((s) => s.reservedBytes),
      wasmMemoryBytes: sum((s) => s.wasmMemoryBytes),
      evictions: sum((s) => s.evictions),
      stampResets: sum((s) => s.stampResets),
      kvEvents,
      groups: this.#groups.length,
    };
  }

  /** The view as bytes {@link restoreEngineCacheView} turns back into one that matches and evicts as this one would. */
  snapshot(): Uint8Array {
    this.#live();
    const sections: Uint8Array[] = [];
    const groups = this.#groups.map((g) => {
      if (g.kind === "full_attention") {
        sections.push(g.index.snapshot());
        return { key: g.key, kind: g.kind, section: sections.length - 1 };
      }
      return { key: g.key, kind: g.kind, window: g.window, byHash: g.byHash.map((m) => [...m]) };
    });
    const { problems: _problems, ...counts } = this.#counts;
    void _problems;
    const state = {
      options: { numRanks: this.#numRanks, tokensPerBlock: this.#tokensPerBlock, maxMemoryBytes: this.#maxMemoryBytes, groups: this.#declared },
      groups,
      chains: this.#chains.map((m) => [...m].map(([h, k]) => [h, keyText(k)])),
      counts,
    };
    return encodeSnapshot(SNAPSHOT_KINDS.engineCache, state, sections);
  }

  /** @internal Loads checked snapshot state into this fresh view. */
  load(state: Record<string, unknown>, sections: readonly Uint8Array[]): void {
    const groups = state.groups;
    if (!Array.isArray(groups) || groups.length > MAX_KV_GROUPS) throw bad("its groups are not a list of at most 16");
    const chains = state.chains;
    if (!Array.isArray(chains) || chains.length !== this.#numRanks) throw bad("its chain maps are not one per rank");
    const made: Group[] = [];
    try {
      for (const raw of groups) {
        if (typeof raw !== "object" || raw === null) throw bad("a group is not an object");
        const g = raw as Record<string, unknown>;
        if (typeof g.key !== "string" || !/^(g\d{1,2}|w\d{0,10})$/.test(g.key) || made.some((m) => m.key === g.key)) throw bad("a group's key is not one of an engine's");
        if (g.kind === "full_attention") {
          const bytes = typeof g.section === "number" ? sections[g.section] : undefined;
          if (bytes === undefined) throw bad("a group's index section is missing");
          const index = restorePrefixIndex(bytes);
          if (index.numRanks !== this.#numRanks || index.tokensPerBlock !== this.#tokensPerBlock) {
            index.dispose();
            throw bad("a group's index has another shape");
          }
          made.push({ key: g.key, kind: "full_attention", index });
        } else if (g.kind === "sliding_window" || g.kind === "mamba") {
          const window = g.kind === "mamba" ? null : g.window;
          if (window !== null && (typeof window !== "number" || !Number.isSafeInteger(window) || window < 1)) throw bad("a sliding window is not a positive integer");
          const group = this.#makeGroup(g.key, g.kind, window);
          if (group.kind === "full_attention" || !Array.isArray(g.byHash) || g.byHash.length !== this.#numRanks) throw bad("a group's blocks are not one list per rank");
          g.byHash.forEach((entries: unknown, r: number) => {
            for (const [h, k] of readEntries(entries, this.#presenceBound())) {
              group.byHash[r]!.set(h, k);
              group.held[r]!.add(k);
            }
          });
          made.push(group);
        } else throw bad("a group's kind is not one the view knows");
      }
      const maps = chains.map((entries: unknown) => new Map(readEntries(entries, this.#presenceBound()).map(([h, k]) => [h, BigInt(`0x${k}`)])));
      this.#groups = made;
      this.#chains = maps;
    } catch (error) {
      for (const g of made) if (g.kind === "full_attention") g.index.dispose();
      throw error;
    }
    const counts = state.counts;
    if (typeof counts === "object" && counts !== null) {
      for (const k of ["applied", "unknownParent", "unknownBlock", "malformed", "ignored", "outOfOrder", "partialTails"] as const) {
        const v = (counts as Record<string, unknown>)[k];
        if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) this.#counts[k] = v;
      }
    }
  }

  /** Releases the view; every later call throws. */
  dispose(): void {
    for (const g of this.#groups) if (g.kind === "full_attention") g.index.dispose();
    this.#hasher?.dispose();
    this.#groups = [];
    this.#disposed = true;
  }
}

/** The tokens a presence group lets a hit keep, below `max` blocks (vLLM's find_longest_cache_hit for its kind). */
function presenceHit(g: PresenceGroup, held: Set<PathKey>, keys: readonly PathKey[], max: number): number {
  if (g.kind === "mamba") {
    for (let i = max - 1; i >= 0; i--) if (held.has(keys[i]!)) return i + 1;
    return 0;
  }
  let run = 0;
  for (let i = max - 1; i >= 0; i--) {
    if (held.has(keys[i]!)) {
      run++;
      if (run >= g.need) return i + run;
    } else run = 0;
  }
  // No run as long as the window needs: the blocks held from the first on are still a hit.
  return run;
}

/** A snapshot error. */
const bad = (why: string) => new AdpInputError("snapshot", `is not a valid engine cache view snapshot (${why})`, "engine cache view");

/** [engine hash, path key] pairs from a snapshot, checked. */
function readEntries(entries: unknown, bound: number): [EngineHash, PathKey][] {
  if (!Array.isArray(entries) || entries.length > bound) throw bad("a block list is not a list within the view's bound");
  const out: [EngineHash, PathKey][] = [];
  for (const e of entries) {
    if (!Array.isArray(e) || e.length !== 2) throw bad("a block entry is not a pair");
    const [h, k] = e as unknown[];
    const hashOk = (typeof h === "number" && Number.isSafeInteger(h)) || (typeof h === "string" && /^(-?\d{1,40}|0x[0-9a-f]{2,128})$/.test(h));
    if (!hashOk || typeof k !== "string" || !/^[0-9a-f]{16}$/.test(k)) throw bad("a block entry is not an engine hash and a path key");
    out.push([h as EngineHash, k]);
  }
  return out;
}

/** The configured groups, checked. */
function readGroupSpecs(groups: unknown): readonly KvGroupSpec[] {
  if (groups === undefined) return [];
  if (!Array.isArray(groups) || groups.length > MAX_KV_GROUPS) throw new AdpInputError("groups", `must be a list of at most ${MAX_KV_GROUPS} KV-cache groups`, groups);
  return groups.map((g: unknown, i) => {
    const spec = (typeof g === "object" && g !== null ? g : {}) as Record<string, unknown>;
    if (spec.kind !== "full_attention" && spec.kind !== "sliding_window" && spec.kind !== "mamba") throw new AdpInputError(`groups[${i}].kind`, 'must be "full_attention", "sliding_window" or "mamba"', spec.kind);
    if (spec.kind === "sliding_window") {
      const w = spec.slidingWindow;
      if (typeof w !== "number" || !Number.isSafeInteger(w) || w < 1 || w > 2 ** 31) throw new AdpInputError(`groups[${i}].slidingWindow`, "must be the window in tokens, an integer in [1, 2^31]", w);
      return Object.freeze({ kind: spec.kind, slidingWindow: w });
    }
    if (spec.slidingWindow !== undefined) throw new AdpInputError(`groups[${i}].slidingWindow`, "is only for sliding_window groups", spec.slidingWindow);
    return Object.freeze({ kind: spec.kind as KvGroupKind });
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

/** An engine cache view from {@link EngineCacheView.snapshot}'s bytes (untrusted: checked whole). */
export function restoreEngineCacheView(bytes: Uint8Array): EngineCacheView {
  const { state, sections } = decodeSnapshot(bytes, SNAPSHOT_KINDS.engineCache);
  const options = state.options as Record<string, unknown> | undefined;
  if (typeof options !== "object" || options === null) throw bad("no options");
  const view = new EngineCacheView({ numRanks: options.numRanks as number, tokensPerBlock: options.tokensPerBlock as number, maxMemoryBytes: options.maxMemoryBytes as number, groups: options.groups as KvGroupSpec[] });
  view.load(state, sections);
  return view;
}
