// A host may refuse to grow wasm memory below an index's budget (a browser
// tab's limit, an address-space limit): the library's default budget is 2 GiB.
// The core then has no storage for a node, a table or a heap in the middle of
// a change. It must trap rather than hand out address 0 (which a store would
// write over the allocator's own state), and the shell must retire the index
// with a typed error rather than read its half-changed state again. These
// tests make such a host by capping the instance's pages (setPageLimitForTests).
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { AdpMemoryError, createPrefixIndex, createRouter, init, type PrefixIndex } from "../src/index.js";
import { setPageLimitForTests } from "../src/index-core.js";
import { idle } from "./support/build.js";

beforeAll(async () => {
  await init();
});

afterEach(() => {
  setPageLimitForTests(null);
});

/** Pages of wasm memory a fresh default index starts with. */
function startPages(): number {
  return createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 }).stats().wasmMemoryBytes / 65536;
}

/** Prompt `i`: 64 blocks of 4 tokens that share no block with any other prompt. */
function prompt(i: number): number[] {
  return Array.from({ length: 256 }, (_, t) => i * 256 + t + 1);
}

/**
 * Inserts distinct prompts into `index` until one throws (returned with how
 * many went in), or `limit` of them went in. Until then every answer must be
 * `twin`'s, an index without the cap: nothing went wrong silently first.
 */
function fill(index: PrefixIndex, twin: PrefixIndex, limit: number): { inserted: number; error: unknown } {
  for (let i = 0; i < limit; i++) {
    let held: number;
    try {
      held = index.insert(i % 2, prompt(i));
    } catch (error) {
      return { inserted: i, error };
    }
    expect(held).toBe(twin.insert(i % 2, prompt(i)));
    const earlier = prompt((i * 7919) % (i + 1));
    expect(index.match(earlier)).toEqual(twin.match(earlier));
  }
  return { inserted: limit, error: null };
}

describe("an index whose memory cannot grow", () => {
  it("is retired with AdpMemoryError once an insert needs more memory, and stays retired", () => {
    const twin = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    setPageLimitForTests(startPages() + 16);
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    const { inserted, error } = fill(index, twin, 20_000);
    expect(error).toBeInstanceOf(AdpMemoryError);
    expect((error as AdpMemoryError).code).toBe("ERR_ADP_MEMORY");
    expect((error as AdpMemoryError).cause).toBeInstanceOf(WebAssembly.RuntimeError);
    expect((error as AdpMemoryError).result).toBeUndefined();
    // 16 pages (1 MiB) hold thousands of blocks before the limit: the error
    // comes from the limit, not from the first insert.
    expect(inserted).toBeGreaterThan(50);
    // Every later call, reading or changing, refuses with the same error.
    expect(() => index.match(prompt(0))).toThrow(error as Error);
    expect(() => index.insert(0, prompt(0))).toThrow(error as Error);
    expect(() => index.stats()).toThrow(error as Error);
    expect(() => index.snapshot()).toThrow(error as Error);
    expect(() => index.applyKvEvents([])).toThrow(error as Error);
  });

  it("matches and evicts as usual when its budget keeps it under the limit", () => {
    const pages = startPages() + 48;
    setPageLimitForTests(pages);
    const capped = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4, maxMemoryBytes: 1 << 20 });
    setPageLimitForTests(null);
    const free = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4, maxMemoryBytes: 1 << 20 });
    for (let i = 0; i < 3_000; i++) {
      expect(capped.insert(i % 2, prompt(i % 700))).toBe(free.insert(i % 2, prompt(i % 700)));
    }
    expect(capped.stats().evictions).toBeGreaterThan(0);
    expect(capped.stats().evictions).toBe(free.stats().evictions);
    expect(capped.stats().wasmMemoryBytes).toBeLessThanOrEqual(pages * 65536);
    expect(capped.snapshot()).toEqual(free.snapshot());
  });

  it("refuses creation with AdpMemoryError when even its first pages cannot be had", () => {
    setPageLimitForTests(2);
    expect(() => createPrefixIndex({ numRanks: 2 })).toThrow(AdpMemoryError);
  });

  it("makes a router that learns into it throw AdpMemoryError carrying the routed batch, then refuse", () => {
    setPageLimitForTests(startPages() + 16);
    const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 4 } });
    let failure: AdpMemoryError | null = null;
    let routed = 0;
    for (let i = 0; i < 20_000 && failure === null; i++) {
      try {
        router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: i, tokens: prompt(i) }] });
        routed++;
      } catch (error) {
        failure = error as AdpMemoryError;
      }
    }
    expect(failure).toBeInstanceOf(AdpMemoryError);
    expect(routed).toBeGreaterThan(50);
    // The batch was routed before its learning ran out of memory: its result comes with the error.
    const result = failure!.result as { assignments: number[][] };
    expect(result.assignments.flat()).toEqual([routed]);
    expect(() => router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: -1, tokens: prompt(0) }] })).toThrow(AdpMemoryError);
    // Its metrics still answer (the batch that failed to learn counts as routed), without the retired index's figures.
    expect(router.metrics().batches).toBe(routed + 1);
    expect(router.metrics().prefixIndex).toBeUndefined();
  });
});
