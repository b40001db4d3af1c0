// A body's long string literals read as bytes (gateway/src/requests/long-literals.ts):
// whatever the body, reading it so gives what reading it whole gives (the
// same routed request, token for token, or the same refusal), and the long
// prompt is not parsed into strings.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { readRequest, type PromptLimits } from "../../gateway/src/requests/openai.js";
import { elideLongLiterals, LONG_LITERAL_BYTES } from "../../gateway/src/requests/long-literals.js";
import { Utf8ByteTokenizer } from "../../gateway/src/tokenizers/tokenizer.js";

const tok = new Utf8ByteTokenizer();

/** What reading `raw` gives: the routed request with its tokens as an array, or the refusal's status, code and message. */
function outcome(kind: "chat" | "completion", raw: Buffer, limits: PromptLimits, whole: boolean): unknown {
  try {
    const r = readRequest(kind, raw, { "x-session-id": "s" }, tok, new Map([["lora-model", 3]]), limits, whole);
    const tokens = [...r.tokens];
    tok.release(r.tokens);
    return { ...r, tokens };
  } catch (error) {
    const e = error as { status?: number; code?: string; message: string };
    return { status: e.status, code: e.code, message: e.message };
  }
}

const long = (c: string, n = LONG_LITERAL_BYTES + 100) => c.repeat(Math.ceil(n / c.length)).slice(0, n);

describe("long literals", () => {
  it("a long prompt is set aside as its bytes: the text parsed is short, the tokens are the whole reading's", () => {
    const content = long("the cache router ", 200_000);
    const raw = Buffer.from(JSON.stringify({ model: "m", messages: [{ role: "system", content }, { role: "user", content: "hi" }] }));
    const elided = elideLongLiterals(raw)!;
    expect(elided.count).toBe(1);
    expect(elided.text.length).toBeLessThan(200);
    const limits = { maxPromptChars: Infinity, maxPromptTokens: Infinity };
    expect(outcome("chat", raw, limits, false)).toEqual(outcome("chat", raw, limits, true));
  });

  it("is not set aside: a key, a literal with an escape, control or non-ASCII characters, a short one", () => {
    const keyed = Buffer.from(JSON.stringify({ model: "m", [long("k")]: 1 }));
    expect(elideLongLiterals(keyed)).toBeNull();
    for (const bad of [long("a") + "\\n", long("a") + "é", long("a") + "\u0001"]) {
      expect(elideLongLiterals(Buffer.from(JSON.stringify({ model: "m", prompt: bad })))).toBeNull();
    }
    expect(elideLongLiterals(Buffer.from(JSON.stringify({ model: "m", prompt: "short" })))).toBeNull();
    // A raw control character (invalid JSON) is never set aside: the whole reading refuses the body.
    const raw = Buffer.from(`{"model":"m","prompt":"${long("a")}\u0001"}`);
    expect(elideLongLiterals(raw)).toBeNull();
  });

  it("finds a raw control character at any place of a literal, whatever its alignment in memory (every byte value, every position mod 16)", () => {
    const text = long("abcdefg", LONG_LITERAL_BYTES + 37);
    for (let shift = 0; shift < 4; shift++) {
      const body = Buffer.from(`${" ".repeat(shift)}{"model":"m","prompt":"${text}"}`);
      const at = body.indexOf(text);
      // In an unshared buffer at an offset, so the literal starts at every alignment.
      const placed = (b: Buffer) => Buffer.concat([Buffer.alloc(shift + 1), b]).subarray(shift + 1);
      expect(elideLongLiterals(placed(body))?.count).toBe(1);
      for (const position of [0, 1, 2, 3, 5, 8, 15, 16, 17, 31, 4096, text.length - 17, text.length - 5, text.length - 2, text.length - 1]) {
        for (const control of [0x00, 0x01, 0x09, 0x0a, 0x0d, 0x1f]) {
          const damaged = Buffer.from(body);
          damaged[at + position] = control;
          expect(elideLongLiterals(placed(damaged)), `byte ${control} at ${position}, shift ${shift}`).toBeNull();
        }
        const space = Buffer.from(body);
        space[at + position] = 0x20; // the first byte that is no control character
        expect(elideLongLiterals(placed(space))?.count).toBe(1);
      }
    }
  });

  it("sets a literal aside exactly when every byte is 0x20 to 0x7F and none a backslash: each byte value, at places across the scan's 64-byte steps, at any length", () => {
    const text = long("abcdefg", LONG_LITERAL_BYTES + 70);
    const body = Buffer.from(`{"model":"m","prompt":"${text}"}`);
    const at = body.indexOf(text);
    const plain = (b: number) => b >= 0x20 && b <= 0x7f && b !== 0x5c;
    for (let b = 0; b < 256; b++) {
      if (b === 0x22) continue; // a quote ends the literal
      for (const position of [0, 1, 15, 16, 47, 63, 64, 65, 4095, text.length - 64, text.length - 2, text.length - 1]) {
        const changed = Buffer.from(body);
        changed[at + position] = b;
        expect(elideLongLiterals(changed)?.count ?? 0, `byte ${b} at ${position}`).toBe(plain(b) ? 1 : 0);
      }
    }
    // Every length mod 64, the last byte bad or not: the padding never hides the end.
    for (let extra = 0; extra < 64; extra++) {
      const t = long("xyz", LONG_LITERAL_BYTES + extra);
      expect(elideLongLiterals(Buffer.from(`{"prompt":"${t}"}`))?.count).toBe(1);
      expect(elideLongLiterals(Buffer.from(`{"prompt":"${t.slice(0, -1)}\u0001"}`))).toBeNull();
      expect(elideLongLiterals(Buffer.from(`{"prompt":"${t.slice(0, -1)}\u007f"}`))?.count).toBe(1);
    }
  });

  it("random bodies with long texts anywhere: the same routed request or the same refusal as reading whole (fixed seed)", () => {
    const text = fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom("hi", "a question") },
      { weight: 3, arbitrary: fc.constantFrom(long("abc "), long("x", LONG_LITERAL_BYTES), long("y", LONG_LITERAL_BYTES - 1), long("z", 3 * LONG_LITERAL_BYTES)) },
      { weight: 1, arbitrary: fc.constantFrom(long("q") + '"quoted"', long("t") + "\t\\", long("u") + "ü", long("e") + "😀", "\u0000adp-literal-x-0") },
    );
    const part = fc.oneof(fc.record({ type: fc.constant("text"), text }), fc.record({ type: fc.constant("image_url"), image_url: fc.record({ url: text }) }), fc.record({ type: fc.constant("text"), text: fc.constant(7) }));
    const content = fc.oneof(text, fc.array(part, { minLength: 1, maxLength: 3 }), fc.constant(null), fc.record({ note: text }));
    const message = fc.record({ role: fc.oneof({ weight: 5, arbitrary: fc.constantFrom("user", "system") }, { weight: 1, arbitrary: text }), content }, { requiredKeys: ["role"] });
    const extras = fc.record(
      {
        model: fc.oneof(fc.constantFrom("m", "lora-model"), text),
        stream: fc.boolean(),
        tools: fc.array(fc.record({ type: fc.constant("function"), function: fc.record({ name: fc.constant("f"), description: text }) }), { maxLength: 2 }),
        cache_salt: fc.oneof(fc.constant("salt"), text),
        conversation_params: fc.record({ conversation_id: fc.oneof(fc.constant("c1"), text) }),
        metadata: fc.dictionary(fc.constantFrom("a", "b", long("key")), text, { maxKeys: 2 }),
      },
      { requiredKeys: [] },
    );
    const chat = fc.tuple(fc.array(message, { minLength: 1, maxLength: 4 }), extras).map(([messages, rest]) => ({ ...rest, messages }));
    const completion = fc.tuple(fc.oneof(text, fc.array(text, { minLength: 1, maxLength: 3 })), extras).map(([prompt, rest]) => ({ ...rest, prompt }));
    const limits = fc.constantFrom<PromptLimits>({ maxPromptChars: Infinity, maxPromptTokens: Infinity }, { maxPromptChars: 20_000, maxPromptTokens: Infinity }, { maxPromptChars: 9_000, maxPromptTokens: 12_000 });
    // The body as sent: JSON, sometimes cut or with a stray byte (then both readings refuse it alike).
    const damage = fc.constantFrom("none", "none", "none", "cut", "stray");
    let elided = 0;
    fc.assert(
      fc.property(fc.oneof(chat.map((b) => ["chat", b] as const), completion.map((b) => ["completion", b] as const)), limits, damage, ([kind, body], lim, how) => {
        let json = JSON.stringify(body);
        if (how === "cut") json = json.slice(0, Math.floor(json.length * 0.7));
        if (how === "stray") json = json.replace('"m"', '"m" x');
        const raw = Buffer.from(json);
        if (elideLongLiterals(raw) !== null) elided++;
        expect(outcome(kind, raw, lim, false)).toEqual(outcome(kind, raw, lim, true));
      }),
      { seed: 4242, numRuns: 400 },
    );
    expect(elided).toBeGreaterThan(150); // the property was tested on bodies that had literals set aside
  });
});
