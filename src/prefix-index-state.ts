// The JSON half of a prefix-index snapshot, checked field by field before it
// is used: a snapshot that passed its checksum may still be crafted, and
// whatever it says must either describe an index that keeps every promise or
// be refused with AdpInputError naming `snapshot`. (The binary half, the
// node records, is checked by the core as it loads them.)

import { engineHash, type EngineHash } from "./kv-events.js";
import { AdpInputError } from "./errors.js";
import type { KvEventCounts, PrefixIndexOptions } from "./prefix-index.js";

/** A prefix index's snapshot state, checked. */
export interface IndexState {
  readonly pathKeys: number;
  readonly options: PrefixIndexOptions;
  /** Nodes in the records section. */
  readonly nodes: number;
  /** The stamp counter. */
  readonly stamp: number;
  readonly evictions: number;
  readonly stampResets: number;
  /** Per rank: [engine hash, [path key lo, hi]]. */
  readonly engineBlocks: [EngineHash, [number, number]][][];
  /** Per rank: the last event_id seen, or null. */
  readonly lastEventId: (number | null)[];
  readonly eventCounts: KvEventCounts;
  /** CRC-32C of tokensPerBlock (u32) and the records (see `recordsSeal`). */
  readonly seal: number;
}

/** The counters a snapshot's `eventCounts` must hold, exactly. */
const EVENT_COUNT_KEYS = ["applied", "unknownParent", "unknownBlock", "malformed", "ignored", "outOfOrder"] as const;

/** Throws the typed error of a snapshot whose state breaks `rule` at `where`. */
function refuse(where: string, rule: string, received: unknown): never {
  throw new AdpInputError("snapshot", `is not a valid snapshot (prefix index ${where} ${rule})`, received);
}

/**
 * The largest counter a snapshot may carry: any finite integer. Counters are
 * doubles that stop growing at 2^53 (x + 1 === x there), so refusing the
 * unsafe ones would make a snapshot taken after restoring 2^53 − 1 unrestorable.
 */
const MAX_COUNTER = Number.MAX_VALUE;

/** Whether `v` is an integer in [0, max]. */
const isCount = (v: unknown, max: number): v is number => typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= max;

/** Checks the JSON state of a prefix-index snapshot for an index of `numRanks` ranks. */
export function readIndexState(raw: Record<string, unknown>, numRanks: number): IndexState {
  const { nodes, stamp, evictions, stampResets, engineBlocks, lastEventId, eventCounts } = raw;
  if (!isCount(nodes, 2 ** 32 - 1)) refuse("nodes", "must be a node count", nodes);
  if (!isCount(stamp, 2 ** 32 - 1)) refuse("stamp", "must be a u32 stamp", stamp);
  if (!isCount(evictions, MAX_COUNTER)) refuse("evictions", "must be a non-negative integer", evictions);
  if (!isCount(stampResets, 2 ** 32 - 1)) refuse("stampResets", "must be a u32 count", stampResets);
  if (!Array.isArray(engineBlocks) || engineBlocks.length !== numRanks) refuse("engineBlocks", `must hold one map per rank (${numRanks})`, engineBlocks);
  const maps: [EngineHash, [number, number]][][] = [];
  for (let r = 0; r < numRanks; r++) {
    const entries: unknown = engineBlocks[r];
    if (!Array.isArray(entries)) refuse(`engineBlocks[${r}]`, "must be a list of [hash, [lo, hi]]", entries);
    const seen = new Set<EngineHash>();
    const map: [EngineHash, [number, number]][] = [];
    for (const entry of entries) {
      const ok = Array.isArray(entry) && entry.length === 2 && Array.isArray(entry[1]) && entry[1].length === 2 && isCount(entry[1][0], 2 ** 32 - 1) && isCount(entry[1][1], 2 ** 32 - 1);
      const hash = ok ? engineHash(entry[0]) : null;
      // The hash must already be in its normal form (what a snapshot writes), and appear once.
      if (!ok || hash === null || hash !== entry[0] || seen.has(hash)) refuse(`engineBlocks[${r}]`, "must list distinct engine hashes, each with a path key [lo, hi] of two u32", entry);
      seen.add(hash);
      map.push([hash, [entry[1][0], entry[1][1]]]);
    }
    maps.push(map);
  }
  if (!Array.isArray(lastEventId) || lastEventId.length !== numRanks || !lastEventId.every((v) => v === null || (typeof v === "number" && Number.isSafeInteger(v)))) {
    refuse("lastEventId", `must hold a safe integer or null per rank (${numRanks})`, lastEventId);
  }
  if (typeof eventCounts !== "object" || eventCounts === null || Array.isArray(eventCounts)) refuse("eventCounts", "must be an object", eventCounts);
  const counts = eventCounts as Record<string, unknown>;
  const keys = Object.keys(counts);
  if (keys.length !== EVENT_COUNT_KEYS.length || !EVENT_COUNT_KEYS.every((k) => isCount(counts[k], MAX_COUNTER))) {
    refuse("eventCounts", `must hold exactly ${EVENT_COUNT_KEYS.join(", ")}, each a non-negative integer`, eventCounts);
  }
  const checkedCounts = Object.fromEntries(EVENT_COUNT_KEYS.map((k) => [k, counts[k]])) as unknown as KvEventCounts;
  return {
    pathKeys: raw.pathKeys as number,
    options: raw.options as PrefixIndexOptions,
    nodes,
    stamp,
    evictions,
    stampResets,
    engineBlocks: maps,
    lastEventId: lastEventId as (number | null)[],
    eventCounts: checkedCounts,
    seal: raw.seal as number,
  };
}
