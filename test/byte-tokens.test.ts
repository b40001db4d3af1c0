// Byte token ids (a Uint8Array, a byte-level tokenizer's ids): widened only as
// they are copied into the core, they must name exactly the blocks their ids
// as a Uint32Array name, so every index, view and router answers and changes
// as it would for those; and a disguised or subclassed array is read by what
// it truly is, never by what it says of itself.
import fc from "fast-check";
import { beforeAll, describe, expect, it } from "vitest";
import { AdpInputError, createPrefixIndex, createRouter, init, type RouteRequest } from "../src/index.js";
import { createEngineCacheView } from "../src/engine-cache-entry.js";

beforeAll(async () => {
  await init();
});

/** `n` bytes drawn from `seed` (a linear congruential generator), in an alphabet of `alphabet` symbols so prompts share prefixes. */
function bytesOf(n: number, seed: number, alphabet = 256): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    out[i] = (s >>> 16) % alphabet;
  }
  return out;
}

describe("byte token ids", () => {
  it("hash into the block hashes of the same ids as u32, whatever the block size and length", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 40 }), fc.uint8Array({ maxLength: 700 }), (tokensPerBlock, bytes) => {
        const index = createPrefixIndex({ numRanks: 1, tokensPerBlock });
        expect(Array.from(index.blockHashes(bytes))).toEqual(Array.from(index.blockHashes(Uint32Array.from(bytes))));
      }),
      { numRuns: 300 },
    );
  });

  it("hash alike across the scratch's pieces: a 1 MiB prompt, and a Buffer", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 128 });
    const bytes = bytesOf(1 << 20, 7);
    const words = index.blockHashes(bytes);
    expect(words.length).toBe(2 * 8192);
    expect(words).toEqual(index.blockHashes(Uint32Array.from(bytes)));
    expect(index.blockHashes(Buffer.from(bytes.buffer, 1000, 5000))).toEqual(index.blockHashes(Uint32Array.from(bytes.subarray(1000, 6000))));
  });

  it("every byte of a block counts, in its place (a changed or swapped byte changes the hash)", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 16 });
    const base = bytesOf(16, 3);
    const seen = new Set([Array.from(index.blockHashes(base)).join()]);
    for (let i = 0; i < 16; i++) {
      const changed = base.slice();
      changed[i] = changed[i]! ^ 1;
      seen.add(Array.from(index.blockHashes(changed)).join());
      const swapped = base.slice();
      swapped[i] = base[(i + 1) % 16]!;
      swapped[(i + 1) % 16] = base[i]!;
      if (swapped[i] !== base[i]) seen.add(Array.from(index.blockHashes(swapped)).join());
    }
    expect(seen.size).toBe(1 + 16 + [...Array(16).keys()].filter((i) => base[i] !== base[(i + 1) % 16]).length);
  });

  it("change and answer a prefix index as their u32 ids do, insert by insert", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 8 }),
        fc.array(fc.record({ rank: fc.integer({ min: 0, max: 2 }), stem: fc.integer({ min: 0, max: 3 }), length: fc.integer({ min: 0, max: 90 }), insert: fc.boolean() }), { maxLength: 30 }),
        (tokensPerBlock, ops) => {
          const options = { numRanks: 3, tokensPerBlock, capacityBlocksPerRank: 12 };
          const asBytes = createPrefixIndex(options);
          const asWords = createPrefixIndex(options);
          for (const op of ops) {
            const bytes = bytesOf(op.length, op.stem, 4);
            const words = Uint32Array.from(bytes);
            if (op.insert) expect(asBytes.insert(op.rank, bytes)).toBe(asWords.insert(op.rank, words));
            expect(asBytes.match(bytes)).toEqual(asWords.match(words));
            const hashes = asBytes.blockHashes(bytes);
            const out = new Uint32Array(3);
            asBytes.matchHashesInto(out, hashes, hashes.length / 2);
            expect(Array.from(out)).toEqual(asWords.match(words.subarray(0, (hashes.length / 2) * tokensPerBlock)));
          }
          expect(asBytes.snapshot()).toEqual(asWords.snapshot());
        },
      ),
      { numRuns: 150 },
    );
  });

  it("route as their u32 ids do, in every router", () => {
    const configs = [{}, { enable_kv_cache_aware_routing: true }, { enable_kv_cache_aware_routing: true, kv_cache_routing_conversation_affinity: true }];
    for (const attentionDp of configs) {
      const asBytes = createRouter({ numRanks: 3, attentionDp, prefixIndex: { tokensPerBlock: 8 } });
      const asWords = createRouter({ numRanks: 3, attentionDp, prefixIndex: { tokensPerBlock: 8 } });
      const idle = () => Array.from({ length: 3 }, () => ({ numActiveRequests: 0, numActiveTokens: 0 }));
      for (let batch = 0; batch < 12; batch++) {
        const prompts = Array.from({ length: 5 }, (_, i) => bytesOf(40 + 17 * ((batch + i) % 5), (batch * 5 + i) % 4, 3));
        const requests = (ids: (b: Uint8Array) => Uint8Array | Uint32Array): RouteRequest[] =>
          prompts.map((b, i) => ({ id: batch * 5 + i, tokens: ids(b), ...(i % 2 === 0 ? { conversationId: `c${i}` } : {}) }));
        const a = asBytes.route({ rankStates: idle(), maxNumActiveRequests: 8, requests: requests((b) => b) });
        const b = asWords.route({ rankStates: idle(), maxNumActiveRequests: 8, requests: requests((b) => Uint32Array.from(b)) });
        expect(a.assignments).toEqual(b.assignments);
      }
      expect(asBytes.prefixIndex?.snapshot()).toEqual(asWords.prefixIndex?.snapshot());
    }
  });

  it("match an engine's cache view as their u32 ids do, a hybrid model's too (its presence groups' keys hashed from the bytes)", () => {
    const prompt = Array.from(bytesOf(8 * 4 + 1, 11));
    const stored = (group: number) => ({ type: "BlockStored", block_hashes: Array.from({ length: 8 }, (_, i) => 1000 + i), parent_block_hash: null, token_ids: prompt.slice(0, 32), block_size: 4, lora_id: null, medium: "GPU", lora_name: null, group_idx: group });
    const view = createEngineCacheView({ numRanks: 2, tokensPerBlock: 4, groups: [{ kind: "full_attention" }, { kind: "sliding_window", slidingWindow: 8 }] });
    view.applyKvEvents({ ts: 1, events: [stored(0), stored(1), { type: "BlockRemoved", block_hashes: [1007], medium: "GPU", group_idx: 1 }], data_parallel_rank: 1 });
    const bytes = Uint8Array.from(prompt);
    const words = Uint32Array.from(prompt);
    expect(view.match(bytes)).toEqual(view.match(words));
    const out = new Uint32Array(2);
    view.matchInto(out, bytes);
    expect(Array.from(out)).toEqual(view.match(words));
    expect(out[1]).toBeGreaterThan(0);
    expect(out[1]).toBeLessThan(32);
  });

  it("a disguised or subclassed array is read by what it truly is: the same answers as a plain one, or a typed error", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 16 });
    const plain = bytesOf(100_000, 5); // past one scratch piece
    // A Float64Array dressed as a Uint8Array: its values are read as numbers and refused.
    const float = new Float64Array([1.5, -1, Number.NaN, 1e12]);
    Object.setPrototypeOf(float, Uint8Array.prototype);
    expect(() => index.insert(0, float as unknown as Uint8Array)).toThrow(AdpInputError);
    // A subclass whose subarray hands back more than asked, an own subarray and buffer, a Buffer: read by their memory.
    class Longer extends Uint8Array {}
    Object.defineProperty(Longer.prototype, "subarray", { value: () => new Uint8Array(1 << 20).fill(7) });
    const longer = new Longer(plain);
    const ownProps = Uint8Array.from(plain);
    Object.defineProperty(ownProps, "subarray", { value: () => new Uint8Array(1 << 20).fill(7) });
    Object.defineProperty(ownProps, "buffer", { value: new ArrayBuffer(8) });
    for (const disguised of [longer, ownProps, Buffer.from(plain)]) {
      expect(index.match(disguised)).toEqual(index.match(plain));
      expect(index.blockHashes(disguised)).toEqual(index.blockHashes(plain));
    }
    // A length that lies is the array-like it claims to be: its first 40 ids.
    const lying = Uint8Array.from(plain);
    Object.defineProperty(lying, "length", { value: 40 });
    index.insert(0, lying);
    expect(index.match(plain)).toEqual([32, 0]);
    index.clearRank(0);
    expect(index.insert(1, longer)).toBe(0);
    expect(index.match(plain)).toEqual([0, Math.floor(plain.length / 16) * 16]);
    class LongerWords extends Uint32Array {}
    Object.defineProperty(LongerWords.prototype, "subarray", { value: () => new Uint32Array(1 << 20) });
    const words = Uint32Array.from(plain);
    expect(index.match(new LongerWords(words))).toEqual(index.match(words));
  });
});
