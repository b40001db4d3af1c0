// The `tune` HTML report: its Pareto front computation by hand and against the
// definition, its YAML block, and the page in real headless Chromium at 760 and
// 1280 px (two scatter plots with a marker a point and the front ringed, a legend,
// the baseline and the best labelled, the top-10 table; nothing scrolls sideways,
// AA contrast, no label cut off or printed over another).
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AttentionDpConfigInput } from "../src/config.js";
import { compareTunePoints } from "../src/simulate/tune.js";
import { attentionDpConfigYaml, AXIS_BETTER, paretoFront, paretoSteps, tuneReportHtml, type Better, type ParetoAxis } from "../src/simulate/tune-report.js";
import type { RouterKind, TuneMetrics, TunePoint, TuneResult } from "../src/simulate/tune-types.js";
import { hasChromium, launchChromium, skipReason } from "./support/chromium.js";
import { expectReadable, openAt, screenshotStats } from "./support/page-checks.js";

/** A point with the given hit ratio, prefill imbalance and objective (the rest filler). */
function point(id: number, hit: number, imbalance: number, objective: number, feasible = true, kind: RouterKind = "kv_cache_aware", config: AttentionDpConfigInput = {}): TunePoint {
  const metrics: TuneMetrics = { ttft_p50: objective / 2, ttft_p90: objective, ttft_p99: objective * 2, hit_ratio: hit, prefill_imbalance: imbalance, requests_imbalance: imbalance, overloaded: false };
  return { id, config, kind, stage: id === 0 ? "baseline" : "coarse", metrics, objective, feasible };
}

/** Ids of points, for comparing fronts. */
const ids = (points: readonly TunePoint[]) => points.map((p) => p.id);

/** The front by its definition, O(n²): the points nothing dominates. */
function bruteFront(points: readonly TunePoint[], xKey: ParetoAxis, xBetter: Better, direction: Better): number[] {
  const g = (v: number, b: Better) => (b === "max" ? v : -v);
  const dominates = (a: TunePoint, b: TunePoint) => {
    const [ax, ay, bx, by] = [g(a.metrics[xKey], xBetter), g(a.objective, direction), g(b.metrics[xKey], xBetter), g(b.objective, direction)];
    return ax >= bx && ay >= by && (ax > bx || ay > by);
  };
  return points.filter((p) => !points.some((q) => dominates(q, p))).map((p) => p.id).sort((a, b) => a - b);
}

/** A small seeded generator, so the synthetic search is the same every run. */
function seeded(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A synthetic search of 42 configs over the three router kinds: the baseline,
 * KV-cache-aware and conversation configs trading hit ratio against balance,
 * some over the imbalance limit or overloaded (infeasible, the baseline
 * among them), one exact tie.
 */
function syntheticResult(): TuneResult {
  const random = seeded(8);
  const round = (v: number, d: number) => Number(v.toFixed(d));
  // The baseline breaks the imbalance limit, as TensorRT-LLM's defaults often do.
  const points: TunePoint[] = [point(0, 0.718, 2.671, 46.2, false, "default", {})];
  for (let id = 1; id < 40; id++) {
    const kind: RouterKind = id % 8 === 0 ? "default" : id % 3 === 0 ? "conversation" : "kv_cache_aware";
    const hit = round(kind === "default" ? 0.68 + random() * 0.05 : 0.74 + random() * 0.11, 3);
    const imbalance = round(1 + random() * 2.2, 3);
    const ttft = round(18 + (0.86 - hit) * 160 + (imbalance - 1) * 9 + random() * 12, 1);
    const config: AttentionDpConfigInput =
      kind === "default"
        ? { enable_balance: true, timeout_iters: 10 + id }
        : kind === "conversation"
          ? { kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: (["round_robin", "least_queued", "least_tokens"] as const)[Math.floor(random() * 3)]!, kv_cache_routing_fair_share_multiplier: round(1 + random() * 3, 2) }
          : { enable_kv_cache_aware_routing: true, kv_cache_routing_load_balance_weight: round(0.05 + random() * 5, 2), kv_cache_routing_match_rate_threshold: round(random() * 0.6, 2) };
    const overloaded = id % 13 === 0;
    const p = point(id, hit, imbalance, ttft, !overloaded && imbalance <= 2.6, kind, config);
    points.push({ ...p, metrics: { ...p.metrics, overloaded }, stage: id < 25 ? "coarse" : "refine 1" });
  }
  // An exact tie with point 5 (another config, same figures).
  points.push({ ...points[5]!, id: 40, config: { ...points[5]!.config, kv_cache_routing_cold_start_warmup: true } });
  // A refined conversation config with the longest field values, near the top of the table.
  points.push(point(41, 0.845, 1.091, 36, true, "conversation", { kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: "least_tokens", kv_cache_routing_fair_share_multiplier: 2.45 }));
  const best = [...points].sort(compareTunePoints("ttft_p90", "min"))[0]!;
  return {
    objective: "ttft_p90",
    direction: "min",
    constraints: { max_prefill_imbalance: 2.6 },
    trace: "synthetic(seed=8)",
    requests: 1234,
    ranks: 8,
    baseline: { config: points[0]!.config, metrics: points[0]!.metrics },
    best: { config: best.config, metrics: best.metrics },
    constraints_met: true,
    infeasible_reason: null,
    evaluated: points.length,
    points,
  };
}

describe("paretoFront", () => {
  it("keeps what nothing dominates, drops the dominated", () => {
    // Higher hit ratio better, lower TTFT better: 2 is dominated by 1 (worse both), 4 by 3 (same x, worse y).
    const pts = [point(1, 0.8, 1, 10), point(2, 0.7, 1, 12), point(3, 0.9, 1, 15), point(4, 0.9, 1, 16), point(5, 0.6, 1, 9)];
    expect(ids(paretoFront(pts, "hit_ratio", "max", "min"))).toEqual([5, 1, 3]);
    // The other way round on both axes: the corners swap.
    expect(ids(paretoFront(pts, "hit_ratio", "min", "max"))).toEqual([5, 2, 4]);
  });

  it("keeps tied points together and a single point alone", () => {
    const tied = [point(1, 0.8, 1, 10), point(2, 0.8, 1, 10), point(3, 0.7, 1, 11)];
    expect(ids(paretoFront(tied, "hit_ratio", "max", "min"))).toEqual([1, 2]);
    expect(ids(paretoFront([point(7, 0.5, 2, 30)], "prefill_imbalance", "min", "min"))).toEqual([7]);
    expect(paretoFront([], "hit_ratio", "max", "min")).toEqual([]);
  });

  it("reads prefill imbalance with lower better", () => {
    const pts = [point(1, 0, 1.2, 20), point(2, 0, 1.5, 18), point(3, 0, 1.6, 19), point(4, 0, 1.1, 25)];
    expect(ids(paretoFront(pts, "prefill_imbalance", "min", "min"))).toEqual([4, 1, 2]);
  });

  it("agrees with the definition on random sets, with ties", () => {
    const random = seeded(3);
    for (let trial = 0; trial < 200; trial++) {
      const n = 1 + Math.floor(random() * 30);
      // Few distinct values, so ties on one axis and on both are common.
      const pts = Array.from({ length: n }, (_, id) => point(id, Math.floor(random() * 6) / 10, 1 + Math.floor(random() * 5) / 4, Math.floor(random() * 8)));
      for (const xKey of ["hit_ratio", "prefill_imbalance"] as const)
        for (const direction of ["min", "max"] as const) expect(ids(paretoFront(pts, xKey, AXIS_BETTER[xKey], direction)).sort((a, b) => a - b)).toEqual(bruteFront(pts, xKey, AXIS_BETTER[xKey], direction));
    }
  });

  it("steps turn at the worse x and the worse objective of each pair", () => {
    const front = paretoFront([point(1, 0.6, 1, 9), point(2, 0.8, 1, 10), point(3, 0.9, 1, 15)], "hit_ratio", "max", "min");
    expect(paretoSteps(front, "hit_ratio", "max", "min")).toEqual([[0.6, 9], [0.6, 10], [0.8, 10], [0.8, 15], [0.9, 15]]);
  });
});

describe("attentionDpConfigYaml", () => {
  it("writes the block with two-space indent, keys in the config's order", () => {
    expect(attentionDpConfigYaml({ kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: "least_tokens", kv_cache_routing_fair_share_multiplier: 1.5 })).toBe(
      "attention_dp_config:\n  kv_cache_routing_conversation_affinity: true\n  kv_cache_routing_new_conv_placement: least_tokens\n  kv_cache_routing_fair_share_multiplier: 1.5\n",
    );
    expect(attentionDpConfigYaml({})).toBe("attention_dp_config: {}\n");
  });
});

if (!hasChromium) console.warn(skipReason);

describe.skipIf(!hasChromium)("tune --report in Chromium", () => {
  const result = syntheticResult();
  const dir = mkdtempSync(path.join(tmpdir(), "adp-tune-report-"));
  const file = path.join(dir, "tune.html");
  let browser: Awaited<ReturnType<typeof launchChromium>>;
  beforeAll(async () => {
    writeFileSync(file, tuneReportHtml(result));
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
  });

  it("is self-contained: no script, no network", () => {
    const html = tuneReportHtml(result);
    expect(html).not.toMatch(/<script|https?:\/\//);
    expect(tuneReportHtml(result)).toBe(html);
  });

  for (const width of [760, 1280]) {
    it(`reads at ${width} px: a marker a point, the fronts ringed, labels, legend, table, YAML; nothing overlaps or scrolls, AA contrast`, async () => {
      const { page, errors } = await openAt(browser, pathToFileURL(file).href, width);
      const { distinct, nonWhite } = await screenshotStats(page, path.join(dir, `tune-${width}.png`));
      expect(distinct).toBeGreaterThan(20);
      expect(nonWhite).toBeGreaterThan(0.02);

      const plots = await page.$$eval("svg[data-role=scatter]", (svgs) =>
        svgs.map((s) => ({
          x: s.getAttribute("data-x"),
          area: s.getBoundingClientRect().width * s.getBoundingClientRect().height,
          points: [...s.querySelectorAll("[data-role=point]")].map((m) => ({ id: Number(m.getAttribute("data-id")), kind: m.getAttribute("data-kind"), feasible: m.getAttribute("data-feasible") === "true", fill: getComputedStyle(m).fill })),
          pareto: [...s.querySelectorAll("[data-role=pareto]")].map((m) => Number(m.getAttribute("data-id"))),
          steps: s.querySelectorAll("[data-role=pareto-line]").length,
          labels: [...s.querySelectorAll("[data-role$=-label] text")].map((t) => t.textContent),
        })),
      );
      expect(plots.map((p) => p.x)).toEqual(["hit_ratio", "prefill_imbalance"]);
      const feasible = result.points.filter((p) => p.feasible);
      for (const plot of plots) {
        expect(plot.area).toBeGreaterThan(50_000);
        // One marker a point, each with its own feasibility and kind.
        expect(plot.points.map((p) => p.id).sort((a, b) => a - b)).toEqual(result.points.map((p) => p.id));
        for (const m of plot.points) {
          const p = result.points[m.id]!;
          expect([m.kind, m.feasible]).toEqual([p.kind, p.feasible]);
        }
        // Infeasible hollow (white fill); feasible filled, one colour a kind.
        expect(new Set(plot.points.filter((m) => !m.feasible).map((m) => m.fill))).toEqual(new Set(["rgb(255, 255, 255)"]));
        const fills = new Map<string, Set<string>>();
        for (const m of plot.points.filter((m) => m.feasible)) fills.set(m.kind!, (fills.get(m.kind!) ?? new Set()).add(m.fill));
        expect([...fills.values()].map((s) => s.size)).toEqual([1, 1, 1]);
        expect(new Set([...fills.values()].map((s) => [...s][0])).size).toBe(3);
        // The ringed points are exactly the front of the feasible points for this pair of axes.
        const xKey = plot.x as ParetoAxis;
        expect(plot.pareto.sort((a, b) => a - b)).toEqual(ids(paretoFront(feasible, xKey, AXIS_BETTER[xKey], result.direction)).sort((a, b) => a - b));
        expect(plot.pareto.length).toBeGreaterThan(1);
        expect(plot.steps).toBe(1);
        expect(plot.labels.sort()).toEqual(["baseline", "best"]);
      }
      const legend = await page.$$eval("[data-role=scatter-legend] text", (ts) => ts.map((t) => t.textContent));
      expect(legend).toEqual(["default", "kv_cache_aware", "conversation", "infeasible", "Pareto front"]);

      // The table: ten feasible configs, best first, then the baseline.
      const rows = await page.$$eval("[data-role=top-configs] tbody tr", (trs) => trs.map((tr) => tr.querySelector("td")!.textContent!));
      expect(rows.length).toBe(11);
      expect(rows[0]).toMatch(/^1 best/);
      expect(rows[10]).toMatch(/^baseline/);
      expect(await page.$eval("[data-role=best-yaml]", (e) => e.textContent)).toBe(attentionDpConfigYaml(result.best!.config));

      await expectReadable(page);
      expect(errors).toEqual([]);
      await page.close();
    });
  }
});
