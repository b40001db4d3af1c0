// One rank's engine map: the engine block hash → path key of each block a
// stored event named, kept in SHARDS maps by a hash of the engine hash.
//
// The map is bounded against the blocks its rank holds (bound): evicted paths
// leave stale entries behind, which a sweep deletes, and hashes naming a block
// another hash names too are forgotten oldest first. One map swept whole once
// it passed twice the blocks held stalled the event loop 171 ms at 525,000
// entries (a 16 MiB index fed single-block events); each shard is swept on its
// own share of the bound, so a sweep visits a 64th of that. Every step is a
// function of the events alone (insertion order, the hash's shard), so a
// restored twin sweeps as the original does: entries list shard by shard, each
// in insertion order, and are read back into the shards their hashes name.

import type { EngineHash } from "./kv-events.js";

/** A block's path key (lo, hi). */
export type PathKey = [number, number];

/** Maps a rank's engine hashes are spread over. */
const SHARDS = 64;
/** Engine hashes a map may hold beyond twice the blocks its rank holds (each shard its 64th). */
const SLACK = 1024;

/**
 * The shard of `h`: the top bits of a multiplicative hash of its two 32-bit
 * halves (a number), or of its characters. Mixed, not its low bits: an
 * engine's ids may share their low bits (multiples of a block size), and one
 * shard holding them all would keep its 64th of the bound for all of them.
 */
function shardOf(h: EngineHash): number {
  let x: number;
  if (typeof h === "number") x = (h % 4294967296 | 0) ^ Math.imul((h / 4294967296) | 0, 0x85ebca77);
  else {
    x = 0;
    for (let i = 0; i < h.length; i++) x = (Math.imul(x, 31) + h.charCodeAt(i)) | 0;
  }
  return Math.imul(x, 0x9e3779b1) >>> 26;
}

/** One rank's engine hashes and the path keys they name. */
export class EngineMap {
  /** The shards, each made when a hash first lands in it (none before: an index may have 65,536 ranks). */
  #shards: (Map<EngineHash, PathKey> | undefined)[] = [];

  /** Starts with `entries` (as {@link entries} lists them). */
  constructor(entries: Iterable<[EngineHash, PathKey]> = []) {
    for (const [h, k] of entries) this.set(h, k);
  }

  /** The path key `h` names, if any. */
  get(h: EngineHash): PathKey | undefined {
    return this.#shards[shardOf(h)]?.get(h);
  }

  /** Forgets `h`; returns the path key it named, if any. */
  take(h: EngineHash): PathKey | undefined {
    const shard = this.#shards[shardOf(h)];
    const key = shard?.get(h);
    shard?.delete(h);
    return key;
  }

  /** Names `key` by `h`, as its newest entry (a hash stored again goes last in the order the bound forgets in). */
  set(h: EngineHash, key: PathKey): void {
    const i = shardOf(h);
    const shard = (this.#shards[i] ??= new Map());
    shard.delete(h);
    shard.set(h, key);
  }

  /** Forgets everything. */
  clear(): void {
    this.#shards = [];
  }

  /** Every entry, shard by shard, each shard in insertion order. */
  entries(): [EngineHash, PathKey][] {
    return this.#shards.flatMap((s) => [...(s ?? [])]);
  }

  /**
   * Bounds each shard past its share of 2 × `held` + SLACK: its entries whose
   * paths `holds` says are gone go, then, past its share of 1.5 × `held` +
   * SLACK / 2, its oldest (hashes naming blocks other hashes name too). Not
   * past its share of `held`: a shard's part of the blocks held varies around
   * it (at 20,000 held, shards above it forgot 241 hashes of blocks still
   * held). A sweep deletes at least a quarter of what it visits (linear work
   * in all), and the map stays within 2 × held + SLACK after each event.
   */
  bound(held: number, holds: (key: PathKey) => boolean): void {
    const most = (2 * held + SLACK) / SHARDS;
    const keep = (1.5 * held + SLACK / 2) / SHARDS;
    for (const shard of this.#shards) {
      if (shard === undefined || shard.size <= most) continue;
      for (const [h, k] of shard) if (!holds(k)) shard.delete(h);
      for (const h of shard.keys()) {
        if (shard.size <= keep) break;
        shard.delete(h);
      }
    }
  }
}
