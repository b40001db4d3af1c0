// The short version of `npm run soak:serve`: 20,000 proxied requests (some
// streamed, 5,000 conversations by session header) through one gateway in
// front of two engine processes on loopback; every request answered, every
// load released, the gateway's heap flat after warm-up.
import { describe, expect, it } from "vitest";
import { soakServe } from "../../scripts/soak-serve.mjs";

describe("the gateway under a steady load (short soak)", () => {
  it("20,000 requests: none failed, no load leaked, heap flat after warm-up", async () => {
    const result = await soakServe({ requests: 20_000, sessions: 5_000, samples: 10 });
    expect(result.requests).toBe(20_000);
    expect(result.failed).toBe(0);
    expect(result.leaked_in_flight).toBe(0);
    expect(result.flat, JSON.stringify(result)).toBe(true);
  }, 120_000);
});
