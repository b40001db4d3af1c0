// Replicas sharing one routing state through a real nats-server (JetStream on
// 127.0.0.1): requests spread over three gateways leave them all with the same
// replicated state (same applied sequence, same digest), and a prompt routed
// through one is known to the others. Entries are checked field by field when
// read back; a duplicated delivery changes nothing.
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createEngineCacheView } from "../../src/engine-cache-entry.js";
import { createGateway, createGatewayRouter, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { decodeStateSnapshot, encodeStateSnapshot, SnapshotError, stateDigest } from "../../gateway/src/replication/state-snapshot.js";
import { decodeEntry, encodeEntry, SyncEntryError } from "../../gateway/src/replication/entry-codec.js";
import { startFakePublisher } from "../support/fake-kv-publisher.js";
import { startMockEngine, urlFrom, type MockEngine } from "../support/mock-engine.js";
import { hasNatsServer, startNatsServer, type NatsServer } from "../support/nats-server.js";
import { startProxy } from "../support/tcp-proxy.js";
import { waitFor } from "../support/wait.js";
import { metricsByIndex } from "../support/metrics.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  // Every one closed even when one fails (a server left behind outlives the test run).
  const failures: unknown[] = [];
  while (open.length > 0) await open.pop()!.close().catch((e: unknown) => failures.push(e));
  if (failures.length > 0) throw failures[0];
});

const SYSTEM = "You are the support assistant of a large bookshop; answer briefly. ".repeat(12);

/** A replica's /sync/state. */
async function syncState(g: Gateway): Promise<{ replica: string; applied: number; digest: string }> {
  return (await fetch(`${g.url}/sync/state`)).json() as Promise<{ replica: string; applied: number; digest: string }>;
}

/** A metric's value, or NaN. */
const metric = (g: Gateway, name: string, labels = "") => {
  const line = metricsByIndex(g.metrics()).split("\n").find((l) => l.startsWith(`adp_gateway_${name}${labels ? `{${labels}}` : " "}`));
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(" ") + 1));
};

describe("entries on the wire", () => {
  it("round-trip every shared kind (upstreams named by URL), and a damaged or hostile message is a SyncEntryError", () => {
    const url = "http://engine-a:8000";
    const learn = { op: "learn-blocks" as const, upstream: 2, hashes: Uint32Array.of(1, 2 ** 32 - 1, 7, 0), namespace: { loraTaskId: 5, cacheSalt: "s" } };
    // The receiver's rank for the URL is its own: the decoded entry's is a placeholder.
    expect(decodeEntry(encodeEntry({ origin: "gw-1#ab", counter: 9, url, entry: learn }))).toEqual({ origin: "gw-1#ab", counter: 9, url, entry: { ...learn, upstream: -1 } });
    const events = { ts: 1.5, events: [{ type: "BlockStored", block_hashes: [2n ** 64n - 1n, new Uint8Array([1, 2])] }] };
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 0, url, entry: { op: "kv-events", upstream: 0, events, dpRank: 3, id: "b|7" } })).entry).toEqual({ op: "kv-events", upstream: -1, events, dpRank: 3, id: "b|7" });
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 1, url, entry: { op: "clear", upstream: 1 } })).entry).toEqual({ op: "clear", upstream: -1 });
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 1, url, entry: { op: "clear", upstream: 1, dpRank: 0, id: "e|0|1.5|restart" } })).entry).toEqual({ op: "clear", upstream: -1, dpRank: 0, id: "e|0|1.5|restart" });
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 2, url, entry: { op: "bind", upstream: 1, key: "session-7" } })).entry).toEqual({ op: "bind", upstream: -1, key: "session-7" });
    // Phase 2's DP rank travels with a learned prompt and a binding; a rank out of range is refused.
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 4, url, entry: { ...learn, rank: 3 } })).entry).toEqual({ ...learn, upstream: -1, rank: 3 });
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 5, url, entry: { op: "bind", upstream: 1, key: "s", rank: 0 } })).entry).toEqual({ op: "bind", upstream: -1, key: "s", rank: 0 });
    // A trailing null (a writer that spells "none" so) is no rank, as a DP rank's null is.
    const nullRank = encodeEntry({ origin: "o", counter: 7, url, entry: { op: "bind", upstream: 1, key: "s" } });
    const withNull = new Uint8Array([...nullRank.subarray(0, 1).map((b) => b + 1), ...nullRank.subarray(1), 0xc0]); // fixarray one longer, then nil
    expect(decodeEntry(withNull).entry).toEqual({ op: "bind", upstream: -1, key: "s" });
    for (const rank of [1024, -1, 1.5]) expect(() => decodeEntry(encodeEntry({ origin: "o", counter: 6, url, entry: { op: "bind", upstream: 1, key: "s", rank } }))).toThrow(/rank must be an integer in \[0, 1024\)/);
    const fleet = { op: "fleet" as const, urls: [url, "http://engine-b:8000"], dpRanks: [2, null] };
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 3, entry: fleet })).entry).toEqual(fleet);
    expect(() => decodeEntry(encodeEntry({ origin: "o", counter: 2, url, entry: { op: "bind", upstream: 1, key: "" } }))).toThrow(SyncEntryError);
    expect(() => decodeEntry(encodeEntry({ origin: "o", counter: 3, entry: { ...fleet, urls: [url, url] } }))).toThrow(SyncEntryError);
    expect(() => decodeEntry(encodeEntry({ origin: "o", counter: 3, entry: { ...fleet, dpRanks: [0, null] } }))).toThrow(SyncEntryError);
    // An engine batch's list is bounded by the larger batch limit, as the gateway bounds its engines' (events naming no block are work too).
    const small = { maxFleet: 16, maxLearnBlocks: 64, maxBatchBlocks: 100, maxBatchTokens: 200 };
    const updated = (n: number) => Array.from({ length: n }, () => ({ event_id: 1, data: { type: "updated", block_hash: 5, cache_level: null, priority: { old_value: 1, new_value: 2 } } }));
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 8, url, entry: { op: "kv-events", upstream: 0, events: updated(200) } }), small).entry.op).toBe("kv-events");
    expect(() => decodeEntry(encodeEntry({ origin: "o", counter: 8, url, entry: { op: "kv-events", upstream: 0, events: updated(201) } }), small)).toThrow(/201 events, over this replica's batch limits/);
    const good = encodeEntry({ origin: "o", counter: 1, url, entry: learn });
    for (const bad of [new Uint8Array([0xc1]), good.subarray(0, good.length - 3), new Uint8Array([0x93, 1, 2, 3]), Buffer.from("[1]")]) expect(() => decodeEntry(bad)).toThrow(SyncEntryError);
  });
});

describe("a replica whose NATS is unreachable from the start", () => {
  it("routes on, says so once in its log, and shows it in /health", async () => {
    const engine = await startMockEngine("u");
    open.push(engine);
    const logs: Record<string, unknown>[] = [];
    const text = `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\nsync: { url: "nats://127.0.0.1:1", replica_id: alone }\nupstreams:\n  - url: ${engine.url}\n`;
    const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }), { logger: pino({ level: "warn" }, { write: (l: string) => logs.push(JSON.parse(l) as Record<string, unknown>) }) });
    open.push(g);
    const r = await fetch(`${g.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hello" }) });
    expect(r.status).toBe(200);
    await r.text();
    await waitFor(() => logs.some((l) => String(l.msg).startsWith("sync: NATS unreachable")));
    await new Promise((res) => setTimeout(res, 2_500)); // a few more attempts to connect
    expect(logs.filter((l) => String(l.msg).startsWith("sync: NATS unreachable"))).toHaveLength(1);
    const health = (await (await fetch(`${g.url}/health`)).json()) as { sync: { connected: boolean; pending: number } };
    expect(health.sync).toMatchObject({ connected: false, pending: 1 });
  });
});

describe("snapshots of the replicated state", () => {
  it("restore to the same digest, and a damaged one (any byte, truncated, another digest) is refused", () => {
    const config = loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:9", "http://127.0.0.1:10"], port: 0 }, file: { name: "g.yaml", text: "routing: { tokens_per_block: 4 }\n" } });
    const router = createGatewayRouter(config);
    router.prefixIndex!.insert(1, Uint32Array.from({ length: 64 }, (_, i) => i));
    const view = createEngineCacheView({ numRanks: 2, tokensPerBlock: 4, groups: [{ kind: "full_attention" }, { kind: "sliding_window", slidingWindow: 8 }] });
    const block = (g: number, parent: number | null, hash: number, tokens: number[]) => ({ type: "BlockStored", block_hashes: [hash], parent_block_hash: parent, token_ids: tokens, block_size: 4, lora_id: null, group_idx: g });
    view.applyKvEvents({ ts: 1, events: [block(0, null, 1, [5, 6, 7, 8]), block(1, null, 1, [5, 6, 7, 8]), block(0, 1, 2, [9, 10, 11, 12]), block(1, 1, 2, [9, 10, 11, 12])], data_parallel_rank: 1 });
    const parts = { urls: ["http://127.0.0.1:9", "http://127.0.0.1:10"], router, views: [null, view] };
    const digest = stateDigest(parts);
    const bytes = encodeStateSnapshot(42, parts);
    const back = decodeStateSnapshot(bytes, digest);
    expect(back.seq).toBe(42);
    expect(stateDigest(back.parts)).toBe(digest);
    expect(() => decodeStateSnapshot(bytes, "0".repeat(64))).toThrow(SnapshotError);
    expect(() => decodeStateSnapshot(bytes.subarray(0, bytes.length - 1), digest)).toThrow(SnapshotError);
    for (let i = 0; i < bytes.length; i += Math.max(1, Math.floor(bytes.length / 97))) {
      const damaged = Uint8Array.from(bytes);
      damaged[i]! ^= 0x5a;
      expect(() => decodeStateSnapshot(damaged, digest)).toThrow(SnapshotError);
    }
  });
});

describe.skipIf(!hasNatsServer)("replicas through a real nats-server", () => {
  /** `n` mock engines named `name0`, `name1`, …, closed after the test. */
  async function startEngines(n: number, name: string): Promise<MockEngine[]> {
    const engines: MockEngine[] = [];
    for (let i = 0; i < n; i++) {
      const e = await startMockEngine(`${name}${i}`);
      open.push(e);
      engines.push(e);
    }
    return engines;
  }

  /** The YAML of a replica named `id` of `cluster` in front of `engines`, reaching NATS at `url` (`settings`: more top-level lines; `sync`: more sync fields). */
  function replicaYaml(o: { url: string; cluster: string; id: string; engines: readonly MockEngine[]; settings?: string; sync?: string; upstream?: string }): string {
    const upstreams = o.engines.map((e) => `  - url: ${e.url}\n${o.upstream ?? ""}`).join("");
    return `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 60000 }\n${o.settings ?? "routing: { tokens_per_block: 16 }\n"}sync: { url: "${o.url}", cluster: ${o.cluster}, replica_id: ${o.id}${o.sync ?? ""} }\nupstreams:\n${upstreams}`;
  }

  /** Starts a replica from its YAML (closed after the test). */
  async function startReplica(text: string): Promise<Gateway> {
    const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }));
    open.push(g);
    return g;
  }

  /** Starts replicas from their YAML and waits until every one reaches NATS. */
  async function startReplicas(texts: readonly string[]): Promise<Gateway[]> {
    const gateways: Gateway[] = [];
    for (const text of texts) gateways.push(await startReplica(text));
    await waitFor(() => gateways.every((g) => metric(g, "sync_connected") === 1), () => "replicas connected", 10_000);
    return gateways;
  }

  /** `n` kv_cache_aware replicas `gw-i` of one cluster in front of three engines (replica i reaching NATS at `urls(i)`). */
  async function cluster(n: number, nats: NatsServer, urls: (i: number) => string = () => nats.url, sync = ""): Promise<{ gateways: Gateway[]; engines: MockEngine[] }> {
    const engines = await startEngines(3, "e");
    const gateways = await startReplicas(Array.from({ length: n }, (_, i) => replicaYaml({ url: urls(i), cluster: `t${nats.port}`, id: `gw-${i}`, engines, sync })));
    return { gateways, engines };
  }

  /** A conversation's turn (session header) through `g`; the upstream it went to. */
  async function turn(g: Gateway, session: string, content = "hi"): Promise<number> {
    const r = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": session }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content }] }) });
    await r.text();
    return Number(r.headers.get("x-adp-upstream"));
  }

  const ask = (g: Gateway, content: string) =>
    fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "system", content: SYSTEM }, { role: "user", content }] }) }).then(async (r) => {
      await r.text();
      return { status: r.status, upstream: Number(r.headers.get("x-adp-upstream")) };
    });

  it("three replicas behind a client that spreads requests reach the same applied sequence and digest; a prompt routed through one is known to the others", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const { gateways } = await cluster(3, nats);
    const results = await Promise.all(Array.from({ length: 60 }, (_, i) => ask(gateways[i % 3]!, `question ${i % 20} about a book`)));
    expect(results.every((r) => r.status === 200)).toBe(true);
    await waitFor(() => gateways.every((g) => metric(g, "sync_synced") === 1 && metric(g, "sync_applied_sequence") === 60), () => gateways.map((g) => metric(g, "sync_applied_sequence")).join(","), 10_000);
    const states = await Promise.all(gateways.map(syncState));
    expect(new Set(states.map((s) => s.applied))).toEqual(new Set([60]));
    expect(new Set(states.map((s) => s.digest)).size).toBe(1);
    expect(states.map((s) => s.replica)).toEqual(["gw-0", "gw-1", "gw-2"]);

    // A new prompt through replica 0; once replicated, replica 1 matches it on the same upstream.
    const first = await ask(gateways[0]!, "a question nobody asked before, with a long tail ".repeat(8));
    await waitFor(() => gateways.every((g) => metric(g, "sync_applied_sequence") === 61));
    const matchedBefore = metric(gateways[1]!, "upstream_matched_tokens_total", `upstream="${first.upstream}"`) || 0;
    const again = await ask(gateways[1]!, "a question nobody asked before, with a long tail ".repeat(8));
    expect(again.upstream).toBe(first.upstream);
    expect(metric(gateways[1]!, "upstream_matched_tokens_total", `upstream="${again.upstream}"`) - matchedBefore).toBeGreaterThan(500);
  });

  it("a duplicated delivery and a republished entry change nothing; a message that is not an entry is counted and skipped", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const { gateways: [g], engines } = await cluster(1, nats);
    await ask(g!, "one");
    await waitFor(() => metric(g!, "sync_applied_sequence") === 1);
    const before = await syncState(g!);
    const nc = await connect({ servers: nats.url.slice("nats://".length) });
    const js = jetstream(nc);
    // The same entry id again inside JetStream's duplicate window: dropped by the server.
    const entry = encodeEntry({ origin: "other#1", counter: 0, url: engines[0]!.url, entry: { op: "learn-blocks", upstream: 0, hashes: Uint32Array.from({ length: 8 }, (_, i) => i + 1), namespace: {} } });
    const a = await js.publish(`adp.t${nats.port}.state`, entry, { msgID: "other#1:0" });
    const b = await js.publish(`adp.t${nats.port}.state`, entry, { msgID: "other#1:0" });
    expect(b.duplicate).toBe(true);
    expect(b.seq).toBe(a.seq);
    await js.publish(`adp.t${nats.port}.state`, new Uint8Array([0xc1, 0xc1]), { msgID: "junk" });
    await nc.close();
    await waitFor(() => metric(g!, "sync_applied_sequence") === 3);
    expect(metric(g!, "sync_entries_total", 'outcome="rejected"')).toBe(1);
    const after = await syncState(g!);
    expect(after.digest).not.toBe(before.digest); // the other's entry applied, once
  });

  /**
   * Resolves once every replica is synced and has applied `expected` entries
   * (by default all they published between them); returns their states.
   */
  async function settled(gateways: Gateway[], expected?: number) {
    const target = () => expected ?? gateways.reduce((n, g) => n + metric(g, "sync_entries_total", 'outcome="published"'), 0);
    await waitFor(() => gateways.every((g) => metric(g, "sync_synced") === 1 && metric(g, "sync_applied_sequence") === target()), () => gateways.map((g) => `${metric(g, "sync_synced")}@${metric(g, "sync_applied_sequence")}/${target()}`).join(","), 20_000);
    return Promise.all(gateways.map(syncState));
  }

  it("a nats-server restart mid-load loses no client request and ends with equal digests", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const { gateways } = await cluster(2, nats);
    const statuses: number[] = [];
    let restarted = false;
    await Promise.all(
      Array.from({ length: 4 }, async (_, w) => {
        for (let i = w; i < 160; i += 4) {
          if (i === 80 && !restarted) {
            restarted = true;
            await nats.restart();
          }
          statuses.push((await ask(gateways[i % 2]!, `load ${i % 30}`)).status);
        }
      }),
    );
    expect(statuses).toHaveLength(160);
    expect(statuses.every((s) => s === 200)).toBe(true);
    const states = await settled(gateways);
    expect(states[0]!.applied).toBe(160);
    expect(states[0]!.digest).toBe(states[1]!.digest);
  });

  it("a replica cut off from NATS keeps serving, says it is unsynced, and reconciles when NATS is back", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    // Replica 1 reaches NATS through a TCP proxy the test can cut.
    const proxy = await startProxy(nats.port);
    open.push(proxy);
    const proxyPort = proxy.port;
    const { gateways } = await cluster(2, nats, (i) => (i === 1 ? `nats://127.0.0.1:${proxyPort}` : nats.url));
    for (let i = 0; i < 10; i++) expect((await ask(gateways[i % 2]!, `before ${i}`)).status).toBe(200);
    await settled(gateways);

    // Cut: stop accepting and drop the connections.
    await proxy.cut();
    await waitFor(() => metric(gateways[1]!, "sync_connected") === 0, () => "replica 1 disconnected", 10_000);
    for (let i = 0; i < 10; i++) expect((await ask(gateways[1]!, `while cut ${i}`)).status).toBe(200);
    const health = (await (await fetch(`${gateways[1]!.url}/health`)).json()) as { sync: { synced: boolean; pending: number } };
    expect(health.sync.synced).toBe(false);
    expect(health.sync.pending).toBe(10);

    // Back: the buffered entries go out, and both replicas end equal.
    await proxy.restore();
    const states = await settled(gateways);
    expect(states[0]!.applied).toBe(20);
    expect(states[0]!.digest).toBe(states[1]!.digest);
  });

  it("a replica killed with SIGKILL and started again catches up (from the stored snapshot, then the stream) to the same digest", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const { gateways: [a], engines } = await cluster(1, nats);
    const dir = mkdtempSync(path.join(tmpdir(), "adp-sync-"));
    const file = path.join(dir, "g.yaml");
    // The child replica: the built CLI with the same upstreams as replica a (its id from the command line, which wins).
    writeFileSync(file, replicaYaml({ url: nats.url, cluster: `t${nats.port}`, id: "from-file", engines, sync: ", snapshot_every: 10" }).replace("level: silent", "level: warn"));
    const children: ChildProcess[] = [];
    open.push({ close: async () => void children.forEach((c) => c.exitCode === null && c.kill("SIGKILL")) });
    const startChild = async () => {
      const child = spawn(process.execPath, [path.resolve("gateway/dist/cli.js"), "serve", "--workers", "1", "--config", file, "--replica-id", "gw-child"], { stdio: ["ignore", "pipe", "pipe"] });
      children.push(child);
      return urlFrom(child);
    };
    const state = async (url: string) => (await fetch(`${url}/sync/state`)).json() as Promise<{ applied: number; digest: string }>;
    const post = (url: string, content: string) => fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "system", content: SYSTEM }, { role: "user", content }] }) }).then((r) => (r.text(), r.status));

    let b = await startChild();
    for (let i = 0; i < 20; i++) expect(await post(i % 2 ? b : a!.url, `first ${i}`)).toBe(200);
    // Killed once it has stored a snapshot (every 10 entries).
    const childStored = async () => /adp_gateway_sync_snapshots_total\{op="stored"\} [1-9]/.test(await (await fetch(`${b}/metrics`)).text());
    for (let tries = 0; !(await childStored()) && tries < 100; tries++) await new Promise((r) => setTimeout(r, 50));
    children[0]!.kill("SIGKILL");
    await new Promise((r) => children[0]!.once("exit", r));
    for (let i = 0; i < 10; i++) expect(await post(a!.url, `while down ${i}`)).toBe(200);
    b = await startChild();
    await waitFor(() => metric(a!, "sync_applied_sequence") === 30);
    let sa = await state(a!.url);
    let sb = await state(b);
    const deadline = Date.now() + 15_000;
    while ((sb.applied !== sa.applied || sb.digest !== sa.digest) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      [sa, sb] = [await state(a!.url), await state(b)];
    }
    expect(sb.applied).toBe(30);
    expect(sb.digest).toBe(sa.digest);
    // It started from a stored snapshot, then the stream after it.
    const metricsText = await (await fetch(`${b}/metrics`)).text();
    expect(metricsText).toMatch(/adp_gateway_sync_snapshots_total\{op="loaded"\} 1/);
  });

  it("a replica joining after the stream dropped its early entries starts from the stored snapshot and reaches the same digest", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const { gateways: [a], engines } = await cluster(1, nats, undefined, ", max_entries: 30, snapshot_every: 10");
    for (let i = 0; i < 60; i++) expect((await ask(a!, `early ${i}`)).status).toBe(200);
    await waitFor(() => metric(a!, "sync_applied_sequence") === 60 && metric(a!, "sync_snapshots_total", 'op="stored"') >= 3);
    const first = await ask(a!, "a prompt the late replica never saw routed, long enough to fill blocks ".repeat(6));
    await waitFor(() => metric(a!, "sync_applied_sequence") === 61);

    // A second gateway on the same engines, the same cluster.
    const b = await startReplica(replicaYaml({ url: nats.url, cluster: `t${nats.port}`, id: "late", engines, sync: ", max_entries: 30, snapshot_every: 10" }));
    await waitFor(() => metric(b, "sync_applied_sequence") === 61, () => String(metric(b, "sync_applied_sequence")), 10_000);
    expect(metric(b, "sync_snapshots_total", 'op="loaded"')).toBe(1);
    expect(metric(b, "sync_entries_total", 'outcome="missed"')).toBe(0);
    const [sa, sb] = await Promise.all([syncState(a!), syncState(b)]);
    expect(sb.digest).toBe(sa.digest);
    // Its routing state started from the snapshot: a prompt routed long before it joined is matched there.
    const again = await ask(b, "a prompt the late replica never saw routed, long enough to fill blocks ".repeat(6));
    expect(again.upstream).toBe(first.upstream);
    expect(metric(b, "upstream_matched_tokens_total", `upstream="${first.upstream}"`)).toBeGreaterThan(300);
  });

  it("phase 2 is replicated: a prompt placed on an engine's DP rank through one replica, or a conversation bound there, goes on to that rank through another", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const rankOf = (engines: MockEngine[], upstream: number) => engines[upstream]!.received.at(-1)!.headers["x-data-parallel-rank"];
    for (const policy of ["kv_cache_aware", "conversation"]) {
      const engines = await startEngines(2, `r${policy[0]}`);
      const upstream = "    dp_ranks: 4\n    rank_routing: adp\n";
      const replicas = await startReplicas([0, 1].map((i) => replicaYaml({ url: nats.url, cluster: `r${policy[0]}${nats.port}`, id: `rank-${i}`, engines, upstream, settings: `policy: ${policy}\nrouting: { tokens_per_block: 16 }\n` })));
      const placed: { upstream: number; rank: unknown }[] = [];
      // Eight prompts (or conversations) through replica 0, spread over both engines' ranks.
      for (let k = 0; k < 8; k++) {
        const r = await fetch(`${replicas[0]!.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": `conv-${k}` }, body: JSON.stringify({ model: "m", prompt: `document ${k}: ${"a long shared passage of text ".repeat(20)}` }) });
        await r.text();
        const u = Number(r.headers.get("x-adp-upstream"));
        placed.push({ upstream: u, rank: rankOf(engines, u) });
      }
      expect(new Set(placed.map((p) => `${p.upstream}/${String(p.rank)}`)).size, policy).toBeGreaterThan(2);
      await settled(replicas);
      // Replica 1 routed none of them: it knows their ranks only from the stream.
      for (const k of [5, 2, 7, 0, 3, 6, 1, 4]) {
        const r = await fetch(`${replicas[1]!.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": `conv-${k}` }, body: JSON.stringify({ model: "m", prompt: `document ${k}: ${"a long shared passage of text ".repeat(20)} and a follow-up question` }) });
        await r.text();
        const u = Number(r.headers.get("x-adp-upstream"));
        expect({ upstream: u, rank: rankOf(engines, u) }, `${policy}: request ${k}`).toEqual(placed[k]);
      }
    }
  });

  it("under conversation affinity a conversation started through one replica goes on where it started through the others", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const engines = await startEngines(3, "c");
    const conv = await startReplicas([0, 1, 2].map((i) => replicaYaml({ url: nats.url, cluster: `c${nats.port}`, id: `conv-${i}`, engines, settings: "policy: conversation\n" })));
    const first: number[] = [];
    for (let s = 0; s < 9; s++) first.push(await turn(conv[0]!, `s${s}`));
    expect(new Set(first).size).toBeGreaterThan(1); // spread over the upstreams
    await settled(conv);
    // In another order than they started (a replica placing them anew would spread them from its own cursor).
    for (const s of [8, 3, 7, 1, 5, 0, 4, 6, 2]) {
      expect(await turn(conv[1]!, `s${s}`)).toBe(first[s]);
      expect(await turn(conv[2]!, `s${s}`)).toBe(first[s]);
    }
    const states = await settled(conv);
    expect(new Set(states.map((x) => x.digest)).size).toBe(1);
  });

  it("an engine batch every replica receives is one entry on the stream (its identity as the entry's id), applied once", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const pub = await startFakePublisher(1);
    open.push(pub);
    const [engine] = await startEngines(1, "k");
    const wire = JSON.parse(readFileSync(new URL("../fixtures/kv-events/wire.json", import.meta.url), "utf8")) as { msgpack: Record<string, { hex: string }> };
    const replicas = await startReplicas(
      [0, 1].map((i) => replicaYaml({ url: nats.url, cluster: `k${nats.port}`, id: `kv-${i}`, engines: [engine!], settings: "routing: { tokens_per_block: 4 }\n", upstream: `    kv_events: { kind: zmq, endpoint: "${pub.endpoint}" }\n` })),
    );
    await pub.subscribed(0, 2);
    for (const [seq, name] of ["chain_p", "chain_q", "chain_r"].entries()) await pub.publish(0, BigInt(seq), Buffer.from(wire.msgpack[name]!.hex, "hex"));
    await waitFor(() => replicas.every((g) => metric(g, "sync_entries_total", 'outcome="published"') === 3));
    let states = await settled(replicas, 3);
    expect(states[0]!.applied).toBe(3);
    expect(states[0]!.digest).toBe(states[1]!.digest);
    // The engine restarts: both replicas see it, and the stream holds one clear and one batch for it.
    await pub.publish(0, 0n, Buffer.from(wire.msgpack.vllm_map_lora!.hex, "hex"));
    await waitFor(() => replicas.every((g) => metric(g, "sync_entries_total", 'outcome="published"') === 5));
    states = await settled(replicas, 5);
    expect(states[0]!.digest).toBe(states[1]!.digest);
  });

  it("a fleet change every replica reloads is one entry; the replicated state moves once, keeping what each kept upstream learned", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const engines = await startEngines(3, "f");
    const text = (list: MockEngine[], i: number) => replicaYaml({ url: nats.url, cluster: `f${nats.port}`, id: `f-${i}`, engines: list });
    const replicas = await startReplicas([0, 1].map((i) => text(engines.slice(0, 2), i)));
    const prompt = "a long prompt learned before the fleet changed, ".repeat(10);
    const before = await ask(replicas[0]!, prompt);
    await settled(replicas, 1);
    // Both replicas reload the same file: engine 2 added in front, the others moved.
    for (const [i, g] of replicas.entries()) await g.reload(loadGatewayConfig({ file: { name: "g.yaml", text: text([engines[2]!, engines[1]!, engines[0]!], i) } }));
    const states = await settled(replicas, 2);
    expect(states[0]!.applied).toBe(2); // the learned prompt, and one fleet change for both reloads
    expect(states[0]!.digest).toBe(states[1]!.digest);
    // The prompt is still where it was learned, under that upstream's new rank, through either replica.
    const moved = before.upstream === 0 ? 2 : 1;
    expect((await ask(replicas[1]!, prompt)).upstream).toBe(moved);
  });

  it("two replicas binding one conversation at once end up agreeing on the binding the stream put last", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const engines = await startEngines(3, "r");
    // Both replicas reach NATS through a proxy the test can cut, so both bind before either hears of the other.
    const proxy = await startProxy(nats.port);
    open.push(proxy);
    const proxyPort = proxy.port;
    const replicas = await startReplicas([0, 1].map((i) => replicaYaml({ url: `nats://127.0.0.1:${proxyPort}`, cluster: `r${nats.port}`, id: `race-${i}`, engines, settings: "policy: conversation\n" })));
    await proxy.cut();
    await waitFor(() => replicas.every((g) => metric(g, "sync_connected") === 0), () => "both cut", 10_000);
    await turn(replicas[1]!, "someone else"); // replica 1's placement cursor moves on: it will place "race" elsewhere
    const onA = await turn(replicas[0]!, "race");
    const onB = await turn(replicas[1]!, "race");
    expect(onA).not.toBe(onB);
    await proxy.restore();
    await settled(replicas);
    const nextA = await turn(replicas[0]!, "race");
    const nextB = await turn(replicas[1]!, "race");
    expect(nextA).toBe(nextB);
    expect([onA, onB]).toContain(nextA);
  });
});
