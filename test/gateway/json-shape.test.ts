// A request body's structure is counted before JSON.parse reads it
// (gateway/src/common/json-shape.ts): the counts are the parsed value's
// (objects, arrays, members, nesting, strings) whatever its strings hold, the walk that
// sets long literals aside counts the same, and the gateway refuses a body
// past the bounds 400 without sending it on.
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { JsonShape, jsonShapeProblem, MAX_JSON_DEPTH, MAX_JSON_ITEMS, MAX_JSON_STRINGS, WALKED_BYTES } from "../../gateway/src/common/json-shape.js";
import { elideLongLiterals } from "../../gateway/src/requests/long-literals.js";
import { createGateway, loadGatewayConfig } from "../../gateway/src/index.js";
import { startMockEngine } from "../support/mock-engine.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** The parsed value's own counts: deepest nesting of objects and arrays, objects + arrays + members, and strings (keys and values). */
function reference(v: unknown, depth = 0): { depth: number; items: number; strings: number } {
  if (typeof v !== "object" || v === null) return { depth, items: 0, strings: typeof v === "string" ? 1 : 0 };
  const children = Array.isArray(v) ? v : Object.values(v);
  let deepest = depth + 1;
  let items = 1 + (Array.isArray(v) ? 0 : children.length);
  let strings = Array.isArray(v) ? 0 : children.length;
  for (const c of children) {
    const r = reference(c, depth + 1);
    deepest = Math.max(deepest, r.depth);
    items += r.items;
    strings += r.strings;
  }
  return { depth: deepest, items, strings };
}

/** A body of at least WALKED_BYTES: `json` and a padding member of spaces after it (spaces are not counted). */
const padded = (json: string) => Buffer.from(`{"v":${json}${" ".repeat(WALKED_BYTES)}}`);

/** Strings that look like structure: brackets, colons, quotes and backslashes escaped. */
const tricky = fc.string({ unit: fc.constantFrom("[", "]", "{", "}", ":", ",", '"', "\\", "a", " ", "é") });
const value = fc.letrec((tie) => ({
  v: fc.oneof({ depthSize: "small" }, tricky, fc.integer(), fc.constant(null), fc.array(tie("v"), { maxLength: 4 }), fc.dictionary(tricky, tie("v"), { maxKeys: 4 })),
})).v;

describe("a body's structure, counted before it is parsed", () => {
  it("random values: refused exactly when the parsed value nests deeper, holds more items or more strings than the bounds (small bounds, fixed seed)", () => {
    let refused = 0;
    let refusedForStrings = 0;
    fc.assert(
      fc.property(value, fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 40 }), (v, maxDepth, maxItems, maxStrings) => {
        const raw = padded(JSON.stringify(v));
        const want = reference(JSON.parse(raw.toString()));
        const over = want.depth > maxDepth || want.items > maxItems || want.strings > maxStrings;
        const problem = jsonShapeProblem(raw, new JsonShape(maxDepth, maxItems, maxStrings));
        expect(problem !== null).toBe(over);
        if (problem?.endsWith("strings") === true) refusedForStrings++;
        // The elision's walk counts the same.
        const shape = new JsonShape(maxDepth, maxItems, maxStrings);
        elideLongLiterals(raw, shape);
        expect(shape.problem !== null).toBe(over);
        expect(shape.walked).toBe(!over);
        if (over) refused++;
      }),
      { seed: 20261206, numRuns: 3000 },
    );
    expect(refused).toBeGreaterThan(300); // both answers were tested
    expect(refusedForStrings).toBeGreaterThan(100); // and the strings' bound alone
  });

  it("random values with their lengths bounded (an engine's batch): refused exactly when a list has more elements, an object more members, or the lists more elements in all than the bounds (fixed seed)", () => {
    /** The longest list's elements, the largest object's members, and the lists' elements in all (an empty list counting one) in `v`. */
    const longest = (v: unknown): { list: number; members: number; elements: number } => {
      if (typeof v !== "object" || v === null) return { list: 0, members: 0, elements: 0 };
      const children = Array.isArray(v) ? v : Object.values(v);
      const own = { list: Array.isArray(v) ? children.length : 0, members: Array.isArray(v) ? 0 : children.length, elements: Array.isArray(v) ? Math.max(1, children.length) : 0 };
      for (const c of children) {
        const r = longest(c);
        own.list = Math.max(own.list, r.list);
        own.members = Math.max(own.members, r.members);
        own.elements += r.elements;
      }
      return own;
    };
    const counted = { list: 0, members: 0, elements: 0 };
    fc.assert(
      fc.property(value, fc.integer({ min: 1, max: 5 }), fc.integer({ min: 2, max: 5 }), fc.integer({ min: 1, max: 12 }), fc.boolean(), (v, list, members, elements, pretty) => {
        const raw = padded(pretty ? JSON.stringify(v, null, 2) : JSON.stringify(v));
        const want = longest(JSON.parse(raw.toString()));
        const shape = new JsonShape(MAX_JSON_DEPTH, Infinity, Infinity, "the answer", { list, members, elements });
        const problem = jsonShapeProblem(raw, shape);
        // {"v": ...} is an object of one member.
        expect(problem !== null).toBe(want.list > list || want.members > members || want.elements > elements);
        expect(shape.bound).toBe(problem === null ? null : "length");
        if (problem?.includes("a list of more than") === true) counted.list++;
        if (problem?.includes("an object of more than") === true) counted.members++;
        if (problem?.includes("list elements in all") === true) counted.elements++;
      }),
      { seed: 20261206, numRuns: 3000 },
    );
    // Each bound was what refused some.
    expect(counted.list).toBeGreaterThan(50);
    expect(counted.members).toBeGreaterThan(50);
    expect(counted.elements).toBeGreaterThan(50);
  });

  it("the bounds: MAX_JSON_DEPTH levels, MAX_JSON_ITEMS items and MAX_JSON_STRINGS strings are taken, one more is not; brackets in a long literal are not counted", () => {
    const nested = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`;
    // {"v": ...} is one level and two items (the object and its member) of its own.
    expect(jsonShapeProblem(padded(nested(MAX_JSON_DEPTH - 1)))).toBeNull();
    expect(jsonShapeProblem(padded(nested(MAX_JSON_DEPTH)))).toBe(`the request body nests objects and arrays deeper than ${MAX_JSON_DEPTH}`);
    const flat = (n: number) => `[${Array.from({ length: n }, () => "{}").join(",")}]`;
    expect(jsonShapeProblem(padded(flat(MAX_JSON_ITEMS - 3)))).toBeNull();
    expect(jsonShapeProblem(padded(flat(MAX_JSON_ITEMS - 2)))).toBe(`the request body has more than ${MAX_JSON_ITEMS} objects, arrays and members`);
    expect(jsonShapeProblem(padded(JSON.stringify(`[{:${'\\"['.repeat(50_000)}`)))).toBeNull();
    // {"v": ...} has one key of its own.
    const strings = (n: number) => `[${Array.from({ length: n }, (_, i) => JSON.stringify(i.toString(36))).join(",")}]`;
    expect(jsonShapeProblem(padded(strings(MAX_JSON_STRINGS - 1)))).toBeNull();
    expect(jsonShapeProblem(padded(strings(MAX_JSON_STRINGS)))).toBe(`the request body has more than ${MAX_JSON_STRINGS} strings`);
    // Shorter bodies are not walked.
    expect(jsonShapeProblem(Buffer.from(nested(WALKED_BYTES / 2 - 1)))).toBeNull();
  });

  it("through the gateway: a body nested 2 million deep, of 200,000 empty objects or of 600,000 short strings is refused 400 and reaches no engine", async () => {
    const engine = await startMockEngine("e0");
    open.push(engine);
    const text = `listen: { port: 0 }\nlogging: { level: silent }\nhealth: { interval_ms: 60000 }\nupstreams:\n  - ${engine.url}\n`;
    const g = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }));
    open.push(g);
    const chat = (extra: string) => `{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":${extra}}`;
    for (const [body, message] of [
      [chat(`${"[".repeat(2_000_000)}${"]".repeat(2_000_000)}`), "nests objects and arrays deeper than"],
      [chat(`[${Array.from({ length: 200_000 }, () => "{}").join(",")}]`), "objects, arrays and members"],
      [chat(`[${Array.from({ length: 600_000 }, (_, i) => JSON.stringify(i.toString(36))).join(",")}]`), "more than 100000 strings"],
    ] as const) {
      const r = await fetch(`${g.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { message: string } }).error.message).toContain(message);
    }
    expect(engine.received.filter((r) => r.path === "/v1/chat/completions")).toHaveLength(0);
  });
});
