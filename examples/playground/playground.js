// The playground: routes a sample batch or a slice of the bundled trace with the
// built package, and shows each request's rank and the router's own reason.
import { createPrefixIndex, createRouter } from "../../dist/index.js";

const $ = (id) => document.getElementById(id);
const SYSTEM = Array.from({ length: 96 }, (_, i) => 1000 + i);

/** A sample batch: a shared system prompt, three conversations, their second turns, strays. */
function sampleRequests() {
  const turn = (conv, extra) => [...SYSTEM, ...Array.from({ length: extra }, (_, i) => conv * 100 + i)];
  const out = [];
  let id = 1;
  for (const conv of [1, 2, 3]) out.push({ id: id++, tokens: turn(conv, 40), conversationId: `chat-${conv}` });
  for (const conv of [1, 2, 3]) out.push({ id: id++, tokens: turn(conv, 80), conversationId: `chat-${conv}` });
  out.push({ id: id++, tokens: Array.from({ length: 60 }, (_, i) => 9000 + i) });
  out.push({ id: id++, tokens: turn(2, 120), conversationId: "chat-2", attentionDpRank: 0, attentionDpRelax: true });
  return out;
}

/** The first `n` requests of the bundled trace, as block keys (512 tokens a block). */
async function traceRequests(n) {
  const response = await fetch("../../traces/mooncake_conversation_trace.jsonl.gz");
  const text = await new Response(response.body.pipeThrough(new DecompressionStream("gzip"))).text();
  return text.split("\n").filter(Boolean).slice(0, n).map((line, i) => {
    const row = JSON.parse(line);
    return { id: i, numTokens: row.input_length, blockKeys: row.hash_ids };
  });
}

function why(record) {
  switch (record.outcome) {
    case "explicit": return "its attention_dp_rank had room";
    case "warmup": return "cold-start warm-up rank";
    case "balanced": return "least-loaded rank (tokens, then requests, then rank)";
    case "sticky": return `sticky: conversation ${record.conversation} lives here`;
    case "overflow": return `overflow: home rank ${record.home} was full (binding kept)`;
    case "placed": return record.conversation ? `new conversation ${record.conversation}, placed by policy` : "no conversation id, placed by policy";
    case "unassigned": return "no rank had room under the fair-share cap";
    case "scored": {
      const s = record.scoring;
      const parts = s.eligibleRanks.map((r, k) => `r${r}: match ${s.matchedTokens[k]}, load ${s.loadTerms[k].toFixed(1)}, score ${s.scores[k].toFixed(1)}`);
      const gate = s.matchGateOpen ? "match counted" : "match gated off (below threshold)";
      return `lowest score; ${gate}${s.tieBrokenByShuffle ? "; tie broken by the request's shuffle" : ""}${s.excludedByCap.length ? `; capped: ${s.excludedByCap.join(", ")}` : ""} — ${parts.join(" | ")}`;
    }
    default: return record.outcome;
  }
}

async function run() {
  $("error").textContent = "";
  const numRanks = Number($("ranks").value);
  const policy = $("policy").value;
  let overrides;
  try {
    overrides = JSON.parse($("config").value || "{}");
  } catch (e) {
    $("error").textContent = `config is not JSON: ${e.message}`;
    return;
  }
  const attentionDp = policy === "kv_cache_aware"
    ? { ...overrides, enable_kv_cache_aware_routing: true }
    : policy.startsWith("conversation:")
      ? { ...overrides, kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: policy.slice(13) }
      : overrides;
  const trace = $("workload").value === "trace";
  const records = new Map();
  let router;
  try {
    router = createRouter({
      numRanks,
      attentionDp,
      prefixIndex: createPrefixIndex({ numRanks, tokensPerBlock: trace ? 512 : 32 }),
      onDecision: (r) => records.set(String(r.requestId), r),
    });
  } catch (e) {
    $("error").textContent = e.message;
    return;
  }
  const requests = trace ? await traceRequests(48) : sampleRequests();
  const counts = new Array(numRanks).fill(0);
  const loads = new Array(numRanks).fill(0);
  // Route in small batches so later requests see the cache and load earlier ones left
  // (the sample's first turns in one batch, their second turns in the next).
  const size = trace ? 8 : 3;
  for (let i = 0; i < requests.length; i += size) {
    const batch = requests.slice(i, i + size);
    const result = router.route({
      rankStates: counts.map((c, r) => ({ numActiveRequests: c, numActiveTokens: loads[r] })),
      maxNumActiveRequests: 64,
      requests: batch,
    });
    result.assignments.forEach((ids, r) => ids.forEach((id) => {
      counts[r]++;
      loads[r] += batch.find((q) => q.id === id).numTokens ?? batch.find((q) => q.id === id).tokens.length;
    }));
  }
  const body = $("decisions").querySelector("tbody");
  body.replaceChildren(...requests.map((q) => {
    const r = records.get(String(q.id));
    const tr = document.createElement("tr");
    const cells = [q.id, q.tokens ? `${q.tokens.length} tokens` : `${q.numTokens} tokens, ${q.blockKeys.length} blocks`, q.conversationId ?? "—", r.rank, why(r)];
    for (const [k, v] of cells.entries()) {
      const td = document.createElement("td");
      td.textContent = String(v);
      if (k === 0 || k === 3) td.className = "num";
      tr.append(td);
    }
    tr.dataset.rank = String(r.rank);
    tr.dataset.outcome = r.outcome;
    return tr;
  }));
  $("decisions").hidden = false;
  const most = Math.max(1, ...counts);
  $("ranksView").replaceChildren(...counts.map((c, r) => {
    const div = document.createElement("div");
    div.className = "rank";
    div.innerHTML = `<strong>rank ${r}</strong><br>${c} requests<br>${router.prefixIndex.blockCount(r)} cached blocks<div class="bar" style="width:${(100 * c) / most}%"></div>`;
    return div;
  }));
  document.body.dataset.routed = String(requests.length);
}

$("route").addEventListener("click", () => {
  run().catch((e) => ($("error").textContent = e.message));
});
