// Issue #10's examples, one test per class: hostile sizes at the wasm boundary,
// damaged and crafted snapshots (and those the fuzzing found), inputs that
// change between reads or throw while read, events that used to throw,
// quadratic work, the budget at its edges, and atomic routes.
// Each failed on the code before the fix (traps, untyped errors, silent
// corruption, a lost result).
import { describe, expect, it } from "vitest";
import { AdpHookError, AdpInputError, createPrefixIndex, createRouter, parseAttentionDpConfig, restorePrefixIndex, restoreRouter, type PrefixIndex, type RouteInput } from "../src/index.js";
import { RoutingCore } from "../src/core.js";
import { crc32c, decodeSnapshot, encodeSnapshot, SNAPSHOT_KINDS } from "../src/snapshot-format.js";
import { idle } from "./support/build.js";
import { attempt, describeError, sameBytes } from "./support/fuzz.js";
import { recordOffsets, recordsSeal } from "./support/snapshot-damage.js";
import { thrown } from "./support/thrown.js";

const range = (n: number, from = 0): number[] => Array.from({ length: n }, (_, i) => from + i);
/** What a twin must agree on: per-rank matches of a few prompts. */
const probes = [range(64), range(64, 1000), range(200, 5000)];
const answers = (index: PrefixIndex) => probes.map((p) => index.match(p));


function expectInputError(fn: () => unknown, field?: string | RegExp): AdpInputError {
  const error = thrown(fn);
  expect(error).toBeInstanceOf(AdpInputError);
  if (field !== undefined) expect((error as AdpInputError).field).toMatch(field);
  return error as AdpInputError;
}

describe("1. sizes at the wasm boundary cannot wrap", () => {
  it("matchBlocks(new Array(1e9)) is a typed error and leaves the index as its twin", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    const twin = createPrefixIndex({ numRanks: 2, tokensPerBlock: 4 });
    for (const x of [index, twin]) x.insert(0, range(256));
    expectInputError(() => index.matchBlocks(new Array(1e9)), /^blockKeys/);
    expectInputError(() => index.matchBlocks(new Array(6e8)), /^blockKeys/);
    expect(answers(index)).toEqual(answers(twin));
    expect(index.match(range(256))).toEqual([256, 0]);
  });

  it("a huge keyed block list under an 8 MiB budget keeps linear memory within 1.125 × budget + 1 MiB", () => {
    const budget = 8 << 20;
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 16, maxMemoryBytes: budget });
    index.matchBlocks(range(2_000_000));
    index.insertBlocks(1, range(2_000_000));
    expect(index.stats().wasmMemoryBytes).toBeLessThanOrEqual(1.125 * budget + (1 << 20));
    expect(index.stats().bytesInUse).toBeLessThanOrEqual(budget);
    expect(index.matchBlocks(range(10))).toEqual([0, 160]); // the path's head was kept: the budget stopped the insert
  });

  it("a stored event of 20,000 keyed blocks with 65,536-token blocks is applied in pieces", () => {
    const budget = 32 << 20;
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 << 16, maxMemoryBytes: budget });
    const blocks = range(20_000, 1).map((h) => ({ block_hash: h }));
    const r = index.applyKvEvents({ event_id: 1, data: { type: "stored", parent_hash: null, blocks }, attention_dp_rank: 0 });
    expect(r.applied).toBe(1);
    expect(index.blockCount(0)).toBe(20_000);
    expect(index.matchBlocks(range(20_000, 1))).toEqual([20_000 * (1 << 16)]);
    expect(index.stats().wasmMemoryBytes).toBeLessThanOrEqual(1.125 * budget + (1 << 20));
  });

  it("a batch whose routing scratch would pass 1 GiB is refused by name before anything changes", () => {
    const core = new RoutingCore();
    expectInputError(() => core.reserveKvBatch(65_536, 1 << 20, 1 << 20), "requests");
    const views = core.reserveKvBatch(4, 2, 2); // the arena still works
    expect(views.matches.length).toBe(8);
  });
});

describe("2. snapshots are self-checking", () => {
  const learned = () => {
    const router = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true }, prefixIndex: { tokensPerBlock: 4, maxMemoryBytes: 1 << 20 } });
    router.route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: range(40) }, { id: 2, tokens: range(40, 100) }] });
    return router;
  };

  it("every single-byte change, a truncation or appended bytes give AdpInputError naming snapshot", () => {
    const bytes = learned().snapshot();
    for (let at = 0; at < bytes.length; at += Math.max(1, Math.floor(bytes.length / 300))) {
      const damaged = bytes.slice();
      damaged[at]! ^= 0x20;
      expectInputError(() => restoreRouter(damaged), "snapshot");
    }
    expectInputError(() => restoreRouter(bytes.subarray(0, bytes.length - 1)), "snapshot");
    const longer = new Uint8Array(bytes.length + 3);
    longer.set(bytes);
    expect(expectInputError(() => restoreRouter(longer), "snapshot").message).toMatch(/after its end/);
  });

  /** Re-encodes a router snapshot with its state edited (and a valid checksum). */
  const edited = (bytes: Uint8Array, edit: (state: Record<string, unknown>) => void): Uint8Array => {
    const { state, sections } = decodeSnapshot(bytes, SNAPSHOT_KINDS.router);
    edit(state);
    return encodeSnapshot(SNAPSHOT_KINDS.router, state, sections);
  };
  /** Re-encodes a router snapshot with its prefix index's state edited. */
  const editedIndex = (bytes: Uint8Array, edit: (state: Record<string, unknown>, records: Uint8Array) => Uint8Array | void): Uint8Array => {
    const outer = decodeSnapshot(bytes, SNAPSHOT_KINDS.router);
    const inner = decodeSnapshot(outer.sections[0]!, SNAPSHOT_KINDS.prefixIndex);
    const records = edit(inner.state, inner.sections[0]!) ?? inner.sections[0]!;
    return encodeSnapshot(SNAPSHOT_KINDS.router, outer.state, [encodeSnapshot(SNAPSHOT_KINDS.prefixIndex, inner.state, [records])]);
  };

  it("well-formed edits that would break a promise are refused", () => {
    const conv = createRouter({ numRanks: 4, attentionDp: { kv_cache_routing_conversation_affinity: true } });
    conv.route({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [{ id: 1, numTokens: 5, conversationId: "a" }] });
    expectInputError(() => restoreRouter(edited(conv.snapshot(), (s) => (s.conversations = [["a", 9]]))), "snapshot");
    expectInputError(() => restoreRouter(edited(conv.snapshot(), (s) => (s.cursor = 4))), "snapshot");
    expectInputError(() => restoreRouter(edited(conv.snapshot(), (s) => (s.conversations = [["a", 1], ["a", 2]]))), "snapshot");
    const kv = learned();
    expectInputError(() => restoreRouter(edited(kv.snapshot(), (s) => (s.pendingWarmup = [9]))), "snapshot");
    expectInputError(() => restoreRouter(edited(kv.snapshot(), (s) => (s.numRanks = 5))), "snapshot");
    expectInputError(() => restoreRouter(edited(kv.snapshot(), (s) => (s.attentionDp = { enable_kv_cache_aware_routing: "yes" }))), "snapshot");
    // The index: a budget below its content, another tokensPerBlock, engine maps that are not maps.
    expectInputError(() => restoreRouter(editedIndex(kv.snapshot(), (s) => { s.options = { ...(s.options as object), maxMemoryBytes: 1900 }; })), "snapshot");
    expectInputError(() => restoreRouter(editedIndex(kv.snapshot(), (s) => { s.options = { ...(s.options as object), tokensPerBlock: 8 }; })), "snapshot");
    expectInputError(() => restoreRouter(editedIndex(kv.snapshot(), (s) => { s.engineBlocks = [[["x", 1]], [], [], []]; })), "snapshot");
    expectInputError(() => restoreRouter(editedIndex(kv.snapshot(), (s) => { s.stamp = 0; })), "snapshot");
  });

  it("crafted node records (with a matching seal) are checked by the core: rank out of range, orphan, duplicate, stamp beyond the counter", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    index.insert(1, range(8));
    const { state, sections } = decodeSnapshot(index.snapshot(), SNAPSHOT_KINDS.prefixIndex);
    const seal = (records: Uint8Array) => {
      const bytes = new Uint8Array(4 + records.length);
      new DataView(bytes.buffer).setUint32(0, 2, true); // tokensPerBlock, then the records
      bytes.set(records, 4);
      return crc32c(bytes);
    };
    const craft = (edit: (v: DataView, r: Uint8Array) => Uint8Array | void): Uint8Array => {
      const records = sections[0]!.slice();
      const out = edit(new DataView(records.buffer), records) ?? records;
      return encodeSnapshot(SNAPSHOT_KINDS.prefixIndex, { ...state, seal: seal(out) }, [out]);
    };
    expect(restorePrefixIndex(craft(() => {})).match(range(8))).toEqual([0, 8]);
    const recordBytes = 24 + 8; // one residency each
    expectInputError(() => restorePrefixIndex(craft((v) => v.setUint32(24, 7, true))), "snapshot"); // rank 7 of 2
    expectInputError(() => restorePrefixIndex(craft((v) => v.setUint32(recordBytes + 8, 12345, true))), "snapshot"); // parent unknown
    expectInputError(() => restorePrefixIndex(craft((v) => v.setUint32(28, 0xffff, true))), "snapshot"); // stamp beyond the counter
    expectInputError(() => restorePrefixIndex(craft((v) => v.setUint32(20, 0, true))), "snapshot"); // no residency
    expectInputError(() => restorePrefixIndex(craft((_, r) => { const d = new Uint8Array(r.length + recordBytes); d.set(r); d.set(r.subarray(0, recordBytes), r.length); return d; })), "snapshot"); // a duplicate path
    expectInputError(() => restorePrefixIndex(craft((_, r) => r.subarray(0, r.length - 4))), "snapshot"); // cut off
  });
});

describe("2b. crafted snapshots the fuzzing found", () => {
  it("a snapshot whose payload is shorter than its 4-byte state length is refused with AdpInputError, not a RangeError", () => {
    for (const [kind, restore] of [[SNAPSHOT_KINDS.router, restoreRouter], [SNAPSHOT_KINDS.prefixIndex, restorePrefixIndex]] as const) {
      for (let n = 0; n < 8; n++) {
        const bytes = new Uint8Array(20 + n);
        bytes.set(new TextEncoder().encode("ADPSNAP2"));
        const view = new DataView(bytes.buffer);
        view.setUint32(8, kind, true);
        view.setUint32(12, n, true);
        view.setUint32(16, crc32c(bytes.subarray(20)), true); // a valid checksum: 0 for the empty payload
        let error: unknown;
        try {
          restore(bytes);
        } catch (e) {
          error = e;
        }
        expect(describeError(error), `kind ${kind}, ${n}-byte payload`).toMatch(/^AdpInputError: snapshot: /);
      }
    }
  });

  it("a crafted snapshot that grafts a root under another root (valid checksum and seal) is refused, or restores into an index that does not trap", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 1 });
    index.insert(0, [1]);
    index.insert(0, [2]);
    const { state, sections } = decodeSnapshot(index.snapshot(), SNAPSHOT_KINDS.prefixIndex);
    const records = Uint8Array.from(sections[0]!);
    const view = new DataView(records.buffer);
    expect(recordOffsets(records, 2)).toEqual([0, 32]);
    // Record 1 (the block [2], a root) now names record 0 (the block [1]) as its parent.
    view.setUint32(32 + 8, view.getUint32(0, true), true);
    view.setUint32(32 + 12, view.getUint32(4, true), true);
    view.setUint32(32 + 16, 1, true);
    const crafted = encodeSnapshot(SNAPSHOT_KINDS.prefixIndex, { ...state, seal: recordsSeal(1, records) }, [records]);
    const restored = attempt("restore", () => restorePrefixIndex(crafted));
    if (!restored.ok) return; // refused: fine
    const index2 = restored.value;
    const before = index2.stats();
    // [2]'s key is held by the grafted node: a walk never enters it, and an insert stops before it.
    attempt("insert(1, [2]) into the restored index", () => index2.insert(1, [2]));
    expect(index2.match([2])).toEqual([0, 0]);
    expect(index2.stats().blocks).toBe(before.blocks);
    expect(index2.stats().residencies).toBe(before.residencies);
    // A longer prompt through the grafted key stops there too; what was held before stays.
    attempt("insert(1, [2, 3, 4])", () => index2.insert(1, [2, 3, 4]));
    expect(index2.match([2, 3, 4])).toEqual([0, 0]);
    expect(index2.match([1])).toEqual([1, 0]);
    index2.insert(1, [5, 6]); // other paths are unaffected
    expect(index2.match([5, 6])).toEqual([0, 2]);
    attempt("its snapshot restores", () => restorePrefixIndex(index2.snapshot()));
  });

  it("counters restored at Number.MAX_SAFE_INTEGER leave the index's own snapshot restorable", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1, capacityBlocksPerRank: 1 });
    index.insert(0, [1]);
    const edits: ((s: Record<string, unknown>) => void)[] = [(s) => (s.evictions = Number.MAX_SAFE_INTEGER), (s) => ((s.eventCounts as Record<string, number>).malformed = Number.MAX_SAFE_INTEGER)];
    for (const edit of edits) {
      const { state, sections } = decodeSnapshot(index.snapshot(), SNAPSHOT_KINDS.prefixIndex);
      edit(state);
      const restored = attempt("restore", () => restorePrefixIndex(encodeSnapshot(SNAPSHOT_KINDS.prefixIndex, state, sections)));
      if (!restored.ok) continue; // refused: fine
      restored.value.insert(0, [2]); // evicts [1]
      restored.value.applyKvEvents("garbage"); // one more malformed event
      const again = attempt("restore its own snapshot", () => restorePrefixIndex(restored.value.snapshot()));
      expect(again.ok, again.ok ? "" : again.error.message).toBe(true);
    }
  });

  it("a restored index snapshots byte for byte as the original when a block has two children", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 });
    index.insertBlocks(0, [1, 1]);
    index.insertBlocks(0, [1, 0]);
    const bytes = index.snapshot();
    const restored = restorePrefixIndex(bytes);
    expect(restored.match([1, 0])).toEqual(index.match([1, 0]));
    expect(sameBytes(restored.snapshot(), bytes), "restorePrefixIndex(s).snapshot() differs from s").toBe(true);
  });

  it("a restored router snapshots byte for byte as the original when learned prompts branch", () => {
    const router = createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 1 } });
    router.route({ rankStates: idle(2), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: [1, 1], attentionDpRank: 0 }, { id: 2, tokens: [1, 0], attentionDpRank: 0 }] });
    const bytes = router.snapshot();
    expect(sameBytes(restoreRouter(bytes).snapshot(), bytes), "restoreRouter(s).snapshot() differs from s").toBe(true);
  });
});

describe("3. inputs are read once and checked fully", () => {
  const input = (requests: RouteInput["requests"]): RouteInput => ({ rankStates: idle(4), maxNumActiveRequests: 8, requests });

  it.each([
    ["a bigint token", { id: 1, tokens: [1n] }, "requests[0].tokens[0]"],
    ["a Symbol token", { id: 1, tokens: [Symbol("t")] }, "requests[0].tokens[0]"],
    ["a BigUint64Array", { id: 1, tokens: new BigUint64Array([1n]) }, "requests[0].tokens[0]"],
    ["length NaN", { id: 1, tokens: { length: NaN } }, "requests[0].tokens.length"],
    ["length -1", { id: 1, tokens: { length: -1 } }, "requests[0].tokens.length"],
    ["length 2.5", { id: 1, tokens: { length: 2.5 } }, "requests[0].tokens.length"],
    ["prefixMatches of length NaN", { id: 1, numTokens: 4, prefixMatches: { length: NaN } }, "requests[0].prefixMatches"],
    ["a bigint prefix match", { id: 1, numTokens: 4, prefixMatches: [1n, 0, 0, 0] }, "requests[0].prefixMatches[0]"],
    ["block keys of length -1", { id: 1, numTokens: 4, blockKeys: { length: -1 } }, "requests[0].blockKeys.length"],
  ])("route() refuses %s by name, changing nothing", (_name, request, field) => {
    const make = () => createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 2 } });
    const router = make();
    const twin = make();
    expectInputError(() => router.route(input([request as never])), field);
    const next = input([{ id: 2, tokens: range(10) }]);
    expect(router.route(next)).toEqual(twin.route(next));
    expect(router.metrics().prefixHits).toEqual(twin.metrics().prefixHits);
  });

  it("a field whose getter changes between reads is read once: the validated id is the one placed", () => {
    let reads = 0;
    const request = { tokens: range(6), get id() { return reads++ === 0 ? 7 : 1.5; } };
    const router = createRouter({ numRanks: 2 });
    const result = router.route({ rankStates: idle(2), maxNumActiveRequests: 4, requests: [request as never] });
    expect(result.assignments.flat()).toEqual([7]);
    expect(reads).toBe(1);
  });

  it("token elements that change between reads are read once", () => {
    let reads = 0;
    const tokens = new Proxy(range(8), { get: (t, k) => (k === "3" ? (reads++ === 0 ? 3 : 2 ** 40) : Reflect.get(t, k)) });
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 2 });
    index.insert(0, tokens);
    expect(index.match(range(8))).toEqual([8]);
    expect(reads).toBe(1);
  });

  it("the index refuses non-arrays, lengths that lie and hostile keys by name", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    const twin = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    for (const x of [index, twin]) x.insert(1, range(8));
    expectInputError(() => index.insertBlocks(0, 5 as never), "blockKeys");
    expectInputError(() => index.insert(0, { length: -1 } as never), "tokens.length");
    expectInputError(() => index.match({ length: NaN } as never), "tokens.length");
    expectInputError(() => index.insert(0, [1n, 2n] as never), "tokens[0]");
    expectInputError(() => index.matchBlocks([Symbol("k")] as never), "blockKeys[0]");
    const liar = new Uint32Array(4);
    Object.defineProperty(liar, "length", { value: 1e9 });
    expectInputError(() => index.insert(0, liar), /^tokens/);
    expect(answers(index)).toEqual(answers(twin));
    expect(index.snapshot()).toEqual(twin.snapshot());
  });
});

describe("3b. inputs that throw while they are read give typed errors", () => {
  /** A revoked Proxy: any operation on it throws a TypeError. */
  const revoked = (target: object = []): never => {
    const { proxy, revoke } = Proxy.revocable(target, {});
    revoke();
    return proxy as never;
  };
  /** An array whose every read throws the caller's own error. */
  const throwing = (): never => new Proxy([], { get() { throw new Error("caller boom"); }, getPrototypeOf() { throw new Error("caller boom"); } }) as never;
  const kv = () => createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true } });
  const index = () => createPrefixIndex({ numRanks: 4, tokensPerBlock: 2 });
  const batch = (over: Partial<RouteInput>): RouteInput => ({ rankStates: idle(4), maxNumActiveRequests: 8, requests: [], ...over });

  it.each([
    ["route(input)", (bad: never) => kv().route(bad), /^route\(\) input$/],
    ["route rankStates", (bad: never) => kv().route(batch({ rankStates: bad })), /^route\(\) input$/],
    ["route requests[0]", (bad: never) => kv().route(batch({ requests: [bad] })), /^route\(\) input$/],
    ["route tokens", (bad: never) => kv().route(batch({ requests: [{ id: 1, tokens: bad }] })), "requests[0].tokens"],
    ["createRouter options", (bad: never) => createRouter(bad), "createRouter()"],
    ["createRouter attentionDp", (bad: never) => createRouter({ numRanks: 2, attentionDp: bad }), /./],
    ["createRouter prefixIndex options", (bad: never) => createRouter({ numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: bad }), "prefixIndex"],
    ["createPrefixIndex options", (bad: never) => createPrefixIndex(bad), "createPrefixIndex()"],
    ["insert tokens", (bad: never) => index().insert(0, bad), "tokens"],
    ["insert namespace", (bad: never) => index().insert(0, [1, 2], bad), "ns"],
    ["match tokens", (bad: never) => index().match(bad), "tokens"],
    ["matchInto out", (bad: never) => index().matchInto(bad, [1, 2]), "out"],
    ["insertBlocks keys", (bad: never) => index().insertBlocks(0, bad), "blockKeys"],
    ["matchBlocks keys", (bad: never) => index().matchBlocks(bad), "blockKeys"],
    ["applyKvEvents options", (bad: never) => index().applyKvEvents([], bad), "options"],
    ["restoreRouter bytes", (bad: never) => restoreRouter(bad), "snapshot"],
    ["restoreRouter options", (bad: never) => restoreRouter(kv().snapshot(), bad), "restoreRouter()"],
    ["restorePrefixIndex bytes", (bad: never) => restorePrefixIndex(bad), "snapshot"],
  ] as const)("%s: a revoked Proxy or a throwing getter gives a typed error, the cause kept", (_name, call, field) => {
    for (const [bad, named] of [[revoked(), true], [revoked({}), true], [throwing(), false]] as const) {
      let error: unknown;
      try {
        call(bad);
        if (named) throw new Error("expected a throw");
        continue; // a throwing Proxy over [] has no own keys to read: an empty options object
      } catch (e) {
        error = e;
      }
      // parseAttentionDpConfig's contract is its own typed error; everything else is AdpInputError.
      expect(error instanceof AdpInputError || (error as { code?: string }).code === "ERR_ADP_CONFIG", String(error)).toBe(true);
      // A revoked Proxy throws at its first touch, so the error names the value itself (a throwing
      // Proxy over an array may be refused earlier, as an array, under another name).
      if (named && error instanceof AdpInputError) expect(error.field).toMatch(field);
    }
  });

  it("parseAttentionDpConfig refuses a config that throws while read with its own typed error", () => {
    const error = thrown(() => parseAttentionDpConfig(revoked({}))) as { code?: string; message: string };
    expect(error.code).toBe("ERR_ADP_CONFIG");
    expect(error.message).toMatch(/threw while it was read/);
  });

  it("a getter that routes on the same router while its batch is read is refused, and the outer batch is unharmed", () => {
    const router = kv();
    const twin = kv();
    let inner: unknown;
    const request = {
      id: 1,
      numTokens: 8,
      get prefixMatches() {
        inner = thrown(() => router.route(batch({ requests: [{ id: 9, numTokens: 4, prefixMatches: [0, 0, 0, 64] }] })));
        return [0, 16, 0, 0];
      },
    };
    const plain = { id: 1, numTokens: 8, prefixMatches: [0, 16, 0, 0] };
    expect(router.route(batch({ requests: [request as never, { id: 2, numTokens: 8, prefixMatches: [32, 0, 0, 0] }] }))).toEqual(
      twin.route(batch({ requests: [plain, { id: 2, numTokens: 8, prefixMatches: [32, 0, 0, 0] }] })),
    );
    expect(inner).toBeInstanceOf(AdpInputError);
    expect((inner as AdpInputError).field).toBe("route()");
  });
});

describe("4. KV events never throw", () => {
  it("out-of-range bigint fields, cycles, throwing getters and revoked proxies are counted as malformed", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    const cyclic: Record<string, unknown> = { type: "BlockStored" };
    cyclic.self = cyclic;
    cyclic.block_hashes = [cyclic];
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const throwing = { get data() { throw new Error("boom"); } };
    const events = [
      { event_id: 1, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 1, tokens: [1, 2] }] }, attention_dp_rank: 2n ** 70n },
      { event_id: 2, data: { type: 5n }, attention_dp_rank: 0 },
      cyclic,
      { type: cyclic },
      throwing,
      proxy,
      { events: [proxy, throwing, 1n] },
    ];
    const r = index.applyKvEvents(events);
    expect(r.malformed).toBe(events.length + 2);
    expect(r.problems.every((p) => p.length < 200)).toBe(true);
    expect(index.applyKvEvents(proxy).malformed).toBe(1);
    expect(index.stats().residencies).toBe(0);
  });

  it("a chain of 50,000 single-block stored events, each below the previous, is applied whole (linear, not quadratic)", () => {
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1 });
    const n = 50_000;
    const events = Array.from({ length: n }, (_, i) => ({ event_id: i + 1, data: { type: "stored", parent_hash: i === 0 ? null : i, blocks: [{ block_hash: i + 1, tokens: [i] }] }, attention_dp_rank: 0 }));
    const started = performance.now();
    expect(index.applyKvEvents(events).applied).toBe(n);
    console.log(`50,000 chained stored events: ${(performance.now() - started).toFixed(0)} ms`);
    expect(index.match(range(n))).toEqual([n]);
  });

  it("a chain's lazy restamp evicts in the same order as a whole-path restamp", () => {
    // Rank 0 holds A-B (stamp 1) and X (stamp 2); C is stored below B (stamp 3),
    // then B is removed with C. A whole-path restamp made A as new as C, so a new
    // block must evict X (stamp 2), not A: the lazy stamp reaches A as B leaves.
    const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1, capacityBlocksPerRank: 2 });
    const stored = (id: number, parent: number | null, hashes: number[]) => ({ event_id: id, data: { type: "stored", parent_hash: parent, blocks: hashes.map((h) => ({ block_hash: h, tokens: [h] })) }, attention_dp_rank: 0 });
    index.applyKvEvents([stored(1, null, [1, 2]), stored(2, null, [9])]);
    expect(index.blockCount(0)).toBe(2); // X (2 blocks → 3 > 2) evicted A-B's tail, B
    const wide = createPrefixIndex({ numRanks: 1, tokensPerBlock: 1, capacityBlocksPerRank: 3 });
    wide.applyKvEvents([stored(1, null, [1, 2]), stored(2, null, [9]), stored(3, 2, [3]), { event_id: 4, data: { type: "removed", block_hashes: [2] }, attention_dp_rank: 0 }]);
    expect(wide.match([1, 2, 3])).toEqual([1]);
    wide.applyKvEvents([stored(5, null, [7]), stored(6, null, [8])]);
    expect(wide.match([1])).toEqual([1]); // A kept: its stamp is C's
    expect(wide.match([9])).toEqual([0]); // X, the least recent, went first
  });
});

describe("5. bounded error work", () => {
  it("an unknown config key of 10 MiB is reported at once with a bounded message", () => {
    const key = "k".repeat(10 << 20);
    const error = thrown(() => parseAttentionDpConfig({ [key]: true })) as Error;
    expect(error.message.length).toBeLessThan(500);
    const option = expectInputError(() => createRouter({ numRanks: 1, [key]: 1 } as never));
    expect(option.message.length).toBeLessThan(500);
  });
});

describe("6. the budget covers everything the index allocates", () => {
  it.each([1, 8, 1024, 4096, 65_535])("%i ranks under 8 MiB: linear memory ≤ 1.125 × budget + 1 MiB, a million-token prompt included", (ranks) => {
    const budget = 8 << 20;
    const index = createPrefixIndex({ numRanks: ranks, tokensPerBlock: 16, maxMemoryBytes: budget });
    let x = 1;
    const rnd = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0);
    for (let i = 0; i < 6000; i++) {
      const n = 16 * (1 + (rnd() % 64));
      const stem = rnd() % 50;
      const p = new Uint32Array(n);
      for (let j = 0; j < n; j++) p[j] = j < 256 ? stem * 1000 + j : rnd();
      index.insert(rnd() % ranks, p);
    }
    const big = new Uint32Array(1_000_000).map((_, i) => i);
    index.insert(0, big);
    expect(index.match(big)[0]).toBeGreaterThan(0);
    const s = index.stats();
    expect(s.bytesInUse).toBeLessThanOrEqual(budget);
    expect(s.wasmMemoryBytes).toBeLessThanOrEqual(1.125 * budget + (1 << 20));
  });
});

describe("7. atomic routes", () => {
  it("a conversation router whose index was disposed refuses the batch before recording it", () => {
    const make = () => createRouter({ numRanks: 2, attentionDp: { kv_cache_routing_conversation_affinity: true }, prefixIndex: { tokensPerBlock: 2 } });
    const router = make();
    const twin = make();
    const batch = (id: number, conversationId: string): RouteInput => ({ rankStates: idle(2), maxNumActiveRequests: 4, requests: [{ id, tokens: range(6), conversationId }] });
    router.prefixIndex!.dispose();
    expectInputError(() => router.route(batch(1, "a")), "prefixIndex");
    router.setPrefixIndex(null);
    twin.setPrefixIndex(null);
    expect(router.route(batch(2, "b"))).toEqual(twin.route(batch(2, "b")));
    expect(router.snapshot()).toEqual(twin.snapshot());
  });

  it("a throwing onDecision never loses the committed result: AdpHookError carries it, or onHookError receives the errors", () => {
    const batch = (id: number): RouteInput => ({ rankStates: idle(2), maxNumActiveRequests: 4, requests: [{ id, numTokens: 5, conversationId: `c${id}` }, { id: id + 1, numTokens: 5 }] });
    const config = { kv_cache_routing_conversation_affinity: true };
    let delivered = 0;
    const router = createRouter({ numRanks: 2, attentionDp: config, onDecision: () => { delivered++; throw new Error("hook"); } });
    const twin = createRouter({ numRanks: 2, attentionDp: config });
    const error = thrown(() => router.route(batch(1)));
    expect(error).toBeInstanceOf(AdpHookError);
    expect((error as AdpHookError).result).toEqual(twin.route(batch(1)));
    expect(delivered).toBe(2);
    const seen: unknown[] = [];
    const tolerant = createRouter({ numRanks: 2, attentionDp: config, onDecision: () => { throw new Error("hook"); }, onHookError: (e) => seen.push(e) });
    const other = createRouter({ numRanks: 2, attentionDp: config });
    expect(tolerant.route(batch(10))).toEqual(other.route(batch(10)));
    expect(seen).toHaveLength(2);
    expect(tolerant.snapshot()).toEqual(other.snapshot());
  });
});
