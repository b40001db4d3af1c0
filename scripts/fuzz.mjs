// The long fuzz run for releases: the fuzz properties of `npm test`
// (test/fuzz-*.property.test.ts) with ADP_FUZZ_RUNS damaged snapshots
// (100,000 unless given) and the twin properties scaled to match; the
// snapshot properties print their tallies. Run: npm run fuzz [-- RUNS]
import { spawnSync } from "node:child_process";

const runs = process.argv[2] ?? "100000";
if (!/^[1-9][0-9]*$/.test(runs)) {
  console.error(`npm run fuzz: RUNS must be a positive integer, got ${JSON.stringify(runs)}`);
  process.exit(2);
}
const started = Date.now();
const run = spawnSync(
  process.execPath,
  ["node_modules/vitest/vitest.mjs", "run", "--project", "node", "--testTimeout", "0", "test/fuzz-"],
  { stdio: "inherit", env: { ...process.env, ADP_FUZZ_RUNS: runs } },
);
console.log(`npm run fuzz: ${runs} damaged snapshots, ${((Date.now() - started) / 1000).toFixed(0)} s`);
process.exitCode = run.status ?? 1;
