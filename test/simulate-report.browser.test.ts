// The HTML report in real headless Chromium: no page errors, and the charts
// render (the screenshot is not blank: many distinct colours, mostly not white).
import { spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import { hasChromium, launchChromium, skipReason } from "./support/chromium.js";

const cli = fileURLToPath(new URL("../dist/cli.js", import.meta.url));

if (!hasChromium) console.warn(skipReason);

describe.skipIf(!hasChromium)("simulate --report in Chromium", () => {
  it("opens without errors and its charts render", async () => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), "adp-report-")), "report.html");
    const out = spawnSync(process.execPath, [cli, "simulate", "--workload", "multi-turn", "--sessions", "60", "--ranks", "4", "--report", file], { encoding: "utf8" });
    expect(out.status).toBe(0);
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1100, height: 1600 } });
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
      await page.goto(pathToFileURL(file).href);
      const charts = await page.$$eval("svg", (svgs) => svgs.map((s) => s.getBoundingClientRect().width * s.getBoundingClientRect().height));
      expect(charts.length).toBe(8);
      for (const area of charts) expect(area).toBeGreaterThan(10_000);
      const png = await page.screenshot({ fullPage: true });
      // Decode the screenshot in the page itself and count colours.
      const { distinct, nonWhite } = await page.evaluate(async (b64) => {
        const img = new Image();
        img.src = `data:image/png;base64,${b64}`;
        await img.decode();
        const canvas = document.createElement("canvas");
        canvas.width = img.width;
        canvas.height = img.height;
        const ctx = canvas.getContext("2d")!;
        ctx.drawImage(img, 0, 0);
        const data = ctx.getImageData(0, 0, img.width, img.height).data;
        const colours = new Set<number>();
        let nonWhite = 0;
        for (let i = 0; i < data.length; i += 4 * 7) {
          colours.add((data[i]! << 16) | (data[i + 1]! << 8) | data[i + 2]!);
          if (data[i]! < 240 || data[i + 1]! < 240 || data[i + 2]! < 240) nonWhite++;
        }
        return { distinct: colours.size, nonWhite: nonWhite / (data.length / 28) };
      }, png.toString("base64"));
      expect(errors).toEqual([]);
      expect(distinct).toBeGreaterThan(20);
      expect(nonWhite).toBeGreaterThan(0.02);
    } finally {
      await browser.close();
    }
  }, 60_000);
});
