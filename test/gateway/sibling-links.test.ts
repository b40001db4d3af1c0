// The workers' direct links (gateway/src/workers/sibling-links.ts) over real
// Unix sockets made as the primary makes them, and the sequence numbers that
// keep a late relayed load report from replacing a newer one (sibling-log.ts).
import { afterEach, describe, expect, it } from "vitest";
import type { Socket } from "node:net";
import { createGatewayRouter, loadGatewayConfig, RoutingState } from "../../gateway/src/index.js";
import { isLinkMessage, LINK_MESSAGE, MAX_LINE_CHARS, SiblingLinks, socketPair } from "../../gateway/src/workers/sibling-links.js";
import { hashesText, Siblings, STATE_MESSAGE, type StateMessage } from "../../gateway/src/workers/sibling-log.js";

const open: Socket[] = [];
afterEach(() => {
  for (const s of open.splice(0)) s.destroy();
});

/** Two workers' links joined by one pair: what each delivered, and the slots each saw go. */
async function linkedPair() {
  const [a, b] = await socketPair();
  open.push(a, b);
  const got = { 1: [] as unknown[], 2: [] as unknown[] };
  const gone = { 1: [] as number[], 2: [] as number[] };
  const added = { 1: [] as number[], 2: [] as number[] };
  const events = (w: 1 | 2) => ({ deliver: (m: unknown) => got[w].push(m), added: (s: number) => added[w].push(s), ended: (s: number) => gone[w].push(s) });
  const one = new SiblingLinks(1, events(1));
  const two = new SiblingLinks(1, events(2));
  expect(one.relay).toBe(true); // no link yet: through the primary
  expect(one.receive({ type: LINK_MESSAGE, slot: 2 }, a)).toBe(true);
  expect(two.receive({ type: LINK_MESSAGE, slot: 1 }, b)).toBe(true);
  expect(one.relay).toBe(false);
  expect(one.slots()).toEqual([2]);
  expect(added).toEqual({ 1: [2], 2: [1] });
  return { one, two, got, gone, a, b };
}

/** Resolves once `check` holds (polled). */
async function until(check: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 5));
  }
}

const batch = (seq: number, hashes: string, from = 1): StateMessage => ({ type: STATE_MESSAGE, from, epoch: 100, seq, entries: [{ op: "learn-blocks", url: "http://127.0.0.1:1", hashes, namespace: { loraTaskId: null, cacheSalt: null } }], loads: [] });

describe("worker links", () => {
  it("carry every batch whole and in order, lines split across reads included", async () => {
    const { one, got, a } = await linkedPair();
    // 200 batches of up to ~430 KB each (34 MB in all, paced to stay within what a link holds unread): many cross a read's boundary.
    const sent = Array.from({ length: 200 }, (_, i) => batch(i + 1, hashesText(new Uint32Array(2 * (1 + ((i * 7919) % 40_000))).fill(i))));
    for (const m of sent) {
      one.send(m);
      while (a.writableLength > 4 * 1024 * 1024) await new Promise((r) => setTimeout(r, 1));
    }
    await until(() => got[2].length === sent.length);
    expect(got[2]).toEqual(sent);
    expect(one.counters).toEqual({ overflowed: 0, broken: 0, closed: 0 });
  });

  it("end at a line that is not JSON, one under another worker's number, or one longer than the bound, and say the sibling is gone", async () => {
    const bad = await linkedPair();
    bad.a.write("{not json\n");
    await until(() => bad.gone[2].length === 1);
    expect(bad.gone[2]).toEqual([1]);
    expect(bad.two.counters.broken).toBe(1);
    expect(bad.two.size).toBe(0);
    expect(bad.two.relay).toBe(true); // its batches go through the primary again

    const posing = await linkedPair();
    posing.one.send(batch(1, hashesText(new Uint32Array(2)), 3)); // worker 1's link carrying worker 3's batch
    await until(() => posing.gone[2].length === 1);
    expect(posing.two.counters.broken).toBe(1);
    expect(posing.got[2]).toEqual([]);

    const long = await linkedPair();
    const piece = "x".repeat(1 << 20);
    for (let n = 0; n <= MAX_LINE_CHARS; n += piece.length) long.a.write(piece);
    await until(() => long.gone[2].length === 1, 20_000);
    expect(long.two.counters.broken).toBe(1);
    expect(long.got[2]).toEqual([]);
  }, 30_000);

  it("end when a sibling leaves 16 MiB unread (its batches then go through the primary), never holding more", async () => {
    const { one, two, gone, b } = await linkedPair();
    b.pause(); // sibling 2 stops reading
    const big = batch(1, hashesText(new Uint32Array(2 * 100_000))); // ~1 MB a line
    let sent = 0;
    while (one.size === 1 && sent < 200) {
      one.send(big);
      sent++;
    }
    expect(one.counters.overflowed).toBe(1);
    expect(sent).toBeGreaterThan(10); // 16 MiB of ~1 MB lines, less what the kernel took
    expect(sent).toBeLessThan(24);
    expect(one.relay).toBe(true);
    await until(() => gone[1].length === 1);
    expect(two.size === 0 || two.size === 1).toBe(true);
  });

  it("the primary's pair reads nothing itself: what a worker writes first waits for the sibling that takes the other end", async () => {
    const [a, b] = await socketPair();
    open.push(a, b);
    expect((b as unknown as { server: unknown }).server).toBe(null); // not tracked as a server's connection
    a.write(`${JSON.stringify(batch(1, hashesText(new Uint32Array(2))))}\n`);
    await new Promise((r) => setTimeout(r, 100));
    expect(b.bytesRead).toBe(0);
    const got: unknown[] = [];
    new SiblingLinks(1, { deliver: (m) => got.push(m), added: () => {}, ended: () => {} }).receive({ type: LINK_MESSAGE, slot: 1 }, b);
    await until(() => got.length === 1);
  });

  it("a sibling's link that closes says it is gone; a link replaced by a newer one to the same sibling does not", async () => {
    const { two, gone } = await linkedPair();
    const [c, d] = await socketPair();
    open.push(c, d);
    two.receive({ type: LINK_MESSAGE, slot: 1 }, d); // a second link to sibling 1: the first ends, quietly
    await new Promise((r) => setTimeout(r, 50));
    expect(gone[2]).toEqual([]);
    expect(two.size).toBe(1);
    c.destroy();
    await until(() => gone[2].length === 1);
    expect(gone[2]).toEqual([1]);
    expect(two.counters).toEqual({ overflowed: 0, broken: 0, closed: 1 }); // the replaced link's close is not counted
  });

  it("take only the primary's link messages: a bad slot is not one, a handle that is not a socket makes no link", () => {
    const links = new SiblingLinks(2, { deliver: () => {}, added: () => {}, ended: () => {} });
    for (const bad of [null, { type: LINK_MESSAGE }, { type: LINK_MESSAGE, slot: 0 }, { type: LINK_MESSAGE, slot: 1.5 }, { type: LINK_MESSAGE, slot: "2" }, { type: LINK_MESSAGE, slot: 2, lost: 3 }, { type: "other", slot: 2 }]) {
      expect(isLinkMessage(bad)).toBe(false);
      expect(links.receive(bad, undefined)).toBe(false);
    }
    expect(isLinkMessage({ type: LINK_MESSAGE, lost: 3 })).toBe(true); // a worker's, to the primary: not taken here
    expect(links.receive({ type: LINK_MESSAGE, lost: 3 }, undefined)).toBe(false);
    expect(links.receive({ type: LINK_MESSAGE, slot: 2 }, { not: "a socket" })).toBe(true);
    expect(links.size).toBe(0);
    expect(links.relay).toBe(true);
  });
});

describe("a worker's siblings' load reports", () => {
  it("an older report (a relayed batch arriving after a newer one on a link) is not taken, nor one of a process gone; their entries are", () => {
    const config = loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:1", "http://127.0.0.1:2"] } });
    const state = new RoutingState(createGatewayRouter(config));
    const siblings = new Siblings(() => {}, 1);
    const urls = config.upstreams.map((u) => u.url);
    const sums = new Map<number, number>();
    siblings.start(state, () => urls, () => [], (i, n) => sums.set(i, n));
    const report = (epoch: number, seq: number, inFlight: number, entries: StateMessage["entries"] = []): StateMessage => ({ type: STATE_MESSAGE, from: 2, epoch, seq, entries, loads: [{ url: urls[0]!, inFlight, inFlightTokens: 0 }] });
    const hashes = state.router.prefixIndex!.blockHashes(new Uint32Array(config.routing.tokensPerBlock).fill(3));
    siblings.receive(report(100, 5, 4));
    expect(sums.get(0)).toBe(4);
    siblings.receive(report(100, 3, 9, [{ op: "learn-blocks", url: urls[1]!, hashes: hashesText(hashes), namespace: {} }]));
    expect(sums.get(0)).toBe(4); // older: its load not taken
    expect(siblings.counters.applied).toBe(1); // its entry is
    siblings.receive(report(100, 6, 3));
    expect(sums.get(0)).toBe(3);
    siblings.gone(2); // its link ended: process 100 is taken as gone
    expect(sums.get(0)).toBe(0);
    siblings.receive(report(100, 7, 5)); // a late batch of it (relayed): not taken for its loads
    expect(sums.get(0)).toBe(0);
    siblings.receive(report(200, 1, 2)); // its restart numbers from 1 again, under a new process id
    expect(sums.get(0)).toBe(2);
    siblings.receive({ type: STATE_MESSAGE, from: 2, epoch: 200, seq: 0, ended: true, entries: [], loads: [] }); // the primary: it exited
    expect(sums.get(0)).toBe(0);
    siblings.receive(report(200, 9, 6));
    expect(sums.get(0)).toBe(0);
    siblings.receive(report(300, 1, 7));
    expect(sums.get(0)).toBe(7);
    expect(siblings.counters.rejected).toBe(0);
  });
});
