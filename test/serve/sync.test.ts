// Replicas sharing one routing state through a real nats-server (JetStream on
// 127.0.0.1): requests spread over three gateways leave them all with the same
// replicated state (same applied sequence, same digest), and a prompt routed
// through one is known to the others. Entries are checked field by field when
// read back; a duplicated delivery changes nothing.
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, loadGatewayConfig, type Gateway } from "../../src/serve/index.js";
import { decodeEntry, encodeEntry, SyncEntryError } from "../../src/serve/sync/entry-codec.js";
import { startMockEngine } from "../support/mock-engine.js";
import { hasNatsServer, startNatsServer, type NatsServer } from "../support/nats-server.js";
import { waitFor } from "../support/wait.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

const SYSTEM = "You are the support assistant of a large bookshop; answer briefly. ".repeat(12);

/** A replica's /sync/state. */
async function syncState(g: Gateway): Promise<{ replica: string; applied: number; digest: string }> {
  return (await fetch(`${g.url}/sync/state`)).json() as Promise<{ replica: string; applied: number; digest: string }>;
}

/** A metric's value, or NaN. */
const metric = (g: Gateway, name: string, labels = "") => {
  const line = g.metrics().split("\n").find((l) => l.startsWith(`adp_gateway_${name}${labels ? `{${labels}}` : " "}`));
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(" ") + 1));
};

describe("entries on the wire", () => {
  it("round-trip every shared kind, and a damaged or hostile message is a SyncEntryError", () => {
    const learn = { op: "learn" as const, upstream: 2, tokens: Uint32Array.of(1, 2 ** 32 - 1, 7), namespace: { loraTaskId: 5, cacheSalt: "s" } };
    expect(decodeEntry(encodeEntry({ origin: "gw-1#ab", counter: 9, entry: learn }))).toEqual({ origin: "gw-1#ab", counter: 9, entry: learn });
    const events = { ts: 1.5, events: [{ type: "BlockStored", block_hashes: [2n ** 64n - 1n, new Uint8Array([1, 2])] }] };
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 0, entry: { op: "kv-events", upstream: 0, events, dpRank: 3 } })).entry).toEqual({ op: "kv-events", upstream: 0, events, dpRank: 3 });
    expect(decodeEntry(encodeEntry({ origin: "o", counter: 1, entry: { op: "clear", upstream: 1 } })).entry).toEqual({ op: "clear", upstream: 1 });
    const good = encodeEntry({ origin: "o", counter: 1, entry: learn });
    for (const bad of [new Uint8Array([0xc1]), good.subarray(0, good.length - 3), new Uint8Array([0x93, 1, 2, 3]), Buffer.from("[1]")]) expect(() => decodeEntry(bad)).toThrow(SyncEntryError);
  });
});

describe.skipIf(!hasNatsServer)("replicas through a real nats-server", () => {
  async function cluster(n: number, nats: NatsServer): Promise<Gateway[]> {
    const engines = [];
    for (let i = 0; i < 3; i++) {
      const e = await startMockEngine(`e${i}`);
      open.push(e);
      engines.push(e);
    }
    const gateways: Gateway[] = [];
    for (let i = 0; i < n; i++) {
      const text = `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 60000 }\nrouting: { tokens_per_block: 16 }\nsync: { url: "${nats.url}", cluster: t${nats.port}, replica_id: gw-${i} }\nupstreams:\n${engines.map((e) => `  - url: ${e.url}\n`).join("")}`;
      const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }));
      open.push(g);
      gateways.push(g);
    }
    await waitFor(() => gateways.every((g) => metric(g, "sync_connected") === 1), () => "replicas connected", 10_000);
    return gateways;
  }

  const ask = (g: Gateway, content: string) =>
    fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", messages: [{ role: "system", content: SYSTEM }, { role: "user", content }] }) }).then(async (r) => {
      await r.text();
      return { status: r.status, upstream: Number(r.headers.get("x-adp-upstream")) };
    });

  it("three replicas behind a client that spreads requests reach the same applied sequence and digest; a prompt routed through one is known to the others", async () => {
    const nats = await startNatsServer();
    open.push({ close: () => nats.stop() });
    const gateways = await cluster(3, nats);
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
    const [g] = await cluster(1, nats);
    await ask(g!, "one");
    await waitFor(() => metric(g!, "sync_applied_sequence") === 1);
    const before = await syncState(g!);
    const nc = await connect({ servers: nats.url.slice("nats://".length) });
    const js = jetstream(nc);
    // The same entry id again inside JetStream's duplicate window: dropped by the server.
    const entry = encodeEntry({ origin: "other#1", counter: 0, entry: { op: "learn", upstream: 0, tokens: Uint32Array.from({ length: 64 }, (_, i) => i), namespace: {} } });
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
});
