// Prefix-cache namespaces: TensorRT-LLM scopes block reuse by LoRA task id and
// cache salt. A namespace becomes the 64-bit seed (two u32 words) of the block
// chain, so equal tokens in different namespaces never share a path.

/** The seed of the namespace without LoRA id or salt. */
const NO_NAMESPACE: readonly [number, number] = Object.freeze([0x6a09e667, 0xbb67ae85]) as readonly [number, number];

/** 32-bit string hash (murmur3-style mixing over UTF-16 code units). */
function hash32(text: string, seed: number): number {
  let h = seed >>> 0;
  for (let i = 0; i < text.length; i++) {
    h = Math.imul(h ^ text.charCodeAt(i), 0x5bd1e995);
    h ^= h >>> 15;
  }
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The chain seed of a (validated) namespace. */
export function namespaceKey(loraTaskId: number | null, cacheSalt: string | null): readonly [number, number] {
  if (loraTaskId === null && cacheSalt === null) return NO_NAMESPACE;
  const text = `${loraTaskId === null ? "-" : String(loraTaskId)}\u0000${cacheSalt === null ? "-" : `s${cacheSalt}`}`;
  return [hash32(text, 0x3c6ef372), hash32(text, 0xa54ff53a)];
}
