// The gateway's folders are its rooms, and their imports point one way
// (gateway/src/README.md): a folder imports only folders listed above it, and
// the library only by its package name. The library imports nothing of the
// gateway. Read from the sources, every static and dynamic import and re-export.
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

/** The rooms, lowest first; the top level (".") may import them all. */
const ORDER = ["common", "http1", "config", "tokenizers", "requests", "events", "load", "fleet", "proxy", "disaggregation", "replication", "workers", "edge", "."];

/** Every .ts file under `dir`, relative to it. */
const sources = (dir: string) => (readdirSync(dir, { recursive: true }) as string[]).filter((f) => f.endsWith(".ts"));
/** The module specifiers `text` imports or re-exports (comments, which show examples, set aside). */
const specifiers = (text: string) => [...text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "").matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)["']([^"']+)["']/g)].map((m) => m[1]!);
/** The room a path under gateway/src belongs to. */
const roomOf = (file: string) => (file.includes(path.sep) ? file.split(path.sep)[0]! : ".");

describe("the gateway's layering", () => {
  const root = path.resolve("gateway/src");
  const files = sources(root);

  it("has every room it documents, each with a README saying what it owns, and no other", () => {
    const rooms = readdirSync(root, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort();
    expect(rooms).toEqual(ORDER.filter((r) => r !== ".").sort());
    const table = readFileSync(path.join(root, "README.md"), "utf8");
    for (const room of rooms) {
      expect(readFileSync(path.join(root, room, "README.md"), "utf8")).toMatch(new RegExp(`^# ${room} — \\S`));
      expect(table).toContain(`| \`${room}/\` |`);
    }
  });

  it("imports point one way: a room imports only rooms above it, the library only as adp-router", () => {
    const upward: string[] = [];
    for (const file of files) {
      const from = roomOf(file);
      for (const spec of specifiers(readFileSync(path.join(root, file), "utf8"))) {
        if (!spec.startsWith(".")) {
          if (spec.startsWith("adp-router-gateway")) upward.push(`${file}: imports its own package (${spec})`);
          continue;
        }
        const target = path.relative(root, path.resolve(root, path.dirname(file), spec));
        if (target.startsWith("..")) {
          upward.push(`${file}: reaches outside the gateway (${spec}); the library is "adp-router"`);
          continue;
        }
        const to = roomOf(target);
        if (to !== from && ORDER.indexOf(to) >= ORDER.indexOf(from)) upward.push(`${file} (${from}) imports ${target} (${to})`);
      }
    }
    expect(upward).toEqual([]);
  });

  it("the library imports nothing of the gateway", () => {
    const offenders = sources(path.resolve("src")).filter((f) => specifiers(readFileSync(path.resolve("src", f), "utf8")).some((s) => s.includes("gateway") || s.includes("/serve/")));
    expect(offenders).toEqual([]);
  });

  it("the check sees an upward import (a planted one is caught)", () => {
    expect(specifiers(`import type { Fleet } from "../fleet/fleet.js";\nexport { x } from './y.js';\nawait import("../edge/edge.js");`)).toEqual(["../fleet/fleet.js", "./y.js", "../edge/edge.js"]);
    const target = path.relative(root, path.resolve(root, "config", "../fleet/fleet.js"));
    expect(ORDER.indexOf(roomOf(target))).toBeGreaterThan(ORDER.indexOf("config"));
  });
});
