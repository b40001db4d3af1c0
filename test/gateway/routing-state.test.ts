// The routing state's seams: every change goes through one door and into a
// state log, so a replica replaying the log holds the same state byte for byte;
// an index update source (an engine's KV events) feeds an upstream's cache view.
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, createGatewayRouter, EngineViews, loadGatewayConfig, RoutingState, type StateEntry } from "../../gateway/src/index.js";
import { withPrefixMatches } from "../../gateway/src/fleet/routing-state.js";
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
    await gateway.reload(loadGatewayConfig({ file: { name: "g.yaml", text: text([engines[1]!, engines[2]!, engines[0]!]) } }));
    for (let i = 0; i < 6; i++) await ask(`after ${i}`, { "x-session-id": `s${i}` });

    expect(log.map((e) => e.op)).toContain("ranks");
    expect(log.filter((e) => e.op === "learn")).toHaveLength(18);
    const replica = new RoutingState(createGatewayRouter(first));
    // With a log listening, a learn is hashed once: its entry carries the block hashes its insert used.
    for (const e of log) if (e.op === "learn") expect([...e.hashes!]).toEqual([...replica.router.prefixIndex!.blockHashes(e.tokens)]);
    for (const entry of log) replica.apply(entry);
    expect(Buffer.from(replica.router.snapshot()).equals(Buffer.from(gateway.router.snapshot()))).toBe(true);

    // And it is not so by accident: one entry left out, and the state differs.
    const partial = new RoutingState(createGatewayRouter(first));
    for (const entry of log.filter((_, i) => i !== log.findIndex((e) => e.op === "learn"))) partial.apply(entry);
    expect(Buffer.from(partial.router.snapshot()).equals(Buffer.from(gateway.router.snapshot()))).toBe(false);
  });
});

describe("index update sources", () => {
  it("an engine's KV events fill its upstream's engine view (per DP rank), and a clear empties it (both logged)", () => {
    const text = "routing: { tokens_per_block: 2 }\nupstreams:\n  - http://127.0.0.1:9\n  - url: http://127.0.0.1:10\n    kv_events: { kind: http, dp_ranks: 2 }\n";
    const config = loadGatewayConfig({ file: { name: "g.yaml", text } });
    const log: StateEntry[] = [];
    const views = new EngineViews([null, { dpRanks: 2, groups: [] }], { tokensPerBlock: 2, maxMemoryBytes: 1 << 24, loraIds: new Map() });
    let live = [false, true];
    const state = new RoutingState(createGatewayRouter(config), { append: (entry) => log.push(entry) }, { views, live: () => live });
    state.update(1, { kind: "kv-events", events: { ts: 1, events: [{ type: "BlockStored", block_hashes: [5, 6], parent_block_hash: null, token_ids: [1, 2, 3, 4], block_size: 2, lora_id: null }] }, dpRank: 1 });
    expect([...views.view(1)!.match([1, 2, 3, 4])]).toEqual([0, 4]);
    // The gateway's own view is untouched: the engine's picture is its own.
    expect([...state.router.prefixIndex!.match([1, 2, 3, 4])]).toEqual([0, 0]);
    // A live upstream's match is its best DP rank's (all tokens but the last, as the routers probe).
    expect(state.engineMatch(1, Uint32Array.of(1, 2, 3, 4, 9), {})).toBe(4);
    const routeLog = () => log.filter((e) => e.op === "route").at(-1) as Extract<StateEntry, { op: "route" }>;
    state.route({ rankStates: [{ numActiveRequests: 0, numActiveTokens: 0 }, { numActiveRequests: 0, numActiveTokens: 0 }], maxNumActiveRequests: 8, requests: [{ id: 1, tokens: Uint32Array.of(1, 2, 3, 4, 9) }] });
    expect([...(routeLog().input.requests[0]!.prefixMatches as Uint32Array)]).toEqual([0, 4]);
    // Not live: its match comes from the gateway's own placements, and nothing says it is the engine's.
    live = [false, false];
    expect(state.engineMatch(1, Uint32Array.of(1, 2, 3, 4, 9), {})).toBeNull();
    state.route({ rankStates: [{ numActiveRequests: 0, numActiveTokens: 0 }, { numActiveRequests: 0, numActiveTokens: 0 }], maxNumActiveRequests: 8, requests: [{ id: 2, tokens: Uint32Array.of(1, 2, 3, 4, 9) }] });
    // (the gateway's own view, matched by the prompt's block hashes made once: what the router's own probe finds)
    expect([...(routeLog().input.requests[0]!.prefixMatches as Uint32Array)]).toEqual(state.router.prefixIndex!.match([1, 2, 3, 4]));
    state.update(1, { kind: "cleared", dpRank: 1 });
    expect([...views.view(1)!.match([1, 2, 3, 4])]).toEqual([0, 0]);
    expect(log.map((e) => e.op)).toEqual(["kv-events", "route", "route", "clear"]);
  });
});

describe("a prompt hashed once per batch", () => {
  it("routes and learns as the router's own probe and an insert of its tokens do: the same decisions, the same state byte for byte (random batches, fixed seed)", () => {
    const text = "routing: { tokens_per_block: 4 }\nupstreams:\n  - http://127.0.0.1:9\n  - http://127.0.0.1:10\n  - http://127.0.0.1:11\n";
    const config = loadGatewayConfig({ file: { name: "g.yaml", text } });
    const state = new RoutingState(createGatewayRouter(config));
    const plain = createGatewayRouter(config);
    // A small LCG: prompts share system prefixes and earlier turns, so matches are many and partial.
    let seed = 12345;
    const next = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2147483648), seed % n);
    const prefixes = Array.from({ length: 4 }, (_, p) => Array.from({ length: 4 * (3 + p) }, (_, i) => 1000 * p + i));
    let id = 0;
    let hashedOnce = 0;
    for (let batch = 0; batch < 60; batch++) {
      const requests = Array.from({ length: 1 + next(5) }, () => {
        const tokens = Uint32Array.from([...prefixes[next(4)]!, ...Array.from({ length: next(30) }, () => next(50))]);
        return { id: ++id, tokens, ...(next(4) === 0 ? { cacheSalt: "s" } : {}) };
      });
      const rankStates = [0, 1, 2].map(() => ({ numActiveRequests: next(3), numActiveTokens: next(200) }));
      const input = { rankStates, maxNumActiveRequests: 8, requests };
      const { result, hashes } = state.route(input);
      const expected = plain.route(input);
      expect(result.assignments).toEqual(expected.assignments);
      result.assignments.forEach((ids, rank) => {
        for (const rid of ids) {
          const i = requests.findIndex((r) => r.id === rid);
          const ns = { loraTaskId: null, cacheSalt: requests[i]!.cacheSalt ?? null };
          if (hashes[i] !== null) hashedOnce++;
          expect(state.learn(rank, requests[i]!.tokens, ns, undefined, hashes[i])).toBe(plain.prefixIndex!.insert(rank, requests[i]!.tokens, ns));
        }
      });
    }
    expect(hashedOnce).toBeGreaterThan(100);
    expect(Buffer.from(state.router.snapshot()).equals(Buffer.from(plain.snapshot()))).toBe(true);
  });

  it("a request given its matches keeps every other field as it was", () => {
    const req = {
      id: 7n, tokens: Uint32Array.of(1, 2, 3), numTokens: 3, schedulingParams: true, attentionDpRank: 1, attentionDpRelax: false,
      subagentAffinityId: "a", conversationId: "c", loraTaskId: 4, cacheSalt: "s", prefixMatches: [9], blockKeys: [5],
    };
    const matches = Uint32Array.of(3, 0);
    const out = withPrefixMatches(req, matches);
    expect(out).toEqual({ ...req, prefixMatches: matches });
    expect(Object.keys(out).sort()).toEqual(Object.keys(req).sort());
    expect(withPrefixMatches({ id: 1 }, matches)).toMatchObject({ id: 1, prefixMatches: matches, tokens: undefined, conversationId: undefined });
  });
});
