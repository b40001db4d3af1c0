// Global setup: Node's answers to every conformance scenario, one JSON line each,
// provided to the browser project so it can compare its own byte for byte.
import { readFileSync } from "node:fs";
import type { TestProject } from "vitest/node";
import { runScenario } from "../../src/conformance.js";

declare module "vitest" {
  export interface ProvidedContext {
    nodeConformanceAnswers: string;
  }
}

export default function setup(project: TestProject): void {
  const lines = readFileSync(new URL("../fixtures/conformance.jsonl", import.meta.url), "utf8").split("\n").filter((l) => l.trim() !== "");
  project.provide("nodeConformanceAnswers", lines.map((l) => JSON.stringify(runScenario(JSON.parse(l)))).join("\n"));
}
