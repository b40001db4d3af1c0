// The package as a consumer gets it: one neutral ESM file with the wasm inlined,
// importable and require()-able on Node ≥ 20.19, bundleable for a browser, no
// node: imports in the library, publint-clean, inside its size budget.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { beforeAll, describe, expect, it } from "vitest";
import { hasChromium, launchChromium, skipReason } from "./support/chromium.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const dist = path.join(root, "dist", "index.js");

/** A decision every build of the package must reproduce. */
const probe = `
  const r = createRouter({ numRanks: 4, attentionDp: { enable_kv_cache_aware_routing: true } });
  const out = r.route({ rankStates: [0,1,2,3].map(() => ({ numActiveRequests: 0, numActiveTokens: 0 })), maxNumActiveRequests: 8,
    requests: [0,1,2,3,4,5,6,7].map((id) => ({ id, tokens: [1,2,3,4,5,6,7,8,9,10] })) });
  JSON.stringify(out.assignments)`;
const expected = JSON.stringify([[3, 5], [2, 7], [0, 4], [1, 6]]);

describe("library bundle", () => {
  it("imports no node: module and uses no top-level await (require() works)", async () => {
    const text = readFileSync(dist, "utf8");
    expect(text).not.toMatch(/from\s*["']node:|import\(["']node:|require\(["']node:/);
    const required = createRequire(import.meta.url)(dist);
    expect(typeof required.createRouter).toBe("function");
    const { createRouter } = required;
    expect(eval(probe)).toBe(expected);
  });

  it("touches WebAssembly in src/wasm.ts only", () => {
    const offenders = readdirSync(path.join(root, "src"), { recursive: true })
      .map(String)
      .filter((f) => f.endsWith(".ts") && !f.startsWith("generated") && f !== "wasm.ts")
      .filter((f) => /\bWebAssembly\./.test(readFileSync(path.join(root, "src", f), "utf8")));
    expect(offenders).toEqual([]);
  });

  it("stays within its size budget (minified + gzipped, wasm included)", async () => {
    const { measureSize, BUDGET_BYTES } = await import("../scripts/size.mjs");
    const size = await measureSize();
    expect(size.library_min_gzip_bytes).toBeLessThanOrEqual(BUDGET_BYTES);
  });

  it("inlines the release wasm core byte for byte (its escaped text decodes to build/release.wasm)", async () => {
    const { WASM_TEXT, WASM_SHA256 } = await import("../src/generated/wasm-bytes.js");
    const wasm = readFileSync(path.join(root, "build", "release.wasm"));
    const decoded = Uint8Array.from(WASM_TEXT, (c) => c.charCodeAt(0));
    expect(Buffer.from(decoded).equals(wasm)).toBe(true);
    expect(createHash("sha256").update(decoded).digest("hex")).toBe(WASM_SHA256);
    expect(/^[\x20-\x7e]*$/.test(readFileSync(path.join(root, "src", "generated", "wasm-bytes.ts"), "latin1").replaceAll("\n", ""))).toBe(true);
  });

  it("is publint-clean", () => {
    const out = execFileSync(path.join(root, "node_modules", ".bin", "publint"), ["--strict"], { cwd: root, encoding: "utf8" });
    expect(out).toContain("All good!");
  });
});

describe("a fresh consumer project", () => {
  let consumer = "";
  beforeAll(() => {
    consumer = mkdtempSync(path.join(tmpdir(), "adp-consumer-"));
    const packed = execFileSync("npm", ["pack", "--silent", "--ignore-scripts", "--pack-destination", consumer], { cwd: root, encoding: "utf8" }).trim().split("\n").pop()!;
    writeFileSync(path.join(consumer, "package.json"), JSON.stringify({ name: "consumer", version: "1.0.0", private: true }));
    execFileSync("npm", ["install", "--no-audit", "--no-fund", "--prefer-offline", path.join(consumer, packed)], { cwd: consumer, stdio: "pipe" });
  }, 120_000);

  it("installs no other package: npm ls shows the library alone", () => {
    const tree = JSON.parse(execFileSync("npm", ["ls", "--all", "--json"], { cwd: consumer, encoding: "utf8" })) as { dependencies: Record<string, { dependencies?: object }> };
    expect(Object.keys(tree.dependencies)).toEqual(["adp-router"]);
    expect(tree.dependencies["adp-router"]!.dependencies ?? {}).toEqual({});
    expect(readdirSync(path.join(consumer, "node_modules")).filter((f) => !f.startsWith("."))).toEqual(["adp-router"]);
  });

  it("type-checks a TypeScript consumer against its declarations", () => {
    writeFileSync(path.join(consumer, "typed.ts"), `import { createRouter, type Router, type RouteResult } from "adp-router";\nconst router: Router = createRouter({ numRanks: 2 });\nexport const result: RouteResult = router.route({ rankStates: [{ numActiveRequests: 0, numActiveTokens: 0 }, { numActiveRequests: 0, numActiveTokens: 0 }], maxNumActiveRequests: 4, requests: [{ id: 1, tokens: [1, 2, 3] }] });\n`);
    writeFileSync(path.join(consumer, "bad.ts"), `import { createRouter } from "adp-router";\ncreateRouter({ numRanks: "two" });\n`);
    const tsc = (file: string) => spawnSync(process.execPath, [path.join(root, "node_modules", "typescript", "bin", "tsc"), "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--skipLibCheck", "--types", "", file], { cwd: consumer, encoding: "utf8" });
    const good = tsc("typed.ts");
    expect(good.stdout + good.stderr).toBe("");
    expect(good.status).toBe(0);
    expect(tsc("bad.ts").status).not.toBe(0); // the declarations are read: a wrong type fails
  });

  it("says in one line how to get the gateway when adp-router serve runs without it", () => {
    const run = spawnSync(path.join(consumer, "node_modules", ".bin", "adp-router"), ["serve", "--workers", "1", "--upstream", "http://127.0.0.1:9"], { cwd: consumer, encoding: "utf8" });
    expect(run.status).toBe(1);
    expect(run.stderr).toBe("adp-router serve: the gateway is its own package: npm install adp-router-gateway, then run adp-router-gateway serve\n");
  });

  it("can import and require the installed package and run its CLI", () => {
    const body = probe.replace(/JSON\.stringify\(out\.assignments\)$/, "console.log(JSON.stringify(out.assignments));");
    writeFileSync(path.join(consumer, "esm.mjs"), `import { createRouter } from "adp-router";\n${body}\n`);
    writeFileSync(path.join(consumer, "cjs.cjs"), `const { createRouter } = require("adp-router");\n${body}\n`);
    for (const file of ["esm.mjs", "cjs.cjs"]) {
      const run = spawnSync(process.execPath, [file], { cwd: consumer, encoding: "utf8" });
      expect(run.stderr, file).toBe("");
      expect(run.stdout.trim(), file).toBe(expected);
    }
    const schema = createRequire(path.join(consumer, "x.js"))("adp-router/config.schema.json");
    expect(schema.title).toBe("AttentionDpConfig");
    // `npx adp-router simulate` on a fresh install: the bundled trace at 8 ranks.
    const cli = spawnSync(path.join(consumer, "node_modules", ".bin", "adp-router"), ["simulate", "--json"], { cwd: consumer, encoding: "utf8" });
    const sim = JSON.parse(cli.stdout) as { trace: string; ranks: number; optimum_prefix_hit_ratio: number; policies: { policy: string; prefix_hit_ratio: number; prefill_work_max_over_mean: number }[] };
    expect([sim.trace, sim.ranks]).toEqual(["mooncake_conversation_trace.jsonl", 8]);
    expect(sim.optimum_prefix_hit_ratio).toBeCloseTo(0.366, 3);
    const kv = sim.policies.find((p) => p.policy === "kv_cache_aware")!;
    expect(kv.prefix_hit_ratio / sim.optimum_prefix_hit_ratio).toBeGreaterThanOrEqual(0.95);
    expect(kv.prefill_work_max_over_mean).toBeLessThanOrEqual(1.15);
  });

  it.skipIf(!hasChromium)("an esbuild browser bundle of it decides the same in Chromium", async () => {
    const entry = path.join(consumer, "entry.js");
    writeFileSync(entry, `import { createRouter } from "adp-router";\nwindow.result = (() => { ${probe.replace(/JSON\.stringify\(out\.assignments\)$/, "return JSON.stringify(out.assignments);")} })();\n`);
    const bundle = await build({ entryPoints: [entry], bundle: true, format: "iife", platform: "browser", target: "es2022", write: false, absWorkingDir: consumer, logLevel: "silent" });
    const browser = await launchChromium();
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      await page.setContent("<!doctype html><title>consumer</title>");
      await page.addScriptTag({ content: bundle.outputFiles[0]!.text });
      expect(await page.evaluate(() => (window as unknown as { result: string }).result)).toBe(expected);
      expect(errors).toEqual([]);
    } finally {
      await browser.close();
    }
  }, 60_000);
});

if (!hasChromium) console.warn(skipReason);
