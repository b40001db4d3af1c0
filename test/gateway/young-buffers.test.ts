// The buffers a serve process's reads leave, collected young (young-buffers.ts):
// V8 runs a young collection once the bytes received reach COLLECT_BYTES,
// once each COLLECT_BYTES and again only after V8's own collection, no other
// context gets a `gc` global, a real serve process asks for such
// collections while long prompts stream through it (V8's own trace names a
// collection asked for so "testing"), and one whose operator renamed V8's
// gc function serves as before.
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { PerformanceObserver, constants } from "node:perf_hooks";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { COLLECT_BYTES, collectFunction, collectYoungBuffers, noteReceived } from "../../gateway/src/common/young-buffers.js";
import { oneEngineServeConfig, trackedForCleanup, urlFrom } from "../support/mock-engine.js";

const GATEWAY_CLI = path.resolve("gateway/dist/cli.js");

const tracked = trackedForCleanup();

/** The young collections V8 reports from now on, as they come (startTime, ms). */
function youngCollections(): { readonly times: number[]; close(): void } {
  const times: number[] = [];
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if ((e as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) times.push(e.startTime);
  });
  observer.observe({ entryTypes: ["gc"] });
  return { times, close: () => observer.disconnect() };
}

describe("young collections asked for by the bytes received", () => {
  it(`runs one once ${COLLECT_BYTES} bytes came, and leaves no gc global in another context`, async () => {
    const collecting = collectYoungBuffers();
    const seen = youngCollections();
    try {
      expect(runInNewContext("typeof gc")).toBe("undefined");
      noteReceived(COLLECT_BYTES - 1);
      const before = performance.now();
      noteReceived(1);
      // The observer hears of it on a later turn.
      await new Promise((r) => setTimeout(r, 50));
      expect(seen.times.some((t) => t >= before)).toBe(true);
    } finally {
      seen.close();
      collecting.close();
    }
  });

  it(`asks once each ${COLLECT_BYTES} bytes, and counts again after any young collection V8 makes`, async () => {
    let asked = 0;
    const collecting = collectYoungBuffers(() => asked++);
    try {
      noteReceived(COLLECT_BYTES - 1);
      expect(asked).toBe(0);
      noteReceived(1);
      expect(asked).toBe(1);
      noteReceived(COLLECT_BYTES - 1);
      expect(asked).toBe(1);
      // A young collection of V8's own (taken here as serve takes it) frees what came so far: the count starts again.
      collectFunction()!({ type: "minor" });
      await new Promise((r) => setTimeout(r, 50));
      noteReceived(COLLECT_BYTES - 1);
      expect(asked).toBe(1);
      noteReceived(1);
      expect(asked).toBe(2);
    } finally {
      collecting.close();
    }
  });

  it("asks for none once stopped (counting only)", async () => {
    collectYoungBuffers().close();
    const seen = youngCollections();
    try {
      const before = performance.now();
      // Nothing here allocates enough for V8 to collect on its own in this short a time.
      noteReceived(4 * COLLECT_BYTES);
      await new Promise((r) => setTimeout(r, 50));
      expect(seen.times.filter((t) => t >= before)).toEqual([]);
    } finally {
      seen.close();
    }
  });
});

/** Starts `serve` with node flags `nodeFlags` in front of a mock engine; resolves with its URL and the child. */
async function serve(nodeFlags: string[]): Promise<{ url: string; child: ChildProcess }> {
  const { config } = await oneEngineServeConfig(tracked);
  const child = spawn(process.execPath, [...nodeFlags, GATEWAY_CLI, "serve", "--workers", "1", "--config", config], { stdio: ["ignore", "pipe", "pipe"] });
  tracked.children.push(child);
  return { url: await urlFrom(child), child };
}

/** A chat body of about `bytes` bytes whose prompt starts with `i` (no block of one is another's). */
const longChat = (i: number, bytes: number) => JSON.stringify({ model: "m", messages: [{ role: "user", content: `${i} `.padEnd(bytes, "long prompt text ") }], max_tokens: 1 });

describe("a serve process with long prompts", () => {
  it("asks V8 for young collections as their bytes come", async () => {
    const { url, child } = await serve(["--trace-gc"]);
    let trace = "";
    child.stdout!.on("data", (d) => (trace += d));
    // 2.5 times COLLECT_BYTES of prompts, 100 KB each, each a fresh text (no block of one is another's).
    const requests = Math.ceil((2.5 * COLLECT_BYTES) / 100_000);
    for (let i = 0; i < requests; i++) {
      const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: longChat(i, 100_000) });
      expect(r.status).toBe(200);
      await r.text();
    }
    // V8 names a collection asked for through its gc function "testing"; its own young collections reset the count.
    expect(trace).toMatch(/Scavenge[^\n]*testing/);
  }, 60_000);

  it("serves as before when the operator names V8's gc function otherwise (--expose-gc-as)", async () => {
    const { url } = await serve(["--expose-gc-as=collect"]);
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: longChat(i, 100_000) });
      expect(r.status).toBe(200);
      await r.text();
    }
  });
});
