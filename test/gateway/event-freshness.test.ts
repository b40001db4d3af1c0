// The freshness of an engine's KV-event stream: live in sequence, gapped when a
// gap cannot be filled, stale when silent while it has work, and a restart seen
// from its sequence numbers.
import { describe, expect, it } from "vitest";
import { engineStatus, EventFreshness, rankStatuses } from "../../gateway/src/events/event-freshness.js";

/** A freshness tracker on a clock the test moves. */
function tracker(staleAfterMs = 1_000, restartBehind?: bigint) {
  const clock = { t: 0 };
  const f = new EventFreshness({ staleAfterMs, now: () => clock.t, ...(restartBehind === undefined ? {} : { restartBehind }) });
  return { f, clock };
}

describe("EventFreshness", () => {
  it("is stale until the first batch, then live while batches come in order", () => {
    const { f } = tracker();
    expect(f.status).toBe("stale");
    expect(f.batch(41n)).toBe("next");
    expect(f.batch(42n)).toBe("next");
    expect(f.status).toBe("live");
    expect(f.expected).toBe(43n);
  });

  it("silence makes it stale only while requests go to its engine; hearing from it makes it live again", () => {
    const { f, clock } = tracker(1_000);
    f.batch(1n);
    clock.t = 5_000;
    expect(f.status).toBe("live"); // idle engine: nothing to say
    f.routed();
    expect(f.status).toBe("stale"); // silent for 5 s while it had work
    f.heard();
    expect(f.status).toBe("live");
    f.routed();
    clock.t = 5_900;
    expect(f.status).toBe("live");
    clock.t = 6_001;
    expect(f.status).toBe("stale");
  });

  it("a gap asks for a replay; filled it stays live, unfilled it is gapped until a resync", () => {
    const { f } = tracker();
    f.batch(10n);
    expect(f.batch(13n)).toBe("gap");
    expect(f.expected).toBe(11n);
    f.filled(13n);
    expect(f.status).toBe("live");
    expect(f.batch(16n)).toBe("gap");
    f.unfilled();
    expect(f.status).toBe("gapped");
    f.resync(16n);
    expect(f.status).toBe("live");
    expect(f.batch(17n)).toBe("next");
  });

  it("a gap it rebuilds from (the view emptied) is trusted again after staleAfterMs of batches", () => {
    const { f, clock } = tracker(1_000);
    f.batch(1n);
    expect(f.batch(9n)).toBe("gap");
    f.unfilled(9n);
    expect(f.status).toBe("gapped");
    expect(f.batch(10n)).toBe("next");
    clock.t = 999;
    expect(f.status).toBe("gapped");
    clock.t = 1_000;
    expect(f.status).toBe("live");
  });

  it("a batch already seen is old; one far behind, or sequence 0, is a publisher restart (a transport that may redeliver: restartBehind 1000)", () => {
    const { f } = tracker(1_000, 1_000n);
    f.batch(5_000n);
    expect(f.batch(4_990n)).toBe("old");
    expect(f.expected).toBe(5_001n);
    expect(f.batch(3n)).toBe("restart");
    expect(f.expected).toBe(4n);
    f.batch(4n);
    expect(f.batch(0n)).toBe("restart");
  });

  it("by default (engines never resend a batch) any number below the next expected is a restart, the last one again old", () => {
    const { f } = tracker();
    f.batch(5_000n);
    expect(f.batch(5_000n)).toBe("old");
    expect(f.batch(4_999n)).toBe("restart");
    expect(f.expected).toBe(5_000n);
  });

  it("sequence numbers past 2^53 keep their precision", () => {
    const { f } = tracker();
    const big = 2n ** 63n - 2n;
    expect(f.batch(big)).toBe("next");
    expect(f.batch(big + 1n)).toBe("next");
    expect(f.expected).toBe(2n ** 63n);
  });

  it("refuses a non-positive staleness window", () => {
    expect(() => new EventFreshness({ staleAfterMs: 0 })).toThrow(RangeError);
    expect(() => new EventFreshness({ staleAfterMs: Number.NaN })).toThrow(RangeError);
  });
});

describe("an engine's DP ranks as one (engineStatus, rankStatuses)", () => {
  const streams = (n: number) => {
    let t = 0;
    const clock = { now: () => t, advance: (ms: number) => void (t += ms) };
    return { clock, ranks: Array.from({ length: n }, () => new EventFreshness({ staleAfterMs: 1000, now: clock.now })) };
  };

  it("a rank that never spoke beside one that speaks is idle and empty (live); no rank spoken is stale", () => {
    const { ranks } = streams(2);
    expect(engineStatus(ranks)).toBe("stale");
    ranks[0]!.batch(0n);
    expect(rankStatuses(ranks)).toEqual(["live", "live"]);
    expect(engineStatus(ranks)).toBe("live");
  });

  it("once the rank that spoke falls silent while routed, the never-heard one is no excuse: the engine is stale", () => {
    const { clock, ranks } = streams(2);
    ranks[0]!.batch(0n);
    for (const r of ranks) r.routed();
    clock.advance(5000);
    expect(rankStatuses(ranks)).toEqual(["stale", "stale"]);
    expect(engineStatus(ranks)).toBe("stale");
    ranks[0]!.batch(1n); // it speaks again
    expect(engineStatus(ranks)).toBe("live");
  });

  it("a gapped rank makes the engine gapped, whatever its idle siblings", () => {
    const { ranks } = streams(3);
    ranks[0]!.batch(0n);
    ranks[0]!.batch(5n);
    ranks[0]!.unfilled(5n);
    expect(engineStatus(ranks)).toBe("gapped");
  });
});
