// Replicas on a NATS that requires credentials and TLS, against a real
// nats-server started by the tests with an authorization block (a token, users
// with passwords) and a TLS setup signed by a throw-away CA made here with
// openssl: replicas sync with their credentials, a client without them cannot
// publish, and a replica whose sync cannot work says why in its log and in
// /health (authentication, TLS, JetStream not enabled), never with a secret.
// Secrets are taken only from files and environment variables.
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";
import { encodeEntry } from "../../gateway/src/replication/entry-codec.js";
import { sign } from "../../gateway/src/replication/entry-signing.js";
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, GatewayConfigError, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine, type MockEngine } from "../support/mock-engine.js";
import { hasNatsServer, startNatsServer, type NatsServer, type NatsServerOptions } from "../support/nats-server.js";
import { waitFor } from "../support/wait.js";

/** Resolves once `condition` (async) holds, polling every 50 ms; throws after `ms` with `what`. */
async function until(condition: () => Promise<boolean>, what: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  const failures: unknown[] = [];
  while (open.length > 0) await open.pop()!.close().catch((e: unknown) => failures.push(e));
  if (failures.length > 0) throw failures[0];
});

const TOKEN = "tok-3f9a1c77e2b04d5e8a6b";
const PASSWORD = "pw-91c2d8e7f6a54b3c";
const dir = mkdtempSync(path.join(tmpdir(), "adp-nats-sec-"));
const file = (name: string, text: string) => {
  const p = path.join(dir, name);
  writeFileSync(p, text);
  return p;
};

/** A throw-away CA, and a server and a client certificate it signs (openssl). */
function makeCertificates(): { ca: string; serverCert: string; serverKey: string; clientCert: string; clientKey: string } {
  const at = (n: string) => path.join(dir, n);
  const run = (...args: string[]) => execFileSync("openssl", args, { stdio: "ignore" });
  run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", at("ca-key.pem"), "-out", at("ca.pem"), "-days", "1", "-subj", "/CN=adp-test-ca");
  for (const who of ["server", "client"]) {
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", at(`${who}-key.pem`), "-out", at(`${who}.csr`), "-subj", `/CN=${who === "server" ? "127.0.0.1" : "adp-gateway"}`);
    writeFileSync(at(`${who}.ext`), who === "server" ? "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n" : "extendedKeyUsage=clientAuth\n");
    run("x509", "-req", "-in", at(`${who}.csr`), "-CA", at("ca.pem"), "-CAkey", at("ca-key.pem"), "-CAcreateserial", "-out", at(`${who}.pem`), "-days", "1", "-extfile", at(`${who}.ext`));
  }
  return { ca: at("ca.pem"), serverCert: at("server.pem"), serverKey: at("server-key.pem"), clientCert: at("client.pem"), clientKey: at("client-key.pem") };
}

/** A nats-server for one test, stopped after it. */
async function nats(options: NatsServerOptions): Promise<NatsServer> {
  const server = await startNatsServer(options);
  open.push({ close: () => server.stop() });
  return server;
}

/** A replica with `sync` (YAML) in front of `engine`, its log lines kept; `env` is where its `*_env` settings are read. */
async function replica(engine: MockEngine, sync: string, env: Record<string, string> = {}): Promise<{ gateway: Gateway; logs: Record<string, unknown>[] }> {
  const logs: Record<string, unknown>[] = [];
  const text = `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\npolicy: conversation\nsync: ${sync}\nupstreams:\n  - url: ${engine.url}\n`;
  const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text }, env }), { logger: pino({ level: "info" }, { write: (l: string) => logs.push(JSON.parse(l) as Record<string, unknown>) }) });
  open.push(gateway);
  return { gateway, logs };
}

/** /health's body. */
const health = async (g: Gateway) => (await (await fetch(`${g.url}/health`)).json()) as { status: string; sync: { connected: boolean; synced: boolean; problem?: string } };

/** A chat through `g` in conversation `session`. */
const ask = async (g: Gateway, session: string) => {
  const r = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": session }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: `hello ${session}` }] }) });
  await r.text();
  return r.status;
};

/** Two replicas on `url` with `sync` settings reach the same applied sequence and digest after requests through both. */
async function syncedPair(engine: MockEngine, sync: string, env: Record<string, string> = {}): Promise<Gateway[]> {
  const a = await replica(engine, sync.replace("REPLICA", "sec-a"), env);
  const b = await replica(engine, sync.replace("REPLICA", "sec-b"), env);
  await until(async () => (await health(a.gateway)).sync.connected && (await health(b.gateway)).sync.connected, "both connected", 10_000);
  for (let i = 0; i < 6; i++) expect(await ask(i % 2 === 0 ? a.gateway : b.gateway, `s${i}`)).toBe(200);
  const state = async (g: Gateway) => (await (await fetch(`${g.url}/sync/state`)).json()) as { applied: number; digest: string };
  await until(async () => {
    const [x, y] = [await state(a.gateway), await state(b.gateway)];
    return x.applied >= 6 && x.applied === y.applied && x.digest === y.digest;
  }, "equal states", 15_000);
  for (const { logs } of [a, b]) expect(JSON.stringify(logs)).not.toMatch(new RegExp(`${TOKEN}|${PASSWORD}`));
  return [a.gateway, b.gateway];
}

describe.skipIf(!hasNatsServer)("replicas on a NATS that requires credentials", () => {
  it("a token from an environment variable: replicas sync; a client without it cannot publish; a wrong one is 'authentication failed' in the log and /health, the token never shown", async () => {
    const engine = await startMockEngine("e");
    open.push(engine);
    const server = await nats({ conf: `authorization { token: "${TOKEN}" }` });
    const sync = `{ url: "${server.url}", replica_id: REPLICA, auth: { token_env: NATS_TOKEN } }`;
    await syncedPair(engine, sync, { NATS_TOKEN: TOKEN });
    // A client that has no token is refused by the server: it cannot publish a forged entry.
    await expect(connect({ servers: server.url.replace("nats://", ""), reconnect: false })).rejects.toThrow(/authorization/i);
    // A wrong token: the replica routes on, says why, and /health says degraded (200: it still routes).
    const { gateway, logs } = await replica(engine, `{ url: "${server.url}", replica_id: wrong, auth: { token_env: NATS_TOKEN } }`, { NATS_TOKEN: "not-the-token-0000" });
    await waitFor(() => logs.some((l) => l.problem === "authentication failed"), () => JSON.stringify(logs.map((l) => l.msg)), 10_000);
    const response = await fetch(`${gateway.url}/health`);
    expect(response.status).toBe(200);
    expect(((await response.json()) as { status: string; sync: { problem: string } })).toMatchObject({ status: "degraded", sync: { problem: "authentication failed", connected: false } });
    expect(await ask(gateway, "still-routes")).toBe(200);
    expect(JSON.stringify(logs)).not.toContain("not-the-token-0000");
  });

  it("a user and a password from a file: replicas sync", async () => {
    const engine = await startMockEngine("e");
    open.push(engine);
    const server = await nats({ conf: `authorization { users = [ { user: gateway, password: "${PASSWORD}" } ] }` });
    const secret = file("nats-password", `${PASSWORD}\n`);
    await syncedPair(engine, `{ url: "${server.url}", replica_id: REPLICA, auth: { user: gateway, password_file: "${secret}" } }`);
  });

  it("TLS with a client certificate (a throw-away CA): replicas sync; without the CA or without a client certificate it is 'TLS failed'", async () => {
    const engine = await startMockEngine("e");
    open.push(engine);
    const c = makeCertificates();
    const server = await nats({ conf: `tls { cert_file: "${c.serverCert}", key_file: "${c.serverKey}", ca_file: "${c.ca}", verify: true }` });
    const url = server.url.replace("nats://", "tls://");
    await syncedPair(engine, `{ url: "${url}", replica_id: REPLICA, tls: { ca_file: "${c.ca}", cert_file: "${c.clientCert}", key_file: "${c.clientKey}" } }`);
    for (const tls of [`{ cert_file: "${c.clientCert}", key_file: "${c.clientKey}" }`, `{ ca_file: "${c.ca}" }`]) {
      const { gateway, logs } = await replica(engine, `{ url: "${url}", replica_id: no-tls, tls: ${tls} }`);
      // Named within its first attempts (on a loaded machine one attempt's socket may be reset before the TLS alert is
      // read: that attempt honestly reads as unreachable), and never anything but TLS or unreachable.
      // A loaded machine may read the first attempts as unreachable: the retries (backing off) name TLS within 30 s.
      await waitFor(() => logs.some((l) => l.problem === "TLS failed"), () => JSON.stringify(logs.filter((l) => l.problem !== undefined).map((l) => l.problem)), 30_000);
      expect(logs.filter((l) => l.problem !== undefined && l.problem !== "TLS failed" && l.problem !== "NATS unreachable")).toEqual([]);
      await until(async () => (await health(gateway)).sync.problem === "TLS failed", "/health names TLS", 30_000);
    }
  }, 150_000);

  it("a NATS without JetStream is said as such, not as unreachable", async () => {
    const engine = await startMockEngine("e");
    open.push(engine);
    const server = await nats({ jetstream: false });
    const { gateway, logs } = await replica(engine, `{ url: "${server.url}", replica_id: nojs }`);
    await waitFor(() => logs.some((l) => l.problem !== undefined), () => "a problem logged", 10_000);
    expect(logs.find((l) => l.problem !== undefined)!.problem).toBe("JetStream is not enabled on the NATS server");
    expect(await health(gateway)).toMatchObject({ status: "degraded", sync: { problem: "JetStream is not enabled on the NATS server" } });
  });
});

describe.skipIf(!hasNatsServer)("signed entries: a rogue client that can publish cannot rewrite the replicated state", () => {
  const KEY = "k-0123456789abcdef0123456789abcdef";
  /** Two replicas (conversation affinity, two engines) of cluster `sec` on an open NATS, signing with KEY; their logs kept. */
  async function signedPair(server: NatsServer, extraSync = "") {
    const engines = [await startMockEngine("x"), await startMockEngine("y")];
    for (const e of engines) open.push(e);
    const make = async (id: string) => {
      const logs: Record<string, unknown>[] = [];
      const text = `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\npolicy: conversation\nsync: { url: "${server.url}", cluster: sec, replica_id: ${id}, signing: { keys: [{ id: k1, key_env: SYNC_KEY }] }${extraSync} }\nupstreams:\n${engines.map((e) => `  - ${e.url}\n`).join("")}`;
      const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text }, env: { SYNC_KEY: KEY } }), { logger: pino({ level: "info" }, { write: (l: string) => logs.push(JSON.parse(l) as Record<string, unknown>) }) });
      open.push(gateway);
      return { gateway, logs };
    };
    const a = await make("sig-a");
    const b = await make("sig-b");
    await until(async () => (await health(a.gateway)).sync.connected && (await health(b.gateway)).sync.connected, "both connected", 10_000);
    return { a, b, engines };
  }
  /** The upstream index a conversation's request through `g` went to. */
  const upstreamOf = async (g: Gateway, session: string) => {
    const r = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", "x-session-id": session }, body: JSON.stringify({ model: "m", messages: [{ role: "user", content: `turn of ${session}` }] }) });
    await r.text();
    return Number(r.headers.get("x-adp-upstream"));
  };
  const rejected = (g: Gateway, reason: string) => Number(new RegExp(`^adp_gateway_sync_rejected_entries_total\\{reason="${reason}"\\} (\\d+)$`, "m").exec(g.metrics())?.[1]);

  it("forged bind entries, unsigned or signed with another key, move no conversation on any replica; each is counted by reason", async () => {
    // Before (c7c7aac): one forged bind entry moved the conversation on every replica.
    const server = await nats({});
    const { a, b, engines } = await signedPair(server);
    const first = await upstreamOf(a.gateway, "c1");
    await until(async () => (await upstreamOf(b.gateway, "c1")) === first, "b follows a's binding", 10_000);
    const other = engines[1 - first]!;
    const rogue = await connect({ servers: server.url.replace("nats://", "") });
    open.push({ close: () => rogue.close() });
    const forged = encodeEntry({ origin: "rogue#1", counter: 0, url: other.url, entry: { op: "bind", upstream: 1 - first, key: "c1" } });
    rogue.publish("adp.sec.state", forged);
    rogue.publish("adp.sec.state", sign(forged, { id: "k1", secret: Buffer.from("not-the-key-not-the-key-not-the-key") }));
    rogue.publish("adp.sec.state", sign(forged, { id: "k9", secret: Buffer.from(KEY) }));
    await rogue.flush();
    await until(async () => rejected(a.gateway, "unsigned") === 1 && rejected(b.gateway, "bad signature") === 1 && rejected(b.gateway, "unknown key") === 1, "the forgeries rejected", 10_000);
    for (const g of [a.gateway, b.gateway]) for (let i = 0; i < 3; i++) expect(await upstreamOf(g, "c1")).toBe(first);
    // Rate-limited: three rejections, one log line per replica.
    expect(a.logs.filter((l) => String(l.msg).startsWith("sync: a stream message was not applied"))).toHaveLength(1);
    expect(a.logs.some((l) => String(l.msg).startsWith("sync: entries are unauthenticated"))).toBe(false);
  });

  it("a planted snapshot claiming a sequence the stream never reached stops no replica from storing its own", async () => {
    // Before (c7c7aac): a "latest" object whose description said seq 9e15 stopped every replica from storing snapshots.
    const server = await nats({});
    const { a } = await signedPair(server, ", snapshot_every: 4, max_entries: 100");
    const rogue = await connect({ servers: server.url.replace("nats://", "") });
    open.push({ close: () => rogue.close() });
    const store = await new Objm(rogue).create("adp_sec_snapshots");
    await store.putBlob({ name: "latest", description: JSON.stringify({ seq: 9e15, digest: "planted" }) }, new Uint8Array([1, 2, 3]));
    const stored = () => Number(/^adp_gateway_sync_snapshots_total\{op="stored"\} (\d+)$/m.exec(a.gateway.metrics())?.[1]);
    for (let i = 0; i < 12; i++) await upstreamOf(a.gateway, `p${i}`);
    await until(async () => stored() >= 1, "a snapshot stored over the planted one", 10_000);
    const info = await store.info("latest");
    expect((JSON.parse(info!.description!) as { seq: number }).seq).toBeLessThan(100);
  });

  it("a fleet change over sync.max_fleet is rejected before anything is built for it, and replication goes on", async () => {
    // Before (c7c7aac): 10,000 URLs took a replica from 83 MB to 915 MB RSS and blocked /health for seconds.
    const server = await nats({});
    const { a, b } = await signedPair(server, ", max_fleet: 16");
    const rogue = await connect({ servers: server.url.replace("nats://", "") });
    open.push({ close: () => rogue.close() });
    const urls = Array.from({ length: 10_000 }, (_, i) => `http://10.0.${i >> 8}.${i & 255}:8000`);
    // Signed with the cluster's key: even a replica's own (or a keyholder's) fleet change is bounded.
    rogue.publish("adp.sec.state", sign(encodeEntry({ origin: "rogue#2", counter: 0, entry: { op: "fleet", urls, dpRanks: urls.map(() => null) } }), { id: "k1", secret: Buffer.from(KEY) }));
    await rogue.flush();
    await until(async () => rejected(a.gateway, "over the local bounds") === 1 && rejected(b.gateway, "over the local bounds") === 1, "the fleet change rejected", 10_000);
    // Entries after it still apply on both (before, a forged fleet made replicas skip every later entry).
    const state = async (g: Gateway) => (await (await fetch(`${g.url}/sync/state`)).json()) as { applied: number; digest: string };
    const before = (await state(a.gateway)).applied;
    for (let i = 0; i < 4; i++) await upstreamOf(i % 2 === 0 ? a.gateway : b.gateway, `after-fleet-${i}`);
    await until(async () => {
      const [x, y] = [await state(a.gateway), await state(b.gateway)];
      return x.applied >= before + 4 && x.applied === y.applied && x.digest === y.digest;
    }, "both apply the entries after it, to equal states", 10_000);
    expect(rejected(a.gateway, "not applicable")).toBe(0);
    expect((await health(a.gateway)).status).toBe("ok");
  });

  it("a forged fleet entry, unsigned, stops no replication: every later binding still reaches both replicas", async () => {
    // Before (c7c7aac): one forged fleet entry made every replica skip every later entry; 10 of 10 conversations split.
    const server = await nats({});
    const { a, b, engines } = await signedPair(server);
    const rogue = await connect({ servers: server.url.replace("nats://", "") });
    open.push({ close: () => rogue.close() });
    rogue.publish("adp.sec.state", encodeEntry({ origin: "rogue#3", counter: 0, entry: { op: "fleet", urls: [engines[0]!.url], dpRanks: [null] } }));
    await rogue.flush();
    await until(async () => rejected(a.gateway, "unsigned") === 1 && rejected(b.gateway, "unsigned") === 1, "the forged fleet rejected", 10_000);
    const synced = async (g: Gateway) => (await (await fetch(`${g.url}/sync/state`)).json()) as { applied: number; digest: string };
    const jsm = await jetstreamManager(rogue);
    for (let i = 0; i < 10; i++) {
      const first = await upstreamOf(a.gateway, `conv-${i}`);
      // b is asked once both replicas have applied the whole stream, a's binding in it (asked before, b would bind the
      // conversation itself and the stream's later binding would win on both: a race, not the attack).
      await until(async () => (await health(a.gateway)).sync.synced && (await synced(a.gateway)).applied > 0, `a publishes its binding of conv-${i}`, 10_000);
      const last = (await jsm.streams.info("ADP_sec")).state.last_seq;
      await until(async () => {
        const [x, y] = await Promise.all([synced(a.gateway), synced(b.gateway)]);
        return x.applied >= last && x.applied === y.applied && x.digest === y.digest;
      }, `both replicas apply the stream up to its entry ${last} (a's binding of conv-${i})`, 10_000);
      expect(await upstreamOf(b.gateway, `conv-${i}`)).toBe(first);
    }
    expect(rejected(a.gateway, "not applicable")).toBe(0);
  });

  it("with signing on, hostile entries grow no replica's memory: unsigned ones are dropped unread, a keyholder's over the local bounds rejected", async () => {
    // max_payload 8 MiB: room for a keyholder's entry past the replicas' own bounds (2 MiB of block hashes).
    const server = await nats({ conf: "max_payload: 8388608" });
    const { a, b } = await signedPair(server);
    const used = (g: Gateway, bound: string) => Number(new RegExp(`^adp_gateway_bound_used\\{bound="${bound}"\\} (\\d+)$`, "m").exec(g.metrics())?.[1]);
    const before = [used(a.gateway, "replicated_index_bytes"), used(a.gateway, "learned_index_bytes")];
    const rogue = await connect({ servers: server.url.replace("nats://", "") });
    open.push({ close: () => rogue.close() });
    const upstreamUrl = /url="([^"]+)"/.exec(a.gateway.metrics())![1]!;
    // 100 learned prompts of 60,000 blocks each (480 KB apiece), unsigned: none is decoded.
    const hashes = new Uint32Array(120_000).map((_, i) => i * 2654435761);
    for (let i = 0; i < 100; i++) rogue.publish("adp.sec.state", encodeEntry({ origin: "rogue#4", counter: i, url: upstreamUrl, entry: { op: "learn-blocks", upstream: 0, hashes, namespace: { loraTaskId: null, cacheSalt: null } } }));
    // A keyholder's entries over this replica's bounds: a prompt past limits.max_prompt_tokens, an engine batch past its batch limits.
    const key = { id: "k1", secret: Buffer.from(KEY) };
    const long = new Uint32Array(2 * (Math.ceil(4194304 / 16) + 1));
    rogue.publish("adp.sec.state", sign(encodeEntry({ origin: "rogue#5", counter: 0, url: upstreamUrl, entry: { op: "learn-blocks", upstream: 0, hashes: long, namespace: { loraTaskId: null, cacheSalt: null } } }), key));
    const events = { ts: 1, events: [{ type: "BlockRemoved", block_hashes: Array.from({ length: 40_000 }, (_, i) => i + 1) }] };
    rogue.publish("adp.sec.state", sign(encodeEntry({ origin: "rogue#5", counter: 1, url: upstreamUrl, entry: { op: "kv-events", upstream: 0, events } }), key));
    await rogue.flush();
    await until(async () => rejected(a.gateway, "unsigned") === 100 && rejected(b.gateway, "unsigned") === 100, "the unsigned entries dropped", 20_000);
    await until(async () => rejected(a.gateway, "over the local bounds") === 2 && rejected(b.gateway, "over the local bounds") === 2, "the keyholder's entries rejected", 10_000);
    expect([used(a.gateway, "replicated_index_bytes"), used(a.gateway, "learned_index_bytes")]).toEqual(before);
    expect((await health(a.gateway)).status).toBe("ok");
  });

  it("without signing, a fleet entry with a bigint DP rank is rejected and counted, and the consumer goes on", async () => {
    // Before (c7c7aac): a TypeError restarted the consumer instead of a counted rejection.
    const server = await nats({});
    const engine = await startMockEngine("e");
    open.push(engine);
    const sync = `{ url: "${server.url}", cluster: sec, replica_id: REPLICA }`;
    const { gateway: a } = await replica(engine, sync.replace("REPLICA", "plain-a"));
    const { gateway: b, logs } = await replica(engine, sync.replace("REPLICA", "plain-b"));
    await until(async () => (await health(a)).sync.connected && (await health(b)).sync.connected, "both connected", 10_000);
    const rogue = await connect({ servers: server.url.replace("nats://", "") });
    open.push({ close: () => rogue.close() });
    rogue.publish("adp.sec.state", encodeEntry({ origin: "rogue#6", counter: 0, entry: { op: "fleet", urls: [engine.url], dpRanks: [2n as unknown as number] } }));
    await rogue.flush();
    await until(async () => rejected(b, "not an entry") === 1, "the entry rejected", 10_000);
    expect(logs.some((l) => String(l.msg).startsWith("sync: stream consumer stopped"))).toBe(false);
    for (let i = 0; i < 4; i++) expect(await ask(a, `after-${i}`)).toBe(200);
    const state = async (g: Gateway) => (await (await fetch(`${g.url}/sync/state`)).json()) as { applied: number; digest: string };
    await until(async () => {
      const [x, y] = [await state(a), await state(b)];
      return x.applied >= 5 && x.applied === y.applied && x.digest === y.digest;
    }, "both apply what follows", 10_000);
  });

  it("without keys, the start says plainly that entries are unauthenticated", async () => {
    const engine = await startMockEngine("e");
    open.push(engine);
    const { logs } = await replica(engine, `{ url: "nats://127.0.0.1:1", replica_id: open-one }`);
    expect(logs.some((l) => String(l.msg).startsWith("sync: entries are unauthenticated"))).toBe(true);
  });
});

describe.skipIf(!hasNatsServer)("no stuck entries", () => {
  it("a learned prompt too long for the server's max_payload is shared up to the blocks that fit: logged, counted, nothing pending, and the other replica learns that prefix", async () => {
    // Before (c7c7aac): the publish was refused, the entry put back and retried for ever, silently; the replica said pending 1 for good.
    const server = await nats({ conf: "max_payload: 65536" });
    const engine = await startMockEngine("e");
    open.push(engine);
    const make = async (id: string) => {
      const logs: Record<string, unknown>[] = [];
      const text = `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\nrouting: { tokens_per_block: 1 }\nsync: { url: "${server.url}", replica_id: ${id} }\nupstreams:\n  - url: ${engine.url}\n`;
      const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }), { logger: pino({ level: "info" }, { write: (l: string) => logs.push(JSON.parse(l) as Record<string, unknown>) }) });
      open.push(g);
      await until(async () => (await health(g)).sync.connected, "connected", 10_000);
      return { g, logs };
    };
    const { g, logs } = await make("big");
    const { g: other } = await make("other");
    const complete = async (via: Gateway, prompt: string) => {
      const r = await fetch(`${via.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt }) });
      expect(r.status).toBe(200);
      await r.text();
    };
    const entries = (via: Gateway, outcome: string) => Number(new RegExp(`^adp_gateway_sync_entries_total\\{outcome="${outcome}"\\} (\\d+)$`, "m").exec(via.metrics())?.[1]);
    // 10,000 one-byte blocks: a learned prompt of about 80 KB of block hashes, over 64 KiB.
    await complete(g, "x".repeat(10_000));
    await until(async () => entries(g, "truncated") === 1 && entries(g, "published") === 1, "the prompt shared, cut to fit", 10_000);
    await until(async () => (await health(g)).sync.synced, "synced, nothing pending", 10_000);
    expect(entries(g, "too_large")).toBe(0);
    expect(logs.some((l) => String(l.msg).startsWith("sync: a learned prompt too long for the NATS server's max_payload") && l.max_payload === 65536)).toBe(true);
    // The other replica learned the prefix that fit: the same prompt there matches thousands of its tokens, not all.
    const matched = () => Number(/^adp_gateway_upstream_matched_tokens_total\{upstream="[^"]*"\} (\d+)$/m.exec(other.metrics())?.[1]);
    await until(async () => entries(other, "applied") >= 1, "the entry applied on the other replica", 10_000);
    await complete(other, "x".repeat(10_000));
    expect(matched()).toBeGreaterThan(5_000);
    expect(matched()).toBeLessThan(10_000);
  });
});

describe("sync.auth and sync.tls in the configuration", () => {
  const load = (sync: string, env: Record<string, string> = {}) => () => loadGatewayConfig({ file: { name: "g.yaml", text: `upstreams: [http://127.0.0.1:9]\nsync: ${sync}\n` }, env });
  const problems = (f: () => unknown) => {
    try {
      f();
    } catch (error) {
      if (error instanceof GatewayConfigError) return error.message;
      throw error;
    }
    throw new Error("accepted");
  };

  it("secrets only from files or environment variables, one way to authenticate, and no value in any message", () => {
    expect(problems(load(`{ url: "nats://h:4222", auth: { token: "inline-secret-123" } }`))).toContain("sync.auth.token: is not taken inline");
    expect(problems(load(`{ url: "nats://h:4222", auth: { token: "inline-secret-123" } }`))).not.toContain("inline-secret-123");
    expect(problems(load(`{ url: "nats://h:4222", auth: { token_env: A, token_file: /x } }`, { A: "v" }))).toContain("set token_env or token_file, not both");
    expect(problems(load(`{ url: "nats://h:4222", auth: { token_env: NOPE } }`))).toContain("sync.auth.token_env: names NOPE, which is not set");
    expect(problems(load(`{ url: "nats://h:4222", auth: { user: u } }`))).toContain("sync.auth.password_env: is required with a user");
    expect(problems(load(`{ url: "nats://h:4222", auth: { token_env: A, user: u, password_env: A } }`, { A: "v" }))).toContain("takes one way to authenticate");
    expect(problems(load(`{ url: "nats://h:4222", auth: {} }`))).toContain("names no way to authenticate");
    expect(problems(load(`{ url: "nats://h:4222", auth: { nkey_seed_file: "${file("bad-seed", "not a seed")}" } }`))).toContain("does not hold a user nkey seed");
    expect(problems(load(`{ url: "nats://h:4222", auth: { creds_file: /nonexistent/x.creds } }`))).toContain("cannot be read (ENOENT)");
    expect(problems(load(`{ url: "nats://h:4222", tls: { ca_file: "${file("ca-x.pem", "x")}" } }`))).toContain("write tls://HOST:PORT");
    expect(problems(load(`{ url: "tls://h:4222", tls: { cert_file: "${file("c.pem", "x")}" } }`))).toContain("goes with cert_file and key_file both");
    expect(problems(load(`{ url: "nats://h:4222", signing: { keys: [{ id: k1, key_env: K }] } }`, { K: "short-key" }))).toContain("holds a key of 9 bytes: at least 32");
    expect(problems(load(`{ url: "nats://h:4222", signing: { keys: [{ id: k1, key_env: K }] } }`, { K: "short-key" }))).not.toContain("short-key");
    expect(problems(load(`{ url: "nats://h:4222", signing: { keys: [{ id: k1, key: inline-signing-key-inline-signing-key }] } }`))).toContain("sync.signing.keys[0].key: is not taken inline");
    expect(problems(load(`{ url: "nats://h:4222", signing: { keys: [] } }`))).toContain("must list at least one key");
    const ok = load(`{ url: "tls://h:4222", auth: { user: gw, password_env: P }, tls: { ca_file: "${file("ca-y.pem", "x")}" } }`, { P: PASSWORD })() as { sync: { auth: unknown; tls: unknown } };
    expect(ok.sync.auth).toEqual({ kind: "user", user: "gw", password: PASSWORD });
    expect(ok.sync.tls).toMatchObject({ caFile: path.join(dir, "ca-y.pem"), certFile: null, keyFile: null });
  });
});
