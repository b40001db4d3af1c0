// Fuzzing snapshots: damaged bytes (bit flips, overwrites, truncations,
// appends, with and without a recomputed checksum) and crafted ones (edited
// states and node records, re-sealed, with a valid checksum) are refused with
// AdpInputError naming `snapshot`, or restore into an object that keeps every
// promise (see restoreAndUse). A trap or an untyped error fails at once.
// `npm test` runs 2,000; `npm run fuzz` sets ADP_FUZZ_RUNS (100,000 by default)
// and prints the tallies.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { fail, FUZZ_RUNS, sameBytes, show } from "./support/fuzz.js";
import { baseSnapshots, damage, damageArb, damageStructured, reseal, restoreAndUse, structuredArb } from "./support/snapshot-damage.js";

/** Random byte damage runs (half of a long run; 700 of the short one). */
const RANDOM_RUNS = FUZZ_RUNS === 2000 ? 700 : Math.ceil(FUZZ_RUNS / 2);
/** Structure-aware runs: the rest. */
const STRUCTURED_RUNS = FUZZ_RUNS - RANDOM_RUNS;

/** Prints a tally (what `npm run fuzz` reports). */
function report(kind: string, tally: { refused: number; behaved: number }, runs: number): void {
  console.log(`snapshot fuzz, ${kind}: ${runs} damaged snapshots, ${tally.refused} refused with AdpInputError, ${tally.behaved} restored and behaved, 0 traps, 0 untyped errors`);
}

describe("fuzz: damaged snapshots are refused with AdpInputError or restore into objects that keep their promises", () => {
  it("random byte damage: flips, overwrites, truncations, appends, with and without a recomputed checksum (fixed seed)", () => {
    const tally = { refused: 0, behaved: 0 };
    fc.assert(
      fc.property(fc.nat(), fc.array(damageArb, { minLength: 1, maxLength: 4 }), fc.boolean(), (which, ops, resealed) => {
        const base = baseSnapshots()[which % baseSnapshots().length]!;
        const damaged = damage(base.bytes, ops);
        const bytes = resealed ? reseal(damaged) : damaged;
        const outcome = restoreAndUse(bytes, base.kind, `${base.name}, ${show(ops)}${resealed ? ", resealed" : ""}`);
        tally[outcome]++;
        // Without resealing, the checksum refuses any change.
        if (!resealed && outcome === "behaved" && !sameBytes(bytes, base.bytes)) fail(`${base.name}: changed bytes passed the checksum: ${show(ops)}`);
      }),
      { seed: 0xda3a6e, numRuns: RANDOM_RUNS },
    );
    report("random bytes", tally, RANDOM_RUNS);
    expect(tally.refused).toBeGreaterThan(0.85 * RANDOM_RUNS);
  });

  it("structure-aware damage: crafted states and node records with a valid checksum (fixed seed)", () => {
    const tally = { refused: 0, behaved: 0 };
    fc.assert(
      fc.property(fc.nat(), structuredArb, (which, d) => {
        const base = baseSnapshots()[which % baseSnapshots().length]!;
        const bytes = damageStructured(base.bytes, base.kind, d);
        tally[restoreAndUse(bytes, base.kind, `${base.name}, ${show(d)}`)]++;
      }),
      { seed: 0x57c0de, numRuns: STRUCTURED_RUNS },
    );
    report("structure-aware", tally, STRUCTURED_RUNS);
    // Both outcomes occur: the edits reach the checks, and harmless edits restore.
    expect(tally.refused).toBeGreaterThan(0.25 * STRUCTURED_RUNS);
    expect(tally.behaved).toBeGreaterThan(0.04 * STRUCTURED_RUNS);
  });

  it("every base snapshot restores and behaves unchanged", () => {
    for (const base of baseSnapshots()) expect(restoreAndUse(base.bytes, base.kind, base.name)).toBe("behaved");
  });
});
