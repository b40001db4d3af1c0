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
    expect(() => createInstanceRouter({ instances: [{ numRanks: 1 }], rankRouting: "pinned" as never })).toThrow(/rankRouting/);
    expect(() => createInstanceRouter({ instances: [{ numRanks: 1 }], loadWeight: -1 })).toThrow(/loadWeight/);
  });
});
