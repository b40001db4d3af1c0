// The UTF-8 byte tokenizer: its ids are exactly the UTF-8 bytes of the
// canonical rendering (checked against TextEncoder on the rendered text),
// whatever the scratch memory it reuses between calls.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { HttpError, readRequest } from "../../gateway/src/requests/openai.js";
import { TokenPool, Utf8ByteTokenizer } from "../../gateway/src/tokenizers/tokenizer.js";

/** The canonical rendering, written out independently of the tokenizer. */
function rendered(messages: { role: string; content: string }[]): string {
  return messages.map((m) => `\u001e${m.role}\u001f${m.content}`).join("");
}

const bytesOf = (text: string) => Array.from(new TextEncoder().encode(text));

describe("Utf8ByteTokenizer", () => {
  it("gives the UTF-8 bytes of the rendering: multi-byte text, surrogate pairs, lone surrogates as U+FFFD", () => {
    const tok = new Utf8ByteTokenizer();
    const messages = [
      { role: "system", content: "Grüße, 世界 😀" },
      { role: "user", content: "lone \ud83d at the end \ud83d" },
      { role: "assistant", content: "\ude00 lone low first" },
    ];
    expect(Array.from(tok.encodeChat(messages))).toEqual(bytesOf(rendered(messages)));
    expect(Array.from(tok.encodePrompt("x\ud83dy"))).toEqual([0x78, 0xef, 0xbf, 0xbd, 0x79]);
  });

  it("random chats, pieces encoded one by one: the bytes of the whole rendering (roles and contents with lone and split surrogates, fixed seed)", () => {
    const tok = new Utf8ByteTokenizer();
    const unit = fc.oneof(fc.constantFrom("a", "é", "世", "\ud83d", "\ude00", "😀", "\u001e", "\u0000", " "), fc.string({ maxLength: 3 }));
    const text = fc.array(unit, { maxLength: 40 }).map((xs) => xs.join(""));
    fc.assert(
      fc.property(fc.array(fc.record({ role: text, content: text }), { minLength: 1, maxLength: 5 }), (messages) => {
        const ids = tok.encodeChat(messages);
        expect(Array.from(ids)).toEqual(bytesOf(rendered(messages)));
        tok.release(ids);
      }),
      { seed: 42, numRuns: 500 },
    );
  });

  it("joins a content's text parts before encoding, so a surrogate pair split across parts stays one character", () => {
    const tok = new Utf8ByteTokenizer();
    const ids = tok.encodeChat([{ role: "user", content: [{ type: "text", text: "a\ud83d" }, { type: "text", text: "\ude00b" }] }]);
    expect(Array.from(ids)).toEqual(bytesOf("\u001euser\u001fa😀b"));
  });

  it("earlier results stay intact when the scratch memory is reused and grown", () => {
    const tok = new Utf8ByteTokenizer();
    const first = tok.encodePrompt("first prompt é");
    const copy = Array.from(first);
    tok.encodePrompt("second, longer prompt ".repeat(2_000)); // grows the scratch
    tok.encodePrompt("x");
    expect(Array.from(first)).toEqual(copy);
    // Chats of short texts are rendered straight into pooled memory: one not given back is never lent again.
    const chat = tok.encodeChat([{ role: "user", content: "a short chat é" }]);
    const chatCopy = Array.from(chat);
    const released = tok.encodeChat([{ role: "user", content: "released" }]);
    tok.release(released);
    for (let i = 0; i < 8; i++) tok.encodeChat([{ role: "system", content: `later chat ${i} `.repeat(i * 10) }]);
    expect(Array.from(chat)).toEqual(chatCopy);
    expect(chat.length).toBe(chatCopy.length);
  });

  it("a prompt past the scratch limit is encoded whole, the same bytes", () => {
    const tok = new Utf8ByteTokenizer();
    const text = "é😀".repeat(200_000); // 1.2 M bytes: over the largest scratch kept
    const ids = tok.encodePrompt(text);
    expect(ids.length).toBe(1_200_000);
    const expected = new TextEncoder().encode(text);
    let same = true;
    for (let i = 0; i < ids.length; i++) if (ids[i] !== expected[i]) same = false;
    expect(same).toBe(true);
  });

  it("token-id prompts are taken as given", () => {
    expect(Array.from(new Utf8ByteTokenizer().encodePrompt([1, 2, 4_000_000_000]))).toEqual([1, 2, 4_000_000_000]);
  });

  it("gives its byte ids as a Uint8Array (the library hashes them as bytes), past the scratch limit too; given ids stay u32", () => {
    const tok = new Utf8ByteTokenizer();
    expect(tok.encodeChat([{ role: "user", content: "hello" }])).toBeInstanceOf(Uint8Array);
    expect(tok.encodePrompt("hello")).toBeInstanceOf(Uint8Array);
    const huge = tok.encodePrompt("é".repeat(600_000)); // past the 1 MiB scratch
    expect(huge).toBeInstanceOf(Uint8Array);
    expect(huge.length).toBe(1_200_000);
    expect(tok.encodePrompt([1, 300])).toBeInstanceOf(Uint32Array);
  });
});

describe("TokenPool", () => {
  it("hands a released array out again, once: a second release or a foreign array is ignored", () => {
    const pool = new TokenPool();
    const a = pool.take(3_000);
    expect(a.length).toBe(3_000);
    pool.release(a);
    pool.release(a); // twice: must not be lent to two callers
    pool.release(new Uint32Array(4_096)); // not the pool's
    const b = pool.take(3_500); // same size class: a's memory
    const c = pool.take(3_500);
    expect(b.buffer).toBe(a.buffer);
    expect(c.buffer).not.toBe(a.buffer);
    expect(b.length).toBe(3_500);
  });

  it("keeps a buffer by its bytes: one lent as byte ids comes back as u32 ids of the same bytes, and the other way", () => {
    const pool = new TokenPool();
    const bytes = pool.takeBytes(4_000);
    expect(bytes).toBeInstanceOf(Uint8Array);
    expect(bytes.length).toBe(4_000);
    pool.release(bytes);
    const words = pool.take(1_000);
    expect(words.buffer).toBe(bytes.buffer);
    pool.release(words);
    expect(pool.takeBytes(3_000).buffer).toBe(bytes.buffer);
    expect(pool.takeBytes(3_000).buffer).not.toBe(bytes.buffer);
  });

  it("a request refused after its prompt was tokenized hands the ids back to the tokenizer", () => {
    class Counting extends Utf8ByteTokenizer {
      released = 0;
      override release(ids: Uint32Array | Uint8Array): void {
        this.released++;
        super.release(ids);
      }
    }
    const body = (extra: object) => Buffer.from(JSON.stringify({ model: "m", messages: [{ role: "user", content: "a question" }], ...extra }));
    const refusals: [object, Record<string, string>][] = [
      [{ cache_salt: { a: 1 } }, {}],
      [{ conversation_params: [] }, {}],
      [{}, { "x-session-id": "s".repeat(10_000) }],
    ];
    for (const [extra, headers] of refusals) {
      const tok = new Counting();
      expect(() => readRequest("chat", body(extra), headers, tok)).toThrow(HttpError);
      expect(tok.released).toBe(1);
    }
    const tok = new Counting();
    const taken = readRequest("chat", body({ cache_salt: "a" }), {}, tok);
    expect(tok.released).toBe(0); // a request read whole keeps its ids until it is placed
    expect(taken.tokens.length).toBeGreaterThan(0);
  });

  it("a tokenizer's released ids come back filled with the next prompt's bytes, nothing left over", () => {
    const tok = new Utf8ByteTokenizer();
    const long = tok.encodePrompt("a".repeat(3_000));
    tok.release(long);
    const short = tok.encodePrompt("bc");
    expect(Array.from(short)).toEqual([0x62, 0x63]);
  });

  it("arrays past the largest size are plain (not pooled)", () => {
    const pool = new TokenPool();
    const big = pool.take((1 << 20) + 1);
    expect(big.buffer.byteLength).toBe(((1 << 20) + 1) * 4);
    pool.release(big);
    expect(pool.take((1 << 20) + 1).buffer).not.toBe(big.buffer);
    const pooled = pool.take(1 << 20); // a million-token prompt's ids are pooled
    pool.release(pooled);
    expect(pool.take(1 << 20).buffer).toBe(pooled.buffer);
  });

  it("by default keeps one of every size and two of the three largest", () => {
    const pool = new TokenPool();
    const sizes: number[] = [];
    for (let words = 1 << 8; words <= 1 << 20; words *= 2) sizes.push(words);
    const lent = [...sizes, 1 << 18, 1 << 19, 1 << 20].map((words) => pool.take(words));
    for (const ids of lent) pool.release(ids);
    expect(pool.freeBytes).toBe(lent.reduce((t, ids) => t + ids.buffer.byteLength, 0)); // 15 MiB less 1 KiB
    const given = new Set(lent.map((ids) => ids.buffer));
    const again = [...sizes, 1 << 18, 1 << 19, 1 << 20].map((words) => pool.take(words).buffer);
    expect(again.filter((buffer) => given.has(buffer)).length).toBe(again.length); // each one given back, none fresh
    expect(new Set(again).size).toBe(again.length);
  });

  it("what it keeps follows the load: a released array pushes out free arrays of other sizes, largest first, within the cap", () => {
    const pool = new TokenPool(64 << 10); // 64 KiB: sixteen 1,024-word arrays' worth
    const small = [pool.take(1_024), pool.take(1_024)]; // 4 KiB each
    const large = pool.take(8_192); // 32 KiB
    const middle = pool.take(4_096); // 16 KiB
    for (const a of [...small, large, middle]) pool.release(a);
    expect(pool.freeBytes).toBe(56 << 10);
    const next = pool.take(4_000); // the middle size class: its free array again
    expect(next.buffer).toBe(middle.buffer);
    const other = pool.take(2_048); // 8 KiB: nothing free of its size
    const another = pool.take(2_048);
    pool.release(next); // 56 KiB free again
    pool.release(other); // 64 KiB: fits exactly
    expect(pool.freeBytes).toBe(64 << 10);
    pool.release(another); // 8 KiB more: the largest other size (32 KiB) goes
    expect(pool.freeBytes).toBe(40 << 10);
    expect(pool.take(8_192).buffer).not.toBe(large.buffer);
    expect(pool.take(2_048).buffer).toBe(another.buffer);
    expect(pool.take(1_024).buffer).toBe(small[1]!.buffer);
  });

  it("pushes out other sizes only, and only as many as it must", () => {
    const pool = new TokenPool(64 << 10);
    const keep = (words: number[]) => words.map((w) => pool.take(w)).forEach((a) => pool.release(a));
    keep([8_192, 4_096, 1_024, 1_024, 1_024]); // 32 + 16 + 3 × 4 = 60 KiB free
    const second = pool.take(8_192); // the 32 KiB one again, then a fresh one beside it
    const first = pool.take(8_192);
    pool.release(second);
    pool.release(first); // 92 KiB: the 16 KiB and the three 4 KiB go, the other 32 KiB stays
    expect(pool.freeBytes).toBe(64 << 10);
    expect([pool.take(8_192).buffer, pool.take(8_192).buffer]).toEqual([first.buffer, second.buffer]);

    const other = new TokenPool(64 << 10);
    const sixteens = [other.take(4_096), other.take(4_096)];
    const eights = [other.take(2_048), other.take(2_048)];
    for (const a of [...sixteens, ...eights]) other.release(a); // 48 KiB free
    other.release(other.take(8_192)); // 80 KiB: one 16 KiB array goes, not both
    expect(other.freeBytes).toBe(64 << 10);
    expect(other.take(4_096).buffer).toBe(sixteens[0]!.buffer);
    expect(other.take(2_048).buffer).toBe(eights[1]!.buffer);
  });

  it("never keeps more than its cap, whatever sizes come and go (random loads)", () => {
    const cap = 256 << 10;
    const pool = new TokenPool(cap);
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648);
    const out: Uint32Array[] = [];
    const seen = new Set<ArrayBuffer>();
    const lentBefore = new Set<ArrayBuffer>();
    for (let step = 0; step < 5_000; step++) {
      if (out.length > 0 && next() % 2 === 0) pool.release(out.splice(next() % out.length, 1)[0]!);
      else {
        const ids = pool.take(1 + (next() % 70_000));
        expect(seen.has(ids.buffer as ArrayBuffer)).toBe(false); // never lent twice at once
        lentBefore.add(ids.buffer as ArrayBuffer);
        seen.add(ids.buffer as ArrayBuffer);
        out.push(ids);
      }
      expect(pool.freeBytes).toBeLessThanOrEqual(cap);
      expect(pool.freeBytes).toBeGreaterThanOrEqual(0);
      seen.clear();
      for (const o of out) seen.add(o.buffer as ArrayBuffer);
    }
    // What it counts is what it holds: every array it hands out of each size until a fresh one comes was one given back.
    for (const o of out) pool.release(o);
    const counted = pool.freeBytes;
    let held = 0;
    for (let words = 256; words <= 1 << 17; words *= 2) {
      for (;;) {
        const a = pool.take(words);
        if (!lentBefore.has(a.buffer as ArrayBuffer)) break;
        held += a.buffer.byteLength;
      }
    }
    expect(held).toBe(counted);
  });
});
