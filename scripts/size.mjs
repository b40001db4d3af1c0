// The size budget: the library entry with its inlined wasm, minified and gzipped.
// Prints JSON; exits 1 over budget. Run after the build (npm run size).
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { readFileSync } from "node:fs";

export const BUDGET_BYTES = 40 * 1024;

export async function measureSize() {
  const out = await build({
    entryPoints: ["dist/index.js"],
    bundle: true,
    minify: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    write: false,
    logLevel: "silent",
  });
  const min = out.outputFiles[0].contents;
  const wasm = readFileSync("build/release.wasm");
  return {
    wasm_bytes: wasm.length,
    wasm_gzip_bytes: gzipSync(wasm, { level: 9 }).length,
    library_min_bytes: min.length,
    library_min_gzip_bytes: gzipSync(min, { level: 9 }).length,
    budget_gzip_bytes: BUDGET_BYTES,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const size = await measureSize();
  console.log(JSON.stringify(size));
  if (size.library_min_gzip_bytes > BUDGET_BYTES) process.exitCode = 1;
}
