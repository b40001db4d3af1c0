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

/** Renders a received value for a message: short, unambiguous, never huge. */
export function describeValue(value: unknown): string {
  if (typeof value === "string") {
    const shown = value.length > 60 ? `${value.slice(0, 57)}...` : value;
    return `${JSON.stringify(shown)} (string${value.length > 60 ? ` of length ${value.length}` : ""})`;
  }
  if (typeof value === "bigint") return `${value}n (bigint)`;
  if (typeof value === "number") return `${Object.is(value, -0) ? "-0" : String(value)} (number)`;
  if (value === null) return "null";
  if (value === undefined) return "undefined";
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (ArrayBuffer.isView(value)) return `a ${value.constructor.name}`;
  if (typeof value === "object") return "an object";
  return `${String(value)} (${typeof value})`;
}

/** A heading and one line per issue. */
function formatIssues(heading: string, issues: readonly InputIssue[]): string {
  return [heading, ...issues.map((i) => `  ${i.field}: ${i.rule}, got ${describeValue(i.received)}`)].join("\n");
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
  constructor(field: string, rule: string, received: unknown) {
    super(`${field}: ${rule}, got ${describeValue(received)}`);
    this.name = "AdpInputError";
    this.field = field;
    this.rule = rule;
    this.received = received;
  }
}
