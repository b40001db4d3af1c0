// Soak: route many requests through one router (conversation affinity, a bounded
// conversation map, a prefix index under a memory budget, learning from routing),
// sampling process and wasm memory, and check that memory stays flat after warm-up.
//
//   npm run soak                               10,000,000 requests, 1,000,000 conversations
//   node scripts/soak.mjs --requests N --conversations M
//
// Prints one JSON line with the figures; exits 1 if memory grew after warm-up.
import { createRouter } from "../dist/index.js";

/** Runs the soak; returns its figures. `warmupFraction` of the requests come before the baseline. */
export function runSoak({ requests = 10_000_000, conversations = 1_000_000, ranks = 8, batch = 256, budgetBytes = 32 << 20, warmupFraction = 0.3, samples = 20 } = {}) {
  const router = createRouter({
    numRanks: ranks,
    attentionDp: { kv_cache_routing_conversation_affinity: true, kv_cache_routing_max_sessions: 65536, kv_cache_routing_new_conv_placement: "least_tokens" },
    prefixIndex: { tokensPerBlock: 16, maxMemoryBytes: budgetBytes },
  });
  // A pool of token ids; a conversation's prompt is a window of it after a shared system prompt.
  const pool = new Uint32Array(1 << 20);
  let seed = 12345;
  for (let i = 0; i < pool.length; i++) pool[i] = (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) >>> 12;
  const prompt = new Uint32Array(64 + 448);
  prompt.set(pool.subarray(0, 64));
  const states = Array.from({ length: ranks }, () => ({ numActiveRequests: 0, numActiveTokens: 0 }));
  const figures = [];
  const sampleEvery = Math.max(batch, Math.floor(requests / samples / batch) * batch);
  const prompts = [];
  let routed = 0;
  let conv = 0;
  const start = performance.now();
  while (routed < requests) {
    const n = Math.min(batch, requests - routed);
    const reqs = new Array(n);
    for (let i = 0; i < n; i++) {
      const c = conv++ % conversations;
      const turn = Math.floor((routed + i) / conversations);
      const len = 64 + 64 + ((c * 37 + turn * 64) % 384);
      const at = (c * 2654435761) % (pool.length - 512);
      const p = prompts[i] ?? (prompts[i] = new Uint32Array(512));
      p.set(prompt.subarray(0, 64));
      p.set(pool.subarray(at, at + len - 64), 64);
      reqs[i] = { id: routed + i, tokens: p.subarray(0, len), conversationId: `conversation-${c}` };
    }
    const result = router.route({ rankStates: states, maxNumActiveRequests: 1 << 20, requests: reqs });
    if (result.unassigned.length > 0) throw new Error("a request was not placed");
    routed += n;
    if (routed % sampleEvery === 0 || routed === requests) {
      const m = process.memoryUsage();
      const index = router.prefixIndex.stats();
      figures.push({ routed, rss: m.rss, heapUsed: m.heapUsed, wasmMemory: index.wasmMemoryBytes, indexBytes: index.bytesInUse, conversations: router.metrics().conversations.tracked });
    }
  }
  const seconds = (performance.now() - start) / 1000;
  const warm = figures.find((f) => f.routed >= requests * warmupFraction) ?? figures[0];
  const last = figures[figures.length - 1];
  const peak = (k) => Math.max(...figures.map((f) => f[k]));
  const afterWarm = figures.filter((f) => f.routed >= warm.routed);
  return {
    requests: routed,
    conversations,
    seconds: +seconds.toFixed(1),
    us_per_request: +((seconds * 1e6) / routed).toFixed(3),
    index_budget_bytes: budgetBytes,
    index_bytes_peak: peak("indexBytes"),
    index_evictions: router.prefixIndex.stats().evictions,
    conversations_tracked: last.conversations,
    conversation_evictions: router.metrics().conversations.evictions,
    rss_after_warmup: warm.rss,
    rss_peak_after_warmup: Math.max(...afterWarm.map((f) => f.rss)),
    rss_final: last.rss,
    heap_after_warmup: warm.heapUsed,
    heap_peak_after_warmup: Math.max(...afterWarm.map((f) => f.heapUsed)),
    heap_final: last.heapUsed,
    wasm_memory_after_warmup: warm.wasmMemory,
    wasm_memory_final: last.wasmMemory,
    flat:
      last.wasmMemory === warm.wasmMemory &&
      peak("indexBytes") <= budgetBytes &&
      Math.max(...afterWarm.map((f) => f.rss)) <= warm.rss * 1.15 + (32 << 20),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : fallback;
  };
  const result = runSoak({ requests: arg("requests", 10_000_000), conversations: arg("conversations", 1_000_000) });
  console.log(JSON.stringify(result));
  if (!result.flat) process.exitCode = 1;
}
