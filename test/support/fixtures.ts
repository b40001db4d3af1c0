// The JSON-lines fixtures under test/fixtures, read through Vite's `?raw` imports
// so the same suites run in Node and in the browser.
const files = import.meta.glob<string>("../fixtures/*.jsonl", { query: "?raw", import: "default", eager: true });

/** Every non-empty line of `test/fixtures/NAME`, parsed. */
export function readJsonLines<T = Record<string, unknown>>(name: string): T[] {
  const text = files[`../fixtures/${name}`];
  if (text === undefined) throw new Error(`no fixture ${name}`);
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as T);
}
