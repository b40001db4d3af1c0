// The playground page in headless Chromium: pick settings, route, read what it shows.
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hasChromium, launchChromium, skipReason } from "./support/chromium.js";
import { serveStatic } from "./support/static-server.js";

const root = fileURLToPath(new URL("..", import.meta.url));
if (!hasChromium) console.warn(skipReason);

describe.skipIf(!hasChromium)("examples/playground", () => {
  let close = () => {};
  let base = "";
  let browser: Awaited<ReturnType<typeof launchChromium>>;
  beforeAll(async () => {
    const { server, url } = await serveStatic(root);
    close = () => server.close();
    base = url;
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    close();
  });

  it("routes the sample batch and shows each request's rank and reason", async () => {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${base}/examples/playground/index.html`);
    await page.fill("#ranks", "3");
    await page.selectOption("#policy", "conversation:least_tokens");
    await page.click("#route");
    await page.waitForSelector("body[data-routed='8']");
    const rows = await page.$$eval("#decisions tbody tr", (trs) => trs.map((tr) => ({ rank: Number((tr as HTMLElement).dataset.rank), outcome: (tr as HTMLElement).dataset.outcome, why: tr.lastElementChild!.textContent })));
    expect(rows).toHaveLength(8);
    for (const r of rows) expect(r.rank).toBeGreaterThanOrEqual(0), expect(r.rank).toBeLessThan(3);
    // Second turns stick to their conversation's first-turn rank.
    for (const k of [0, 1, 2]) expect(rows[3 + k]!.rank).toBe(rows[k]!.rank);
    expect(rows.slice(3, 6).every((r) => r.outcome === "sticky" && r.why!.includes("lives here"))).toBe(true);
    expect(await page.$$eval(".rank", (d) => d.length)).toBe(3);
    expect(errors).toEqual([]);
  });

  it("explains KV-cache-aware scores on a slice of the bundled trace, and reports a bad config", async () => {
    const page = await browser.newPage();
    await page.goto(`${base}/examples/playground/index.html`);
    await page.selectOption("#policy", "kv_cache_aware");
    await page.selectOption("#workload", "trace");
    await page.click("#route");
    await page.waitForSelector("body[data-routed='48']");
    const whys = await page.$$eval("#decisions tbody tr td:last-child", (tds) => tds.map((td) => td.textContent!));
    expect(whys).toHaveLength(48);
    expect(whys.every((w) => w.startsWith("lowest score"))).toBe(true);
    expect(whys.some((w) => w.includes("match counted"))).toBe(true);
    await page.fill("#config", '{"kv_cache_routing_fair_share_multiplyer": 2}');
    await page.click("#route");
    await expect.poll(() => page.textContent("#error")).toContain('did you mean "kv_cache_routing_fair_share_multiplier"');
  });
});
