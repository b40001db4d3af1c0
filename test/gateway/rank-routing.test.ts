// Routing into an engine's own DP ranks (phase 2), in front of mock engines
// that each expose four DP ranks behind one URL, every rank with its own
// ZeroMQ event stream at the port plus its rank (vLLM's layout): the gateway
// picks the upstream, then the rank, and sends it as X-Data-Parallel-Rank
// (vLLM's _get_data_parallel_rank; SGLang honours the same header).
import { Encoder } from "@msgpack/msgpack";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, type Gateway } from "../../gateway/src/index.js";
import { startFakePublisher, type FakePublisher } from "../support/fake-kv-publisher.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import { waitFor } from "../support/wait.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

const RANKS = 4;
const TPB = 4;
/** A prompt of `n` tokens from `from`. */
const prompt = (n: number, from: number) => Array.from({ length: n }, (_, i) => from + i);
const encoder = new Encoder();
/** vLLM's batch of one BlockStored of `tokens` (whole blocks) on DP rank `rank`, hashes from `first`. */
const storedBatch = (tokens: number[], rank: number, first: number) =>
  Buffer.from(encoder.encode({ ts: 1, events: [{ type: "BlockStored", block_hashes: Array.from({ length: tokens.length / TPB }, (_, i) => first + i), parent_block_hash: null, token_ids: tokens, block_size: TPB, lora_id: null, medium: "GPU" }], data_parallel_rank: rank }));

/** Two engines (A, B) of four DP ranks with events, behind a gateway whose upstreams pin ranks as `rankRouting` says. */
async function fleet(rankRouting: string | null, policy = "kv_cache_aware"): Promise<{ g: Gateway; engines: MockEngine[]; pubs: FakePublisher[] }> {
  const engines: MockEngine[] = [];
  const pubs: FakePublisher[] = [];
  for (const name of ["A", "B"]) {
    const e = await startMockEngine(name);
    const pub = await startFakePublisher(RANKS);
    open.push(e, pub);
    engines.push(e);
    pubs.push(pub);
  }
  const upstreams = engines.map((e, i) => ({ url: e.url, kv_events: { kind: "zmq", endpoint: pubs[i]!.endpoint, dp_ranks: RANKS }, ...(rankRouting === null ? {} : { rank_routing: rankRouting }) }));
  const g = await createGateway({ listen: { port: 0 }, health: { interval_ms: 60_000 }, policy, routing: { tokens_per_block: TPB }, upstreams } as never, { logger: pino({ level: "silent" }) });
  open.push(g);
  for (const pub of pubs) for (let r = 0; r < RANKS; r++) await pub.subscribed(r);
  return { g, engines, pubs };
}

/** Sends a completion of `tokens` (optionally in conversation `conversation`); the upstream index and the rank header its engine got. */
async function send(g: Gateway, engines: MockEngine[], tokens: number[], headers: Record<string, string> = {}, conversation?: string): Promise<{ upstream: number; rank: string | undefined }> {
  const body = { model: "m", prompt: tokens, max_tokens: 1, ...(conversation ? { conversation_params: { conversation_id: conversation } } : {}) };
  const response = await fetch(`${g.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  await response.text();
  expect(response.status).toBe(200);
  const upstream = Number(response.headers.get("x-adp-upstream"));
  const got = engines[upstream]!.received.at(-1)!;
  return { upstream, rank: got.headers["x-data-parallel-rank"] as string | undefined };
}

/** Engine B's events: the prompt's blocks on its rank `rank` (the view shows them before the test goes on). */
async function storeOnB(g: Gateway, pubs: FakePublisher[], tokens: number[], rank: number, seq: bigint): Promise<void> {
  await pubs[1]!.publish(rank, seq, storedBatch(tokens, rank, 100 + rank * 10));
  await waitFor(() => /adp_gateway_upstream_engine_view_blocks\{upstream="[^"]+"\} [1-9]/.test(g.metrics().split("\n").filter((l) => l.includes("engine_view_blocks")).slice(-1)[0] ?? ""));
}

describe("phase 2: the engine's own DP ranks", () => {
  for (const kind of ["adp", "instance"] as const) {
    it(`rank_routing: ${kind} — a prefix stored on rank 3 of engine B routes to B, rank 3 (the header sent), and the rank's counters say so`, async () => {
      const { g, engines, pubs } = await fleet(kind);
      const p = prompt(16, 1000);
      await storeOnB(g, pubs, p, 3, 0n);
      expect(await send(g, engines, [...p, 7])).toEqual({ upstream: 1, rank: "3" });
      const metrics = g.metrics();
      expect(metrics).toMatch(/adp_gateway_upstream_rank_requests_total\{upstream="[^"]+",dp_rank="3"\} 1/);
      expect(metrics).toMatch(/adp_gateway_upstream_rank_matched_tokens_total\{upstream="[^"]+",dp_rank="3"\} 16/);
    });
  }

  it("lone requests (a batch each) spread over the ranks: each request's own id seeds the router's tie-break", async () => {
    // Before: a batch's position seeded it, so every lone request drew the same shuffle and went to one rank.
    const { g, engines } = await fleet("adp");
    const ranks = new Set<string | undefined>();
    for (let i = 0; i < 40; i++) ranks.add((await send(g, engines, prompt(8, 20_000 + i * 100))).rank);
    expect(ranks.size).toBeGreaterThanOrEqual(3);
  });

  it("a client's own X-Data-Parallel-Rank never reaches the engine: the gateway's choice does", async () => {
    const { g, engines, pubs } = await fleet("adp");
    const p = prompt(16, 3000);
    await storeOnB(g, pubs, p, 2, 0n);
    expect(await send(g, engines, [...p, 7], { "x-data-parallel-rank": "0" })).toEqual({ upstream: 1, rank: "2" });
  });

  it("conversation affinity pins each conversation to a rank: its turns keep their rank, conversations spread over ranks", async () => {
    const { g, engines } = await fleet("adp", "conversation");
    const first = new Map<string, string>();
    for (let turn = 0; turn < 3; turn++) {
      for (const c of ["c1", "c2", "c3", "c4"]) {
        const { upstream, rank } = await send(g, engines, prompt(8, 5000 + turn * 100), {}, c);
        const where = `${upstream}/${rank}`;
        expect(rank).toBeDefined();
        if (turn === 0) first.set(c, where);
        else expect(where, `${c} turn ${turn}`).toBe(first.get(c));
      }
    }
    expect(new Set(first.values()).size).toBeGreaterThan(1);
  });

  it("rank_routing: none sends no rank (the engine's balancer picks), not even a client's", async () => {
    const { g, engines, pubs } = await fleet("none");
    const p = prompt(16, 7000);
    await storeOnB(g, pubs, p, 3, 0n);
    expect(await send(g, engines, [...p, 7], { "x-data-parallel-rank": "1" })).toEqual({ upstream: 1, rank: undefined });
    expect(g.metrics()).not.toContain("upstream_rank_requests_total");
  });
});

describe("an engine's own attention_dp_config for phase 2", () => {
  it("is read per upstream (TensorRT-LLM's defaults for the rest); a wrong field is a problem naming its path", async () => {
    const { loadGatewayConfig } = await import("../../gateway/src/index.js");
    const text = (block: string) => `upstreams:\n  - url: http://127.0.0.1:9\n    dp_ranks: 4\n    rank_routing: adp\n    attention_dp_config: ${block}\n`;
    const config = loadGatewayConfig({ file: { name: "g.yaml", text: text("{ enable_kv_cache_aware_routing: true, kv_cache_routing_load_balance_weight: 0.5 }") } });
    expect(config.upstreams[0]!.attentionDp).toMatchObject({ enableKvCacheAwareRouting: true, kvCacheRoutingLoadBalanceWeight: 0.5 });
    expect(() => loadGatewayConfig({ file: { name: "g.yaml", text: text("{ kv_cache_routing_load_balance_weight: fast }") } })).toThrow(/upstreams\[0\]\.attention_dp_config\.kv_cache_routing_load_balance_weight/);
    expect(loadGatewayConfig({ file: { name: "g.yaml", text: "upstreams: [http://127.0.0.1:9]\n" } }).upstreams[0]!.attentionDp).toBeNull();
  });
});

describe("phase 2 weighs each rank's own load as its engine reports it", () => {
  /** vLLM's /metrics page of a 4-rank engine (`engine` is the DP rank), ranks busy as given. */
  const page = (running: number[]) =>
    [
      "# HELP vllm:num_requests_running Number of requests in model execution batches.",
      "# TYPE vllm:num_requests_running gauge",
      ...running.map((n, r) => `vllm:num_requests_running{engine="${r}",model_name="m"} ${n}.0`),
      "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
      "# TYPE vllm:num_requests_waiting gauge",
      ...running.map((_, r) => `vllm:num_requests_waiting{engine="${r}",model_name="m"} 0.0`),
      "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
      "# TYPE vllm:kv_cache_usage_perc gauge",
      ...running.map((_, r) => `vllm:kv_cache_usage_perc{engine="${r}",model_name="m"} 0.1`),
      "",
    ].join("\n");

  for (const kind of ["adp", "instance"] as const) {
    it(`rank_routing: ${kind} — with ranks 0 to 2 busy (other clients' requests), a new prompt goes to rank 3`, async () => {
      const e = await startMockEngine("A", { loadMetrics: page([40, 40, 40, 0]) });
      open.push(e);
      const g = await createGateway({ listen: { port: 0 }, health: { interval_ms: 60_000 }, routing: { tokens_per_block: TPB }, upstreams: [{ url: e.url, dp_ranks: RANKS, rank_routing: kind, load: { kind: "vllm", interval_ms: 50 } }] } as never, { logger: pino({ level: "silent" }) });
      open.push(g);
      await waitFor(() => /adp_gateway_upstream_load_running\{[^}]*\} 120/.test(g.metrics()) || /running[^\n]* 120/.test(g.metrics()), () => g.metrics().split("\n").filter((l) => l.includes("load")).join("\n"));
      for (let i = 0; i < 3; i++) expect((await send(g, [e], prompt(8, 40_000 + i * 100))).rank).toBe("3");
    });
  }
});
