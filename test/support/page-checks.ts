// What a report page must pass in Chromium at any window width: no page errors,
// nothing wider than the window, every text at WCAG AA contrast, SVG labels neither
// cut off nor on top of one another, and a screenshot that is not blank.
import { writeFileSync } from "node:fs";
import type { Browser, Page } from "playwright-core";
import { expect } from "vitest";

/** A page opened at a width, with the errors it raised. */
export interface OpenedPage {
  readonly page: Page;
  /** Uncaught exceptions and console errors, in order. */
  readonly errors: string[];
}

/** Opens `url` in a new page `width` px wide, collecting its errors from the start. */
export async function openAt(browser: Browser, url: string, width: number): Promise<OpenedPage> {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await page.goto(url);
  return { page, errors };
}

/** Widths that would make the page, or a table in its box, scroll sideways. */
export interface Overflow {
  readonly page: { readonly scrollWidth: number; readonly clientWidth: number };
  /** Each `[data-role=table-wrap]` box: its table's width, and how wide the box's content is against the box. */
  readonly tables: readonly { readonly tableWidth: number; readonly scrollWidth: number; readonly clientWidth: number }[];
}

/** The page's and the tables' widths against their boxes. */
export const horizontalOverflow = (page: Page): Promise<Overflow> =>
  page.evaluate(() => ({
    page: { scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth },
    tables: [...document.querySelectorAll<HTMLElement>("[data-role=table-wrap]")].map((wrap) => ({
      tableWidth: wrap.querySelector("table")!.scrollWidth,
      scrollWidth: wrap.scrollWidth,
      clientWidth: wrap.clientWidth,
    })),
  }));

/** One rendered text and its contrast. */
export interface TextContrast {
  readonly text: string;
  /** Its colour and the colour under it, as rgb(). */
  readonly color: string;
  readonly background: string;
  /** WCAG 2.x contrast ratio, 1 to 21 (NaN when the background is a gradient or pattern: a failure). */
  readonly ratio: number;
}

/**
 * The contrast of every visible text on the page (WCAG 2.x relative luminance).
 * HTML text: its `color` against the first non-transparent background up its
 * ancestors (the white canvas at the top). SVG text: its `fill` against the last
 * filled shape painted before it whose box holds the text's centre, else against
 * its SVG's background. Translucent colours are composited over what is beneath.
 */
export const textContrasts = (page: Page): Promise<TextContrast[]> =>
  page.evaluate(() => {
    type Rgba = [number, number, number, number];
    const parse = (css: string): Rgba | null => {
      const m = css.match(/^rgba?\(([^)]+)\)$/);
      if (!m) return null;
      const parts = m[1]!.split(/[\s,/]+/).filter(Boolean).map(Number);
      return [parts[0]!, parts[1]!, parts[2]!, parts[3] ?? 1];
    };
    const over = (top: Rgba, under: Rgba): Rgba => {
      const a = top[3];
      return [top[0] * a + under[0] * (1 - a), top[1] * a + under[1] * (1 - a), top[2] * a + under[2] * (1 - a), 1];
    };
    const luminance = (c: Rgba) => {
      const lin = (v: number) => {
        const s = v / 255;
        return s <= 0.04045 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
      };
      return 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
    };
    const ratio = (a: Rgba, b: Rgba) => {
      const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
      return (hi! + 0.05) / (lo! + 0.05);
    };
    const show = (c: Rgba) => `rgb(${c.slice(0, 3).map(Math.round).join(", ")})`;
    const white: Rgba = [255, 255, 255, 1];
    // The background an element's content is painted on: its own and its ancestors' backgrounds, composited.
    const backgroundOf = (el: Element | null): Rgba => {
      const layers: Rgba[] = [];
      for (let e = el; e; e = e.parentElement) {
        const bg = parse(getComputedStyle(e).backgroundColor);
        if (bg && bg[3] > 0) layers.push(bg);
        if (bg && bg[3] >= 1) break;
      }
      return layers.reverse().reduce((under, top) => over(top, under), white);
    };
    const opacityOf = (el: Element, which: "fill-opacity" | "opacity") => Number(getComputedStyle(el).getPropertyValue(which) || 1);
    const shapes = "rect, circle, ellipse, polygon, path";
    // What an SVG text sits on: the last filled shape before it covering its centre, or the SVG's background.
    const svgBackgroundOf = (text: SVGTextElement): Rgba | null => {
      const svg = text.ownerSVGElement!;
      const box = text.getBoundingClientRect();
      const [cx, cy] = [box.left + box.width / 2, box.top + box.height / 2];
      let under: Element | null = null;
      for (const shape of svg.querySelectorAll(shapes)) {
        if (!(shape.compareDocumentPosition(text) & Node.DOCUMENT_POSITION_FOLLOWING)) continue;
        const fill = getComputedStyle(shape).fill;
        if (fill === "none" || opacityOf(shape, "fill-opacity") * opacityOf(shape, "opacity") === 0) continue;
        const r = shape.getBoundingClientRect();
        if (cx >= r.left && cx <= r.right && cy >= r.top && cy <= r.bottom) under = shape;
      }
      const base = backgroundOf(svg);
      if (under === null) return base;
      const fill = parse(getComputedStyle(under).fill);
      if (fill === null) return null;
      return over([fill[0], fill[1], fill[2], fill[3] * opacityOf(under, "fill-opacity") * opacityOf(under, "opacity")], base);
    };
    const out: { text: string; color: string; background: string; ratio: number }[] = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent!.trim();
      const parent = node.parentElement!;
      if (text === "" || parent.closest("title, style, script")) continue;
      const svgText = parent.closest("text") as SVGTextElement | null;
      const range = document.createRange();
      range.selectNodeContents(node);
      const box = svgText ? svgText.getBoundingClientRect() : range.getBoundingClientRect();
      if (box.width === 0 || box.height === 0) continue;
      let fg: Rgba | null;
      let bg: Rgba | null;
      if (svgText) {
        bg = svgBackgroundOf(svgText);
        const fill = parse(getComputedStyle(parent).fill);
        fg = fill && bg && over([fill[0], fill[1], fill[2], fill[3] * opacityOf(parent, "fill-opacity") * opacityOf(svgText, "opacity")], bg);
      } else {
        bg = backgroundOf(parent);
        const color = parse(getComputedStyle(parent).color);
        fg = color && over(color, bg);
      }
      out.push({ text, color: fg ? show(fg) : "?", background: bg ? show(bg) : "?", ratio: fg && bg ? ratio(fg, bg) : NaN });
    }
    return out;
  });

/** SVG texts that stick out of their SVG (cut off where the SVG clips them). */
export const clippedSvgTexts = (page: Page): Promise<string[]> =>
  page.evaluate(() =>
    [...document.querySelectorAll("svg text")]
      .filter((t) => {
        const [r, s] = [t.getBoundingClientRect(), (t as SVGTextElement).ownerSVGElement!.getBoundingClientRect()];
        return r.width > 0 && (r.left < s.left - 0.5 || r.right > s.right + 0.5 || r.top < s.top - 0.5 || r.bottom > s.bottom + 0.5);
      })
      .map((t) => t.textContent!),
  );

/** Pairs of texts in one SVG whose boxes overlap by more than 1 px each way (labels printed over each other). */
export const overlappingSvgTexts = (page: Page): Promise<[string, string][]> =>
  page.evaluate(() => {
    const pairs: [string, string][] = [];
    for (const svg of document.querySelectorAll("svg")) {
      const texts = [...svg.querySelectorAll("text")].map((t) => ({ text: t.textContent!, r: t.getBoundingClientRect() })).filter((t) => t.r.width > 0);
      for (let i = 0; i < texts.length; i++)
        for (let j = i + 1; j < texts.length; j++) {
          const [a, b] = [texts[i]!.r, texts[j]!.r];
          const overlapX = Math.min(a.right, b.right) - Math.max(a.left, b.left);
          const overlapY = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
          if (overlapX > 1 && overlapY > 1) pairs.push([texts[i]!.text, texts[j]!.text]);
        }
    }
    return pairs;
  });

/** A box on the page. */
export interface Box {
  readonly left: number;
  readonly right: number;
  readonly top: number;
  readonly bottom: number;
}

/** The page boxes of every element matching `selector`, widened by `pad` px each side (a line's stroke). */
export const boxesOf = (page: Page, selector: string, pad = 0): Promise<Box[]> =>
  page.$$eval(
    selector,
    (els, pad) =>
      els.map((e) => {
        const r = e.getBoundingClientRect();
        return { left: r.left - pad, right: r.right + pad, top: r.top - pad, bottom: r.bottom + pad };
      }),
    pad,
  );

/** Whether two boxes share any area. */
export const intersects = (a: Box, b: Box): boolean => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;

/** What a screenshot holds: distinct colours among sampled pixels, and the share that is not near-white. */
export interface ScreenshotStats {
  readonly distinct: number;
  readonly nonWhite: number;
}

/** Takes a full-page screenshot into `file` and decodes it in the page itself to count its colours (a blank page has a handful). */
export async function screenshotStats(page: Page, file: string): Promise<ScreenshotStats> {
  const png = await page.screenshot({ fullPage: true });
  writeFileSync(file, png);
  return page.evaluate(async (b64) => {
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
    let sampled = 0;
    for (let i = 0; i < data.length; i += 4 * 7) {
      sampled++;
      colours.add((data[i]! << 16) | (data[i + 1]! << 8) | data[i + 2]!);
      if (data[i]! < 240 || data[i + 1]! < 240 || data[i + 2]! < 240) nonWhite++;
    }
    return { distinct: colours.size, nonWhite: nonWhite / sampled };
  }, png.toString("base64"));
}

/** Every check that holds for any report page at any width; each failure names what failed. */
export async function expectReadable(page: Page): Promise<void> {
  const overflow = await horizontalOverflow(page);
  expect(overflow.page.scrollWidth, "the page scrolls sideways").toBeLessThanOrEqual(overflow.page.clientWidth);
  for (const t of overflow.tables) {
    expect(t.tableWidth, "a table is wider than its box").toBeLessThanOrEqual(t.clientWidth);
    expect(t.scrollWidth, "a table's box scrolls sideways").toBeLessThanOrEqual(t.clientWidth);
  }
  const low = (await textContrasts(page)).filter((t) => !(t.ratio >= 4.5));
  expect(low, "texts below WCAG AA contrast (4.5:1)").toEqual([]);
  expect(await clippedSvgTexts(page), "SVG texts cut off at their SVG's edge").toEqual([]);
  expect(await overlappingSvgTexts(page), "SVG texts printed over each other").toEqual([]);
}
