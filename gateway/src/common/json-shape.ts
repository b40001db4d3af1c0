// How much structure a request body may have before JSON.parse reads it, on
// the event loop. JSON.parse takes about 3 ns a byte of a long string and
// 5-16 of numbers, but 40-100 of objects, arrays and distinct keys, and about
// 40 of distinct short strings (measured on Node 20: 4 MiB of `[[[[…` 400 ms, of
// `{},{},…` 230 ms, one object of distinct keys 180 ms, `["0","1",…` 153-173 ms
// against 12 ms for one string of 4 MiB; the first held 0.5-1 GB of heap
// after). So a body of WALKED_BYTES or more is walked first: its string
// literals by their quotes (Buffer.indexOf, native), the bytes between them
// one at a time (a real body has few), counting its literals, its objects,
// arrays and members and how deep they nest. Past MAX_JSON_DEPTH,
// MAX_JSON_ITEMS or MAX_JSON_STRINGS it is refused (400, by the caller)
// before it is parsed. A smaller body costs at most about a millisecond.
// An engine's event batch is walked the same way with its lists' and objects'
// lengths bounded too, each and in all (a list of 8 million zeros is one
// array to the counts above, and a gateway polling 16 MiB of them peaked at
// 557 MB of RSS).

/** Bodies at least this long are walked before they are parsed. */
export const WALKED_BYTES = 8 * 1024;
/** The deepest nesting of objects and arrays taken (CPython's json, which the engines parse with, stops near 1,000). */
export const MAX_JSON_DEPTH = 1000;
/** The most objects, arrays and object members taken in one body (a chat of 10,000 messages has about 30,000). */
export const MAX_JSON_ITEMS = 100_000;
/**
 * The most string literals, keys and values, taken in one body (a chat of
 * 10,000 messages of text parts has about 70,000; JSON.parse reads 100,000
 * short ones of distinct text in about 22 ms; the walk stops at them in 3).
 */
export const MAX_JSON_STRINGS = 100_000;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACKET = 0x5b;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACKET = 0x5d;
const CLOSE_BRACE = 0x7d;
const COLON = 0x3a;
const COMMA = 0x2c;

/** The longest lists and objects a walk takes (elements, members), and the most list elements in all, when it bounds them. */
export interface JsonLengths {
  readonly list: number;
  readonly members: number;
  /** Counted as each list's commas and one more a list (an empty one's too): a bound from above. */
  readonly elements: number;
}

/** Where the literal whose content starts at `start` ends (its closing quote), or -1 when it does not. */
function literalEnd(raw: Buffer, start: number): number {
  for (let from = start; ; ) {
    const quote = raw.indexOf(QUOTE, from);
    if (quote < 0) return -1;
    // A quote after an odd run of backslashes is escaped (part of the literal).
    let backslashes = 0;
    while (quote - 1 - backslashes >= start && raw[quote - 1 - backslashes] === BACKSLASH) backslashes++;
    if (backslashes % 2 === 0) return quote;
    from = quote + 1;
  }
}

/** A body's structure counted as it is walked: the bytes outside its literals, a stretch at a time. */
export class JsonShape {
  readonly #maxDepth: number;
  readonly #maxItems: number;
  readonly #maxStrings: number;
  /** What its problems name (a client's body, an engine's answer). */
  readonly #subject: string;
  #depth = 0;
  #items = 0;
  #strings = 0;
  /** The longest lists and objects taken, or null (not bounded: a request body's are bounded by its bytes). */
  readonly #lengths: JsonLengths | null;
  /** Each open list's or object's elements still allowed after the one it is on, by depth (when bounded). */
  readonly #left: Int32Array | null;
  /** Whether each open container is a list (1) or an object (0), by depth (when bounded). */
  readonly #lists: Uint8Array | null;
  /** The list elements counted so far (when bounded). */
  #elements = 0;
  /** What is past a bound, once something is (null: nothing yet). */
  problem: string | null = null;
  /** Which bound that is: the nesting, the count of items or strings, or a list's or object's length. */
  bound: "depth" | "items" | "strings" | "length" | null = null;
  /** Whether the walk reached the body's end (its shape is then all counted). */
  walked = false;

  /** A count against the bounds given (tests give small ones), its problems naming `subject`. */
  constructor(maxDepth = MAX_JSON_DEPTH, maxItems = MAX_JSON_ITEMS, maxStrings = MAX_JSON_STRINGS, subject = "the request body", lengths: JsonLengths | null = null) {
    this.#maxDepth = maxDepth;
    this.#lengths = lengths;
    // One count a level: lengths are bounded only under a depth bound that sizes them.
    if (lengths !== null && !Number.isSafeInteger(maxDepth)) throw new RangeError(`bounded lengths need a finite maxDepth, not ${maxDepth}`);
    this.#left = lengths === null ? null : new Int32Array(maxDepth + 2);
    this.#lists = lengths === null ? null : new Uint8Array(maxDepth + 2);
    this.#maxItems = maxItems;
    this.#maxStrings = maxStrings;
    this.#subject = subject;
  }

  /** Counts one string literal (a key or a value); false once past the bound (`problem` says so). */
  literal(): boolean {
    if (++this.#strings <= this.#maxStrings) return true;
    this.problem = `${this.#subject} has more than ${this.#maxStrings} strings`;
    this.bound = "strings";
    return false;
  }

  /** Counts the structure in `raw[from, to)`, bytes outside any literal; false once past a bound (`problem` says which). */
  count(raw: Buffer, from: number, to: number): boolean {
    let depth = this.#depth;
    let items = this.#items;
    const left = this.#left;
    for (let i = from; i < to; i++) {
      const b = raw[i];
      if (b === OPEN_BRACKET || b === OPEN_BRACE) {
        depth++;
        items++;
        // Its first element is counted by the comma after it (an empty one's allowance is never used).
        if (left !== null && depth <= this.#maxDepth) {
          const list = b === OPEN_BRACKET;
          left[depth] = (list ? this.#lengths!.list : this.#lengths!.members) - 1;
          this.#lists![depth] = list ? 1 : 0;
          if (list && !this.#element()) return false;
        }
      } else if (b === CLOSE_BRACKET || b === CLOSE_BRACE) depth--;
      else if (b === COLON) items++;
      else if (b === COMMA && left !== null && depth > 0) {
        const list = this.#lists![depth] === 1;
        if (--left[depth]! >= 0) {
          if (!list || this.#element()) continue;
          return false;
        }
        this.problem = list ? `${this.#subject} has a list of more than ${this.#lengths!.list} elements` : `${this.#subject} has an object of more than ${this.#lengths!.members} members`;
        this.bound = "length";
        return false;
      } else continue;
      if (depth > this.#maxDepth) (this.problem = `${this.#subject} nests objects and arrays deeper than ${this.#maxDepth}`), (this.bound = "depth");
      else if (items > this.#maxItems) (this.problem = `${this.#subject} has more than ${this.#maxItems} objects, arrays and members`), (this.bound = "items");
      else continue;
      return false;
    }
    this.#depth = depth;
    this.#items = items;
    return true;
  }

  /** Counts one more list element; false once past the bound in all (`problem` says so). */
  #element(): boolean {
    if (++this.#elements <= this.#lengths!.elements) return true;
    this.problem = `${this.#subject} has more than ${this.#lengths!.elements} list elements in all`;
    this.bound = "length";
    return false;
  }
}

/**
 * Walks `raw`: its literals by their quotes, each one counted into `shape`
 * and its content given to `literal` (start and end, its closing quote), the
 * structure between them counted into `shape` too. It stops past a bound
 * (`shape.problem`) or at a quote without its pair (left to JSON.parse,
 * which refuses it); `shape.walked` once it reached the end.
 */
export function walkJson(raw: Buffer, shape: JsonShape, literal: ((start: number, end: number) => void) | null = null): void {
  for (let at = 0; ; ) {
    const quote = raw.indexOf(QUOTE, at);
    if (!shape.count(raw, at, quote < 0 ? raw.length : quote)) return;
    if (quote < 0) break;
    if (!shape.literal()) return;
    const end = literalEnd(raw, quote + 1);
    if (end < 0) return;
    literal?.(quote + 1, end);
    at = end + 1;
  }
  shape.walked = true;
}

/** What of `raw`'s structure is past the bounds, or null (a body under WALKED_BYTES is not walked). */
export function jsonShapeProblem(raw: Buffer, shape: JsonShape = new JsonShape()): string | null {
  if (raw.length < WALKED_BYTES) return null;
  walkJson(raw, shape);
  return shape.problem;
}
