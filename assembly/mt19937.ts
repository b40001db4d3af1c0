// CPython's `random.Random(seed).shuffle(list)`, bit for bit.
//
// Layout: thirty-two generators live interleaved in static memory (`ilv`): word k
// of lane l is the u32 at ilv + 128·k + 4·l, and lane l's index (next word to
// temper; 624 = a new generation is due) is at laneIndex + 4·l. `base` holds
// `init_genrand(19650218)`, which every integer seed starts from, computed once.
// The twist is lazy: a word of the next generation is computed when first read,
// in the same order as CPython's whole-block twist, so a shuffle of a short list
// pays for the words it draws, not for all 624.
//
// Seeding is a chain of 1,247 dependent multiply-xor steps that no single seed
// can shorten; `seedLanes` runs thirty-two chains at once in eight i32x4 vectors, for
// the scoring loop to seed the requests that follow a tie ahead of need.
//
// Seeds are the absolute value of a request id as two 32-bit words (lo, hi);
// CPython's key is [lo] when hi == 0 and [lo, hi] otherwise.

/** Words of MT19937 state. */
// @ts-ignore: decorator
@inline const N: i32 = 624;
/** Twist offset. */
// @ts-ignore: decorator
@inline const M: i32 = 397;
/** Twist matrix constant. */
// @ts-ignore: decorator
@inline const MATRIX_A: u32 = 0x9908b0df;

/** `init_genrand(19650218)`, the starting point of every integer seed. */
const base: usize = memory.data(N << 2, 16);
/** Whether `base` has been filled. */
let baseReady: bool = false;

/** Word `i` of `init_genrand(19650218)`. */
// @ts-ignore: decorator
@inline function baseWord(i: i32): u32 { return load<u32>(base + (<usize>i << 2)); }

/** Fills `base` with CPython's `init_genrand(19650218)`. */
function prepareBase(): void {
  let prev: u32 = 19650218;
  store<u32>(base, prev);
  for (let i = 1; i < N; i++) {
    prev = 1812433253 * (prev ^ (prev >>> 30)) + <u32>i;
    store<u32>(base + (<usize>i << 2), prev);
  }
  baseReady = true;
}

// A generator's words are read through (base, shift): word k of SIMD lane l is
// at ilv + 4l + (k << LANE_SHIFT). Its index lives at `at`.

/** Word k of the generator at (base, shift). */
// @ts-ignore: decorator
@inline function wordAt(base: usize, shift: u32, k: i32): usize { return base + (<usize>k << shift); }

/**
 * Twists word k (< N) of the generator at (base, shift) into the next generation
 * and returns it tempered: CPython's next `genrand_uint32` when k is its index.
 */
// @ts-ignore: decorator
@inline function twistTemper(base: usize, shift: u32, k: i32): u32 {
  // Word k+1 is still old, word k+M is old below N and already new above, as
  // in CPython's whole-block loop.
  const y = (load<u32>(wordAt(base, shift, k)) & 0x80000000) | (load<u32>(wordAt(base, shift, k + 1 < N ? k + 1 : 0)) & 0x7fffffff);
  const far = k + M < N ? k + M : k + M - N;
  let v = load<u32>(wordAt(base, shift, far)) ^ (y >>> 1) ^ ((y & 1) != 0 ? MATRIX_A : 0);
  store<u32>(wordAt(base, shift, k), v);
  v ^= v >>> 11;
  v ^= (v << 7) & 0x9d2c5680;
  v ^= (v << 15) & 0xefc60000;
  v ^= v >>> 18;
  return v;
}

/** The next tempered 32-bit output (`genrand_uint32`) of the generator at (base, shift), index at `at`. */
function nextWith(base: usize, shift: u32, at: usize): u32 {
  let k = load<i32>(at);
  if (k >= N) k = 0;
  store<i32>(at, k + 1);
  return twistTemper(base, shift, k);
}

/** CPython's `_randbelow(n)` for 1 <= n < 2^32: k = bitlen(n) bits, rejection sampled. */
function randBelowWith(base: usize, shift: u32, at: usize, n: u32): u32 {
  const drop: u32 = <u32>clz<u32>(n); // 32 - bitlen(n)
  let r = nextWith(base, shift, at) >>> drop;
  while (r >= n) r = nextWith(base, shift, at) >>> drop;
  return r;
}

/**
 * Shuffles `length` u32 words at `ptr` in place, as `random.shuffle`, with the
 * generator at (base, shift): `_randbelow(i + 1)` for i from the end, drawn
 * inline with the generator's index kept in a local.
 */
function shuffleWordsWith(base: usize, shift: u32, at: usize, ptr: usize, length: i32): void {
  let k = load<i32>(at);
  for (let i = length - 1; i > 0; i--) {
    const n = <u32>(i + 1);
    const drop = <u32>clz<u32>(n); // 32 - bitlen(n)
    let r: u32;
    do {
      if (k >= N) k = 0;
      r = twistTemper(base, shift, k) >>> drop;
      k++;
    } while (r >= n);
    const j = <i32>r;
    const a = ptr + (<usize>i << 2);
    const b = ptr + (<usize>j << 2);
    const t = load<u32>(a);
    store<u32>(a, load<u32>(b));
    store<u32>(b, t);
  }
  store<i32>(at, k);
}

// ---- thirty-two seeds at once, with wasm SIMD ------------------------------------
//
// The same init_by_array, for 32 keys in eight i32x4 vectors: each step is a
// handful of vector instructions for 32 chains, where the scalar path spends
// eight instructions per chain, and eight independent chains hide the latency
// of each step's multiply. The state is built interleaved (word i of lane l at
// ilv + 128·i + 4·l), and each lane is a generator read in place.

/** Lanes seeded together by `seedLanes`. */
// @ts-ignore: decorator
@inline export const SIMD_LANES: i32 = 32;
/** log2 of the bytes between consecutive words of one lane (4 bytes × SIMD_LANES). */
// @ts-ignore: decorator
@inline const LANE_SHIFT: u32 = 7;
/** Interleaved state: N words × SIMD_LANES lanes. */
const ilv: usize = memory.data(N * (SIMD_LANES * 4), 16);
/** Each lane's index (next word to temper). */
const laneIndex: usize = memory.data(SIMD_LANES * 4, 16);
/** Per-lane key words: key[0] + 0 for odd steps, then key[1] + 1 (or key[0]) for even ones. */
const laneKeys: usize = memory.data(2 * SIMD_LANES * 4, 16);

/** (cur ^ ((p ^ p >>> 30) · m)) for four lanes. */
// @ts-ignore: decorator
@inline function mixv(cur: v128, p: v128, m: v128): v128 {
  return v128.xor(cur, i32x4.mul(v128.xor(p, i32x4.shr_u(p, 30)), m));
}

/**
 * Seeds SIMD lanes 0..count-1 (count ≤ SIMD_LANES) from `count` (lo, hi) u32
 * pairs at `keys`, as `random.Random(hi·2^32 + lo)` does; draw from lane l with
 * `shuffleWithLane`. Reseeding replaces every lane.
 */
export function seedLanes(keys: usize, count: i32): void {
  if (!baseReady) prepareBase();
  for (let l = 0; l < SIMD_LANES; l++) {
    const lo: u32 = l < count ? load<u32>(keys + (<usize>l << 3)) : 0;
    const hi: u32 = l < count ? load<u32>(keys + (<usize>l << 3), 4) : 0;
    store<u32>(laneKeys + (<usize>l << 2), lo);
    store<u32>(laneKeys + (SIMD_LANES << 2) + (<usize>l << 2), hi != 0 ? hi + 1 : lo);
  }
  const m1 = i32x4.splat(1664525);
  const m2 = i32x4.splat(1566083941);
  const ka = v128.load(laneKeys, 0), kb = v128.load(laneKeys, 16), kc = v128.load(laneKeys, 32), kd = v128.load(laneKeys, 48), ke = v128.load(laneKeys, 64), kf = v128.load(laneKeys, 80), kg = v128.load(laneKeys, 96), kh = v128.load(laneKeys, 112);
  const ja = v128.load(laneKeys, 128), jb = v128.load(laneKeys, 144), jc = v128.load(laneKeys, 160), jd = v128.load(laneKeys, 176), je = v128.load(laneKeys, 192), jf = v128.load(laneKeys, 208), jg = v128.load(laneKeys, 224), jh = v128.load(laneKeys, 240);
  const b0 = i32x4.splat(baseWord(0));
  let pa = b0, pb = b0, pc = b0, pd = b0, pe = b0, pf = b0, pg = b0, ph = b0;
  // First pass: steps i = 1..623 use key[0] on odd i and key[1] on even i.
  for (let i = 1; i < N; i++) {
    const b = i32x4.splat(baseWord(i));
    const odd = (i & 1) != 0;
    const at = ilv + (<usize>i << LANE_SHIFT);
    pa = i32x4.add(mixv(b, pa, m1), odd ? ka : ja); v128.store(at, pa, 0);
    pb = i32x4.add(mixv(b, pb, m1), odd ? kb : jb); v128.store(at, pb, 16);
    pc = i32x4.add(mixv(b, pc, m1), odd ? kc : jc); v128.store(at, pc, 32);
    pd = i32x4.add(mixv(b, pd, m1), odd ? kd : jd); v128.store(at, pd, 48);
    pe = i32x4.add(mixv(b, pe, m1), odd ? ke : je); v128.store(at, pe, 64);
    pf = i32x4.add(mixv(b, pf, m1), odd ? kf : jf); v128.store(at, pf, 80);
    pg = i32x4.add(mixv(b, pg, m1), odd ? kg : jg); v128.store(at, pg, 96);
    ph = i32x4.add(mixv(b, ph, m1), odd ? kh : jh); v128.store(at, ph, 112);
  }
  // The wrap: i = 1 again, with the key of step N (even).
  const w = ilv + (<usize>1 << LANE_SHIFT);
  pa = i32x4.add(mixv(v128.load(w, 0), pa, m1), ja); v128.store(w, pa, 0);
  pb = i32x4.add(mixv(v128.load(w, 16), pb, m1), jb); v128.store(w, pb, 16);
  pc = i32x4.add(mixv(v128.load(w, 32), pc, m1), jc); v128.store(w, pc, 32);
  pd = i32x4.add(mixv(v128.load(w, 48), pd, m1), jd); v128.store(w, pd, 48);
  pe = i32x4.add(mixv(v128.load(w, 64), pe, m1), je); v128.store(w, pe, 64);
  pf = i32x4.add(mixv(v128.load(w, 80), pf, m1), jf); v128.store(w, pf, 80);
  pg = i32x4.add(mixv(v128.load(w, 96), pg, m1), jg); v128.store(w, pg, 96);
  ph = i32x4.add(mixv(v128.load(w, 112), ph, m1), jh); v128.store(w, ph, 112);
  // Second pass: i = 2..623, then i = 1 (whose row the wrap above rewrote).
  for (let t = 2; t <= N; t++) {
    const i = t < N ? t : 1;
    const k = i32x4.splat(i);
    const at = ilv + (<usize>i << LANE_SHIFT);
    pa = i32x4.sub(mixv(v128.load(at, 0), pa, m2), k); v128.store(at, pa, 0);
    pb = i32x4.sub(mixv(v128.load(at, 16), pb, m2), k); v128.store(at, pb, 16);
    pc = i32x4.sub(mixv(v128.load(at, 32), pc, m2), k); v128.store(at, pc, 32);
    pd = i32x4.sub(mixv(v128.load(at, 48), pd, m2), k); v128.store(at, pd, 48);
    pe = i32x4.sub(mixv(v128.load(at, 64), pe, m2), k); v128.store(at, pe, 64);
    pf = i32x4.sub(mixv(v128.load(at, 80), pf, m2), k); v128.store(at, pf, 80);
    pg = i32x4.sub(mixv(v128.load(at, 96), pg, m2), k); v128.store(at, pg, 96);
    ph = i32x4.sub(mixv(v128.load(at, 112), ph, m2), k); v128.store(at, ph, 112);
  }
  for (let l = 0; l < SIMD_LANES; l++) {
    store<u32>(ilv + (<usize>l << 2), 0x80000000);
    store<i32>(laneIndex + (<usize>l << 2), N);
  }
}

/** Shuffles `length` words at `ptr` with SIMD lane `lane` (seeded by `seedLanes`). */
export function shuffleWithLane(lane: i32, ptr: usize, length: i32): void {
  shuffleWordsWith(ilv + (<usize>lane << 2), LANE_SHIFT, laneIndex + (<usize>lane << 2), ptr, length);
}

// ---- the ABI's single generator (tests and tools): SIMD lane 0 ------------------------

/** Key words of `seed`. */
const singleKey: usize = memory.data(8, 16);

/** Seeds lane 0 as `random.Random(n)` for |n| = hi·2^32 + lo (reseeding every lane). */
export function seed(lo: u32, hi: u32): void {
  store<u32>(singleKey, lo);
  store<u32>(singleKey, hi, 4);
  seedLanes(singleKey, 1);
}

/** Lane 0's next 32-bit output. */
export function nextUint32(): u32 {
  return nextWith(ilv, LANE_SHIFT, laneIndex);
}

/** `_randbelow(n)` on lane 0. */
export function randBelow(n: u32): u32 {
  return randBelowWith(ilv, LANE_SHIFT, laneIndex, n);
}

/** Shuffles `length` words at `ptr` with lane 0. */
export function shuffleWords(ptr: usize, length: i32): void {
  shuffleWithLane(0, ptr, length);
}
