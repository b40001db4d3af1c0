// The routing state's seams: every change goes through one door and into a
// state log, so a replica replaying the log holds the same state byte for byte;
// an index update source (an engine's KV events) feeds an upstream's cache view.
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, createGatewayRouter, loadGatewayConfig, RoutingState, type StateEntry } from "../../src/serve/index.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

const SYSTEM = "You are a careful assistant. ".repeat(30);

describe("the state log", () => {
  it("replaying a gateway's log into a fresh state gives the same router, byte for byte (conversations, cache views, tie-breaks, a reload)", async () => {
    const engines: MockEngine[] = [];
    for (let i = 0; i < 3; i++) {
      const e = await startMockEngine(`e${i}`);
      open.push(e);
      engines.push(e);
    }
    const text = (list: MockEngine[]) => `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 60000 }\nrouting: { tokens_per_block: 16 }\nupstreams:\n${list.map((e) => `  - url: ${e.url}\n`).join("")}`;
    const first = loadGatewayConfig({ file: { name: "g.yaml", text: text(engines.slice(0, 2)) } });
    const log: StateEntry[] = [];
    const gateway = await createGateway(first, { stateLog: { append: (entry) => log.push(structuredClone(entry)) } });
    open.push(gateway);
    const ask = (content: string, headers: Record<string, string> = {}) =>
      fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ model: "m", messages: [{ role: "system", content: SYSTEM }, { role: "user", content }] }) }).then((r) => r.text());
    await Promise.all(Array.from({ length: 12 }, (_, i) => ask(`question ${i}`, i % 3 === 0 ? { "x-session-id": `s${i}` } : {})));
    gateway.reload(loadGatewayConfig({ file: { name: "g.yaml", text: text([engines[1]!, engines[2]!, engines[0]!]) } }));
    for (let i = 0; i < 6; i++) await ask(`after ${i}`, { "x-session-id": `s${i}` });

    expect(log.map((e) => e.op)).toContain("ranks");
    expect(log.filter((e) => e.op === "learn")).toHaveLength(18);
    const replica = new RoutingState(createGatewayRouter(first));
    for (const entry of log) replica.apply(entry);
    expect(Buffer.from(replica.router.snapshot()).equals(Buffer.from(gateway.router.snapshot()))).toBe(true);

    // And it is not so by accident: one entry left out, and the state differs.
    const partial = new RoutingState(createGatewayRouter(first));
    for (const entry of log.filter((_, i) => i !== log.findIndex((e) => e.op === "learn"))) partial.apply(entry);
    expect(Buffer.from(partial.router.snapshot()).equals(Buffer.from(gateway.router.snapshot()))).toBe(false);
  });
});

describe("index update sources", () => {
  it("an engine's KV events fill its upstream's cache view, and a clear empties it (both logged)", () => {
    const config = loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:9", "http://127.0.0.1:10"], port: 0 }, file: { name: "g.yaml", text: "routing: { tokens_per_block: 2 }\n" } });
    const log: StateEntry[] = [];
    const state = new RoutingState(createGatewayRouter(config), { append: (entry) => log.push(entry) });
    const index = state.router.prefixIndex!;
    state.update(1, { kind: "kv-events", events: { ts: 1, events: [{ type: "BlockStored", block_hashes: [5, 6], parent_block_hash: null, token_ids: [1, 2, 3, 4], block_size: 2, lora_id: null }] } });
    expect([...index.match([1, 2, 3, 4])]).toEqual([0, 4]);
    state.update(1, { kind: "cleared" });
    expect([...index.match([1, 2, 3, 4])]).toEqual([0, 0]);
    expect(log.map((e) => e.op)).toEqual(["kv-events", "clear"]);
  });
});
