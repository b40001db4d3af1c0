// Editing a JSON object's top-level members in its text: the request a
// prefill or decode server gets is the client's body byte for byte but for
// the members the protocol sets, and an engine's hand-over object goes on as
// the engine wrote it. Parsing and serializing again would round the long
// integers both carry (a 64-bit disagg_request_id, a uint64 seed) and reorder
// nothing the engines care about, but change what the client sent.
//
// Every function here takes text JSON.parse accepted (the caller checks): the
// scan trusts its structure and only finds where each value begins and ends.

/** One member of an object's text: its key, decoded, and where the member and its value are. */
export interface Member {
  readonly key: string;
  /** Where its key's opening quote is. */
  readonly start: number;
  /** Where its value begins, and ends (exclusive). */
  readonly valueStart: number;
  readonly end: number;
}

/** The index of the first character at or after `i` that is not JSON whitespace. */
function skipSpace(text: string, i: number): number {
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

/** Where the string starting at `i` (its opening quote) ends, exclusive. */
function stringEnd(text: string, i: number): number {
  for (let j = i + 1; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (c === 0x5c) j++;
    else if (c === 0x22) return j + 1;
  }
  return text.length;
}

/** Where the value starting at `i` ends, exclusive. */
export function valueEnd(text: string, i: number): number {
  const c = text.charCodeAt(i);
  if (c === 0x22) return stringEnd(text, i);
  if (c === 0x7b || c === 0x5b) {
    let depth = 0;
    for (let j = i; j < text.length; j++) {
      const d = text.charCodeAt(j);
      if (d === 0x22) j = stringEnd(text, j) - 1;
      else if (d === 0x7b || d === 0x5b) depth++;
      else if (d === 0x7d || d === 0x5d) {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return text.length;
  }
  // A number or a literal: up to the next delimiter.
  let j = i;
  while (j < text.length && !/[\s,}\]]/.test(text[j]!)) j++;
  return j;
}

/** The members of the object whose `{` is at `from` (the text's own object by default), in order. */
export function objectMembers(text: string, from = skipSpace(text, 0)): Member[] {
  const members: Member[] = [];
  let i = skipSpace(text, from + 1);
  while (i < text.length && text.charCodeAt(i) === 0x22) {
    const keyEnd = stringEnd(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    const valueStart = skipSpace(text, skipSpace(text, keyEnd) + 1); // past the colon
    const end = valueEnd(text, valueStart);
    members.push({ key, start: i, valueStart, end });
    i = skipSpace(text, end);
    if (text.charCodeAt(i) === 0x2c) i = skipSpace(text, i + 1);
  }
  return members;
}

/** The value text of member `key` of the object at `from` (the last one, as JSON.parse takes it), or null when absent. */
export function memberText(text: string, key: string, from?: number): string | null {
  let found: string | null = null;
  for (const m of objectMembers(text, from)) if (m.key === key) found = text.slice(m.valueStart, m.end);
  return found;
}

/** Where the elements of the array whose `[` is at `from` begin. */
export function arrayElements(text: string, from: number): number[] {
  const starts: number[] = [];
  let i = skipSpace(text, from + 1);
  while (i < text.length && text.charCodeAt(i) !== 0x5d) {
    starts.push(i);
    i = skipSpace(text, valueEnd(text, i));
    if (text.charCodeAt(i) === 0x2c) i = skipSpace(text, i + 1);
  }
  return starts;
}

/**
 * The object at `from` in `text` with every member named in `set` removed
 * and `set`'s members (each a key and its value's JSON text) appended, in
 * `set`'s order; a value of `undefined` only removes. The other members stay
 * as written.
 */
export function withMembers(text: string, set: ReadonlyMap<string, string | undefined>, from?: number): string {
  const kept = objectMembers(text, from).filter((m) => !set.has(m.key)).map((m) => text.slice(m.start, m.end));
  for (const [key, value] of set) if (value !== undefined) kept.push(`${JSON.stringify(key)}:${value}`);
  return `{${kept.join(",")}}`;
}
