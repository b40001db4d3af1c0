// Every conformance scenario (labelled by TensorRT-LLM's own routers) must be
// answered identically: to the request, the id and the order.
import { describe, expect, it } from "vitest";
import { firstDifference, runScenario } from "../src/index.js";
import { readJsonLines } from "./support/fixtures.js";

interface Scenario {
  name: string;
  mode: string;
  expected: unknown;
  batches?: { cached_prefixes?: unknown }[];
}

const scenarios = readJsonLines<Scenario>("conformance.jsonl");
const needsIndex = (s: Scenario) => s.batches?.some((b) => b.cached_prefixes !== undefined) ?? false;

describe("conformance with TensorRT-LLM's routers", () => {
  it("covers all three modes and all three routers", () => {
    expect(scenarios.length).toBe(600);
    expect(new Set(scenarios.map((s) => s.mode))).toEqual(new Set(["route", "balance", "validate"]));
  });

  for (const mode of ["route", "balance", "validate"]) {
    const group = scenarios.filter((s) => s.mode === mode);
    it(`${mode}: ${group.length} scenarios identical`, () => {
      const failures = group.flatMap((s) => {
        const d = firstDifference(s.expected, runScenario(s));
        return d === null ? [] : [`${s.name}: ${d}`];
      });
      expect(failures).toEqual([]);
    });
  }

  it("includes scenarios whose ranks' caches come from cached_prefixes (the prefix index path)", () => {
    expect(scenarios.filter(needsIndex).length).toBeGreaterThan(100);
  });

  it("answers with an error line, never a crash, for a scenario it cannot run", () => {
    expect(runScenario({ mode: "route", tp_size: 2, batches: [{ rank_states: [], max_num_active_requests: 1, requests: [] }] })).toHaveProperty("error");
    expect(runScenario({ mode: "fly" })).toEqual({ error: 'unknown mode "fly"' });
    expect(runScenario(null)).toHaveProperty("error");
  });
});
