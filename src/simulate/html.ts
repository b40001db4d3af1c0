// What the self-contained HTML reports share (`simulate --report`, `tune --report`):
// one page style, escaping, a colour-blind-safe palette, a sequential heat scale,
// round axis ticks and SVG axes. Platform-neutral; the pages load nothing.
//
// Every text colour here keeps a contrast of at least 4.5:1 (WCAG 2.x AA for normal
// text) against the white page and the light table backgrounds; charts put text on
// white only, never on a coloured mark.

/** Text escaped for HTML (and for SVG inside it). */
export const esc = (s: string): string => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

/** Escaped text that may wrap after `:` and `_` (long policy and field names in narrow table cells). */
export const breakable = (s: string): string => esc(s).replace(/([:_])/g, "$1<wbr>");

/** The text colour: 16.7:1 on white. */
export const INK = "#1f1f1f";
/** Secondary text (captions, axis titles): 7:1 on white, 6.3:1 on the table's header. */
export const MUTED = "#595959";

/**
 * Series colours: Okabe & Ito's palette, told apart with the common colour-vision
 * deficiencies; the yellow, weakest on white, comes last. Marks only, never text.
 */
export const SERIES_COLORS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442"] as const;
/** Dash patterns that tell series apart where colour alone would not (print, colour blindness). */
export const SERIES_DASHES = ["", "7 3", "2 2", "9 3 2 3", "4 4", "1 3", "12 4", "6 2 2 2 2 2"] as const;

/** Series `i`'s colour. */
export const seriesColor = (i: number): string => SERIES_COLORS[i % SERIES_COLORS.length]!;
/** Series `i`'s dash pattern, as an attribute (nothing for a solid line). */
export const seriesDash = (i: number): string => {
  const dash = SERIES_DASHES[i % SERIES_DASHES.length]!;
  return dash === "" ? "" : ` stroke-dasharray="${dash}"`;
};

/** ColorBrewer's YlGnBu, light to dark: sequential, colour-blind-safe, and 0 reads as "nothing". */
const HEAT_STOPS = ["#ffffd9", "#edf8b1", "#c7e9b4", "#7fcdbb", "#41b6c4", "#1d91c0", "#225ea8", "#253494", "#081d58"] as const;

/** The heat colour of `t` in [0, 1] (clamped), interpolated between {@link HEAT_STOPS}. */
export function heatColor(t: number): string {
  const u = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0)) * (HEAT_STOPS.length - 1);
  const k = Math.min(HEAT_STOPS.length - 2, Math.floor(u));
  const [a, b] = [rgbOf(HEAT_STOPS[k]!), rgbOf(HEAT_STOPS[k + 1]!)];
  const f = u - k;
  return `#${a.map((v, i) => Math.round(v + (b[i]! - v) * f).toString(16).padStart(2, "0")).join("")}`;
}

/** The CSS gradient of the heat scale, left (0) to right (1), for legends. */
export const heatGradientCss = (): string => `linear-gradient(to right, ${HEAT_STOPS.join(", ")})`;

/** [r, g, b] of a `#rrggbb` colour. */
const rgbOf = (hex: string): number[] => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));

/**
 * Round tick values covering [lo, hi], about `count` of them, in steps of 1, 2 or
 * 5 × 10^k (so axes read 0, 200, 400 rather than 0, 183, 366).
 */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw)!;
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/** The smallest round tick at or above `hi` (an axis end that shows its maximum). */
export const niceCeil = (hi: number): number => {
  const ticks = niceTicks(0, hi, 4);
  const last = ticks[ticks.length - 1]!;
  return last >= hi ? last : last + (ticks[1] ?? last) - (ticks[0] ?? 0);
};

/** A linear map from the domain [d0, d1] to the range [r0, r1] (the midpoint of the range for an empty domain). */
export const linear = (d0: number, d1: number, r0: number, r1: number) => (v: number): number =>
  d1 === d0 ? (r0 + r1) / 2 : r0 + ((v - d0) / (d1 - d0)) * (r1 - r0);

/** `v` with at most `digits` decimals, trailing zeros dropped (axis labels: 0.5, not 0.500). */
export const trim = (v: number, digits = 3): string => String(Number(v.toFixed(digits)));

/** A number with thousands separators. */
export const thousands = (v: number, digits = 0): string => v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });

/** A coordinate, rounded to tenths (smaller pages, same picture). */
export const px = (v: number): string => v.toFixed(1);

/** A plot's frame: where its axes are in the SVG. */
export interface Frame {
  readonly left: number;
  readonly right: number;
  readonly top: number;
  readonly bottom: number;
}

/** A horizontal axis at the frame's bottom: base line, tick marks, labels and an optional title under them. */
export function xAxis(frame: Frame, ticks: readonly number[], x: (v: number) => number, label: (v: number) => string, title = ""): string {
  const marks = ticks.map((v) => {
    const at = px(x(v));
    return `<line x1="${at}" x2="${at}" y1="${frame.bottom}" y2="${frame.bottom + 4}" stroke="${INK}"/><text x="${at}" y="${frame.bottom + 16}" text-anchor="middle" font-size="11">${esc(label(v))}</text>`;
  });
  const caption = title === "" ? "" : `<text x="${px((frame.left + frame.right) / 2)}" y="${frame.bottom + 32}" text-anchor="middle" font-size="11" class="muted">${esc(title)}</text>`;
  return `<line x1="${frame.left}" x2="${frame.right}" y1="${frame.bottom}" y2="${frame.bottom}" stroke="${INK}"/>${marks.join("")}${caption}`;
}

/** A vertical axis at the frame's left, with light grid lines across the plot (a title, if any, goes above it). */
export function yAxis(frame: Frame, ticks: readonly number[], y: (v: number) => number, label: (v: number) => string, title = ""): string {
  const marks = ticks.map((v) => {
    const at = px(y(v));
    return `<line x1="${frame.left}" x2="${frame.right}" y1="${at}" y2="${at}" stroke="#e3e3e3"/><text x="${frame.left - 6}" y="${px(y(v) + 4)}" text-anchor="end" font-size="11">${esc(label(v))}</text>`;
  });
  const caption = title === "" ? "" : `<text x="${frame.left}" y="${frame.top - 8}" font-size="11" class="muted">${esc(title)}</text>`;
  return `${marks.join("")}<line x1="${frame.left}" x2="${frame.left}" y1="${frame.top}" y2="${frame.bottom}" stroke="${INK}"/>${caption}`;
}

/**
 * An inline SVG chart `width` × `height` user units wide: drawn at its own size
 * when the page has room, shrunk with the page when it has not (never wider than
 * the page, so nothing scrolls sideways). `role` names it for tests and styling.
 */
export function svgChart(width: number, height: number, label: string, role: string, body: string, attrs = ""): string {
  return `<svg class="chart" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" style="max-width:${width}px" role="img" aria-label="${esc(label)}" data-role="${role}"${attrs}>
${body}
</svg>`;
}

/**
 * A table inside a box of the page's width. Number columns shrink to their figures
 * (which never break) and the `textColumns` (left-aligned) take the rest, so
 * headers and long names wrap rather than push the table wider than the window.
 */
export const tableBlock = (role: string, thead: string, rows: readonly (readonly string[])[], textColumns: readonly number[] = [0]): string =>
  `<div class="table-wrap" data-role="table-wrap"><table data-role="${role}"><thead>${thead}</thead>
<tbody>${rows.map((cells) => `<tr>${cells.map((c, i) => `<td class="${textColumns.includes(i) ? "text" : "num"}">${c}</td>`).join("")}</tr>`).join("\n")}</tbody></table></div>`;

/** The pages' style: readable line length, AA text contrast, charts and tables that fit the window. */
const PAGE_CSS = `:root{color-scheme:light}
body{font:15px/1.45 system-ui,sans-serif;margin:16px;color:${INK};background:#fff}
main{max-width:960px;margin:0 auto}
h1{font-size:1.45rem;line-height:1.25;overflow-wrap:anywhere}
h2{font-size:1.15rem;margin:2rem 0 .4rem}
h3{font-size:1rem;margin:1.2rem 0 .2rem}
p{margin:.4rem 0}
.caption{color:${MUTED};font-size:.9rem;max-width:46rem}
code{background:#f1f1f1;padding:0 .2em;overflow-wrap:anywhere}
pre{background:#f4f4f4;padding:10px 12px;overflow-x:auto;font-size:13px}
svg.chart{display:block;width:100%;height:auto;margin:.5rem 0;background:#fff;font:12px system-ui,sans-serif}
svg.chart text{fill:${INK}}
svg.chart .muted{fill:${MUTED}}
svg.chart .flag{fill:#a4161a}
.table-wrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px;line-height:1.3}
th,td{padding:4px 6px;text-align:right;vertical-align:top;font-variant-numeric:tabular-nums}
th:first-child,th.text,td.text{text-align:left}
th[colspan]{text-align:center}
td.num{white-space:nowrap}
thead th{background:#eef1f4;font-weight:600;border-bottom:1px solid #8a8a8a}
tbody tr:nth-child(even){background:#f6f7f8}
tbody tr{border-bottom:1px solid #e3e3e3}
.flag{color:#a4161a;font-weight:600}
.legend{display:flex;flex-wrap:wrap;gap:.4rem 1.4rem;align-items:center;font-size:13px;margin:.4rem 0}
.legend .item{display:inline-flex;align-items:center;gap:.4rem}
.legend .ramp{display:inline-block;width:160px;height:12px;border:1px solid #8a8a8a}
.legend .line{display:inline-block;width:26px;height:0;border-top-width:2px;border-top-style:solid}
.legend .box{display:inline-block;width:18px;height:12px}
ul.notes{font-size:13px;padding-left:1.2rem}
ul.notes li{overflow-wrap:anywhere}`;

/** A whole self-contained page: `title` in the tab, `body` inside `<main>`, `css` after the shared style. */
export const htmlPage = (title: string, body: string, css = ""): string => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>${esc(title)}</title>
<style>${PAGE_CSS}${css === "" ? "" : `\n${css}`}</style></head>
<body><main>
${body}
</main></body></html>
`;
