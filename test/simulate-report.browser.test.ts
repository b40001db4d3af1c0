// The HTML report in real headless Chromium, at a narrow (760 px) and a wide
// (1280 px) window: no page errors, the charts render (the screenshot is not
// blank), each policy's load is a labelled rank × time heat strip with legends,
// the optimum line runs clear of the bar labels, nothing scrolls sideways, and
// every text meets WCAG AA contrast.
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { POLICIES } from "../src/simulate/run.js";
import { hasChromium, launchChromium, skipReason } from "./support/chromium.js";
import { boxesOf, expectReadable, intersects, openAt, screenshotStats } from "./support/page-checks.js";

const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));
/** The run's ranks: each strip has this many rows. */
const RANKS = 4;

if (!hasChromium) console.warn(skipReason);

describe.skipIf(!hasChromium)("simulate --report in Chromium", () => {
  const dir = mkdtempSync(path.join(tmpdir(), "adp-report-"));
  const file = path.join(dir, "report.html");
  let browser: Awaited<ReturnType<typeof launchChromium>>;
  beforeAll(async () => {
    const out = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "60", "--ranks", String(RANKS), "--report", file], { encoding: "utf8" });
    expect(out.status, out.stderr).toBe(0);
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
  });

  for (const width of [760, 1280]) {
    it(`reads at ${width} px: charts render, strips and legends are there, nothing overlaps or scrolls, AA contrast`, async () => {
      const { page, errors } = await openAt(browser, pathToFileURL(file).href, width);
      const charts = await page.$$eval("svg", (svgs) => svgs.map((s) => s.getBoundingClientRect().width * s.getBoundingClientRect().height));
      expect(charts.length).toBe(2 + POLICIES.length);
      for (const area of charts) expect(area).toBeGreaterThan(10_000);
      const { distinct, nonWhite } = await screenshotStats(page, path.join(dir, `report-${width}.png`));
      expect(distinct).toBeGreaterThan(20);
      expect(nonWhite).toBeGreaterThan(0.02);

      // A heat strip a policy, a row a rank labelled r0.., on one shared legend with its units.
      const strips = await page.$$eval("svg[data-role=heat-strip]", (svgs) =>
        svgs.map((s) => ({
          policy: s.getAttribute("data-policy"),
          rows: s.querySelectorAll("[data-role=heat-row]").length,
          labels: [...s.querySelectorAll("text")].map((t) => t.textContent).filter((t) => /^r\d+$/.test(t!)),
          lines: ["spread", "mean-line", "max-line"].map((role) => s.querySelectorAll(`[data-role=${role}]`).length),
        })),
      );
      expect(strips.map((s) => s.policy)).toEqual([...POLICIES]);
      for (const s of strips) {
        expect(s.rows).toBe(RANKS);
        expect(s.labels).toEqual(Array.from({ length: RANKS }, (_, r) => `r${r}`));
        expect(s.lines).toEqual([1, 1, 1]);
      }
      const heatLegend = await page.$eval("[data-role=heat-legend]", (e) => ({ text: e.textContent!, ramp: e.querySelector(".ramp")!.getBoundingClientRect().width }));
      expect(heatLegend.text).toContain("active requests");
      expect(heatLegend.ramp).toBeGreaterThan(50);
      expect(await page.$$eval("[data-role=load-legend] .item", (items) => items.map((i) => i.textContent!.trim()))).toEqual(["busiest rank", "mean of the ranks", "spread from the least to the most busy rank"]);
      // Every TTFT curve is named in the legend, not told by colour alone.
      expect(await page.$$eval("[data-role=ttft-curve]", (c) => c.length)).toBe(POLICIES.length);
      const legend = await page.$$eval("[data-role=ttft-legend-item]", (items) => items.map((i) => i.querySelector("text")!.textContent));
      expect(legend).toEqual([...POLICIES]);

      // The dashed optimum line crosses no bar label.
      const [optimum] = await boxesOf(page, "[data-role=optimum]", 1);
      const labels = await boxesOf(page, "[data-role=bar-label]");
      expect(labels.length).toBe(2 * POLICIES.length);
      expect(optimum!.bottom - optimum!.top).toBeGreaterThan(100);
      expect(labels.filter((l) => intersects(optimum!, l))).toEqual([]);

      // The figures are a table, a row a policy.
      expect(await page.$$eval("[data-role=figures] tbody tr", (rows) => rows.length)).toBe(POLICIES.length);
      await expectReadable(page);
      expect(errors).toEqual([]);
      await page.close();
    });
  }
});
