// How far V8 lets the old generation grow between full collections, set for
// the `serve` process. A gateway's live V8 heap is small (about 10 MiB:
// code, configuration, metrics; the prefix index lives in wasm memory) and
// its young generation large under load. V8 starts incremental marking
// whenever the old generation's headroom is below the young generation's
// capacity, and its own growing factor (about 2× the live size here) leaves
// it below nearly always: on the trace benchmark, 17 mark-compacts in 3,000
// requests, each with concurrent marking on a helper thread and the
// re-optimization of functions it deoptimized, for an eighth of the
// gateway's CPU. With the factor at 3, none in the same 3,000, at the same
// peak RSS (the old generation gains little between collections: the young
// generation's survivors are rarely promoted).
//
// V8 reads the flag each time it sets the next limit, so setting it once the
// process runs takes effect at the next collection. A `--heap-growing-percent`
// on node's own command line is the operator's and is kept.

import { setFlagsFromString } from "node:v8";

/** The old generation may grow to (1 + this / 100) times its live size before V8 marks it. */
export const HEAP_GROWING_PERCENT = 200;

/**
 * Sets V8's heap growing factor for this process unless node's command line
 * (`execArgv`) already sets one; returns the percent in force (null: V8's own
 * dynamic factor, which an operator's `--heap-growing-percent=0` keeps).
 */
export function setHeapGrowth(execArgv: readonly string[] = process.execArgv): number | null {
  for (let i = execArgv.length - 1; i >= 0; i--) {
    const flag = /^--heap[-_]growing[-_]percent(?:=(.*))?$/.exec(execArgv[i]!);
    if (flag === null) continue;
    // V8 takes `--flag=value` and `--flag value`.
    const percent = Number(flag[1] ?? execArgv[i + 1]);
    return Number.isInteger(percent) && percent > 0 ? percent : null;
  }
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return HEAP_GROWING_PERCENT;
}
