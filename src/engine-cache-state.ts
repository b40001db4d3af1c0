// An engine cache view's snapshot: its options, its groups (a full-attention
// group's prefix index as a section of its own, a presence group's blocks per
// rank as [engine hash, path key] pairs, oldest first) and its counters; and
// the checks a snapshot passes before a view takes it. Snapshots come from
// other processes and files: every field is checked, bounded and normalized
// as the view's own events would have made it, or the whole is refused with a
// typed error and nothing built is kept.

import { AdpInputError } from "./errors.js";
import type { Group, KvGroupKind, KvGroupSpec, PathKey } from "./engine-cache-groups.js";
import { holdBlock } from "./engine-cache-groups.js";
import { MAX_KV_GROUPS, engineHash, type EngineHash } from "./kv-events.js";
import { restorePrefixIndex } from "./prefix-index.js";
import { encodeSnapshot, SNAPSHOT_KINDS } from "./snapshot-format.js";

/** What the checks need of the view being restored. */
interface ViewShape {
  readonly numRanks: number;
  readonly tokensPerBlock: number;
  readonly declaredGroups: readonly KvGroupSpec[];
  /** Most blocks a presence group holds per rank. */
  readonly presenceBound: number;
  makeGroup(key: string, kind: KvGroupKind, window: number | null, assumed: boolean): Group;
}

/** The counters a snapshot carries. */
type Counts = Record<"applied" | "unknownParent" | "unknownBlock" | "malformed" | "ignored" | "outOfOrder" | "partialTails", number>;

/** The counters' names. */
const COUNT_KEYS = ["applied", "unknownParent", "unknownBlock", "malformed", "ignored", "outOfOrder", "partialTails"] as const;

/** Keys of groups an engine names: g0..g15 (vLLM's group_idx), w (no window), w1..w2^31 (TensorRT-LLM's window_size). */
const GROUP_KEY = /^(g(?:[0-9]|1[0-5])|w|w[1-9][0-9]{0,9})$/;
/** A path key's text. */
const PATH_KEY = /^[0-9a-f]{16}$/;

/** A snapshot error. */
const bad = (why: string) => new AdpInputError("snapshot", `is not a valid engine cache view snapshot (${why})`, "engine cache view");

/** The snapshot bytes of a view's options, groups and counters. */
export function encodeViewSnapshot(options: object, groups: readonly Group[], counts: Counts): Uint8Array {
  const sections: Uint8Array[] = [];
  const state = {
    options,
    groups: groups.map((g) => {
      if (g.kind === "full_attention") {
        sections.push(g.index.snapshot());
        return { key: g.key, kind: g.kind, assumed: g.assumed, section: sections.length - 1 };
      }
      return { key: g.key, kind: g.kind, assumed: g.assumed, window: g.window, byHash: g.byHash.map((m) => [...m]) };
    }),
    counts,
  };
  return encodeSnapshot(SNAPSHOT_KINDS.engineCache, state, sections);
}

/** A snapshot's groups and counters, checked against the view restoring it (its groups built; disposed on any refusal). */
export function readViewState(state: Record<string, unknown>, sections: readonly Uint8Array[], view: ViewShape): { groups: Group[]; counts: Counts } {
  const raw = state.groups;
  if (!Array.isArray(raw) || raw.length > MAX_KV_GROUPS) throw bad(`its groups are not a list of at most ${MAX_KV_GROUPS}`);
  const made: Group[] = [];
  const used = new Set<number>();
  try {
    raw.forEach((entry: unknown, i) => {
      const g = readGroup(entry, sections, used, view);
      made.push(g);
      if (made.slice(0, -1).some((m) => m.key === g.key)) throw bad(`group ${g.key} appears twice`);
      const declared = view.declaredGroups[i];
      if (i < view.declaredGroups.length && (g.key !== `g${i}` || g.kind !== declared!.kind || (g.kind !== "full_attention" && g.window !== (declared!.slidingWindow ?? null)) || g.assumed)) throw bad(`group ${i} is not the declared one`);
    });
    if (made.length < view.declaredGroups.length) throw bad("a declared group is missing");
    if (used.size !== sections.length) throw bad("an index section belongs to no group");
  } catch (error) {
    for (const g of made) if (g.kind === "full_attention") g.index.dispose();
    throw error;
  }
  return { groups: made, counts: readCounts(state.counts) };
}

/** One group of a snapshot, built. */
function readGroup(entry: unknown, sections: readonly Uint8Array[], used: Set<number>, view: ViewShape): Group {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) throw bad("a group is not an object");
  const g = entry as Record<string, unknown>;
  if (typeof g.key !== "string" || !GROUP_KEY.test(g.key) || (g.key.startsWith("w") && g.key.length > 1 && Number(g.key.slice(1)) > 2 ** 31)) throw bad("a group's key is not one an engine names");
  if (typeof g.assumed !== "boolean") throw bad("a group does not say whether its kind was assumed");
  if (g.kind === "full_attention") {
    const at = g.section;
    if (typeof at !== "number" || !Number.isSafeInteger(at) || at < 0 || at >= sections.length || used.has(at)) throw bad("a group's index section is missing or shared");
    used.add(at);
    const index = restorePrefixIndex(sections[at]!);
    if (index.numRanks !== view.numRanks || index.tokensPerBlock !== view.tokensPerBlock) {
      index.dispose();
      throw bad("a group's index has another shape");
    }
    return { key: g.key, assumed: g.assumed, kind: "full_attention", index };
  }
  if (g.kind !== "sliding_window" && g.kind !== "mamba") throw bad("a group's kind is not one the view knows");
  const window = g.window;
  if (g.kind === "mamba" ? window !== null : typeof window !== "number" || !Number.isSafeInteger(window) || window < 1 || window > 2 ** 31) throw bad("a group's window does not fit its kind");
  if (!Array.isArray(g.byHash) || g.byHash.length !== view.numRanks) throw bad("a group's blocks are not one list per rank");
  const group = view.makeGroup(g.key, g.kind, window as number | null, g.assumed);
  if (group.kind === "full_attention") throw bad("a group's window does not fit its kind");
  g.byHash.forEach((entries: unknown, r: number) => {
    for (const [h, k] of readBlocks(entries, view.presenceBound)) holdBlock(group, r, h, k);
  });
  return group;
}

/** One rank's [engine hash, path key] pairs of a snapshot: normalized as events make them, each hash once, within the bound. */
function readBlocks(entries: unknown, bound: number): [EngineHash, PathKey][] {
  if (!Array.isArray(entries) || entries.length > bound) throw bad("a rank's blocks are not a list within the view's bound");
  const seen = new Set<EngineHash>();
  const out: [EngineHash, PathKey][] = [];
  for (const e of entries) {
    if (!Array.isArray(e) || e.length !== 2) throw bad("a block is not a pair");
    const [h, k] = e as unknown[];
    if ((typeof h !== "number" && typeof h !== "string") || engineHash(h) !== h || seen.has(h)) throw bad("a block's hash is not an engine hash as events name it, once");
    if (typeof k !== "string" || !PATH_KEY.test(k)) throw bad("a block's path key is not 16 hex digits");
    seen.add(h);
    out.push([h, k]);
  }
  return out;
}

/** A snapshot's counters (non-negative integers; absent ones 0). */
function readCounts(raw: unknown): Counts {
  const counts = Object.fromEntries(COUNT_KEYS.map((k) => [k, 0])) as Counts;
  if (typeof raw !== "object" || raw === null) return counts;
  for (const k of COUNT_KEYS) {
    const v = (raw as Record<string, unknown>)[k];
    if (v === undefined) continue;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw bad(`its ${k} count is not a non-negative integer`);
    counts[k] = v;
  }
  return counts;
}
