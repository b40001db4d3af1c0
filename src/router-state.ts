// The JSON state of a router snapshot, checked field by field before a router
// is built from it: a snapshot that passed its checksum may still be crafted,
// and a restored router must keep every promise a fresh one does (no
// conversation pinned to a rank it lacks, no warm-up rank that never clears).
// Anything else is refused with AdpInputError naming `snapshot`.

import { MAX_KEY_LENGTH } from "./batch.js";
import { parseAttentionDpConfig, type AttentionDpConfig } from "./config.js";
import { AdpInputError, AttentionDpConfigError } from "./errors.js";

/** A router's snapshot state, checked. */
export interface RouterState {
  readonly numRanks: number;
  readonly config: AttentionDpConfig;
  readonly learnFromRouting: boolean;
  /** The conversation router's cursor. */
  readonly cursor: number;
  /** Conversations, least recent first. */
  readonly conversations: [string, number][];
  /** Ranks still awaiting their warm-up request, ascending. */
  readonly pendingWarmup: number[];
}

/** The keys a router snapshot's state holds, exactly. */
const STATE_KEYS = ["numRanks", "attentionDp", "learnFromRouting", "cursor", "conversations", "pendingWarmup"];

/** Throws the typed error of a snapshot whose state breaks `rule` at `where`. */
function refuse(where: string, rule: string, received: unknown): never {
  throw new AdpInputError("snapshot", `is not a valid snapshot (router ${where} ${rule})`, received);
}

/** Whether `v` is an integer in [min, max]. */
const isInt = (v: unknown, min: number, max: number): v is number => typeof v === "number" && Number.isInteger(v) && v >= min && v <= max;

/** Checks a router snapshot's state; `maxRanks` is the router's rank limit. */
export function readRouterState(raw: Record<string, unknown>, maxRanks: number): RouterState {
  const keys = Object.keys(raw);
  if (keys.length !== STATE_KEYS.length || !STATE_KEYS.every((k) => Object.hasOwn(raw, k))) refuse("state", `must hold exactly ${STATE_KEYS.join(", ")}`, keys.slice(0, 10));
  const { numRanks, attentionDp, learnFromRouting, cursor, conversations, pendingWarmup } = raw;
  if (!isInt(numRanks, 1, maxRanks)) refuse("numRanks", `must be an integer in [1, ${maxRanks}]`, numRanks);
  let config: AttentionDpConfig;
  try {
    config = parseAttentionDpConfig(attentionDp);
  } catch (error) {
    if (error instanceof AttentionDpConfigError) refuse("attentionDp", `is not a valid attention_dp_config: ${error.message}`, attentionDp);
    throw error;
  }
  if (typeof learnFromRouting !== "boolean") refuse("learnFromRouting", "must be a boolean", learnFromRouting);
  const conversational = config.kvCacheRoutingConversationAffinity;
  const kvAware = !conversational && config.enableKvCacheAwareRouting;
  if (!isInt(cursor, 0, numRanks - 1) || (!conversational && cursor !== 0)) refuse("cursor", `must be a rank in 0..${numRanks - 1} (0 unless conversation affinity routes)`, cursor);
  // The conversation map keeps max(1, kv_cache_routing_max_sessions) entries.
  const maxSessions = Math.max(1, config.kvCacheRoutingMaxSessions);
  if (!Array.isArray(conversations) || conversations.length > (conversational ? maxSessions : 0)) {
    refuse("conversations", conversational ? `must be a list of at most ${maxSessions} [key, rank]` : "must be empty (no conversation affinity)", conversations);
  }
  const seen = new Set<string>();
  const entries: [string, number][] = [];
  for (const entry of conversations) {
    const ok = Array.isArray(entry) && entry.length === 2 && typeof entry[0] === "string" && entry[0].length > 0 && entry[0].length <= MAX_KEY_LENGTH && isInt(entry[1], 0, numRanks - 1);
    if (!ok || seen.has(entry[0])) refuse("conversations", `must list distinct non-empty keys of at most ${MAX_KEY_LENGTH} characters, each with a rank in 0..${numRanks - 1}`, entry);
    seen.add(entry[0]);
    entries.push([entry[0], entry[1]]);
  }
  const warmupOn = kvAware && config.kvCacheRoutingColdStartWarmup;
  if (!Array.isArray(pendingWarmup) || (!warmupOn && pendingWarmup.length > 0)) {
    refuse("pendingWarmup", warmupOn ? "must be a list of ranks" : "must be empty (no cold-start warm-up)", pendingWarmup);
  }
  for (let i = 0; i < pendingWarmup.length; i++) {
    const r: unknown = pendingWarmup[i];
    if (!isInt(r, 0, numRanks - 1) || (i > 0 && r <= (pendingWarmup[i - 1] as number))) {
      refuse("pendingWarmup", `must list distinct ranks in 0..${numRanks - 1}, ascending`, pendingWarmup);
    }
  }
  return { numRanks, config, learnFromRouting, cursor, conversations: entries, pendingWarmup: pendingWarmup as number[] };
}
