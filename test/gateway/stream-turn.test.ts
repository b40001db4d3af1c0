// An engine event stream that is never empty still lets the event loop turn
// (common/next-turn.ts StreamTurns): ZeroMQ hands a queued message back as a
// microtask, so without it a flood of small batches would hold the loop.

import { describe, expect, it } from "vitest";
import { StreamTurns } from "../../gateway/src/common/next-turn.js";

/** One message's work, busy for `ms`. */
const work = (ms: number): void => {
  const until = performance.now() + ms;
  while (performance.now() < until);
};

/** A stream whose next message is always a microtask away: takes messages (0.05 ms each) until `done()` or `max`; how many. */
async function flood(turns: StreamTurns, done: () => boolean, max: number): Promise<number> {
  let taken = 0;
  while (!done() && taken < max) {
    await (turns.take() ?? Promise.resolve());
    work(0.05);
    taken++;
  }
  return taken;
}

describe("StreamTurns", () => {
  it("a stream whose next message is always there lets an immediate set before it run, a few milliseconds in", async () => {
    let ran = false;
    setImmediate(() => (ran = true));
    // At most 5 s of messages: without the turn the immediate would wait for all of them.
    const taken = await flood(new StreamTurns(), () => ran, 100_000);
    expect(ran).toBe(true);
    expect(taken).toBeLessThan(100_000);
  });

  it("two streams never empty share the turns evenly (a share of the process's went to whichever woke first)", async () => {
    let stop = false;
    const [a, b] = [flood(new StreamTurns(), () => stop, Infinity), flood(new StreamTurns(), () => stop, Infinity)];
    await new Promise((r) => setTimeout(r, 300));
    stop = true;
    const [na, nb] = await Promise.all([a, b]);
    expect(Math.min(na, nb) / Math.max(na, nb)).toBeGreaterThan(0.5);
  });

  it("work within the turn's share goes on at once; the loop having turned starts a new share", async () => {
    const turns = new StreamTurns();
    expect(turns.take()).toBeNull();
    expect(turns.take()).toBeNull();
    work(3);
    const turn = turns.take();
    expect(turn).toBeInstanceOf(Promise);
    await turn;
    expect(turns.take()).toBeNull();
  });
});
