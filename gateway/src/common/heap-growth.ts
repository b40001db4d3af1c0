// How far V8 lets a `serve` process's heap grow, set for that process. A
// gateway's live V8 heap is small (its prefix index lives in wasm memory)
// while its young generation grows under load. V8 marks the old generation
// again and again when its headroom is small against the young generation,
// and each mark-compact costs concurrent marking on a helper thread and the
// re-optimization of what it deoptimized: with a factor of 2, 24-27
// mark-compacts in bench:peers' 3,000 long-prompt requests. Two settings end
// most of them (3-4 left, 16% less CPU a request), for 10-19 MiB more peak
// RSS on long prompts (the bodies' buffers wait longer for a collection) and
// about the same under saturation:
//
//   - the old generation may grow to 3 times its live size, which alone ends
//     them but held more memory under load (soak:serve's peak RSS 143 against
//     123 MiB with V8's own factor);
//   - the young generation stops at 8 MiB semi-spaces (V8's default is 16 MiB
//     on 64-bit), which gives that back (128 against 129 MiB with factor 2)
//     at the same CPU per small request (docs/performance.md#footprint).
//
// V8 reads the growing factor each time it sets the next limit and the
// semi-space growth factor each time it grows the young generation, so both
// take effect in a running process (Node runs V8 with its flags unfrozen). The
// young generation's maximum is fixed when the heap is made, so the cap is a
// growth factor of 1 while the young generation is at the cap (2, V8's own,
// below it: an idle process's young generation shrinks and must grow again),
// checked after each collection. An operator's own flag on node's command
// line, or the semi-space flags in NODE_OPTIONS, is kept.

import { PerformanceObserver } from "node:perf_hooks";
import { getHeapSpaceStatistics, setFlagsFromString } from "node:v8";

/** The old generation may grow to (1 + this / 100) times its live size before V8 marks it. */
export const HEAP_GROWING_PERCENT = 200;
/** The young generation's semi-space stops growing at this size, MiB. */
export const SEMI_SPACE_CAP_MIB = 8;
/** V8's own semi-space growth factor, in force below the cap. */
const V8_SEMI_SPACE_GROWTH = 2;

/**
 * Sets V8's heap growing factor for this process unless node's command line
 * (`execArgv`) already sets one; returns the percent in force (null: V8's own
 * dynamic factor, which an operator's `--heap-growing-percent=0` keeps).
 */
export function setHeapGrowth(execArgv: readonly string[] = process.execArgv): number | null {
  const flag = lastFlag(execArgv, /^--?heap[-_]growing[-_]percent=(.*)$/);
  if (flag !== null) {
    const percent = Number(flag);
    return Number.isInteger(percent) && percent > 0 ? percent : null;
  }
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return HEAP_GROWING_PERCENT;
}

/**
 * Stops this process's young generation growing past SEMI_SPACE_CAP_MIB
 * semi-spaces unless the operator sizes it (a semi-space flag on node's
 * command line or in NODE_OPTIONS); returns a `close()` that stops watching,
 * or null when the operator's setting is kept.
 */
export function capYoungGeneration(execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ""): { close(): void } | null {
  const semiSpaceFlag = /^--?(?:max|min)[-_]semi[-_]space[-_]size(?:=|$)|^--?semi[-_]space[-_]growth[-_]factor(?:=|$)/;
  if (lastFlag([...execArgv, ...nodeOptions.split(/\s+/)], semiSpaceFlag) !== null) return null;
  /** Committed bytes of the young generation (both semi-spaces) at the cap. */
  const capBytes = 2 * SEMI_SPACE_CAP_MIB * 1024 * 1024;
  let atCap = false;
  const observer = new PerformanceObserver(() => {
    const now = youngGenerationBytes() >= capBytes;
    if (now === atCap) return;
    atCap = now;
    setFlagsFromString(`--semi-space-growth-factor=${now ? 1 : V8_SEMI_SPACE_GROWTH}`);
  });
  observer.observe({ entryTypes: ["gc"] });
  return { close: () => observer.disconnect() };
}

/** The young generation's committed bytes (its two semi-spaces). */
function youngGenerationBytes(): number {
  for (const space of getHeapSpaceStatistics()) if (space.space_name === "new_space") return space.space_size;
  return 0;
}

/** The first capture group of the last of `args` that `pattern` matches ("" when it has none), or null. */
function lastFlag(args: readonly string[], pattern: RegExp): string | null {
  for (let i = args.length - 1; i >= 0; i--) {
    const match = pattern.exec(args[i]!);
    if (match !== null) return match[1] ?? "";
  }
  return null;
}
