// Shared pieces of the fuzz properties (test/fuzz-*.property.test.ts): running a
// call that may only refuse with AdpInputError, rendering values for failure
// messages, hostile array-likes that lie or change between reads, and engine
// KV events, valid and garbage. Browser-clean: no Node APIs.
import fc from "fast-check";
import { AdpInputError, type PrefixIndex, type PrefixNamespace, type RouteInput, type RouteResult } from "../../src/index.js";

/** Damaged snapshots the snapshot properties try: ADP_FUZZ_RUNS (`npm run fuzz`), or 2,000 in `npm test`. */
export const FUZZ_RUNS = Number(globalThis.process?.env.ADP_FUZZ_RUNS ?? 2000);
/** `n` runs of a short property, scaled as a long run scales the snapshot runs. */
export const scaled = (n: number): number => Math.max(n, Math.round((n * FUZZ_RUNS) / 2000));

// ---------------------------------------------------------------------------
// Shared helpers

/** Whether `e` is the library's typed input error. */
export const isInputError = (e: unknown): e is AdpInputError => e instanceof AdpInputError && e.code === "ERR_ADP_INPUT";

/** A short description of any thrown value. */
export function describeError(e: unknown): string {
  try {
    if (e instanceof Error) return `${e.constructor.name}: ${e.message.slice(0, 300)}`;
    return String(e);
  } catch {
    return typeof e;
  }
}

export type Attempt<T> = { ok: true; value: T } | { ok: false; error: AdpInputError };

/** Runs `fn`: an AdpInputError comes back as a refusal; anything else thrown fails the test. */
export function attempt<T>(what: string, fn: () => T): Attempt<T> {
  try {
    return { ok: true, value: fn() };
  } catch (error) {
    if (isInputError(error)) return { ok: false, error };
    throw new Error(`${what}: threw ${describeError(error)} (only AdpInputError may be thrown)`, { cause: error });
  }
}

/** Fails with `message` (used inside properties, where `expect` output is noisy). */
export function fail(message: string): never {
  throw new Error(message);
}

/** A JSON-ish rendering for failure messages (bigints, symbols and cycles survive). */
export function show(v: unknown): string {
  const seen = new WeakSet<object>();
  try {
    return (
      JSON.stringify(v, (_k, x: unknown) => {
        if (typeof x === "bigint") return `${x}n`;
        if (typeof x === "symbol") return x.toString();
        if (typeof x === "object" && x !== null) {
          if (seen.has(x)) return "[cycle]";
          seen.add(x);
        }
        return x;
      })?.slice(0, 400) ?? String(v)
    );
  } catch {
    return "[unprintable]";
  }
}

/** Byte equality of two snapshots. */
export const sameBytes = (a: Uint8Array, b: Uint8Array): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

// ---------------------------------------------------------------------------
// Hostile array-likes. Each variant gives a fresh value per call (so the index
// and its twin never share a stateful object) and the plain array the library
// must have read from it, or null when the call must be refused.

export interface Hostile {
  readonly name: string;
  /** A fresh hostile value. */
  readonly make: () => unknown;
  /** What a twin gets instead when the call succeeds; null: the call must throw. */
  readonly plain: unknown[] | null;
}

/** A Proxy over `base` whose elements read as themselves once, then as `later`. */
export function flippingProxy(base: readonly unknown[], later: unknown): unknown {
  const reads = new Map<string, number>();
  return new Proxy([...base], {
    get(target, key, receiver) {
      if (typeof key === "string" && /^\d+$/.test(key)) {
        const n = (reads.get(key) ?? 0) + 1;
        reads.set(key, n);
        if (n > 1) return later;
      }
      return Reflect.get(target, key, receiver) as unknown;
    },
  });
}

/** An array-like whose `length` getter reports `base.length` once, then 1e9. */
export function lyingLength(base: readonly unknown[]): unknown {
  const o: Record<string, unknown> = {};
  base.forEach((x, i) => (o[i] = x));
  let n = 0;
  Object.defineProperty(o, "length", { get: () => (n++ === 0 ? base.length : 1e9), enumerable: false });
  return o;
}

/** An array-like whose element getters give the element once, then `later`. */
export function changingElements(base: readonly unknown[], later: unknown): unknown {
  const o: Record<string, unknown> = { length: base.length };
  base.forEach((t, i) => {
    let n = 0;
    Object.defineProperty(o, i, { get: () => (n++ === 0 ? t : later), enumerable: true });
  });
  return o;
}

/** A genuine Uint32Array with an own `length` that lies by `delta`. */
export function lyingTyped(base: readonly number[], delta: number): unknown {
  const a = new Uint32Array(base);
  Object.defineProperty(a, "length", { value: Math.max(0, base.length + delta) });
  return a;
}

export const BAD_TOKENS: readonly unknown[] = [1n, Symbol("t"), NaN, -1, 2 ** 32, 1.5, "1", null, undefined, Infinity, {}, [1]];

/** Hostile token arrays; `v` picks the variant, `pos` and `bad` where and what to plant. */
export function hostileTokens(v: number, base: number[], pos: number, bad: number): Hostile {
  const at = pos % (base.length + 1);
  const planted = (x: unknown) => {
    const a: unknown[] = [...base];
    a.splice(at, 0, x);
    return a;
  };
  const badValue = BAD_TOKENS[bad % BAD_TOKENS.length];
  const variants: (() => Hostile)[] = [
    () => ({ name: `planted ${show(badValue)}`, make: () => planted(badValue), plain: null }),
    () => ({ name: "sparse hole", make: () => { const a: unknown[] = [...base, 1]; a.length += 1; return a; }, plain: null }),
    () => ({ name: "length NaN", make: () => ({ length: NaN, 0: 1 }), plain: null }),
    () => ({ name: "length -1", make: () => ({ length: -1 }), plain: null }),
    () => ({ name: "length 2.5", make: () => ({ length: 2.5, 0: 1, 1: 2, 2: 3 }), plain: null }),
    () => ({ name: "length 1e9", make: () => ({ length: 1e9 }), plain: null }),
    () => ({ name: "new Array(1e9)", make: () => new Array(1e9), plain: null }),
    () => ({ name: "length as a string", make: () => ({ length: "2", 0: 1, 1: 2 }), plain: null }),
    () => ({ name: "a number", make: () => 5, plain: null }),
    () => ({ name: "a string", make: () => "abc", plain: null }),
    () => ({ name: "flipping proxy", make: () => flippingProxy(base, 2 ** 32 + 0.5), plain: base }),
    () => ({ name: "lying length getter", make: () => lyingLength(base), plain: base }),
    () => ({ name: "changing element getters", make: () => changingElements(base, -1), plain: base }),
    () => ({ name: "BigUint64Array", make: () => BigUint64Array.from(base, (t) => BigInt(t)), plain: base.length === 0 ? [] : null }),
    () => ({ name: "Uint8Array", make: () => Uint8Array.from(base), plain: base }),
    () => ({ name: "Int32Array with -1", make: () => Int32Array.from(planted(-1) as number[]), plain: null }),
    () => ({ name: "Float64Array with 0.5", make: () => Float64Array.from(planted(0.5) as number[]), plain: null }),
    () => ({ name: "Uint32Array claiming 2 more", make: () => lyingTyped(base, 2), plain: null }),
    () => ({ name: "Uint32Array claiming 1 fewer", make: () => lyingTyped(base, -1), plain: base.slice(0, Math.max(0, base.length - 1)) }),
    () => ({ name: "Uint32Array", make: () => Uint32Array.from(base), plain: base }),
  ];
  return variants[v % variants.length]!();
}

export const BAD_KEYS: readonly unknown[] = [-1, 2 ** 53, 1.5, NaN, -1n, 2n ** 64n, "5", Symbol("k"), null, undefined, {}, Infinity];

/** Hostile block-key arrays (numbers or bigints below 2^64 are keys). */
export function hostileKeys(v: number, base: (number | bigint)[], pos: number, bad: number): Hostile {
  const at = pos % (base.length + 1);
  const badValue = BAD_KEYS[bad % BAD_KEYS.length];
  const planted = () => {
    const a: unknown[] = [...base];
    a.splice(at, 0, badValue);
    return a;
  };
  const asNumbers = base.every((k) => typeof k === "number" || k <= BigInt(Number.MAX_SAFE_INTEGER));
  const variants: (() => Hostile)[] = [
    () => ({ name: `planted ${show(badValue)}`, make: planted, plain: null }),
    () => ({ name: "length NaN", make: () => ({ length: NaN }), plain: null }),
    () => ({ name: "length -1", make: () => ({ length: -1 }), plain: null }),
    () => ({ name: "length 2.5", make: () => ({ length: 2.5, 0: 1, 1: 2, 2: 3 }), plain: null }),
    () => ({ name: "length 1e9", make: () => ({ length: 1e9 }), plain: null }),
    () => ({ name: "new Array(1e9)", make: () => new Array(1e9), plain: null }),
    () => ({ name: "a number (insertBlocks(0, 5))", make: () => 5, plain: null }),
    () => ({ name: "flipping proxy", make: () => flippingProxy(base, -5), plain: base }),
    () => ({ name: "lying length getter", make: () => lyingLength(base), plain: base }),
    () => ({ name: "changing element getters", make: () => changingElements(base, 0.5), plain: base }),
    () => ({ name: "BigUint64Array", make: () => BigUint64Array.from(base, (k) => BigInt(k)), plain: base.map((k) => BigInt(k)) }),
    () => ({ name: "BigInt64Array with -1", make: () => BigInt64Array.from([...base.map((k) => BigInt.asIntN(64, BigInt(k))), -1n]), plain: null }),
    () => ({ name: "Float64Array", make: () => (asNumbers ? Float64Array.from(base, Number) : Float64Array.from([0.5])), plain: asNumbers ? base.map(Number) : null }),
  ];
  return variants[v % variants.length]!();
}

export const VALID_NS: readonly (PrefixNamespace | null | undefined)[] = [undefined, null, {}, { loraTaskId: 1 }, { cacheSalt: "s" }, { loraTaskId: 7, cacheSalt: "s" }, { loraTaskId: null, cacheSalt: null }, { loraTaskId: -3 }];

export interface HostileNs {
  readonly name: string;
  readonly make: () => unknown;
  /** What a twin gets when the call succeeds; null: it must throw. */
  readonly plain: { ns: unknown } | null;
}

/** Hostile namespaces. */
export function hostileNs(v: number): HostileNs {
  const variants: HostileNs[] = [
    { name: "unknown field", make: () => ({ foo: 1 }), plain: null },
    { name: "extra field", make: () => ({ loraTaskId: 1, extra: true }), plain: null },
    { name: "fractional lora", make: () => ({ loraTaskId: 1.5 }), plain: null },
    { name: "string lora", make: () => ({ loraTaskId: "1" }), plain: null },
    { name: "bigint lora", make: () => ({ loraTaskId: 1n }), plain: null },
    { name: "unsafe lora", make: () => ({ loraTaskId: 2 ** 53 }), plain: null },
    { name: "numeric salt", make: () => ({ cacheSalt: 5 }), plain: null },
    { name: "huge salt", make: () => ({ cacheSalt: "x".repeat(5000) }), plain: null },
    { name: "a string", make: () => "ns", plain: null },
    { name: "a number", make: () => 5, plain: null },
    { name: "a symbol", make: () => Symbol("ns"), plain: null },
    { name: "an array with an element", make: () => [1], plain: null },
    { name: "a changing lora getter", make: () => { let n = 0; return { get loraTaskId() { return n++ === 0 ? 1 : 1.5; } }; }, plain: { ns: { loraTaskId: 1 } } },
  ];
  return variants[v % variants.length]!;
}

/** Ranks out of range or of the wrong type. */
export const badRank = (v: number, numRanks: number): unknown => [-1, numRanks, numRanks + 7, 1.5, NaN, "0", 0n, null, undefined, Infinity, 2 ** 32][v % 11];

// ---------------------------------------------------------------------------
// Engine KV events: valid ones (TensorRT-LLM and vLLM dialects) and garbage.

export const ENGINE_HASHES: readonly unknown[] = [1, 2, 3, 4, 5, 6, 7, "340282366920938463463374607431768211455", -9, 12345678901234567890n, 2 ** 60];

export interface EventDesc {
  t: number;
  rank: number;
  parent: number;
  hashes: number[];
  tokens: number[][];
  eventId: number | null;
  lora: number | null;
}

export const eventDescArb: fc.Arbitrary<EventDesc> = fc.record({
  t: fc.integer({ min: 0, max: 6 }),
  rank: fc.integer({ min: 0, max: 3 }),
  parent: fc.integer({ min: 0, max: ENGINE_HASHES.length }),
  hashes: fc.array(fc.integer({ min: 0, max: ENGINE_HASHES.length - 1 }), { minLength: 1, maxLength: 3 }),
  tokens: fc.array(fc.array(fc.integer({ min: 0, max: 2 }), { minLength: 4, maxLength: 4 }), { minLength: 3, maxLength: 3 }),
  eventId: fc.option(fc.integer({ min: 0, max: 30 }), { nil: null }),
  lora: fc.option(fc.constant(1), { nil: null }),
});

/** A well-formed engine event for an index of `numRanks` ranks of `tpb`-token blocks. */
export function buildEvent(d: EventDesc, numRanks: number, tpb: number, withRank: boolean): unknown {
  const rank = d.rank % numRanks;
  const hashes = d.hashes.map((h) => ENGINE_HASHES[h]!);
  const parent = d.parent === ENGINE_HASHES.length ? null : ENGINE_HASHES[d.parent]!;
  const blockTokens = (i: number) => d.tokens[i % d.tokens.length]!.slice(0, tpb);
  const rankField = withRank ? { attention_dp_rank: rank } : {};
  switch (d.t) {
    case 0: // TensorRT-LLM stored, with tokens
      return { event_id: d.eventId, ...rankField, window_size: 32, data: { type: "stored", parent_hash: parent, blocks: hashes.map((h, i) => ({ block_hash: h, tokens: blockTokens(i).map((t) => ({ token_id: t, token_extra_id: 0 })), lora_id: d.lora })) } };
    case 1: // TensorRT-LLM stored, keyed blocks (no tokens)
      return { event_id: d.eventId, ...rankField, data: { type: "stored", parent_hash: parent, blocks: hashes.map((h) => ({ block_hash: h })) } };
    case 2:
      return { event_id: d.eventId, ...rankField, data: { type: "removed", block_hashes: hashes } };
    case 3:
      return { event_id: d.eventId, ...rankField, data: { type: d.lora === null ? "created" : "updated", num_blocks_per_cache_level: [1] } };
    case 4: // a vLLM batch
      return {
        ...(withRank ? { data_parallel_rank: rank } : {}),
        events: [{ type: "BlockStored", block_hashes: hashes, parent_block_hash: parent, token_ids: hashes.flatMap((_, i) => blockTokens(i)), block_size: tpb, lora_id: d.lora }],
      };
    case 5:
      return { type: "BlockRemoved", ...(withRank ? { data_parallel_rank: rank } : {}), block_hashes: hashes };
    default:
      return { type: "AllBlocksCleared", ...(withRank ? { data_parallel_rank: rank } : {}) };
  }
}

/** Garbage for applyKvEvents, which must count it and never throw. Fresh per call. */
export const GARBAGE_EVENTS: readonly ((rank: number, tpb: number) => unknown)[] = [
  () => 1n,
  () => Symbol("event"),
  () => null,
  () => undefined,
  () => "stored",
  () => 42,
  () => [1n, null, Symbol("e"), "x"],
  () => ({ event_id: 1, attention_dp_rank: 1n, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 1 }] } }),
  (r) => ({ event_id: 1n, attention_dp_rank: r, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 1n << 200n }] } }),
  () => {
    const o: Record<string, unknown> = { type: "BlockStored" };
    o.block_hashes = [o];
    o.token_ids = o;
    o.self = o;
    return o;
  },
  () => {
    const o: Record<string, unknown> = {};
    o.data = o;
    o.attention_dp_rank = o;
    return o;
  },
  () => {
    const list: unknown[] = [];
    list.push(list, { events: list });
    return list;
  },
  () => ({ get data() { throw new Error("getter boom"); } }),
  () => {
    const p = Proxy.revocable({}, {});
    p.revoke();
    return p.proxy;
  },
  () => {
    const p = Proxy.revocable([], {});
    p.revoke();
    return p.proxy;
  },
  () => {
    const p = Proxy.revocable({ type: "AllBlocksCleared" }, {});
    p.revoke();
    return [p.proxy, { events: [p.proxy] }];
  },
  () => ({ events: [{ get type() { throw new Error("type getter"); } }] }),
  () => ({ events: new Proxy([], { get(t, k) { if (k === "length") throw new Error("length getter"); return Reflect.get(t, k) as unknown; } }) }),
  () => new Proxy([1, 2], { get(t, k) { if (k === "0") throw new Error("element getter"); return Reflect.get(t, k) as unknown; } }),
  () => new Proxy({}, { get() { throw new Error("get trap"); }, has() { throw new Error("has trap"); }, ownKeys() { throw new Error("ownKeys trap"); }, getPrototypeOf() { throw new Error("proto trap"); } }),
  () => ({ data_parallel_rank: 1n, events: [{ type: "AllBlocksCleared" }] }),
  (r) => ({ attention_dp_rank: r, data: { type: "removed", block_hashes: [1, 2n, "x"] } }),
  (r) => ({ attention_dp_rank: r, data: { type: "stored", parent_hash: {}, blocks: [{ block_hash: 1, tokens: [{ token_id: 1n }] }] } }),
  (r) => ({ attention_dp_rank: r, data: { type: "stored", blocks: new Array(5) } }),
  (r) => ({ attention_dp_rank: r, data: { type: "stored", blocks: { length: 1e9 } } }),
  (r, tpb) => ({ attention_dp_rank: r, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 9, tokens: Array.from({ length: tpb + 1 }, () => ({ token_id: 1 })) }] } }),
  (r, tpb) => ({ attention_dp_rank: r, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 9, tokens: Array.from({ length: tpb }, () => ({ get token_id() { throw new Error("token getter"); } })) }] } }),
  (r) => ({ type: "BlockStored", data_parallel_rank: r, block_hashes: [1], token_ids: [1, 2, 3, 4, 5, 6, 7, 8, 9], block_size: 1n }),
  (r) => ({ attention_dp_rank: r, data: { type: { toString() { throw new Error("toString"); } } } }),
  (r) => ({ attention_dp_rank: r + 0.5, data: { type: "removed", block_hashes: [1] } }),
  (r) => ({ attention_dp_rank: r, data: { type: "stored", parent_hash: "0x10", blocks: [{ block_hash: "1".repeat(60) }] } }),
  (r) => ({ attention_dp_rank: r, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 1, tokens: null }, { block_hash: 2, tokens: [{ token_id: 0 }] }] } }),
  () => ({ attention_dp_rank: -1, data: { type: "removed", block_hashes: [] } }),
  (r) => ({ type: "BlockStored", data_parallel_rank: r, block_hashes: [NaN], token_ids: [] }),
];


/** Checks the index's promises: its budget and each rank's capacity hold. */
export function checkIndexBounds(ix: PrefixIndex, cfg: { maxMemoryBytes?: number; capacityBlocksPerRank?: number }, where: string): void {
  const stats = ix.stats();
  if (cfg.maxMemoryBytes !== undefined && stats.bytesInUse > cfg.maxMemoryBytes) fail(`${where}: bytesInUse ${stats.bytesInUse} over the budget ${cfg.maxMemoryBytes}`);
  if (cfg.capacityBlocksPerRank !== undefined) {
    for (let r = 0; r < ix.numRanks; r++) {
      const held = ix.blockCount(r);
      if (held > cfg.capacityBlocksPerRank) fail(`${where}: rank ${r} holds ${held} blocks over its capacity ${cfg.capacityBlocksPerRank}`);
    }
  }
}

/** Checks a route result's shape: one list per rank, every request exactly once. */
export function checkResult(result: RouteResult, input: RouteInput, numRanks: number, where: string): void {
  if (result.assignments.length !== numRanks) fail(`${where}: ${result.assignments.length} assignment lists for ${numRanks} ranks`);
  const placed = [...result.assignments.flat(), ...result.unassigned].map((id) => String(id)).sort();
  const wanted = input.requests.map((q) => String(q.id)).sort();
  if (show(placed) !== show(wanted)) fail(`${where}: placed ${show(placed)} for requests ${show(wanted)}`);
}
