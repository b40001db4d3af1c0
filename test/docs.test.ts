// The documentation (docs/*.md, README.md, gateway/README.md) says what the
// software does. Conventions this test relies on:
//
// (a) Runnable samples. A ```ts/```js block of README.md or docs/*.md that
//     imports "adp-router", "adp-router/…" or "adp-router-gateway" is a sample
//     meant to run as written (other blocks are shell sessions, output or
//     fragments). It is stripped of its types with esbuild (so a sample imports
//     what a consumer would), its package imports pointed at the built files through each package.json's
//     own "exports" (the library's dist/, the gateway's gateway/dist/), and run
//     in Node; an error, a non-zero exit or anything on stderr fails it.
// (b) Whole gateway files. A ```yaml block of the gateway pages (gateway*.md,
//     disaggregation, replicas, security, engines, operations) with a top-level `upstreams:` or
//     `listen:` key is a whole gateway file: it must load with loadGatewayConfig.
//     Variables its `*_env` settings name are set to a dummy 64-character value.
//     A block whose only problems are `*_file` settings naming files that do not
//     exist here (/run/secrets/…) is skipped, and listed as skipped.
// (c) Documented keys. In docs/gateway-config.md a table row whose first cell is
//     one backticked path documents that key: `section.key`, `upstreams[].key`
//     for a key of each upstream entry, `sync.signing.keys[].id` inside a list.
//     The documented set must equal the schema's keys (gatewayConfigSchema):
//     every property at any depth, through oneOf/anyOf variants and array items
//     (written `[]`), where a property whose value is itself an object with
//     properties is a section, not a key. `attention_dp_config` is one key: its
//     fields are the library's, documented in docs/library.md.
// (d) Size and history. README.md under 250 lines, each docs page under 500; no
//     user page holds development history (issue numbers, "before issue",
//     "this session", "the final code", commit hashes): that is CHANGELOG.md's.
// (e) Links. Every relative link of a docs page or the READMEs names a file that
//     exists, and its #anchor a heading of that file (GitHub's slugs).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { transform } from "esbuild";
import { parse } from "yaml";
import { afterAll, describe, expect, it } from "vitest";
import { GatewayConfigError, gatewayConfigSchema, loadGatewayConfig } from "../gateway/src/index.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const read = (file: string) => readFileSync(path.join(root, file), "utf8");
const docs = readdirSync(path.join(root, "docs"))
  .filter((f) => f.endsWith(".md"))
  .sort()
  .map((f) => `docs/${f}`);

/** One fenced code block of a page. */
interface Block {
  readonly file: string;
  readonly lang: string;
  /** The line of its opening fence. */
  readonly line: number;
  readonly code: string;
}

/** Every fenced block of `file` with its language and line. */
function codeBlocks(file: string): Block[] {
  const blocks: Block[] = [];
  const lines = read(file).split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = /^```(\S*)\s*$/.exec(lines[i]!);
    if (open === null) continue;
    const start = i;
    const body: string[] = [];
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++) body.push(lines[i]!);
    blocks.push({ file, lang: open[1]!, line: start + 1, code: body.join("\n") });
  }
  return blocks;
}

// (a) ------------------------------------------------------------------------

/** Matches a package import specifier in static or dynamic imports. */
const PACKAGE_IMPORT = /(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(["'])(adp-router(?:-gateway)?(?:\/[^"']*)?)\2/g;

/** The packages samples may import, with where each is built. */
const PACKAGES = [
  { name: "adp-router-gateway", dir: "gateway" },
  { name: "adp-router", dir: "." },
].map((p) => ({ ...p, exports: (JSON.parse(read(path.join(p.dir, "package.json"))) as { exports: Record<string, string | { default: string }> }).exports }));

/** The built file a package specifier resolves to, through its package.json's "exports". */
function resolveExport(specifier: string): string {
  for (const p of PACKAGES) {
    if (specifier !== p.name && !specifier.startsWith(`${p.name}/`)) continue;
    const key = specifier === p.name ? "." : `./${specifier.slice(p.name.length + 1)}`;
    const target = p.exports[key];
    if (target === undefined) throw new Error(`${specifier} is not exported by ${p.dir}/package.json`);
    return pathToFileURL(path.join(root, p.dir, typeof target === "string" ? target : target.default)).href;
  }
  throw new Error(`${specifier} is not one of the project's packages`);
}

const samples = ["README.md", ...docs].flatMap(codeBlocks).filter((b) => /^(ts|typescript|js|javascript|mjs)$/.test(b.lang) && new RegExp(PACKAGE_IMPORT.source).test(b.code));

const work = mkdtempSync(path.join(tmpdir(), "adp-docs-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

describe("the docs' code samples", () => {
  it("has samples of both packages to run, two of the library's in the README (the convention still matches the pages)", () => {
    expect(samples.filter((s) => s.file === "README.md" && /"adp-router(\/[^"]*)?"/.test(s.code)).length).toBeGreaterThanOrEqual(2);
    expect(samples.length).toBeGreaterThanOrEqual(4);
    expect(samples.some((s) => s.code.includes('"adp-router-gateway"'))).toBe(true);
    expect(samples.some((s) => /"adp-router(\/[^"]*)?"/.test(s.code))).toBe(true);
  });

  it.each(samples.map((s) => [`${s.file}:${s.line}`, s] as const))("the sample at %s runs as written", async (where, sample) => {
    for (const m of sample.code.matchAll(PACKAGE_IMPORT)) expect(() => resolveExport(m[3]!), where).not.toThrow();
    const { code } = await transform(sample.code, { loader: sample.lang.startsWith("t") ? "ts" : "js", format: "esm", target: "node20", sourcefile: where });
    const file = path.join(work, `${where.replace(/[^A-Za-z0-9]+/g, "-")}.mjs`);
    writeFileSync(file, code.replace(PACKAGE_IMPORT, (_all, lead: string, quote: string, spec: string) => `${lead}${quote}${resolveExport(spec)}${quote}`));
    const run = spawnSync(process.execPath, [file], { encoding: "utf8", cwd: work, timeout: 30_000 });
    expect(run.stderr, where).toBe("");
    expect(run.status, where).toBe(0);
  });
});

// (b) ------------------------------------------------------------------------

const GATEWAY_PAGES = new Set(["docs/disaggregation.md", "docs/replicas.md", "docs/security.md", "docs/engines.md", "docs/operations.md"]);
const gatewayFiles = docs
  .filter((f) => /^docs\/gateway[^/]*\.md$/.test(f) || GATEWAY_PAGES.has(f))
  .flatMap(codeBlocks)
  .filter((b) => /^ya?ml$/.test(b.lang) && /^(upstreams|listen):/m.test(b.code));

/** The environment variables a parsed file's `*_env` settings name. */
function envNames(value: unknown, into = new Set<string>()): Set<string> {
  if (Array.isArray(value)) for (const v of value) envNames(v, into);
  else if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (k.endsWith("_env") && typeof v === "string") into.add(v);
      else envNames(v, into);
    }
  }
  return into;
}

/** What loading a whole gateway file gave: nothing wrong, only files missing here, or its problems. */
function loadBlock(where: string, block: Block): { outcome: "loaded" | "missing files" | "problems"; detail: string } {
  const env = Object.fromEntries([...envNames(parse(block.code))].map((name) => [name, "0123456789abcdef".repeat(4)]));
  try {
    loadGatewayConfig({ file: { name: where, text: block.code }, env });
    return { outcome: "loaded", detail: "" };
  } catch (error) {
    if (!(error instanceof GatewayConfigError)) throw error;
    const missingFiles = error.issues.every((i) => /_file$/.test(i.field) && /cannot be read \(ENOENT\)/.test(i.message));
    return { outcome: missingFiles ? "missing files" : "problems", detail: error.issues.map((i) => `${i.where ?? where} ${i.field}: ${i.message}`).join("\n") };
  }
}

describe("the docs' whole gateway files", () => {
  const results = gatewayFiles.map((b) => {
    const where = `${b.file}:${b.line}`;
    return { where, ...loadBlock(where, b) };
  });

  it("has files to check", () => {
    expect(results.filter((r) => r.outcome !== "missing files").length).toBeGreaterThanOrEqual(3);
  });

  it.each(results.filter((r) => r.outcome !== "missing files").map((r) => [r.where, r] as const))("the gateway file at %s loads", (_where, r) => {
    expect(r.detail).toBe("");
    expect(r.outcome).toBe("loaded");
  });

  // Listed, not run: their only problems are files that exist on a deployed host, not here.
  it.skip.each(results.filter((r) => r.outcome === "missing files").map((r) => [r.where, r.detail.replace(/\n/g, "; ")] as const))("the gateway file at %s loads (names files that do not exist here: %s)", () => {});
});

// (c) ------------------------------------------------------------------------

interface SchemaNode {
  readonly properties?: Record<string, SchemaNode>;
  readonly items?: SchemaNode;
  readonly oneOf?: readonly SchemaNode[];
  readonly anyOf?: readonly SchemaNode[];
}

/** A schema node and its oneOf/anyOf variants. */
const variants = (s: SchemaNode): SchemaNode[] => [s, ...(s.oneOf ?? []), ...(s.anyOf ?? [])];

/** Every key of the schema below `prefix`, as `section.key` paths. */
function schemaKeys(nodes: readonly SchemaNode[], prefix: string, into: string[] = []): string[] {
  const byName = new Map<string, SchemaNode[]>();
  for (const v of nodes.flatMap(variants)) for (const [k, sub] of Object.entries(v.properties ?? {})) byName.set(k, [...(byName.get(k) ?? []), sub]);
  for (const [name, subs] of byName) {
    const key = prefix === "" ? name : `${prefix}.${name}`;
    const forms = subs.flatMap(variants);
    const sections = forms.filter((f) => f.properties !== undefined);
    const items = forms.flatMap((f) => (f.items === undefined ? [] : variants(f.items))).filter((f) => f.properties !== undefined);
    if (key === "attention_dp_config") into.push(key);
    else if (sections.length > 0) schemaKeys(sections, key, into);
    else if (items.length > 0) schemaKeys(items, `${key}[]`, into);
    else into.push(key);
  }
  return into;
}

/** The keys docs/gateway-config.md documents: table rows whose first cell is one backticked path. */
function documentedKeys(): string[] {
  return read("docs/gateway-config.md")
    .split("\n")
    .map((l) => /^\|\s*`([^`|]+)`\s*\|/.exec(l)?.[1])
    .filter((k): k is string => k !== undefined);
}

describe("docs/gateway-config.md", () => {
  const documented = documentedKeys();
  const inSchema = schemaKeys([gatewayConfigSchema as unknown as SchemaNode], "");

  it("documents each key once", () => {
    expect(documented.filter((k, i) => documented.indexOf(k) !== i)).toEqual([]);
  });

  it("documents every key of the schema, and no key the schema lacks", () => {
    expect(inSchema.length).toBeGreaterThan(50); // the walk still finds the schema's keys
    const missing = inSchema.filter((k) => !documented.includes(k));
    const unknown = documented.filter((k) => !inSchema.includes(k));
    expect({ "in the schema, not documented": missing, "documented, not in the schema": unknown }).toEqual({ "in the schema, not documented": [], "documented, not in the schema": [] });
  });
});

// (d) ------------------------------------------------------------------------

/** Development history: issue numbers, session talk, commit hashes (7+ hex digits with a letter and a digit). */
const HISTORY = [/issue #/i, /before issue/i, /\bthis session\b/i, /\bprevious session\b/i, /\bthe final code\b/i, /\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b/];

describe("the pages' size and content", () => {
  it("README.md is under 250 lines", () => {
    expect(read("README.md").split("\n").length).toBeLessThan(250);
  });

  it.each(docs)("%s is under 500 lines", (file) => {
    expect(read(file).split("\n").length).toBeLessThan(500);
  });

  it.each([...docs, "README.md", "gateway/README.md"])("%s holds no development history", (file) => {
    const lines = read(file).split("\n");
    const found = lines.flatMap((l, i) => HISTORY.filter((h) => h.test(l)).map((h) => `${file}:${i + 1}: ${h.source}: ${l.trim().slice(0, 120)}`));
    expect(found).toEqual([]);
  });
});

// (e) ------------------------------------------------------------------------

/** GitHub's anchor for a heading. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}_\- ]/gu, "")
    .replace(/ /g, "-");

/** The anchors of a page's headings. */
function anchors(file: string): Set<string> {
  const out = new Set<string>();
  let fenced = false;
  for (const line of read(file).split("\n")) {
    if (/^```/.test(line)) fenced = !fenced;
    const h = fenced ? null : /^#{1,6}\s+(.*)$/.exec(line);
    if (h) out.add(slug(h[1]!));
  }
  return out;
}

describe("the pages' links", () => {
  it.each([...docs, "README.md", "gateway/README.md"])("every relative link of %s reaches a file and heading", (file) => {
    const broken: string[] = [];
    let fenced = false;
    for (const line of read(file).split("\n")) {
      if (/^```/.test(line)) fenced = !fenced;
      if (fenced) continue;
      for (const m of line.matchAll(/\]\(([^)\s]+)\)/g)) {
        const link = m[1]!;
        if (/^[a-z]+:/.test(link)) continue; // https:, mailto:
        const [target, anchor] = link.split("#") as [string, string | undefined];
        const resolved = target === "" ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), target));
        if (!existsSync(path.join(root, resolved))) {
          broken.push(`${link}: no file ${resolved}`);
          continue;
        }
        if (anchor !== undefined && resolved.endsWith(".md") && !anchors(resolved).has(anchor)) broken.push(`${link}: no heading #${anchor} in ${resolved}`);
      }
    }
    expect(broken).toEqual([]);
  });
});
