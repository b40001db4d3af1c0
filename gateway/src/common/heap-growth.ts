// How far V8 lets the old generation grow between full collections, set for
// the `serve` process. A gateway's live V8 heap is small (its prefix index
// lives in wasm memory) and its young generation large under load (16 MiB
// semi-spaces). V8 starts incremental marking whenever the old generation's
// headroom is below the young generation's capacity, and its own dynamic
// factor left it below nearly always: a mark-compact every couple of hundred
// long-prompt requests, each with concurrent marking on a helper thread and
// the re-optimization of what it deoptimized. A fixed factor of 2 keeps
// fewer than half of them for a few MiB of RSS; 3 ended them for several
// times that (docs/performance.md#footprint has the figures).
//
// V8 reads the flag each time it sets the next limit, so setting it once the
// process runs takes effect at the next collection (Node runs V8 with its
// flags unfrozen). Node's command line is the only place an operator can set
// it (NODE_OPTIONS refuses V8 flags of this kind), and a value there is kept.

import { setFlagsFromString } from "node:v8";

/** The old generation may grow to (1 + this / 100) times its live size before V8 marks it. */
export const HEAP_GROWING_PERCENT = 100;

/**
 * Sets V8's heap growing factor for this process unless node's command line
 * (`execArgv`) already sets one; returns the percent in force (null: V8's own
 * dynamic factor, which an operator's `--heap-growing-percent=0` keeps).
 */
export function setHeapGrowth(execArgv: readonly string[] = process.execArgv): number | null {
  for (let i = execArgv.length - 1; i >= 0; i--) {
    // V8 takes one dash or two; Node refuses the flag without `=value`, so a value always follows it.
    const flag = /^--?heap[-_]growing[-_]percent=(.*)$/.exec(execArgv[i]!);
    if (flag === null) continue;
    const percent = Number(flag[1]);
    return Number.isInteger(percent) && percent > 0 ? percent : null;
  }
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return HEAP_GROWING_PERCENT;
}
