// The staleness model of `simulate --index-updates events`: the event link
// (delay, seeded losses), the router's reading of each rank's stream (gaps,
// replay, resync, staleness, as the gateway's EventFreshness reads them), and
// what they do to a whole simulation.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { EventFreshness } from "../gateway/src/events/event-freshness.js";
import { EventFeed, lossDraw, type EventModel } from "../src/simulate/event-feed.js";
import { simulate, toJson, type PolicyResult, type SimulateOptions } from "../src/simulate/run.js";
import { parseTrace, type Trace } from "../src/simulate/trace.js";
import { mulberry32, multiTurnWorkload } from "../src/simulate/workload.js";
import { expectRefusals } from "./support/refusals.js";

const bundled = fileURLToPath(new URL("../traces/mooncake_conversation_trace.jsonl.gz", import.meta.url));
let bundledTrace: Trace | undefined;
/** The bundled Mooncake trace, read once for the file. */
const loadBundled = () => (bundledTrace ??= parseTrace(gunzipSync(readFileSync(bundled)).toString("utf8"), "mooncake_conversation_trace.jsonl"));

/** A model with the given changes to no delay, no loss, 10 s staleness. */
const model = (m: Partial<EventModel> = {}): EventModel => ({ delayMs: 0, dropRate: 0, replay: false, seed: 1, staleAfterMs: 10_000, ...m });

/** A feed over `ranks` ranks whose target records what is done to the engine view, in order. */
function recordingFeed(ranks: number, m: EventModel) {
  const log: string[] = [];
  const feed = new EventFeed(ranks, m, {
    applyKvEvents: (events) => void log.push(`apply ${(events as { b: string }[]).map((e) => e.b).join(",")}`),
    clearRank: (rank) => void log.push(`clear ${rank}`),
  });
  return { feed, log };
}

/** The seed-1 batch numbers of rank 0 that a 30% loss drops (of the first 40). */
const lost30 = Array.from({ length: 40 }, (_, seq) => seq).filter((seq) => lossDraw(1, 0, seq) < 0.3);

describe("EventFeed", () => {
  it("delivers each batch once it is due, in publication order, and not before", () => {
    const { feed, log } = recordingFeed(2, model({ delayMs: 100 }));
    feed.publish(0, [{ b: "a" }], 0);
    feed.publish(1, [{ b: "b" }], 10);
    feed.publish(0, [{ b: "c" }], 20);
    feed.deliverDue(99);
    expect(log).toEqual([]);
    feed.deliverDue(110);
    expect(log).toEqual(["apply a", "apply b"]);
    feed.deliverDue(1e9);
    expect(log).toEqual(["apply a", "apply b", "apply c"]);
    expect(feed.counts()).toMatchObject({ batches_published: 3, batches_delivered: 3, batches_dropped: 0, gaps: 0 });
  });

  it("without replay: a lost batch is a gap at the next one; the rank's engine view goes on (never emptied), gapped for staleAfterMs", () => {
    const first = lost30.find((seq) => seq > 0 && !lost30.includes(seq - 1))!; // a loss right after a delivered batch
    const next = Array.from({ length: 40 }, (_, seq) => seq).find((seq) => seq > first && !lost30.includes(seq))!;
    const { feed, log } = recordingFeed(2, model({ dropRate: 0.3, staleAfterMs: 1000 }));
    for (let seq = 0; seq <= next; seq++) {
      feed.publish(0, [{ b: String(seq) }], seq);
      feed.deliverDue(seq);
      if (seq < next) expect(feed.status(0, seq)).toBe("live");
    }
    expect(log.slice(-2)).toEqual([`apply ${first - 1}`, `apply ${next}`]);
    expect(log.some((l) => l.startsWith("clear"))).toBe(false);
    expect(feed.status(0, next + 999)).toBe("gapped");
    expect(feed.status(1, next + 999)).toBe("live");
    expect(feed.status(0, next + 1000)).toBe("live");
    feed.placed(0, feed.status(0, next + 999));
    feed.placed(1, feed.status(1, next + 999));
    const c = feed.counts();
    expect(c).toMatchObject({ gaps: 1, placements_while_gapped: 1, placements_while_stale: 0, batches_replayed: 0 });
    expect(c.batches_dropped).toBe(next - first);
    expect(c.batches_published).toBe(c.batches_delivered + c.batches_dropped + c.batches_in_flight_at_end);
  });

  it("with replay: the lost batches are applied before the one that showed the gap; nothing is emptied", () => {
    const { feed, log } = recordingFeed(1, model({ dropRate: 0.3, replay: true }));
    for (let seq = 0; seq < 40; seq++) {
      feed.publish(0, [{ b: String(seq) }], seq);
      feed.deliverDue(seq);
    }
    const applied = log.map((l) => Number(l.slice(6)));
    const unseen = lost30.filter((seq, i) => seq === i).length; // lost before the first delivered batch
    const trailing = lost30.filter((seq) => seq > Math.max(...applied)).length;
    expect(log.some((l) => l.startsWith("clear"))).toBe(false);
    expect(applied).toEqual(Array.from({ length: 40 - unseen - trailing }, (_, i) => unseen + i));
    expect(feed.status(0, 40)).toBe("live");
    expect(feed.counts()).toMatchObject({ batches_replayed: lost30.length - unseen - trailing, batches_lost_unseen: unseen });
  });

  it("takes a stream's first batch whatever its number, as the gateway does: losses before it go unseen", () => {
    const seed = [...Array(1000).keys()].find((s) => lossDraw(s, 0, 0) < 0.5 && lossDraw(s, 0, 1) >= 0.5)!;
    const { feed, log } = recordingFeed(1, model({ dropRate: 0.5, seed }));
    feed.publish(0, [{ b: "0" }], 0);
    feed.publish(0, [{ b: "1" }], 1);
    feed.deliverDue(1);
    expect(log).toEqual(["apply 1"]);
    expect(feed.counts()).toMatchObject({ batches_dropped: 1, batches_lost_unseen: 1, gaps: 0 });
  });

  it("a stream is stale once silent for staleAfterMs after its rank was sent requests, not while its rank is idle", () => {
    const { feed } = recordingFeed(1, model({ staleAfterMs: 100 }));
    expect(feed.status(0, 5_000)).toBe("live"); // idle: nothing to say
    feed.placed(0, "live");
    expect(feed.status(0, 5_000)).toBe("stale");
    feed.publish(0, [{ b: "x" }], 5_000);
    feed.deliverDue(5_000);
    expect(feed.status(0, 5_000)).toBe("live");
    feed.placed(0, "live");
    expect(feed.status(0, 5_100)).toBe("live");
    expect(feed.status(0, 5_101)).toBe("stale");
    feed.placed(0, "stale");
    expect(feed.counts().placements_while_stale).toBe(1);
  });

  it("reads a stream exactly as the gateway's EventFreshness does (gaps, replay, rebuilds, staleness), step by step", () => {
    for (const [dropRate, delayMs, replay] of [[0, 0, false], [0.05, 7, false], [0.2, 30, false], [0.2, 30, true]] as const) {
      const rand = mulberry32(dropRate * 100 + delayMs + (replay ? 1 : 0));
      const m = model({ dropRate, delayMs, replay, staleAfterMs: 25 });
      const { feed } = recordingFeed(1, m);
      let now = 0;
      const gateway = new EventFreshness({ staleAfterMs: 25, now: () => now });
      gateway.heard(); // the engine answered at the start (a polled engine's first, empty, poll)
      const due: { seq: number; at: number }[] = [];
      let seq = 0;
      for (now = 0; now < 3000; now++) {
        if (rand() < 0.2) {
          if (lossDraw(m.seed, 0, seq) >= dropRate) due.push({ seq, at: now + delayMs });
          feed.publish(0, [], now);
          seq++;
        }
        // The gateway's event source (gateway/src/events/zmq-events.ts): replay fills a gap, else the view is rebuilt from this batch.
        while (due.length > 0 && due[0]!.at <= now) {
          const { seq: s } = due.shift()!;
          if (gateway.batch(BigInt(s)) !== "gap") continue;
          if (replay) {
            for (let k = gateway.expected!; k < BigInt(s); k++) gateway.filled(k);
            expect(gateway.batch(BigInt(s))).toBe("next");
          } else gateway.unfilled(BigInt(s));
        }
        feed.deliverDue(now);
        const status = feed.status(0, now);
        expect(status, `drop ${dropRate}, delay ${delayMs}, replay ${replay}, t=${now}`).toBe(gateway.status);
        if (rand() < 0.3) {
          feed.placed(0, status);
          gateway.routed();
        }
      }
    }
  });

  it("draws losses from a seeded hash: uniform, the same for the same seed, nested across rates", () => {
    const draws = Array.from({ length: 100_000 }, (_, i) => lossDraw(7, i % 8, Math.floor(i / 8)));
    expect(draws.filter((d) => d < 0.1).length / draws.length).toBeCloseTo(0.1, 2);
    expect(draws.filter((d) => d < 0.5).length / draws.length).toBeCloseTo(0.5, 2);
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...draws)).toBeLessThan(1);
    expect(lossDraw(7, 3, 12)).toBe(lossDraw(7, 3, 12));
    expect(lossDraw(7, 3, 12)).not.toBe(lossDraw(8, 3, 12));
    expect(lossDraw(7, 3, 12)).not.toBe(lossDraw(7, 4, 12));
  });
});

/** kv_cache_aware's figures from a run, without the router's own cost (wall-clock time). */
function kvFigures(trace: Trace, options: SimulateOptions): Omit<PolicyResult, "route_us_per_request" | "overloaded" | "overload_reason"> {
  const { route_us_per_request: _, overloaded: _o, overload_reason: _why, ...figures } = simulate(trace, { policies: ["kv_cache_aware"], ...options }).policies[0]!;
  return figures;
}
/** Just what the serving model measured (no event counts). */
const served = ({ event_feed: _, ...figures }: Omit<PolicyResult, "route_us_per_request" | "overloaded" | "overload_reason">) => figures;

describe("simulate --index-updates events with a staleness model", () => {
  it("no delay and no loss give exactly the figures of plain events runs before the model existed", () => {
    // Measured with the simulator as it was before event delay and loss (commit 12b5b74).
    const multiTurn = kvFigures(multiTurnWorkload({ seed: 3, sessions: 150 }), { ranks: 4, cacheBlocks: 1500, indexUpdates: "events" });
    expect(served(multiTurn)).toEqual({
      policy: "kv_cache_aware", prefix_hit_ratio: 0.8261, prefill_tokens: 520704, prefill_work_max_over_mean: 1.3781, requests_max_over_mean: 1.4089, ttft_ms: { p50: 17, p90: 24.9, p99: 52.8 },
    });
    const mooncake = kvFigures(loadBundled(), { cacheBlocks: 4000, indexUpdates: "events", eventDelayMs: 0, eventDropRate: 0 });
    expect(served(mooncake)).toEqual({
      policy: "kv_cache_aware", prefix_hit_ratio: 0.3245, prefill_tokens: 96884355, prefill_work_max_over_mean: 1.0764, requests_max_over_mean: 1.0313, ttft_ms: { p50: 170.6, p90: 506.6, p99: 1622 },
    });
    expect(mooncake.event_feed).toMatchObject({ batches_dropped: 0, gaps: 0, placements_while_gapped: 0, placements_while_stale: 0, stored_events_skipped: 0 });
  });

  it("is deterministic: the same flags give the same report, twice", () => {
    const trace = multiTurnWorkload({ seed: 5, sessions: 120 });
    const options: SimulateOptions = { ranks: 4, cacheBlocks: 2000, indexUpdates: "events", eventDelayMs: 300, eventDropRate: 0.2, eventSeed: 11, policies: ["round_robin", "kv_cache_aware"] };
    const strip = (o: SimulateOptions) => {
      const json = toJson(simulate(trace, o)) as { policies: { route_us_per_request?: number }[] };
      return { ...json, policies: json.policies.map(({ route_us_per_request: _, ...p }) => p) };
    };
    const once = strip(options);
    expect(strip(options)).toEqual(once);
    expect(strip({ ...options, eventSeed: 12 })).not.toEqual(once);
  });

  it("a lagging picture costs reuse; a large delay degrades to routing-only (silent streams go stale and the router matches on its own view)", () => {
    const trace = loadBundled();
    const events = kvFigures(trace, { indexUpdates: "events" });
    const routing = kvFigures(trace, { indexUpdates: "routing" });
    const minute = kvFigures(trace, { indexUpdates: "events", eventDelayMs: 60_000 });
    expect(minute.prefix_hit_ratio).toBeLessThan(events.prefix_hit_ratio - 0.01);
    const never = kvFigures(trace, { indexUpdates: "events", eventDelayMs: 1e9 });
    expect(never.event_feed!.batches_delivered).toBe(0);
    expect(Math.abs(never.prefix_hit_ratio - routing.prefix_hit_ratio)).toBeLessThan(0.005);
    expect(served(never)).toEqual(served(kvFigures(trace, { indexUpdates: "events", eventDropRate: 1 }))); // nothing arrives either way
    // Stale from a rank's first placement on: exactly routing-only (the merged matches are the router's own probe),
    // here and on a workload whose prompts are whole blocks (where the probe leaves the last block out).
    const ownViewOnly: SimulateOptions = { indexUpdates: "events", eventDelayMs: 1e9, eventStaleMs: 1e-9 };
    expect(served(kvFigures(trace, ownViewOnly))).toEqual(served(routing));
    const multiTurn = multiTurnWorkload({ seed: 3, sessions: 150 });
    const small: SimulateOptions = { ranks: 4, cacheBlocks: 1500 };
    expect(served(kvFigures(multiTurn, { ...small, ...ownViewOnly }))).toEqual(served(kvFigures(multiTurn, { ...small, indexUpdates: "routing" })));
    // Never stale: the empty engine view is trusted, and reuse falls to load balancing's.
    expect(kvFigures(trace, { indexUpdates: "events", eventDelayMs: 1e9, eventStaleMs: 1e12 }).prefix_hit_ratio).toBeLessThan(0.5 * routing.prefix_hit_ratio);
  });

  it("counts lost batches and gaps; a gapped view goes on and keeps nearly all the reuse; replay keeps all of it", () => {
    const trace = loadBundled();
    const events = kvFigures(trace, { indexUpdates: "events" });
    const lossy = kvFigures(trace, { indexUpdates: "events", eventDropRate: 0.01 });
    const f = lossy.event_feed!;
    expect(f.batches_dropped / f.batches_published).toBeGreaterThan(0.005);
    expect(f.batches_dropped / f.batches_published).toBeLessThan(0.015);
    expect(f.batches_published).toBe(f.batches_delivered + f.batches_dropped + f.batches_in_flight_at_end);
    expect(f.gaps).toBeGreaterThan(0);
    expect(f.gaps).toBeLessThanOrEqual(f.batches_dropped);
    expect(f.placements_while_gapped).toBeGreaterThan(0);
    // Kept, not emptied: the chains stored after a gap still find their parents (emptied, over half were skipped and the reuse fell to round-robin's).
    expect(f.stored_events_skipped).toBeLessThan(0.01 * trace.requests.length);
    expect(f.engine_view_blocks_at_end).toBeGreaterThan(0.9 * f.own_view_blocks_at_end);
    expect(lossy.prefix_hit_ratio).toBeGreaterThan(events.prefix_hit_ratio - 0.005);
    expect(lossy.prefix_hit_ratio).not.toBe(events.prefix_hit_ratio);
    const replayed = kvFigures(trace, { indexUpdates: "events", eventDropRate: 0.01, eventReplay: true });
    const r = replayed.event_feed!;
    expect(r.batches_replayed).toBeGreaterThan(0.9 * r.batches_dropped);
    expect(r.batches_replayed + r.batches_lost_unseen).toBeLessThanOrEqual(r.batches_dropped);
    expect(r.placements_while_gapped).toBe(0);
    expect(replayed.prefix_hit_ratio).toBeGreaterThan(events.prefix_hit_ratio - 0.005);
  });

  it("refuses bad event options with typed errors naming the option, and event options without events", () => {
    const trace = multiTurnWorkload({ seed: 1, sessions: 5 });
    const cases: [SimulateOptions, string][] = [
      [{ indexUpdates: "events", eventDelayMs: -1 }, "eventDelayMs"],
      [{ indexUpdates: "events", eventDelayMs: Number.NaN }, "eventDelayMs"],
      [{ indexUpdates: "events", eventDropRate: 1.5 }, "eventDropRate"],
      [{ indexUpdates: "events", eventDropRate: "0.1" as never }, "eventDropRate"],
      [{ indexUpdates: "events", eventReplay: "yes" as never }, "eventReplay"],
      [{ indexUpdates: "events", eventSeed: 1.5 }, "eventSeed"],
      [{ indexUpdates: "events", eventStaleMs: 0 }, "eventStaleMs"],
      [{ eventDelayMs: 50 }, "eventDelayMs"],
      [{ indexUpdates: "routing", eventReplay: true }, "eventReplay"],
      [{ indexUpdates: "event" as never }, "indexUpdates"],
      [{ indexUpdates: "events", eventDelay: 50 } as never, "eventDelay"],
    ];
    expectRefusals((options: SimulateOptions) => simulate(trace, options), cases);
    expect(() => simulate(trace, { indexUpdates: "routing", eventDelayMs: 5 })).toThrow(/eventDelayMs: applies only with indexUpdates "events"/);
    expect(() => simulate(trace, { eventDelay: 5 } as never)).toThrow(/eventDelay: is not a simulate option \(expected .*eventDelayMs/);
  });
});
