// The KV-cache-aware router's fingerprint order (issue #15): the multikey
// quicksort gives exactly the order of a stable sort by the reference
// comparator, on batches built to hit every case (shared prefixes of every
// length up to and past 64 tokens, proper prefixes, equal fingerprints of
// equal and different lengths, block keys, count-only requests, big ids).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { BatchRequest } from "../src/batch.js";
import { byFingerprint, FingerprintSort } from "../src/routers/fingerprint.js";

/** A request in the shape the sort reads (the other fields are not looked at). */
function request(index: number, tokens: Uint32Array | null, blockKeys: Float64Array | null, numTokens: number): BatchRequest {
  return {
    index, id: index, idLo: index, idHi: 0, numTokens, tokens, hasParams: true, rank: null, relax: true, conversationKey: null,
    loraTaskId: null, cacheSalt: null, namespace: [0, 0], matchesRow: -1, blockKeys,
  };
}

/** One request spec: a stem shared with others, its own tail, and how it carries the prompt. */
const specArb = fc.record({
  stem: fc.integer({ min: 0, max: 3 }),
  stemLength: fc.constantFrom(0, 1, 2, 30, 63, 64, 65, 100),
  tail: fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 6 }),
  tailLength: fc.integer({ min: 0, max: 40 }),
  kind: fc.constantFrom("tokens", "tokens", "tokens", "keys", "count"),
  numTokens: fc.integer({ min: 0, max: 5 }),
  big: fc.boolean(),
});

/** Builds the batch the specs describe. */
function batchOf(specs: readonly (typeof specArb extends fc.Arbitrary<infer T> ? T : never)[]): BatchRequest[] {
  return specs.map((s, i) => {
    const prompt: number[] = [];
    for (let k = 0; k < s.stemLength; k++) prompt.push(s.big ? 2 ** 32 - 1 - ((s.stem * 31 + k) % 5) : (s.stem * 7 + k) % 11);
    for (let k = 0; k < s.tailLength; k++) prompt.push(s.tail[k % Math.max(1, s.tail.length)] ?? 0);
    if (s.kind === "count") return request(i, null, null, s.numTokens);
    if (s.kind === "keys") return request(i, null, Float64Array.from(prompt, (t) => (s.big ? t * 2 ** 20 : t)), s.numTokens);
    return request(i, Uint32Array.from(prompt), null, prompt.length);
  });
}

/** The order `Array.prototype.sort` (stable) gives with the reference comparator. */
const reference = (batch: readonly BatchRequest[]): number[] => [...batch].sort(byFingerprint).map((r) => r.index);

/** The order the router's sort gives. */
function fast(sorter: FingerprintSort, batch: readonly BatchRequest[]): number[] {
  const copy = [...batch];
  sorter.sort(copy);
  return copy.map((r) => r.index);
}

describe("fingerprint order (issue #15)", () => {
  it("equals the stable sort by the reference comparator", () => {
    const sorter = new FingerprintSort(); // one sorter for every batch: its scratch is reused
    fc.assert(
      fc.property(fc.array(specArb, { maxLength: 80 }), (specs) => {
        const batch = batchOf(specs);
        expect(fast(sorter, batch)).toEqual(reference(batch));
      }),
      { numRuns: 1500 },
    );
  });

  it("equals it on large batches of a few shared prompts, and on ones that defeat the pivots", () => {
    const sorter = new FingerprintSort();
    let seed = 15;
    const rand = (): number => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
    for (const n of [13, 100, 1000, 5000]) {
      const shared = Array.from({ length: n }, (_, i) => {
        const stem = Math.floor(rand() * 4);
        const length = 60 + Math.floor(rand() * 10);
        return request(i, Uint32Array.from({ length }, (_, k) => (k < 62 ? stem * 1000 + k : Math.floor(rand() * 3))), null, length);
      });
      expect(fast(sorter, shared)).toEqual(reference(shared));
      // Sorted, reversed and organ-pipe first tokens, all distinct or all equal.
      for (const first of [(i: number) => i, (i: number) => n - i, (i: number) => Math.min(i, n - i), () => 7]) {
        const batch = Array.from({ length: n }, (_, i) => request(i, Uint32Array.of(first(i), i % 3), null, 2));
        expect(fast(sorter, batch)).toEqual(reference(batch));
      }
    }
  });
});
