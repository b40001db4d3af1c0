// The built scripts hold ASCII only. V8 keeps each script's source in its heap
// for as long as the script lives, two bytes a character once any character is
// past Latin-1: the gateway's bundle, with a few arrows in comments esbuild
// keeps, took twice its size of every serve process's live heap
// (scripts/build.mjs escapes what esbuild leaves).
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

/** The .js files under `dir`, relative to the repository. */
const scripts = (dir: string): string[] =>
  readdirSync(path.join(root, dir), { recursive: true, encoding: "utf8" })
    .filter((name) => name.endsWith(".js"))
    .map((name) => path.join(dir, name));

describe("the built scripts", () => {
  it("hold ASCII only, so V8 keeps their source one byte a character", () => {
    const files = [...scripts("gateway/dist"), ...scripts("dist")];
    expect(files).toContain(path.join("gateway/dist", "cli.js"));
    const outside = files.flatMap((file) => {
      const text = readFileSync(path.join(root, file), "utf8");
      const at = text.search(/[^\x00-\x7f]/);
      return at < 0 ? [] : [`${file}: ${JSON.stringify(text.slice(Math.max(0, at - 40), at + 10))}`];
    });
    expect(outside).toEqual([]);
  });
});
