// How far V8 lets the old generation grow between full collections, set for
// the `serve` process. A gateway's live V8 heap is small (about 10 MiB:
// code, configuration, metrics; the prefix index lives in wasm memory) and
// its young generation large under load (16 MiB semi-spaces). V8 starts
// incremental marking whenever the old generation's headroom is below the
// young generation's capacity, and its own dynamic factor left it below
// nearly always: on the trace benchmark, 15-19 mark-compacts in 3,000
// requests, each with concurrent marking on a helper thread and the
// re-optimization of what it deoptimized. A fixed factor of 2: 6-9 of them,
// for 7 MiB more peak RSS under the soak; 3 ended them (0) but cost 21 MiB more
// under the soak (garbage and the buffers it holds wait longer for their
// collection), past the footprint the gateway keeps to.
//
// V8 reads the flag each time it sets the next limit, so setting it once the
// process runs takes effect at the next collection. A `--heap-growing-percent`
// on node's own command line is the operator's and is kept.

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
    const flag = /^--heap[-_]growing[-_]percent(?:=(.*))?$/.exec(execArgv[i]!);
    if (flag === null) continue;
    // V8 takes `--flag=value` and `--flag value`.
    const percent = Number(flag[1] ?? execArgv[i + 1]);
    return Number.isInteger(percent) && percent > 0 ? percent : null;
  }
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return HEAP_GROWING_PERCENT;
}
