// Damaged snapshots for the fuzz properties: base snapshots of every router
// kind and index shape, random byte damage, structure-aware edits of the
// decoded state and of the node records (re-sealed, with a valid checksum),
// and the check that a restored object keeps its promises.
import fc from "fast-check";
import { expect } from "vitest";
import {
  createPrefixIndex,
  createRouter,
  restorePrefixIndex,
  restoreRouter,
  type PrefixIndex,
  type RouteInput,
  type Router,
} from "../../src/index.js";
import { crc32c, decodeSnapshot, encodeSnapshot, SNAPSHOT_KINDS } from "../../src/snapshot-format.js";
import { attempt, checkIndexBounds, checkResult, describeError, fail, sameBytes, show } from "./fuzz.js";

// ---------------------------------------------------------------------------
// c. Damaged snapshots

export const idleStates = (n: number) => Array.from({ length: n }, () => ({ numActiveRequests: 0, numActiveTokens: 0 }));

/** Routes a few batches of overlapping prompts and conversations into `router`. */
export function warmRouter(router: Router, batches: number): Router {
  let id = 1;
  for (let b = 0; b < batches; b++) {
    router.route({
      rankStates: idleStates(router.numRanks),
      maxNumActiveRequests: 16,
      requests: Array.from({ length: 5 }, (_, i) => ({ id: id++, tokens: Array.from({ length: 6 + ((b + i) % 7) }, (_, j) => (i + j * b) % 4), conversationId: `conv-${(b * 5 + i) % 6}` })),
    });
  }
  return router;
}

export interface BaseSnapshot {
  readonly name: string;
  readonly kind: "router" | "index";
  readonly bytes: Uint8Array;
}

let bases: BaseSnapshot[] | undefined;

/** The snapshots every mutation starts from: routers with and without a learned index, standalone indexes. */
export function baseSnapshots(): BaseSnapshot[] {
  if (bases) return bases;
  const router = (name: string, options: Parameters<typeof createRouter>[0], batches = 4): BaseSnapshot => ({ name, kind: "router", bytes: warmRouter(createRouter(options), batches).snapshot() });
  const warmup = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true, kv_cache_routing_cold_start_warmup: true }, prefixIndex: { tokensPerBlock: 2, maxMemoryBytes: 16384, capacityBlocksPerRank: 10 } });
  warmup.route({ rankStates: idleStates(4), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: [1, 2, 3, 4] }] });
  const kvIndex = createPrefixIndex({ numRanks: 3, tokensPerBlock: 2 });
  kvIndex.insert(0, [0, 1, 2, 3, 4, 5]);
  kvIndex.applyKvEvents([
    { event_id: 3, attention_dp_rank: 1, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 11, tokens: [{ token_id: 0 }, { token_id: 1 }] }, { block_hash: 12, tokens: [{ token_id: 2 }, { token_id: 3 }] }] } },
    { event_id: 4, attention_dp_rank: 1, data: { type: "stored", parent_hash: 12, blocks: [{ block_hash: "340282366920938463463374607431768211455", tokens: [{ token_id: 9 }, { token_id: 9 }] }] } },
    { event_id: 5, attention_dp_rank: 2, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 21 }, { block_hash: 22 }] } },
    { data_parallel_rank: 0, events: [{ type: "BlockStored", block_hashes: [31], parent_block_hash: null, token_ids: [0, 1], block_size: 2 }] },
    "garbage",
  ]);
  const budgeted = createPrefixIndex({ numRanks: 2, tokensPerBlock: 1, maxMemoryBytes: 8192, capacityBlocksPerRank: 40 });
  for (let i = 0; i < 60; i++) budgeted.insert(i % 2, Array.from({ length: 12 }, (_, j) => (i * 3 + j) % 5));
  const namespaced = createPrefixIndex({ numRanks: 4, tokensPerBlock: 4 });
  for (let i = 0; i < 8; i++) namespaced.insert(i % 4, Array.from({ length: 16 }, (_, j) => (i + j) % 3), i % 2 ? { loraTaskId: i } : { cacheSalt: `s${i}` });
  namespaced.insertBlocks(1, [1, 2, 3n, 2n ** 64n - 1n]);
  bases = [
    router("default", { numRanks: 4, attentionDp: {} }),
    router("default + index", { numRanks: 3, attentionDp: {}, prefixIndex: { tokensPerBlock: 2 } }),
    router("kv + index", { numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true }, prefixIndex: { tokensPerBlock: 2, capacityBlocksPerRank: 12 } }),
    router("kv, no index", { numRanks: 2, attentionDp: { enable_kv_cache_aware_routing: true } }),
    { name: "kv warm-up + budgeted index", kind: "router", bytes: warmup.snapshot() },
    router("conversation", { numRanks: 4, attentionDp: { kv_cache_routing_conversation_affinity: true, kv_cache_routing_max_sessions: 4 } }),
    router("conversation + index", { numRanks: 3, attentionDp: { kv_cache_routing_conversation_affinity: true, kv_cache_routing_max_sessions: 6 }, prefixIndex: { tokensPerBlock: 2 } }, 3),
    { name: "index with KV-event maps", kind: "index", bytes: kvIndex.snapshot() },
    { name: "index at its budget", kind: "index", bytes: budgeted.snapshot() },
    { name: "index with namespaces", kind: "index", bytes: namespaced.snapshot() },
  ];
  return bases;
}

export interface IndexFacts {
  maxMemoryBytes?: number;
  capacityBlocksPerRank?: number;
  /** Engine hashes the snapshot maps (to aim events at). */
  hashes: unknown[];
}

/** The budget, capacity and engine hashes of the index in (restorable) `bytes` of `kind`, or null without one. */
export function indexFacts(bytes: Uint8Array, kind: "router" | "index"): IndexFacts | null {
  let decoded = decodeSnapshot(bytes, kind === "router" ? SNAPSHOT_KINDS.router : SNAPSHOT_KINDS.prefixIndex);
  if (kind === "router") {
    if (decoded.sections.length === 0) return null;
    decoded = decodeSnapshot(decoded.sections[0]!, SNAPSHOT_KINDS.prefixIndex);
  }
  const options = decoded.state.options as { maxMemoryBytes?: number; capacityBlocksPerRank?: number };
  const engine = decoded.state.engineBlocks as [unknown, unknown][][];
  return {
    ...(options.maxMemoryBytes !== undefined ? { maxMemoryBytes: options.maxMemoryBytes } : {}),
    ...(options.capacityBlocksPerRank !== undefined ? { capacityBlocksPerRank: options.capacityBlocksPerRank } : {}),
    hashes: engine.flatMap((m) => m.map(([h]) => h)).slice(0, 8),
  };
}

/** The prompts the base snapshots learned (warmRouter's and the budgeted index's), to re-learn on other ranks. */
export const LEARNED_PROMPTS: number[][] = [
  ...Array.from({ length: 20 }, (_, k) => Array.from({ length: 6 + ((Math.floor(k / 5) + (k % 5)) % 7) }, (_, j) => ((k % 5) + j * Math.floor(k / 5)) % 4)),
  ...Array.from({ length: 10 }, (_, i) => Array.from({ length: 12 }, (_, j) => (i * 3 + j) % 5)),
];

export const EXERCISE_PROMPTS = [[0, 1, 2, 3, 0, 1], [1, 2, 3, 4], [0, 1, 2, 3, 9, 9], [0, 0, 0, 0, 0, 0, 0, 0], [2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3, 2, 1, 0, 3]];

/** Uses a restored index: it must answer, learn, take events and keep its bounds. */
export function exerciseIndex(ix: PrefixIndex, facts: IndexFacts, where: string): void {
  const n = ix.numRanks;
  const tpb = ix.tokensPerBlock;
  for (const p of EXERCISE_PROMPTS) {
    const m = ix.match(p);
    if (m.length !== n || m.some((x) => x % tpb !== 0 || x > p.length)) fail(`${where}: match(${show(p)}) gave ${show(m)}`);
  }
  checkIndexBounds(ix, facts, `${where} (as restored)`);
  for (const [i, p] of EXERCISE_PROMPTS.entries()) ix.insert(i % n, p, i % 2 ? { loraTaskId: 3 } : null);
  // What one rank learned, every rank learns.
  for (let r = 0; r < n; r++) for (const p of LEARNED_PROMPTS) ix.insert(r, p);
  checkIndexBounds(ix, facts, `${where} (after learning)`);
  ix.insertBlocks(0, [1, 2, 3, 2n ** 64n - 1n]);
  ix.matchBlocks([1, 2, 3]);
  const result = ix.applyKvEvents([
    ...facts.hashes.map((h) => ({ attention_dp_rank: n - 1, data: { type: "stored", parent_hash: h, blocks: [{ block_hash: 777, tokens: Array.from({ length: tpb }, () => ({ token_id: 5 })) }] } })),
    ...facts.hashes.map((h, i) => ({ attention_dp_rank: i % n, data: { type: "removed", block_hashes: [h] } })),
    { attention_dp_rank: 0, data: { type: "stored", parent_hash: null, blocks: [{ block_hash: 778 }, { block_hash: 779 }] } },
  ]);
  if (result.malformed > 0) fail(`${where}: well-formed events counted as malformed: ${show(result.problems)}`);
  checkIndexBounds(ix, facts, `${where} (after use)`);
  // A prompt just inserted into a rank with room for it matches in full there.
  if (facts.capacityBlocksPerRank === undefined && facts.maxMemoryBytes === undefined) {
    const p = EXERCISE_PROMPTS[4]!;
    ix.insert(0, p);
    const m = ix.match(p);
    if (m[0] !== p.length - (p.length % tpb)) fail(`${where}: a prompt just inserted into rank 0 matched ${m[0]} of ${p.length} tokens`);
  }
  ix.clearRank(0);
  if (ix.match(EXERCISE_PROMPTS[0]!)[0] !== 0) fail(`${where}: rank 0 still matches after clearRank(0)`);
  // It snapshots, and its snapshot restores into an index that answers alike.
  const again = restorePrefixIndex(ix.snapshot());
  for (const p of EXERCISE_PROMPTS) expect(again.match(p), `${where}: re-restored index`).toEqual(ix.match(p));
}

/** Uses a restored router: it must route valid batches within its ranks, snapshot and restore. */
export function exerciseRouter(router: Router, facts: IndexFacts | null, where: string): void {
  const n = router.numRanks;
  const batch = (b: number): RouteInput => ({
    rankStates: Array.from({ length: n }, (_, r) => ({ numActiveRequests: (r + b) % 3, numActiveTokens: 10 * r })),
    maxNumActiveRequests: 8,
    requests: EXERCISE_PROMPTS.map((p, i) => ({ id: b * 100 + i, tokens: p, conversationId: `conv-${(b + i) % 7}` })),
  });
  for (let b = 0; b < 3; b++) {
    const input = batch(b);
    checkResult(router.route(input), input, n, `${where}: batch ${b}`);
  }
  // What one rank learned, every rank learns: each learned prompt pinned to each rank in turn.
  for (let s = 0; s < Math.min(n, 4); s++) {
    const input: RouteInput = { rankStates: idleStates(n), maxNumActiveRequests: 64, requests: LEARNED_PROMPTS.map((p, k) => ({ id: 1000 + k, tokens: p, attentionDpRank: (k + s) % n, attentionDpRelax: false })) };
    checkResult(router.route(input), input, n, `${where}: pinned batch ${s}`);
  }
  if (router.prefixIndex && facts) checkIndexBounds(router.prefixIndex, facts, `${where}: its index`);
  const again = restoreRouter(router.snapshot());
  expect(again.route(batch(3)), `${where}: re-restored router`).toEqual(router.route(batch(3)));
}

/** Restores `bytes` of `kind`: refused with AdpInputError naming `snapshot`, or restored and then well-behaved. Returns which. */
export function restoreAndUse(bytes: Uint8Array, kind: "router" | "index", where: string): "refused" | "behaved" {
  const restored = attempt(`${where}: restore`, () => (kind === "router" ? restoreRouter(bytes) : restorePrefixIndex(bytes)));
  if (!restored.ok) {
    if (restored.error.field !== "snapshot") fail(`${where}: refused with field ${show(restored.error.field)}, not "snapshot": ${restored.error.message}`);
    return "refused";
  }
  const facts = indexFacts(bytes, kind);
  try {
    if (kind === "router") exerciseRouter(restored.value as Router, facts, where);
    else exerciseIndex(restored.value as PrefixIndex, facts!, where);
  } catch (error) {
    throw new Error(`${where}: restored, then misbehaved: ${describeError(error)}`, { cause: error });
  }
  return "behaved";
}

// Random byte damage.

export type Damage = { t: "flip" | "overwrite" | "truncate" | "append" | "insert" | "delete"; pos: number; val: number };

export const damageArb: fc.Arbitrary<Damage> = fc.record({
  t: fc.constantFrom<Damage["t"]>("flip", "flip", "overwrite", "overwrite", "truncate", "append", "insert", "delete"),
  pos: fc.oneof(fc.nat(23), fc.nat()),
  val: fc.nat(),
});

/** Applies byte damage to a copy of `bytes`. */
export function damage(bytes: Uint8Array, ops: Damage[]): Uint8Array {
  let b = Uint8Array.from(bytes);
  for (const d of ops) {
    const pos = b.length === 0 ? 0 : d.pos % b.length;
    switch (d.t) {
      case "flip":
        if (b.length > 0) b[pos]! ^= 1 << (d.val % 8);
        break;
      case "overwrite":
        if (b.length > 0) b[pos] = d.val % 256;
        break;
      case "truncate":
        b = b.slice(0, pos);
        break;
      case "append":
        b = Uint8Array.from([...b, ...Array.from({ length: 1 + (d.val % 9) }, (_, i) => (d.val >> i) & 0xff)]);
        break;
      case "insert":
        b = Uint8Array.from([...b.subarray(0, pos), d.val % 256, ...b.subarray(pos)]);
        break;
      case "delete":
        b = Uint8Array.from([...b.subarray(0, pos), ...b.subarray(pos + 1)]);
        break;
    }
  }
  return b;
}

/** CRC-32C, bitwise (independent of the library's sliced table). */
export function crcOf(bytes: Uint8Array): number {
  let c = ~0;
  for (const x of bytes) {
    c ^= x;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return ~c >>> 0;
}

/** Re-seals damaged bytes: payload length and CRC recomputed, so the damage gets past the container to the decoders. */
export function reseal(bytes: Uint8Array): Uint8Array {
  if (bytes.length < 20) return bytes;
  const out = Uint8Array.from(bytes);
  const view = new DataView(out.buffer);
  view.setUint32(12, out.length - 20, true);
  view.setUint32(16, crcOf(out.subarray(20)), true);
  return out;
}

// Structure-aware damage: JSON state edits and node-record edits, re-encoded with a valid checksum.

/** JSON values that could mean something anywhere in a state. */
export const JSON_POOL: readonly unknown[] = [
  0, -1, 1, 2, 3, 4, 9, 0.5, -0.5, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53, -(2 ** 53), 1e308, -1e308,
  "", "x", "0", "12", null, true, false, [], {}, [0], [1, 0], [[0, 0]], [["a", 9]], [[1, [0, 0]]], { a: 1 }, "ADPSNAP2",
];

export type JsonEdit = { t: number; path: number; val: number; json: unknown };

export const jsonEditArb: fc.Arbitrary<JsonEdit> = fc.record({
  t: fc.nat(20),
  path: fc.nat(),
  val: fc.nat(),
  json: fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...JSON_POOL) }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) }),
});

export type Path = (string | number)[];

/** Every path in a JSON value (object keys and array indices), up to a bound. */
export function pathsOf(v: unknown, prefix: Path = [], out: Path[] = []): Path[] {
  if (out.length > 200) return out;
  if (Array.isArray(v)) {
    v.forEach((x, i) => {
      out.push([...prefix, i]);
      pathsOf(x, [...prefix, i], out);
    });
  } else if (typeof v === "object" && v !== null) {
    for (const [k, x] of Object.entries(v)) {
      out.push([...prefix, k]);
      pathsOf(x, [...prefix, k], out);
    }
  }
  return out;
}

/** The container holding `path`'s last step. */
export function containerOf(root: unknown, path: Path): Record<string | number, unknown> {
  let at = root as Record<string | number, unknown>;
  for (const k of path.slice(0, -1)) at = at[k] as Record<string | number, unknown>;
  return at;
}

/** Applies one edit to a (cloned) state object in place; `isIndex` picks the index-specific targeted edits. */
export function editState(state: Record<string, unknown>, e: JsonEdit, isIndex: boolean): void {
  const paths = pathsOf(state);
  if (paths.length === 0) return;
  const path = paths[e.path % paths.length]!;
  const container = containerOf(state, path);
  const last = path[path.length - 1]!;
  const claimed: unknown = isIndex ? (state.options as { numRanks?: unknown } | null | undefined)?.numRanks : state.numRanks;
  const numRanks = typeof claimed === "number" && Number.isInteger(claimed) && claimed >= 1 && claimed <= 65536 ? claimed : 1;
  const pick = <T>(xs: readonly T[]): T => xs[e.val % xs.length]!;
  const json = structuredClone(e.json); // never alias the generated value (edits would make it cyclic)
  switch (e.t) {
    case 0: case 1: case 2: case 3: case 4: case 5: // any field replaced by any JSON value
      container[last] = json;
      return;
    case 6: // a key or an element deleted
      if (Array.isArray(container)) container.splice(last as number, 1);
      else delete container[last];
      return;
    case 7: // an element duplicated, or a key added
      if (Array.isArray(container)) container.splice(last as number, 0, structuredClone(container[last as number]));
      else container[`extra${e.val % 3}`] = json;
      return;
    case 8: { // a number nudged or scaled
      const x = container[last];
      container[last] = typeof x === "number" ? pick([x + 1, x - 1, x * 2, -x, x + 0.5, x * 2 ** 20, 0]) : json;
      return;
    }
  }
  if (!isIndex) {
    switch (e.t) {
      case 9: state.conversations = [...(Array.isArray(state.conversations) ? state.conversations : []), [`pinned-${e.val % 5}`, pick([9, numRanks, -1, 1.5, numRanks - 1])]]; return;
      case 10: state.pendingWarmup = pick([[numRanks], [1, 0], [0, 0], [-1], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [0.5], ["0"], [0, 1]]); return;
      case 11: state.cursor = pick([numRanks, -1, 1.5, numRanks - 1, 2 ** 32, 1]); return;
      case 12: state.numRanks = pick([numRanks + 1, numRanks - 1, 0, 65537, 1, 9]); return;
      case 13: {
        const dp = (typeof state.attentionDp === "object" && state.attentionDp !== null ? state.attentionDp : {}) as Record<string, unknown>;
        const keys = ["enable_kv_cache_aware_routing", "kv_cache_routing_conversation_affinity", "kv_cache_routing_cold_start_warmup", "kv_cache_routing_max_sessions", "enable_balance", "kv_cache_routing_new_conv_placement", "kv_cache_routing_fair_share_multiplier", "unknown_key"];
        dp[pick(keys)] = pick([true, false, 0, 1, -1, 2, 1e9, "least_tokens", "nope", null, 0.5]);
        state.attentionDp = dp;
        return;
      }
      case 14: {
        const conv = state.conversations;
        if (Array.isArray(conv) && conv.length > 0) conv.push(structuredClone(conv[e.val % conv.length]));
        else state.conversations = [["k".repeat(5000), 0]];
        return;
      }
      case 15: state.learnFromRouting = pick([0, "true", null, false]); return;
      default: container[last] = json; return;
    }
  }
  const options = (typeof state.options === "object" && state.options !== null ? state.options : (state.options = {})) as Record<string, unknown>;
  const num = (k: string) => (typeof state[k] === "number" ? (state[k] as number) : 0);
  switch (e.t) {
    case 9: options.tokensPerBlock = pick([1, 2, 3, 4, 8, 0, 2 ** 20 + 1, 32]); return;
    case 10: options.maxMemoryBytes = pick([1, 1000, 2048, 4096, 6000, 8192, 9000, 12000, 16384, 2 ** 31, 2 ** 31 + 1]); return;
    case 11: options.capacityBlocksPerRank = pick([1, 2, 3, 5, 0, 2 ** 32]); return;
    case 12: options.numRanks = pick([numRanks + 1, numRanks - 1, 0, 65536, 1]); return;
    case 13: state.nodes = pick([0, 1, num("nodes") + 1, num("nodes") - 1]); return;
    case 14: state.stamp = pick([0, 1, 2, num("stamp") - 1, num("stamp") + 1, 2 ** 32 - 1, 2 ** 32 - 2, 2 ** 32]); return;
    case 15: {
      const maps = state.engineBlocks;
      const r = e.val % Math.max(1, numRanks);
      const bad = pick<unknown>([[7, [0]], [7, [0, 0, 0]], ["007", [1, 2]], [1.5, [1, 2]], [7, [-1, 0]], [7, [2 ** 32, 0]], [7, "x"], [2 ** 60, [1, 2]], ["18446744073709551616", [1, 2]], [7, [1, 2]], [7, [0, 0]]]);
      if (Array.isArray(maps) && Array.isArray(maps[r])) {
        const m = maps[r] as unknown[];
        if (m.length > 0 && e.val % 4 === 0) m.push(structuredClone(m[0])); // a duplicate hash
        else m.push(bad);
      } else {
        state.engineBlocks = pick([[], null, [[bad]], new Array(numRanks + 1).fill([])]);
      }
      return;
    }
    case 16: state.lastEventId = pick([[1.5], ["x"], new Array(numRanks + 1).fill(null), new Array(numRanks).fill(2 ** 60), new Array(numRanks).fill(-5), null]); return;
    case 17: {
      const counts = (typeof state.eventCounts === "object" && state.eventCounts !== null ? state.eventCounts : {}) as Record<string, unknown>;
      counts[pick(["applied", "malformed", "ignored", "extra"])] = pick([-1, 1.5, 2 ** 53, "1", null]);
      state.eventCounts = counts;
      return;
    }
    case 18: state.pathKeys = pick([1, 3, "2", null]); return;
    case 19: state.evictions = pick([-1, 2 ** 53, 1.5, 2 ** 53 - 1]); return;
    default: state.stampResets = pick([-1, 2 ** 32, 1.5, 1]); return;
  }
}

export type RecordEdit = { t: number; rec: number; field: number; val: number; n: number };

export const recordEditArb: fc.Arbitrary<RecordEdit> = fc.record({ t: fc.nat(10), rec: fc.nat(), field: fc.nat(), val: fc.nat(), n: fc.nat() });

/** Offsets of the node records in a records section (walked while counts are plausible). */
export function recordOffsets(b: Uint8Array, numRanks: number): number[] {
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: number[] = [];
  let at = 0;
  while (at + 24 <= b.length) {
    const n = view.getUint32(at + 20, true);
    if (n === 0 || n > Math.max(numRanks, 1) || at + 24 + 8 * n > b.length) break;
    out.push(at);
    at += 24 + 8 * n;
  }
  return out;
}

/** Applies one edit to a records section (24-byte header keyLo, keyHi, parentLo, parentHi, hasParent, count; then count × rank, stamp). */
export function editRecords(b: Uint8Array, e: RecordEdit, numRanks: number, stamp: number): Uint8Array {
  const offsets = recordOffsets(b, numRanks);
  if (offsets.length === 0) return e.t % 2 ? Uint8Array.from([...b, ...new Uint8Array(24)]) : b;
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const at = offsets[e.rec % offsets.length]!;
  const count = view.getUint32(at + 20, true);
  const end = at + 24 + 8 * count;
  const record = b.slice(at, end);
  const other = offsets[e.n % offsets.length]!;
  const values = [0, 1, 2, 3, numRanks, numRanks - 1, 9, 0xffff, 0x10000, 0xffffffff, 0x80000000, stamp, stamp + 1, stamp - 1, e.n >>> 0, view.getUint32(other, true), view.getUint32(other + 4, true)];
  const without = (from: number, to: number) => Uint8Array.from([...b.subarray(0, from), ...b.subarray(to)]);
  switch (e.t) {
    case 0: case 1: case 2: { // one u32 of the record overwritten: key, parent, flag, count, a rank or a stamp
      const out = Uint8Array.from(b);
      new DataView(out.buffer).setUint32(at + 4 * (e.field % (6 + 2 * count)), values[e.val % values.length]! >>> 0, true);
      return out;
    }
    case 3: // the record duplicated right after itself, or at the end
      return e.val % 2 ? Uint8Array.from([...b.subarray(0, end), ...record, ...b.subarray(end)]) : Uint8Array.from([...b, ...record]);
    case 4: // deleted
      return without(at, end);
    case 5: // moved to the front
      return Uint8Array.from([...record, ...without(at, end)]);
    case 6: // the section cut short
      return b.slice(0, e.n % (b.length + 1));
    case 7: { // one more residency: a rank it already has, or another
      const out = Uint8Array.from([...b.subarray(0, end), ...new Uint8Array(8), ...b.subarray(end)]);
      const v = new DataView(out.buffer);
      v.setUint32(at + 20, count + 1, true);
      v.setUint32(end, e.val % 2 ? v.getUint32(at + 24, true) : e.val % (numRanks + 1), true);
      v.setUint32(end + 4, values[e.n % values.length]! >>> 0, true);
      return out;
    }
    case 8: { // re-parented onto another record
      const out = Uint8Array.from(b);
      const v = new DataView(out.buffer);
      v.setUint32(at + 8, view.getUint32(other, true), true);
      v.setUint32(at + 12, view.getUint32(other + 4, true), true);
      v.setUint32(at + 16, 1, true);
      return out;
    }
    case 10: { // graft: a root moved under an earlier root every rank of it holds (well-formed; its key no longer chains)
      const info = offsets.map((o) => ({ o, root: view.getUint32(o + 16, true) === 0, ranks: Array.from({ length: view.getUint32(o + 20, true) }, (_, k) => view.getUint32(o + 24 + 8 * k, true)) }));
      const pairs: [number, number][] = [];
      info.forEach((c, ci) => {
        if (c.root) info.slice(0, ci).forEach((p, pi) => p.root && c.ranks.every((r) => p.ranks.includes(r)) && pairs.push([ci, pi]));
      });
      if (pairs.length === 0) return b;
      const [ci, pi] = pairs[e.val % pairs.length]!;
      const out = Uint8Array.from(b);
      const v = new DataView(out.buffer);
      v.setUint32(offsets[ci]! + 8, view.getUint32(offsets[pi]!, true), true);
      v.setUint32(offsets[ci]! + 12, view.getUint32(offsets[pi]! + 4, true), true);
      v.setUint32(offsets[ci]! + 16, 1, true);
      return out;
    }
    default: { // swapped with another record
      if (other === at) return b;
      const [x, y] = at < other ? [at, other] : [other, at];
      const xEnd = x + 24 + 8 * view.getUint32(x + 20, true);
      const yEnd = y + 24 + 8 * view.getUint32(y + 20, true);
      return Uint8Array.from([...b.subarray(0, x), ...b.subarray(y, yEnd), ...b.subarray(xEnd, y), ...b.subarray(x, xEnd), ...b.subarray(yEnd)]);
    }
  }
}

export interface StructuredDamage {
  /** For a router with an index: edit the index inside (true) or the router's own state (false). */
  inner: boolean;
  jsonEdits: JsonEdit[];
  recordEdits: RecordEdit[];
  /** Set `nodes` to the edited section's record count, so the records are checked past the count. */
  fixNodes: boolean;
  /** Recompute the records' seal, as a crafter would, so edited records reach the core's checks. */
  reseal: boolean;
  /** For a router: add a second section. */
  extraSection: boolean;
}

export const structuredArb: fc.Arbitrary<StructuredDamage> = fc.record({
  inner: fc.boolean(),
  jsonEdits: fc.array(jsonEditArb, { maxLength: 3 }),
  recordEdits: fc.array(recordEditArb, { maxLength: 3 }),
  fixNodes: fc.boolean(),
  reseal: fc.oneof({ weight: 5, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
  extraSection: fc.oneof({ weight: 1, arbitrary: fc.constant(true) }, { weight: 15, arbitrary: fc.constant(false) }),
});

/** A prefix-index snapshot's seal over its records: CRC-32C of u32 tokensPerBlock, then the records. */
export function recordsSeal(tokensPerBlock: number, records: Uint8Array): number {
  const bytes = new Uint8Array(4 + records.length);
  new DataView(bytes.buffer).setUint32(0, tokensPerBlock >>> 0, true);
  bytes.set(records, 4);
  return crc32c(bytes);
}

/** Edits a decoded prefix-index snapshot and re-encodes it with a valid checksum. */
export function damageIndexSnapshot(bytes: Uint8Array, d: StructuredDamage): Uint8Array {
  const { state, sections } = decodeSnapshot(bytes, SNAPSHOT_KINDS.prefixIndex);
  const s = structuredClone(state);
  const numRanks = (state.options as { numRanks: number }).numRanks;
  let records = sections[0]!;
  for (const e of d.recordEdits) records = editRecords(records, e, numRanks, state.stamp as number);
  if (d.fixNodes) s.nodes = recordOffsets(records, numRanks).length;
  for (const e of d.jsonEdits) editState(s, e, true);
  const tpb = (s.options as { tokensPerBlock?: unknown } | null)?.tokensPerBlock;
  if (d.reseal && "seal" in state) s.seal = recordsSeal(typeof tpb === "number" ? tpb : 32, records);
  return encodeSnapshot(SNAPSHOT_KINDS.prefixIndex, s, [records, ...sections.slice(1)]);
}

/** Structure-aware damage to a snapshot of `kind`. */
export function damageStructured(bytes: Uint8Array, kind: "router" | "index", d: StructuredDamage): Uint8Array {
  if (kind === "index") return damageIndexSnapshot(bytes, d);
  const { state, sections } = decodeSnapshot(bytes, SNAPSHOT_KINDS.router);
  const extra = d.extraSection ? [sections[0] ?? new Uint8Array(4)] : [];
  if (d.inner && sections.length === 1) return encodeSnapshot(SNAPSHOT_KINDS.router, state, [damageIndexSnapshot(sections[0]!, d), ...extra]);
  const s = structuredClone(state);
  for (const e of d.jsonEdits) editState(s, e, false);
  return encodeSnapshot(SNAPSHOT_KINDS.router, s, [...sections, ...extra]);
}
