// Plain-TypeScript oracles of the two loops the wasm core runs, transcribed
// from the reference pseudocode (§3.3 step 7, §4.3 step 6) as directly as
// possible: Python's heap of tuples, and the full shuffle-then-scan per request.
// They are the differential oracle in tests and the baseline in the benchmark.

import { CPythonRandom } from "./mt19937.js";

/** One request of the KV-cache-aware scoring loop. */
export interface OracleKvRequest {
  readonly id: bigint;
  readonly numTokens: number;
  /** Matched tokens per rank. */
  readonly matches: ArrayLike<number>;
}

/** The KV-cache-aware scoring loop; returns the chosen rank per request or -1. */
export function oracleScoreKvAware(
  counts: Int32Array, tokens: Float64Array, requests: readonly OracleKvRequest[],
  cap: number, beta: number, threshold: number,
): number[] {
  const out: number[] = [];
  let eligible: number[] = [];
  for (let r = 0; r < counts.length; r++) if (counts[r]! < cap) eligible.push(r);
  for (const req of requests) {
    if (eligible.length === 0) {
      out.push(-1);
      continue;
    }
    const n = req.numTokens;
    const order = new CPythonRandom(req.id).shuffle([...eligible]);
    let totalLoad = 0;
    for (const r of eligible) totalLoad += tokens[r]!;
    const denom = Math.max(totalLoad, n);
    let maxMatch = 0;
    for (const r of eligible) maxMatch = Math.max(maxMatch, req.matches[r]!);
    const affinity = maxMatch / Math.max(n, 1) > threshold;
    let best = order[0]!;
    let bestScore = Infinity;
    for (const r of order) {
      const m = affinity ? req.matches[r]! : 0;
      const score = n - m + (denom === 0 ? 0 : beta * ((tokens[r]! / denom) * n));
      if (score < bestScore || (score === bestScore && tokens[r]! < tokens[best]!)) {
        best = r;
        bestScore = score;
      }
    }
    out.push(best);
    counts[best]!++;
    tokens[best]! += Math.max(n - req.matches[best]!, 0);
    if (counts[best]! >= cap) eligible = eligible.filter((r) => r !== best);
  }
  return out;
}

/** The default router's heap balance; `sizes` in processing order; returns rank per request or -1. */
export function oracleBalanceDefault(counts: Int32Array, tokens: Float64Array, sizes: readonly number[], cap: number): number[] {
  type Entry = [tokens: number, count: number, rank: number];
  const less = (a: Entry, b: Entry) => a[0] !== b[0] ? a[0] < b[0] : a[1] !== b[1] ? a[1] < b[1] : a[2] < b[2];
  const heap: Entry[] = [];
  for (let r = 0; r < counts.length; r++) if (counts[r]! < cap) heap.push([tokens[r]!, counts[r]!, r]);
  const out: number[] = [];
  for (const size of sizes) {
    if (heap.length === 0) {
      out.push(-1);
      continue;
    }
    let bi = 0;
    for (let i = 1; i < heap.length; i++) if (less(heap[i]!, heap[bi]!)) bi = i;
    const e = heap[bi]!;
    e[0] += size;
    e[1] += 1;
    out.push(e[2]);
    counts[e[2]] = e[1];
    tokens[e[2]] = e[0];
    if (e[1] >= cap) heap.splice(bi, 1);
  }
  return out;
}

/**
 * The wasm core's algorithm (lexicographic minimum of (score, tokens), shuffle
 * only on a tie) in plain TypeScript over typed arrays: the like-for-like
 * baseline of the benchmark, so wasm and algorithm gains are reported apart.
 */
export function portScoreKvAware(
  counts: Int32Array, tokens: Float64Array, requests: readonly OracleKvRequest[],
  cap: number, beta: number, threshold: number,
): Int32Array {
  const numRanks = counts.length;
  const out = new Int32Array(requests.length);
  const eligible = new Int32Array(numRanks);
  const scores = new Float64Array(numRanks);
  let length = 0;
  for (let r = 0; r < numRanks; r++) if (counts[r]! < cap) eligible[length++] = r;
  for (let q = 0; q < requests.length; q++) {
    if (length === 0) {
      out[q] = -1;
      continue;
    }
    const req = requests[q]!;
    const n = req.numTokens;
    const row = req.matches;
    let totalLoad = 0;
    let maxMatch = 0;
    for (let k = 0; k < length; k++) {
      const r = eligible[k]!;
      totalLoad += tokens[r]!;
      if (row[r]! > maxMatch) maxMatch = row[r]!;
    }
    const denom = totalLoad >= n ? totalLoad : n;
    const affinity = maxMatch / (n > 1 ? n : 1) > threshold;
    let bestScore = Infinity;
    let bestTokens = Infinity;
    let bestK = 0;
    let ties = 0;
    for (let k = 0; k < length; k++) {
      const r = eligible[k]!;
      const load = tokens[r]!;
      const m = affinity ? row[r]! : 0;
      const score = n - m + (denom !== 0 ? beta * ((load / denom) * n) : 0);
      scores[k] = score;
      if (score < bestScore || (score === bestScore && load < bestTokens)) {
        bestScore = score;
        bestTokens = load;
        bestK = k;
        ties = 1;
      } else if (score === bestScore && load === bestTokens) ties++;
    }
    if (ties > 1) {
      const order = new CPythonRandom(req.id).shuffle(Array.from({ length }, (_, k) => k));
      for (const k of order) {
        if (scores[k] === bestScore && tokens[eligible[k]!] === bestTokens) {
          bestK = k;
          break;
        }
      }
    }
    const best = eligible[bestK]!;
    out[q] = best;
    counts[best]!++;
    if (n > row[best]!) tokens[best]! += n - row[best]!;
    if (counts[best]! >= cap) {
      eligible.copyWithin(bestK, bestK + 1, length);
      length--;
    }
  }
  return out;
}
