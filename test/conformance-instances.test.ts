// Multi-instance conformance: several engines of several DP ranks each, routed
// in two phases (TensorRT-LLM's centralized router picks the engine, then the
// rank). Every scenario's `expected` comes from the reference models in
// test/oracle (centralized-router.ts, written from router_core.py @39ff08ab,
// driven by instances.ts; phase 2 `adp` by adp-routers.ts, itself checked
// against the TensorRT-LLM-labelled route scenarios): the library must answer
// each identically, to the request, the instance and the rank. Runs in Node
// and in Chromium.
import { describe, expect, it } from "vitest";
import { createInstanceRouter, firstDifference, runScenario } from "../src/index.js";
import { readJsonLines } from "./support/fixtures.js";

interface Scenario {
  name: string;
  mode: string;
  rank_routing: string;
  expected: { batches: { placements: { rank: number | null }[] }[] };
}

const scenarios = readJsonLines<Scenario>("conformance-instances.jsonl");

describe("multi-instance conformance with the reference models", () => {
  it("covers the three rank-routing kinds, with ranks chosen and ranks left to the engine", () => {
    expect(scenarios.length).toBeGreaterThanOrEqual(300);
    expect(new Set(scenarios.map((s) => s.mode))).toEqual(new Set(["instances"]));
    expect(new Set(scenarios.map((s) => s.rank_routing))).toEqual(new Set(["adp", "instance", "none"]));
    const ranks = scenarios.flatMap((s) => s.expected.batches.flatMap((b) => b.placements.map((p) => p.rank)));
    expect(ranks.filter((r) => r === null).length).toBeGreaterThan(100);
    expect(ranks.filter((r) => r !== null && r > 0).length).toBeGreaterThan(1000);
  });

  for (const kind of ["adp", "instance", "none"]) {
    const group = scenarios.filter((s) => s.rank_routing === kind);
    it(`rank_routing ${kind}: ${group.length} scenarios identical`, () => {
      const failures = group.flatMap((s) => {
        const d = firstDifference(s.expected, runScenario(s));
        return d === null ? [] : [`${s.name}: ${d}`];
      });
      expect(failures).toEqual([]);
    });
  }

  it("refuses what does not fit the fleet with a typed error, before any state changes", () => {
    const router = createInstanceRouter({ instances: [{ numRanks: 2 }, { numRanks: 1 }], rankRouting: "instance" });
    const idle = [{ ranks: [{ numActiveRequests: 0, numActiveTokens: 0 }, { numActiveRequests: 0, numActiveTokens: 0 }] }, { ranks: [{ numActiveRequests: 0, numActiveTokens: 0 }] }];
    const bad = [
      { instances: idle.slice(0, 1), maxNumActiveRequests: 4, requests: [] },
      { instances: [idle[0]!, { ranks: [] }], maxNumActiveRequests: 4, requests: [] },
      { instances: [{ ranks: [{ numActiveRequests: -1, numActiveTokens: 0 }, idle[0]!.ranks[1]!] }, idle[1]!], maxNumActiveRequests: 4, requests: [] },
      { instances: idle, maxNumActiveRequests: 4, requests: [{ id: 1, numTokens: 3, instanceMatches: [[0, 0]] }] },
      { instances: idle, maxNumActiveRequests: 4, requests: [{ id: 1, numTokens: 3, instanceMatches: [[0, Number.NaN], [0]] }] },
    ];
    for (const input of bad) expect(() => router.route(input as never)).toThrow(expect.objectContaining({ code: "ERR_ADP_INPUT" }));
    // Nothing moved: the first good batch still breaks its tie at the first instance, then turns.
    const cold = { instances: idle, maxNumActiveRequests: 4, requests: [{ id: 1, numTokens: 3 }] };
    expect(router.route(cold).map((p) => p.instance)).toEqual([0]);
    expect(router.route(cold).map((p) => p.instance)).toEqual([1]);
    expect(() => createInstanceRouter({ instances: [] })).toThrow(expect.objectContaining({ code: "ERR_ADP_INPUT" }));
    expect(() => createInstanceRouter({ instances: [{ numRanks: 1 }], rankrouting: "none" } as never)).toThrow(/rankrouting: is not a createInstanceRouter option/);
  });

  it("checks a whole batch before anything moves: what phase 1 would place on any instance, as one batch over the smallest", () => {
    const ranks = (n: number) => ({ ranks: Array.from({ length: n }, () => ({ numActiveRequests: 0, numActiveTokens: 0 })) });
    const router = createInstanceRouter({ instances: [{ numRanks: 8 }, { numRanks: 4 }], rankRouting: "adp", attentionDp: { kv_cache_routing_conversation_affinity: true } });
    const fleet = [ranks(8), ranks(4)];
    // A strict rank only the larger instance has is refused whichever instance phase 1 would pick, named by its own index.
    for (let k = 0; k < 3; k++) {
      expect(() => router.route({ instances: fleet, maxNumActiveRequests: 4, requests: [{ id: 1, numTokens: 4, conversationId: "c" }, { id: 2, numTokens: 4, attentionDpRank: 6, attentionDpRelax: false }] })).toThrow(/requests\[1\]\.attentionDpRank/);
    }
    // Ids are unique across the whole batch, not per instance; a bad field anywhere refuses it all.
    expect(() => router.route({ instances: fleet, maxNumActiveRequests: 4, requests: [{ id: 1, numTokens: 4 }, { id: 1, numTokens: 4 }] })).toThrow(/requests\[1\]\.id: must be unique/);
    expect(() => router.route({ instances: fleet, maxNumActiveRequests: 4, requests: [{ id: 1, numTokens: 4, conversationId: "c" }, { id: 2, numTokens: 1.5 }] })).toThrow(/requests\[1\]\.numTokens/);
    expect(() => router.route({ instances: [{ ranks: [{ numActiveRequests: 1.5, numActiveTokens: 0 }, ...ranks(7).ranks] }, ranks(4)], maxNumActiveRequests: 4, requests: [] })).toThrow(/instances\[0\]\.ranks\[0\]\.numActiveRequests/);
    // Nothing moved: no conversation bound, the counter where it was (the first cold request ties, instance 0 first).
    expect(router.routers[0]!.metrics().conversations?.tracked ?? 0).toBe(0);
    expect(router.route({ instances: fleet, maxNumActiveRequests: 4, requests: [{ id: 9, numTokens: 4 }] })[0]!.instance).toBe(0);
  });

  it("an instance's own queue counts in phase 1; its room stops it being a candidate once this batch filled it", () => {
    const idle = { ranks: [{ numActiveRequests: 0, numActiveTokens: 0 }] };
    const router = createInstanceRouter({ instances: [{ numRanks: 1 }, { numRanks: 1 }], rankRouting: "none" });
    // Instance 0 holds 2 blocks of the prompt; 12 queued there (3 of workload) outweigh them.
    const matches = [[64], [0]];
    expect(router.route({ instances: [{ ...idle, numQueuedRequests: 12 }, idle], maxNumActiveRequests: 4, requests: [{ id: 1, numTokens: 80, instanceMatches: matches }] })[0]!.instance).toBe(1);
    const burst = Array.from({ length: 4 }, (_, i) => ({ id: 10 + i, numTokens: 80, instanceMatches: matches }));
    expect(router.route({ instances: [{ ...idle, room: 2 }, idle], maxNumActiveRequests: 4, requests: burst }).map((p) => p.instance)).toEqual([0, 0, 1, 1]);
    expect(router.route({ instances: [{ ...idle, room: 0 }, { ...idle, room: 0 }], maxNumActiveRequests: 4, requests: burst.slice(0, 1) })[0]!.instance).toBe(-1);
    expect(() => router.route({ instances: [{ ...idle, room: -1 }, idle], maxNumActiveRequests: 4, requests: [] })).toThrow(/instances\[0\]\.room/);
    expect(() => router.route({ instances: [{ ...idle, numQueuedRequests: 0.5 }, idle], maxNumActiveRequests: 4, requests: [] })).toThrow(/instances\[0\]\.numQueuedRequests/);
  });

  it("conformance mode instances refuses instance ids that are not distinct non-empty strings, on that line", () => {
    const base = { mode: "instances", rank_routing: "none", batches: [] };
    for (const instances of [[{ id: "a", tp_size: 1 }, { id: "a", tp_size: 1 }], [{ tp_size: 1 }], [{ id: 5, tp_size: 1 }]]) {
      expect(runScenario({ ...base, instances })).toEqual({ error: expect.stringMatching(/instances\[\]\.id: must be distinct non-empty strings/) });
    }
    expect(() => createInstanceRouter({ instances: [{ numRanks: 1 }], rankRouting: "pinned" as never })).toThrow(/rankRouting/);
    expect(() => createInstanceRouter({ instances: [{ numRanks: 1 }], loadWeight: -1 })).toThrow(/loadWeight/);
  });
});
