// The self-contained HTML report of a simulation: no network, inline SVG charts.
//   1. prefix hit ratio per policy against the optimum, and prefill work balance
//   2. TTFT distribution per policy (cumulative curves, log time axis, a named legend)
//   3. load across ranks over time, one panel per policy: a rank × time heat strip
//      and, under it, the busiest rank against the mean with the spread shaded
//   4. the figures as a table that fits the window, then the event and replica notes

import { esc, heatColor, heatGradientCss, htmlPage, INK, linear, MUTED, niceCeil, niceTicks, px, seriesColor, seriesDash, svgChart, tableBlock, thousands, trim, xAxis, yAxis, type Frame } from "./html.js";
import { describeIndexUpdates, describeReplicas, figureCells, formatTable, type SimulationResult } from "./run.js";

/** Width of every chart, in SVG units: it fits a 760 px window at its own size. */
const W = 720;

/** Hit ratio as a share of the optimum, in percent. */
const percentOfOptimum = (hit: number, optimum: number): string => `${((100 * hit) / (optimum || 1)).toFixed(1)}%`;

/** Where the bar chart's columns are: names, then each panel's bars and, right of them, their value labels. */
const BARS = { nameRight: 178, hit: { left: 188, right: 398 }, prefill: { left: 520, right: 650 }, top: 60, rowH: 26 } as const;

/**
 * Hit ratio per policy against the optimum, beside prefill balance. Each value
 * label sits right of its panel's whole scale, so neither the optimum line (at
 * most the scale's end) nor the "even" line can run through it.
 */
function bars(result: SimulationResult): string {
  const ps = result.policies;
  const opt = result.optimum_prefix_hit_ratio;
  const bottom = BARS.top + ps.length * BARS.rowH + 4;
  const frameHit: Frame = { left: BARS.hit.left, right: BARS.hit.right, top: BARS.top, bottom };
  const framePrefill: Frame = { left: BARS.prefill.left, right: BARS.prefill.right, top: BARS.top, bottom };
  const hitTop = Math.min(1, niceCeil(Math.max(opt, ...ps.map((p) => p.prefix_hit_ratio), 0.01)));
  const prefillTop = niceCeil(Math.max(1, ...ps.map((p) => p.prefill_work_max_over_mean)));
  const xHit = linear(0, hitTop, frameHit.left, frameHit.right);
  const xPrefill = linear(0, prefillTop, framePrefill.left, framePrefill.right);
  const rows = ps.map((p, i) => {
    const y = BARS.top + i * BARS.rowH;
    const bar = (x: (v: number) => number, left: number, v: number) => `<rect x="${left}" y="${y + 4}" width="${px(Math.max(0, x(v) - left))}" height="16" fill="${seriesColor(i)}"><title>${esc(p.policy)}: ${v}</title></rect>`;
    return `<text x="${BARS.nameRight}" y="${y + 16}" text-anchor="end">${esc(p.policy)}</text>
${bar(xHit, frameHit.left, p.prefix_hit_ratio)}<text x="${frameHit.right + 8}" y="${y + 16}" data-role="bar-label">${p.prefix_hit_ratio.toFixed(3)} (${percentOfOptimum(p.prefix_hit_ratio, opt)})</text>
${bar(xPrefill, framePrefill.left, p.prefill_work_max_over_mean)}<text x="${framePrefill.right + 8}" y="${y + 16}" data-role="bar-label">${p.prefill_work_max_over_mean.toFixed(2)}</text>`;
  });
  const optX = px(xHit(opt));
  const evenX = px(xPrefill(1));
  const body = `<text x="${frameHit.left}" y="16" font-weight="bold">Prefix hit ratio</text>
<text x="${frameHit.left}" y="31" font-size="11" class="muted">higher is better · (share of the optimum)</text>
<text x="${framePrefill.left}" y="16" font-weight="bold">Prefill work max/mean</text>
<text x="${framePrefill.left}" y="31" font-size="11" class="muted">busiest rank ÷ mean · 1 = even</text>
${xAxis(frameHit, niceTicks(0, hitTop, 4), xHit, (v) => trim(v))}
${xAxis(framePrefill, niceTicks(0, prefillTop, 3), xPrefill, (v) => trim(v))}
${rows.join("\n")}
<line x1="${optX}" x2="${optX}" y1="${BARS.top - 6}" y2="${bottom}" stroke="${INK}" stroke-width="1.5" stroke-dasharray="5 3" data-role="optimum"/>
<text x="${optX}" y="${BARS.top - 10}" text-anchor="middle" font-size="11" data-role="optimum-label">optimum ${opt.toFixed(3)}</text>
<line x1="${evenX}" x2="${evenX}" y1="${BARS.top - 2}" y2="${bottom}" stroke="${MUTED}" stroke-dasharray="2 3" data-role="even"/>`;
  return svgChart(W, bottom + 24, "prefix hit ratio and prefill work balance per policy", "bars", body);
}

/** Round values at 1, 2 and 5 × 10^k in [lo, hi] (only the powers of ten when that would crowd the axis). */
function logTicks(lo: number, hi: number): number[] {
  const all: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) for (const m of [1, 2, 5]) all.push(m * 10 ** e);
  const inside = all.filter((v) => v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9));
  return inside.length > 9 ? inside.filter((v) => Number.isInteger(Math.log10(v))) : inside;
}

/** The nearest 1, 2 or 5 × 10^k at or below `v` (`up`: at or above): a log axis that starts and ends on a tick. */
function roundLog(v: number, up: boolean): number {
  const e = Math.floor(Math.log10(v));
  const steps = [1, 2, 5, 10].map((m) => m * 10 ** e);
  return up ? steps.find((s) => s >= v * (1 - 1e-9))! : [...steps].reverse().find((s) => s <= v * (1 + 1e-9))!;
}

/** A time in ms as an axis label: ms below a second, s above. */
const msLabel = (v: number): string => (v >= 1000 ? `${trim(v / 1000)} s` : `${trim(v)} ms`);

/** The TTFT distribution of every policy on a log time axis, each curve coloured and dashed and named in the legend under it. */
function ttftCurves(result: SimulationResult): string {
  const frame: Frame = { left: 56, right: W - 28, top: 44, bottom: 254 };
  const all = Object.values(result.ttftSorted).flatMap((a) => (a.length === 0 ? [] : [a[0]!, a[a.length - 1]!]));
  const lo = roundLog(Math.max(1, Math.min(...all, 1e9)), false);
  const hi = roundLog(Math.max(lo * 10, ...all), true);
  const x = (v: number) => linear(Math.log10(lo), Math.log10(hi), frame.left, frame.right)(Math.log10(Math.max(v, lo)));
  const y = linear(0, 1, frame.bottom, frame.top);
  const curves = result.policies.map((p, i) => {
    const s = result.ttftSorted[p.policy] ?? new Float64Array();
    if (s.length === 0) return "";
    // At most ~400 vertices: the curve's shape, not one vertex a request.
    const step = Math.max(1, Math.floor(s.length / 400));
    const pts: string[] = [];
    for (let k = 0; k < s.length; k += step) pts.push(`${px(x(s[k]!))},${px(y((k + 1) / s.length))}`);
    pts.push(`${px(x(s[s.length - 1]!))},${px(y(1))}`);
    return `<polyline fill="none" stroke="${seriesColor(i)}" stroke-width="2"${seriesDash(i)} points="${pts.join(" ")}" data-role="ttft-curve"><title>${esc(p.policy)}</title></polyline>`;
  });
  const legendTop = frame.bottom + 56;
  const cols = { name: frame.left + 38, p50: 470, p90: 545, p99: 620 };
  const legendRows = result.policies.map((p, i) => {
    const ly = legendTop + 18 * (i + 1);
    return `<g data-role="ttft-legend-item"><line x1="${frame.left}" x2="${frame.left + 30}" y1="${ly - 4}" y2="${ly - 4}" stroke="${seriesColor(i)}" stroke-width="2.5"${seriesDash(i)}/>
<text x="${cols.name}" y="${ly}">${esc(p.policy)}</text>${p.overloaded ? `<text x="${cols.name + 180}" y="${ly}" class="flag">overloaded</text>` : ""}<text x="${cols.p50}" y="${ly}" text-anchor="end">${p.ttft_ms.p50.toFixed(0)}</text><text x="${cols.p90}" y="${ly}" text-anchor="end">${p.ttft_ms.p90.toFixed(0)}</text><text x="${cols.p99}" y="${ly}" text-anchor="end">${p.ttft_ms.p99.toFixed(0)}</text></g>`;
  });
  const legend = `<g data-role="ttft-legend"><text x="${cols.name}" y="${legendTop}" font-weight="bold">policy</text><text x="${cols.p50}" y="${legendTop}" text-anchor="end" font-weight="bold">p50</text><text x="${cols.p90}" y="${legendTop}" text-anchor="end" font-weight="bold">p90</text><text x="${cols.p99}" y="${legendTop}" text-anchor="end" font-weight="bold">p99 ms</text>
${legendRows.join("\n")}</g>`;
  const body = `<text x="${frame.left}" y="16" font-weight="bold">Time to first token: share of requests served within t</text>
${yAxis(frame, [0, 0.25, 0.5, 0.75, 0.9, 1], y, (v) => trim(v), "share of requests")}
${xAxis(frame, logTicks(lo, hi), x, msLabel, "t, time to first token (log scale)")}
${curves.join("\n")}
${legend}`;
  return svgChart(W, legendTop + 18 * result.policies.length + 12, "TTFT distribution per policy", "ttft", body);
}

/** One policy's load, binned over the run's time: per rank per bin, and across ranks per bin. */
interface BinnedLoad {
  /** Mean active requests of each rank in each bin ([rank][bin]). */
  readonly perRank: number[][];
  /** Per bin: the busiest rank's, the mean rank's and the least busy rank's. */
  readonly max: number[];
  readonly mean: number[];
  readonly min: number[];
}

/** Time bins across every panel (columns of the heat strips). */
const TIME_BINS = 120;

/** How many times the median spacing between samples one sample may stand for (see {@link holdsOf}). */
const MAX_HOLD_SPACINGS = 8;

/**
 * How long each sample stands for, [from, to) in ms. The engine samples every 64
 * iterations, so a sample holds until the next one; but the simulator jumps over
 * idle time, and a sample before a jump would then claim minutes of load the
 * engine never had. So a sample holds for at most {@link MAX_HOLD_SPACINGS} times
 * the median spacing (a loaded engine's iterations are long but alike; idle
 * jumps are hundreds of spacings), and the time after it reads as idle.
 */
function holdsOf(samples: readonly number[][]): [number, number][] {
  const gaps = samples.slice(1).map((s, i) => s[0]! - samples[i]![0]!).sort((a, b) => a - b);
  const median = gaps[gaps.length >> 1] ?? 0;
  const cap = MAX_HOLD_SPACINGS * median;
  return samples.map((s, i) => [s[0]!, Math.min(samples[i + 1]?.[0] ?? s[0]! + median, s[0]! + cap)]);
}

/**
 * Each rank's active requests averaged over each of `bins` equal spans of
 * [0, tMax]: every sample's counts weighted by the time it holds within the span
 * ({@link holdsOf}); time no sample holds counts as 0.
 */
function binLoad(samples: readonly number[][], ranks: number, tMax: number, bins: number): BinnedLoad {
  const width = tMax / bins;
  const sums = Array.from({ length: ranks }, () => new Array<number>(bins).fill(0));
  holdsOf(samples).forEach(([from, to], i) => {
    const s = samples[i]!;
    for (let b = Math.max(0, Math.floor(from / width)); b < bins && b * width < to; b++) {
      const overlap = Math.min(to, (b + 1) * width) - Math.max(from, b * width);
      if (overlap > 0) for (let r = 0; r < ranks; r++) sums[r]![b]! += (s[r + 1] ?? 0) * overlap;
    }
  });
  const perRank = sums.map((row) => row.map((sum) => sum / width));
  const column = (b: number) => perRank.map((row) => row[b]!);
  const range = Array.from({ length: bins }, (_, b) => b);
  return {
    perRank,
    max: range.map((b) => Math.max(...column(b))),
    mean: range.map((b) => column(b).reduce((a, v) => a + v, 0) / Math.max(1, ranks)),
    min: range.map((b) => Math.min(...column(b))),
  };
}

/** The shared scales of the load panels, so policies compare at a glance. */
interface LoadScales {
  /** The run's end across policies, ms. */
  readonly tMax: number;
  /** Active requests at the darkest heat colour and at the band chart's top. */
  readonly heatMax: number;
}

/** Where a load panel's parts are. */
const LOAD = { left: 44, right: W - 24, stripTop: 28, bandH: 64, gap: 12 } as const;
/** The band's shade (the spread between the least and the most busy rank) and the busiest rank's line. */
const BAND_FILL = "#c9d7e6";
const MAX_LINE = "#D55E00";

/** Row height of the heat strip: 14 units a rank up to 8 ranks, then the strip stays about 112 units tall. */
const rowHeight = (ranks: number): number => (ranks <= 8 ? 14 : Math.max(2, Math.floor(112 / ranks)));

/** One heat-strip row: the rank's bins as rectangles, neighbours of one colour merged. */
function heatRow(row: readonly number[], r: number, y: number, h: number, x: (b: number) => number, heatMax: number): string {
  const rects: string[] = [];
  let start = 0;
  for (let b = 1; b <= row.length; b++) {
    const colour = heatColor(row[start]! / heatMax);
    if (b < row.length && heatColor(row[b]! / heatMax) === colour) continue;
    rects.push(`<rect x="${px(x(start))}" y="${px(y)}" width="${px(x(b) - x(start))}" height="${px(h)}" fill="${colour}"/>`);
    start = b;
  }
  return `<g data-role="heat-row" data-rank="${r}"><title>rank r${r}</title>${rects.join("")}</g>`;
}

/** A step line through per-bin values (each bin's value held across it). */
const stepPoints = (values: readonly number[], x: (b: number) => number, y: (v: number) => number): string[] =>
  values.flatMap((v, b) => [`${px(x(b))},${px(y(v))}`, `${px(x(b + 1))},${px(y(v))}`]);

/**
 * One policy's load panel: the rank × time heat strip (rows r0.., colour = mean
 * active requests), then the busiest rank's line over the mean's, the spread
 * between least and most busy rank shaded, on one time axis.
 */
function loadPanel(result: SimulationResult, policy: string, binned: BinnedLoad, scales: LoadScales): string {
  const ranks = result.ranks;
  const h = rowHeight(ranks);
  const stripBottom = LOAD.stripTop + ranks * h;
  const bandTop = stripBottom + LOAD.gap;
  const frame: Frame = { left: LOAD.left, right: LOAD.right, top: bandTop, bottom: bandTop + LOAD.bandH };
  const x = linear(0, TIME_BINS, LOAD.left, LOAD.right);
  const y = linear(0, scales.heatMax, frame.bottom, frame.top);
  // Label every rank while the labels fit their rows, else every k-th.
  const every = Math.ceil(11 / h);
  const labels = Array.from({ length: ranks }, (_, r) => r)
    .filter((r) => r % every === 0)
    .map((r) => `<text x="${LOAD.left - 6}" y="${px(LOAD.stripTop + r * h + h / 2 + 4)}" text-anchor="end" font-size="11">r${r}</text>`);
  const rows = binned.perRank.map((row, r) => heatRow(row, r, LOAD.stripTop + r * h, h, x, scales.heatMax));
  const band = [...stepPoints(binned.max, x, y), ...stepPoints(binned.min, x, y).reverse()];
  const p = result.policies.find((q) => q.policy === policy);
  const seconds = linear(0, scales.tMax / 1000, LOAD.left, LOAD.right);
  const body = `<text x="${LOAD.left}" y="16"><tspan font-weight="bold">${esc(policy)}</tspan><tspan class="muted" font-size="11">${p ? ` · requests on the busiest rank ÷ mean over the run: ${p.requests_max_over_mean.toFixed(2)}` : ""}</tspan></text>
${labels.join("")}
${rows.join("\n")}
<rect x="${LOAD.left}" y="${LOAD.stripTop}" width="${LOAD.right - LOAD.left}" height="${stripBottom - LOAD.stripTop}" fill="none" stroke="#8a8a8a"/>
${yAxis(frame, niceTicks(0, scales.heatMax, 2), y, (v) => trim(v))}
<polygon points="${band.join(" ")}" fill="${BAND_FILL}" data-role="spread"/>
<polyline points="${stepPoints(binned.mean, x, y).join(" ")}" fill="none" stroke="${INK}" stroke-width="1.5" data-role="mean-line"/>
<polyline points="${stepPoints(binned.max, x, y).join(" ")}" fill="none" stroke="${MAX_LINE}" stroke-width="1.5" data-role="max-line"/>
${xAxis(frame, niceTicks(0, scales.tMax / 1000, 6), seconds, (v) => `${trim(v)} s`, "simulated time")}`;
  return svgChart(W, frame.bottom + 40, `active requests per rank over time, ${policy}`, "heat-strip", body, ` data-policy="${esc(policy)}"`);
}

/** The load section's legend (HTML, one for every panel): the heat scale with its units, then the band chart's marks. */
function loadLegend(heatMax: number): string {
  return `<div class="legend" data-role="heat-legend"><span class="item"><span>0</span><span class="ramp" style="background:${heatGradientCss()}"></span><span>${trim(heatMax)}</span></span><span>active requests on a rank (mean over a time bin)</span></div>
<div class="legend" data-role="load-legend">
<span class="item"><span class="line" style="border-top-color:${MAX_LINE}"></span><span>busiest rank</span></span>
<span class="item"><span class="line" style="border-top-color:${INK}"></span><span>mean of the ranks</span></span>
<span class="item"><span class="box" style="background:${BAND_FILL}"></span><span>spread from the least to the most busy rank</span></span>
</div>`;
}

/** The load section: the legend, then a panel per policy on shared scales. */
function loadSection(result: SimulationResult): string {
  const tMax = Math.max(1, ...Object.values(result.loadOverTime).map((s) => s[s.length - 1]?.[0] ?? 0));
  const binned = new Map(result.policies.map((p) => [p.policy, binLoad(result.loadOverTime[p.policy] ?? [], result.ranks, tMax, TIME_BINS)]));
  const peak = Math.max(1, ...[...binned.values()].flatMap((b) => b.max));
  const scales: LoadScales = { tMax, heatMax: niceCeil(peak) };
  return `<section><h2>Load across ranks over time</h2>
<p class="caption">Each panel is one policy. The strip has a row a rank (r0 at the top) and a column every ${trim(tMax / TIME_BINS / 1000, 1)} s of simulated time, coloured by that rank's mean active requests then; under it, the busiest rank against the mean of the ranks, the gap between least and most busy rank shaded. A wide band or a strip with one dark row is imbalance. The engine is sampled every 64 iterations; a sample stands until the next one, or for at most ${MAX_HOLD_SPACINGS}× the usual spacing where the simulator skipped idle time, which reads 0.</p>
${loadLegend(scales.heatMax)}
${result.policies.map((p) => loadPanel(result, p.policy, binned.get(p.policy)!, scales)).join("\n")}
</section>`;
}

/** The figures as an HTML table: grouped headers that wrap, so it fits a 760 px window without scrolling. */
function figuresTable(result: SimulationResult): string {
  const thead = `<tr><th rowspan="2" scope="col">policy</th><th colspan="2" scope="colgroup">prefix hit ratio</th><th colspan="2" scope="colgroup">prefill</th><th rowspan="2" scope="col">requests max/<wbr>mean</th><th colspan="3" scope="colgroup">TTFT ms</th><th rowspan="2" scope="col">route µs/req</th></tr>
<tr><th scope="col">ratio</th><th scope="col">% of optimum</th><th scope="col">tokens</th><th scope="col">max/<wbr>mean</th><th scope="col">p50</th><th scope="col">p90</th><th scope="col">p99</th></tr>`;
  const rows = result.policies.map((p) => [
    `${esc(p.policy).replace(":", ":<wbr>")}${p.overloaded ? ` <span class="flag">overloaded</span>` : ""}`,
    ...figureCells(p, result.optimum_prefix_hit_ratio),
  ]);
  return tableBlock("figures", thead, rows);
}

/**
 * What the text table prints under its rows (the event model and stream counts,
 * the replicas and their stream), one list item a line. They are taken from
 * {@link formatTable} so the page and the terminal say the same words: its lines
 * are the title, a blank, the head, the rule and a row a policy, then these.
 */
function notes(result: SimulationResult): string {
  const lines = formatTable(result).split("\n").slice(4 + result.policies.length).filter((l) => l.trim() !== "");
  const overloads = result.policies.filter((p) => p.overloaded && p.overload_reason).map((p) => `${p.policy} is overloaded: ${p.overload_reason}`);
  const items = [...overloads, ...lines];
  return items.length === 0 ? "" : `<ul class="notes">${items.map((l) => `<li>${esc(l)}</li>`).join("\n")}</ul>`;
}

/** The report page. */
export function renderReport(result: SimulationResult, command: string): string {
  const body = `<h1>Attention-DP routing policies on ${esc(result.trace)}</h1>
<p>${thousands(result.requests)} requests, ${result.ranks} ranks; the optimum prefix hit ratio (one infinite cache shared by all ranks) is ${result.optimum_prefix_hit_ratio.toFixed(3)}.</p>
<p>Command: <code>${esc(command)}</code></p>
<p>The KV-cache-aware router's index learned from ${esc(describeIndexUpdates(result.index_updates))}.</p>
${result.replicas ? `<p>Routed by ${esc(describeReplicas(result.replicas))}.</p>\n` : ""}<section><h2>Cache reuse and balance</h2>
<p class="caption">Left: the share of prompt blocks found in the chosen rank's cache, the dashed line the optimum. Right: prefill work of the busiest rank over the mean rank's (1 is perfectly even).</p>
${bars(result)}</section>
<section><h2>Time to first token</h2>
<p class="caption">Each curve climbs to 1 as more requests get their first token; further left is faster. Curves that coincide belong to policies that placed requests alike.</p>
${ttftCurves(result)}</section>
${loadSection(result)}
<section><h2>Figures</h2>
${figuresTable(result)}
${notes(result)}</section>`;
  return htmlPage(`adp-router simulate: ${result.trace}`, body);
}
