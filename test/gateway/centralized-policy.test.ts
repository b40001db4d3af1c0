// `policy: centralized`: the gateway picks the upstream as TensorRT-LLM's
// centralized KV-cache router does (router_core.py, select_worker): matched
// blocks − 0.25 × workload, ties in upstream order taken in turn by one
// counter that turns on every request placed. Mock engines on loopback; the
// expected upstream of each request is worked out from that rule below.
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import { waitFor } from "../support/wait.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** Three engines behind a gateway with `policy`; tokens_per_block 4. */
async function fleet(policy: string, extra = ""): Promise<{ g: Gateway; engines: MockEngine[] }> {
  const engines: MockEngine[] = [];
  for (const name of ["a", "b", "c"]) {
    const e = await startMockEngine(name);
    open.push(e);
    engines.push(e);
  }
  const text = `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\npolicy: ${policy}\nrouting: { tokens_per_block: 4${extra} }\nupstreams:\n${engines.map((e) => `  - url: ${e.url}\n`).join("")}`;
  const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }), { logger: pino({ level: "silent" }) });
  open.push(g);
  return { g, engines };
}

/**
 * Sends a completion of `tokens` without waiting for its answer; resolves with
 * the upstream that received it (once it has: an engine that delays its
 * answer still records the request at once).
 */
async function sendTo(g: Gateway, engines: MockEngine[], tokens: number[], pending: Promise<unknown>[]): Promise<number> {
  const before = engines.map((e) => e.received.length);
  pending.push(fetch(`${g.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: tokens, max_tokens: 1 }) }).then((r) => r.text()));
  await waitFor(() => engines.some((e, i) => e.received.length > before[i]!));
  return engines.findIndex((e, i) => e.received.length > before[i]!);
}

describe("policy: centralized (TensorRT-LLM's centralized router picks the upstream)", () => {
  it("cold prompts take the upstreams in turn; a cached prefix wins until 0.25 × its in-flight requests outweigh its matched blocks, then ties turn again", async () => {
    const { g, engines } = await fleet("centralized");
    const pending: Promise<unknown>[] = [];
    // Three cold prompts, one at a time and answered: all tie at score 0, the counter (0, 1, 2) takes them in turn.
    const cold: number[] = [];
    for (let k = 0; k < 3; k++) {
      cold.push(await sendTo(g, engines, [900 + k, 901, 902], pending));
      await Promise.all(pending.splice(0));
    }
    expect(cold).toEqual([0, 1, 2]);
    // A prompt of two whole blocks, learned where it goes: counter 3 → upstream 0.
    const shared = [1, 2, 3, 4, 5, 6, 7, 8];
    expect(await sendTo(g, engines, [...shared, 99], pending)).toBe(0);
    await Promise.all(pending.splice(0));
    // Upstream 0 now answers slowly, so its requests stay in flight. Its score for a prompt sharing
    // those blocks is 2 − 0.25 × in flight, the others' 0: it takes the next 8 (in flight 0 to 7).
    engines[0]!.behaviour.delayMs = 3_000;
    const held: number[] = [];
    for (let k = 0; k < 8; k++) held.push(await sendTo(g, engines, [...shared, 100 + k], pending));
    expect(held).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    // The counter turned on each of those 12 requests. In flight 8: all three tie at 0, 12 mod 3 → 0.
    // In flight 9: upstream 0 scores −0.25, 1 and 2 tie at 0, 13 mod 2 → the second, upstream 2, which
    // then holds the prefix too: it answers at once, so it scores 2 − 0 and takes the next ones.
    const next: number[] = [];
    for (let k = 0; k < 4; k++) next.push(await sendTo(g, engines, [...shared, 200 + k], pending));
    expect(next).toEqual([0, 2, 2, 2]);
    await Promise.all(pending);
  }, 20_000);

  it("routing.load_weight sets the weight of a request against a block; the policy and the weight are checked", async () => {
    const { g, engines } = await fleet("centralized", ", load_weight: 4");
    const pending: Promise<unknown>[] = [];
    const shared = [1, 2, 3, 4, 5, 6, 7, 8];
    expect(await sendTo(g, engines, [...shared, 99], pending)).toBe(0);
    await Promise.all(pending.splice(0));
    engines[0]!.behaviour.delayMs = 3_000;
    // 2 − 4 × 0 > 0 takes the first; with one in flight 2 − 4 < 0: the next goes to the others in turn.
    expect(await sendTo(g, engines, [...shared, 100], pending)).toBe(0);
    expect(await sendTo(g, engines, [...shared, 101], pending)).not.toBe(0);
    await Promise.all(pending);
    for (const bad of ["load_weight: -1", "load_weight: nope"]) {
      expect(() => loadGatewayConfig({ file: { name: "g.yaml", text: `routing: { ${bad} }\nupstreams: [{ url: "http://127.0.0.1:9" }]\n` } })).toThrow(/routing\.load_weight: must be a number in \[0, 1000000\]/);
    }
    expect(() => loadGatewayConfig({ file: { name: "g.yaml", text: `policy: centralised\nupstreams: [{ url: "http://127.0.0.1:9" }]\n` } })).toThrow(/policy: must be one of kv_cache_aware, conversation, default, centralized/);
  }, 20_000);
});
