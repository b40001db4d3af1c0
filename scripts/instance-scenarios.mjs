// Generates the `instances` conformance scenarios (two-phase routing over a
// fleet of engines with several attention-DP ranks each) and labels each with
// the oracle test/oracle/instances.ts, which drives a plain model of
// TensorRT-LLM's CentralizedKVCacheRouter (test/oracle/centralized-router.ts)
// and, for rank_routing "adp", the engines' own ADP routers
// (test/oracle/adp-routers.ts). Deterministic: a seeded PRNG, no Math.random.
//
// Usage: node scripts/instance-scenarios.mjs [--count N] [--seed S] [--out FILE]
// (defaults: 300 scenarios, seed 20240611, test/fixtures/conformance-instances.jsonl)
import { build } from "esbuild";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** Parses --count, --seed and --out. */
function parseArgs(argv) {
  const opts = { count: 300, seed: 20240611, out: join(root, "test/fixtures/conformance-instances.jsonl") };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[i + 1];
    if (a === "--count" && v !== undefined && /^[0-9]+$/.test(v)) (opts.count = Number(v)), i++;
    else if (a === "--seed" && v !== undefined && /^[0-9]+$/.test(v)) (opts.seed = Number(v)), i++;
    else if (a === "--out" && v !== undefined) (opts.out = resolve(v)), i++;
    else {
      console.error(`usage: node scripts/instance-scenarios.mjs [--count N] [--seed S] [--out FILE] (bad argument ${JSON.stringify(a)})`);
      process.exit(2);
    }
  }
  return opts;
}

/** sfc32, seeded through splitmix32: a small deterministic PRNG. */
class Rng {
  constructor(seed) {
    let s = seed >>> 0;
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let i = 0; i < 12; i++) this.u32();
  }
  /** A uniform 32-bit unsigned integer. */
  u32() {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t;
  }
  /** A float in [0, 1). */
  float() {
    return this.u32() / 4294967296;
  }
  /** An integer in [lo, hi]. */
  int(lo, hi) {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }
  /** True with probability p. */
  chance(p) {
    return this.float() < p;
  }
  /** One element. */
  pick(xs) {
    return xs[Math.floor(this.float() * xs.length)];
  }
  /** A shuffled copy. */
  shuffled(xs) {
    const out = [...xs];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.float() * (i + 1));
      [out[i], out[j]] = [out[j], out[i]];
    }
    return out;
  }
}

/** Sets an own property (instance ids such as "__proto__" must stay data). */
function setOwn(obj, key, value) {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}

/** The router kind the factory picks for an AttentionDpConfig. */
function routerKind(config) {
  if (config.kv_cache_routing_conversation_affinity) return "conversation";
  if (config.enable_kv_cache_aware_routing) return "kv_cache_aware";
  return "default";
}

/** A random AttentionDpConfig of one of the three router kinds. */
function genConfig(rng, kind) {
  if (kind === "default") {
    return rng.pick([{}, {}, { enable_kv_cache_aware_routing: false }, { enable_balance: false, kv_cache_routing_conversation_affinity: false }]);
  }
  if (kind === "kv_cache_aware") {
    const c = { enable_kv_cache_aware_routing: true };
    if (rng.chance(0.8)) c.kv_cache_routing_load_balance_weight = rng.pick([1.0, 1.0, 0.5, 0.1, 2.0, 10.0]);
    if (rng.chance(0.7)) c.kv_cache_routing_match_rate_threshold = rng.pick([0.1, 0.1, 0.0, 0.3, 0.5]);
    if (rng.chance(0.8)) c.kv_cache_routing_fair_share_multiplier = rng.pick([2.0, 2.0, 1.0, 1.5, 4.0, 2.2, 0.5, 0.75]);
    if (rng.chance(0.45)) c.kv_cache_routing_cold_start_warmup = true;
    else if (rng.chance(0.3)) c.kv_cache_routing_cold_start_warmup = false;
    return c;
  }
  const c = { kv_cache_routing_conversation_affinity: true };
  if (rng.chance(0.25)) c.enable_kv_cache_aware_routing = true;
  c.kv_cache_routing_new_conv_placement = rng.pick(["round_robin", "least_queued", "least_tokens"]);
  if (rng.chance(0.6)) c.kv_cache_routing_max_sessions = rng.pick([65536, 1, 2, 3, 8]);
  if (rng.chance(0.6)) c.kv_cache_routing_fair_share_multiplier = rng.pick([2.0, 1.0, 1.5, 0.5]);
  return c;
}

/** Distinct instance ids: plain, UUID-like, or (rarely) hostile strings. */
function genInstanceIds(rng, n) {
  const style = rng.chance(0.07) ? "hostile" : rng.pick(["plain", "plain", "plain", "uuid"]);
  const ids = [];
  const hostile = rng.shuffled(["__proto__", "constructor", "toString", "a:rank1", "0", "engine:rank", "hasOwnProperty"]);
  for (let k = 0; k < n; k++) {
    let id;
    if (style === "uuid") {
      id = Array.from({ length: 4 }, () => rng.u32().toString(16).padStart(8, "0")).join("-");
    } else if (style === "hostile" && k < hostile.length && rng.chance(0.7)) {
      id = hostile[k];
    } else {
      id = `engine-${k}`;
    }
    while (ids.includes(id)) id += "x";
    ids.push(id);
  }
  return ids;
}

/** A random KV namespace for a document. */
function genNamespace(rng) {
  const r = rng.float();
  if (r < 0.7) return {};
  if (r < 0.82) return { lora_task_id: rng.pick([7, 42]) };
  if (r < 0.94) return { cache_salt: rng.pick(["tenant-a", "tenant-b"]) };
  return { lora_task_id: 42, cache_salt: "tenant-a" };
}

/** Random token ids. */
function randomTokens(rng, n, vocab) {
  return Array.from({ length: n }, () => rng.int(0, vocab - 1));
}

/** The ids: small, around 2^32, or near 2^53 (in increasing, shuffled or gapped order). */
function genIds(rng, total) {
  const style = rng.pick(["small", "small", "small", "gapped", "big32", "big53"]);
  let base = 0;
  let step = () => 1;
  if (style === "gapped") step = () => rng.int(1, 1000);
  if (style === "big32") base = 2 ** 32 - rng.int(0, 4);
  if (style === "big53") base = Number.MAX_SAFE_INTEGER - 10000 - rng.int(0, 1000);
  if (style === "small") base = rng.int(0, 1);
  const ids = [];
  let id = base;
  for (let i = 0; i < total; i++) {
    ids.push(id);
    id += style === "big32" ? rng.int(1, 2 ** 20) : step();
  }
  return rng.chance(0.3) ? rng.shuffled(ids) : ids;
}

/** One scenario without `expected`. */
function genScenario(rng, index) {
  const rankRouting = ["adp", "instance", "none"][index % 3];
  const kind = ["default", "kv_cache_aware", "conversation"][Math.floor(index / 3) % 3];
  const nInst = rng.pick([1, 2, 2, 2, 3, 3, 3, 4, 4, 5, 6]);
  const ids = genInstanceIds(rng, nInst);
  const baseTp = rng.pick([1, 2, 2, 3, 4, 4, 4, 8]);
  const mixedTp = rng.chance(0.35);
  const instances = ids.map((id) => ({ id, tp_size: mixedTp ? rng.int(1, 8) : baseTp }));
  const minTp = Math.min(...instances.map((x) => x.tp_size));
  const tpb = rng.pick([1, 2, 2, 3, 4, 4, 4, 5, 7, 8, 8, 8, 12, 16, 16, 24, 32, 32]);
  const loadWeight = rng.chance(0.7) ? 0.25 : rng.pick([0, 1, 2.5, 0.5, 0.1]);
  const config = genConfig(rng, kind);
  const vocab = rng.pick([50, 1000, 32000]);

  // Documents: shared prefixes that ranks cache and requests extend.
  const docs = [];
  const nDocs = rng.int(1, 4);
  for (let d = 0; d < nDocs; d++) {
    const blocks = rng.int(1, tpb >= 16 ? 4 : 6);
    const tokens = randomTokens(rng, blocks * tpb + rng.int(0, tpb), vocab);
    docs.push({ tokens, ns: genNamespace(rng) });
  }
  if (rng.chance(0.25)) docs.push({ tokens: Array.from({ length: tpb * rng.int(1, 3) + 1 }, (_, i) => i), ns: {}, counting: true });
  const convPool = ["c0", "c1", "c2", "c3", "c4", "c5"];
  if (rng.chance(0.1)) convPool.push("__proto__", "constructor");
  const nBatches = rng.pick([1, 1, 2, 2, 3, 4]);
  const counts = Array.from({ length: nBatches }, () => (rng.chance(0.08) ? 0 : rng.pick([1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24])));
  const allIds = genIds(rng, counts.reduce((a, b) => a + b, 0));
  let nextId = 0;
  const earlier = [];
  const batches = [];
  for (let b = 0; b < nBatches; b++) {
    const cap = rng.pick([1, 2, 3, 4, 4, 6, 8, 8, 10]);
    const loadStyle = rng.pick(["idle", "uniform", "random", "random", "heavy", "skewed"]);
    const uniform = rng.int(0, cap);
    const ranks = {};
    for (const inst of instances) {
      const list = [];
      const instBias = rng.int(0, 2);
      for (let r = 0; r < inst.tp_size; r++) {
        let active = 0;
        if (loadStyle === "uniform") active = uniform;
        else if (loadStyle === "random") active = rng.int(0, cap + 2);
        else if (loadStyle === "heavy") active = rng.int(Math.max(0, cap - 1), cap + 1);
        else if (loadStyle === "skewed") active = rng.chance(0.5) ? instBias : rng.int(0, cap);
        const entry = { num_active_requests: active };
        if (rng.chance(0.3)) entry.num_queued_requests = rng.chance(0.2) ? 0 : rng.int(1, 3);
        entry.num_active_tokens = loadStyle === "idle" || loadStyle === "uniform" ? active * 100 : active * rng.int(0, 200);
        list.push(entry);
      }
      setOwn(ranks, inst.id, list);
    }
    // Cached prefixes: each document on a few (instance, rank)s, at various depths.
    for (const doc of docs) {
      if (rng.chance(0.15)) continue;
      const holders = rng.int(1, 3);
      for (let h = 0; h < holders; h++) {
        const inst = rng.pick(instances);
        const r = rng.int(0, inst.tp_size - 1);
        const full = Math.floor(doc.tokens.length / tpb);
        const depth = rng.int(1, Math.max(1, full));
        const entry = ranks[inst.id][r];
        entry.cached_prefixes ??= [];
        entry.cached_prefixes.push({ tokens: doc.tokens.slice(0, depth * tpb + rng.int(0, tpb - 1)), ...doc.ns });
        // The same tokens in another namespace, sometimes: only the request's own namespace may match.
        if (rng.chance(0.15)) {
          const other = doc.ns.lora_task_id === undefined ? { lora_task_id: 99 } : {};
          entry.cached_prefixes.push({ tokens: doc.tokens.slice(0, full * tpb), ...other });
        }
      }
    }
    // Requests.
    const requests = [];
    for (let q = 0; q < counts[b]; q++) {
      const req = { id: allIds[nextId++] };
      let ns = {};
      const r = rng.float();
      if (r < 0.55) {
        const doc = rng.pick(docs);
        const cut = rng.int(1, doc.tokens.length);
        const tail = randomTokens(rng, rng.int(0, 2 * tpb), vocab);
        const tokens = doc.tokens.slice(0, cut).concat(tail);
        if (doc.counting && rng.chance(0.6)) req.num_tokens = doc.tokens.length + rng.int(0, tpb);
        else req.tokens = tokens.length > 0 ? tokens : [rng.int(0, vocab - 1)];
        ns = rng.chance(0.9) ? doc.ns : genNamespace(rng);
      } else if (r < 0.72) {
        req.tokens = randomTokens(rng, rng.int(1, 3 * tpb + 3), vocab);
        ns = genNamespace(rng);
      } else if (r < 0.8) {
        req.num_tokens = rng.int(1, 3 * tpb + 2);
      } else if (r < 0.86) {
        req.tokens = [rng.int(0, vocab - 1)];
      } else if (earlier.length > 0) {
        const prev = rng.pick(earlier);
        if (prev.tokens) req.tokens = [...prev.tokens];
        else req.num_tokens = prev.num_tokens;
        ns = { ...(prev.lora_task_id !== undefined ? { lora_task_id: prev.lora_task_id } : {}), ...(prev.cache_salt !== undefined ? { cache_salt: prev.cache_salt } : {}) };
      } else {
        req.tokens = randomTokens(rng, rng.int(2, 2 * tpb + 2), vocab);
      }
      // Scheduling params: explicit ranks below the smallest tp_size, relax flags, or none at all.
      const s = rng.float();
      if (s < 0.15) {
        req.attention_dp_rank = rng.int(0, minTp - 1);
        if (rng.chance(0.7)) req.attention_dp_relax = rng.chance(0.5);
      } else if (s < 0.2) {
        req.attention_dp_relax = rng.chance(0.5);
      } else if (s < 0.26) {
        req.scheduling_params = null;
      }
      const convP = kind === "conversation" ? 0.65 : 0.2;
      if (rng.chance(convP)) req.conversation_id = rng.pick(convPool);
      if (req.scheduling_params !== null && rng.chance(kind === "conversation" ? 0.08 : 0.03)) req.subagent_affinity_id = rng.pick(["agent-x", "agent-y"]);
      if (ns.lora_task_id !== undefined) req.lora_task_id = ns.lora_task_id;
      if (ns.cache_salt !== undefined) req.cache_salt = ns.cache_salt;
      requests.push(req);
      earlier.push(req);
    }
    batches.push({ max_num_active_requests: cap, ranks, requests });
  }

  const s = { name: "", mode: "instances", rank_routing: rankRouting };
  if (loadWeight !== 0.25 || rng.chance(0.5)) s.load_weight = loadWeight;
  if (tpb !== 32 || rng.chance(0.5)) s.tokens_per_block = tpb;
  if (Object.keys(config).length > 0 || rng.chance(0.5)) s.config = config;
  s.instances = instances;
  s.batches = batches;
  const shape = `${nInst}x${mixedTp ? "mixed" : baseTp}`;
  s.name = `instances-${String(index).padStart(3, "0")}-${rankRouting}-${kind}-${shape}-tpb${tpb}-b${nBatches}`;
  return s;
}

/**
 * The reference DefaultADPRouter raises (heap pop from an empty heap) when a batch holds more
 * requests than the ranks below the fair-share cap can take (reference §3.3 step 7, §13.3 E11):
 * true when this instance's batch would.
 */
function defaultRouterOverflows(ranks, requests, cap) {
  const tp = ranks.length;
  const counts = ranks.map((rk) => rk.num_active_requests + (rk.num_queued_requests ?? 0));
  let remaining = 0;
  for (const req of requests) {
    const t = req.scheduling_params === null ? undefined : req.attention_dp_rank;
    if (t !== undefined && t !== null && counts[t] < cap) counts[t] += 1;
    else remaining += 1;
  }
  if (remaining === 0) return false;
  const fairShare = Math.floor((counts.reduce((a, b) => a + b, 0) + remaining + tp - 1) / tp);
  const e = Math.min(Math.max(Math.ceil(1.0 * fairShare), Math.max(...counts)), cap);
  let room = 0;
  for (const c of counts) room += Math.max(0, e - c);
  return remaining > room;
}

/** Raises a batch's cap until no instance's default router would overflow (phase 1 does not depend on it). */
function repairDefaultOverflow(s, oracle) {
  if (s.rank_routing !== "adp" || routerKind(s.config ?? {}) !== "default") return 0;
  const phase1 = oracle(JSON.parse(JSON.stringify({ ...s, rank_routing: "none" })));
  let bumps = 0;
  s.batches.forEach((batch, b) => {
    const placements = phase1.batches[b].placements;
    for (;;) {
      const bad = s.instances.some((inst) => {
        const mine = batch.requests.filter((_, i) => placements[i].instance === inst.id);
        return mine.length > 0 && defaultRouterOverflows(batch.ranks[inst.id], mine, batch.max_num_active_requests);
      });
      if (!bad) break;
      batch.max_num_active_requests += 1;
      bumps += 1;
    }
  });
  return bumps;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const dir = mkdtempSync(join(tmpdir(), "instance-scenarios-"));
  try {
    const outfile = join(dir, "instances-oracle.mjs");
    await build({
      entryPoints: [join(root, "test/oracle/instances.ts")],
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      outfile,
      logLevel: "warning",
    });
    const { oracleInstancesScenario } = await import(pathToFileURL(outfile).href);
    const lines = [];
    const mix = { rank_routing: {}, router: {} };
    let bumps = 0;
    for (let i = 0; i < opts.count; i++) {
      const rng = new Rng((Math.imul(opts.seed >>> 0, 0x9e3779b1) ^ Math.imul(i + 1, 0x85ebca77)) >>> 0);
      const s = genScenario(rng, i);
      bumps += repairDefaultOverflow(s, oracleInstancesScenario);
      // Label the JSON form, exactly what readers of the file will see.
      const json = JSON.parse(JSON.stringify(s));
      json.expected = oracleInstancesScenario(JSON.parse(JSON.stringify(s)));
      lines.push(JSON.stringify(json));
      mix.rank_routing[s.rank_routing] = (mix.rank_routing[s.rank_routing] ?? 0) + 1;
      const k = routerKind(s.config ?? {});
      mix.router[k] = (mix.router[k] ?? 0) + 1;
    }
    writeFileSync(opts.out, lines.length > 0 ? lines.join("\n") + "\n" : "");
    console.log(`${lines.length} scenarios → ${opts.out}`);
    console.log(`rank_routing ${JSON.stringify(mix.rank_routing)}, routers ${JSON.stringify(mix.router)}, cap raised ${bumps}× to keep the default router placeable`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
