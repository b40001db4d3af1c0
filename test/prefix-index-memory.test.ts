// A host may refuse to grow wasm memory below an index's budget (a browser
// tab's limit, an address-space limit): the library's default budget is 2 GiB.
// The core then has no storage for a node, a table or a heap in the middle of
// a change. It must trap rather than hand out address 0 (which a store would
// write over the allocator's own state), and the shell must retire the index
// with a typed error rather than read its half-changed state again. These
// tests make such a host by capping the instance's pages (setPageLimitForTests).
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { AdpMemoryError, createPrefixIndex, createRouter, init, restorePrefixIndex, type DecisionRecord, type PrefixIndex } from "../src/index.js";
import { setPageLimitForTests } from "../src/index-core.js";
import { createEngineCacheView } from "../src/engine-cache-entry.js";
import { indexBound } from "../gateway/src/common/bounds.js";
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
  // Where the limit falls moves which allocation is refused (a node chunk, the
  // table, a residency chunk, a heap): each cap must end in AdpMemoryError,
  // never in a wrong answer first or in another trap (an access out of bounds
  // after address 0 was handed out, which is what the core did before).
  it.each([0, 1, 2, 3, 5, 8, 12, 16, 24, 32])("with %i pages to spare: every answer right until AdpMemoryError", (spare) => {
    const twin = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    setPageLimitForTests(startPages() + spare);
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    const { inserted, error } = fill(index, twin, 20_000);
    expect(error).toBeInstanceOf(AdpMemoryError);
    expect((error as AdpMemoryError).code).toBe("ERR_ADP_MEMORY");
    expect((error as AdpMemoryError).cause).toBeInstanceOf(WebAssembly.RuntimeError);
    expect(String((error as AdpMemoryError).cause)).toMatch(/unreachable/);
    expect((error as AdpMemoryError).result).toBeUndefined();
    if (spare >= 16) expect(inserted).toBeGreaterThan(50); // the limit, not the first insert
  });

  it("stays retired: every later call throws the same error", () => {
    setPageLimitForTests(startPages() + 16);
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    setPageLimitForTests(null);
    const { error } = fill(index, createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 }), 20_000);
    expect(error).toBeInstanceOf(AdpMemoryError);
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

  it("refuses creation with AdpMemoryError while its first pages cannot be had (the scratch's, then the core's own)", () => {
    const causes: unknown[] = [];
    for (let pages = 1; ; pages++) {
      setPageLimitForTests(pages);
      try {
        createPrefixIndex({ numRanks: 2 });
        break;
      } catch (error) {
        expect(error).toBeInstanceOf(AdpMemoryError);
        causes.push((error as AdpMemoryError).cause);
      }
    }
    expect(causes.some((c) => c === null)).toBe(true); // the scratch
    expect(causes.some((c) => c instanceof WebAssembly.RuntimeError)).toBe(true); // the core's first chunks, a trap in indexInit
  });

  it("refuses to restore a good snapshot it has no memory for with AdpMemoryError, not as an invalid snapshot", () => {
    const full = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    for (let i = 0; i < 400; i++) full.insert(i % 2, prompt(i));
    const bytes = full.snapshot();
    setPageLimitForTests(startPages() + 2);
    expect(() => restorePrefixIndex(bytes)).toThrow(AdpMemoryError);
    setPageLimitForTests(null);
    expect(restorePrefixIndex(bytes).snapshot()).toEqual(bytes);
  });

  it("makes a router that learns into it throw AdpMemoryError carrying the routed batch, then refuse", () => {
    setPageLimitForTests(startPages() + 16);
    const records: DecisionRecord[] = [];
    const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 4 }, onDecision: (r) => records.push(r) });
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
    // Its record reached the hook, as every committed batch's does.
    expect(records.map((r) => r.requestId)).toEqual(Array.from({ length: routed + 1 }, (_, i) => i));
    expect(() => router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: -1, tokens: prompt(0) }] })).toThrow(AdpMemoryError);
    // Its metrics still answer (the batch that failed to learn counts as routed), without the retired index's figures.
    expect(router.metrics().batches).toBe(routed + 1);
    expect(router.metrics().prefixIndex).toBeUndefined();
  });

  it("retires an engine cache view whose group's index runs out: every later call throws that error, and it reports as unusable", () => {
    setPageLimitForTests(startPages() + 16);
    const view = createEngineCacheView({ numRanks: 2, tokensPerBlock: 4, groups: [{ kind: "full_attention" }] });
    setPageLimitForTests(null);
    /** A vLLM BlockStored of prompt `i`'s 64 blocks, no parent. */
    const stored = (i: number) => ({ type: "BlockStored", block_hashes: Array.from({ length: 64 }, (_, b) => i * 64 + b + 1), parent_block_hash: null, token_ids: prompt(i), block_size: 4, lora_id: null, medium: "GPU", lora_name: null, group_idx: 0 });
    let failure: unknown = null;
    let applied = 0;
    for (let i = 0; i < 20_000 && failure === null; i++) {
      try {
        view.applyKvEvents({ ts: 1, events: [stored(i)], data_parallel_rank: i % 2 });
        applied++;
      } catch (error) {
        failure = error;
      }
    }
    expect(failure).toBeInstanceOf(AdpMemoryError);
    expect(applied).toBeGreaterThan(50);
    expect(view.usable).toBe(false);
    // The gateway's bounds page still answers for it (it holds nothing now) instead of throwing.
    expect(indexBound("engine_view_bytes", view, 1 << 20)).toMatchObject({ limit: 1 << 20, used: 0 });
    for (const call of [() => view.stats(), () => view.blockCount(0), () => view.snapshot(), () => view.matchInto(new Uint32Array(2), Uint32Array.from(prompt(0))), () => view.applyKvEvents({ ts: 1, events: [stored(0)] })]) {
      expect(call).toThrow(failure as Error);
    }
    view.dispose(); // still safe
  });
});
