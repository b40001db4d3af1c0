// Plain-TypeScript oracle of CPython's Random(seed).shuffle (reference §11),
// written from the specification independently of assembly/mt19937.ts.

const N = 624;

/** CPython's MT19937 seeded with an integer, as `random.Random(n)`. */
export class CPythonRandom {
  private mt = new Uint32Array(N);
  private index = N;

  constructor(seed: bigint) {
    let a = seed < 0n ? -seed : seed;
    const key: number[] = [];
    do {
      key.push(Number(a & 0xffffffffn));
      a >>= 32n;
    } while (a > 0n);
    const mt = this.mt;
    mt[0] = 19650218;
    for (let i = 1; i < N; i++) mt[i] = (Math.imul(1812433253, mt[i - 1]! ^ (mt[i - 1]! >>> 30)) + i) >>> 0;
    let i = 1;
    let j = 0;
    for (let k = Math.max(N, key.length); k > 0; k--) {
      const p = mt[i - 1]!;
      mt[i] = ((mt[i]! ^ Math.imul(p ^ (p >>> 30), 1664525)) + key[j]! + j) >>> 0;
      i++;
      j++;
      if (i >= N) {
        mt[0] = mt[N - 1]!;
        i = 1;
      }
      if (j >= key.length) j = 0;
    }
    for (let k = N - 1; k > 0; k--) {
      const p = mt[i - 1]!;
      mt[i] = ((mt[i]! ^ Math.imul(p ^ (p >>> 30), 1566083941)) - i) >>> 0;
      i++;
      if (i >= N) {
        mt[0] = mt[N - 1]!;
        i = 1;
      }
    }
    mt[0] = 0x80000000;
  }

  /** `genrand_uint32`. */
  nextUint32(): number {
    const mt = this.mt;
    if (this.index >= N) {
      for (let k = 0; k < N; k++) {
        const y = (mt[k]! & 0x80000000) | (mt[(k + 1) % N]! & 0x7fffffff);
        mt[k] = (mt[(k + 397) % N]! ^ (y >>> 1) ^ (y & 1 ? 0x9908b0df : 0)) >>> 0;
      }
      this.index = 0;
    }
    let y = mt[this.index++]!;
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    y ^= y >>> 18;
    return y >>> 0;
  }

  /** `_randbelow(n)` with k = bitlen(n). */
  randBelow(n: number): number {
    const k = 32 - Math.clz32(n);
    let r = this.nextUint32() >>> (32 - k);
    while (r >= n) r = this.nextUint32() >>> (32 - k);
    return r;
  }

  /** `shuffle(x)` in place. */
  shuffle<T>(x: T[]): T[] {
    for (let i = x.length - 1; i > 0; i--) {
      const j = this.randBelow(i + 1);
      [x[i], x[j]] = [x[j]!, x[i]!];
    }
    return x;
  }
}
