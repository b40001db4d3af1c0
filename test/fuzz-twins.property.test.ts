// Fuzzing the hardened surface against twins: a prefix index, and each of the
// three routers, fed random valid and hostile calls (huge and lying
// array-likes, bigints, Symbols, changing getters, malformed events) decide
// exactly as a twin fed only the calls that succeeded: a refused call changes
// nothing. Every error thrown must be an AdpInputError; a WebAssembly trap or
// a plain TypeError or RangeError fails. ADP_FUZZ_RUNS scales the runs (npm run fuzz).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AdpInputError,
  createPrefixIndex,
  createRouter,
  restorePrefixIndex,
  restoreRouter,
  type PrefixIndex,
  type PrefixNamespace,
  type RouteInput,
  type Router,
} from "../src/index.js";
import {
  attempt,
  badRank,
  buildEvent,
  checkIndexBounds,
  checkResult,
  describeError,
  eventDescArb,
  fail,
  flippingProxy,
  GARBAGE_EVENTS,
  hostileKeys,
  hostileNs,
  hostileTokens,
  sameBytes,
  scaled,
  show,
  VALID_NS,
  type EventDesc,
} from "./support/fuzz.js";

// ---------------------------------------------------------------------------
// a. Prefix index against a twin

interface IndexConfig {
  numRanks: number;
  tokensPerBlock: number;
  capacityBlocksPerRank?: number;
  maxMemoryBytes?: number;
}

const indexConfigArb: fc.Arbitrary<IndexConfig> = fc
  .record({
    numRanks: fc.integer({ min: 1, max: 4 }),
    tokensPerBlock: fc.integer({ min: 1, max: 4 }),
    capacity: fc.option(fc.integer({ min: 1, max: 12 }), { nil: undefined }),
    budget: fc.option(fc.constantFrom(8, 12, 16, 32, 64), { nil: undefined }),
  })
  .map(({ numRanks, tokensPerBlock, capacity, budget }) => ({
    numRanks,
    tokensPerBlock,
    ...(capacity !== undefined ? { capacityBlocksPerRank: capacity } : {}),
    ...(budget !== undefined ? { maxMemoryBytes: budget * 1024 } : {}),
  }));

const promptArb = fc.array(fc.integer({ min: 0, max: 2 }), { maxLength: 14 });
const keysArb = fc.array(fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 0, max: 3 }) }, { weight: 1, arbitrary: fc.constantFrom<number | bigint>(2 ** 53 - 1, 2n ** 64n - 1n, 2n ** 53n) }), { maxLength: 6 });

type IndexOp =
  | { k: "insert" | "match"; rank: number; prompt: number[]; ns: number }
  | { k: "insertBlocks" | "matchBlocks"; rank: number; keys: (number | bigint)[]; ns: number }
  | { k: "clearRank"; rank: number }
  | { k: "kv"; events: EventDesc[]; list: boolean; viaOption: boolean }
  | { k: "kvGarbage"; v: number; rank: number; list: boolean }
  | { k: "kvBadOption"; v: number; event: EventDesc }
  | { k: "badTokens"; method: number; rank: number; prompt: number[]; v: number; pos: number; bad: number }
  | { k: "badKeys"; method: number; rank: number; keys: (number | bigint)[]; v: number; pos: number; bad: number }
  | { k: "badRank"; method: number; v: number; prompt: number[] }
  | { k: "badNs"; method: number; v: number; rank: number; prompt: number[] };

const indexOpArb: fc.Arbitrary<IndexOp> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ k: fc.constantFrom("insert" as const, "match" as const), rank: fc.nat(3), prompt: promptArb, ns: fc.nat(VALID_NS.length - 1) }) },
  { weight: 3, arbitrary: fc.record({ k: fc.constantFrom("insertBlocks" as const, "matchBlocks" as const), rank: fc.nat(3), keys: keysArb, ns: fc.nat(VALID_NS.length - 1) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant("clearRank" as const), rank: fc.nat(3) }) },
  { weight: 3, arbitrary: fc.record({ k: fc.constant("kv" as const), events: fc.array(eventDescArb, { minLength: 1, maxLength: 4 }), list: fc.boolean(), viaOption: fc.boolean() }) },
  { weight: 3, arbitrary: fc.record({ k: fc.constant("kvGarbage" as const), v: fc.nat(), rank: fc.nat(3), list: fc.boolean() }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant("kvBadOption" as const), v: fc.nat(), event: eventDescArb }) },
  { weight: 5, arbitrary: fc.record({ k: fc.constant("badTokens" as const), method: fc.nat(2), rank: fc.nat(3), prompt: promptArb, v: fc.nat(), pos: fc.nat(), bad: fc.nat() }) },
  { weight: 4, arbitrary: fc.record({ k: fc.constant("badKeys" as const), method: fc.nat(1), rank: fc.nat(3), keys: keysArb, v: fc.nat(), pos: fc.nat(), bad: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant("badRank" as const), method: fc.nat(3), v: fc.nat(), prompt: promptArb }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant("badNs" as const), method: fc.nat(3), v: fc.nat(), rank: fc.nat(3), prompt: promptArb }) },
);

/** One step: what it does to the index, and what the twin gets if it succeeded. */
interface Step {
  readonly what: string;
  /** "ok": must succeed; "throw": must be refused; "never-throws": must not throw anything. */
  readonly expect: "ok" | "throw" | "never-throws";
  readonly run: (ix: PrefixIndex) => unknown;
  readonly twin: (ix: PrefixIndex) => unknown;
}

/** The step an op describes, for an index of `cfg`. */
function indexStep(op: IndexOp, cfg: IndexConfig): Step {
  const { numRanks, tokensPerBlock: tpb } = cfg;
  switch (op.k) {
    case "insert":
    case "match": {
      const rank = op.rank % numRanks;
      const ns = VALID_NS[op.ns];
      const run = (ix: PrefixIndex) => (op.k === "insert" ? ix.insert(rank, op.prompt, ns) : ix.match(op.prompt, ns));
      return { what: `${op.k}(${rank}, ${show(op.prompt)}, ${show(ns)})`, expect: "ok", run, twin: run };
    }
    case "insertBlocks":
    case "matchBlocks": {
      const rank = op.rank % numRanks;
      const ns = VALID_NS[op.ns];
      const run = (ix: PrefixIndex) => (op.k === "insertBlocks" ? ix.insertBlocks(rank, op.keys, ns) : ix.matchBlocks(op.keys, ns));
      return { what: `${op.k}(${rank}, ${show(op.keys)}, ${show(ns)})`, expect: "ok", run, twin: run };
    }
    case "clearRank": {
      const rank = op.rank % numRanks;
      const run = (ix: PrefixIndex) => ix.clearRank(rank);
      return { what: `clearRank(${rank})`, expect: "ok", run, twin: run };
    }
    case "kv": {
      const run = (ix: PrefixIndex) => {
        const events = op.events.map((d) => buildEvent(d, numRanks, tpb, !op.viaOption));
        const rank = op.events[0]!.rank % numRanks;
        return ix.applyKvEvents(op.list ? events : events[0], op.viaOption ? { rank } : {});
      };
      return { what: `applyKvEvents(${show(op)})`, expect: "never-throws", run, twin: run };
    }
    case "kvGarbage": {
      const make = GARBAGE_EVENTS[op.v % GARBAGE_EVENTS.length]!;
      const rank = op.rank % numRanks;
      const cleared = () => buildEvent({ t: 6, rank, parent: 0, hashes: [0], tokens: [], eventId: null, lora: null }, numRanks, tpb, true);
      const run = (ix: PrefixIndex) => ix.applyKvEvents(op.list ? [make(rank, tpb), cleared()] : make(rank, tpb));
      return { what: `applyKvEvents(garbage #${op.v % GARBAGE_EVENTS.length}${op.list ? " in a list" : ""})`, expect: "never-throws", run, twin: run };
    }
    case "kvBadOption": {
      const rank = [numRanks, -1, 1.5, 1n, "0", NaN][op.v % 6];
      const run = (ix: PrefixIndex) => ix.applyKvEvents(buildEvent(op.event, numRanks, tpb, false), { rank } as { rank: number });
      return { what: `applyKvEvents(event, { rank: ${show(rank)} })`, expect: "throw", run, twin: run };
    }
    case "badTokens": {
      const h = hostileTokens(op.v, op.prompt, op.pos, op.bad);
      const rank = op.rank % numRanks;
      const call = (ix: PrefixIndex, t: unknown) => {
        if (op.method === 0) return ix.insert(rank, t as number[]);
        if (op.method === 1) return ix.match(t as number[]);
        const out = new Uint32Array(numRanks);
        ix.matchInto(out, t as number[]);
        return [...out];
      };
      return {
        what: `${["insert", "match", "matchInto"][op.method]} with tokens: ${h.name} over ${show(op.prompt)}`,
        expect: h.plain === null ? "throw" : "ok",
        run: (ix) => call(ix, h.make()),
        twin: (ix) => call(ix, h.plain),
      };
    }
    case "badKeys": {
      const h = hostileKeys(op.v, op.keys, op.pos, op.bad);
      const rank = op.rank % numRanks;
      const call = (ix: PrefixIndex, k: unknown) => (op.method === 0 ? ix.insertBlocks(rank, k as number[]) : ix.matchBlocks(k as number[]));
      return {
        what: `${["insertBlocks", "matchBlocks"][op.method]} with keys: ${h.name} over ${show(op.keys)}`,
        expect: h.plain === null ? "throw" : "ok",
        run: (ix) => call(ix, h.make()),
        twin: (ix) => call(ix, h.plain),
      };
    }
    case "badRank": {
      const rank = badRank(op.v, numRanks) as number;
      const run = (ix: PrefixIndex) =>
        op.method === 0 ? ix.insert(rank, op.prompt) : op.method === 1 ? ix.insertBlocks(rank, op.prompt) : op.method === 2 ? ix.clearRank(rank) : ix.blockCount(rank);
      return { what: `${["insert", "insertBlocks", "clearRank", "blockCount"][op.method]} on rank ${show(rank)}`, expect: "throw", run, twin: run };
    }
    case "badNs": {
      const h = hostileNs(op.v);
      const rank = op.rank % numRanks;
      const call = (ix: PrefixIndex, ns: unknown) => {
        const n = ns as PrefixNamespace;
        return op.method === 0 ? ix.insert(rank, op.prompt, n) : op.method === 1 ? ix.match(op.prompt, n) : op.method === 2 ? ix.insertBlocks(rank, op.prompt, n) : ix.matchBlocks(op.prompt, n);
      };
      return {
        what: `${["insert", "match", "insertBlocks", "matchBlocks"][op.method]} with namespace: ${h.name}`,
        expect: h.plain === null ? "throw" : "ok",
        run: (ix) => call(ix, h.make()),
        twin: (ix) => call(ix, h.plain!.ns),
      };
    }
  }
}


describe("fuzz: a prefix index fed hostile calls decides as a twin fed only the accepted ones", () => {
  it("interleaved valid and invalid calls (fixed seed)", () => {
    fc.assert(
      fc.property(indexConfigArb, fc.array(indexOpArb, { minLength: 10, maxLength: 45 }), fc.array(promptArb, { minLength: 3, maxLength: 5 }), (cfg, ops, probeSeeds) => {
        const index = createPrefixIndex(cfg);
        const twin = createPrefixIndex(cfg);
        const probes = [...probeSeeds, [0, 0, 0, 0, 0, 0, 0, 0], [0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2]];
        const keyProbes = [[0, 1, 2, 3], [1, 1, 1], [2n ** 64n - 1n, 0]];
        for (const [i, op] of ops.entries()) {
          const step = indexStep(op, cfg);
          const where = `step ${i}: ${step.what}`;
          const got = attempt(where, () => step.run(index));
          if (step.expect === "never-throws" && !got.ok) fail(`${where}: applyKvEvents threw ${describeError(got.error)}`);
          if (step.expect === "ok" && !got.ok) fail(`${where}: refused a valid call: ${got.error.message}`);
          if (step.expect === "throw" && got.ok) fail(`${where}: accepted an invalid call`);
          if (got.ok) {
            const mirrored = attempt(`${where} (twin)`, () => step.twin(twin));
            if (!mirrored.ok) fail(`${where}: the twin refused what the index accepted: ${mirrored.error.message}`);
            expect(mirrored.value, where).toEqual(got.value);
          }
          for (const p of probes) expect(index.match(p), `${where}, probe ${show(p)}`).toEqual(twin.match(p));
          for (const k of keyProbes) expect(index.matchBlocks(k), `${where}, key probe`).toEqual(twin.matchBlocks(k));
          expect(index.stats(), where).toEqual(twin.stats());
          checkIndexBounds(index, cfg, where);
        }
        const bytes = index.snapshot();
        expect(sameBytes(bytes, twin.snapshot()), "the index's and its twin's snapshots differ").toBe(true);
        // A restored index answers as the original (its bytes are checked in the regression test below).
        const restored = restorePrefixIndex(bytes);
        for (const p of probes) expect(restored.match(p)).toEqual(index.match(p));
        // Sizes may shrink on restore (the table and heaps are rebuilt); contents and counters may not change.
        const { blocks, residencies, evictions, stampResets, kvEvents } = index.stats();
        expect(restored.stats()).toMatchObject({ blocks, residencies, evictions, stampResets, kvEvents });
      }),
      { seed: 0x5eed1dc5, numRuns: scaled(100) },
    );
  });

  it("matchBlocks(new Array(1e9)) and friends are refused at once, without allocating for the length", () => {
    const index = createPrefixIndex({ numRanks: 2, tokensPerBlock: 2 });
    const started = performance.now();
    const calls = [
      () => index.matchBlocks(new Array(1e9)),
      () => index.match(new Array(1e9)),
      () => index.insert(0, { length: 2 ** 28 } as ArrayLike<number>),
      () => index.insertBlocks(0, { length: 2 ** 27 } as ArrayLike<number>),
      () => index.insertBlocks(0, 5 as unknown as number[]),
    ];
    for (const call of calls) expect(call).toThrow(AdpInputError);
    expect(performance.now() - started).toBeLessThan(1000);
  });
});

// ---------------------------------------------------------------------------
// b. Routers against a twin

interface RouterConfig {
  name: string;
  attentionDp: Record<string, unknown>;
  prefixIndex?: { tokensPerBlock: number; capacityBlocksPerRank?: number; maxMemoryBytes?: number };
}

const ROUTER_CONFIGS: readonly RouterConfig[] = [
  { name: "default", attentionDp: {} },
  { name: "kv", attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 2 } },
  { name: "kv-warmup", attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true }, prefixIndex: { tokensPerBlock: 2, capacityBlocksPerRank: 8, maxMemoryBytes: 16384 } },
  { name: "conversation", attentionDp: { kv_cache_routing_conversation_affinity: true, kv_cache_routing_max_sessions: 4 } },
];

interface ReqDesc {
  prompt: number[];
  mode: number;
  conv: number | null;
  matches: number[] | null;
  keys: number[] | null;
  lora: number | null;
  salt: string | null;
  rank: number | null;
  strict: boolean;
}

interface BatchDesc {
  loads: [number, number][];
  cap: number;
  requests: ReqDesc[];
}

const reqDescArb: fc.Arbitrary<ReqDesc> = fc.record({
  prompt: fc.array(fc.integer({ min: 0, max: 2 }), { maxLength: 12 }),
  mode: fc.nat(3),
  conv: fc.option(fc.nat(5), { nil: null }),
  matches: fc.option(fc.array(fc.nat(12), { minLength: 4, maxLength: 4 }), { nil: null, freq: 3 }),
  keys: fc.option(fc.array(fc.nat(3), { maxLength: 5 }), { nil: null, freq: 3 }),
  lora: fc.option(fc.constant(1), { nil: null, freq: 3 }),
  salt: fc.option(fc.constant("salt"), { nil: null, freq: 4 }),
  rank: fc.option(fc.nat(3), { nil: null, freq: 4 }),
  strict: fc.boolean(),
});

const batchDescArb: fc.Arbitrary<BatchDesc> = fc.record({
  loads: fc.array(fc.tuple(fc.nat(5), fc.nat(200)), { minLength: 4, maxLength: 4 }),
  cap: fc.integer({ min: 0, max: 8 }),
  requests: fc.array(reqDescArb, { maxLength: 6 }),
});

type PlainBatch = RouteInput & { requests: Record<string, unknown>[] };

/** The plain batch a descriptor stands for, with ids from `firstId` (every third a bigint). */
function buildBatch(d: BatchDesc, numRanks: number, firstId: number): PlainBatch {
  return {
    rankStates: d.loads.slice(0, numRanks).map(([numActiveRequests, numActiveTokens]) => ({ numActiveRequests, numActiveTokens })),
    maxNumActiveRequests: d.cap,
    requests: d.requests.map((q, i) => ({
      id: (firstId + i) % 3 === 0 ? BigInt(firstId + i) : firstId + i,
      ...(q.mode !== 1 ? { tokens: [...q.prompt] } : {}),
      ...(q.mode === 1 || q.mode === 2 ? { numTokens: q.prompt.length + (q.mode === 2 ? 1 : 0) } : {}),
      ...(q.mode === 3 && q.keys ? { blockKeys: [...q.keys] } : {}),
      ...(q.conv !== null ? { conversationId: `conv-${q.conv}` } : {}),
      ...(q.matches ? { prefixMatches: q.matches.slice(0, numRanks) } : {}),
      ...(q.lora !== null ? { loraTaskId: q.lora } : {}),
      ...(q.salt !== null ? { cacheSalt: q.salt } : {}),
      ...(q.rank !== null ? { attentionDpRank: q.rank % numRanks, attentionDpRelax: !q.strict } : {}),
    })),
  };
}

/** A corruption of a batch: the batch the router gets, and (when it must succeed) the plain one the twin gets. */
interface Corrupted {
  readonly what: string;
  readonly bad: unknown;
  /** Null: must be refused. */
  readonly twin: RouteInput | null;
}

/** Corrupts a freshly built batch `b` (at least one request) by variant `c`. */
function corruptBatch(b: PlainBatch, c: number, at: number, v: number, numRanks: number): Corrupted {
  const i = at % b.requests.length;
  const q = b.requests[i]!;
  const withRequest = (r: unknown) => b.requests.map((x, j) => (j === i ? r : x));
  const set = (field: string, value: unknown, what = `requests[${i}].${field} = ${show(value)}`): Corrupted => ({ what, bad: { ...b, requests: withRequest({ ...q, [field]: value }) }, twin: null });
  const prompt = (Array.isArray(q.tokens) ? q.tokens : [1, 2, 3]) as number[];
  const zeros = (n: number) => new Array<number>(Math.max(0, n)).fill(0);
  const variants: (() => Corrupted)[] = [
    () => set("id", 1.5),
    () => set("id", 2 ** 53),
    () => set("id", "7"),
    () => set("id", undefined),
    () => set("id", 1n << 64n),
    () => set("id", -(1n << 64n)),
    () => set("id", Symbol("id")),
    () => set("id", NaN),
    () => {
      // A duplicate id: another request's, or the same id as a bigint.
      const other = b.requests[(i + 1) % b.requests.length]!;
      if (other === q) {
        const dup = { ...q, id: typeof q.id === "bigint" ? Number(q.id) : BigInt(q.id as number) };
        return { what: `duplicate id ${show(q.id)} (number and bigint)`, bad: { ...b, requests: [...b.requests, dup] }, twin: null };
      }
      return set("id", other.id, `requests[${i}].id duplicates ${show(other.id)}`);
    },
    () => {
      const h = hostileTokens(v, prompt, v >> 3, v >> 5);
      const twin = h.plain === null ? null : { ...b, requests: withRequest({ ...q, tokens: [...h.plain] }) };
      return { what: `requests[${i}].tokens: ${h.name}`, bad: { ...b, requests: withRequest({ ...q, tokens: h.make() }) }, twin: twin as RouteInput | null };
    },
    () => set("prefixMatches", zeros(numRanks + 1)),
    () => set("prefixMatches", zeros(numRanks - 1)),
    () => set("prefixMatches", [NaN, ...zeros(numRanks - 1)]),
    () => set("prefixMatches", [1n, ...zeros(numRanks - 1)]),
    () => set("prefixMatches", [-1, ...zeros(numRanks - 1)]),
    () => set("prefixMatches", BigUint64Array.from({ length: numRanks }, () => 0n)),
    () => {
      const plain = zeros(numRanks).map((_, r) => r);
      return { what: `requests[${i}].prefixMatches: flipping proxy`, bad: { ...b, requests: withRequest({ ...q, prefixMatches: flippingProxy(plain, NaN) }) }, twin: { ...b, requests: withRequest({ ...q, prefixMatches: plain }) } as RouteInput };
    },
    () => set("numTokens", -1),
    () => set("numTokens", NaN),
    () => set("numTokens", 1.5),
    () => set("numTokens", 2 ** 31),
    () => set("attentionDpRank", numRanks),
    () => set("attentionDpRank", -1),
    () => set("conversationId", ""),
    () => set("conversationId", 7),
    () => set("conversationId", "c".repeat(5000)),
    () => set("subagentAffinityId", 5),
    () => set("blockKeys", [-1]),
    () => set("blockKeys", [1.5]),
    () => set("blockKeys", { length: 1e9 }),
    () => set("cacheSalt", 5),
    () => set("loraTaskId", 1.5),
    () => set("loraTaskId", 1n),
    () => set("attentionDpRelax", "no"),
    () => ({ what: "schedulingParams false with attentionDpRank", bad: { ...b, requests: withRequest({ ...q, schedulingParams: false, attentionDpRank: 0 }) }, twin: null }),
    () => ({ what: "a request that is null", bad: { ...b, requests: withRequest(null) }, twin: null }),
    () => ({ what: "a request with neither tokens nor numTokens", bad: { ...b, requests: withRequest({ id: q.id }) }, twin: null }),
    () => ({ what: "one rank state too many", bad: { ...b, rankStates: [...b.rankStates, { numActiveRequests: 0, numActiveTokens: 0 }] }, twin: null }),
    () => ({ what: "a negative load", bad: { ...b, rankStates: b.rankStates.map((s, r) => (r === at % numRanks ? { ...s, numActiveTokens: -5 } : s)) }, twin: null }),
    () => ({ what: "a rank state out of place", bad: { ...b, rankStates: b.rankStates.map((s, r) => ({ ...s, rank: r === at % numRanks ? r + 1 : r })) }, twin: null }),
    () => ({ what: "maxNumActiveRequests -1", bad: { ...b, maxNumActiveRequests: -1 }, twin: null }),
    () => ({ what: "maxNumActiveRequests Infinity", bad: { ...b, maxNumActiveRequests: Infinity }, twin: null }),
    () => ({ what: "maxNumActiveRequests 1n", bad: { ...b, maxNumActiveRequests: 1n }, twin: null }),
    () => ({ what: "requests not an array", bad: { ...b, requests: { length: 1, 0: q } }, twin: null }),
    () => ({ what: "route(null)", bad: null, twin: null }),
  ];
  return variants[c % variants.length]!();
}


type RouterOp = { bad: false; batch: BatchDesc } | { bad: true; batch: BatchDesc; c: number; at: number; v: number };

const routerOpArb: fc.Arbitrary<RouterOp> = fc.oneof(
  { weight: 2, arbitrary: fc.record({ bad: fc.constant(false as const), batch: batchDescArb }) },
  { weight: 3, arbitrary: fc.record({ bad: fc.constant(true as const), batch: batchDescArb, c: fc.nat(), at: fc.nat(), v: fc.nat() }) },
);

describe("fuzz: a router fed hostile batches decides as a twin fed only the accepted ones", () => {
  it.each(ROUTER_CONFIGS.map((c) => [c.name, c] as const))("%s router (fixed seed)", (_name, config) => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.array(routerOpArb, { minLength: 4, maxLength: 16 }), (numRanks, ops) => {
        const make = (): Router => createRouter({ numRanks, attentionDp: config.attentionDp, ...(config.prefixIndex ? { prefixIndex: config.prefixIndex } : {}) });
        const router = make();
        const twin = make();
        let nextId = 1;
        for (const [s, op] of ops.entries()) {
          const firstId = nextId;
          nextId += op.batch.requests.length + 2;
          const plain = () => buildBatch(op.batch, numRanks, firstId);
          let sent: unknown;
          let twinInput: RouteInput | null;
          let what: string;
          if (!op.bad) {
            sent = plain();
            twinInput = plain();
            what = `batch ${s} (valid)`;
          } else {
            const b = plain();
            if (b.requests.length === 0) b.requests.push({ id: firstId, tokens: [1, 2, 3] });
            const corrupted = corruptBatch(b, op.c, op.at, op.v, numRanks);
            sent = corrupted.bad;
            twinInput = corrupted.twin;
            what = `batch ${s}: ${corrupted.what}`;
          }
          const got = attempt(what, () => router.route(sent as RouteInput));
          if (twinInput === null) {
            if (got.ok) fail(`${what}: accepted an invalid batch`);
            continue;
          }
          if (!got.ok) fail(`${what}: refused a valid batch: ${got.error.message}`);
          const mirrored = twin.route(twinInput);
          expect(got.value, what).toEqual(mirrored);
          checkResult(got.value, twinInput, numRanks, what);
        }
        const bytes = router.snapshot();
        expect(sameBytes(bytes, twin.snapshot()), "the router's and its twin's snapshots differ").toBe(true);
        // The restored router continues as the original.
        const restored = restoreRouter(bytes);
        const next = (): RouteInput =>
          buildBatch({ loads: [[0, 0], [1, 10], [0, 5], [2, 0]], cap: 8, requests: [0, 1, 2].map((c) => ({ prompt: [c, 1, 2, 0, 1], mode: 0, conv: c, matches: null, keys: null, lora: null, salt: null, rank: null, strict: false })) }, numRanks, nextId);
        expect(restored.route(next())).toEqual(router.route(next()));
      }),
      { seed: 0xb47c4ed, numRuns: scaled(50) },
    );
  });
});

