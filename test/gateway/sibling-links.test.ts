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
  const one = new SiblingLinks((m) => got[1].push(m), (s) => gone[1].push(s));
  const two = new SiblingLinks((m) => got[2].push(m), (s) => gone[2].push(s));
  expect(one.relay).toBe(true); // no link yet: through the primary
  expect(one.receive({ type: LINK_MESSAGE, slot: 2 }, a)).toBe(true);
  expect(two.receive({ type: LINK_MESSAGE, slot: 1 }, b)).toBe(true);
  expect(one.relay).toBe(false);
  expect(one.slots()).toEqual([2]);
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

const batch = (seq: number, hashes: string): StateMessage => ({ type: STATE_MESSAGE, from: 1, seq, entries: [{ op: "learn-blocks", url: "http://127.0.0.1:1", hashes, namespace: { loraTaskId: null, cacheSalt: null } }], loads: [] });

describe("worker links", () => {
  it("carry every batch whole and in order, lines split across reads included", async () => {
    const { one, got } = await linkedPair();
    // 200 batches of up to ~340 KB each: many cross a read's boundary.
    const sent = Array.from({ length: 200 }, (_, i) => batch(i + 1, hashesText(new Uint32Array(2 * (1 + ((i * 7919) % 40_000))).fill(i))));
    for (const m of sent) one.send(m);
    await until(() => got[2].length === sent.length);
    expect(got[2]).toEqual(sent);
  });

  it("end at a line that is not JSON, or one longer than the bound, and say the sibling is gone", async () => {
    const bad = await linkedPair();
    bad.a.write("{not json\n");
    await until(() => bad.gone[2].length === 1);
    expect(bad.gone[2]).toEqual([1]);
    expect(bad.two.counters.broken).toBe(1);
    expect(bad.two.size).toBe(0);
    expect(bad.two.relay).toBe(true); // its batches go through the primary again

    const long = await linkedPair();
    const piece = "x".repeat(1 << 20);
    for (let n = 0; n <= MAX_LINE_CHARS; n += piece.length) long.a.write(piece);
    await until(() => long.gone[2].length === 1, 20_000);
    expect(long.two.counters.broken).toBe(1);
    expect(long.got[2]).toEqual([]);
  }, 30_000);

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
  });

  it("take only the primary's link messages: a bad slot is not one, a handle that is not a socket makes no link", () => {
    const links = new SiblingLinks(() => {}, () => {});
    for (const bad of [null, { type: LINK_MESSAGE, slot: 0 }, { type: LINK_MESSAGE, slot: 1.5 }, { type: LINK_MESSAGE, slot: "2" }, { type: LINK_MESSAGE, relay: "yes" }, { type: "other", slot: 2 }]) {
      expect(isLinkMessage(bad)).toBe(false);
      expect(links.receive(bad, undefined)).toBe(false);
    }
    expect(links.receive({ type: LINK_MESSAGE, slot: 2 }, { not: "a socket" })).toBe(true);
    expect(links.size).toBe(0);
    expect(links.receive({ type: LINK_MESSAGE, relay: true }, undefined)).toBe(true);
    expect(links.relay).toBe(true);
  });
});

describe("a worker's siblings' load reports", () => {
  it("an older report (a relayed batch arriving after a newer one on a link) is not taken; its entries are; a sibling gone starts again", () => {
    const config = loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:1", "http://127.0.0.1:2"] } });
    const state = new RoutingState(createGatewayRouter(config));
    const siblings = new Siblings(() => {}, 1);
    const urls = config.upstreams.map((u) => u.url);
    const sums = new Map<number, number>();
    siblings.start(state, () => urls, () => [], (i, n) => sums.set(i, n));
    const report = (seq: number | undefined, inFlight: number, entries: StateMessage["entries"] = []): StateMessage => ({ type: STATE_MESSAGE, from: 2, ...(seq === undefined ? {} : { seq }), entries, loads: [{ url: urls[0]!, inFlight, inFlightTokens: 0 }] });
    const hashes = state.router.prefixIndex!.blockHashes(new Uint32Array(config.routing.tokensPerBlock).fill(3));
    siblings.receive(report(5, 4));
    expect(sums.get(0)).toBe(4);
    siblings.receive(report(3, 9, [{ op: "learn-blocks", url: urls[1]!, hashes: hashesText(hashes), namespace: {} }]));
    expect(sums.get(0)).toBe(4); // older: its load not taken
    expect(siblings.counters.applied).toBe(1); // its entry is
    siblings.receive(report(6, 0));
    expect(sums.get(0)).toBe(0);
    siblings.gone(2);
    expect(sums.get(0)).toBe(0);
    siblings.receive(report(1, 2)); // a restarted sibling numbers from 1 again
    expect(sums.get(0)).toBe(2);
    siblings.receive(report(undefined, 0)); // the primary's notice that it is gone
    siblings.receive(report(1, 7));
    expect(sums.get(0)).toBe(7);
  });
});
