// A plain model of TensorRT-LLM's centralized KV-cache router,
// `CentralizedKVCacheRouter` in tensorrt_llm/serve/kv_cache_router/router_core.py
// (NVIDIA/TensorRT-LLM @ 39ff08abc11b95593040d83821e51ea6b421e86b), with its
// `WorkerPrefixTrie` (prefix_trie.py) and report messages (messages.py), written
// from that source method by method (the comments name the source's methods).
//
// Left out on purpose: clocks (every report counts as current: "fresh" means
// "has reported load at least once", which is what `now - last_load_ts >
// load_suspend_s` reduces to when the clock is far past 0 and nothing ages),
// suspension and stale eviction, threading and locks, worker addresses, the
// legacy flat (non-":rank") workers, and logging. Block hashes are strings (see
// `blockKey`): only their equality matters to the router.

/** A KV-cache block hash. Here a string key naming the block's whole chained path (see `blockKey`). */
export type BlockHash = string;

/** A block's KV-cache namespace: the LoRA task id and cache salt the C++ BlockKey folds into its hash. */
export interface BlockNamespace {
  /** LoRA task id; absent or null = no LoRA. */
  readonly lora_task_id?: number | null;
  /** Cache salt; absent or null = unsalted. */
  readonly cache_salt?: string | null;
}

/**
 * The hash of the block that ends a chained path: a key of the namespace and every token of the path
 * so far. A chained hash (`block_key_hasher(tokens, parent)`) is a function of the path, and with a
 * fixed block size the path's token list determines its chain, so equal keys ⇔ equal chains.
 */
export function blockKey(pathTokens: readonly number[], ns?: BlockNamespace | null): BlockHash {
  return JSON.stringify([ns?.lora_task_id ?? null, ns?.cache_salt ?? null, pathTokens]);
}

/**
 * `CentralizedKVCacheRouter._hash_tokens`: the request-side block hashes. The last token is dropped
 * (`end = len - 1`), and the trailing partial block is hashed too (`t_end = min(t + tpb, end)`).
 */
export function hashTokens(tokens: readonly number[], tokensPerBlock: number, ns?: BlockNamespace | null): BlockHash[] {
  const hashes: BlockHash[] = [];
  const end = tokens.length - 1;
  let t = 0;
  while (t < end) {
    const tEnd = Math.min(t + tokensPerBlock, end);
    // block_key_hasher(token_ids[t:t_end], parent): the chain so far plus this block.
    hashes.push(blockKey(tokens.slice(0, tEnd), ns));
    t += tokensPerBlock;
  }
  return hashes;
}

/** The hashes a worker emits in `stored` events for a cached sequence: its full blocks only, in order. */
export function storedBlockHashes(tokens: readonly number[], tokensPerBlock: number, ns?: BlockNamespace | null): BlockHash[] {
  const hashes: BlockHash[] = [];
  for (let k = 1; k * tokensPerBlock <= tokens.length; k++) hashes.push(blockKey(tokens.slice(0, k * tokensPerBlock), ns));
  return hashes;
}

/** `WorkerLoadReport` (messages.py): a workload snapshot of one worker (here one "<instance>:rank<N>"). */
export interface WorkerLoadReport {
  /** "<instance id>:rank<N>" (per-rank) or "<instance id>" (legacy, not modelled). */
  readonly worker_id: string;
  /** Routing namespace (the gateway uses "ctx" / "gen"). */
  readonly namespace: string;
  /** Monotonic per-stream sequence number; a report not newer than the last applied one is dropped. */
  readonly seq: number;
  /** Running requests (default 0). */
  readonly num_active_requests?: number;
  /** Queued context + generation requests (default 0). */
  readonly num_queued_requests?: number;
  /** Engine max_batch_size (default 1; unused by routing). */
  readonly max_batch_size?: number;
  /** Active KV tokens (default 0 = not supplied; phase-2 "adp" then falls back to requests × block size). */
  readonly num_active_tokens?: number;
}

/** One KV-cache event in `KVCacheEventSerializer` form: `stored` with blocks or `removed` with hashes. */
export interface KvCacheEvent {
  /** The event body (the source also accepts the body at top level: `event_raw.get("data", event_raw)`). */
  readonly data?: {
    readonly type: string;
    readonly blocks?: readonly { readonly block_hash: BlockHash }[];
    readonly block_hashes?: readonly BlockHash[];
  };
  /** Top-level type when there is no `data`. */
  readonly type?: string;
  /** Top-level blocks when there is no `data`. */
  readonly blocks?: readonly { readonly block_hash: BlockHash }[];
  /** Top-level removed hashes when there is no `data`. */
  readonly block_hashes?: readonly BlockHash[];
  /** Layer group id: when present, a block's per-rank refcount counts stored events per layer group. */
  readonly layer_group_id?: number | null;
}

/** `KvCacheEventReport` (messages.py): a batch of KV-cache events from one worker. */
export interface KvCacheEventReport {
  /** "<instance id>:rank<N>". */
  readonly worker_id: string;
  /** Routing namespace. */
  readonly namespace: string;
  /** Monotonic per-stream sequence number. */
  readonly seq: number;
  /** The events, applied in order. */
  readonly events: readonly KvCacheEvent[];
  /** True: the report first replaces the worker's whole block table. */
  readonly is_full_snapshot?: boolean;
}

/** `Selection` (messages.py): the router's answer. */
export interface Selection {
  /** The chosen instance id. */
  readonly worker_id: string;
  /** Matched blocks of the request's prefix on the chosen instance (its combined trie). */
  readonly matched_blocks: number;
  /** The chosen attention-DP rank, or null (rank routing "none", or no fresh rank). */
  readonly dp_rank: number | null;
}

/** `WorkerPrefixTrie` (prefix_trie.py): block hash → owners, worker → owned hashes (a flat prefix index). */
export class WorkerPrefixTrie {
  /** `_owners`: block_hash → set of worker ids holding it. */
  readonly owners = new Map<BlockHash, Set<string>>();
  /** `_worker_blocks`: worker id → set of block hashes it holds (a defaultdict: `add` creates the entry). */
  readonly workerBlocks = new Map<string, Set<BlockHash>>();

  /** `add`: registers `workerId` as holding each hash; idempotent; creates the worker's entry even for no hashes. */
  add(workerId: string, blockHashes: Iterable<BlockHash>): void {
    let owned = this.workerBlocks.get(workerId);
    if (owned === undefined) this.workerBlocks.set(workerId, (owned = new Set()));
    for (const h of blockHashes) {
      let o = this.owners.get(h);
      if (o === undefined) this.owners.set(h, (o = new Set()));
      o.add(workerId);
      owned.add(h);
    }
  }

  /** `remove`: drops `workerId` from the given blocks; forgets the worker once it holds none. */
  remove(workerId: string, blockHashes: Iterable<BlockHash>): void {
    const owned = this.workerBlocks.get(workerId);
    if (owned === undefined) return;
    for (const h of blockHashes) {
      this.discard(workerId, h);
      owned.delete(h);
    }
    if (owned.size === 0) this.workerBlocks.delete(workerId);
  }

  /** `remove_worker`: drops `workerId` entirely (full-snapshot replace or disconnect). */
  removeWorker(workerId: string): void {
    const owned = this.workerBlocks.get(workerId);
    this.workerBlocks.delete(workerId);
    if (owned === undefined || owned.size === 0) return;
    for (const h of owned) this.discard(workerId, h);
  }

  /** `match`: worker → consecutive prefix blocks matched; workers not owning the first block are omitted. */
  match(blockHashes: readonly BlockHash[]): Map<string, number> {
    const result = new Map<string, number>();
    let candidates: Set<string> | null = null;
    let prevDepth = 0;
    for (let i = 0; i < blockHashes.length; i++) {
      const depth = i + 1;
      const owners = this.owners.get(blockHashes[i]!);
      if (owners === undefined || owners.size === 0) break;
      if (candidates === null) {
        candidates = new Set(owners);
      } else {
        const current: Set<string> = candidates;
        const dropped = [...current].filter((w) => !owners.has(w));
        if (dropped.length > 0) {
          for (const w of dropped) result.set(w, prevDepth);
          candidates = new Set([...current].filter((w) => owners.has(w)));
        }
      }
      if (candidates.size === 0) break;
      prevDepth = depth;
    }
    if (candidates !== null) for (const w of candidates) result.set(w, prevDepth);
    return result;
  }

  /** `match_one`: the consecutive prefix-block count of one worker (0 if it holds nothing). */
  matchOne(workerId: string, blockHashes: readonly BlockHash[]): number {
    const owned = this.workerBlocks.get(workerId);
    if (owned === undefined || owned.size === 0) return 0;
    let depth = 0;
    for (const h of blockHashes) {
      if (!owned.has(h)) break;
      depth += 1;
    }
    return depth;
  }

  /** `has_worker`. */
  hasWorker(workerId: string): boolean {
    return this.workerBlocks.has(workerId);
  }

  /** `_discard`: removes one owner of one block, and the block once ownerless. */
  private discard(workerId: string, blockHash: BlockHash): void {
    const owners = this.owners.get(blockHash);
    if (owners === undefined) return;
    owners.delete(workerId);
    if (owners.size === 0) this.owners.delete(blockHash);
  }
}

/** `_RankState`: one rank of an instance. */
export class RankState {
  /** The rank's own trie (not maintained in rank routing "none"). */
  readonly trie = new WorkerPrefixTrie();
  /** The last applied load report, or null. */
  load: WorkerLoadReport | null = null;
  /** `last_event_seq`. */
  lastEventSeq = -1;
  /** `last_load_seq`. */
  lastLoadSeq = -1;
  /** `layer_group_refcount`: block → stored events seen (only for events carrying a layer group id). */
  readonly layerGroupRefcount = new Map<BlockHash, number>();
  /** `owned_hashes`: the blocks this rank holds (kept in every mode; cleans the combined trie). */
  readonly ownedHashes = new Set<BlockHash>();

  /** `_RankState(rank)`. */
  constructor(readonly rank: number) {}
}

/** `_InstanceState`: all ranks of one instance, their union (combined trie) and the phase-2 counter. */
export class InstanceState {
  /** rank → state, in insertion order (the order of each rank's first report). */
  readonly ranks = new Map<number, RankState>();
  /** The union of its ranks' blocks, keyed by the instance id as the "worker". */
  readonly combinedTrie = new WorkerPrefixTrie();
  /** block → how many ranks of the instance hold it; the combined trie drops a block at 0. */
  readonly combinedRefcount = new Map<BlockHash, number>();
  /** Phase-2 round-robin tie-break counter. */
  rrCounter = 0;

  /** `_InstanceState(instance_id)`. */
  constructor(readonly instanceId: string) {}

  /** `total_load`: (Σ active, Σ queued) over the ranks that have a load report. */
  totalLoad(): [number, number] {
    let active = 0;
    let queued = 0;
    for (const rs of this.ranks.values()) {
      if (rs.load !== null) {
        active += rs.load.num_active_requests ?? 0;
        queued += rs.load.num_queued_requests ?? 0;
      }
    }
    return [active, queued];
  }

  /** `freshest_load_ts` reduced to "fresh": some rank has reported load (no clocks here). */
  hasFreshLoad(): boolean {
    for (const rs of this.ranks.values()) if (rs.load !== null) return true;
    return false;
  }
}

/** `_NamespaceState`: one routing namespace's instances (insertion order) and the phase-1 counter. */
export class NamespaceState {
  /** instance id → state, in the order of each instance's first report. */
  readonly instances = new Map<string, InstanceState>();
  /** Phase-1 round-robin tie-break counter. */
  rrCounter = 0;
}

/** One phase-2 candidate of `score_kv_aware_candidates`: (id, matched units, load). */
export type KvCandidate = readonly [id: number, matched: number, load: number];

/**
 * `score_kv_aware_candidates`: fair-share cap (drop loads above multiplier × max(mean, 1), unless
 * that empties the set), cache-affinity gate (strict `>`), then score = matched − w × (load /
 * max(total load, 1) × units); returns the top-scoring ids (ties in candidate order), null if none.
 */
export function scoreKvAwareCandidates(
  candidates: readonly KvCandidate[],
  opts: { loadWeight: number; fairShareMultiplier: number; matchRateThreshold: number; totalUnits: number },
): number[] | null {
  if (candidates.length === 0) return null;
  // (1) Fair-share cap.
  let sumLoad = 0;
  for (const c of candidates) sumLoad += c[2];
  const meanLoad = sumLoad / candidates.length;
  const cap = opts.fairShareMultiplier * Math.max(meanLoad, 1.0);
  let eligible = candidates.filter((c) => c[2] <= cap);
  if (eligible.length === 0) eligible = [...candidates];
  // (2) Cache-affinity gate.
  const denomUnits = Math.max(opts.totalUnits, 1);
  let maxMatch = 0;
  for (const c of eligible) maxMatch = Math.max(maxMatch, c[1]);
  const cacheActive = maxMatch / denomUnits > opts.matchRateThreshold;
  // (3) Normalized-load scoring.
  let totalLoad = 0;
  for (const c of eligible) totalLoad += c[2];
  const loadDenom = Math.max(totalLoad, 1.0);
  const scale = opts.totalUnits > 0 ? opts.totalUnits : 1.0;
  let bestScore: number | null = null;
  let bestIds: number[] = [];
  for (const [cid, matched, load] of eligible) {
    const matchTerm = cacheActive ? matched : 0;
    const normalizedLoad = (load / loadDenom) * scale;
    const loadTerm = opts.loadWeight * normalizedLoad;
    const score = matchTerm - loadTerm;
    if (bestScore === null || score > bestScore) {
      bestScore = score;
      bestIds = [cid];
    } else if (score === bestScore) {
      bestIds.push(cid);
    }
  }
  return bestIds;
}

/**
 * `_parse_worker_id`: "instance:rankN" → (instance, N) at the LAST ":rank"; otherwise (id, null).
 * `int()` is modelled for ASCII: surrounding whitespace, a sign, digits with single underscores.
 */
export function parseWorkerId(workerId: string): [string, number | null] {
  const idx = workerId.lastIndexOf(":rank");
  if (idx === -1) return [workerId, null];
  const tail = workerId.slice(idx + 5);
  if (!/^\s*[+-]?\d+(?:_\d+)*\s*$/.test(tail)) return [workerId, null];
  return [workerId.slice(0, idx), Number(tail.trim().replace(/_/g, ""))];
}

/** Phase-2 rank routing algorithms (`RANK_ALGO_INSTANCE`, `RANK_ALGO_ADP`, `RANK_ALGO_NONE`). */
export type RankRoutingAlgo = "instance" | "adp" | "none";

/** Constructor options of `CentralizedKVCacheRouter` (the source's keyword arguments and defaults). */
export interface CentralizedRouterOptions {
  /** `tokens_per_block` (default 32). */
  readonly tokensPerBlock?: number;
  /** `load_weight` (default 0.25). */
  readonly loadWeight?: number;
  /** `rank_routing_algo` (default "instance"). */
  readonly rankRoutingAlgo?: RankRoutingAlgo;
  /** `fair_share_multiplier` (default 2.0; clamped to ≥ 1.0). */
  readonly fairShareMultiplier?: number;
  /** `match_rate_threshold` (default 0.1). */
  readonly matchRateThreshold?: number;
}

/** `CentralizedKVCacheRouter`: per-namespace instances with ranks; two-phase `select_worker`. */
export class CentralizedKVCacheRouter {
  /** `_tokens_per_block`. */
  readonly tokensPerBlock: number;
  /** `_load_weight`. */
  readonly loadWeight: number;
  /** `_rank_routing_algo`. */
  readonly rankRoutingAlgo: RankRoutingAlgo;
  /** `_skip_rank_trie`: per-rank tries are not maintained in "none" (never queried). */
  readonly skipRankTrie: boolean;
  /** `_fair_share_multiplier` = max(1.0, given). */
  readonly fairShareMultiplier: number;
  /** `_match_rate_threshold`. */
  readonly matchRateThreshold: number;
  /** `_namespaces`: namespace → state. */
  readonly namespaces = new Map<string, NamespaceState>();

  /** `__init__`: validates the rank algorithm and clamps the multiplier. */
  constructor(opts: CentralizedRouterOptions = {}) {
    this.tokensPerBlock = opts.tokensPerBlock ?? 32;
    this.loadWeight = opts.loadWeight ?? 0.25;
    const algo = opts.rankRoutingAlgo ?? "instance";
    if (algo !== "instance" && algo !== "adp" && algo !== "none") {
      throw new Error(`rank_routing_algo must be one of 'instance', 'adp', 'none'; got ${JSON.stringify(algo)}`);
    }
    this.rankRoutingAlgo = algo;
    this.skipRankTrie = algo === "none";
    this.fairShareMultiplier = Math.max(1.0, opts.fairShareMultiplier ?? 2.0);
    this.matchRateThreshold = opts.matchRateThreshold ?? 0.1;
  }

  // ------------------------------------------------------------------ ingest

  /** `apply_event_report`: per-rank reports only (legacy flat workers are not modelled). */
  applyEventReport(report: KvCacheEventReport): void {
    const [instanceId, rank] = parseWorkerId(report.worker_id);
    if (rank === null) throw new Error(`legacy (non-per-rank) worker ${JSON.stringify(report.worker_id)} is not modelled`);
    const inst = this.getOrCreateInstance(report.namespace, instanceId);
    this.applyPerRankEventInstLocked(inst, rank, report);
  }

  /** `_get_or_create_instance`: the namespace and instance are created on first sight (insertion order). */
  getOrCreateInstance(namespace: string, instanceId: string): InstanceState {
    let ns = this.namespaces.get(namespace);
    if (ns === undefined) this.namespaces.set(namespace, (ns = new NamespaceState()));
    let inst = ns.instances.get(instanceId);
    if (inst === undefined) ns.instances.set(instanceId, (inst = new InstanceState(instanceId)));
    return inst;
  }

  /** `_apply_per_rank_event_inst_locked`: drops stale reports; a full snapshot first clears the rank. */
  private applyPerRankEventInstLocked(inst: InstanceState, rank: number, report: KvCacheEventReport): void {
    let rs = inst.ranks.get(rank);
    if (rs === undefined) inst.ranks.set(rank, (rs = new RankState(rank)));
    const full = report.is_full_snapshot === true;
    if (report.seq <= rs.lastEventSeq && !full) return;
    rs.lastEventSeq = report.seq;
    if (full) {
      this.removeRankFromCombined(inst, rank);
      rs.trie.removeWorker(report.worker_id);
      rs.ownedHashes.clear();
      rs.layerGroupRefcount.clear();
    }
    this.applyEventsHierarchical(inst, rs, report.worker_id, report.events);
  }

  /** `apply_load_report`: per-rank reports only. */
  applyLoadReport(report: WorkerLoadReport): void {
    const [instanceId, rank] = parseWorkerId(report.worker_id);
    if (rank === null) throw new Error(`legacy (non-per-rank) worker ${JSON.stringify(report.worker_id)} is not modelled`);
    const inst = this.getOrCreateInstance(report.namespace, instanceId);
    this.applyPerRankLoadInstLocked(inst, rank, report);
  }

  /** `_apply_per_rank_load_inst_locked`: drops stale reports (seq not newer), else replaces the load. */
  private applyPerRankLoadInstLocked(inst: InstanceState, rank: number, report: WorkerLoadReport): void {
    let rs = inst.ranks.get(rank);
    if (rs === undefined) inst.ranks.set(rank, (rs = new RankState(rank)));
    if (report.seq <= rs.lastLoadSeq) return;
    rs.lastLoadSeq = report.seq;
    rs.load = report;
  }

  // ------------------------------------------------------------------- query

  /**
   * `select_worker`: phase 1 scores every fresh instance of the namespace, in insertion order, by
   * matched − load_weight × workload (−load_weight × workload for an empty hash list), where matched
   * is the combined trie's `match_one` and workload Σ (active + queued); the top ties are broken by
   * the namespace's round-robin counter (bumped on every selection); then phase 2 picks the rank.
   */
  selectWorker(namespace: string, blockHashes: readonly BlockHash[]): Selection | null {
    const ns = this.namespaces.get(namespace);
    if (ns === undefined) return null;
    let bestScore: number | null = null;
    let best: { inst: InstanceState; matched: number }[] = [];
    for (const [instId, inst] of ns.instances) {
      if (!inst.hasFreshLoad()) continue; // `now - inst.freshest_load_ts() > load_suspend_s`
      const matchedBlocks = blockHashes.length > 0 ? inst.combinedTrie.matchOne(instId, blockHashes) : 0;
      const [active, queued] = inst.totalLoad();
      const workload = active + queued;
      const score = blockHashes.length > 0 ? matchedBlocks - this.loadWeight * workload : -this.loadWeight * workload;
      if (bestScore === null || score > bestScore) {
        bestScore = score;
        best = [{ inst, matched: matchedBlocks }];
      } else if (score === bestScore) {
        best.push({ inst, matched: matchedBlocks });
      }
    }
    if (best.length === 0) return null;
    const winner = best[ns.rrCounter % best.length]!;
    ns.rrCounter += 1;
    return this.selectRankInInstance(winner.inst, blockHashes, winner.matched);
  }

  /**
   * `_select_rank_in_instance`: "none" → no rank; otherwise candidates (rank, matched, load) over the
   * fresh ranks in insertion order — "instance": blocks and active + queued, argmax of matched −
   * load_weight × load; "adp": tokens and num_active_tokens (or requests × block size when 0) through
   * `score_kv_aware_candidates` with units = len(hashes) × block size — ties by the instance's counter.
   */
  selectRankInInstance(inst: InstanceState, blockHashes: readonly BlockHash[], instMatched: number): Selection {
    if (this.rankRoutingAlgo === "none") return { worker_id: inst.instanceId, matched_blocks: instMatched, dp_rank: null };
    const tpb = this.tokensPerBlock;
    const adp = this.rankRoutingAlgo === "adp";
    const candidates: KvCandidate[] = [];
    for (const [rank, rs] of inst.ranks) {
      if (rs.load === null) continue; // `now - rs.last_load_ts > load_suspend_s`
      const matchedBlocks = blockHashes.length > 0 ? rs.trie.matchOne(`${inst.instanceId}:rank${rank}`, blockHashes) : 0;
      let load = 0.0;
      const active = rs.load.num_active_requests ?? 0;
      const queued = rs.load.num_queued_requests ?? 0;
      if (adp) {
        const nat = rs.load.num_active_tokens ?? 0;
        load = nat ? nat : (active + queued) * tpb;
      } else {
        load = active + queued;
      }
      candidates.push([rank, adp ? matchedBlocks * tpb : matchedBlocks, load]);
    }
    let bestRanks: number[] | null;
    if (adp) {
      bestRanks = scoreKvAwareCandidates(candidates, {
        loadWeight: this.loadWeight,
        fairShareMultiplier: this.fairShareMultiplier,
        matchRateThreshold: this.matchRateThreshold,
        totalUnits: blockHashes.length * tpb,
      });
    } else {
      let bestScore: number | null = null;
      bestRanks = [];
      for (const [rank, matched, load] of candidates) {
        const score = matched - this.loadWeight * load;
        if (bestScore === null || score > bestScore) {
          bestScore = score;
          bestRanks = [rank];
        } else if (score === bestScore) {
          bestRanks.push(rank);
        }
      }
    }
    if (bestRanks === null || bestRanks.length === 0) return { worker_id: inst.instanceId, matched_blocks: instMatched, dp_rank: null };
    const chosen = bestRanks[inst.rrCounter % bestRanks.length]!;
    inst.rrCounter += 1;
    return { worker_id: inst.instanceId, matched_blocks: instMatched, dp_rank: chosen };
  }

  /** `select_worker_from_tokens`: `_hash_tokens` then `select_worker` (the namespace tags the block keys here). */
  selectWorkerFromTokens(namespace: string, tokens: readonly number[], blockNs?: BlockNamespace | null): Selection | null {
    return this.selectWorker(namespace, hashTokens(tokens, this.tokensPerBlock, blockNs));
  }

  // --------------------------------------------------------------- internals

  /**
   * `_apply_events_hierarchical`: `stored` adds to the rank trie (unless "none"), the owned set, the
   * combined trie, and bumps the combined refcount once per hash newly owned by the rank; `removed`
   * (after the per-rank layer-group refcount) drops from the rank and, at refcount ≤ 1, the combined trie.
   */
  private applyEventsHierarchical(inst: InstanceState, rs: RankState, workerId: string, events: readonly KvCacheEvent[]): void {
    for (const eventRaw of events) {
      const data = eventRaw.data ?? eventRaw;
      const etype = data.type;
      const layerGroupId = eventRaw.layer_group_id ?? null;
      if (etype === "stored") {
        const blockHashes = (data.blocks ?? []).map((b) => b.block_hash);
        if (!this.skipRankTrie) rs.trie.add(workerId, blockHashes);
        const newToRank = blockHashes.filter((h) => !rs.ownedHashes.has(h));
        for (const h of blockHashes) rs.ownedHashes.add(h);
        inst.combinedTrie.add(inst.instanceId, blockHashes);
        for (const h of newToRank) inst.combinedRefcount.set(h, (inst.combinedRefcount.get(h) ?? 0) + 1);
        if (layerGroupId !== null) {
          for (const h of blockHashes) rs.layerGroupRefcount.set(h, (rs.layerGroupRefcount.get(h) ?? 0) + 1);
        }
      } else if (etype === "removed") {
        const removedHashes = data.block_hashes ?? [];
        let actuallyRemoved: BlockHash[];
        if (layerGroupId !== null) {
          actuallyRemoved = [];
          for (const h of removedHashes) {
            const rc = rs.layerGroupRefcount.get(h) ?? 0;
            if (rc <= 1) {
              rs.layerGroupRefcount.delete(h);
              actuallyRemoved.push(h);
            } else {
              rs.layerGroupRefcount.set(h, rc - 1);
            }
          }
        } else {
          actuallyRemoved = [...removedHashes];
          for (const h of removedHashes) rs.layerGroupRefcount.delete(h);
        }
        if (actuallyRemoved.length > 0) {
          if (!this.skipRankTrie) rs.trie.remove(workerId, actuallyRemoved);
          for (const h of actuallyRemoved) rs.ownedHashes.delete(h);
          const combinedRemoved: BlockHash[] = [];
          for (const h of actuallyRemoved) {
            const rc = inst.combinedRefcount.get(h) ?? 0;
            if (rc <= 1) {
              inst.combinedRefcount.delete(h);
              combinedRemoved.push(h);
            } else {
              inst.combinedRefcount.set(h, rc - 1);
            }
          }
          if (combinedRemoved.length > 0) inst.combinedTrie.remove(inst.instanceId, combinedRemoved);
        }
      }
    }
  }

  /** `_remove_rank_from_combined`: takes one rank's owned hashes out of the combined refcount and trie. */
  private removeRankFromCombined(inst: InstanceState, rank: number): void {
    const rs = inst.ranks.get(rank);
    if (rs === undefined) return;
    if (rs.ownedHashes.size === 0) return;
    const combinedRemoved: BlockHash[] = [];
    for (const h of rs.ownedHashes) {
      const rc = inst.combinedRefcount.get(h) ?? 0;
      if (rc <= 1) {
        inst.combinedRefcount.delete(h);
        combinedRemoved.push(h);
      } else {
        inst.combinedRefcount.set(h, rc - 1);
      }
    }
    if (combinedRemoved.length > 0) inst.combinedTrie.remove(inst.instanceId, combinedRemoved);
  }

  /** `drop_worker` for a per-rank worker (`_forget_rank_locked`): removes the rank, and the instance once empty. */
  dropWorker(namespace: string, workerId: string): void {
    const ns = this.namespaces.get(namespace);
    if (ns === undefined) return;
    const [instanceId, rank] = parseWorkerId(workerId);
    if (rank === null) return; // legacy flat workers are not modelled
    const inst = ns.instances.get(instanceId);
    if (inst === undefined) return;
    this.removeRankFromCombined(inst, rank);
    inst.ranks.delete(rank);
    if (inst.ranks.size === 0) ns.instances.delete(instanceId);
  }
}
