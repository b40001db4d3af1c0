// Reads the JSON-lines fixtures under test/fixtures.
import { readFileSync } from "node:fs";

/** Every non-empty line of `test/fixtures/NAME`, parsed. */
export function readJsonLines<T = Record<string, unknown>>(name: string): T[] {
  return readFileSync(new URL(`../fixtures/${name}`, import.meta.url), "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as T);
}
