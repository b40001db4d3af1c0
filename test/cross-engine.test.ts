// Cross-engine determinism: the answers to all 600 conformance scenarios, computed
// in this engine, equal Node's byte for byte (in Node this checks the harness; in
// the browser project it compares Chromium's V8 + wasm against Node's).
import { describe, expect, inject, it } from "vitest";
import { runScenario } from "../src/index.js";
import { readJsonLines } from "./support/fixtures.js";

describe("conformance answers, this engine against Node", () => {
  it("are identical byte for byte", () => {
    const nodeAnswers = inject("nodeConformanceAnswers").split("\n");
    const scenarios = readJsonLines("conformance.jsonl");
    expect(nodeAnswers).toHaveLength(scenarios.length);
    const mismatches = scenarios.flatMap((s, i) => {
      const mine = JSON.stringify(runScenario(s));
      return mine === nodeAnswers[i] ? [] : [`line ${i + 1}: ${mine.slice(0, 120)} != ${nodeAnswers[i]!.slice(0, 120)}`];
    });
    expect(mismatches).toEqual([]);
  });
});
