// An engine event stream that is never empty still lets the event loop turn
// (common/next-turn.ts streamTurn): ZeroMQ hands a queued message back as a
// microtask, so without it a flood of small batches would hold the loop.

import { describe, expect, it } from "vitest";
import { streamTurn } from "../../gateway/src/common/next-turn.js";

/** One message's work, busy for `ms`. */
const work = (ms: number): void => {
  const until = performance.now() + ms;
  while (performance.now() < until);
};

describe("streamTurn", () => {
  it("a stream whose next message is always there lets an immediate set before it run, a few milliseconds in", async () => {
    let ran = false;
    setImmediate(() => (ran = true));
    let taken = 0;
    // At most 5 s of messages (0.05 ms each): without the turn the immediate would wait for all of them.
    while (!ran && taken < 100_000) {
      work(0.05);
      taken++;
      const turn = streamTurn();
      await (turn ?? Promise.resolve()); // a queued message is a microtask away
    }
    expect(ran).toBe(true);
    expect(taken).toBeLessThan(100_000);
  });

  it("work within the turn's share goes on at once; the loop having turned starts a new share", async () => {
    await new Promise((r) => setImmediate(r));
    expect(streamTurn()).toBeNull();
    expect(streamTurn()).toBeNull();
    work(3);
    const turn = streamTurn();
    expect(turn).toBeInstanceOf(Promise);
    await turn;
    expect(streamTurn()).toBeNull();
  });
});
