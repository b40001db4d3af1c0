// A small, exact parser of Prometheus' text exposition format (version 0.0.4,
// what vLLM's `/metrics` serves through prometheus_client), written here so
// the gateway takes no dependency for the four gauges it reads. It is strict
// the way a Prometheus server is: one bad line makes the whole page
// unparseable (a page that is not what it claims to be is not trusted in
// part), and it never throws: every problem comes back as a value.
//
// The grammar, line by line (https://prometheus.io/docs/instrumenting/exposition_formats/):
//   empty line                                   ignored
//   # HELP <metric name> <docstring>             metadata (docstring not kept)
//   # TYPE <metric name> <type>                  counter|gauge|histogram|summary|untyped
//   # <anything else>                            a comment
//   <name>[{<label>="<value>"[,...][,]}] <value> [<timestamp ms>]
// Names are [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*;
// label values escape `\\`, `\"` and `\n` (and nothing else); values are Go
// floats, `NaN`, `+Inf` and `-Inf` included; blanks are spaces or tabs.

/** A metric's type, as its TYPE line says. */
export type PrometheusType = "counter" | "gauge" | "histogram" | "summary" | "untyped";

/** One sample line. */
export interface PrometheusSample {
  /** The series' name (`vllm:num_requests_running`, `foo_bucket`). */
  readonly name: string;
  /** Its labels, unescaped (a Map: a label may be named `__proto__`). */
  readonly labels: ReadonlyMap<string, string>;
  /** Its value (NaN and ±Infinity are values of the format). */
  readonly value: number;
  /** Its timestamp (ms since the epoch), or null when the line has none. */
  readonly timestampMs: number | null;
  /** Its 1-based line number (for messages). */
  readonly line: number;
}

/** The first line that broke the grammar. */
export interface PrometheusSyntaxProblem {
  /** 1-based line number. */
  readonly line: number;
  /** The rule it broke, phrased to follow "expected" or as a statement. */
  readonly rule: string;
  /** The start of the line, cut short (never the whole of a huge line). */
  readonly excerpt: string;
}

/** What {@link parsePrometheusText} found. */
export type PrometheusParse =
  | { readonly ok: true; readonly samples: readonly PrometheusSample[]; readonly types: ReadonlyMap<string, PrometheusType> }
  /** `problems` counts every bad line; `problem` is the first. */
  | { readonly ok: false; readonly problem: PrometheusSyntaxProblem; readonly problems: number };

/** The types a TYPE line may name. */
const TYPES: ReadonlySet<string> = new Set(["counter", "gauge", "histogram", "summary", "untyped"]);
/** A metric name and a label name where the scan stands (sticky), and a whole metric name. */
const METRIC_NAME = /[a-zA-Z_:][a-zA-Z0-9_:]*/y;
const LABEL_NAME = /[a-zA-Z_][a-zA-Z0-9_]*/y;
const METRIC_NAME_WHOLE = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
/** A decimal float as Go's ParseFloat reads it (prometheus_client writes exponents as `e+010`, which this takes). */
const DECIMAL = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;
/** A timestamp: integer milliseconds, within the safe integers. */
const TIMESTAMP = /^-?\d{1,16}$/;
/** Longest excerpt of a bad line kept in a problem. */
const EXCERPT = 80;

/** A line-shaped error inside the sample parser (never escapes this module). */
class LineError {
  constructor(readonly rule: string) {}
}

/**
 * Most lines a stepped parse reads between two turns of the event loop, and
 * it stops sooner once about PAGE_STEP_MS have passed: 2,048 lines were about 10
 * ms of a page of short distinct series, which a chat waited for at each of
 * its turns (a 3.9 MiB page of 23,293 ranks: chat p50 12-16 ms, 6-9 with the
 * 2 ms bound). An 8 MiB page of them, 531,000 lines, held the loop 2.1 s
 * parsed at once; a vLLM with 32 DP ranks behind one URL serves a page of
 * tens of thousands of lines each second.
 */
export const PAGE_STEP_LINES = 2048;

/** About the longest a stepped parse reads in one turn of the event loop, ms (as long as an engine batch's slice takes). */
const PAGE_STEP_MS = 2;
/** Lines read between two looks at the clock. */
const CLOCK_LINES = 64;

/** Reads one turn's share of `page`: `maxLines` lines, or fewer once about PAGE_STEP_MS have passed (the clock read every CLOCK_LINES lines). */
function stepForTurn(page: PrometheusPageParse, maxLines: number): void {
  const until = performance.now() + PAGE_STEP_MS;
  for (let n = 0; n < maxLines && !page.done; n += CLOCK_LINES) {
    page.step(Math.min(CLOCK_LINES, maxLines - n));
    if (performance.now() >= until) return;
  }
}

/** An exposition page parsed a step of lines at a time ({@link parsePrometheusText} takes it whole). */
export class PrometheusPageParse {
  /** The page, read a line at a time from `#at` (splitting 531,000 lines at once took 120-270 ms). */
  readonly #text: string;
  #at = 0;
  /** Lines read so far. */
  #lineNo = 0;
  readonly #samples: PrometheusSample[] = [];
  readonly #types = new Map<string, PrometheusType>();
  readonly #seen = new Set<string>();
  #first: PrometheusSyntaxProblem | null = null;
  #problems = 0;
  /** Which samples are kept, by metric name (the others are still read and checked). */
  readonly #keep: ((name: string) => boolean) | null;
  /** Where the samples kept go, if not into the result. */
  readonly #take: ((sample: PrometheusSample) => void) | null;

  /** A parse of `text` keeping every sample, or those whose name `keep` takes; handed to `take` as read, if given, instead of held. */
  constructor(text: string, keep: ((name: string) => boolean) | null = null, take: ((sample: PrometheusSample) => void) | null = null) {
    this.#keep = keep;
    this.#take = take;
    this.#text = text;
  }

  /** Whether every line has been read (a page's last newline ends its last line, it starts none). */
  get done(): boolean {
    return this.#at >= this.#text.length;
  }

  /** Reads up to `max` more lines; never throws, whatever they hold. */
  step(max = Infinity): void {
    const text = this.#text;
    for (let n = 0; n < max && this.#at < text.length; n++) {
      const newline = text.indexOf("\n", this.#at);
      const end = newline < 0 ? text.length : newline;
      const raw = text.slice(this.#at, end);
      this.#at = end + 1;
      this.#line(++this.#lineNo, raw);
    }
  }

  /** Every sample, or the first syntax problem with the count of bad lines (once done). */
  get result(): PrometheusParse {
    if (this.#first !== null) return { ok: false, problem: this.#first, problems: this.#problems };
    return { ok: true, samples: this.#samples, types: this.#types };
  }

  #fail(line: number, rule: string, raw: string): void {
    this.#problems++;
    this.#first ??= { line, rule, excerpt: raw.length > EXCERPT ? `${raw.slice(0, EXCERPT)}...` : raw };
  }

  /** Reads line `lineNo` (1-based), `text` without its newline. */
  #line(lineNo: number, text: string): void {
    // A proxy may have turned newlines into CRLF; the format's own lines never end with a carriage return.
    const raw = text.endsWith("\r") ? text.slice(0, -1) : text;
    const line = raw.replace(/^[ \t]+/, "");
    if (line === "") return;
    if (line.startsWith("#")) {
      const rule = metadataProblem(line, this.#types);
      if (rule !== null) this.#fail(lineNo, rule, raw);
      return;
    }
    let sample: PrometheusSample;
    try {
      sample = parseSample(line, lineNo);
    } catch (error) {
      if (!(error instanceof LineError)) throw error; // a bug here, not bad input
      this.#fail(lineNo, error.rule, raw);
      return;
    }
    // Prometheus refuses a page that repeats a series: which value would be the load?
    const key = seriesKey(sample);
    if (this.#seen.has(key)) {
      this.#fail(lineNo, "a series already given on an earlier line", raw);
      return;
    }
    this.#seen.add(key);
    if (this.#keep !== null && !this.#keep(sample.name)) return;
    if (this.#take === null) this.#samples.push(sample);
    else this.#take(sample);
  }
}

/**
 * Parses an exposition page at once. Returns every sample, or the first
 * syntax problem with the count of bad lines; never throws, whatever `text`
 * holds.
 */
export function parsePrometheusText(text: string): PrometheusParse {
  const page = new PrometheusPageParse(text);
  page.step();
  return page.result;
}

/** What a stepped parse keeps, and how much of it a turn reads. */
export interface SteppedParseOptions {
  /** Which samples are kept, by metric name (the others are read and checked, not held: 531,000 of them took 600 MiB). */
  readonly keep?: (name: string) => boolean;
  /** Where the kept go as they are read, instead of into the result. */
  readonly take?: (sample: PrometheusSample) => void;
  /** Most lines a turn reads (PAGE_STEP_LINES). */
  readonly stepLines?: number;
}

/**
 * Parses an exposition page a turn's share at a time (stepForTurn): `turn`
 * resolves on a later turn of the event loop, and may reject to stop the
 * parse (a scrape timed out or closed), which then rejects with it.
 */
export async function parsePrometheusTextStepped(text: string, turn: () => Promise<void>, options: SteppedParseOptions = {}): Promise<PrometheusParse> {
  const page = new PrometheusPageParse(text, options.keep ?? null, options.take ?? null);
  const lines = options.stepLines ?? PAGE_STEP_LINES;
  stepForTurn(page, lines);
  while (!page.done) {
    await turn();
    stepForTurn(page, lines);
  }
  return page.result;
}

/** Checks a `#` line; records a TYPE. Returns the rule broken, or null. */
function metadataProblem(line: string, types: Map<string, PrometheusType>): string | null {
  const parts = line.slice(1).replace(/^[ \t]+/, "").split(/[ \t]+/);
  const keyword = parts[0];
  if (keyword !== "HELP" && keyword !== "TYPE") return null; // a plain comment
  const name = parts[1] ?? "";
  if (!METRIC_NAME_WHOLE.test(name)) return `a metric name after # ${keyword}`;
  if (keyword === "HELP") return null;
  const type = parts[2] ?? "";
  if (!TYPES.has(type) || (parts.length > 3 && parts.slice(3).some((p) => p !== ""))) return "counter, gauge, histogram, summary or untyped after the TYPE line's name";
  if (types.has(name)) return `a second TYPE line for ${name}`;
  types.set(name, type as PrometheusType);
  return null;
}

/** Parses one sample line (leading blanks already skipped); throws LineError. */
function parseSample(line: string, lineNo: number): PrometheusSample {
  let i = 0;
  const skipBlanks = () => {
    while (line[i] === " " || line[i] === "\t") i++;
  };
  const match = (re: RegExp): string | null => {
    re.lastIndex = i;
    const m = re.exec(line);
    if (m === null) return null;
    i = re.lastIndex;
    return m[0];
  };
  const name = match(METRIC_NAME);
  if (name === null) throw new LineError("a metric name at the start of the line");
  const labels = new Map<string, string>();
  if (line[i] === "{") {
    i++;
    for (;;) {
      skipBlanks();
      if (line[i] === "}") {
        i++;
        break;
      }
      const label = match(LABEL_NAME);
      if (label === null) throw new LineError("a label name or } inside the braces");
      skipBlanks();
      if (line[i] !== "=") throw new LineError(`= after the label name ${label}`);
      i++;
      skipBlanks();
      if (line[i] !== '"') throw new LineError(`a quoted value for the label ${label}`);
      i++;
      let value = "";
      for (;;) {
        const c = line[i];
        if (c === undefined) throw new LineError(`a closing quote for the label ${label}`);
        i++;
        if (c === '"') break;
        if (c !== "\\") {
          value += c;
          continue;
        }
        const e = line[i];
        i++;
        if (e === "\\" || e === '"') value += e;
        else if (e === "n") value += "\n";
        else throw new LineError(`only \\\\, \\" and \\n as escapes in the label ${label}`);
      }
      if (labels.has(label)) throw new LineError(`the label ${label} once`);
      labels.set(label, value);
      skipBlanks();
      if (line[i] === ",") {
        i++;
        continue;
      }
      if (line[i] === "}") {
        i++;
        break;
      }
      throw new LineError(", or } after a label's value");
    }
  }
  if (line[i] !== " " && line[i] !== "\t") throw new LineError("a blank, then the value, after the series");
  const rest = line.slice(i).split(/[ \t]+/).filter((t) => t !== "");
  if (rest.length === 0) throw new LineError("a value after the series");
  if (rest.length > 2) throw new LineError("at most a value and a timestamp after the series");
  const value = parseFloatToken(rest[0]!);
  if (value === null) throw new LineError("a number, NaN, +Inf or -Inf as the value");
  let timestampMs: number | null = null;
  if (rest.length === 2) {
    if (!TIMESTAMP.test(rest[1]!)) throw new LineError("an integer timestamp (ms) after the value");
    timestampMs = Number(rest[1]);
  }
  return { name, labels, value, timestampMs, line: lineNo };
}

/** A Go-style float token as a number, or null when it is not one. */
export function parseFloatToken(token: string): number | null {
  if (DECIMAL.test(token)) return Number(token);
  const lower = token.toLowerCase();
  if (lower === "nan") return Number.NaN;
  if (lower === "+inf" || lower === "inf" || lower === "+infinity" || lower === "infinity") return Number.POSITIVE_INFINITY;
  if (lower === "-inf" || lower === "-infinity") return Number.NEGATIVE_INFINITY;
  return null;
}

/** A series' identity: its name and its labels in name order. */
function seriesKey(sample: PrometheusSample): string {
  const labels = [...sample.labels].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([sample.name, labels]);
}
