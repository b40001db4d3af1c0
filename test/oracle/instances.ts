// The oracle of conformance mode `instances` (two-phase routing over several
// engines with several attention-DP ranks each), by DRIVING the plain model of
// TensorRT-LLM's centralized router (./centralized-router.ts) the way a fleet
// would: each batch, every rank sends a full-snapshot `stored` event report of
// its cached prefixes and a load report; each request is hashed and sent to
// `select_worker`; after each placement the placed rank (phase 2 "instance") or
// the instance (else; its rank 0, only the instance total matters there) sends
// a fresh load report counting it. Phase 2 "adp" is the engine's own ADP router
// (./adp-routers.js, one per instance, state kept across batches), given the
// requests phase 1 put on the instance as one batch, with prefix matches probed
// from the rank's own KV cache (the cached prefixes). It imports nothing from
// src/. One rule departs from router_core.py on purpose: a request's blocks
// are hashed in its namespace (LoRA task id, cache salt), as the engines hash
// theirs, where `_hash_tokens` hashes tokens alone (a LoRA or salted request
// would then never match its own blocks).

import { OracleAdpRouter } from "./adp-routers.js";
import { CentralizedKVCacheRouter, hashTokens, storedBlockHashes, type BlockHash, type BlockNamespace } from "./centralized-router.js";

/** The routing namespace every worker reports under (the gateway's "ctx" / "gen"); one fleet, one namespace. */
const NAMESPACE = "gen";

/** One placement of the answer. */
export interface InstancesPlacement {
  /** The request id. */
  id: number;
  /** The instance phase 1 chose. */
  instance: string;
  /** The rank phase 2 chose, or null (rank routing "none", or left unassigned by the engine's router). */
  rank: number | null;
}

/** The answer of an `instances` scenario. */
export interface InstancesAnswer {
  /** One entry per batch: a placement per request, in input order. */
  batches: { placements: InstancesPlacement[] }[];
}

/** A request's tokens: `tokens`, or `0..num_tokens-1`. */
function requestTokens(req: any): number[] {
  if (Array.isArray(req.tokens)) return req.tokens;
  return Array.from({ length: req.num_tokens ?? 0 }, (_, i) => i);
}

/** A request's or cached sequence's KV namespace (LoRA task id, cache salt; absent = none). */
function namespaceOf(x: any): BlockNamespace {
  return { lora_task_id: x.lora_task_id ?? null, cache_salt: x.cache_salt ?? null };
}

/** An own property of a JSON object (ids such as "__proto__" are data, not prototype links). */
function own(obj: any, key: string): any {
  if (obj === null || typeof obj !== "object" || !Object.prototype.hasOwnProperty.call(obj, key)) {
    throw new Error(`missing ${JSON.stringify(key)}`);
  }
  return obj[key];
}

/** The worker id one rank reports under (`_parse_worker_id` format "instance:rankN"). */
const workerId = (instance: string, rank: number) => `${instance}:rank${rank}`;

/** An engine rank's own KV cache as its ADP router probes it: the full-block keys it holds. */
class EngineRankCache {
  /** Held block keys. */
  private readonly blocks = new Set<BlockHash>();

  /** Holds exactly these sequences' full blocks. */
  constructor(prefixes: readonly any[], private readonly tpb: number) {
    for (const p of prefixes) for (const h of storedBlockHashes(p.tokens, tpb, namespaceOf(p))) this.blocks.add(h);
  }

  /** `probe_prefix_match_length(tokens[:-1])`: matched full blocks × block size (the leading held hashes). */
  probe(tokens: readonly number[], ns: BlockNamespace): number {
    let k = 0;
    for (const h of hashTokens(tokens, this.tpb, ns)) {
      if (!this.blocks.has(h)) break;
      k += 1;
    }
    return k * this.tpb;
  }
}

/** Answers one `instances` scenario (see the conformance README's mode `instances`). */
export function oracleInstancesScenario(s: any): InstancesAnswer {
  const rankRouting: string = s.rank_routing;
  if (rankRouting !== "adp" && rankRouting !== "instance" && rankRouting !== "none") {
    throw new Error(`rank_routing must be "adp", "instance" or "none", got ${JSON.stringify(rankRouting)}`);
  }
  const tpb: number = s.tokens_per_block ?? 32;
  const loadWeight: number = s.load_weight ?? 0.25;
  const config = s.config ?? {};
  const instances: { id: string; tp_size: number }[] = s.instances;

  // Phase 1 is the same for every rank routing; "adp" leaves phase 2 to the engines ("none" in the model).
  const router = new CentralizedKVCacheRouter({
    tokensPerBlock: tpb,
    loadWeight,
    rankRoutingAlgo: rankRouting === "instance" ? "instance" : "none",
  });
  const engineRouters = new Map<string, OracleAdpRouter>();
  for (const inst of instances) engineRouters.set(inst.id, new OracleAdpRouter(config, inst.tp_size));

  let eventSeq = 0;
  let loadSeq = 0;
  const out: InstancesAnswer = { batches: [] };
  for (const batch of s.batches) {
    // The fleet's reports before the batch, instance by instance, rank by rank (so the model's
    // insertion orders are the scenario's orders).
    const loads = new Map<string, { active: number; queued: number; tokens: number }[]>();
    const caches = new Map<string, EngineRankCache[]>();
    for (const inst of instances) {
      const ranks: any[] = own(batch.ranks, inst.id);
      if (ranks.length !== inst.tp_size) throw new Error(`instance ${inst.id}: ${ranks.length} ranks, tp_size ${inst.tp_size}`);
      const rankLoads: { active: number; queued: number; tokens: number }[] = [];
      const rankCaches: EngineRankCache[] = [];
      ranks.forEach((rk, r) => {
        const prefixes: any[] = rk.cached_prefixes ?? [];
        // Each block once, as an engine stores it (sequences sharing a prefix share its blocks): a hash
        // repeated within one event would be counted twice in the combined trie's refcount
        // (`new_to_rank` is computed before `owned_hashes` is updated) and outlive its removal.
        const blocks: { block_hash: BlockHash }[] = [];
        const seen = new Set<BlockHash>();
        for (const p of prefixes) {
          for (const h of storedBlockHashes(p.tokens, tpb, namespaceOf(p))) {
            if (seen.has(h)) continue;
            seen.add(h);
            blocks.push({ block_hash: h });
          }
        }
        router.applyEventReport({
          worker_id: workerId(inst.id, r),
          namespace: NAMESPACE,
          seq: eventSeq++,
          is_full_snapshot: true,
          events: blocks.length > 0 ? [{ data: { type: "stored", blocks } }] : [],
        });
        const load = { active: rk.num_active_requests, queued: rk.num_queued_requests ?? 0, tokens: rk.num_active_tokens };
        router.applyLoadReport({
          worker_id: workerId(inst.id, r),
          namespace: NAMESPACE,
          seq: loadSeq++,
          num_active_requests: load.active,
          num_queued_requests: load.queued,
          num_active_tokens: load.tokens,
        });
        rankLoads.push(load);
        rankCaches.push(new EngineRankCache(prefixes, tpb));
      });
      loads.set(inst.id, rankLoads);
      caches.set(inst.id, rankCaches);
    }

    // Phase 1 (and phase 2 "instance"), request by request.
    const placements: InstancesPlacement[] = [];
    for (const req of batch.requests) {
      const sel = router.selectWorker(NAMESPACE, hashTokens(requestTokens(req), tpb, namespaceOf(req)));
      if (sel === null) throw new Error("select_worker found no instance");
      const rank = rankRouting === "instance" ? sel.dp_rank : null;
      placements.push({ id: req.id, instance: sel.worker_id, rank });
      // The fresh load report that counts the placed request.
      const r = rank ?? 0;
      const load = loads.get(sel.worker_id)![r]!;
      load.active += 1;
      router.applyLoadReport({
        worker_id: workerId(sel.worker_id, r),
        namespace: NAMESPACE,
        seq: loadSeq++,
        num_active_requests: load.active,
        num_queued_requests: load.queued,
        num_active_tokens: load.tokens,
      });
    }

    // Phase 2 "adp": each instance's engine router routes what phase 1 sent it, as one batch.
    if (rankRouting === "adp") {
      for (const inst of instances) {
        const mine = batch.requests.filter((_: any, i: number) => placements[i]!.instance === inst.id);
        if (mine.length === 0) continue;
        const ranks: any[] = own(batch.ranks, inst.id);
        const rankCaches = caches.get(inst.id)!;
        const answer = engineRouters.get(inst.id)!.route({
          rank_states: ranks.map((rk, r) => ({
            rank: r,
            num_active_requests: rk.num_active_requests + (rk.num_queued_requests ?? 0),
            num_active_tokens: rk.num_active_tokens,
          })),
          max_num_active_requests: batch.max_num_active_requests,
          requests: mine,
          prefix_matches: rankCaches.map((cache) => {
            const m: Record<string, number> = {};
            for (const req of mine) m[String(req.id)] = cache.probe(requestTokens(req), namespaceOf(req));
            return m;
          }),
        });
        const rankOf = new Map<number, number>();
        for (const [rank, ids] of Object.entries(answer.assignments)) for (const id of ids) rankOf.set(id, Number(rank));
        for (const p of placements) if (p.instance === inst.id) p.rank = rankOf.get(p.id) ?? null;
      }
    }
    out.batches.push({ placements });
  }
  return out;
}
