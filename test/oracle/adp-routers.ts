// A deliberately plain oracle of TensorRT-LLM's three attention-DP routers
// (DefaultADPRouter, KVCacheAwareADPRouter, ConversationAwareADPRouter) and
// the router factory, transcribed step by step from the reference
// specification /work/shared/reference/adp-routers.md (§ numbers below refer
// to it). It imports nothing from src/: it labels new scenarios that the
// library is then checked against, so it must stay independent of it.
// Plain arrays and loops; no performance tricks.

import { CPythonRandom } from "./mt19937.js";
import { NaivePrefixIndex } from "./naive-prefix-index.js";

/** One batch's answer, in the shape of a `route` scenario's `expected.batches[i]`. */
export interface OracleBatchAnswer {
  assignments: Record<string, number[]>;
  expected_num_active_requests: number;
  unassigned: number[];
}

/** A new request (§1.2), decoded from a scenario request object. */
interface Req {
  /** Engine request id (exact up to 2^53-1). */
  id: number;
  /** `input_token_ids` (scenario `tokens`, or `0..num_tokens-1`). */
  tokens: number[];
  /** `num_input_tokens` when the scenario gives `num_tokens`, else null. */
  numInputTokens: number | null;
  /** False when the request carries no scheduling params (`scheduling_params: null`). */
  hasSchedulingParams: boolean;
  /** `py_scheduling_params.attention_dp_rank` (null when absent). */
  attentionDpRank: number | null;
  /** `py_scheduling_params.attention_dp_relax` (SchedulingParams default true, §12). */
  attentionDpRelax: boolean | null;
  /** `py_scheduling_params.subagent_affinity_id` (null when absent). */
  subagentAffinityId: string | null;
  /** `py_conversation_params.conversation_id`, or null when there are no conversation params. */
  conversationId: string | null;
  /** `lora_config.task_id` (null when there is no LoRA config). */
  loraTaskId: number | null;
  /** `request.cache_salt` (null when absent). */
  cacheSalt: string | null;
}

/** One rank's allgathered state (§1.1): only the fields routing reads. */
interface RankState {
  /** The rank id (== its list position, §1.1). */
  rank: number;
  /** Active requests on the rank. */
  num_active_requests: number;
  /** Active tokens on the rank. */
  num_active_tokens: number;
}

/** What one router's `route_requests` returns: per-rank lists keyed by rank, and E. */
interface RouteResult {
  /** result[rank] = placed requests in placement order. */
  result: Map<number, Req[]>;
  /** `expected_num_active_requests`. */
  expected: number;
}

// ---------------------------------------------------------------------------
// Scenario decoding (conformance README, "mode route")
// ---------------------------------------------------------------------------

/** Decodes one scenario request into the request attributes of §1.2. */
function decodeRequest(raw: any): Req {
  let tokens: number[] = [];
  let numInputTokens: number | null = null;
  if (Array.isArray(raw.tokens)) {
    tokens = raw.tokens.slice();
  } else if (typeof raw.num_tokens === "number") {
    // README: `num_tokens` means tokens 0, 1, …, num_tokens-1.
    for (let i = 0; i < raw.num_tokens; i++) tokens.push(i);
    numInputTokens = raw.num_tokens;
  }
  // README: `scheduling_params: null` = the request carries no scheduling params.
  const hasSchedulingParams = !("scheduling_params" in raw && raw.scheduling_params === null);
  return {
    id: raw.id,
    tokens,
    numInputTokens,
    hasSchedulingParams,
    attentionDpRank: hasSchedulingParams && typeof raw.attention_dp_rank === "number" ? raw.attention_dp_rank : null,
    // §12: SchedulingParams.attention_dp_relax defaults to True.
    attentionDpRelax: hasSchedulingParams ? (typeof raw.attention_dp_relax === "boolean" ? raw.attention_dp_relax : true) : null,
    subagentAffinityId: hasSchedulingParams && typeof raw.subagent_affinity_id === "string" ? raw.subagent_affinity_id : null,
    conversationId: typeof raw.conversation_id === "string" ? raw.conversation_id : null,
    loraTaskId: typeof raw.lora_task_id === "number" ? raw.lora_task_id : null,
    cacheSalt: typeof raw.cache_salt === "string" ? raw.cache_salt : null,
  };
}

/** Decodes the batch's `rank_states` (§1.1). */
function decodeStates(raw: any[]): RankState[] {
  const out: RankState[] = [];
  for (const s of raw) out.push({ rank: s.rank, num_active_requests: s.num_active_requests, num_active_tokens: s.num_active_tokens });
  return out;
}

// ---------------------------------------------------------------------------
// Shared helpers (§1.2, §2)
// ---------------------------------------------------------------------------

/** §1.2 numTokens(req): `num_input_tokens` if it is an int, else `len(input_token_ids)`. */
function numTokens(req: Req): number {
  if (req.numInputTokens !== null) return req.numInputTokens;
  return req.tokens.length;
}

/** Python `sum(list)` over ints/floats. */
function sum(values: number[]): number {
  let s = 0;
  for (const v of values) s += v;
  return s;
}

/** Python `max(list)` (first maximum wins; list non-empty). */
function maxOf(values: number[]): number {
  let m = values[0]!;
  for (const v of values) if (v > m) m = v;
  return m;
}

/** §2 fairShare(counts, nNew, tp) = floor((Σcounts + nNew + tp - 1) / tp). */
function fairShare(counts: number[], nNew: number, tp: number): number {
  return Math.floor((sum(counts) + nNew + tp - 1) / tp);
}

/** §2 expected(counts, nNew, tp, multiplier, hardCap) = min(max(ceil(multiplier * fairShare), max(counts)), hardCap). */
function expectedCap(counts: number[], nNew: number, tp: number, multiplier: number, hardCap: number): number {
  // The product is an IEEE-754 double product, then ceil (2.2 * 25 → 56), exactly as in JS.
  const soft = Math.ceil(multiplier * fairShare(counts, nNew, tp));
  return Math.min(Math.max(soft, maxOf(counts)), hardCap);
}

/** §2 relax sort key, variant A (Default and KV-aware). */
function relaxKeyA(req: Req): boolean {
  if (!req.hasSchedulingParams || req.attentionDpRank === null) return true;
  return req.attentionDpRelax === null ? true : req.attentionDpRelax;
}

/** §2 relax sort key, variant B (ConversationAware): raw relax, true without scheduling params. */
function relaxKeyB(req: Req): boolean {
  if (!req.hasSchedulingParams) return true;
  // Null cannot occur with SchedulingParams (default True, §12); map it to true to stay total.
  return req.attentionDpRelax === null ? true : req.attentionDpRelax;
}

/** A stable sort (Python `sorted`): insertion sort, `less(a, b)` = a strictly before b. */
function stableSort<T>(items: T[], less: (a: T, b: T) => boolean): T[] {
  const out: T[] = [];
  for (const item of items) {
    // Insert after every element that is not strictly greater than `item`.
    let pos = out.length;
    while (pos > 0 && less(item, out[pos - 1]!)) pos--;
    out.splice(pos, 0, item);
  }
  return out;
}

/** Stable sort by a boolean key, `false` first (§2: strict requests with a target rank come first). */
function sortByBoolKey(reqs: Req[], key: (r: Req) => boolean): Req[] {
  return stableSort(reqs, (a, b) => key(a) === false && key(b) === true);
}

/** A fresh `result` map: `result[s.rank] = []` for every state (§3.3 step 1). */
function emptyResult(states: RankState[]): Map<number, Req[]> {
  const result = new Map<number, Req[]>();
  for (const s of states) result.set(s.rank, []);
  return result;
}

/** Appends `req` to `result[rank]`. */
function appendTo(result: Map<number, Req[]>, rank: number, req: Req): void {
  const list = result.get(rank);
  // §2: a rank missing from the result map is a Python KeyError.
  if (list === undefined) throw new Error(`KeyError: rank ${rank} not in result`);
  list.push(req);
}

/** Python list indexing of a per-rank array: negative indexes wrap, out-of-range raises (§2). */
function checkRank(t: number, tp: number): number {
  if (t >= tp || t < -tp) throw new Error(`IndexError: attention_dp_rank ${t} out of range for ${tp} ranks`);
  return t < 0 ? t + tp : t;
}

// ---------------------------------------------------------------------------
// §3 DefaultADPRouter
// ---------------------------------------------------------------------------

/** §3.3 route_requests of the Default router. */
function routeDefault(states: RankState[], newReqs: Req[], maxActive: number): RouteResult {
  // Step 1: tp, result, counts, tokens (ints).
  const tp = states.length;
  const result = emptyResult(states);
  const counts: number[] = [];
  const tokens: number[] = [];
  for (const s of states) {
    counts.push(s.num_active_requests);
    tokens.push(s.num_active_tokens);
  }

  // Step 2: stable sort by relax key A, then explicit placement (§2); tokens are not updated.
  const sorted = sortByBoolKey(newReqs, relaxKeyA);
  const remaining: Req[] = [];
  for (const req of sorted) {
    const t = req.hasSchedulingParams ? req.attentionDpRank : null;
    if (t !== null) {
      const i = checkRank(t, tp);
      if (counts[i]! < maxActive) {
        counts[i] = counts[i]! + 1;
        appendTo(result, t, req);
        continue;
      }
    }
    remaining.push(req);
  }

  // Step 3: E with multiplier 1.0.
  const E = expectedCap(counts, remaining.length, tp, 1.0, maxActive);

  // Step 4: nothing left to balance.
  if (remaining.length === 0) return { result, expected: E };

  // Step 5: candidates = ranks with counts < E, each (tokens, count, rank, list).
  interface Candidate {
    tokens: number;
    count: number;
    rank: number;
    list: Req[];
  }
  const allCandidates: Candidate[] = [];
  for (let i = 0; i < tp; i++) {
    if (counts[i]! < E) allCandidates.push({ tokens: tokens[i]!, count: counts[i]!, rank: i, list: [] });
  }
  let live: Candidate[] = allCandidates.slice();

  // Step 6: remaining by token count descending, stable.
  const byTokens = stableSort(remaining, (a, b) => numTokens(a) > numTokens(b));

  // Step 7: each request goes to the candidate with the smallest (tokens, count, rank).
  for (const req of byTokens) {
    if (live.length === 0) throw new Error("IndexError: index out of range (heap pop from an empty candidate heap)");
    let best = live[0]!;
    for (const c of live) {
      if (c.tokens < best.tokens || (c.tokens === best.tokens && (c.count < best.count || (c.count === best.count && c.rank < best.rank)))) best = c;
    }
    best.tokens += numTokens(req);
    best.count += 1;
    best.list.push(req);
    if (best.count >= E) {
      const kept: Candidate[] = [];
      for (const c of live) if (c !== best) kept.push(c);
      live = kept;
    }
  }

  // Step 8: every candidate rank, ascending, appends its list after the explicit placements.
  for (const c of allCandidates) {
    for (const req of c.list) appendTo(result, states[c.rank]!.rank, req);
  }
  return { result, expected: E };
}

// ---------------------------------------------------------------------------
// §4 KVCacheAwareADPRouter
// ---------------------------------------------------------------------------

/** §4.2 per-rank id→match maps; matchLen(rank, id) defaults to 0. */
type PrefixMatches = Map<number, number>[];

/** §4.2 matchLen(rank, id): that rank's map value, default 0 (0 if the rank has no list). */
function matchLen(matches: PrefixMatches, rank: number, id: number): number {
  const m = matches[rank];
  if (m === undefined) return 0;
  const v = m.get(id);
  return v === undefined ? 0 : v;
}

/** §4.3 step 4: lexicographic compare of integer tuples (a proper prefix sorts first). */
function compareTuples(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i]! < b[i]!) return -1;
    if (a[i]! > b[i]!) return 1;
  }
  return a.length - b.length;
}

/** §4.3 step 4: fingerprint = tuple of the first 64 input_token_ids. */
function fingerprint(req: Req): number[] {
  return req.tokens.slice(0, 64);
}

/** §4.3 route_requests of the KV-cache-aware router (pendingWarmup is mutated). */
function routeKvAware(
  states: RankState[],
  newReqs: Req[],
  maxActive: number,
  matches: PrefixMatches,
  params: { beta: number; threshold: number; multiplier: number },
  pendingWarmup: Set<number>,
): RouteResult {
  // Step 1: counts (ints), tokens (floats; JS numbers are doubles), result.
  const tp = states.length;
  const result = emptyResult(states);
  const counts: number[] = [];
  const tokens: number[] = [];
  for (const s of states) {
    counts.push(s.num_active_requests);
    tokens.push(s.num_active_tokens);
  }

  // Step 2: stable sort by relax key A.
  const sorted = sortByBoolKey(newReqs, relaxKeyA);

  // Step 3: explicit / warmup phase.
  const remaining: Req[] = [];
  for (const req of sorted) {
    let t: number | null = req.hasSchedulingParams ? req.attentionDpRank : null;
    if (t === null && pendingWarmup.size > 0) {
      // t = min(pendingWarmup)
      let m = Infinity;
      for (const r of pendingWarmup) if (r < m) m = r;
      t = m;
    }
    if (t !== null) {
      const i = checkRank(t, tp);
      if (counts[i]! < maxActive) {
        counts[i] = counts[i]! + 1;
        tokens[i] = tokens[i]! + Math.max(numTokens(req) - matchLen(matches, i, req.id), 0);
        appendTo(result, t, req);
        pendingWarmup.delete(t);
        continue;
      }
    }
    remaining.push(req);
  }

  // Step 4: stable sort by (fingerprint, -len(tokens)).
  const ordered = stableSort(remaining, (a, b) => {
    const c = compareTuples(fingerprint(a), fingerprint(b));
    if (c !== 0) return c < 0;
    return -a.tokens.length < -b.tokens.length;
  });

  // Step 5: E with the raw (unclamped) multiplier; eligible ranks ascending.
  const E = expectedCap(counts, ordered.length, tp, params.multiplier, maxActive);
  let eligible: number[] = [];
  for (let r = 0; r < tp; r++) if (counts[r]! < E) eligible.push(r);

  // Step 6: score each request in order.
  for (const req of ordered) {
    // No eligible rank left: the rest stay unassigned.
    if (eligible.length === 0) break;
    const n = numTokens(req);
    // §11: Random(req.id).shuffle(copy(eligible)); ids may exceed 2^32 (two seed words).
    const order = new CPythonRandom(BigInt(req.id)).shuffle(eligible.slice());
    // totalLoad over eligible in ascending order, from int 0; denom = max(totalLoad, float(n)).
    let totalLoad = 0;
    for (const r of eligible) totalLoad += tokens[r]!;
    const denom = Math.max(totalLoad, n);
    if (denom === 0) throw new Error("ZeroDivisionError: float division by zero");
    // match[r] for eligible ranks; affinity gate is a strict `>`.
    const match = new Map<number, number>();
    let maxMatch = 0;
    for (const r of eligible) {
      const m = matchLen(matches, r, req.id);
      match.set(r, m);
      if (m > maxMatch) maxMatch = m;
    }
    const affinity = maxMatch / Math.max(n, 1) > params.threshold;
    // Scan in shuffled order; ties on score go to lower tokens, full ties keep the earlier rank.
    let best = order[0]!;
    let bestScore = Infinity;
    for (const r of order) {
      const m = affinity ? match.get(r)! : 0;
      const score = n - m + params.beta * ((tokens[r]! / denom) * n);
      if (score < bestScore || (score === bestScore && tokens[r]! < tokens[best]!)) {
        best = r;
        bestScore = score;
      }
    }
    appendTo(result, states[best]!.rank, req);
    counts[best] = counts[best]! + 1;
    // The raw match is subtracted even when affinity was gated off.
    tokens[best] = tokens[best]! + Math.max(n - match.get(best)!, 0);
    if (counts[best]! >= E) {
      const kept: number[] = [];
      for (const r of eligible) if (r !== best) kept.push(r);
      eligible = kept;
    }
  }

  // Step 7: E is not re-bumped.
  return { result, expected: E };
}

// ---------------------------------------------------------------------------
// §5 ConversationAwareADPRouter
// ---------------------------------------------------------------------------

/** §5 convKey(item): truthy subagent_affinity_id, else conversation_id, else null. */
function convKey(req: Req): string | null {
  if (req.subagentAffinityId !== null && req.subagentAffinityId !== "") return req.subagentAffinityId;
  if (req.conversationId !== null) return req.conversationId;
  return null;
}

/** The Conversation router's persistent state (§5 constructor). */
interface ConversationState {
  /** maxSessions = max(1, int(kv_cache_routing_max_sessions)). */
  maxSessions: number;
  /** mult = max(1.0, float(fair_share_multiplier)). */
  mult: number;
  /** One of round_robin | least_queued | least_tokens. */
  placement: string;
  /** Round-robin / least-tokens cursor. */
  cursor: number;
  /** convToRank: insertion-ordered map used as an LRU (first key = least recent). */
  convToRank: Map<string, number>;
}

/** §5 record(conv, rank): set, move to most-recent end, evict least-recent while over maxSessions. */
function record(st: ConversationState, conv: string, rank: number): void {
  st.convToRank.delete(conv);
  st.convToRank.set(conv, rank);
  while (st.convToRank.size > st.maxSessions) {
    const oldest = st.convToRank.keys().next().value as string;
    st.convToRank.delete(oldest);
  }
}

/** §5.1 route_requests of the Conversation router (state is mutated). */
function routeConversation(states: RankState[], newReqs: Req[], maxActive: number, st: ConversationState): RouteResult {
  // Step 1: counts, result.
  const tp = states.length;
  const result = emptyResult(states);
  const counts: number[] = [];
  for (const s of states) counts.push(s.num_active_requests);

  // Step 2: stable sort by relax key B.
  const sorted = sortByBoolKey(newReqs, relaxKeyB);

  // Step 3: phase 1, explicit first turns.
  const remaining: Req[] = [];
  const phase1: { rank: number; req: Req }[] = [];
  for (const req of sorted) {
    const c = convKey(req);
    if (c !== null && st.convToRank.has(c)) {
      // Bound conversation: explicit rank ignored, no LRU touch.
      remaining.push(req);
      continue;
    }
    const t = req.hasSchedulingParams ? req.attentionDpRank : null;
    if (t !== null) {
      const i = checkRank(t, tp);
      if (counts[i]! < maxActive) {
        counts[i] = counts[i]! + 1;
        appendTo(result, t, req);
        phase1.push({ rank: t, req });
        if (c !== null) record(st, c, t);
        continue;
      }
    }
    remaining.push(req);
  }

  // Step 4: least_tokens token loads = num_active_tokens + phase-1 tokens, keyed by state.rank.
  const tokenLoad: number[] = [];
  if (st.placement === "least_tokens") {
    for (const s of states) tokenLoad[s.rank] = s.num_active_tokens;
    for (const p of phase1) tokenLoad[p.rank] = tokenLoad[p.rank]! + numTokens(p.req);
  }

  // Step 5: E (the soft cap) with the clamped multiplier.
  const E = expectedCap(counts, remaining.length, tp, st.mult, maxActive);

  // Step 6: placement helpers.
  /** leastQueued(cap): ranks with counts < cap (or all), min by (counts[r], r); cursor untouched. */
  const leastQueued = (cap: number): number => {
    let cands: number[] = [];
    for (let r = 0; r < tp; r++) if (counts[r]! < cap) cands.push(r);
    if (cands.length === 0) for (let r = 0; r < tp; r++) cands.push(r);
    let best = cands[0]!;
    for (const r of cands) if (counts[r]! < counts[best]! || (counts[r] === counts[best] && r < best)) best = r;
    return best;
  };
  /** nextRR(cap): up to tp steps of the cursor; fall back to leastQueued(cap). */
  const nextRR = (cap: number): number => {
    for (let k = 0; k < tp; k++) {
      const r = st.cursor % tp;
      st.cursor = (st.cursor + 1) % tp;
      if (counts[r]! < cap) return r;
    }
    return leastQueued(cap);
  };
  /** leastTokens(cap): min by (tokenLoad[r], counts[r], (r - cursor) mod tp); cursor = chosen + 1. */
  const leastTokens = (cap: number): number => {
    let cands: number[] = [];
    for (let r = 0; r < tp; r++) if (counts[r]! < cap) cands.push(r);
    if (cands.length === 0) for (let r = 0; r < tp; r++) cands.push(r);
    const rot = (r: number) => (((r - st.cursor) % tp) + tp) % tp;
    let best = cands[0]!;
    for (const r of cands) {
      const lr = tokenLoad[r]!;
      const lb = tokenLoad[best]!;
      if (lr < lb || (lr === lb && (counts[r]! < counts[best]! || (counts[r] === counts[best] && rot(r) < rot(best))))) best = r;
    }
    st.cursor = (best + 1) % tp;
    return best;
  };
  /** The configured placement for a new conversation. */
  const place = (cap: number): number => {
    if (st.placement === "least_queued") return leastQueued(cap);
    if (st.placement === "least_tokens") return leastTokens(cap);
    return nextRR(cap);
  };

  // Step 7: phase 2.
  for (const req of remaining) {
    const c = convKey(req);
    let rank: number | null = null;
    const bound = c === null ? undefined : st.convToRank.get(c);
    if (c !== null && bound !== undefined && counts[bound]! < maxActive) {
      // Sticky against the hard cap, with an LRU touch.
      rank = bound;
      record(st, c, bound);
    } else {
      rank = place(E);
      // Record only a conversation that is not bound: a saturated sticky request overflows without rebinding.
      if (c !== null && !st.convToRank.has(c)) record(st, c, rank);
    }
    appendTo(result, states[rank]!.rank, req);
    counts[rank] = counts[rank]! + 1;
    if (st.placement === "least_tokens") tokenLoad[rank] = tokenLoad[rank]! + numTokens(req);
  }

  // Step 8: E_out = max(E, max(counts)).
  return { result, expected: Math.max(E, maxOf(counts)) };
}

// ---------------------------------------------------------------------------
// §4.2 / §10 prefix matches for one batch
// ---------------------------------------------------------------------------

/** The batch's prefix matches: `prefix_matches` as given, or probes of `cached_prefixes` (§4.2, §10). */
function batchPrefixMatches(batch: any, reqs: Req[], tp: number): PrefixMatches {
  const out: PrefixMatches = [];
  if (Array.isArray(batch.prefix_matches)) {
    // README: these ARE the probe results, used as given (absent → 0).
    for (const rankMap of batch.prefix_matches) {
      const m = new Map<number, number>();
      if (rankMap !== null && typeof rankMap === "object") {
        for (const req of reqs) {
          const key = String(req.id);
          if (Object.prototype.hasOwnProperty.call(rankMap, key)) m.set(req.id, rankMap[key]);
        }
      }
      out.push(m);
    }
    return out;
  }
  if (batch.cached_prefixes !== undefined && batch.cached_prefixes !== null) {
    // README: each rank's view holds exactly these sequences (full blocks only), in their namespace.
    const tpb = typeof batch.tokens_per_block === "number" ? batch.tokens_per_block : 32;
    const index = new NaivePrefixIndex(tp, tpb);
    for (const rankKey of Object.keys(batch.cached_prefixes)) {
      const rank = Number(rankKey);
      for (const seq of batch.cached_prefixes[rankKey]) {
        index.insert(rank, seq.tokens, { loraTaskId: seq.lora_task_id ?? null, cacheSalt: seq.cache_salt ?? null });
      }
    }
    for (let r = 0; r < tp; r++) out.push(new Map());
    for (const req of reqs) {
      // §4.2: probe tokens[0:len-1] if len > 1 else []; namespace (lora task id, cache salt).
      const probe = req.tokens.length > 1 ? req.tokens.slice(0, req.tokens.length - 1) : [];
      // §10 step 1: an empty token list matches 0 (the index also returns 0 for it).
      const perRank = probe.length === 0 ? new Array<number>(tp).fill(0) : index.match(probe, { loraTaskId: req.loraTaskId, cacheSalt: req.cacheSalt });
      // §4.2: a later duplicate id overwrites.
      for (let r = 0; r < tp; r++) out[r]!.set(req.id, perRank[r]!);
    }
    return out;
  }
  // Neither given: every match is 0.
  return out;
}

// ---------------------------------------------------------------------------
// The router (§6 factory) and the scenario driver
// ---------------------------------------------------------------------------

/** Reads a config value, or the documented default (§9). */
function cfg<T>(config: Record<string, unknown>, key: string, dflt: T): T {
  const v = config[key];
  return v === undefined || v === null ? dflt : (v as T);
}

/** One router instance built by the factory rule (§6), with its state carried across batches. */
export class OracleAdpRouter {
  /** "default" | "kv_cache_aware" | "conversation" by the factory rule (§6). */
  readonly kind: string;
  /** Number of ranks (dp_size == tp_size under ADP). */
  private readonly tpSize: number;
  /** KV-aware parameters (§4 constructor, §9 defaults). */
  private readonly kv: { beta: number; threshold: number; multiplier: number };
  /** KV-aware pending warm-up ranks (§4 constructor). */
  private readonly pendingWarmup = new Set<number>();
  /** Conversation router state (§5 constructor). */
  private readonly conv: ConversationState;

  /** config: AttentionDpConfig in snake_case (assumed valid; §9 defaults applied); tpSize: number of ranks. */
  constructor(config: Record<string, unknown>, tpSize: number) {
    this.tpSize = tpSize;
    // §6: conversation affinity wins; then KV-aware (a block-reuse KV manager is assumed); else default.
    if (cfg(config, "kv_cache_routing_conversation_affinity", false)) this.kind = "conversation";
    else if (cfg(config, "enable_kv_cache_aware_routing", false)) this.kind = "kv_cache_aware";
    else this.kind = "default";

    // §4 constructor: β, threshold, raw multiplier, warmup.
    this.kv = {
      beta: cfg(config, "kv_cache_routing_load_balance_weight", 1.0),
      threshold: cfg(config, "kv_cache_routing_match_rate_threshold", 0.1),
      multiplier: cfg(config, "kv_cache_routing_fair_share_multiplier", 2.0),
    };
    if (this.kind === "kv_cache_aware" && cfg(config, "kv_cache_routing_cold_start_warmup", false)) {
      for (let r = 0; r < tpSize; r++) this.pendingWarmup.add(r);
    }

    // §5 constructor: clamped max sessions and multiplier, placement with round_robin fallback, cursor 0.
    const placement = cfg(config, "kv_cache_routing_new_conv_placement", "round_robin");
    this.conv = {
      maxSessions: Math.max(1, Math.trunc(cfg(config, "kv_cache_routing_max_sessions", 65536))),
      mult: Math.max(1.0, cfg(config, "kv_cache_routing_fair_share_multiplier", 2.0)),
      placement: placement === "round_robin" || placement === "least_queued" || placement === "least_tokens" ? placement : "round_robin",
      cursor: 0,
      convToRank: new Map(),
    };
  }

  /** Routes one scenario batch; router state persists across calls. */
  route(batch: any): OracleBatchAnswer {
    const states = decodeStates(batch.rank_states);
    const reqs: Req[] = [];
    for (const raw of batch.requests) reqs.push(decodeRequest(raw));
    const maxActive: number = batch.max_num_active_requests;

    let routed: RouteResult;
    if (this.kind === "conversation") {
      routed = routeConversation(states, reqs, maxActive, this.conv);
    } else if (this.kind === "kv_cache_aware") {
      // §7 step 5: gather_prefix_matches before route_requests.
      const matches = batchPrefixMatches(batch, reqs, Math.max(this.tpSize, states.length));
      routed = routeKvAware(states, reqs, maxActive, matches, this.kv, this.pendingWarmup);
    } else {
      routed = routeDefault(states, reqs, maxActive);
    }

    // README answer: one key per rank (empty lists included), ids in placement order.
    const assignments: Record<string, number[]> = {};
    const placed = new Set<Req>();
    for (const s of states) {
      const ids: number[] = [];
      for (const req of routed.result.get(s.rank)!) {
        ids.push(req.id);
        placed.add(req);
      }
      assignments[String(s.rank)] = ids;
    }
    // README: unassigned = the requests not placed, in input order.
    const unassigned: number[] = [];
    for (const req of reqs) if (!placed.has(req)) unassigned.push(req.id);
    return { assignments, expected_num_active_requests: routed.expected, unassigned };
  }
}

/** Answers a whole `route` scenario: one router instance, batches routed in order. */
export function oracleRouteScenario(scenario: any): { router: string; batches: OracleBatchAnswer[] } {
  const router = new OracleAdpRouter(scenario.config ?? {}, scenario.tp_size);
  const batches: OracleBatchAnswer[] = [];
  for (const batch of scenario.batches) batches.push(router.route(batch));
  return { router: router.kind, batches };
}
