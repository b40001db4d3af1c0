// The self-contained HTML report of `adp-router tune`: no network, inline SVG.
//   1. what was searched and what won, with the attention_dp_config block to paste
//   2. every evaluated config in two scatter plots, the objective against hit ratio
//      and against prefill imbalance: coloured and shaped by router kind, the
//      infeasible hollow and grey, the baseline and the best labelled, and the
//      Pareto front of each pair of axes ringed and joined by a step line
//   3. the ten best feasible configs and the baseline as a table
// Same page style as the simulate report (./html.ts).

import { parseAttentionDpConfig, toAttentionDpConfigInput, type AttentionDpConfigInput } from "../config.js";
import { breakable, esc, htmlPage, INK, linear, MUTED, niceTicks, px, seriesColor, svgChart, tableBlock, trim, xAxis, yAxis, type Frame } from "./html.js";
import { compareTunePoints, configKey } from "./tune.js";
import type { RouterKind, TuneMetrics, TunePoint, TuneResult } from "./tune-types.js";

/** Which way is better on an axis. */
export type Better = "min" | "max";

/** The metrics the objective is plotted against (each with a fixed better direction). */
export type ParetoAxis = "hit_ratio" | "prefill_imbalance";

/** Which way each plotted metric is better: more cache hits, less imbalance. */
export const AXIS_BETTER: Readonly<Record<ParetoAxis, Better>> = { hit_ratio: "max", prefill_imbalance: "min" };

/** `v` signed so that larger is better. */
const gain = (v: number, better: Better): number => (better === "max" ? v : -v);

/**
 * The Pareto front of `points` on (metrics[xKey], objective): the points no other
 * point dominates, where one dominates another when it is at least as good on
 * both and strictly better on one. Points tied on both stay together (neither
 * dominates). Sorted by x ascending, then objective ascending, then id. Pure;
 * O(n log n), so a search of any budget draws at once.
 */
export function paretoFront(points: readonly TunePoint[], xKey: ParetoAxis, xBetter: Better, direction: Better): TunePoint[] {
  const scored = points.map((p) => ({ p, gx: gain(p.metrics[xKey], xBetter), gy: gain(p.objective, direction) }));
  // Best x first: a point is on the front when nothing with a strictly better x is as good on y,
  // and it is the best y among the points of its own x.
  scored.sort((a, b) => b.gx - a.gx || b.gy - a.gy);
  const front: TunePoint[] = [];
  let bestBefore = -Infinity;
  for (let i = 0; i < scored.length; ) {
    let j = i;
    while (j < scored.length && scored[j]!.gx === scored[i]!.gx) j++;
    const top = scored[i]!.gy;
    if (top > bestBefore) for (let k = i; k < j && scored[k]!.gy === top; k++) front.push(scored[k]!.p);
    bestBefore = Math.max(bestBefore, top);
    i = j;
  }
  return front.sort((a, b) => a.metrics[xKey] - b.metrics[xKey] || a.objective - b.objective || a.id - b.id);
}

/**
 * The step line along a front (sorted as {@link paretoFront} returns it): between
 * two neighbours it turns at the worse x and the worse objective of the pair, so
 * it bounds the region the front dominates.
 */
export function paretoSteps(front: readonly TunePoint[], xKey: ParetoAxis, xBetter: Better, direction: Better): [number, number][] {
  const steps: [number, number][] = [];
  front.forEach((p, i) => {
    const prev = front[i - 1];
    if (prev) {
      const x = gain(prev.metrics[xKey], xBetter) < gain(p.metrics[xKey], xBetter) ? prev.metrics[xKey] : p.metrics[xKey];
      const y = gain(prev.objective, direction) < gain(p.objective, direction) ? prev.objective : p.objective;
      steps.push([x, y]);
    }
    steps.push([p.metrics[xKey], p.objective]);
  });
  return steps;
}

/** The router kinds in legend order, each with its colour and marker shape (shape too: colour is not enough alone). */
const KINDS: readonly { readonly kind: RouterKind; readonly shape: Shape }[] = [
  { kind: "default", shape: "circle" },
  { kind: "kv_cache_aware", shape: "square" },
  { kind: "conversation", shape: "triangle" },
];

/** A marker's shape. */
type Shape = "circle" | "square" | "triangle";

/** Infeasible points: hollow, grey outline (3:1 against white, a visible mark). */
const INFEASIBLE = "#767676";

/** The colour of a router kind (the simulate report's first series colours). */
const kindColor = (kind: RouterKind): string => seriesColor(Math.max(0, KINDS.findIndex((k) => k.kind === kind)));

/** The marker shape of a router kind. */
const kindShape = (kind: RouterKind): Shape => KINDS.find((k) => k.kind === kind)?.shape ?? "circle";

/** A marker of `shape` centred on (x, y), about 9 units across; `attrs` colours and tags it, `tooltip` (if any) shows on hover. */
function marker(shape: Shape, x: number, y: number, attrs: string, tooltip = ""): string {
  const inside = tooltip === "" ? "/>" : `><title>${esc(tooltip)}</title></${shape === "square" ? "rect" : shape === "circle" ? "circle" : "polygon"}>`;
  if (shape === "circle") return `<circle cx="${px(x)}" cy="${px(y)}" r="4.5" ${attrs}${inside}`;
  if (shape === "square") return `<rect x="${px(x - 4)}" y="${px(y - 4)}" width="8" height="8" ${attrs}${inside}`;
  return `<polygon points="${px(x)},${px(y - 5.5)} ${px(x + 5)},${px(y + 3.5)} ${px(x - 5)},${px(y + 3.5)}" ${attrs}${inside}`;
}

/** What hovering a point tells: which config it is and its figures (points often coincide: each says so). */
const tooltipOf = (p: TunePoint): string =>
  `point ${p.id} (${p.stage}), ${p.kind}${p.feasible ? "" : ", infeasible"}: ${nonDefault(p.config).map(([k, v]) => `${k}=${yamlScalar(v)}`).join(", ") || "defaults"}; ` +
  `TTFT p50/p90/p99 ${p.metrics.ttft_p50}/${p.metrics.ttft_p90}/${p.metrics.ttft_p99} ms, hit ratio ${p.metrics.hit_ratio}, prefill max/mean ${p.metrics.prefill_imbalance}`;

/** A point's marker: its kind's shape, filled with its kind's colour when feasible, hollow and grey when not. */
const pointMarker = (p: TunePoint, x: number, y: number): string =>
  marker(
    kindShape(p.kind),
    x,
    y,
    `${p.feasible ? `fill="${kindColor(p.kind)}" stroke="#fff" stroke-width="0.8"` : `fill="#fff" stroke="${INFEASIBLE}" stroke-width="1.5"`} data-role="point" data-id="${p.id}" data-kind="${p.kind}" data-feasible="${p.feasible}"`,
    tooltipOf(p),
  );

/** Words for the objective and each plotted metric. */
const NAMES: Readonly<Record<keyof TuneMetrics | ParetoAxis, string>> = {
  ttft_p50: "TTFT p50 (ms)",
  ttft_p90: "TTFT p90 (ms)",
  ttft_p99: "TTFT p99 (ms)",
  hit_ratio: "prefix hit ratio",
  prefill_imbalance: "prefill work max/mean",
  requests_imbalance: "requests max/mean",
  overloaded: "overloaded",
};

/** "lower is better" or "higher is better". */
const betterWords = (better: Better): string => (better === "min" ? "lower is better" : "higher is better");

/** A scale's domain around `values`: padded by 6% of their range (or a little around a single value) so no marker sits on an axis. */
function domainOf(values: readonly number[]): [number, number] {
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  const pad = hi > lo ? (hi - lo) * 0.06 : Math.max(Math.abs(lo) * 0.05, 0.01);
  return [lo - pad, hi + pad];
}

/** The points the report names: the baseline and the best (null when they are not among the points). */
interface Named {
  readonly baseline: TunePoint | null;
  readonly best: TunePoint | null;
}


/** The baseline (point 0) and the point whose config is the result's best (the best-ranked such, metrics equal). */
function namedPoints(result: TuneResult, ranked: readonly TunePoint[]): Named {
  const baseline = result.points.find((p) => p.id === 0) ?? null;
  const chosen = result.best;
  if (chosen === null) return { baseline, best: null };
  const bestKey = configKey(chosen.config);
  const best = ranked.find((p) => configKey(p.config) === bestKey && p.objective === chosen.metrics[result.objective]) ?? ranked.find((p) => configKey(p.config) === bestKey) ?? null;
  return { baseline, best };
}

/** Scatter plot size: two fit side by side in the page's 960 px, one at a time in a 760 px window. */
const SW = 460;
const SH = 350;

/** A label in a white box beside a point, kept inside the plot: "baseline", "best" or both. */
interface PointLabel {
  readonly text: string;
  readonly x: number;
  readonly y: number;
  readonly role: string;
}

/** Width of `text` at 12 px in system-ui, estimated (boxes only; the text is measured by the browser). */
const textWidth = (text: string): number => text.length * 7 + 8;

/**
 * Boxes for the labels: right of and above the point, or left of / below it where
 * that leaves the frame; a second label that would overlap the first moves below.
 */
function placeLabels(labels: readonly PointLabel[], frame: Frame): string {
  const placed: { x: number; y: number; w: number; h: number }[] = [];
  const out: string[] = [];
  for (const label of labels) {
    const w = textWidth(label.text);
    const h = 18;
    let x = label.x + 10 + w > frame.right ? label.x - 10 - w : label.x + 10;
    let y = label.y - 12 - h < frame.top ? label.y + 10 : label.y - 12 - h;
    x = Math.max(frame.left + 2, Math.min(frame.right - w - 2, x));
    const clash = () => placed.some((b) => x < b.x + b.w && b.x < x + w && y < b.y + b.h && b.y < y + h);
    if (clash()) y = Math.min(frame.bottom - h - 2, label.y + 10);
    if (clash()) y = Math.max(frame.top + 2, label.y - 12 - 2 * h - 4);
    placed.push({ x, y, w, h });
    const anchorX = x + w / 2 > label.x ? x : x + w;
    out.push(`<g data-role="${label.role}"><line x1="${px(label.x)}" y1="${px(label.y)}" x2="${px(anchorX)}" y2="${px(y + h / 2)}" stroke="${INK}" stroke-width="1"/><rect x="${px(x)}" y="${px(y)}" width="${w}" height="${h}" rx="3" fill="#fff" stroke="${INK}" stroke-width="1"/><text x="${px(x + 4)}" y="${px(y + 13)}" font-weight="bold">${esc(label.text)}</text></g>`);
  }
  return out.join("\n");
}

/** The baseline and best labels of one plot (one "baseline = best" label when they are the same point). */
function labelsOf(named: Named, at: (p: TunePoint) => [number, number]): PointLabel[] {
  const { baseline, best } = named;
  if (baseline && best && baseline.id === best.id) return [{ text: "baseline = best", x: at(best)[0], y: at(best)[1], role: "best-label" }];
  const labels: PointLabel[] = [];
  if (best) labels.push({ text: "best", x: at(best)[0], y: at(best)[1], role: "best-label" });
  if (baseline) labels.push({ text: "baseline", x: at(baseline)[0], y: at(baseline)[1], role: "baseline-label" });
  return labels;
}

/** The objective against one metric: every point, the front of that pair ringed and stepped, baseline and best labelled. */
function scatter(result: TuneResult, xKey: ParetoAxis, named: Named): string {
  const frame: Frame = { left: 60, right: SW - 16, top: 44, bottom: SH - 52 };
  const xBetter = AXIS_BETTER[xKey];
  const pts = result.points;
  const [x0, x1] = domainOf(pts.map((p) => p.metrics[xKey]));
  const [y0, y1] = domainOf(pts.map((p) => p.objective));
  const x = linear(x0, x1, frame.left, frame.right);
  const y = linear(y0, y1, frame.bottom, frame.top);
  const at = (p: TunePoint): [number, number] => [x(p.metrics[xKey]), y(p.objective)];
  const front = paretoFront(pts.filter((p) => p.feasible), xKey, xBetter, result.direction);
  const steps = paretoSteps(front, xKey, xBetter, result.direction).map(([sx, sy]) => `${px(x(sx))},${px(y(sy))}`);
  // Infeasible first, so feasible markers are drawn over them.
  const markers = [...pts].sort((a, b) => Number(a.feasible) - Number(b.feasible) || a.id - b.id).map((p) => pointMarker(p, ...at(p)));
  const rings = front.map((p) => `<circle cx="${px(at(p)[0])}" cy="${px(at(p)[1])}" r="8" fill="none" stroke="${INK}" stroke-width="1.5" data-role="pareto" data-id="${p.id}"/>`);
  const decimals = (lo: number, hi: number) => Math.max(0, Math.min(4, 1 - Math.floor(Math.log10(Math.max(hi - lo, 1e-9)))));
  const xd = decimals(x0, x1);
  const yd = decimals(y0, y1);
  const body = `<text x="${frame.left}" y="16" font-weight="bold">${esc(NAMES[result.objective])} against ${esc(NAMES[xKey])}</text>
${yAxis(frame, niceTicks(y0, y1, 7), y, (v) => trim(v, yd), `${NAMES[result.objective]}, ${betterWords(result.direction)}`)}
${xAxis(frame, niceTicks(x0, x1, 5), x, (v) => trim(v, xd), `${NAMES[xKey]}, ${betterWords(xBetter)}`)}
<polyline points="${steps.join(" ")}" fill="none" stroke="${INK}" stroke-width="1.2" stroke-dasharray="4 3" data-role="pareto-line"/>
${markers.join("\n")}
${rings.join("\n")}
${placeLabels(labelsOf(named, at), frame)}`;
  return svgChart(SW, SH, `${NAMES[result.objective]} against ${NAMES[xKey]} for every evaluated config`, "scatter", body, ` data-x="${xKey}"`);
}

/** The plots' shared legend: kinds (colour and shape), infeasible, the front, the labels. */
function scatterLegend(): string {
  const items: string[] = [];
  let x = 8;
  const item = (mark: string, text: string, role: string) => {
    items.push(`<g data-role="${role}">${mark}<text x="${x + 16}" y="18">${esc(text)}</text></g>`);
    x += 16 + textWidth(text) + 10;
  };
  for (const { kind, shape } of KINDS) item(marker(shape, x + 5, 14, `fill="${kindColor(kind)}"`), kind, "legend-kind");
  item(marker("circle", x + 5, 14, `fill="#fff" stroke="${INFEASIBLE}" stroke-width="1.5"`), "infeasible", "legend-infeasible");
  item(`<circle cx="${x + 5}" cy="14" r="7" fill="none" stroke="${INK}" stroke-width="1.5"/>`, "Pareto front", "legend-pareto");
  return svgChart(Math.max(SW, x), 28, "legend of the scatter plots", "scatter-legend", items.join("\n"));
}

/** TensorRT-LLM's default of every field (snake_case). */
const DEFAULTS: Readonly<Record<string, unknown>> = toAttentionDpConfigInput(parseAttentionDpConfig({}));

/** The fields of `config` that differ from TensorRT-LLM's defaults, in the config's order. */
const nonDefault = (config: AttentionDpConfigInput): [string, unknown][] => Object.entries(config).filter(([k, v]) => DEFAULTS[k] !== v);

/** A YAML scalar: numbers and booleans as they are, words bare, anything else quoted. */
const yamlScalar = (v: unknown): string => (typeof v === "string" && !/^[A-Za-z_][\w.-]*$/.test(v) ? JSON.stringify(v) : String(v));

/** `config` as an `attention_dp_config:` YAML block, two-space indent, keys in the config's order. */
export function attentionDpConfigYaml(config: AttentionDpConfigInput): string {
  const entries = Object.entries(config);
  if (entries.length === 0) return "attention_dp_config: {}\n";
  return `attention_dp_config:\n${entries.map(([k, v]) => `  ${k}: ${yamlScalar(v)}`).join("\n")}\n`;
}

/** How many feasible configs the table lists. */
const TOP = 10;

/** The table: the ten best feasible configs, then the baseline; the objective's column in bold. */
function topTable(result: TuneResult, ranked: readonly TunePoint[], named: Named): string {
  const top = ranked.filter((p) => p.feasible).slice(0, TOP);
  const columns: readonly (keyof TuneMetrics)[] = ["ttft_p50", "ttft_p90", "ttft_p99", "hit_ratio", "prefill_imbalance", "requests_imbalance"];
  const mark = (key: keyof TuneMetrics, text: string) => (key === result.objective ? `<strong>${text}</strong>` : text);
  const head = (key: keyof TuneMetrics, text: string) => `<th scope="col">${key === result.objective ? `${text}<br><span class="objective">objective</span>` : text}</th>`;
  const thead = `<tr><th rowspan="2" scope="col"># · router</th><th rowspan="2" scope="col" class="text">config</th><th colspan="3" scope="colgroup">TTFT ms</th><th rowspan="2" scope="col">hit<br>ratio${result.objective === "hit_ratio" ? '<br><span class="objective">objective</span>' : ""}</th><th rowspan="2" scope="col">prefill<br>max/<wbr>mean${result.objective === "prefill_imbalance" ? '<br><span class="objective">objective</span>' : ""}</th><th rowspan="2" scope="col">requests<br>max/<wbr>mean</th></tr>
<tr>${head("ttft_p50", "p50")}${head("ttft_p90", "p90")}${head("ttft_p99", "p99")}</tr>`;
  const row = (p: TunePoint, rank: string): string[] => {
    const fields = nonDefault(p.config);
    const who = p.id === named.best?.id ? `${rank} <span class="tag">best</span>` : rank;
    return [
      `${who}<br>${breakable(p.kind)}<br><span class="sub">point ${p.id} · ${esc(p.stage)}</span>${p.feasible ? "" : `<br><span class="flag">infeasible</span>`}`,
      fields.length === 0 ? "defaults" : fields.map(([k, v]) => `<code>${breakable(k.replace(/^kv_cache_routing_/, ""))}:&nbsp;${breakable(yamlScalar(v))}</code>`).join("<br>"),
      ...columns.map((key) => {
        const v = p.metrics[key] as number;
        return mark(key, key.startsWith("ttft") ? v.toFixed(1) : v.toFixed(3));
      }),
    ];
  };
  const rows = top.map((p, i) => row(p, String(i + 1)));
  if (named.baseline) rows.push(row(named.baseline, "baseline"));
  return tableBlock("top-configs", thead, rows, [0, 1]);
}

/** The summary: search, objective, constraints, and best against baseline. */
function summary(result: TuneResult): string {
  const limits = [
    result.constraints.max_prefill_imbalance !== undefined ? `prefill max/mean at most ${result.constraints.max_prefill_imbalance}` : "",
    result.constraints.min_hit_ratio !== undefined ? `hit ratio at least ${result.constraints.min_hit_ratio}` : "",
  ].filter(Boolean);
  const feasible = result.points.filter((p) => p.feasible).length;
  const head = `<p>${result.evaluated} configs simulated on ${esc(result.trace)} (${result.requests} requests, ${result.ranks} ranks). Objective: <strong>${esc(NAMES[result.objective])}</strong>, ${betterWords(result.direction)}. Feasible: not overloaded${limits.length ? `, ${esc(limits.join(", "))}` : ""} (${feasible} of ${result.points.length}).</p>`;
  if (result.best === null) return `${head}\n<p data-role="verdict"><span class="flag">No config to recommend</span>: ${esc(result.infeasible_reason ?? "no evaluated config is feasible")}.</p>`;
  const best = result.best.metrics[result.objective] as number;
  const base = result.baseline.metrics[result.objective] as number;
  const change = base === 0 ? "" : ` (${best >= base ? "+" : "−"}${Math.abs((100 * (best - base)) / base).toFixed(1)}%)`;
  return `${head}\n<p data-role="verdict">Best ${esc(NAMES[result.objective])}: ${trim(best)} against the baseline's ${trim(base)}${change}.</p>`;
}

/** The page's own style on top of the shared one: the table's tags, the plots side by side where they fit. */
const TUNE_CSS = `.tag{font-size:11px;font-weight:600;border:1px solid ${INK};border-radius:3px;padding:0 3px}.sub{color:${MUTED};font-size:12px}.objective{font-weight:400;color:${MUTED};font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:0 24px}.plots svg.chart{flex:1 1 ${SW - 40}px}`;

/** The report page of a `tune` run. */
export function tuneReportHtml(result: TuneResult): string {
  const ranked = [...result.points].sort(compareTunePoints(result.objective, result.direction));
  const named = namedPoints(result, ranked);
  const body = `<h1>attention_dp_config search on ${esc(result.trace)}</h1>
${summary(result)}
${result.best === null ? "" : `<section><h2>Recommended config</h2>
<p class="caption">The best feasible config, as the block to paste into <code>extra_llm_api_options.yaml</code>.</p>
<pre data-role="best-yaml">${esc(attentionDpConfigYaml(result.best.config))}</pre></section>`}
<section><h2>Every evaluated config</h2>
<p class="caption">One marker a simulated config: colour and shape give the router it selects; hollow grey ones broke a constraint or overloaded the engine. Ringed points joined by the dashed steps are the Pareto front of the feasible configs for that pair of axes: none of the others is better on both.</p>
${scatterLegend()}
<div class="plots">${scatter(result, "hit_ratio", named)}
${scatter(result, "prefill_imbalance", named)}</div></section>
<section><h2>Top ${TOP} feasible configs and the baseline</h2>
<p class="caption">Best first, as the search ranks them. Each config lists the fields that differ from TensorRT-LLM's defaults, without their <code>kv_cache_routing_</code> prefix.</p>
${topTable(result, ranked, named)}</section>`;
  return htmlPage(`adp-router tune: ${result.trace}`, body, TUNE_CSS);
}
