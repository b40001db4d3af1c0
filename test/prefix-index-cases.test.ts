// The 300 prefix-index cases: replay each op list against createPrefixIndex.
import { describe, expect, it } from "vitest";
import { createPrefixIndex, type PrefixNamespace } from "../src/index.js";
import { readJsonLines } from "./support/fixtures.js";

interface Op {
  op: "insert" | "match" | "clearRank" | "blockCount";
  rank?: number;
  tokens?: number[];
  ns?: PrefixNamespace;
  expect?: number | number[];
}
interface Case {
  name?: string;
  config: { numRanks: number; tokensPerBlock: number; capacityBlocksPerRank?: number };
  ops: Op[];
}

/** Replays one case; returns the first mismatch or null. */
export function replayCase(c: Case): string | null {
  const index = createPrefixIndex(c.config);
  try {
    for (const [i, op] of c.ops.entries()) {
      if (op.op === "insert") index.insert(op.rank!, op.tokens!, op.ns);
      else if (op.op === "clearRank") index.clearRank(op.rank!);
      else if (op.op === "match") {
        const got = [...index.match(op.tokens!, op.ns)];
        if (JSON.stringify(got) !== JSON.stringify(op.expect)) return `op ${i} match: expected ${JSON.stringify(op.expect)}, got ${JSON.stringify(got)}`;
      } else if (op.op === "blockCount") {
        const got = index.blockCount(op.rank!);
        if (got !== op.expect) return `op ${i} blockCount(${op.rank}): expected ${op.expect}, got ${got}`;
      }
    }
    return null;
  } finally {
    index.dispose();
  }
}

describe("prefix-index cases", () => {
  const cases = readJsonLines<Case>("prefix-index-cases.jsonl");
  it(`all ${cases.length} cases replay exactly`, () => {
    const failures = cases.flatMap((c, i) => {
      const d = replayCase(c);
      return d === null ? [] : [`case ${c.name ?? i}: ${d}`];
    });
    expect(failures.slice(0, 5)).toEqual([]);
  });
});
