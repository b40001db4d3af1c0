// The oracle of conformance mode `instances` (test/oracle/instances.ts, which
// drives the plain model of TensorRT-LLM's CentralizedKVCacheRouter in
// test/oracle/centralized-router.ts) against its own fixture, and against
// scenarios whose answers are derived by hand below from router_core.py's
// formulas (@39ff08ab: `select_worker`, `_select_rank_in_instance`,
// `_hash_tokens`, `WorkerPrefixTrie.match_one`).
import { describe, expect, it } from "vitest";
import { CentralizedKVCacheRouter, hashTokens, scoreKvAwareCandidates, storedBlockHashes } from "./oracle/centralized-router.js";
import { oracleInstancesScenario } from "./oracle/instances.js";
import { readJsonLines } from "./support/fixtures.js";

interface Scenario {
  name: string;
  mode: string;
  rank_routing: string;
  expected: unknown;
}

const scenarios = readJsonLines<Scenario>("conformance-instances.jsonl");

/** Placements as compact [id, instance, rank] rows per batch. */
function rows(answer: { batches: { placements: { id: number; instance: string; rank: number | null }[] }[] }) {
  return answer.batches.map((b) => b.placements.map((p) => [p.id, p.instance, p.rank]));
}

/** Tokens 1000+k..: a document nothing else shares. */
const doc = (n: number, base = 1000) => Array.from({ length: n }, (_, k) => base + k);

describe("instances fixture", () => {
  it("has at least 300 scenarios of mode instances covering adp, instance and none", () => {
    expect(scenarios.length).toBeGreaterThanOrEqual(300);
    const kinds = new Map<string, number>();
    for (const s of scenarios) {
      expect(s.mode).toBe("instances");
      expect(Object.keys(s)[0]).toBe("name");
      kinds.set(s.rank_routing, (kinds.get(s.rank_routing) ?? 0) + 1);
    }
    expect([...kinds.keys()].sort()).toEqual(["adp", "instance", "none"]);
    for (const n of kinds.values()) expect(n).toBeGreaterThanOrEqual(90);
    expect(new Set(scenarios.map((s) => s.name)).size).toBe(scenarios.length);
  });

  it("is reproduced by the oracle, line by line", () => {
    const failed: string[] = [];
    for (const s of scenarios) {
      const { expected, ...input } = s;
      if (JSON.stringify(oracleInstancesScenario(JSON.parse(JSON.stringify(input)))) !== JSON.stringify(expected)) failed.push(s.name);
    }
    expect(failed).toEqual([]);
  });
});

describe("instances oracle, hand-checked", () => {
  it("breaks phase-1 ties round robin with one fleet counter bumped on every request", () => {
    // load_weight 0: score(i) = matched(i). Views: B rank 0 holds doc(8) (2 blocks of 4).
    // req 1 (cold):  A 0, B 0 → ties [A, B], c = 0 → A.
    // req 2 (doc(8)+[1]: tokens[:-1] = doc(8) = 2 full blocks): A 0, B 2 → [B], c = 1 → B.
    // req 3 (cold):  ties [A, B], c = 2 → A.  req 4 (cold): c = 3 → B.  req 5 (1 token): c = 4 → A.
    // Batch 2 (same fleet): req 6 cold, c = 5 → B.
    const idle = { num_active_requests: 0, num_active_tokens: 0 };
    const s = {
      name: "tie-rr",
      mode: "instances",
      rank_routing: "none",
      load_weight: 0,
      tokens_per_block: 4,
      instances: [{ id: "A", tp_size: 1 }, { id: "B", tp_size: 1 }],
      batches: [
        {
          max_num_active_requests: 8,
          ranks: { A: [idle], B: [{ ...idle, cached_prefixes: [{ tokens: doc(8) }] }] },
          requests: [
            { id: 1, tokens: [1, 2, 3, 4, 5] },
            { id: 2, tokens: [...doc(8), 1] },
            { id: 3, tokens: [6, 7, 8] },
            { id: 4, tokens: [9, 10, 11] },
            { id: 5, tokens: [12] },
          ],
        },
        { max_num_active_requests: 8, ranks: { A: [idle], B: [idle] }, requests: [{ id: 6, tokens: [13, 14] }] },
      ],
    };
    expect(rows(oracleInstancesScenario(s))).toEqual([
      [[1, "A", null], [2, "B", null], [3, "A", null], [4, "B", null], [5, "A", null]],
      [[6, "B", null]],
    ]);
  });

  it("counts placed requests as load: equal idle instances alternate under load_weight 0.25", () => {
    // req 1: A 0, B 0 → ties, c 0 → A (A workload 1).  req 2: A −0.25, B 0 → B (c 1).
    // req 3: A −0.25, B −0.25 → ties, c 2 → A.  req 4: A −0.5, B −0.25 → B.
    const idle = { num_active_requests: 0, num_active_tokens: 0 };
    const s = {
      name: "load-counts",
      mode: "instances",
      rank_routing: "none",
      instances: [{ id: "A", tp_size: 2 }, { id: "B", tp_size: 2 }],
      batches: [
        {
          max_num_active_requests: 8,
          ranks: { A: [idle, idle], B: [idle, idle] },
          requests: [1, 2, 3, 4].map((id) => ({ id, num_tokens: 40 })),
        },
      ],
    };
    expect(rows(oracleInstancesScenario(s))).toEqual([[[1, "A", null], [2, "B", null], [3, "A", null], [4, "B", null]]]);
  });

  it("lets 3 cached blocks win over load 4, and phase 2 'instance' picks the caching rank", () => {
    // tokens_per_block 4. A (4 ranks): loads (active+queued) 1, 1+1, 1, 0 → workload 4; rank 2 holds
    // doc(12) = 3 blocks. B (2 ranks) idle, no cache.
    // req 7 = doc(14): tokens[:-1] = 13 tokens → hashes [b1, b2, b3, partial(1 token)]; A's combined trie
    //   matches 3 → score(A) = 3 − 0.25·4 = 2 > score(B) = 0 → A (c 0 → 1).
    //   Phase 2 over A: r0 0 − 0.25·1 = −0.25, r1 0 − 0.25·2 = −0.5, r2 3 − 0.25·1 = 2.75, r3 0 → rank 2.
    // req 8 (cold, 3 tokens): A 0 − 0.25·5 = −1.25, B 0 → B; B ranks 0, 0 → ties [0, 1], c_B 0 → rank 0.
    // req 9 (cold): A −1.25, B −0.25 → B; B ranks −0.25, 0 → rank 1 (c_B 1 → 2).
    // req 10 (cold): A −1.25, B −0.5 → B; B ranks −0.25, −0.25 → ties [0, 1], c_B 2 → rank 0.
    // req 11 = doc(14) under LoRA 42: no block of that namespace anywhere → A −1.25, B −0.75 → B;
    //   B ranks −0.5, −0.25 → rank 1.
    const s = {
      name: "cache-beats-load",
      mode: "instances",
      rank_routing: "instance",
      load_weight: 0.25,
      tokens_per_block: 4,
      instances: [{ id: "A", tp_size: 4 }, { id: "B", tp_size: 2 }],
      batches: [
        {
          max_num_active_requests: 4,
          ranks: {
            A: [
              { num_active_requests: 1, num_active_tokens: 50 },
              { num_active_requests: 1, num_queued_requests: 1, num_active_tokens: 50 },
              { num_active_requests: 1, num_active_tokens: 50, cached_prefixes: [{ tokens: doc(12) }] },
              { num_active_requests: 0, num_active_tokens: 0 },
            ],
            B: [
              { num_active_requests: 0, num_active_tokens: 0 },
              { num_active_requests: 0, num_active_tokens: 0 },
            ],
          },
          requests: [
            { id: 7, tokens: doc(14) },
            { id: 8, tokens: [1, 2, 3] },
            { id: 9, tokens: [4, 5, 6] },
            { id: 10, tokens: [7, 8, 9] },
            { id: 11, tokens: doc(14), lora_task_id: 42 },
          ],
        },
      ],
    };
    expect(rows(oracleInstancesScenario(s))).toEqual([[[7, "A", 2], [8, "B", 0], [9, "B", 1], [10, "B", 0], [11, "B", 1]]]);
  });

  it("drops the last token and hashes the trailing partial block (_hash_tokens)", () => {
    // tokens_per_block 4; A rank 0 holds doc(8) = 2 blocks and has 1 active request; B idle.
    // req 1 = doc(9): tokens[:-1] = doc(8) → 2 full blocks → A 2 − 0.25 = 1.75 > 0 → A.
    // req 2 = doc(8): tokens[:-1] = 7 tokens → [b1, partial(3)] → matched 1 → A 1 − 0.5 = 0.5 > 0 → A.
    // req 3 = doc(4): tokens[:-1] = 3 tokens → [partial(3)] → matched 0 → A −0.75 < B 0 → B.
    // req 4 = doc(1): no hashes → score −load_weight × workload: A −0.75, B −0.25 → B.
    const s = {
      name: "partial-block",
      mode: "instances",
      rank_routing: "none",
      tokens_per_block: 4,
      instances: [{ id: "A", tp_size: 1 }, { id: "B", tp_size: 1 }],
      batches: [
        {
          max_num_active_requests: 8,
          ranks: {
            A: [{ num_active_requests: 1, num_active_tokens: 10, cached_prefixes: [{ tokens: doc(8) }] }],
            B: [{ num_active_requests: 0, num_active_tokens: 0 }],
          },
          requests: [
            { id: 1, tokens: doc(9) },
            { id: 2, tokens: doc(8) },
            { id: 3, tokens: doc(4) },
            { id: 4, tokens: doc(1) },
          ],
        },
      ],
    };
    expect(rows(oracleInstancesScenario(s))).toEqual([[[1, "A", null], [2, "A", null], [3, "B", null], [4, "B", null]]]);
  });

  it("phase 2 'adp': the engine's KV-cache-aware router takes the cached rank, and leaves overflow unassigned", () => {
    // Batch 1: tokens_per_block 4, A (2 ranks, idle) rank 1 holds doc(8); B (1 rank) has 100 active.
    // Phase 1: req 1 = doc(12): A matched 2 → 2 > B −25 → A; reqs 2..4 (cold) → A (−0.25k > −25).
    // A's KV router (β 1, threshold 0.1, multiplier 0.5): E = min(max(ceil(0.5 · floor((0 + 4 + 1)/2)), 0), 8) = 1.
    //   Fingerprint order: the cold [1, 2, ...] requests sort before doc(12) (1 < 1000): 2, 3, 4, 1.
    //   req 2 (10 tokens, no cache): shuffle Random(2) of [0, 1] = [1, 0]; scores 10 and 10, the first (rank 1) stays → rank 1, full.
    //   req 3: eligible [0] → rank 0, full.  reqs 4 and 1: no eligible rank → unassigned (rank null).
    // Batch 2: same views; A's router is the same object (no warm-up, no bindings); multiplier 0.5 again.
    //   req 5 = doc(12) alone: E = min(max(ceil(0.5 · floor((0 + 1 + 1)/2)), 0), 8) = 1; affinity 8/12 > 0.1;
    //   denom = max(0, 12) = 12; score r0 = 12 − 0 = 12, r1 = 12 − 8 = 4 → rank 1.
    const cold = (id: number) => ({ id, tokens: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] });
    const ranksA = [{ num_active_requests: 0, num_active_tokens: 0 }, { num_active_requests: 0, num_active_tokens: 0, cached_prefixes: [{ tokens: doc(8) }] }];
    const ranksB = [{ num_active_requests: 100, num_active_tokens: 5000 }];
    const s = {
      name: "adp-kv",
      mode: "instances",
      rank_routing: "adp",
      tokens_per_block: 4,
      config: { enable_kv_cache_aware_routing: true, kv_cache_routing_fair_share_multiplier: 0.5 },
      instances: [{ id: "A", tp_size: 2 }, { id: "B", tp_size: 1 }],
      batches: [
        { max_num_active_requests: 8, ranks: { A: ranksA, B: ranksB }, requests: [{ id: 1, tokens: doc(12) }, cold(2), cold(3), cold(4)] },
        { max_num_active_requests: 8, ranks: { A: ranksA, B: ranksB }, requests: [{ id: 5, tokens: doc(12) }] },
      ],
    };
    expect(rows(oracleInstancesScenario(s))).toEqual([
      [[1, "A", null], [2, "A", 1], [3, "A", 0], [4, "A", null]],
      [[5, "A", 1]],
    ]);
  });

  it("phase 2 'adp' with the default router balances the requests phase 1 sent", () => {
    // One idle instance of 2 ranks, config {}: counts [0, 0], E = min(max(ceil(floor((0 + 2 + 1)/2)), 0), 4) = 1;
    // by tokens descending: req 2 (20 tokens) → min (0, 0, rank 0) → rank 0 (full); req 1 → rank 1.
    const idle = { num_active_requests: 0, num_active_tokens: 0 };
    const s = {
      name: "adp-default",
      mode: "instances",
      rank_routing: "adp",
      instances: [{ id: "solo", tp_size: 2 }],
      batches: [{ max_num_active_requests: 4, ranks: { solo: [idle, idle] }, requests: [{ id: 1, num_tokens: 10 }, { id: 2, num_tokens: 20 }] }],
    };
    expect(rows(oracleInstancesScenario(s))).toEqual([[[1, "solo", 1], [2, "solo", 0]]]);
  });
});

describe("centralized router model, hand-checked", () => {
  const tpb = 4;
  const report = (worker: string, seq: number, events: any[], full = false) => ({ worker_id: worker, namespace: "gen", seq, events, is_full_snapshot: full });
  const load = (worker: string, seq: number, active: number) => ({ worker_id: worker, namespace: "gen", seq, num_active_requests: active });

  it("keeps a block in the combined trie until the last rank holding it removes it", () => {
    // Both ranks of A store doc(8) (refcount 2 per block). Rank 0 removes both blocks: refcount 1,
    // A still matches 2. Rank 1 removes block 2: refcount 0 → the combined trie drops it → 1.
    const r = new CentralizedKVCacheRouter({ tokensPerBlock: tpb, rankRoutingAlgo: "none" });
    const hs = storedBlockHashes(doc(8), tpb);
    r.applyEventReport(report("A:rank0", 0, [{ data: { type: "stored", blocks: hs.map((h) => ({ block_hash: h })) } }]));
    r.applyEventReport(report("A:rank1", 0, [{ data: { type: "stored", blocks: hs.map((h) => ({ block_hash: h })) } }]));
    r.applyLoadReport(load("A:rank0", 0, 0));
    const q = hashTokens(doc(9), tpb);
    expect(r.selectWorker("gen", q)!.matched_blocks).toBe(2);
    r.applyEventReport(report("A:rank0", 1, [{ data: { type: "removed", block_hashes: hs } }]));
    expect(r.selectWorker("gen", q)!.matched_blocks).toBe(2);
    r.applyEventReport(report("A:rank1", 1, [{ data: { type: "removed", block_hashes: [hs[1]!] } }]));
    expect(r.selectWorker("gen", q)!.matched_blocks).toBe(1);
    // A stale (seq not newer), non-snapshot report is dropped.
    r.applyEventReport(report("A:rank1", 1, [{ data: { type: "removed", block_hashes: [hs[0]!] } }]));
    expect(r.selectWorker("gen", q)!.matched_blocks).toBe(1);
  });

  it("skips instances and ranks that never reported load (suspended)", () => {
    // B holds the prefix but has no load report: only A is a candidate. In A, rank 1 has no load: rank 0.
    const r = new CentralizedKVCacheRouter({ tokensPerBlock: tpb });
    const blocks = storedBlockHashes(doc(8), tpb).map((h) => ({ block_hash: h }));
    r.applyEventReport(report("B:rank0", 0, [{ data: { type: "stored", blocks } }]));
    r.applyEventReport(report("A:rank1", 0, [{ data: { type: "stored", blocks } }]));
    r.applyLoadReport(load("A:rank0", 0, 3));
    expect(r.selectWorker("gen", hashTokens(doc(9), tpb))).toEqual({ worker_id: "A", matched_blocks: 2, dp_rank: 0 });
  });

  it("scores 'adp' candidates as score_kv_aware_candidates does", () => {
    // loads 100, 0, 900 → mean 333.3, cap 666.7 → rank 2 dropped. units 64; max match 32/64 > 0.1.
    // total load 100: r0 32 − 1·(100/100·64) = −32; r1 0 − 0 = 0 → [1].
    expect(scoreKvAwareCandidates([[0, 32, 100], [1, 0, 0], [2, 64, 900]], { loadWeight: 1, fairShareMultiplier: 2, matchRateThreshold: 0.1, totalUnits: 64 })).toEqual([1]);
    // Gate off (4/64 ≤ 0.1), equal loads → both tie.
    expect(scoreKvAwareCandidates([[0, 4, 10], [1, 0, 10]], { loadWeight: 0.25, fairShareMultiplier: 2, matchRateThreshold: 0.1, totalUnits: 64 })).toEqual([0, 1]);
    expect(scoreKvAwareCandidates([], { loadWeight: 0.25, fairShareMultiplier: 2, matchRateThreshold: 0.1, totalUnits: 64 })).toBeNull();
  });
});
