// HTTP/1.1's field grammar (RFC 9110 §5.1, §5.5) as the gateway checks it,
// both for what it writes and for what an upstream or a client sends: checked
// a character at a time against a table (a regular expression per header
// costs more than the rest of reading it).

/** 1 for each character a token may hold (RFC 9110 §5.6.2). */
export const TCHAR = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") TCHAR[c.charCodeAt(0)] = 1;

/** Whether `text` from `start` to `end` is a token: a method or a field name. */
export function isToken(text: string, start = 0, end = text.length): boolean {
  if (end <= start) return false;
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c >= 128 || TCHAR[c] === 0) return false;
  }
  return true;
}

/** Whether `text` from `start` to `end` is a field value's latin1 text: visible characters, spaces and tabs, obs-text; no CR, LF, DEL or other control. */
export function isFieldValue(text: string, start = 0, end = text.length): boolean {
  for (let i = start; i < end; i++) {
    const c = text.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f || c > 0xff) return false;
  }
  return true;
}

/** Whether `c` is a space or a tab (optional whitespace around a field value). */
export const isBlank = (c: number): boolean => c === 0x20 || c === 0x09;

/** A Content-Length's value: the number `text` writes in 1 to 15 decimal digits, or -1. */
export function lengthOf(text: string): number {
  if (text.length === 0 || text.length > 15) return -1;
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const d = text.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

/**
 * A header record: an object whose prototype is an empty object with no
 * prototype, so a header named `__proto__`, `constructor` or `toString` is an
 * own property like any other, as with `Object.create(null)`. Unlike that
 * (a dictionary from its first property, 457 bytes for five headers), its
 * objects keep fast properties: 80 bytes, and its stores skip the
 * dictionary's rehashing.
 */
export const HeaderRecord = function HeaderRecord() {} as unknown as new () => Record<string, string | string[] | undefined>;
HeaderRecord.prototype = Object.freeze(Object.create(null));
