// Restoring a snapshot onto another set of ranks: a gateway whose fleet
// changed keeps each remaining upstream's routing state (its cache view, its
// conversations, its warm-up) under its new rank, drops a removed upstream's,
// and starts an added one empty. `ranks[i]` is the old rank that new rank i
// continues, or null for a new, empty rank; old ranks not listed are dropped.

import { AdpInputError, readInput } from "./errors.js";

/** A checked mapping: new rank → old rank (−1: new), and old rank → new rank (−1: dropped). */
export interface RankRemap {
  readonly newToOld: Int32Array;
  readonly oldToNew: Int32Array;
}

/** Checks `ranks` (the `ranks` option of a restore) against a snapshot of `oldNumRanks` ranks. */
export function readRankRemap(ranks: unknown, oldNumRanks: number, maxRanks: number): RankRemap {
  const field = "ranks";
  // Read once (length, then each element), checked before anything is allocated for it.
  const length = readInput(field, () => (Array.isArray(ranks) ? (ranks.length as unknown) : undefined));
  if (typeof length !== "number" || !Number.isInteger(length) || length < 1 || length > maxRanks) {
    throw new AdpInputError(field, `must list the new ranks (1 to ${maxRanks}), each the old rank it continues or null`, ranks);
  }
  const source = ranks as readonly unknown[];
  const newToOld = new Int32Array(length).fill(-1);
  const oldToNew = new Int32Array(oldNumRanks).fill(-1);
  for (let i = 0; i < length; i++) {
    const r: unknown = readInput(`${field}[${i}]`, () => source[i]);
    if (r === null) continue;
    if (typeof r !== "number" || !Number.isInteger(r) || r < 0 || r >= oldNumRanks) throw new AdpInputError(`${field}[${i}]`, `must be an old rank in 0..${oldNumRanks - 1} or null`, r);
    if (oldToNew[r] !== -1) throw new AdpInputError(`${field}[${i}]`, `continues old rank ${r}, which ranks[${oldToNew[r]}] continues already`, r);
    newToOld[i] = r;
    oldToNew[r] = i;
  }
  return { newToOld, oldToNew };
}

/** Bytes of a node record's fixed part (see assembly/prefix-index.ts, snapshot). */
const RECORD_BYTES = 24;

/**
 * A prefix index's node records with every residency's rank mapped, the
 * residencies of dropped ranks removed, and the nodes left with none removed
 * (views are prefix-closed, so their descendants hold none of the kept ranks
 * either and go too). Returns the records and how many nodes they hold.
 * Throws AdpInputError naming `snapshot` on records that do not parse.
 */
export function remapRecords(records: Uint8Array, remap: RankRemap): { records: Uint8Array; nodes: number } {
  const oldNumRanks = remap.oldToNew.length;
  const src = new DataView(records.buffer, records.byteOffset, records.byteLength);
  const out = new Uint8Array(records.length);
  const dst = new DataView(out.buffer);
  let at = 0;
  let to = 0;
  let nodes = 0;
  const bad = (why: string): never => {
    throw new AdpInputError("snapshot", `is not a valid snapshot (prefix index records: ${why})`, `${records.length} bytes`);
  };
  while (at < records.length) {
    if (at + RECORD_BYTES > records.length) bad("a record is cut off");
    const count = src.getUint32(at + 20, true);
    if (count === 0 || count > oldNumRanks || at + RECORD_BYTES + count * 8 > records.length) bad("a record's residency count is out of range");
    let kept = 0;
    for (let k = 0; k < count; k++) {
      const rank = src.getUint32(at + RECORD_BYTES + 8 * k, true);
      if (rank >= oldNumRanks) bad(`a residency of rank ${rank} of ${oldNumRanks}`);
      const mapped = remap.oldToNew[rank]!;
      if (mapped < 0) continue;
      dst.setUint32(to + RECORD_BYTES + 8 * kept, mapped, true);
      dst.setUint32(to + RECORD_BYTES + 8 * kept + 4, src.getUint32(at + RECORD_BYTES + 8 * k + 4, true), true);
      kept++;
    }
    if (kept > 0) {
      out.set(records.subarray(at, at + 20), to); // keys, parent and its flag as they were
      dst.setUint32(to + 20, kept, true);
      to += RECORD_BYTES + 8 * kept;
      nodes++;
    }
    at += RECORD_BYTES + count * 8;
  }
  return { records: out.slice(0, to), nodes };
}
