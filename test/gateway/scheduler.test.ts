// The scheduler alone (no HTTP): what a placed request leaves behind.
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { loadGatewayConfig } from "../../gateway/src/config/config.js";
import { Fleet } from "../../gateway/src/fleet/fleet.js";
import { readRequest } from "../../gateway/src/requests/openai.js";
import { Hangup } from "../../gateway/src/fleet/hangup.js";
import { newCounters, Scheduler } from "../../gateway/src/fleet/scheduler.js";
import { Utf8ByteTokenizer } from "../../gateway/src/tokenizers/tokenizer.js";
import type { InFlightShares } from "../../gateway/src/fleet/in-flight-shares.js";
import type { QueueSlots } from "../../gateway/src/fleet/queue-slots.js";

let fleet: Fleet | null = null;
afterEach(async () => {
  await fleet?.destroy();
  fleet = null;
});

/** A chat as the edge reads it. */
const request = (content = "hello there") => readRequest("chat", Buffer.from(JSON.stringify({ model: "m", messages: [{ role: "user", content }] })), {}, new Utf8ByteTokenizer());

/** What an acquire came to: "placed", or the status it was refused with. */
const outcome = (p: Promise<unknown>) => p.then(() => "placed", (e: { status: number }) => e.status);

/** Each tracked acquire's outcome by name, as it settles. */
function outcomes(): { settled: Record<string, unknown>; track: (name: string, p: Promise<unknown>) => Promise<unknown> } {
  const settled: Record<string, unknown> = {};
  return { settled, track: (name, p) => outcome(p).then((o) => (settled[name] = o)) };
}

/** A scheduler over one upstream (its health checked each minute: none in a test) configured by `yaml`, with its fleet and counters; `shares` and `slots` stand in for a worker's lending. */
function schedulerOn(yaml: string, shares?: InFlightShares, slots?: QueueSlots): { f: Fleet; scheduler: Scheduler; counters: ReturnType<typeof newCounters> } {
  const config = loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:9"], port: 0, logLevel: "silent" }, file: { name: "g.yaml", text: `health: { interval_ms: 60000 }\n${yaml}` } });
  const f = new Fleet(config, pino({ level: "silent" }), () => scheduler.schedule());
  fleet = f;
  const counters = newCounters();
  const scheduler = new Scheduler(f, config, counters, (e) => {
    throw e;
  }, undefined, false, shares, slots);
  return { f, scheduler, counters };
}

describe("Scheduler", () => {
  it("a placed or refused request leaves no listener on its client's hang-up signal (which lives as long as the response, and would hold the prompt's tokens)", async () => {
    const yaml = "limits: { max_in_flight_per_upstream: 1, queue_timeout_ms: 50 }\n";
    const { scheduler } = schedulerOn(yaml);
    const placed = new Hangup();
    const waiting = new Hangup();
    const first = scheduler.acquire(request(), placed);
    const second = scheduler.acquire(request(), waiting); // the upstream takes one: this one waits, then times out
    expect(placed.listenerCount("abort")).toBe(1);
    const p = await first;
    expect(p.upstream.index).toBe(0);
    expect(placed.listenerCount("abort")).toBe(0);
    await expect(second).rejects.toMatchObject({ status: 429 });
    expect(waiting.listenerCount("abort")).toBe(0);
  });
});

describe("Scheduler: which waiting requests start", () => {
  it("the oldest, as many as the upstreams have room for (TensorRT-LLM's executor pops its waiting queue so), whatever order the router would take them in", async () => {
    const yaml = "limits: { max_in_flight_per_upstream: 1, queue_timeout_ms: 5000 }\n";
    const { f, scheduler } = schedulerOn(yaml);
    const started: string[] = [];
    const track = (name: string, p: Promise<unknown>) => p.then(() => started.push(name), () => started.push(`${name} refused`));
    await scheduler.acquire(request("first"), new Hangup()); // the one unit
    // Closed-loop clients' chats, as a load generator numbers them: later ones are longer.
    const waiting = Array.from({ length: 12 }, (_, i) => track(`#${i + 1}`, scheduler.acquire(request(`L1234-${95 + i}`), new Hangup())));
    const upstream = f.upstreams[0]!;
    for (let i = 0; i < 12; i++) {
      upstream.inFlight--; // the request in flight ended
      scheduler.schedule();
      await new Promise((r) => setTimeout(r, 5));
    }
    await Promise.all(waiting);
    expect(started).toEqual(Array.from({ length: 12 }, (_, i) => `#${i + 1}`));
    scheduler.stop();
  });
});

describe("Scheduler, policy centralized: which waiting requests start", () => {
  it("all it has room for by its own count (the gateway's in-flight requests, not an engine's report nor requests in transfer)", async () => {
    const yaml = "policy: centralized\nlimits: { max_in_flight_per_upstream: 2, queue_timeout_ms: 300 }\n";
    const { f, scheduler } = schedulerOn(yaml);
    // Two answered prefills whose decode has not begun: the KV routers' load counts them, the centralized router does not.
    f.upstreams[0]!.inTransfer = 2;
    expect((await scheduler.acquire(request(), new Hangup())).upstream.index).toBe(0);
  });
});

describe("Scheduler with lent queue slots (a worker of --workers N)", () => {
  it("holds a request that would wait past its slots while it asks, admits those held in arrival order as slots come, refuses the rest 429, and gives back what it holds past what waits", async () => {
    const yaml = "limits: { max_in_flight_per_upstream: 1, queue_size: 8 }\n";
    const asks: { n: number; answer: (granted: number) => void }[] = [];
    let held = 0;
    const used: number[] = [];
    const slots: QueueSlots = {
      lends: true,
      held: () => held,
      ask: (n, answer) => void asks.push({ n, answer }),
      using: (n) => {
        used.push(n);
        held = Math.min(held, n);
      },
    };
    const { scheduler, counters } = schedulerOn(yaml, undefined, slots);
    // The upstream's room takes the first at once, no slot asked for.
    expect((await scheduler.acquire(request(), new Hangup())).upstream.index).toBe(0);
    expect(asks).toHaveLength(0);
    const [b, c, d] = [new Hangup(), new Hangup(), new Hangup()];
    const pb = outcome(scheduler.acquire(request(), b));
    const pc = outcome(scheduler.acquire(request(), c));
    const pd = outcome(scheduler.acquire(request(), d));
    // One ask at a time (for the first); those after it wait for its answer. Held ones count as waiting, not queued.
    expect(asks.map((a) => a.n)).toEqual([1]);
    expect(scheduler.waiting()).toBe(3);
    expect(counters.queued).toBe(0);
    c.abort();
    expect(await pc).toBe(499);
    held = 1;
    asks[0]!.answer(1);
    // b is in the queue (it waits for room); d, which came later, is asked for now.
    expect(counters.queued).toBe(1);
    expect(asks.map((a) => a.n)).toEqual([1, 1]);
    asks[1]!.answer(0);
    expect(await pd).toBe(429);
    expect(counters.rejectedFull).toBe(1);
    // The one slot held holds the one waiting request: nothing to give back.
    await new Promise((r) => setTimeout(r, 30));
    expect(used).toEqual([]);
    expect(held).toBe(1);
    // A request behind a held one is held too, never admitted before it; stopping answers both 503.
    const e = outcome(scheduler.acquire(request(), new Hangup()));
    expect(asks).toHaveLength(3);
    scheduler.stop();
    expect([await pb, await e]).toEqual([503, 503]);
    expect(counters.queued).toBe(0);
    // Given back a moment later (SLOT_LINGER_MS), all of it: nothing waits.
    expect(held).toBe(1);
    await new Promise((r) => setTimeout(r, 30));
    expect(used).toEqual([0]);
    expect(held).toBe(0);
  });
});

describe("Scheduler with lent queue slots: what it holds", () => {
  it("holds no more than the gateway's queue and room would take, counting only requests not answered (a client gone frees its place)", async () => {
    const yaml = "limits: { max_in_flight_per_upstream: 1, queue_size: 2 }\n";
    const asks: number[] = [];
    const slots: QueueSlots = { lends: true, held: () => 0, ask: (n) => void asks.push(n), using: () => {} };
    const { scheduler } = schedulerOn(yaml, undefined, slots);
    await scheduler.acquire(request(), new Hangup()); // the one unit
    const [b, c] = [new Hangup(), new Hangup()];
    const held = [outcome(scheduler.acquire(request(), b)), outcome(scheduler.acquire(request(), c))];
    // queue_size 2, no room: a third is refused at once.
    expect(await outcome(scheduler.acquire(request(), new Hangup()))).toBe(429);
    b.abort();
    c.abort();
    expect(await Promise.all(held)).toEqual([499, 499]);
    // Their places are free while the ask for them is still under way.
    const e = new Hangup();
    const late = outcome(scheduler.acquire(request(), e));
    expect(scheduler.waiting()).toBe(1);
    e.abort();
    expect(await late).toBe(499);
    expect(asks).toEqual([1]);
  });
});

describe("Scheduler with lent queue slots: a request with no slot", () => {
  it("takes the slot a unit a sibling gave back leaves free (the unit starts the slotted request before it), and waits as any queued request; 429 only with no slot free", async () => {
    // A worker holding 1 of a cap of 2 (its sibling leaves the other unused) and asking for the gateway's one queue slot.
    const yaml = "limits: { max_in_flight_per_upstream: 2, queue_size: 1, queue_timeout_ms: 5000 }\n";
    const asks: { n: number; answer: (granted: number) => void }[] = [];
    let held = 0;
    const slots: QueueSlots = { lends: true, held: () => held, ask: (n, answer) => void asks.push({ n, answer }), using: (n) => void (held = Math.min(held, n)) };
    let share = 1;
    const { scheduler, counters } = schedulerOn(yaml, { of: () => share, waiting: () => {} }, slots);
    const { settled, track } = outcomes();
    await scheduler.acquire(request(), new Hangup()); // its unit
    const second = track("second", scheduler.acquire(request(), new Hangup()));
    const third = track("third", scheduler.acquire(request(), new Hangup()));
    // The primary gives the one slot (to the second), then none: the third waits for the unit its sibling leaves unused.
    held = 1;
    asks[0]!.answer(1);
    asks[1]!.answer(0);
    expect(counters.queued).toBe(2);
    // The unit comes: the batch starts the second (the first in the queue), whose slot stays here, free.
    share = 2;
    scheduler.schedule();
    await second;
    expect(settled).toEqual({ second: "placed" });
    // Past UNIT_WAIT_MS the third still waits, in that slot (it was answered 429 there), as any queued request.
    await new Promise((r) => setTimeout(r, 250));
    expect(settled).toEqual({ second: "placed" });
    expect(counters.rejectedFull).toBe(0);
    expect(scheduler.waiting()).toBe(1);
    // With no slot free, a request with no unit coming is refused when its wait is over.
    const fourth = track("fourth", scheduler.acquire(request(), new Hangup()));
    asks[2]!.answer(0);
    await fourth;
    expect(settled.fourth).toBe(429);
    scheduler.stop();
    await third;
    expect(settled.third).toBe(503);
  });
});

describe("Scheduler with lent queue slots and queue_size 0", () => {
  it("refuses a request that comes while an older one waits for a unit, the unit come: the older starts on it, and none waits (one process takes no more than the cap)", async () => {
    // A worker holding 1 of a cap of 2, its sibling leaving the other unused.
    const yaml = "limits: { max_in_flight_per_upstream: 2, queue_size: 0, queue_timeout_ms: 5000 }\n";
    let share = 1;
    const slots: QueueSlots = { lends: true, held: () => 0, ask: (_n, answer) => answer(0), using: () => {} };
    const { scheduler } = schedulerOn(yaml, { of: () => share, waiting: () => {} }, slots);
    const { settled, track } = outcomes();
    await scheduler.acquire(request(), new Hangup()); // its unit
    const second = track("second", scheduler.acquire(request(), new Hangup())); // waits for the unit its sibling leaves unused
    share = 2; // the unit comes, before the batch
    const third = track("third", scheduler.acquire(request(), new Hangup()));
    await second;
    await new Promise((r) => setImmediate(r));
    expect(settled).toEqual({ second: "placed", third: 429 });
    expect(scheduler.waiting()).toBe(0);
    scheduler.stop();
    await third;
  });
});

describe("Scheduler with lent queue slots: a request whose unit never came", () => {
  /**
   * A worker holding `share.units` of a cap of 2 (its sibling leaves the rest unused), asking its primary for slots
   * of a queue_size of 2 (queue_timeout_ms `timeoutMs`); `wants` gets what it tells its shares.
   */
  function worker(wants: string[] = [], timeoutMs = 5000) {
    const yaml = `limits: { max_in_flight_per_upstream: 2, queue_size: 2, queue_timeout_ms: ${timeoutMs} }\n`;
    const asks: { n: number; answer: (granted: number) => void }[] = [];
    const slot = { held: 0 };
    const share = { units: 1 };
    const slots: QueueSlots = { lends: true, held: () => slot.held, ask: (n, answer) => void asks.push({ n, answer }), using: (n) => void (slot.held = Math.min(slot.held, n)) };
    const shares: InFlightShares = { of: () => share.units, waiting: (short, unplaced) => void wants.push(`short ${[...short.values()].join(",") || 0}, unplaced ${unplaced}`) };
    const { scheduler, counters } = schedulerOn(yaml, shares, slots);
    const { settled, track } = outcomes();
    return { scheduler, counters, asks, slot, share, settled, track };
  }

  it("is asked for once more (a sibling may have given back the slot it held), and waits in the slot it gets; 429 when the second ask gets none", async () => {
    const { scheduler, counters, asks, slot, settled, track } = worker();
    await scheduler.acquire(request(), new Hangup()); // its one unit
    const second = track("second", scheduler.acquire(request(), new Hangup()));
    const third = track("third", scheduler.acquire(request(), new Hangup()));
    slot.held = 1;
    asks[0]!.answer(1); // the second's slot; the third, held meanwhile, is asked for next
    asks[1]!.answer(0); // none (the other is a sibling's, for now): the third waits for the unit
    expect(asks).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 250));
    // No unit came: asked for again, once, and the slot its sibling gave back meanwhile is given.
    expect(asks.map((a) => a.n)).toEqual([1, 1, 1]);
    expect(settled).toEqual({});
    slot.held = 2;
    asks[2]!.answer(1);
    expect(counters.queued).toBe(2);
    // A fourth, with no slot the second time either, is refused.
    const fourth = track("fourth", scheduler.acquire(request(), new Hangup()));
    asks[3]!.answer(0);
    await new Promise((r) => setTimeout(r, 250));
    asks[4]!.answer(0);
    await fourth;
    expect(settled).toEqual({ fourth: 429 });
    scheduler.stop();
    await Promise.all([second, third]);
    expect(settled).toEqual({ fourth: 429, second: 503, third: 503 });
  });

  it("leaves no want for units behind when it was the last to wait: the primary would have its sibling give them to a worker with nothing to start", async () => {
    const wants: string[] = [];
    const { scheduler, asks, settled, track } = worker(wants);
    await scheduler.acquire(request(), new Hangup()); // its one unit
    const second = track("second", scheduler.acquire(request(), new Hangup()));
    asks[0]!.answer(0); // no slot: it waits for the unit its sibling leaves unused
    await new Promise((r) => setImmediate(r));
    expect(wants.at(-1)).toBe("short 1, unplaced 0");
    await new Promise((r) => setTimeout(r, 250));
    // Its wait is over and it is held while it is asked for again: nothing waits for a unit now, and the shares hear so.
    expect(asks).toHaveLength(2);
    expect(wants.at(-1)).toBe("short 0, unplaced 0");
    asks[1]!.answer(0);
    await second;
    expect(settled).toEqual({ second: 429 });
  });

  it("a request held while its slot is asked for is refused when none comes, though a unit came: the older request waiting for that unit starts on it", async () => {
    const { scheduler, counters, asks, share, settled, track } = worker();
    await scheduler.acquire(request(), new Hangup()); // its one unit
    const second = track("second", scheduler.acquire(request(), new Hangup()));
    asks[0]!.answer(0); // no slot: it waits for the unit its sibling leaves unused
    await new Promise((r) => setImmediate(r));
    share.units = 2; // the unit comes
    const third = track("third", scheduler.acquire(request(), new Hangup())); // held: the room is the second's
    asks[1]!.answer(0);
    await second;
    await new Promise((r) => setImmediate(r));
    expect(settled).toEqual({ second: "placed", third: 429 });
    expect(counters.queued).toBe(0);
    await third;
  });

  it("is not asked for again once its queue timeout is over, and a slow answer to the second ask comes no later than that timeout", async () => {
    // queue_timeout_ms 100: the unit wait ends with it, and the slot a second ask would get could not be used.
    const quick = worker([], 100);
    await quick.scheduler.acquire(request(), new Hangup());
    const late = quick.track("late", quick.scheduler.acquire(request(), new Hangup()));
    quick.asks[0]!.answer(0);
    await late;
    expect(quick.settled).toEqual({ late: 429 });
    expect(quick.asks).toHaveLength(1);
    // queue_timeout_ms 300: asked for again at 200 ms, the primary silent; answered 429 at its timeout.
    const slow = worker([], 300);
    await slow.scheduler.acquire(request(), new Hangup());
    const started = Date.now();
    const held = slow.track("held", slow.scheduler.acquire(request(), new Hangup()));
    slow.asks[0]!.answer(0);
    await held;
    expect(slow.asks).toHaveLength(2);
    expect(slow.settled).toEqual({ held: 429 });
    expect(Date.now() - started).toBeLessThan(450);
  }, 5_000);
});

describe("Hangup", () => {
  it("calls each listener still listening once, in the order they came, whatever was removed between", () => {
    const heard: string[] = [];
    const l = (name: string) => () => heard.push(name);
    const [a, b, c, d] = [l("a"), l("b"), l("c"), l("d")];
    const h = new Hangup();
    h.once("abort", a).once("abort", b).off("abort", a).once("abort", c); // b came before c, a went
    h.once("abort", d).off("abort", d).once("abort", d).once("abort", a).off("abort", a);
    expect(h.listenerCount("abort")).toBe(3);
    h.abort();
    h.abort();
    expect(heard).toEqual(["b", "c", "d"]);
    expect(h.listenerCount("abort")).toBe(0);
    const alone = new Hangup();
    alone.once("abort", a).off("abort", a).once("abort", b).once("abort", c).off("abort", c).once("abort", a);
    alone.abort();
    expect(heard.slice(3)).toEqual(["b", "a"]);
  });
});
