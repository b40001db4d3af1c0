// Changing the fleet without a restart: a reload (SIGHUP, or Gateway.reload)
// adds, removes and drains upstreams; the upstreams that remain keep their
// routing state (conversations, cache views) under their new ranks, removed
// and drained ones finish what they have and take nothing new.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { afterReload } from "../../gateway/src/workers/config-relay.js";
import { waitFor } from "../support/wait.js";
import { startEngines, startMockEngine, urlFrom, type EngineBehaviour, type MockEngine } from "../support/mock-engine.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** `n` mock engines, closed after each test. */
const engines = (n: number, behaviour: EngineBehaviour = {}) => startEngines(n, open, behaviour);

/** A gateway configuration's text over `list` (each engine, maybe drained). */
const yaml = (list: { e: MockEngine; drain?: boolean }[], extra = "") =>
  `listen: { port: 0 }\nlogging: { level: silent }\npolicy: conversation\nhealth: { interval_ms: 200 }\nupstreams:\n${list.map(({ e, drain }) => `  - url: ${e.url}\n    name: ${e.name}\n${drain ? "    drain: true\n" : ""}`).join("")}${extra}`;

const config = (text: string, env: Record<string, string> = {}) => loadGatewayConfig({ file: { name: "g.yaml", text }, env });

/** Which engine answered a session's turn (by the body the mock writes). */
async function engineOf(gateway: Gateway, session: string): Promise<string> {
  const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": session }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: `hi ${session}` }] }) });
  expect(response.status).toBe(200);
  const body = (await response.json()) as { choices: { message: { content: string } }[] };
  return body.choices[0]!.message.content.replace("hello from ", "");
}

describe("reload", () => {
  it("a worker started again after a reload starts where the reload left its siblings (afterReload): the reloaded list, a kept upstream's name and drain from it, its DP ranks from the start", async () => {
    const [e0, e1, e2] = await engines(3);
    const entry = (e: MockEngine, more = "") => `  - url: ${e.url}\n${more}`;
    const start = config(`listen: { port: 0 }\nlogging: { level: silent }\nupstreams:\n${entry(e0!)}${entry(e1!, "    name: first\n    dp_ranks: 2\n    rank_routing: adp\n")}`);
    const reloaded = config(`listen: { port: 0 }\nlogging: { level: silent }\nupstreams:\n${entry(e2!)}${entry(e1!, "    name: second\n    drain: true\n    dp_ranks: 4\n    rank_routing: adp\n")}`);
    const moved = await createGateway(start);
    open.push(moved);
    expect((await moved.reload(reloaded)).needRestart).toEqual(["upstreams[1].dp_ranks"]);
    const started = await createGateway(afterReload(start, reloaded));
    open.push(started);
    // The upstreams' gauges as the two pages give them (no request was sent to either).
    const upstreams = async (g: Gateway) => (await g.metrics()).split("\n").filter((l) => /^adp_gateway_upstream_(info|in_flight_requests|healthy|rank_in_flight|draining)\{/.test(l));
    const page = await upstreams(started);
    expect(page).toEqual(await upstreams(moved));
    // /health names each upstream with its drain.
    const health = async (g: Gateway) => ((await (await fetch(`${g.url}/health`)).json()) as { upstreams: unknown[] }).upstreams;
    expect(await health(started)).toEqual(await health(moved));
    expect(await health(started)).toContainEqual(expect.objectContaining({ name: "second", draining: true }));
    expect(page.filter((l) => l.startsWith("adp_gateway_upstream_rank_in_flight{upstream=\"second\""))).toHaveLength(2);
    expect(page.some((l) => l.startsWith("adp_gateway_upstream_info{upstream=\"second\",index=\"1\""))).toBe(true);
  });

  it("an upstream a reload adds that nobody can connect to joins unhealthy, as at start (said in `unreachable`), and takes no request until its health checks pass", async () => {
    const [e0] = await engines(1);
    const g = await createGateway(config(yaml([{ e: e0! }])));
    open.push(g);
    const { freePort } = await import("../support/processes.js");
    const nowhere = `http://127.0.0.1:${await freePort()}`;
    const change = await g.reload(config(`${yaml([{ e: e0! }])}  - url: ${nowhere}\n    name: nowhere\n`));
    expect(change.added).toEqual([nowhere]);
    expect(change.unreachable).toEqual([{ index: 1, url: nowhere, reason: expect.stringContaining("ECONNREFUSED") }]);
    const health = ((await (await fetch(`${g.url}/health`)).json()) as { upstreams: { name: string; healthy: boolean }[] }).upstreams;
    expect(health.find((u) => u.name === "nowhere")?.healthy).toBe(false);
    // Every request goes to the engine that answers, none tried on the one that cannot.
    for (let i = 0; i < 6; i++) expect(await engineOf(g, `s${i}`)).toBe(e0!.name);
  });

  it("adds and removes upstreams; conversations on the ones that remain stay with them", async () => {
    const [e0, e1, e2] = await engines(3);
    const gateway = await createGateway(config(yaml([{ e: e0! }, { e: e1! }])));
    open.push(gateway);
    const before = new Map<string, string>();
    for (let i = 0; i < 12; i++) before.set(`s${i}`, await engineOf(gateway, `s${i}`));
    expect(new Set(before.values())).toEqual(new Set(["e0", "e1"]));
    const change = await gateway.reload(config(yaml([{ e: e1! }, { e: e2! }])));
    expect(change).toMatchObject({ added: [e2!.url], removed: [e0!.url], kept: [{ url: e1!.url, from: 1, to: 0 }], draining: [], needRestart: [] });
    for (const [session, was] of before) {
      const now = await engineOf(gateway, session);
      if (was === "e1") expect(now).toBe("e1"); // its conversation moved with it to rank 0
      else expect(now).not.toBe("e0"); // e0 is gone: placed anew
    }
    const fresh = new Set<string>();
    for (let i = 0; i < 8; i++) fresh.add(await engineOf(gateway, `new-${i}`));
    expect(fresh.has("e2")).toBe(true);
    expect(gateway.router.numRanks).toBe(2);
  });

  it("a removed upstream finishes its in-flight stream; a drained one takes nothing new", async () => {
    const [e0, e1] = await engines(2, { chunks: 6, chunkGapMs: 80 });
    const gateway = await createGateway(config(yaml([{ e: e0! }, { e: e1! }])));
    open.push(gateway);
    const streams = await Promise.all(["a", "b"].map(async (s) => {
      const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": s }, body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: s }] }) });
      const reader = response.body!.getReader();
      await reader.read();
      return { upstream: response.headers.get("x-adp-upstream"), reader };
    }));
    const onE0 = streams.find((x) => x.upstream === "0");
    expect(onE0).toBeDefined();
    await gateway.reload(config(yaml([{ e: e1!, drain: true }])));
    // The stream on the removed e0 still ends normally.
    let text = "";
    for (;;) {
      const { done, value } = await onE0!.reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(text).toContain("[DONE]");
    for (const x of streams) if (x !== onE0) await x.reader.cancel();
    // e1, the one upstream left, is drained: nothing can take a new request.
    const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }] }) });
    expect(response.status).toBe(503);
    await gateway.reload(config(yaml([{ e: e1! }])));
    expect(await engineOf(gateway, "after")).toBe("e1");
  });
});

describe("reload, names and keys", () => {
  it("a kept upstream takes its new key and name", async () => {
    const e = await startMockEngine("keyed", { apiKey: "first-key" });
    open.push(e);
    const text = (key: string) => `listen: { port: 0 }\nlogging: { level: silent }\nupstreams:\n  - url: ${e.url}\n    name: before\n    api_key: ${key}\n`;
    const gateway = await createGateway(config(text("first-key")));
    open.push(gateway);
    const ask = () => fetch(`${gateway.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "x" }) });
    expect((await ask()).status).toBe(200);
    e.behaviour.apiKey = "second-key";
    expect((await ask()).status).toBe(401);
    expect((await gateway.reload(config(text("second-key").replace("name: before", "name: after")))).kept).toHaveLength(1);
    expect((await ask()).status).toBe(200);
    // Its metrics follow its name (the series of an upstream are labelled by it).
    expect(gateway.metrics()).toContain('adp_gateway_upstream_healthy{upstream="after"} 1');
    expect(gateway.metrics()).not.toContain('upstream="before"');
  });
});

describe("reload, counters and admin drains", () => {
  it("keeps the router's counters (each kept upstream's moved to its new rank) and an upstream drained through the admin endpoint stays drained", async () => {
    const [e0, e1, e2] = await engines(3);
    const admin = "auth: { admin_api_key_env: ADMIN_KEY }\n";
    const env = { ADMIN_KEY: "an-admin-key-of-length" };
    const gateway = await createGateway(config(yaml([{ e: e0! }, { e: e1! }], admin), env));
    open.push(gateway);
    for (let i = 0; i < 10; i++) await engineOf(gateway, `c${i}`);
    const counter = (name: string) => Number(/ ([0-9.e+]+)$/.exec(gateway.metrics().split("\n").find((l) => l.startsWith(name))!)![1]);
    const batches = counter("adp_router_batches_total");
    const onE1 = counter('adp_router_rank_selected_total{router="conversation",dp_rank="1"}');
    expect(batches).toBeGreaterThanOrEqual(10);
    expect(onE1).toBeGreaterThan(0);
    expect((await fetch(`${gateway.url}/admin/upstreams/1/drain`, { method: "POST", headers: { authorization: `Bearer ${env.ADMIN_KEY}` } })).status).toBe(200);
    // e1 moves to rank 0, e0 goes, e2 comes: the file says nothing of draining.
    const change = await gateway.reload(config(yaml([{ e: e1! }, { e: e2! }], admin), env));
    expect(change.draining).toEqual([0]);
    expect(counter("adp_router_batches_total")).toBe(batches);
    expect(counter('adp_router_rank_selected_total{router="conversation",dp_rank="0"}')).toBe(onE1);
    expect(counter('adp_router_rank_selected_total{router="conversation",dp_rank="1"}')).toBe(0);
    for (let i = 0; i < 6; i++) expect(await engineOf(gateway, `after-${i}`)).toBe("e2"); // e1 still drained
    expect(counter("adp_router_batches_total")).toBe(batches + 6);
    expect((await fetch(`${gateway.url}/admin/upstreams/0/undrain`, { method: "POST", headers: { authorization: `Bearer ${env.ADMIN_KEY}` } })).status).toBe(200);
    const spread = new Set<string>();
    for (let i = 0; i < 8; i++) spread.add(await engineOf(gateway, `later-${i}`));
    expect(spread.has("e1")).toBe(true);
  });
});

describe("admin endpoints", () => {
  it("are off without an admin key, need it when on, and drain and undrain an upstream", async () => {
    const [e0, e1] = await engines(2);
    const off = await createGateway(config(yaml([{ e: e0! }, { e: e1! }])));
    open.push(off);
    expect((await fetch(`${off.url}/admin/upstreams`)).status).toBe(404);
    const gateway = await createGateway(config(yaml([{ e: e0! }, { e: e1! }], "auth: { admin_api_key_env: ADMIN_KEY }\n"), { ADMIN_KEY: "an-admin-key-of-length" }));
    open.push(gateway);
    expect((await fetch(`${gateway.url}/admin/upstreams`)).status).toBe(401);
    const auth = { authorization: "Bearer an-admin-key-of-length" };
    const drained = await fetch(`${gateway.url}/admin/upstreams/0/drain`, { method: "POST", headers: auth });
    expect(drained.status).toBe(200);
    expect(((await drained.json()) as { upstreams: { draining: boolean }[] }).upstreams.map((u) => u.draining)).toEqual([true, false]);
    for (let i = 0; i < 6; i++) expect(await engineOf(gateway, `d${i}`)).toBe("e1");
    expect((await fetch(`${gateway.url}/admin/upstreams/0/undrain`, { method: "POST", headers: auth })).status).toBe(200);
    expect((await fetch(`${gateway.url}/admin/upstreams/9/drain`, { method: "POST", headers: auth })).status).toBe(404);
    expect((await fetch(`${gateway.url}/admin/upstreams/0/drain`, { headers: auth })).status).toBe(405);
  });
});

describe("adp-router-gateway serve, SIGHUP", () => {
  it("rereads its file and adds an upstream; a broken file changes nothing", async () => {
    const [e0, e1] = await engines(2);
    const dir = mkdtempSync(path.join(tmpdir(), "adp-hup-"));
    const file = path.join(dir, "gateway.yaml");
    writeFileSync(file, yaml([{ e: e0! }]));
    const child = spawn(process.execPath, [path.resolve("gateway/dist/cli.js"), "serve", "--workers", "1", "--config", file], { stdio: ["ignore", "pipe", "pipe"] });
    open.push({ close: async () => void child.kill("SIGKILL") });
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += d));
    const url = await urlFrom(child);
    const gateway = { url } as Gateway;
    writeFileSync(file, "upstreams: [nope\n");
    child.kill("SIGHUP");
    await waitFor(() => stderr.includes("was not reloaded"), () => stderr);
    expect(await engineOf(gateway, "x")).toBe("e0");
    writeFileSync(file, yaml([{ e: e0!, drain: true }, { e: e1! }], "limits: { queue_size: 7 }\n"));
    child.kill("SIGHUP");
    await waitFor(() => stderr.includes("1 added, 0 removed, 1 kept"), () => stderr);
    expect(stderr).toContain("draining: 0; changed but needing a restart: limits");
    expect(await engineOf(gateway, "y")).toBe("e1");
  });
});
