// The package's typed errors. Each names the field, the rule it broke and the
// value received, and carries a stable `code` so checks survive duplicated
// copies of the package where `instanceof` fails.

/** One problem found in an input: where, which rule, what was received. */
export interface InputIssue {
  /** The field, as a path: `kv_cache_routing_max_sessions`, `requests[3].id`. */
  readonly field: string;
  /** The rule it broke, phrased to complete "must …" or as a statement. */
  readonly rule: string;
  /** The value received (or a short description of it). */
  readonly received: unknown;
}

/** Longest excerpt of a received string shown in a message. */
const EXCERPT = 60;

/** `text` cut to a bounded excerpt (with its length when cut): what a message may quote of a received string. */
export function excerpt(text: string, max = EXCERPT): string {
  return text.length > max ? `${text.slice(0, max - 3)}... (${text.length} characters)` : text;
}

/**
 * Renders a received value for a message: short, unambiguous, never huge, and
 * never throwing (it reads no property a getter or Proxy could intercept
 * beyond an array's length, and that read is guarded).
 */
export function describeValue(value: unknown): string {
  try {
    if (typeof value === "string") {
      const shown = value.length > EXCERPT ? `${value.slice(0, EXCERPT - 3)}...` : value;
      return `${JSON.stringify(shown)} (string${value.length > EXCERPT ? ` of length ${value.length}` : ""})`;
    }
    if (typeof value === "bigint") return `${excerpt(value.toString())}n (bigint)`;
    if (typeof value === "number") return `${Object.is(value, -0) ? "-0" : String(value)} (number)`;
    if (value === null) return "null";
    if (value === undefined) return "undefined";
    if (typeof value === "symbol") return `${excerpt(value.toString())} (symbol)`;
    if (typeof value === "function") return "a function";
    if (typeof value === "boolean") return `${value} (boolean)`;
    if (Array.isArray(value)) return `an array of length ${value.length}`;
    if (ArrayBuffer.isView(value)) return `a ${Object.prototype.toString.call(value).slice(8, -1)}`;
    if (value instanceof Error) return `${excerpt(String(value.name))}: ${excerpt(String(value.message), 200)}`;
    return "an object";
  } catch {
    return "a value that could not be described";
  }
}

/** A heading and one line per issue. */
function formatIssues(heading: string, issues: readonly InputIssue[]): string {
  return [heading, ...issues.map((i) => `  ${excerpt(i.field, 200)}: ${i.rule}, got ${describeValue(i.received)}`)].join("\n");
}

/** An `attention_dp_config` that TensorRT-LLM would reject; lists every problem found. */
export class AttentionDpConfigError extends TypeError {
  /** Stable error code. */
  readonly code = "ERR_ADP_CONFIG";
  /** Every problem found, in field order. */
  readonly issues: readonly InputIssue[];
  constructor(issues: readonly InputIssue[]) {
    super(formatIssues(`Invalid attention_dp_config (${issues.length} problem${issues.length === 1 ? "" : "s"}):`, issues));
    this.name = "AttentionDpConfigError";
    this.issues = issues;
  }
}

/**
 * A call whose arguments are wrong (a batch, a rank, an option). Thrown before
 * any state changes: the router or index is exactly as it was before the call.
 */
export class AdpInputError extends TypeError {
  /** Stable error code. */
  readonly code = "ERR_ADP_INPUT";
  /** The problem found first. */
  readonly field: string;
  /** The rule it broke. */
  readonly rule: string;
  /** The value received. */
  readonly received: unknown;
  constructor(field: string, rule: string, received: unknown, options?: { cause?: unknown }) {
    super(`${excerpt(field, 200)}: ${rule}, got ${describeValue(received)}`, options);
    this.name = "AdpInputError";
    this.field = field;
    this.rule = rule;
    this.received = received;
  }
}

/**
 * An `onDecision` hook threw while a batch was reported. The batch had already
 * been routed and committed (the router's state includes it): take the result
 * from `result` and do not route the batch again. Thrown by `route()` only when
 * no `onHookError` option is set; every record was still delivered.
 */
export class AdpHookError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_HOOK";
  /** The committed result of the batch. */
  readonly result: unknown;
  constructor(cause: unknown, result: unknown) {
    super(`onDecision threw after the batch was committed (the result is on error.result; do not route the batch again): ${cause instanceof Error ? excerpt(cause.message, 200) : describeValue(cause)}`, { cause });
    this.name = "AdpHookError";
    this.result = result;
  }
}

/**
 * The wasm core could not grow its memory in the middle of a change: the host
 * refused (a browser tab's limit, an address-space limit), below the index's
 * budget. The change was cut short, so the index is retired rather than read
 * in a half-changed state: every later call on it, and every `route()` of a
 * router that learns into it, throws this error again. A snapshot taken
 * before restores it, in a process with memory to spare.
 */
export class AdpMemoryError extends RangeError {
  /** Stable error code. */
  readonly code = "ERR_ADP_MEMORY";
  /**
   * The committed result of the batch when `route()` had routed it before its
   * learning failed (do not route the batch again), else undefined.
   */
  readonly result: unknown;
  constructor(cause: unknown, result?: unknown) {
    super(`the prefix index's wasm memory could not grow (the host refused); an index whose change this cut short is retired: restore it from a snapshot or create a new one${result === undefined ? "" : " (the batch was routed before its learning failed: the result is on error.result; do not route it again)"}`, { cause });
    this.name = "AdpMemoryError";
    this.result = result;
  }
}

/**
 * `error` as a typed error: a typed error as is; anything else, thrown while a
 * caller's value was read (a getter, a Proxy trap, a revoked Proxy), becomes
 * AdpInputError naming `field`, with the original as its `cause`.
 */
export function asInputError(error: unknown, field: string): Error {
  if (error instanceof AdpInputError || error instanceof AttentionDpConfigError || error instanceof AdpMemoryError) return error;
  return new AdpInputError(field, "threw while it was read (a getter or Proxy trap of the caller's value)", error, { cause: error });
}

/** Runs `read`, which only reads a caller's value; what that value throws becomes AdpInputError naming `field`. */
export function readInput<T>(field: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    throw asInputError(error, field);
  }
}

/**
 * A caller's options object read once into a plain object of its own keys,
 * each of which must be in `keys` (`call` names the function, `what` one of
 * its options in messages). Nothing reads the caller's object afterwards.
 */
export function readOptions(options: unknown, call: string, keys: ReadonlySet<string>, what: string): Record<string, unknown> {
  if (typeof options !== "object" || options === null) throw new AdpInputError(call, "takes an options object", options);
  return readInput(call, () => {
    const source = options as Record<string, unknown>;
    const copy: Record<string, unknown> = {};
    for (const key of Object.keys(source)) {
      if (!keys.has(key)) throw new AdpInputError(excerpt(key), `is not a ${what} (expected ${[...keys].join(", ")})`, source[key]);
      copy[key] = source[key]; // never "__proto__": only listed keys pass
    }
    return copy;
  });
}
