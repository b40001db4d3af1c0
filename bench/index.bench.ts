// Prefix index: wasm core against the plain-TypeScript baseline, in one run.
// For 8, 72 and 1,024 ranks it builds both indexes over the same prompts until
// they hold at least 1,000,000 distinct blocks (32 tokens each), then times:
//   insert   prompts per second while building (and blocks per second)
//   match    one walk for all ranks, 2,000- and 8,000-token prompts, median µs
//   insert_under_budget  a 512-token insert into an index full at an 8 MiB budget
//   stored_events  one rank of a 16 MiB index fed 1,000,000 single-block BlockStored events
//                  (each a new block, so it evicts and its engine map sweeps): µs per event, the
//                  slowest event (a stall of the event loop that feeds it)
// and reports bytes per block and per (block, rank) residency for the wasm index
// (accounted and whole linear memory) and the baseline's heap growth.
// Prints one JSON line per figure. Run: npm run bench:index [-- RANKS...] (node --expose-gc).
import { mulberry32 } from "../src/simulate/workload.js";
import { createPrefixIndex } from "../src/index.js";
import { PlainPrefixIndex } from "../test/oracle/prefix-index.js";

const TPB = 32;
const TARGET_BLOCKS = 1_000_000;
const SYSTEM_PROMPTS = 16;
const SYSTEM_TOKENS = 512;


const gc = (globalThis as { gc?: () => void }).gc ?? (() => {});
const heapUsed = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
};
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const emit = (o: Record<string, unknown>) => console.log(JSON.stringify({ bench: "prefix_index", ...o }));

/** Prompts: one of 16 system prompts, then a conversation tail; some extend an earlier prompt. */
function makePrompts(rand: () => number, count: number, length: number): Uint32Array[] {
  const systems = Array.from({ length: SYSTEM_PROMPTS }, () => Uint32Array.from({ length: SYSTEM_TOKENS }, () => Math.floor(rand() * 50_000)));
  const prompts: Uint32Array[] = [];
  for (let i = 0; i < count; i++) {
    const p = new Uint32Array(length);
    const earlier = prompts.length > 0 && rand() < 0.3 ? prompts[Math.floor(rand() * prompts.length)]! : null;
    if (earlier) {
      const keep = Math.floor((0.3 + 0.6 * rand()) * length);
      p.set(earlier.subarray(0, keep));
      for (let t = keep; t < length; t++) p[t] = Math.floor(rand() * 50_000);
    } else {
      p.set(systems[Math.floor(rand() * SYSTEM_PROMPTS)]!);
      for (let t = SYSTEM_TOKENS; t < length; t++) p[t] = Math.floor(rand() * 50_000);
    }
    prompts.push(p);
  }
  return prompts;
}

/** Queries: a stored prompt's prefix of a random depth, then new tokens, to `length` tokens. */
function makeQueries(rand: () => number, stored: Uint32Array[], count: number, length: number): Uint32Array[] {
  return Array.from({ length: count }, () => {
    const q = new Uint32Array(length);
    const base = stored[Math.floor(rand() * stored.length)]!;
    const keep = Math.min(base.length, Math.floor(rand() * length));
    q.set(base.subarray(0, keep));
    for (let t = keep; t < length; t++) q[t] = Math.floor(rand() * 50_000);
    return q;
  });
}

/**
 * Median µs per match. Each query's tokens are read into the cache just before
 * it is timed, as a prompt the tokenizer has just produced would be: the index,
 * not the benchmark's 16 MB of stored queries, should pay the misses. The time
 * of an empty timed call is subtracted.
 */
function timeMatches(match: (q: Uint32Array) => unknown, queries: Uint32Array[], rounds: number): number {
  for (const q of queries) match(q); // warm-up (JIT tiers)
  let sink = 0;
  const touch = (q: Uint32Array) => {
    for (let i = 0; i < q.length; i += 16) sink ^= q[i]!;
  };
  const samples: number[] = [];
  const empty: number[] = [];
  for (let r = 0; r < rounds; r++) {
    for (const q of queries) {
      touch(q);
      const t0 = performance.now();
      match(q);
      const t1 = performance.now();
      const t2 = performance.now();
      samples.push(t1 - t0);
      empty.push(t2 - t1);
    }
  }
  if (sink === 0.5) console.log(sink); // keeps `touch` from being optimised away
  return (median(samples) - median(empty)) * 1000;
}

// `npm run bench:index -- 72` runs one rank count only.
const only = process.argv.slice(2).map(Number).filter((n) => n > 0);
emit({ figure: "stored_events", ...timeStoredEvents(1_000_000) });
for (const numRanks of only.length > 0 ? only : [8, 72, 1024]) {
  const rand = mulberry32(numRanks);
  const promptLength = 2000;
  // Unique blocks per prompt ≈ 62 - 16 shared system blocks - shared extension.
  const prompts = makePrompts(rand, Math.ceil(TARGET_BLOCKS / 38), promptLength);
  const ranksOf = prompts.map(() => {
    const n = 1 + Math.floor(rand() * 3);
    return Array.from({ length: n }, () => Math.floor(rand() * numRanks));
  });

  // wasm build
  const wasm = createPrefixIndex({ numRanks, tokensPerBlock: TPB });
  let t0 = performance.now();
  let inserts = 0;
  for (let i = 0; i < prompts.length; i++) for (const r of ranksOf[i]!) (wasm.insert(r, prompts[i]!), inserts++);
  const wasmInsertMs = performance.now() - t0;
  const stats = wasm.stats();

  // baseline build
  const before = heapUsed();
  const plain = new PlainPrefixIndex(numRanks, TPB);
  t0 = performance.now();
  for (let i = 0; i < prompts.length; i++) for (const r of ranksOf[i]!) plain.insert(r, prompts[i]!);
  const plainInsertMs = performance.now() - t0;
  const plainBytes = heapUsed() - before;

  emit({ figure: "size", ranks: numRanks, blocks: stats.blocks, residencies: stats.residencies, plain_blocks: plain.size });
  for (const [impl, ms] of [["wasm", wasmInsertMs], ["plain_ts", plainInsertMs]] as const) {
    emit({ figure: "insert", ranks: numRanks, impl, prompt_tokens: promptLength, inserts, inserts_per_s: Math.round(inserts / (ms / 1000)), blocks_per_s: Math.round((inserts * (promptLength / TPB)) / (ms / 1000)) });
  }
  emit({
    figure: "memory",
    ranks: numRanks,
    wasm_bytes_in_use_per_block: +(stats.bytesInUse / stats.blocks).toFixed(1),
    // Per block: its node and its share of the hash table; per residency: the rest (slots, heap entries, per-rank arrays).
    wasm_block_bytes_per_block: +((stats.blocks * 32 + stats.tableBytes) / stats.blocks).toFixed(1),
    wasm_residency_bytes_per_residency: +((stats.bytesInUse - stats.blocks * 32 - stats.tableBytes) / stats.residencies).toFixed(1),
    wasm_reserved_bytes_per_block: +(stats.reservedBytes / stats.blocks).toFixed(1),
    wasm_linear_memory_bytes_per_block: +(stats.wasmMemoryBytes / stats.blocks).toFixed(1),
    plain_ts_heap_bytes_per_block: +(plainBytes / plain.size).toFixed(1),
  });

  for (const length of [2000, 8000]) {
    const queries = makeQueries(rand, prompts, 2000, length);
    // Both must agree before either is timed.
    for (const q of queries.slice(0, 200)) {
      const a = wasm.match(q);
      const b = plain.match(q);
      for (let r = 0; r < numRanks; r++) if (a[r] !== b[r]) throw new Error(`baseline and wasm disagree at rank ${r}`);
    }
    const out = new Uint32Array(numRanks);
    const wasmUs = timeMatches((q) => wasm.matchInto(out, q), queries, 5);
    const plainUs = timeMatches((q) => plain.match(q), queries, 5);
    emit({ figure: "match", ranks: numRanks, prompt_tokens: length, impl: "wasm", us_median: +wasmUs.toFixed(3) });
    emit({ figure: "match", ranks: numRanks, prompt_tokens: length, impl: "plain_ts", us_median: +plainUs.toFixed(3), wasm_speedup: +(plainUs / wasmUs).toFixed(2) });
  }
  wasm.dispose();
  emit({ figure: "insert_under_budget", ranks: numRanks, ...timeInsertsUnderBudget(numRanks) });
}

/**
 * Median µs per 512-token insert (32 blocks of 16 tokens: a shared 64-token
 * stem, then 28 new blocks) into an index already full at an 8 MiB budget, so
 * every insert first evicts the least recently stamped leaves across ranks.
 */
function timeInsertsUnderBudget(numRanks: number): { us_median: number; evicted_per_insert: number } {
  const index = createPrefixIndex({ numRanks, tokensPerBlock: 16, maxMemoryBytes: 8 << 20 });
  const rand = mulberry32(7 + numRanks);
  const stem = Uint32Array.from({ length: 64 }, () => Math.floor(rand() * 50_000));
  const prompt = new Uint32Array(512);
  prompt.set(stem);
  const next = () => {
    for (let t = 64; t < 512; t++) prompt[t] = Math.floor(rand() * 50_000);
    return prompt;
  };
  let rank = 0;
  while (index.stats().evictions === 0) index.insert((rank = (rank + 1) % numRanks), next());
  for (let i = 0; i < 2000; i++) index.insert((rank = (rank + 1) % numRanks), next());
  const before = index.stats().evictions;
  const samples: number[] = [];
  for (let i = 0; i < 5000; i++) {
    const p = next();
    rank = (rank + 1) % numRanks;
    const t0 = performance.now();
    index.insert(rank, p);
    samples.push(performance.now() - t0);
  }
  const evicted = (index.stats().evictions - before) / samples.length;
  index.dispose();
  return { us_median: +(median(samples) * 1000).toFixed(2), evicted_per_insert: +evicted.toFixed(1) };
}

/**
 * µs per vLLM BlockStored event of one new 16-token block on one rank of a
 * 16 MiB index, and the slowest of `count` (once the index is full each
 * evicts, and the engine map's stale hashes are swept), with the p99.9.
 */
function timeStoredEvents(count: number): { us_per_event: number; p999_ms: number; worst_ms: number; worst_at: number } {
  const index = createPrefixIndex({ numRanks: 1, tokensPerBlock: 16, maxMemoryBytes: 16 << 20 });
  const tokens = new Array<number>(16);
  const samples = new Float64Array(count);
  let worst = 0;
  let worstAt = 0;
  const t0 = performance.now();
  for (let i = 0; i < count; i++) {
    for (let k = 0; k < 16; k++) tokens[k] = (i * 16 + k) % 1_000_003;
    const t = performance.now();
    index.applyKvEvents({ events: [{ type: "BlockStored", block_hashes: [i + 1], parent_block_hash: null, token_ids: tokens, block_size: 16 }] }, { rank: 0 });
    const d = performance.now() - t;
    samples[i] = d;
    if (d > worst) (worst = d), (worstAt = i + 1);
  }
  const total = performance.now() - t0;
  index.dispose();
  const p999 = [...samples].sort((a, b) => a - b)[Math.floor(count * 0.999)]!;
  return { us_per_event: +((total / count) * 1000).toFixed(2), p999_ms: +p999.toFixed(2), worst_ms: +worst.toFixed(1), worst_at: worstAt };
}
