// A request body's long string literals, read as the bytes they are rather
// than parsed into strings. A prompt of a few hundred kilobytes parsed whole
// is two strings of its size (the body's text, the prompt's value): V8 puts
// a string past 128 KiB, and everything JSON.parse makes from a text past
// 100 KiB, straight into the old generation, so long prompts cost full
// collections, not just copies (bench:peers' trace: about a third of the
// gateway's CPU per request went to marking). The byte tokenizer needs a
// prompt's UTF-8 bytes, which an unescaped ASCII literal already is.
//
// So: each string literal of at least LONG_LITERAL_BYTES bytes that is a
// value (not a key), plain ASCII, with no escape and no control character, is
// replaced in the text JSON.parse reads by a placeholder (a short string no
// client can write: it holds a NUL and this process's random nonce); the
// literal stays in the body, as its byte range. The text keeps every other
// byte as it came, so JSON.parse accepts and refuses exactly what it would
// of the whole body (a replaced literal was a valid string where it stood).
// Where the byte tokenizer reads a prompt's text (a message's content, a text
// part, a completion's prompt) it takes the placeholder's bytes; anywhere
// else the placeholder is put back as the literal's text (restoreElsewhere).

import { randomBytes } from "node:crypto";
import { isPlainText } from "./plain-text.js";
import { JsonShape, walkJson } from "../common/json-shape.js";

/** Literals at least this many bytes long are set aside. */
export const LONG_LITERAL_BYTES = 8 * 1024;

/** Bodies longer than this are parsed whole (the byte tokenizer's scratch holds 1 MiB). */
const MAX_ELIDED_BODY_BYTES = 1 << 20;

/** A placeholder's start: a NUL (a literal holding one is escaped in JSON, and escaped literals are never set aside) and a nonce of this process. */
const MARKER = `\u0000adp-literal-${randomBytes(9).toString("base64url")}-`;
/** The marker as it is written in JSON text. */
const MARKER_JSON = `\\u0000${MARKER.slice(1)}`;

/** A body with its long literals set aside. */
export class ElidedBody {
  /** The body's text with each long literal replaced by its placeholder (what JSON.parse reads). */
  readonly text: string;
  /** How many literals were set aside. */
  readonly count: number;
  readonly #raw: Buffer;
  /** Each literal's content (without its quotes) as start and end in the body, two numbers a literal. */
  readonly #spans: readonly number[];

  constructor(text: string, raw: Buffer, spans: readonly number[]) {
    this.text = text;
    this.#raw = raw;
    this.#spans = spans;
    this.count = spans.length / 2;
  }

  /** Which literal `s` stands for, or -1 when it is no placeholder of this body. */
  indexOf(s: string): number {
    if (s.length <= MARKER.length || s.charCodeAt(0) !== 0 || !s.startsWith(MARKER)) return -1;
    const i = Number(s.slice(MARKER.length));
    return Number.isInteger(i) && i >= 0 && i < this.count ? i : -1;
  }

  /** The UTF-8 bytes a placeholder stands for (a view of the body), or null when `s` is none. */
  bytesOf(s: string): Buffer | null {
    const i = this.indexOf(s);
    return i < 0 ? null : this.#raw.subarray(this.#spans[2 * i]!, this.#spans[2 * i + 1]!);
  }

  /** The length in UTF-16 code units of the string `s` stands for (ASCII: its bytes), or `s.length` for any other string. */
  lengthOf(s: string): number {
    const i = this.indexOf(s);
    return i < 0 ? s.length : this.#spans[2 * i + 1]! - this.#spans[2 * i]!;
  }

  /** The string `s` stands for (the literal's ASCII text), or `s` itself. */
  restore(s: string): string {
    const i = this.indexOf(s);
    return i < 0 ? s : this.#raw.toString("latin1", this.#spans[2 * i], this.#spans[2 * i + 1]);
  }
}

/**
 * `raw` with its long literals set aside, or null when it has none (or is too
 * long, or its quotes do not pair: JSON.parse of the whole body judges it).
 * `shape` counts the structure between the literals as the walk goes (json-
 * shape.ts): null as soon as it is past a bound (`shape.problem`), and
 * `shape.walked` once the walk reached the end.
 */
export function elideLongLiterals(raw: Buffer, shape: JsonShape = new JsonShape()): ElidedBody | null {
  if (raw.length < LONG_LITERAL_BYTES || raw.length > MAX_ELIDED_BODY_BYTES) return null;
  const spans: number[] = [];
  walkJson(raw, shape, (start, end) => {
    if (end - start >= LONG_LITERAL_BYTES && isPlainText(raw, start, end) && !isKey(raw, end + 1)) spans.push(start, end);
  });
  if (!shape.walked || spans.length === 0) return null;
  let text = "";
  let from = 0;
  for (let i = 0; i < spans.length; i += 2) {
    text += raw.toString("utf8", from, spans[i]) + MARKER_JSON + String(i / 2);
    from = spans[i + 1]!;
  }
  return new ElidedBody(text + raw.toString("utf8", from), raw, spans);
}

/** Whether the literal ending before `at` is an object's key (a colon follows it, past whitespace). */
function isKey(raw: Buffer, at: number): boolean {
  let i = at;
  while (i < raw.length && (raw[i] === 0x20 || raw[i] === 0x09 || raw[i] === 0x0a || raw[i] === 0x0d)) i++;
  return raw[i] === 0x3a;
}

/**
 * Puts back as their text the placeholders `body` holds outside the places
 * the byte tokenizer reads as bytes (`kept`: the objects and arrays whose
 * placeholder values stay, by container and key; an array's elements all
 * stay). Walks the parsed body with an explicit stack (it nests as it likes).
 */
export function restoreElsewhere(body: Record<string, unknown>, elided: ElidedBody, kept: ReadonlyMap<object, string | null>): void {
  const stack: unknown[] = [body];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v !== "object" || v === null) continue;
    const keep = kept.get(v);
    const container = v as Record<string, unknown>;
    for (const k in container) {
      const x = container[k];
      if (typeof x === "string") {
        if (keep !== undefined && (keep === null || keep === k)) continue;
        if (elided.indexOf(x) >= 0) container[k] = elided.restore(x);
      } else if (typeof x === "object" && x !== null) stack.push(x);
    }
  }
}
