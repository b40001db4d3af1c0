// The in-flight lending of `serve --workers N` (gateway/src/workers/
// in-flight-lending.ts and lending-broker.ts) in one process: workers and their
// primary joined by message queues delivered in any order a channel allows
// (each one first in, first out), requests started and ended at random, a
// worker killed, and started again at once or later, with messages on their
// way. At every step the units of each upstream add up to its cap, none lost
// and none made, and no worker has more requests in flight than the units it
// holds; units go to the worker whose requests wait for them, and a down
// worker's, after its grace, to those that run.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { carriedFrom, InFlightLending, isLendingMessage, LENDING_MESSAGE, type LendingMessage } from "../../gateway/src/workers/in-flight-lending.js";
import { LendingBroker } from "../../gateway/src/workers/lending-broker.js";
import type { Upstream } from "../../gateway/src/fleet/upstream.js";

const URLS = ["http://e0:8000", "http://e1:8000"];

/** Worker `slot`'s share of `cap` at its start, `n` workers in all (as limitsShare splits the in-flight cap). */
const staticShare = (cap: number, n: number, slot: number) => Math.floor(cap / n) + (slot <= cap % n ? 1 : 0);

/** An upstream as the lending reads it (its URL only). */
const upstream = (url: string) => ({ url }) as Upstream;

/** N workers and a primary, their channels as queues. */
class Gateway {
  readonly broker: LendingBroker;
  readonly workers: InFlightLending[] = [];
  readonly inFlight: Map<string, number>[] = [];
  /** Messages on their way: to the primary from each worker, and to each worker from the primary. */
  readonly up: LendingMessage[][] = [];
  readonly down: LendingMessage[][] = [];
  readonly live = new Set<number>();

  constructor(
    readonly cap: number,
    readonly n: number,
  ) {
    this.broker = new LendingBroker({ post: (slot, m) => this.live.has(slot) && this.down[slot]!.push(m), started: () => [...this.live] }, (slot) => staticShare(cap, n, slot));
    for (let slot = 1; slot <= n; slot++) this.start(slot);
  }

  /** Starts worker `slot` (again), with what its slot holds as the primary says (through JSON, as it crosses). */
  start(slot: number): void {
    const carried = carriedFrom(JSON.parse(JSON.stringify(this.broker.carried(slot))));
    this.up[slot] = [];
    this.down[slot] = [];
    this.inFlight[slot] = new Map(URLS.map((u) => [u, 0]));
    const w = new InFlightLending((m) => this.up[slot]!.push(m), staticShare(this.cap, this.n, slot), carried);
    w.start({ inFlight: (url) => this.inFlight[slot]!.get(url) ?? 0, urls: () => URLS, wake: () => {}, unbatched: () => 0 });
    this.workers[slot] = w;
    this.live.add(slot);
    this.broker.started(slot);
  }

  /** Worker `slot` exits: what it sent arrives first, what was sent to it is lost. */
  exit(slot: number): void {
    while (this.up[slot]!.length > 0) this.broker.receive(slot, this.up[slot]!.shift()!);
    this.live.delete(slot);
    this.down[slot] = [];
    this.broker.exited(slot);
  }

  /** Worker `slot` exits and starts again, within its grace or after it. */
  restart(slot: number, afterGrace = false): void {
    this.exit(slot);
    if (afterGrace) this.broker.releaseDown(slot);
    this.start(slot);
  }

  /** Units of `url` everywhere: the running workers', the primary's reserve, those on their way, and down workers' the reserve has yet to take. */
  units(url: string): number {
    let n = this.broker.reserve(url) + this.broker.downUnits(url);
    for (const slot of this.live) {
      n += this.workers[slot]!.shareOf(url);
      for (const m of this.up[slot]!) if (m.op === "return" && m.url === url) n += m.n;
      for (const m of this.down[slot]!) if (m.op === "grant" && m.url === url) n += m.n;
    }
    return n;
  }

  /** Delivers every message on its way until none is left. */
  drain(): void {
    for (let moved = true; moved; ) {
      moved = false;
      for (const slot of this.live) {
        while (this.up[slot]!.length > 0) (this.broker.receive(slot, this.up[slot]!.shift()!), (moved = true));
        while (this.down[slot]!.length > 0) (this.workers[slot]!.receive(this.down[slot]!.shift()!), (moved = true));
      }
    }
  }
}

/** One step of a random run. */
type Step =
  | { kind: "up" | "down" | "start" | "fill" | "end" | "restart" | "exit" | "grace" | "drain"; slot: number; url: number }
  | { kind: "waiting"; slot: number; url: number; short: number; unplaced: number; oldest: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({ kind: fc.constantFrom("up" as const, "down" as const, "start" as const, "fill" as const, "end" as const), slot: fc.integer({ min: 1, max: 4 }), url: fc.integer({ min: 0, max: 1 }) }),
  fc.record({ kind: fc.constantFrom("restart" as const, "exit" as const, "grace" as const, "drain" as const), slot: fc.integer({ min: 1, max: 4 }), url: fc.constant(0) }),
  fc.record({ kind: fc.constant("waiting" as const), slot: fc.integer({ min: 1, max: 4 }), url: fc.integer({ min: 0, max: 1 }), short: fc.integer({ min: 0, max: 8 }), unplaced: fc.integer({ min: 0, max: 3 }), oldest: fc.integer({ min: 0, max: 50 }) }),
);

describe("in-flight lending between workers", () => {
  it("keeps each upstream's units at its cap through any order of messages, requests and restarts, none in flight past a worker's units", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 2, max: 4 }), fc.array(step, { maxLength: 300 }), (cap, n, steps) => {
        const g = new Gateway(cap, n);
        for (const s of steps) {
          const slot = ((s.slot - 1) % n) + 1;
          const url = URLS[s.url]!;
          // A down worker's grace ends, it fails to start again (down anew), or it starts again.
          if (!g.live.has(slot)) {
            if (s.kind === "grace") g.broker.releaseDown(slot);
            else if (s.kind === "exit") g.broker.exited(slot);
            else g.start(slot);
            continue;
          }
          const w = g.workers[slot]!;
          const flights = g.inFlight[slot]!;
          if (s.kind === "up" && g.up[slot]!.length > 0) g.broker.receive(slot, g.up[slot]!.shift()!);
          else if (s.kind === "down" && g.down[slot]!.length > 0) w.receive(g.down[slot]!.shift()!);
          else if (s.kind === "start" && flights.get(url)! < w.shareOf(url)) flights.set(url, flights.get(url)! + 1);
          else if (s.kind === "fill") flights.set(url, Math.max(flights.get(url)!, w.shareOf(url)));
          else if (s.kind === "end" && flights.get(url)! > 0) (flights.set(url, flights.get(url)! - 1), w.ended());
          else if (s.kind === "restart") g.restart(slot);
          else if (s.kind === "exit") g.exit(slot);
          else if (s.kind === "drain") g.drain();
          else if (s.kind === "waiting") {
            // The scheduler says a request is short of units only where this worker's units are all in use.
            const full = flights.get(url)! >= w.shareOf(url);
            w.waiting(new Map(full && s.short > 0 ? [[upstream(url), s.short]] : []), s.unplaced, s.short + s.unplaced > 0 ? s.oldest : Infinity);
          }
          for (const u of URLS) {
            expect(g.units(u)).toBe(cap);
            for (const k of g.live) expect(g.inFlight[k]!.get(u)!).toBeLessThanOrEqual(g.workers[k]!.shareOf(u));
          }
        }
        g.drain();
        for (const u of URLS) expect(g.units(u)).toBe(cap);
      }),
      { numRuns: 300 },
    );
  });

  it("moves the units a worker leaves unused to the one whose requests wait for them, and a freed unit to the request that waited longest", () => {
    for (const [younger, expected] of [[2000, [8, 0]], [500, [7, 1]]] as const) {
      const g = new Gateway(8, 2);
      const [a, b] = [g.workers[1]!, g.workers[2]!];
      const url = URLS[0]!;
      // Worker 1 holds every client: its 4 units in use, 6 requests short; worker 2 has none and gives its 4.
      g.inFlight[1]!.set(url, 4);
      a.waiting(new Map([[upstream(url), 6]]), 0, 1000);
      g.drain();
      expect([a.shareOf(url), b.shareOf(url), g.broker.reserve(url)]).toEqual([8, 0, 0]);
      // The gateway full (8 in flight, worker 1's backlog since t=1000), a request comes to worker 2.
      g.inFlight[1]!.set(url, 8);
      a.waiting(new Map(), 4, 1000);
      b.waiting(new Map(), 1, younger);
      g.drain();
      expect(b.shareOf(url)).toBe(0); // nothing unused yet
      // Worker 1's requests end one by one: a freed unit goes to worker 2's request only if it waited longer.
      for (let i = 0; i < 8; i++) {
        g.inFlight[1]!.set(url, g.inFlight[1]!.get(url)! - 1);
        a.ended();
        g.drain();
      }
      expect([a.shareOf(url), b.shareOf(url)]).toEqual(expected);
      expect(g.units(url)).toBe(8);
    }
  });

  it("once every message is delivered and every worker has routed again, requests wait only while the engine has the cap in flight", () => {
    const url = URLS[0]!;
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10 }),
        fc.integer({ min: 2, max: 4 }),
        fc.array(fc.record({ slot: fc.integer({ min: 1, max: 4 }), arrive: fc.integer({ min: 0, max: 4 }), end: fc.integer({ min: 0, max: 4 }), deliver: fc.integer({ min: 0, max: 3 }), settle: fc.boolean() }), { maxLength: 40 }),
        (cap, n, steps) => {
          const g = new Gateway(cap, n);
          // Each worker's queue (arrival times, oldest first) and the engine's requests in flight from all.
          const queues: number[][] = Array.from({ length: n + 1 }, () => []);
          const total = () => [...g.live].reduce((t, k) => t + g.inFlight[k]!.get(url)!, 0);
          let clock = 0;
          /** Worker `k` routes its queue as the scheduler would: into its units, then says what waits. */
          const route = (k: number) => {
            const w = g.workers[k]!;
            const placed = Math.min(queues[k]!.length, Math.max(0, w.shareOf(url) - g.inFlight[k]!.get(url)!));
            queues[k]!.splice(0, placed);
            g.inFlight[k]!.set(url, g.inFlight[k]!.get(url)! + placed);
            const room = Math.max(0, cap - total()); // the router's view: the gateway's room there
            const short = Math.min(queues[k]!.length, room);
            w.waiting(new Map(short > 0 ? [[upstream(url), short]] : []), queues[k]!.length - short, queues[k]![0] ?? Infinity);
          };
          for (const st of steps) {
            const k = ((st.slot - 1) % n) + 1;
            for (let i = 0; i < st.arrive; i++) queues[k]!.push(clock++);
            const ended = Math.min(st.end, g.inFlight[k]!.get(url)!);
            g.inFlight[k]!.set(url, g.inFlight[k]!.get(url)! - ended);
            if (ended > 0) g.workers[k]!.ended();
            route(k);
            for (let d = 0; d < st.deliver; d++) {
              for (const t of g.live) {
                if (g.up[t]!.length > 0) g.broker.receive(t, g.up[t]!.shift()!);
                if (g.down[t]!.length > 0) {
                  const m = g.down[t]!.shift()!;
                  g.workers[t]!.receive(m);
                  if (m.op === "grant") route(t);
                }
              }
            }
            if (!st.settle) continue;
            for (let round = 0; round < 200; round++) {
              for (const t of g.live) route(t); // each hears the others' loads and routes again
              const before = g.up.reduce((c, q) => c + (q?.length ?? 0), 0) + g.down.reduce((c, q) => c + (q?.length ?? 0), 0);
              if (before === 0) break;
              g.drain();
            }
            if (queues.some((q) => q.length > 0)) expect(total()).toBe(cap);
            expect(g.units(url)).toBe(cap);
          }
        },
      ),
      { numRuns: 1500 },
    );
  });

  it("starts a worker started again within its slot's grace with what the slot held: short of what it lent, with what it borrowed", () => {
    const g = new Gateway(6, 2);
    const url = URLS[0]!;
    // Worker 2 lends its 3 units to worker 1, then exits: started again, it has none (worker 1 still holds them).
    g.inFlight[1]!.set(url, 3);
    g.workers[1]!.waiting(new Map([[upstream(url), 3]]), 0, 1000);
    g.drain();
    expect(g.workers[1]!.shareOf(url)).toBe(6);
    g.restart(2);
    expect(g.workers[2]!.shareOf(url)).toBe(0);
    expect(g.units(url)).toBe(6);
    // Worker 1 exits holding all 6 (its 3 and worker 2's): started again within the grace, its worker takes them over.
    g.restart(1);
    expect([g.workers[1]!.shareOf(url), g.broker.reserve(url), g.units(url)]).toEqual([6, 0, 6]);
    // After the grace they went to the reserve, and its restart starts with none.
    g.restart(1, true);
    expect([g.workers[1]!.shareOf(url), g.broker.reserve(url), g.units(url)]).toEqual([0, 6, 6]);
  });

  it("lends a down worker's units, its own share included, to those that run, and its restart borrows them back", () => {
    const g = new Gateway(8, 2);
    const url = URLS[0]!;
    const [, other] = URLS;
    g.exit(2);
    // Worker 1's requests wait, 4 beyond its share: worker 2's 4 serve them once its grace is over (its requests may
    // still run at the engine until then), and while it is down (for as long as its restarts fail), on an upstream
    // no message named before it went down too.
    g.inFlight[1]!.set(url, 4);
    g.workers[1]!.waiting(new Map([[upstream(url), 4]]), 0, 1000);
    g.drain();
    expect([g.workers[1]!.shareOf(url), g.broker.reserve(url), g.units(url)]).toEqual([4, 0, 8]);
    g.broker.releaseDown(2);
    g.drain();
    expect([g.workers[1]!.shareOf(url), g.broker.reserve(url), g.units(url)]).toEqual([8, 0, 8]);
    g.inFlight[1]!.set(other!, 4);
    g.workers[1]!.waiting(new Map([[upstream(other!), 2]]), 0, 1000);
    g.drain();
    expect([g.workers[1]!.shareOf(other!), g.units(other!)]).toEqual([6, 8]);
    // Started again, worker 2 holds none of the first upstream; its requests wait, worker 1's end: the units come back.
    g.start(2);
    expect([g.workers[2]!.shareOf(url), g.workers[2]!.shareOf(other!)]).toEqual([0, 0]);
    g.inFlight[1]!.set(url, 4);
    g.workers[1]!.ended();
    g.workers[2]!.waiting(new Map([[upstream(url), 4]]), 0, 2000);
    g.drain();
    expect([g.workers[1]!.shareOf(url), g.workers[2]!.shareOf(url), g.units(url)]).toEqual([4, 4, 8]);
    expect(g.units(other!)).toBe(8);
  });

  it("takes only well-formed messages and carried units", () => {
    expect(isLendingMessage({ type: LENDING_MESSAGE, op: "grant", url: "http://e", n: 2 })).toBe(true);
    for (const bad of [null, { type: LENDING_MESSAGE, op: "grant", url: "http://e", n: -1 }, { type: LENDING_MESSAGE, op: "grant", url: "", n: 1 }, { type: LENDING_MESSAGE, op: "steal", url: "http://e", n: 1 }, { type: LENDING_MESSAGE, op: "owe", url: "http://e" }, { type: LENDING_MESSAGE, op: "want", url: "x".repeat(9000), n: 1 }, { type: LENDING_MESSAGE, op: "return", url: "http://e", n: 1.5 }]) {
      expect(isLendingMessage(bad)).toBe(false);
    }
    expect([...carriedFrom([["http://e", 2], ["http://f", -1], ["http://z", 0], ["http://g", "x"], ["http://h", 2 ** 21], 7])]).toEqual([["http://e", 2], ["http://f", -1]]);
    expect(carriedFrom("{not a list").size).toBe(0);
    expect(carriedFrom(undefined).size).toBe(0);
  });
});

describe("InFlightLending: a unit a request was taken on this turn", () => {
  it("is not given back to an older want before the batch that places it; what is unused after it is", () => {
    const sent: LendingMessage[] = [];
    const view = { inFlight: 0, unbatched: 1 };
    const w = new InFlightLending((m) => void sent.push(m), 1);
    w.start({ inFlight: () => view.inFlight, urls: () => URLS, wake: () => {}, unbatched: () => view.unbatched });
    const returns = () => sent.filter((m) => m.op === "return");
    // Its one unit looks unused, but a request taken this turn starts on it with the next batch.
    w.receive({ type: LENDING_MESSAGE, op: "owe", url: URLS[0]!, on: true, since: 1 });
    expect(returns()).toEqual([]);
    // The batch placed it: nothing unused.
    view.unbatched = 0;
    view.inFlight = 1;
    w.waiting(new Map(), 0, Infinity);
    expect(returns()).toEqual([]);
    // It ended: the unit goes to the older want.
    view.inFlight = 0;
    w.ended();
    expect(returns()).toEqual([{ type: LENDING_MESSAGE, op: "return", url: URLS[0], n: 1 }]);
  });
});
