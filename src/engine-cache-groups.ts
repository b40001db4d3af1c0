// The KV-cache groups of an engine cache view (engine-cache.ts): how each kind
// of group holds its blocks and how much of a probe it lets the engine reuse.
//
//   full attention: a prefix index (contiguous prefixes; a removed block takes
//     its descendants with it).
//   sliding window, Mamba: presence, per rank — engine hash → path key, and a
//     count per path key (two hashes may name one key, and a hash may be
//     stored again under another); blocks enter and leave one by one, the
//     oldest forgotten first past the bound.
//
// Path keys are the prefix index's chained block hashes (the namespace seed,
// then each block's tokens: assembly/prefix-index/table.ts `chain`), so a
// probe finds a presence group's blocks from its tokens.

import type { EngineHash } from "./kv-events.js";
import type { PrefixIndex } from "./prefix-index.js";

/** How a group's cache is looked up. */
export type KvGroupKind = "full_attention" | "sliding_window" | "mamba";

/** A KV-cache group as configured (vLLM's `group_idx`-th group), when its events do not say what it is. */
export interface KvGroupSpec {
  /** How the engine looks the group up. */
  readonly kind: KvGroupKind;
  /** The sliding window in tokens (sliding_window only). */
  readonly slidingWindow?: number;
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

/** The kind a vLLM `kv_cache_spec_kind` names, or undefined. */
export const kindNamed = (kind: string | null): KvGroupKind | undefined => (kind !== null && Object.hasOwn(KIND_OF, kind) ? KIND_OF[kind] : undefined);

/** A block's path key as text: 16 hex digits. */
export type PathKey = string;

/** A group looked up by presence (sliding window, Mamba). */
export interface PresenceGroup {
  readonly kind: "sliding_window" | "mamba";
  /** Held blocks right before the hit point the engine needs (sliding window: cdiv(window - 1, block)); Mamba: 1. */
  readonly need: number;
  /** The window in tokens, or null (Mamba). */
  readonly window: number | null;
  /** Per rank: engine hash → the path key of the block it names, oldest first. */
  readonly byHash: Map<EngineHash, PathKey>[];
  /** Per rank: path key → how many hashes name it (a key is held while one does). */
  readonly held: Map<PathKey, number>[];
}

/** A group looked up as a prefix (full attention, TensorRT-LLM's windows). */
export interface PrefixGroup {
  readonly kind: "full_attention";
  /** The group's blocks, one rank per DP rank. */
  readonly index: PrefixIndex;
}

/** One group of a view: its key (`g<group_idx>`, `w<window_size>`, `w`), whether its kind was only assumed, and its blocks. */
export type Group = { readonly key: string; readonly assumed: boolean } & (PrefixGroup | PresenceGroup);

/** Adds a block (hash → key) to one rank of a presence group; a hash stored again under another key lets the old key go. */
export function holdBlock(g: PresenceGroup, rank: number, hash: EngineHash, key: PathKey): void {
  const byHash = g.byHash[rank]!;
  const old = byHash.get(hash);
  if (old !== undefined) {
    byHash.delete(hash); // re-inserted below: the newest again, for the oldest-first bound
    release(g.held[rank]!, old);
  }
  byHash.set(hash, key);
  const held = g.held[rank]!;
  held.set(key, (held.get(key) ?? 0) + 1);
}

/** Removes the block a hash names from one rank of a presence group; false when the rank does not hold it. */
export function dropBlock(g: PresenceGroup, rank: number, hash: EngineHash): boolean {
  const byHash = g.byHash[rank]!;
  const key = byHash.get(hash);
  if (key === undefined) return false;
  byHash.delete(hash);
  release(g.held[rank]!, key);
  return true;
}

/**
 * Each presence map's oldest-first cursor while the map is at its bound: a
 * Map iterator stays live over deletions and inserts, and everything before
 * it has been forgotten. A fresh iterator each time would step again over
 * every entry deleted since V8 last compacted the table (at a bound of
 * 131,072, 25–50 µs an event against 5–7 below it). It is dropped once the
 * map is within its bound, and on a clear: a parked iterator keeps each table
 * V8 has since replaced alive until it moves.
 */
const OLDEST = new WeakMap<Map<EngineHash, PathKey>, Iterator<[EngineHash, PathKey]>>();

/** Forgets the oldest blocks of one rank of a presence group past `bound`. */
export function boundBlocks(g: PresenceGroup, rank: number, bound: number): void {
  const byHash = g.byHash[rank]!;
  if (byHash.size <= bound) {
    OLDEST.delete(byHash);
    return;
  }
  let oldest = OLDEST.get(byHash);
  while (byHash.size > bound) {
    // Past the bound there is an entry after the cursor (all before it are gone); a new cursor when there is none.
    let next = oldest?.next();
    if (next === undefined || next.done === true) {
      oldest = byHash.entries();
      OLDEST.set(byHash, oldest);
      next = oldest.next();
    }
    const [hash, key] = next.value as [EngineHash, PathKey];
    byHash.delete(hash);
    release(g.held[rank]!, key);
  }
}

/** Empties one rank of a presence group. */
export function clearBlocks(g: PresenceGroup, rank: number): void {
  g.byHash[rank]!.clear();
  g.held[rank]!.clear();
  OLDEST.delete(g.byHash[rank]!);
}

/** One hash fewer names `key`. */
function release(held: Map<PathKey, number>, key: PathKey): void {
  const n = held.get(key) ?? 0;
  if (n <= 1) held.delete(key);
  else held.set(key, n - 1);
}

/** The blocks of a probe (as path keys) a presence group lets a hit keep, below `max` (vLLM's find_longest_cache_hit for its kind). */
export function presenceHit(g: PresenceGroup, held: ReadonlyMap<PathKey, number>, keys: readonly PathKey[], max: number): number {
  if (g.kind === "mamba") {
    // MambaManager: the last block held at or before the hit point; its state is all the engine needs.
    for (let i = max - 1; i >= 0; i--) if (held.has(keys[i]!)) return i + 1;
    return 0;
  }
  // SlidingWindowManager: from the right, the first run of `need` held blocks ends the hit.
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

/** 2^64 - 1, for u64 arithmetic on bigints. */
const U64 = (1n << 64n) - 1n;
/** The prefix index's chain multiplier. */
const CHAIN_MUL = 0x9e3779b97f4a7c15n;

/** The prefix index's `chain(parent, block)`: rotl(parent, 23) * φ ^ block, in u64. */
export function chain(parent: bigint, block: bigint): bigint {
  const rot = ((parent << 23n) | (parent >> 41n)) & U64;
  return ((rot * CHAIN_MUL) & U64) ^ block;
}

/** A u64 from two u32 words. */
export const u64 = (lo: number, hi: number): bigint => (BigInt(hi >>> 0) << 32n) | BigInt(lo >>> 0);
/** A path key's text form. */
export const keyText = (k: bigint): PathKey => k.toString(16).padStart(16, "0");
/** A prefix index's path key (lo, hi) as a bigint. */
export const keyOfWords = (k: readonly [number, number]): bigint => u64(k[0], k[1]);
