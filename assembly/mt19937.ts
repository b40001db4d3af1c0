// CPython's `random.Random(seed).shuffle(list)`, bit for bit.
//
// Layout: a generator is GENERATOR_BYTES of unmanaged memory: 624 u32 state
// words, then i32 `index` (next word to temper; 624 = a new generation is due).
// `base` holds `init_genrand(19650218)`, which every integer seed starts from,
// computed once. The twist is lazy: a word of the next generation is computed
// when first read, in the same order as CPython's whole-block twist, so a
// shuffle of a short list pays for the words it draws, not for all 624.
//
// Seeding is a chain of 1,247 dependent multiply-xor steps (~3 µs), which no
// single seed can shorten; `seed4` runs four independent chains interleaved so
// the CPU overlaps them, for the scoring loop to seed requests ahead of need.
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
/** Bytes of one generator: the state words and the index. */
// @ts-ignore: decorator
@inline export const GENERATOR_BYTES: i32 = (N + 4) << 2;
/** Byte offset of a generator's `index` field. */
// @ts-ignore: decorator
@inline const INDEX: usize = <usize>N << 2;

/** `init_genrand(19650218)`, the starting point of every integer seed. */
const base: usize = memory.data(N << 2, 16);
/** Whether `base` has been filled. */
let baseReady: bool = false;
/** The generator behind the `seed` / `nextUint32` / `shuffleWords` exports. */
const shared: usize = memory.data(GENERATOR_BYTES, 16);
/** Three scratch generators for the lanes of `seed4` that a caller leaves unused. */
export const spare: usize = memory.data(GENERATOR_BYTES * 3, 16);

/** Word `i` of `init_genrand(19650218)`. */
// @ts-ignore: decorator
@inline function baseWord(i: i32): u32 { return load<u32>(base + (<usize>i << 2)); }
/** Word `i` of generator `g`. */
// @ts-ignore: decorator
@inline function word(g: usize, i: i32): u32 { return load<u32>(g + (<usize>i << 2)); }
/** Sets word `i` of generator `g`. */
// @ts-ignore: decorator
@inline function setWord(g: usize, i: i32, v: u32): void { store<u32>(g + (<usize>i << 2), v); }
/** One step of init_by_array's first pass. */
// @ts-ignore: decorator
@inline function mix1(cur: u32, prev: u32, key: u32): u32 { return (cur ^ ((prev ^ (prev >>> 30)) * 1664525)) + key; }
/** One step of init_by_array's second pass. */
// @ts-ignore: decorator
@inline function mix2(cur: u32, prev: u32, i: u32): u32 { return (cur ^ ((prev ^ (prev >>> 30)) * 1566083941)) - i; }

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

/** Key word of the first pass at step `i` (1-based): key[j] + j with j = (i-1) mod keyLength. */
// @ts-ignore: decorator
@inline function keyAt(i: i32, lo: u32, hi: u32): u32 { return ((i - 1) & 1) == 0 || hi == 0 ? lo : hi + 1; }

/**
 * Seeds four distinct generators at once (pass `spare` slots for unused lanes;
 * the chains are independent, so interleaving them costs about as much as one).
 */
export function seed4(
  g0: usize, lo0: u32, hi0: u32, g1: usize, lo1: u32, hi1: u32,
  g2: usize, lo2: u32, hi2: u32, g3: usize, lo3: u32, hi3: u32,
): void {
  if (!baseReady) prepareBase();
  // The previous word of each chain stays in a local: a store-then-load round
  // trip would otherwise sit on the dependency chain at every step.
  let p0 = baseWord(0), p1 = p0, p2 = p0, p3 = p0;
  // First pass, N steps: i = 1..623, the wrap (mt[0] = mt[623]), then i = 1 again.
  for (let i = 1; i < N; i++) {
    const b = baseWord(i);
    p0 = mix1(b, p0, keyAt(i, lo0, hi0)); setWord(g0, i, p0);
    p1 = mix1(b, p1, keyAt(i, lo1, hi1)); setWord(g1, i, p1);
    p2 = mix1(b, p2, keyAt(i, lo2, hi2)); setWord(g2, i, p2);
    p3 = mix1(b, p3, keyAt(i, lo3, hi3)); setWord(g3, i, p3);
  }
  p0 = mix1(word(g0, 1), p0, keyAt(N, lo0, hi0)); setWord(g0, 1, p0);
  p1 = mix1(word(g1, 1), p1, keyAt(N, lo1, hi1)); setWord(g1, 1, p1);
  p2 = mix1(word(g2, 1), p2, keyAt(N, lo2, hi2)); setWord(g2, 1, p2);
  p3 = mix1(word(g3, 1), p3, keyAt(N, lo3, hi3)); setWord(g3, 1, p3);
  // Second pass, N - 1 steps: i = 2..623, the wrap, then i = 1.
  for (let i = 2; i < N; i++) {
    const k = <u32>i;
    p0 = mix2(word(g0, i), p0, k); setWord(g0, i, p0);
    p1 = mix2(word(g1, i), p1, k); setWord(g1, i, p1);
    p2 = mix2(word(g2, i), p2, k); setWord(g2, i, p2);
    p3 = mix2(word(g3, i), p3, k); setWord(g3, i, p3);
  }
  // Word 1 is rewritten last; word 0 becomes 0x80000000; a new generation is due.
  p0 = mix2(word(g0, 1), p0, 1); setWord(g0, 1, p0);
  p1 = mix2(word(g1, 1), p1, 1); setWord(g1, 1, p1);
  p2 = mix2(word(g2, 1), p2, 1); setWord(g2, 1, p2);
  p3 = mix2(word(g3, 1), p3, 1); setWord(g3, 1, p3);
  setWord(g0, 0, 0x80000000); store<i32>(g0 + INDEX, N);
  setWord(g1, 0, 0x80000000); store<i32>(g1 + INDEX, N);
  setWord(g2, 0, 0x80000000); store<i32>(g2 + INDEX, N);
  setWord(g3, 0, 0x80000000); store<i32>(g3 + INDEX, N);
}

// A generator's words are read through (base, shift): word k of a scalar
// generator is at g + 4k; word k of SIMD lane l is at ilv + 64k + 4l. Its index
// lives at `at`.

/** Word k of the generator at (base, shift). */
// @ts-ignore: decorator
@inline function wordAt(base: usize, shift: u32, k: i32): usize { return base + (<usize>k << shift); }

/** The next tempered 32-bit output (`genrand_uint32`) of the generator at (base, shift), index at `at`. */
function nextWith(base: usize, shift: u32, at: usize): u32 {
  let k = load<i32>(at);
  if (k >= N) k = 0;
  // Twist word k of the new generation now: word k+1 is still old, word k+M
  // is old below N and already new above, as in CPython's whole-block loop.
  const y = (load<u32>(wordAt(base, shift, k)) & 0x80000000) | (load<u32>(wordAt(base, shift, k + 1 < N ? k + 1 : 0)) & 0x7fffffff);
  const far = k + M < N ? k + M : k + M - N;
  let v = load<u32>(wordAt(base, shift, far)) ^ (y >>> 1) ^ ((y & 1) != 0 ? MATRIX_A : 0);
  store<u32>(wordAt(base, shift, k), v);
  store<i32>(at, k + 1);
  v ^= v >>> 11;
  v ^= (v << 7) & 0x9d2c5680;
  v ^= (v << 15) & 0xefc60000;
  v ^= v >>> 18;
  return v;
}

/** CPython's `_randbelow(n)` for 1 <= n < 2^32: k = bitlen(n) bits, rejection sampled. */
function randBelowWith(base: usize, shift: u32, at: usize, n: u32): u32 {
  const drop: u32 = <u32>clz<u32>(n); // 32 - bitlen(n)
  let r = nextWith(base, shift, at) >>> drop;
  while (r >= n) r = nextWith(base, shift, at) >>> drop;
  return r;
}

/** Shuffles `length` u32 words at `ptr` in place, as `random.shuffle`, with the generator at (base, shift). */
function shuffleWordsWith(base: usize, shift: u32, at: usize, ptr: usize, length: i32): void {
  for (let i = length - 1; i > 0; i--) {
    const j = <i32>randBelowWith(base, shift, at, <u32>(i + 1));
    const a = ptr + (<usize>i << 2);
    const b = ptr + (<usize>j << 2);
    const t = load<u32>(a);
    store<u32>(a, load<u32>(b));
    store<u32>(b, t);
  }
}

/** The next 32-bit output of scalar generator `g`. */
export function nextFrom(g: usize): u32 {
  return nextWith(g, 2, g + INDEX);
}

/** Shuffles `length` words at `ptr` with scalar generator `g`. */
export function shuffleWith(g: usize, ptr: usize, length: i32): void {
  shuffleWordsWith(g, 2, g + INDEX, ptr, length);
}

/** Seeds the shared generator as `random.Random(n)` for |n| = hi·2^32 + lo. */
export function seed(lo: u32, hi: u32): void {
  const g = <usize>GENERATOR_BYTES;
  seed4(shared, lo, hi, spare, 0, 0, spare + g, 0, 0, spare + 2 * g, 0, 0);
}

/** The shared generator's next 32-bit output. */
export function nextUint32(): u32 {
  return nextFrom(shared);
}

/** `_randbelow(n)` on the shared generator. */
export function randBelow(n: u32): u32 {
  return randBelowWith(shared, 2, shared + INDEX, n);
}

/** Shuffles `length` u32 words at `ptr` with the shared generator. */
export function shuffleWords(ptr: usize, length: i32): void {
  shuffleWith(shared, ptr, length);
}

// ---- sixteen seeds at once, with wasm SIMD -----------------------------------------
//
// The same init_by_array, for 16 keys in four i32x4 vectors: each step is a
// handful of vector instructions for 16 chains, where the scalar path spends
// eight instructions per chain. The state is built interleaved (word i of lane l
// at ilv + 64·i + 4·l) and then copied out to each requested generator.

/** Lanes seeded together by `seed16`. */
// @ts-ignore: decorator
@inline export const SIMD_LANES: i32 = 16;
/** Interleaved state: N words × 16 lanes; each lane is a generator read in place. */
const ilv: usize = memory.data(N * 64, 16);
/** Each lane's index (next word to temper). */
const laneIndex: usize = memory.data(64, 16);
/** Per-lane key words: key[0] + 0 for odd steps, key[1] + 1 (or key[0]) for even ones. */
const laneKeys: usize = memory.data(2 * 64, 16);

/** (cur ^ ((p ^ p >>> 30) · m)) for four lanes. */
// @ts-ignore: decorator
@inline function mixv(cur: v128, p: v128, m: v128): v128 {
  return v128.xor(cur, i32x4.mul(v128.xor(p, i32x4.shr_u(p, 30)), m));
}

/**
 * Seeds SIMD lanes 0..count-1 (count ≤ 16) from `count` (lo, hi) u32 pairs at
 * `keys`, as `random.Random(hi·2^32 + lo)` does; draw from lane l with
 * `shuffleWithLane`. Reseeding replaces every lane.
 */
export function seed16(keys: usize, count: i32): void {
  if (!baseReady) prepareBase();
  for (let l = 0; l < SIMD_LANES; l++) {
    const lo: u32 = l < count ? load<u32>(keys + (<usize>l << 3)) : 0;
    const hi: u32 = l < count ? load<u32>(keys + (<usize>l << 3), 4) : 0;
    store<u32>(laneKeys + (<usize>l << 2), lo);
    store<u32>(laneKeys + 64 + (<usize>l << 2), hi != 0 ? hi + 1 : lo);
  }
  const m1 = i32x4.splat(1664525);
  const m2 = i32x4.splat(1566083941);
  const ea = v128.load(laneKeys), eb = v128.load(laneKeys, 16), ec = v128.load(laneKeys, 32), ed = v128.load(laneKeys, 48);
  const oa = v128.load(laneKeys, 64), ob = v128.load(laneKeys, 80), oc = v128.load(laneKeys, 96), od = v128.load(laneKeys, 112);
  const b0 = i32x4.splat(baseWord(0));
  let pa = b0, pb = b0, pc = b0, pd = b0;
  // First pass: steps i = 1..623 use key[0] on odd i and key[1] on even i.
  for (let i = 1; i < N; i++) {
    const b = i32x4.splat(baseWord(i));
    const odd = (i & 1) != 0;
    const at = ilv + (<usize>i << 6);
    pa = i32x4.add(mixv(b, pa, m1), odd ? ea : oa); v128.store(at, pa);
    pb = i32x4.add(mixv(b, pb, m1), odd ? eb : ob); v128.store(at, pb, 16);
    pc = i32x4.add(mixv(b, pc, m1), odd ? ec : oc); v128.store(at, pc, 32);
    pd = i32x4.add(mixv(b, pd, m1), odd ? ed : od); v128.store(at, pd, 48);
  }
  // The wrap: i = 1 again, with the key of step N (even).
  pa = i32x4.add(mixv(v128.load(ilv + 64), pa, m1), oa); v128.store(ilv + 64, pa);
  pb = i32x4.add(mixv(v128.load(ilv + 64, 16), pb, m1), ob); v128.store(ilv + 64, pb, 16);
  pc = i32x4.add(mixv(v128.load(ilv + 64, 32), pc, m1), oc); v128.store(ilv + 64, pc, 32);
  pd = i32x4.add(mixv(v128.load(ilv + 64, 48), pd, m1), od); v128.store(ilv + 64, pd, 48);
  // Second pass: i = 2..623, then i = 1.
  for (let i = 2; i < N; i++) {
    const k = i32x4.splat(i);
    const at = ilv + (<usize>i << 6);
    pa = i32x4.sub(mixv(v128.load(at), pa, m2), k); v128.store(at, pa);
    pb = i32x4.sub(mixv(v128.load(at, 16), pb, m2), k); v128.store(at, pb, 16);
    pc = i32x4.sub(mixv(v128.load(at, 32), pc, m2), k); v128.store(at, pc, 32);
    pd = i32x4.sub(mixv(v128.load(at, 48), pd, m2), k); v128.store(at, pd, 48);
  }
  const one = i32x4.splat(1);
  pa = i32x4.sub(mixv(v128.load(ilv + 64), pa, m2), one); v128.store(ilv + 64, pa);
  pb = i32x4.sub(mixv(v128.load(ilv + 64, 16), pb, m2), one); v128.store(ilv + 64, pb, 16);
  pc = i32x4.sub(mixv(v128.load(ilv + 64, 32), pc, m2), one); v128.store(ilv + 64, pc, 32);
  pd = i32x4.sub(mixv(v128.load(ilv + 64, 48), pd, m2), one); v128.store(ilv + 64, pd, 48);
  for (let l = 0; l < SIMD_LANES; l++) {
    store<u32>(ilv + (<usize>l << 2), 0x80000000);
    store<i32>(laneIndex + (<usize>l << 2), N);
  }
}

/** Shuffles `length` words at `ptr` with SIMD lane `lane` (seeded by `seed16`). */
export function shuffleWithLane(lane: i32, ptr: usize, length: i32): void {
  shuffleWordsWith(ilv + (<usize>lane << 2), 6, laneIndex + (<usize>lane << 2), ptr, length);
}
