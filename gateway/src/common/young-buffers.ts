// The memory of buffers that die young, given back at a young collection
// rather than a full one. A client's request is kept in fresh memory outside
// V8's heap (copies out of the read buffer, or each read's own buffer where
// sockets read into none: http1/server-connection.ts), tens of KiB for a long
// prompt. It dies with its request, but V8 frees a buffer's memory only when
// it collects the small object that holds it, and on long prompts the heap
// itself fills too slowly for a young collection to come: the buffers pile
// up until what was allocated outside the heap since the last full
// collection eats the old generation's headroom (V8 counts it there), and
// V8 marks the whole heap again: 13 mark-compacts over bench:peers' 3,000
// measured trace requests, ~13% of the gateway's CPU there by perf (helper
// threads' marking mostly); with these collections 1, and 31 young
// collections asked for (`--trace-gc`, 2026-12-05).
//
// So `serve` counts the bytes its reads bring (noteReceived; a body gathered
// from several reads is counted again as its own buffer, which keeps the count
// above what was allocated: counting only the copies, bench:peers' trace took
// 0.98 of the CPU and 3-6 MiB more peak RSS) and asks V8 for a young
// collection each COLLECT_BYTES of them: it costs about half a millisecond
// when little is live, and frees every buffer that died. Any collection V8
// makes on its own starts the count again, so under many small requests, whose
// young generation fills first, none is asked for (none in 8 s of
// bench:peers' saturated small chats).

import { PerformanceObserver, constants } from "node:perf_hooks";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { operatorFlag } from "./heap-growth.js";

/** Bytes received between two young collections at most (measured, not derived: with the old generation at twice its live size, 0-2 full collections over bench:peers' warm-up and trace, as at three times). */
export const COLLECT_BYTES = 8 * 1024 * 1024;

/**
 * V8's collection function (`--expose-gc`'s): a full collection without options,
 * a young one with `{ type: "minor" }`. Node 20's V8 makes `{ type: "major" }` a
 * young collection too, so that option is not offered.
 */
export type Collect = (options?: { type: "minor" }) => void;

/** Bytes received since the last young collection. */
let received = 0;
/** Asks for a young collection, once started (null: counting only). */
let collectYoung: (() => void) | null = null;

/** That `bytes` arrived (a client socket's read, copied out of the read buffer or in a buffer of its own; a body gathered from several). */
export function noteReceived(bytes: number): void {
  received += bytes;
  if (received < COLLECT_BYTES || collectYoung === null) return;
  received = 0;
  collectYoung();
}

/** V8's kind of a young collection by mark-sweep (`--minor-ms`; Node names no constant for it). */
const GC_MINOR_MARK_SWEEP = 2;
/** The collection kinds that free dead young buffers: a young collection, either way, or a full one. */
const FREEING_KINDS = constants.NODE_PERFORMANCE_GC_MINOR | GC_MINOR_MARK_SWEEP | constants.NODE_PERFORMANCE_GC_MAJOR;

/**
 * V8's collection function, taken from a context made while `--expose-gc` is
 * on (set back off at once: no other context gets a `gc` global), or null
 * when it cannot be had. An operator's own `--expose-gc` or
 * `--expose-gc-as=NAME` is left as it is (with the latter no context has a
 * `gc`: counting only).
 */
export function collectFunction(execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ""): Collect | null {
  const operators = operatorFlag(/^--?expose[-_]gc/, execArgv, nodeOptions) !== null;
  if (!operators) setFlagsFromString("--expose-gc");
  try {
    const gc = runInNewContext("typeof gc === 'function' ? gc : null") as Collect | null;
    return typeof gc === "function" ? gc : null;
  } finally {
    if (!operators) setFlagsFromString("--no-expose-gc");
  }
}

/**
 * Starts asking for young collections in this process (`serve`'s, once):
 * `collect` runs one (V8's own by default; null when V8's cannot be had,
 * and then the bytes are only counted). Returns a `close()` that stops.
 */
export function collectYoungBuffers(collect: (() => void) | null = youngCollection()): { close(): void } {
  collectYoung = collect;
  // Any collection V8 makes on its own frees them too: the count starts again.
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if ((((entry as { detail?: { kind?: number } }).detail?.kind ?? 0) & FREEING_KINDS) !== 0) received = 0;
  });
  observer.observe({ entryTypes: ["gc"] });
  received = 0;
  return {
    close: () => {
      observer.disconnect();
      collectYoung = null;
    },
  };
}

/** A young collection by V8's collection function, or null when it cannot be had. */
function youngCollection(): (() => void) | null {
  const gc = collectFunction();
  return gc === null ? null : () => gc({ type: "minor" });
}
