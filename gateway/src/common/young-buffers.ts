// The memory of buffers that die young, given back at a young collection
// rather than a full one. Every socket read of a client's request is a
// fresh buffer outside V8's heap (Node takes none of the caller's for an
// accepted socket), and a long prompt's body is tens of KiB of them. They
// die with their request, but V8 frees a buffer's memory only when it
// collects the small object that holds it, and on long prompts the heap
// itself fills too slowly for a young collection to come: the buffers pile
// up until what was allocated outside the heap since the last full
// collection eats the old generation's headroom (V8 counts it there), and
// V8 marks the whole heap again (a mark-compact every ~215 requests of
// bench:peers' trace, ~13% of the gateway's CPU there by perf, on helper
// threads mostly).
//
// So `serve` counts the bytes its reads bring (noteReceived) and asks V8 for
// a young collection each COLLECT_BYTES of them: it costs about half a
// millisecond when little is live, and frees every buffer that died. Any
// young collection V8 makes on its own starts the count again, so under
// many small requests, whose young generation fills first, none is asked
// for.

import { PerformanceObserver, constants } from "node:perf_hooks";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

/** Bytes received between two young collections at most (well within the headroom V8 leaves a small heap: about 12 MiB). */
export const COLLECT_BYTES = 8 * 1024 * 1024;

/** V8's collection function (`--expose-gc`'s), with the options it takes. */
type Collect = (options: { type: "minor" | "major" }) => void;

/** Bytes received since the last young collection. */
let received = 0;
/** Asks for a young collection, once started (null: counting only). */
let collectYoung: (() => void) | null = null;

/** That `bytes` arrived in fresh buffers (a client socket's read, a body gathered from several). */
export function noteReceived(bytes: number): void {
  received += bytes;
  if (received < COLLECT_BYTES || collectYoung === null) return;
  received = 0;
  collectYoung();
}

/**
 * Starts asking for young collections in this process (`serve`'s, once);
 * returns a `close()` that stops (tests). V8's collection function is taken
 * from a context made while `--expose-gc` is on (it is set back off at
 * once: no other context gets a `gc` global).
 */
export function collectYoungBuffers(): { close(): void } {
  const exposed = typeof (globalThis as { gc?: unknown }).gc === "function";
  if (!exposed) setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as Collect;
  if (!exposed) setFlagsFromString("--no-expose-gc");
  collectYoung = () => gc({ type: "minor" });
  // V8's own young collections free them too: the count starts again.
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (((entry as { detail?: { kind?: number } }).detail)?.kind === constants.NODE_PERFORMANCE_GC_MINOR) received = 0;
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
