// The plain oracle of the three ADP routers (test/oracle/adp-routers.ts) must
// answer every `route` conformance scenario (labelled by TensorRT-LLM's own
// routers) exactly as TensorRT-LLM did, before it may label new scenarios.
import { describe, expect, it } from "vitest";
import { oracleRouteScenario } from "./oracle/adp-routers.js";
import { readJsonLines } from "./support/fixtures.js";

interface Scenario {
  name: string;
  mode: string;
  expected: unknown;
}

const routeScenarios = readJsonLines<Scenario>("conformance.jsonl").filter((s) => s.mode === "route");

/** A deep-equality check that names the first differing path (JSON values only). */
function firstDiff(want: unknown, got: unknown, path = "$"): string | null {
  if (Array.isArray(want) || Array.isArray(got)) {
    if (!Array.isArray(want) || !Array.isArray(got)) return `${path}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
    if (want.length !== got.length) return `${path}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
    for (let i = 0; i < want.length; i++) {
      const d = firstDiff(want[i], got[i], `${path}[${i}]`);
      if (d !== null) return d;
    }
    return null;
  }
  if (want !== null && typeof want === "object" && got !== null && typeof got === "object") {
    const wk = Object.keys(want).sort();
    const gk = Object.keys(got).sort();
    if (JSON.stringify(wk) !== JSON.stringify(gk)) return `${path}: keys ${JSON.stringify(wk)} vs ${JSON.stringify(gk)}`;
    for (const k of wk) {
      const d = firstDiff((want as Record<string, unknown>)[k], (got as Record<string, unknown>)[k], `${path}.${k}`);
      if (d !== null) return d;
    }
    return null;
  }
  return Object.is(want, got) ? null : `${path}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`;
}

describe("the ADP router oracle agrees with TensorRT-LLM", () => {
  it("has route scenarios of all three routers to check", () => {
    expect(routeScenarios.length).toBeGreaterThan(0);
    const kinds = new Set(routeScenarios.map((s) => (s.expected as { router: string }).router));
    expect(kinds).toEqual(new Set(["default", "kv_cache_aware", "conversation"]));
  });

  it(`answers all ${routeScenarios.length} route scenarios exactly`, () => {
    const failures: string[] = [];
    for (const s of routeScenarios) {
      let got: unknown;
      try {
        got = oracleRouteScenario(s);
      } catch (e) {
        failures.push(`${s.name}: threw ${(e as Error).message}`);
        continue;
      }
      const d = firstDiff(s.expected, got);
      if (d !== null) failures.push(`${s.name}: ${d}`);
      else expect(got).toEqual(s.expected);
    }
    expect(failures).toEqual([]);
  });
});
