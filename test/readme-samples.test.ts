// The README's code samples run as written. Convention: a ```ts/```js block
// that imports from "adp-router" or "adp-router/…" is a sample meant to run
// (other blocks are shell sessions, output or illustrative fragments). Each is
// stripped of its types with esbuild, its package imports pointed at the built
// dist/ files through package.json's own "exports" (so a sample imports what a
// consumer would), and run in Node; any error, exit status or stderr fails it.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { transform } from "esbuild";
import { afterAll, describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
const readme = readFileSync(path.join(root, "README.md"), "utf8");
const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as { exports: Record<string, string | { default: string }> };

/** One fenced code block of the README. */
interface Sample {
  /** Its fence's language tag. */
  readonly lang: string;
  /** The README line of its opening fence, for failure messages. */
  readonly line: number;
  /** Its text. */
  readonly code: string;
}

/** Every fenced block of `markdown` with its language and line. */
function codeBlocks(markdown: string): Sample[] {
  const blocks: Sample[] = [];
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (open === null) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    blocks.push({ lang: open[1]!, line: start + 1, code: body.join("\n") });
  }
  return blocks;
}

/** Matches a package import specifier in static or dynamic imports. */
const PACKAGE_IMPORT = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(["'])(adp-router(?:\/[^"']*)?)\2/g;

/** The built file an "adp-router…" specifier resolves to, through package.json's "exports". */
function resolveExport(specifier: string): string {
  const key = specifier === "adp-router" ? "." : `./${specifier.slice("adp-router/".length)}`;
  const target = pkg.exports[key];
  if (target === undefined) throw new Error(`${specifier} is not exported by package.json`);
  return pathToFileURL(path.join(root, typeof target === "string" ? target : target.default)).href;
}

/** The samples meant to run: JS/TS blocks importing the package. */
const samples = codeBlocks(readme).filter((b) => /^(ts|typescript|js|javascript|mjs)$/.test(b.lang) && new RegExp(PACKAGE_IMPORT.source).test(b.code));

const work = mkdtempSync(path.join(tmpdir(), "adp-readme-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("the README's code samples", () => {
  it("has samples to run (the convention still matches the README)", () => {
    expect(samples.length).toBeGreaterThanOrEqual(2);
  });

  it.each(samples.map((s) => [s.line, s] as const))("the sample at README.md:%i runs as written", async (line, sample) => {
    const { code } = await transform(sample.code, { loader: sample.lang.startsWith("t") ? "ts" : "js", format: "esm", target: "node20", sourcefile: `README.md:${line}` });
    const file = path.join(work, `sample-${line}.mjs`);
    writeFileSync(file, code.replace(PACKAGE_IMPORT, (_all, lead: string, quote: string, spec: string) => `${lead}${quote}${resolveExport(spec)}${quote}`));
    const run = spawnSync(process.execPath, [file], { encoding: "utf8", cwd: work });
    expect(run.stderr, `README.md:${line}`).toBe("");
    expect(run.status, `README.md:${line}`).toBe(0);
  });

  it("maps every package import of a sample to a built file", () => {
    for (const s of samples) {
      for (const m of s.code.matchAll(PACKAGE_IMPORT)) expect(() => resolveExport(m[3]!), `README.md:${s.line}`).not.toThrow();
    }
  });
});
