import { describe, expect, it } from "vitest";
import { AdpInputError, BalanceGate, createBalanceGate, parseAttentionDpConfig } from "../src/index.js";

const it2 = (a: [number, number], b: [number, number]) => [{ numCtx: a[0], numGen: a[1] }, { numCtx: b[0], numGen: b[1] }];

describe("context balance gate (§8, §13.4)", () => {
  it("follows the reference sequence with max_batch_size 8, timeout 2, batching_wait 1", () => {
    const gate = new BalanceGate({ maxBatchSize: 8, timeoutIters: 2, batchingWaitIters: 1 });
    expect(gate.step(it2([1, 2], [0, 3]))).toBe(false);
    expect(gate.waitingIters).toBe(1);
    expect(gate.step(it2([1, 2], [0, 3]))).toBe(true);
    expect(gate.waitingIters).toBe(0);
    expect(gate.step(it2([1, 2], [1, 3]))).toBe(false);
    expect(gate.batchingIters).toBe(1);
    expect(gate.step(it2([1, 2], [1, 3]))).toBe(true);
    expect(gate.batchingIters).toBe(0);
    expect(gate.step(it2([1, 0], [0, 3]))).toBe(true);
    expect(gate.metrics()).toEqual({ holds: 2, releases: 3 });
  });

  it("timeout 0 releases every imbalanced iteration; a full rank makes an iteration imbalanced", () => {
    const gate = new BalanceGate({ maxBatchSize: 4, timeoutIters: 0, batchingWaitIters: 5 });
    expect(gate.step(it2([1, 2], [0, 3]))).toBe(true);
    const full = new BalanceGate({ maxBatchSize: 4, timeoutIters: 3, batchingWaitIters: 0 });
    expect(full.step(it2([1, 4], [1, 3]))).toBe(false);
  });

  it("is a pass-through when enable_balance is false; rejects bad loads without changing state", () => {
    const off = createBalanceGate(parseAttentionDpConfig({}), 8);
    expect(off.step(it2([1, 2], [0, 3]))).toBe(true);
    const gate = new BalanceGate({ maxBatchSize: 8, timeoutIters: 5, batchingWaitIters: 1 });
    gate.step(it2([1, 2], [0, 3]));
    expect(() => gate.step([{ numCtx: -1, numGen: 0 }])).toThrow(AdpInputError);
    expect(gate.waitingIters).toBe(1);
  });
});
