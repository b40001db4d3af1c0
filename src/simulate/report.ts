// The self-contained HTML report of a simulation: no network, inline SVG charts.
//   1. prefix hit ratio per policy against the optimum, and prefill work balance
//   2. TTFT distribution per policy (cumulative curves, log time axis)
//   3. each rank's active requests over time, one small chart per policy

import { describeIndexUpdates, describeReplicas, formatTable, type SimulationResult } from "./run.js";

/** Series colours (Tableau 10). */
const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
/** Text escaped for HTML. */
const esc = (s: string) => s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]!);

/** Hit ratio per policy against the optimum, with prefill balance. */
function bars(result: SimulationResult): string {
  const W = 720;
  const rowH = 28;
  const left = 210;
  const ps = result.policies;
  const H = 40 + ps.length * rowH;
  const opt = result.optimum_prefix_hit_ratio;
  const top = Math.max(opt, ...ps.map((p) => p.prefix_hit_ratio), 0.01) * 1.05;
  const x = (v: number) => left + (v / top) * (W - left - 230);
  const rows = ps
    .map((p, i) => {
      const y = 30 + i * rowH;
      return `<text x="${left - 8}" y="${y + 15}" text-anchor="end">${esc(p.policy)}</text>
<rect x="${left}" y="${y + 3}" width="${(x(p.prefix_hit_ratio) - left).toFixed(1)}" height="16" fill="${COLORS[i % COLORS.length]}"><title>${p.prefix_hit_ratio}</title></rect>
<text x="${(x(p.prefix_hit_ratio) + 6).toFixed(1)}" y="${y + 15}">${p.prefix_hit_ratio.toFixed(3)} · prefill max/mean ${p.prefill_work_max_over_mean.toFixed(2)}</text>`;
    })
    .join("\n");
  return `<svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="prefix hit ratio per policy">
<text x="${left}" y="16" font-weight="bold">Prefix hit ratio (bar) and prefill work max/mean across ranks</text>
${rows}
<line x1="${x(opt).toFixed(1)}" x2="${x(opt).toFixed(1)}" y1="24" y2="${H - 6}" stroke="#333" stroke-dasharray="4 3"/>
<text x="${(x(opt) + 4).toFixed(1)}" y="${H - 8}" font-size="11">optimum ${opt.toFixed(3)}</text>
</svg>`;
}

/** The TTFT distribution of every policy, log time axis. */
function ttftCurves(result: SimulationResult): string {
  const W = 1000;
  const H = 320;
  const [l, r, t, b] = [60, 330, 30, 40];
  const all = Object.values(result.ttftSorted).flatMap((a) => [a[0] ?? 1, a[a.length - 1] ?? 1]);
  const lo = Math.max(1, Math.min(...all));
  const hi = Math.max(lo * 10, ...all);
  const lx = (v: number) => l + ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (W - l - r);
  const ly = (q: number) => H - b - q * (H - t - b);
  const curves = result.policies
    .map((p, i) => {
      const s = result.ttftSorted[p.policy]!;
      const step = Math.max(1, Math.floor(s.length / 300));
      const pts: string[] = [];
      for (let k = 0; k < s.length; k += step) pts.push(`${lx(s[k]!).toFixed(1)},${ly((k + 1) / s.length).toFixed(1)}`);
      pts.push(`${lx(s[s.length - 1]!).toFixed(1)},${ly(1).toFixed(1)}`);
      return `<polyline fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="2" points="${pts.join(" ")}"><title>${esc(p.policy)}</title></polyline>
<text x="${W - r + 14}" y="${t + 14 + i * 16}" fill="${COLORS[i % COLORS.length]}" font-size="12">${esc(p.policy)}: p50 ${p.ttft_ms.p50.toFixed(0)} · p99 ${p.ttft_ms.p99.toFixed(0)} ms</text>`;
    })
    .join("\n");
  const ticks: string[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    const v = 10 ** e;
    if (v < lo || v > hi) continue;
    ticks.push(`<line x1="${lx(v).toFixed(1)}" x2="${lx(v).toFixed(1)}" y1="${t}" y2="${H - b}" stroke="#ddd"/><text x="${lx(v).toFixed(1)}" y="${H - b + 16}" text-anchor="middle" font-size="11">${v >= 1000 ? `${v / 1000} s` : `${v} ms`}</text>`);
  }
  return `<svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="TTFT distribution per policy">
<text x="${l}" y="18" font-weight="bold">Time to first token: fraction of requests served within t</text>
${ticks.join("\n")}
<line x1="${l}" x2="${W - r}" y1="${H - b}" y2="${H - b}" stroke="#333"/><line x1="${l}" x2="${l}" y1="${t}" y2="${H - b}" stroke="#333"/>
${[0, 0.5, 0.9, 1].map((q) => `<text x="${l - 6}" y="${ly(q) + 4}" text-anchor="end" font-size="11">${q}</text>`).join("")}
${curves}
</svg>`;
}

/** Active requests per rank over time for one policy. */
function rankLoad(result: SimulationResult, policy: string): string {
  const W = 350;
  const H = 150;
  const [l, t, b] = [30, 22, 18];
  // Mean of each of ~150 consecutive windows, so the lines show load, not noise.
  const samples = result.loadOverTime[policy] ?? [];
  const step = Math.max(1, Math.ceil(samples.length / 150));
  const pick: number[][] = [];
  for (let i = 0; i < samples.length; i += step) {
    const window = samples.slice(i, i + step);
    pick.push(window[0]!.map((_, k) => (k === 0 ? window[window.length - 1]![0]! : window.reduce((a, s) => a + s[k]!, 0) / window.length)));
  }
  const tMax = Math.max(1, ...pick.map((s) => s[0]!));
  const yMax = Math.max(1, ...pick.flatMap((s) => s.slice(1)));
  const lines: string[] = [];
  for (let r = 0; r < result.ranks; r++) {
    const pts = pick.map((s) => `${(l + (s[0]! / tMax) * (W - l - 6)).toFixed(1)},${(H - b - (s[r + 1]! / yMax) * (H - t - b)).toFixed(1)}`);
    lines.push(`<polyline fill="none" stroke="${COLORS[r % COLORS.length]}" stroke-width="1" opacity="0.8" points="${pts.join(" ")}"/>`);
  }
  return `<svg viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="active requests per rank over time, ${esc(policy)}">
<text x="${l}" y="14" font-size="12" font-weight="bold">${esc(policy)}</text>
<text x="${l - 4}" y="${t + 8}" text-anchor="end" font-size="10">${yMax.toFixed(1)}</text><text x="${W - 6}" y="${H - 4}" text-anchor="end" font-size="10">${(tMax / 1000).toFixed(0)} s</text>
<line x1="${l}" x2="${W - 6}" y1="${H - b}" y2="${H - b}" stroke="#333"/>
${lines.join("\n")}
</svg>`;
}

/** The report page. */
export function renderReport(result: SimulationResult, command: string): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>adp-router simulate: ${esc(result.trace)}</title>
<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}svg{font:12px system-ui,sans-serif;background:#fff}
pre{background:#f6f6f6;padding:12px;overflow:auto}.grid{display:flex;flex-wrap:wrap;gap:12px}</style></head>
<body>
<h1>Attention-DP routing policies on ${esc(result.trace)}</h1>
<p>${result.requests} requests, ${result.ranks} ranks. Command: <code>${esc(command)}</code></p>
<p>The KV-cache-aware router's index learned from ${esc(describeIndexUpdates(result.index_updates))}.</p>
${result.replicas ? `<p>Routed by ${esc(describeReplicas(result.replicas))}.</p>\n` : ""}<section><h2>Cache reuse and balance</h2>${bars(result)}</section>
<section><h2>Time to first token</h2>${ttftCurves(result)}</section>
<section><h2>Active requests per rank over time</h2><p>Mean active requests on each rank (one line a rank) over consecutive windows of the run.</p><div class="grid">${result.policies.map((p) => rankLoad(result, p.policy)).join("\n")}</div></section>
<section><h2>Figures</h2><pre>${esc(formatTable(result))}</pre></section>
</body></html>
`;
}
