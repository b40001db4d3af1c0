// The KV-cache-aware router's scoring loop (reference §4.3 step 6).
//
// Layout (caller-owned, written by the TypeScript shell):
//   counts   i32[numRanks]      active requests per rank, updated in place
//   tokens   f64[numRanks]      active tokens per rank, updated in place
//   requests u32[4·numRequests] per request, in processing order:
//                               [promptTokens, idLo, idHi, matchRow]
//   matches  u32[rows·numRanks] matched prefix tokens, row `matchRow`, column rank
//   out      i32[numRequests]   chosen rank, or -1 once no rank is eligible
//   work     scratch: i32[numRanks] eligible ranks, f64[numRanks] scores,
//                     u32[numRanks] shuffled positions, then i32[LANES] naming the
//                     request each SIMD generator lane is seeded for,
//                     the last request's trailer {ties i32, affinity i32, denom f64}
//                     (the explanation a decision hook reads; see `kvTrailer`),
//                     and f64[numRanks + 1] the eligible ranks' loads in
//                     eligible order (so two ranks' loads are one vector load)
//
// TensorRT-LLM shuffles the eligible ranks with Random(request id) and keeps the
// first strict improvement of (score, tokens). That is the lexicographic minimum
// of (score, tokens), and the shuffle only decides among ranks that tie on both;
// so the shuffle (the expensive part: seeding MT19937) runs only on a tie.
// A request that ties seeds its own generator and, in the same SIMD pass,
// those of the next fifteen requests, which tie too when ranks are idle.
//
// Scores are computed two ranks at a time in f64x2 lanes: each lane performs
// the same IEEE-754 operations in the same order as the scalar expression
// (wasm has no fused multiply-add), so every score is bit-identical to it.

import { SIMD_LANES, seedLanes, shuffleWithLane } from "./mt19937";

/** Below this, sums of integer loads are exact in f64 whatever their order. */
// @ts-ignore: decorator
@inline const EXACT_SUM_LIMIT: f64 = 4503599627370496; // 2^52

/** Generators seeded together. */
// @ts-ignore: decorator
@inline const LANES: i32 = SIMD_LANES;
/** Seed key words of the requests being seeded: LANES × (lo, hi). */
const seedKeys: usize = memory.data(LANES * 8, 16);

/** Bytes of `work` scratch needed for `numRanks` ranks. */
export function kvWorkBytes(numRanks: i32): i32 {
  return numRanks * (4 + 8 + 4) + 16 + LANES * 4 + 16 + (numRanks + 1) * 8;
}

/** Address of the trailer in `work` for `numRanks` ranks (as `scoreKvAware` lays it out). */
export function kvTrailer(numRanks: i32, work: usize): usize {
  const order = work + <usize>numRanks * 12;
  const owners = (order + (<usize>numRanks << 2) + 15) & ~15;
  return owners + <usize>(LANES << 2);
}

/** Seeds lane generators for requests first..first+LANES-1 (those that exist). */
function seedAhead(owners: usize, requests: usize, numRequests: i32, first: i32): void {
  const n = min(LANES, numRequests - first);
  for (let l = 0; l < n; l++) {
    const record = requests + (<usize>(first + l) << 4);
    store<u32>(seedKeys + (<usize>l << 3), load<u32>(record, 4));
    store<u32>(seedKeys + (<usize>l << 3), load<u32>(record, 8), 4);
  }
  seedLanes(seedKeys, n);
  for (let l = 0; l < LANES; l++) store<i32>(owners + (<usize>l << 2), l < n ? first + l : -1);
}

/**
 * The largest of the `length` u32 matches of `row` at the eligible ranks;
 * four at a time when every rank is eligible (the eligible list is then
 * 0..numRanks-1 and the row is read as it lies).
 */
function maxMatchOf(row: usize, eligible: usize, length: i32, numRanks: i32): u32 {
  let best: u32 = 0;
  let k = 0;
  if (length == numRanks) {
    let v = i32x4.splat(0);
    for (; k + 4 <= length; k += 4) v = i32x4.max_u(v, v128.load(row + (<usize>k << 2)));
    best = max(max(i32x4.extract_lane(v, 0) as u32, i32x4.extract_lane(v, 1) as u32), max(i32x4.extract_lane(v, 2) as u32, i32x4.extract_lane(v, 3) as u32));
  }
  for (; k < length; k++) {
    const m = load<u32>(row + (<usize>load<i32>(eligible + (<usize>k << 2)) << 2));
    if (m > best) best = m;
  }
  return best;
}

/**
 * Writes the score of each eligible rank to `scores`:
 * `(size - m) + beta * (load / safeDenom * size) * scale`, with `m` the
 * rank's match when `affinity`, else 0; two ranks per f64x2 operation.
 */
function scoreRanks(
  scores: usize, loads: usize, eligible: usize, length: i32, numRanks: i32, row: usize,
  affinity: bool, size: f64, safeDenom: f64, beta: f64, scale: f64,
): void {
  const vSize = f64x2.splat(size);
  const vDenom = f64x2.splat(safeDenom);
  const vBeta = f64x2.splat(beta);
  const vScale = f64x2.splat(scale);
  const contiguous = length == numRanks; // eligible[k] == k: the row is read as it lies
  let k = 0;
  for (; k + 2 <= length; k += 2) {
    let m = f64x2.splat(0);
    if (affinity) {
      if (contiguous) m = f64x2.convert_low_i32x4_u(v128.load64_zero(row + (<usize>k << 2)));
      else {
        const e = eligible + (<usize>k << 2);
        const m0 = <f64>load<u32>(row + (<usize>load<i32>(e) << 2));
        const m1 = <f64>load<u32>(row + (<usize>load<i32>(e, 4) << 2));
        m = f64x2.replace_lane(f64x2.splat(m0), 1, m1);
      }
    }
    const term = f64x2.mul(f64x2.mul(vBeta, f64x2.mul(f64x2.div(v128.load(loads + (<usize>k << 3)), vDenom), vSize)), vScale);
    v128.store(scores + (<usize>k << 3), f64x2.add(f64x2.sub(vSize, m), term));
  }
  if (k < length) {
    const m: f64 = affinity ? <f64>load<u32>(row + (<usize>load<i32>(eligible + (<usize>k << 2)) << 2)) : 0;
    store<f64>(scores + (<usize>k << 3), (size - m) + beta * (load<f64>(loads + (<usize>k << 3)) / safeDenom * size) * scale);
  }
}

/** Routes `numRequests` requests and returns how many were placed. */
export function scoreKvAware(
  numRanks: i32, counts: usize, tokens: usize,
  numRequests: i32, requests: usize, matches: usize, out: usize,
  cap: i32, beta: f64, threshold: f64, work: usize,
): i32 {
  const eligible = work;
  const scores = eligible + (<usize>numRanks << 2);
  const order = scores + (<usize>numRanks << 3);
  const owners = (order + (<usize>numRanks << 2) + 15) & ~15;
  const trailer = owners + <usize>(LANES << 2);
  const loads = trailer + 16;
  for (let l = 0; l < LANES; l++) store<i32>(owners + (<usize>l << 2), -1);
  let length = 0;
  for (let r = 0; r < numRanks; r++) {
    if (load<i32>(counts + (<usize>r << 2)) < cap) {
      store<i32>(eligible + (<usize>length << 2), r);
      store<f64>(loads + (<usize>length << 3), load<f64>(tokens + (<usize>r << 3)));
      length++;
    }
  }
  let totalLoad: f64 = Infinity; // forces the first sum
  let placed = 0;
  for (let q = 0; q < numRequests; q++) {
    const record = requests + (<usize>q << 4);
    if (length == 0) {
      store<i32>(out + (<usize>q << 2), -1);
      continue;
    }
    const n = load<u32>(record);
    const row = matches + (<usize>load<u32>(record, 12) * <usize>numRanks << 2);
    const size = <f64>n;

    // Loads are exact integers, so a running sum equals upstream's fresh
    // ascending sum bit for bit while it stays below 2^52; past that, re-sum.
    if (!(totalLoad < EXACT_SUM_LIMIT)) {
      totalLoad = 0;
      for (let k = 0; k < length; k++) totalLoad += load<f64>(loads + (<usize>k << 3));
    }
    const hasMatches = load<u32>(record, 12) != 0; // row 0 is all zeros
    const maxMatch: u32 = hasMatches ? maxMatchOf(row, eligible, length, numRanks) : 0;
    const denom = totalLoad >= size ? totalLoad : size;
    const affinity = hasMatches && <f64>maxMatch / <f64>(n > 1 ? n : 1) > threshold;
    // Zero-token request on idle ranks: TensorRT-LLM divides by zero; here the
    // load term is 0, so every rank ties and the tie-break decides.
    const scale = denom != 0 ? 1.0 : 0.0;
    const safeDenom = denom != 0 ? denom : 1.0;
    scoreRanks(scores, loads, eligible, length, numRanks, row, affinity, size, safeDenom, beta, scale);

    let bestScore = Infinity;
    let bestTokens = Infinity;
    let bestK = 0;
    let ties = 0;
    for (let k = 0; k < length; k++) {
      const score = load<f64>(scores + (<usize>k << 3));
      const load_ = load<f64>(loads + (<usize>k << 3));
      if (score < bestScore || (score == bestScore && load_ < bestTokens)) {
        bestScore = score;
        bestTokens = load_;
        bestK = k;
        ties = 1;
      } else if (score == bestScore && load_ == bestTokens) {
        ties++;
      }
    }

    if (ties > 1) {
      for (let k = 0; k < length; k++) store<u32>(order + (<usize>k << 2), <u32>k);
      let lane = 0;
      while (lane < LANES && load<i32>(owners + (<usize>lane << 2)) != q) lane++;
      if (lane == LANES) {
        seedAhead(owners, requests, numRequests, q);
        lane = 0;
      }
      shuffleWithLane(lane, order, length);
      for (let p = 0; p < length; p++) {
        const k = load<u32>(order + (<usize>p << 2));
        if (load<f64>(scores + (<usize>k << 3)) == bestScore && load<f64>(loads + (<usize>k << 3)) == bestTokens) {
          bestK = <i32>k;
          break;
        }
      }
    }

    store<i32>(trailer, ties);
    store<i32>(trailer, affinity ? 1 : 0, 4);
    store<f64>(trailer, denom, 8);
    const best = load<i32>(eligible + (<usize>bestK << 2));
    store<i32>(out + (<usize>q << 2), best);
    placed++;
    const countPtr = counts + (<usize>best << 2);
    const count = load<i32>(countPtr) + 1;
    store<i32>(countPtr, count);
    const raw = load<u32>(row + (<usize>best << 2));
    const tokenPtr = tokens + (<usize>best << 3);
    if (n > raw) {
      const added = <f64>(n - raw);
      store<f64>(tokenPtr, load<f64>(tokenPtr) + added);
      store<f64>(loads + (<usize>bestK << 3), load<f64>(tokenPtr));
      totalLoad += added;
    }
    if (count >= cap) {
      totalLoad -= load<f64>(tokenPtr);
      const tail = <usize>(length - bestK - 1);
      memory.copy(eligible + (<usize>bestK << 2), eligible + (<usize>(bestK + 1) << 2), tail << 2);
      memory.copy(loads + (<usize>bestK << 3), loads + (<usize>(bestK + 1) << 3), tail << 3);
      length--;
    }
  }
  return placed;
}
