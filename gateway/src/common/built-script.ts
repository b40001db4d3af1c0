// Where a worker's built script is: next to this module in the package
// (dist/index.js and dist/cli.js sit beside the workers' scripts); from the
// sources (tests run gateway/src/**/*.ts) or a bundle two folders down in the
// repository (build/bench/), the built one in gateway/dist/ (Node cannot start
// a .ts worker; `npm test`'s pretest and the benches' scripts build it).

import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The URL of the built worker script `name` (e.g. `tokenize-worker.js`). */
export function builtScript(name: string): URL {
  const beside = new URL(`./${name}`, import.meta.url);
  const built = [beside, new URL(`../../dist/${name}`, import.meta.url), new URL(`../../gateway/dist/${name}`, import.meta.url)];
  return built.find((u) => existsSync(fileURLToPath(u))) ?? beside;
}
