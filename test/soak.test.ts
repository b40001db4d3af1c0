// The short version of `npm run soak`: memory stays flat after warm-up while
// conversations churn through the bounded map and the index evicts under budget.
import { describe, expect, it } from "vitest";
import { runSoak } from "../scripts/soak.mjs";

describe("bounded memory under churn (short soak)", () => {
  it("200,000 requests over 50,000 conversations: wasm memory flat after warm-up, index within budget", () => {
    const result = runSoak({ requests: 200_000, conversations: 50_000, budgetBytes: 8 << 20, samples: 10 });
    expect(result.requests).toBe(200_000);
    expect(result.conversations_tracked).toBe(Math.min(50_000, 65_536));
    expect(result.index_bytes_peak).toBeLessThanOrEqual(8 << 20);
    expect(result.index_evictions).toBeGreaterThan(0);
    expect(result.wasm_memory_final).toBe(result.wasm_memory_after_warmup);
    expect(result.rss_peak_after_warmup).toBeLessThanOrEqual(result.rss_after_warmup * 1.15 + (32 << 20));
    expect(result.flat).toBe(true);
  }, 120_000);
});
