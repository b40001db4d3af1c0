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

/**
 * Where the field name opening the header line at `at` (which ends at `end`)
 * ends: the index of its colon, or -1 when the line does not open with a token
 * and a colon (obs-fold, a character outside tokens, no colon).
 */
export function nameColon(text: string, at: number, end: number): number {
  let i = at;
  while (i < end) {
    const c = text.charCodeAt(i);
    if (c >= 128 || TCHAR[c] === 0) break;
    i++;
  }
  return i === at || i === end || text.charCodeAt(i) !== 0x3a ? -1 : i;
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

/**
 * A head's header names as sent and lower-cased, each a string of its own:
 * the next head on a connection is read against them (clients and engines
 * send the same names in the same order on every request), a name found again
 * taken from here instead of scanned, sliced and lower-cased anew.
 */
export interface SeenNames {
  readonly raw: readonly string[];
  readonly names: readonly string[];
}

/** No head seen yet. */
export const NO_NAMES: SeenNames = Object.freeze({ raw: Object.freeze([]), names: Object.freeze([]) });

/** The most characters of header names kept to read the next head against (the 14 an `openai` client sends are about 250). */
export const MAX_SEEN_CHARS = 1024;

/**
 * A string of its own: V8 makes a slice of 13 characters or more a view of the
 * whole string it came from, which would keep a head's text alive with it.
 */
export const ownString = (s: string): string => Buffer.from(s, "latin1").toString("latin1");

/**
 * The lower-cased name of the header line at `at` in `text` when it is
 * `seen`'s `index`th name followed by its colon, else null. A seen name holds
 * token characters only, so a match cannot run past its line, and is ASCII,
 * so its colon is at `at` plus the returned name's length.
 */
export function seenName(seen: SeenNames, index: number, text: string, at: number): string | null {
  const known = index < seen.raw.length ? seen.raw[index]! : "";
  return known !== "" && text.charCodeAt(at + known.length) === 0x3a && text.startsWith(known, at) ? seen.names[index]! : null;
}

/** Whether `seen` holds exactly the names of a head of `text` whose lower-cased names are `names`, each line starting at `spans[2i]`. */
function holds(seen: SeenNames, text: string, names: readonly string[], spans: readonly number[]): boolean {
  if (seen.raw.length !== names.length) return false;
  for (let i = 0; i < names.length; i++) {
    if (seenName(seen, i, text, spans[2 * i]!) !== names[i]) return false;
  }
  return true;
}

/**
 * The names to read the next head against, after a head of `text` whose
 * lower-cased names are `names` (each line starting at `spans[2i]`): `seen`
 * when every one came from it (`same`) and there were no more; else
 * `shared.last` when it holds them (many connections' clients send the same,
 * and then hold one copy between them, not one each); else copies, which
 * become `shared.last`.
 */
export function namesAfter(seen: SeenNames, same: boolean, text: string, names: readonly string[], spans: readonly number[], shared: { last: SeenNames } | null = null): SeenNames {
  if (same && names.length === seen.raw.length) return seen;
  if (shared !== null && holds(shared.last, text, names, spans)) return shared.last;
  let chars = 0;
  for (const n of names) chars += n.length;
  // Names a client makes long are not kept: an idle connection holds at most this much of its last head.
  if (chars > MAX_SEEN_CHARS) return NO_NAMES;
  const lower = Object.freeze(names.map(ownString));
  const raw = Object.freeze(names.map((n, i) => {
    const sent = text.slice(spans[2 * i]!, spans[2 * i]! + n.length);
    return sent === n ? lower[i]! : ownString(sent); // a name sent lower-case is kept once
  }));
  const made: SeenNames = Object.freeze({ raw, names: lower });
  if (shared !== null) shared.last = made;
  return made;
}
