// Cold start: from `import` of the built package to the first routing decision,
// in fresh Node processes and fresh Chromium pages. Medians; one JSON line each.
// Run: npm run bench:startup
import { spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";
import { hasChromium, launchChromium } from "../test/support/chromium.js";
import { serveStatic } from "../test/support/static-server.js";

// Bundled into build/bench by scripts/run-bench.mjs and run from the package root.
const root = `${process.cwd()}/`;
const dist = pathToFileURL(`${root}dist/index.js`).href;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const firstDecision = (modulePath: string) => `
  const t0 = performance.now();
  const { createRouter } = await import(${JSON.stringify(modulePath)});
  const t1 = performance.now();
  const router = createRouter({ numRanks: 8, attentionDp: { enable_kv_cache_aware_routing: true } });
  router.route({ rankStates: Array.from({ length: 8 }, () => ({ numActiveRequests: 0, numActiveTokens: 0 })), maxNumActiveRequests: 8, requests: [{ id: 1, tokens: [1, 2, 3] }] });
  const t2 = performance.now();
  ({ importMs: t1 - t0, firstDecisionMs: t2 - t1, totalMs: t2 - t0 });`;

const node: { importMs: number; firstDecisionMs: number; totalMs: number }[] = [];
for (let i = 0; i < 15; i++) {
  const script = `console.log(JSON.stringify(await (async () => {${firstDecision(dist).replace("({ importMs", "return ({ importMs")}})()))`;
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
  if (run.status !== 0) throw new Error(run.stderr);
  node.push(JSON.parse(run.stdout));
}
console.log(JSON.stringify({ bench: "startup", engine: `node ${process.version}`, runs: node.length, import_ms: +median(node.map((r) => r.importMs)).toFixed(2), first_decision_ms: +median(node.map((r) => r.firstDecisionMs)).toFixed(2), total_ms: +median(node.map((r) => r.totalMs)).toFixed(2) }));

if (hasChromium) {
  const { server, url } = await serveStatic(root);
  const browser = await launchChromium();
  const runs: { importMs: number; firstDecisionMs: number; totalMs: number }[] = [];
  for (let i = 0; i < 9; i++) {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(`${url}/examples/playground/index.html`);
    runs.push(await page.evaluate(`(async () => { ${firstDecision(`${url}/dist/index.js?fresh=${i}`).replace("({ importMs", "return ({ importMs")} })()`) as (typeof runs)[number]);
    await context.close();
  }
  await browser.close();
  server.close();
  console.log(JSON.stringify({ bench: "startup", engine: `chromium ${browser.version()}`, runs: runs.length, import_ms: +median(runs.map((r) => r.importMs)).toFixed(2), first_decision_ms: +median(runs.map((r) => r.firstDecisionMs)).toFixed(2), total_ms: +median(runs.map((r) => r.totalMs)).toFixed(2) }));
}
