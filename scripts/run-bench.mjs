// Bundles a TypeScript benchmark (bench/NAME.bench.ts) for Node and runs it.
import { build } from "esbuild";
import { spawnSync } from "node:child_process";
import path from "node:path";

const name = process.argv[2] ?? "route";
const outfile = path.join("build", "bench", `${name}.bench.mjs`);
await build({
  entryPoints: [path.join("bench", `${name}.bench.ts`)],
  outfile,
  bundle: true,
  format: "esm",
  platform: "node",
  target: "node20",
  packages: "external",
  logLevel: "warning",
});
const run = spawnSync(process.execPath, ["--expose-gc", "--max-old-space-size=8192", outfile, ...process.argv.slice(3)], { stdio: "inherit" });
process.exitCode = run.status ?? 1;
