// Token timing read off a stream's bytes (gateway/src/proxy/token-timing.ts):
// however the upstream's bytes are cut into chunks, the tokens counted and the
// bytes passed on are those of the whole stream read at once.

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { TokenTiming } from "../../gateway/src/proxy/token-timing.js";

/** One SSE event's JSON: a field that carries a token or not (empty, another field), compact or with a space after the colon. */
const event = fc
  .record({
    field: fc.constantFrom('"content":', '"text":', '"reasoning_content":', '"tool_calls":', '"role":'),
    space: fc.boolean(),
    empty: fc.boolean(),
    end: fc.constantFrom("\n\n", "\r\n\r\n", "\r\r"),
  })
  .map(({ field, space, empty, end }) => {
    const value = field === '"tool_calls":' ? (empty ? "[]" : '[{"index":0}]') : empty ? '""' : '"tok"';
    return `data: {"id":"c","choices":[{"index":0,"delta":{${field}${space ? " " : ""}${value}},"finish_reason":null}]}${end}`;
  });

/** Where the bytes after `text`'s last event boundary (a blank line, LF, CRLF or bare CR) begin; 0 without one. */
function lastBoundaryEnd(text: string): number {
  const lf = text.lastIndexOf("\n\n");
  const crlf = text.lastIndexOf("\n\r\n");
  const cr = text.lastIndexOf("\r\r");
  return Math.max(lf < 0 ? 0 : lf + 2, crlf < 0 ? 0 : crlf + 3, cr < 0 ? 0 : cr + 2);
}

/** Tokens `timing` counted: the first, and one per gap after it; each chunk's bytes passed on are checked: the whole events so far. */
function feed(chunks: readonly Buffer[]): { tokens: number; passed: Buffer } {
  let gaps = 0;
  const timing = new TokenTiming(0, () => gaps++, () => 1);
  let seen = "";
  const out: Buffer[] = [];
  for (const c of chunks) {
    out.push(timing.chunk(c));
    seen += c.toString("latin1");
    expect(Buffer.concat(out).toString("latin1")).toBe(seen.slice(0, lastBoundaryEnd(seen)));
  }
  const rest = timing.flush();
  return { tokens: (timing.firstTokenAt === null ? 0 : 1) + gaps, passed: Buffer.concat(rest === null ? out : [...out, rest]) };
}

describe("token timing", () => {
  it("counts the same tokens and passes the same bytes however the stream is cut (random events, random cuts)", () => {
    fc.assert(
      fc.property(fc.array(event, { minLength: 1, maxLength: 12 }), fc.array(fc.nat(), { maxLength: 20 }), (events, cuts) => {
        const whole = Buffer.from(events.join(""));
        const at = [...new Set(cuts.map((c) => c % whole.length))].sort((a, b) => a - b);
        const chunks = [0, ...at].map((from, i) => whole.subarray(from, i < at.length ? at[i] : whole.length)).filter((c) => c.length > 0);
        const once = feed([whole]);
        const cut = feed(chunks);
        expect(cut.tokens).toBe(once.tokens);
        expect(cut.passed.equals(whole)).toBe(true);
        // The events whose field holds something: the tokens.
        expect(once.tokens).toBe(events.filter((e) => !e.includes('"role":') && !/:\s?(""|\[\])/.test(e)).length);
      }),
      { numRuns: 2000 },
    );
  });

  it("counts a field cut right after its key, and after its value's first byte, once", () => {
    const text = 'data: {"choices":[{"delta":{"content":"x"}}]}\n\n';
    for (let cut = 1; cut < text.length; cut++) {
      const whole = Buffer.from(text);
      expect(feed([whole.subarray(0, cut), whole.subarray(cut)]).tokens).toBe(1);
    }
  });
});
