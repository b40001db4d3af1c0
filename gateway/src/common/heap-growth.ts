// How far V8 lets a `serve` process's heap grow, set for that process. A
// gateway's live V8 heap is small (its prefix index lives in wasm memory)
// while the buffers its reads bring are large and live outside the heap. V8
// counts what was allocated outside the heap since its last full collection
// against the old generation's headroom, and marks the whole heap again when
// little is left, so a small live heap got a mark-compact every ~100 long
// prompts (24-27 in bench:peers' 3,000). The young collections young-buffers.ts
// asks for end them (the buffers die young), and two settings bound memory:
//
//   - the old generation may grow to twice its live size. Three times ended
//     most of those collections before the young ones did, and now buys
//     nothing on the trace (no more CPU a request, 0-2 full collections in
//     warm-up and trace either way), while under a connection per request,
//     whose sockets reach the old generation (a bare node:net server's do
//     too, ~540 bytes a connection), it grew to three times before each
//     mark: 133-136 MiB against 121-124 MiB at twice (3 rounds side by side);
//   - the young generation stops at 8 MiB semi-spaces (V8's own maximum is 16
//     MiB with 4 GiB of memory or more), at the same CPU per small request
//     (docs/performance.md#footprint).
//
// V8 reads the growing factor each time it sets the next limit and the
// semi-space growth factor each time it grows the young generation, so both
// take effect in a running process (Node runs V8 with its flags unfrozen).
// The young generation's maximum is fixed when the heap is made, so the cap
// is the growth factor, chosen after each collection: V8's own 2 while
// doubling stays within the cap, else 1 (V8 then grows to the size it has).
// An idle process's young generation shrinks to an uneven size, and grows
// again from there, so it may settle between half the cap and the cap. An
// operator's own settings are kept: the growing factor and the semi-space
// flags on node's command line, `--max-semi-space-size` in NODE_OPTIONS (the
// only one of them Node takes there).

import { PerformanceObserver } from "node:perf_hooks";
import { getHeapSpaceStatistics, setFlagsFromString } from "node:v8";

/** The old generation may grow to (1 + this / 100) times its live size before V8 marks it. */
export const HEAP_GROWING_PERCENT = 100;
/** The young generation's semi-space grows no further than this, MiB. */
export const SEMI_SPACE_CAP_MIB = 8;
/** V8's own semi-space growth factor: each growth doubles the semi-space. */
const V8_SEMI_SPACE_GROWTH = 2;

/**
 * Sets V8's heap growing factor for this process unless node's command line
 * (`execArgv`) already sets one; returns the percent in force (null: V8's own
 * dynamic factor, which an operator's `--heap-growing-percent=0` keeps).
 */
export function setHeapGrowth(execArgv: readonly string[] = process.execArgv): number | null {
  // V8 takes one dash or two; Node refuses the flag without `=value` (and in NODE_OPTIONS), so a value always follows it here.
  const flag = lastFlag(execArgv, /^--?heap[-_]growing[-_]percent=(.*)$/);
  if (flag !== null) {
    const percent = Number(flag);
    return Number.isInteger(percent) && percent > 0 ? percent : null;
  }
  setFlagsFromString(`--heap-growing-percent=${HEAP_GROWING_PERCENT}`);
  return HEAP_GROWING_PERCENT;
}

/** The semi-space growth factor for a young generation of `semiSpaceBytes` semi-spaces: V8's own while its doubling stays within `capBytes`, else 1. */
export function semiSpaceGrowth(semiSpaceBytes: number, capBytes: number): number {
  return semiSpaceBytes * V8_SEMI_SPACE_GROWTH <= capBytes ? V8_SEMI_SPACE_GROWTH : 1;
}

/**
 * Keeps this process's young generation within SEMI_SPACE_CAP_MIB
 * semi-spaces unless the operator sizes it (a semi-space flag on node's
 * command line or in NODE_OPTIONS); returns a `close()` that stops watching,
 * or null when the operator's setting is kept.
 */
export function capYoungGeneration(execArgv: readonly string[] = process.execArgv, nodeOptions = process.env.NODE_OPTIONS ?? ""): { close(): void } | null {
  // V8 takes one dash or two and `-` or `_` in names, and its flags need `=value`.
  const semiSpaceFlag = /^--?(?:(?:max|min)[-_]semi[-_]space[-_]size|semi[-_]space[-_]growth[-_]factor)=/;
  if (operatorFlag(semiSpaceFlag, execArgv, nodeOptions) !== null) return null;
  const capBytes = SEMI_SPACE_CAP_MIB * 1024 * 1024;
  let factor = V8_SEMI_SPACE_GROWTH;
  const observer = new PerformanceObserver(() => {
    const next = semiSpaceGrowth(semiSpaceBytes(), capBytes);
    if (next === factor) return;
    factor = next;
    setFlagsFromString(`--semi-space-growth-factor=${next}`);
  });
  observer.observe({ entryTypes: ["gc"] });
  return { close: () => observer.disconnect() };
}

/**
 * One semi-space's capacity, bytes: what the young generation holds and can
 * still take (its committed size counts the other semi-space only while V8
 * keeps that committed).
 */
function semiSpaceBytes(): number {
  for (const space of getHeapSpaceStatistics()) if (space.space_name === "new_space") return space.space_used_size + space.space_available_size;
  return 0;
}

/**
 * The first capture group of the last flag `pattern` matches on node's
 * command line (`execArgv`) or in NODE_OPTIONS, which may quote a flag ("" when
 * it has none), or null: an operator's own setting.
 */
export function operatorFlag(pattern: RegExp, execArgv: readonly string[], nodeOptions: string): string | null {
  const optionFlags = nodeOptions.split(/\s+/).map((token) => token.replace(/^["']|["']$/g, ""));
  return lastFlag([...execArgv, ...optionFlags], pattern);
}

/** The first capture group of the last of `args` that `pattern` matches ("" when it has none), or null. */
function lastFlag(args: readonly string[], pattern: RegExp): string | null {
  for (let i = args.length - 1; i >= 0; i--) {
    const match = pattern.exec(args[i]!);
    if (match !== null) return match[1] ?? "";
  }
  return null;
}
