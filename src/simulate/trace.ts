// Workload traces as the simulator reads them: JSON lines, one request a line.
//
// Mooncake shape (FAST'25 traces): {"timestamp": ms, "input_length", "output_length",
//   "hash_ids": [one id per 512-token block, the last may be partial]}.
// Native shape: {"arrival_ms", "input_length", "output_length", "hash_ids"? | "tokens"?,
//   "conversation_id"?, "block_tokens"?} — `tokens` are token ids (the simulator
//   then derives block keys itself), `block_tokens` the block size of `hash_ids`.
// Both are read by one parser; a line that fits neither is an error naming the
// file and the line.

import { optimumHitRatioOfPaths, pathsOf } from "./engine.js";

/** One request of a workload. */
export interface TraceRequest {
  /** Arrival time, ms from the start of the trace. */
  readonly arrivalMs: number;
  /** Prompt tokens. */
  readonly inputLength: number;
  /** Tokens to generate. */
  readonly outputLength: number;
  /** Block keys of the prompt, one per block (the last may be partial). */
  readonly blocks: readonly number[];
  /** Conversation id, when the workload has one. */
  readonly conversationId: string | null;
}

/** A parsed workload. */
export interface Trace {
  /** A name for reports (the file name, or the synthetic workload's). */
  readonly name: string;
  /** Tokens per block key. */
  readonly blockTokens: number;
  /** Requests in arrival order. */
  readonly requests: readonly TraceRequest[];
}

/** A trace line that cannot be read; names the file and the line. */
export class TraceError extends Error {
  readonly code = "ERR_ADP_TRACE";
  constructor(
    readonly file: string,
    readonly line: number,
    reason: string,
  ) {
    super(`${file}:${line}: ${reason}`);
    this.name = "TraceError";
  }
}

/** Whether `v` is a non-negative safe integer. */
const isCount = (v: unknown): v is number => typeof v === "number" && Number.isSafeInteger(v) && v >= 0;

/** Block keys for a prompt given as token ids: a chained 53-bit hash per full or partial block. */
function blocksFromTokens(tokens: readonly number[], blockTokens: number): number[] {
  const keys: number[] = [];
  let a = 0x2545f491;
  let b = 0x4f6cdd1d;
  for (let start = 0; start < tokens.length; start += blockTokens) {
    for (let i = start; i < Math.min(start + blockTokens, tokens.length); i++) {
      a = Math.imul(a ^ tokens[i]!, 0x9e3779b1);
      a ^= a >>> 15;
      b = Math.imul(b ^ tokens[i]!, 0x85ebca77);
      b ^= b >>> 13;
    }
    keys.push((a >>> 0) * 2097152 + ((b >>> 0) & 0x1fffff));
  }
  return keys;
}

/**
 * Parses a JSON-lines trace. Throws {@link TraceError} at the first bad line.
 * @param blockTokens block size of `hash_ids` (Mooncake: 512) and of derived keys
 */
export function parseTrace(text: string, file: string, blockTokens = 512): Trace {
  const requests: TraceRequest[] = [];
  const lines = text.split("\n");
  let last = -Infinity;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (line === "") continue;
    const fail = (reason: string): never => {
      throw new TraceError(file, i + 1, reason);
    };
    let row: Record<string, unknown>;
    try {
      row = JSON.parse(line) as Record<string, unknown>;
    } catch (error) {
      return fail(`not JSON (${(error as Error).message})`);
    }
    if (typeof row !== "object" || row === null || Array.isArray(row)) fail("a request must be a JSON object");
    const arrival = row.arrival_ms ?? row.timestamp;
    if (typeof arrival !== "number" || !Number.isFinite(arrival) || arrival < 0) fail('"timestamp" (or "arrival_ms") must be a non-negative number of ms');
    if ((arrival as number) < last) fail(`arrivals must not go back in time (${arrival} after ${last})`);
    last = arrival as number;
    if (!isCount(row.input_length) || row.input_length === 0) fail('"input_length" must be a positive integer');
    if (!isCount(row.output_length)) fail('"output_length" must be a non-negative integer');
    const inputLength = row.input_length as number;
    let blocks: number[];
    if (Array.isArray(row.tokens)) {
      if (!row.tokens.every((t) => typeof t === "number" && t >>> 0 === t)) fail('"tokens" must be token ids in [0, 2^32)');
      if (row.tokens.length !== inputLength) fail(`"tokens" holds ${row.tokens.length} ids, "input_length" says ${inputLength}`);
      blocks = blocksFromTokens(row.tokens as number[], blockTokens);
    } else if (Array.isArray(row.hash_ids)) {
      if (!row.hash_ids.every(isCount)) fail('"hash_ids" must be non-negative integers');
      const expected = Math.ceil(inputLength / blockTokens);
      if (row.hash_ids.length !== expected) fail(`"hash_ids" holds ${row.hash_ids.length} blocks, ceil(input_length / ${blockTokens}) = ${expected}`);
      blocks = row.hash_ids as number[];
    } else {
      return fail('a request needs "hash_ids" (block keys) or "tokens"');
    }
    const conv = row.conversation_id;
    if (conv !== undefined && conv !== null && (typeof conv !== "string" || conv === "")) fail('"conversation_id" must be a non-empty string');
    requests.push({ arrivalMs: arrival as number, inputLength, outputLength: row.output_length as number, blocks, conversationId: (conv as string | undefined) ?? null });
  }
  if (requests.length === 0) throw new TraceError(file, lines.length, "the trace holds no requests");
  return { name: file, blockTokens, requests };
}

/** The best possible prefix-block hit ratio: one infinite cache that has seen every earlier prompt. */
export function optimumHitRatio(trace: Trace): number {
  return optimumHitRatioOfPaths(pathsOf(trace.requests));
}

/**
 * `trace` with the requests that share an arrival time spread evenly over the
 * time until the next distinct arrival time (the last group over the median gap),
 * in their order. For traces whose clock ticks coarsely: the bundled Mooncake
 * trace's 12,031 requests fall on 1,180 ticks 3 s apart, about ten a tick, which
 * a replay takes as bursts of simultaneous requests although they arrived over
 * the tick. Deterministic: no randomness, the same trace gives the same arrivals.
 * A trace with one arrival time has no gap to spread over and is returned with
 * its arrivals as they were.
 */
export function spreadArrivals(trace: Trace): Trace {
  const given = trace.requests;
  // A trace is in arrival order, so a tick is a run of equal times: where each run starts.
  const ticks: number[] = [];
  for (let i = 0; i < given.length; i++) if (i === 0 || given[i]!.arrivalMs !== given[i - 1]!.arrivalMs) ticks.push(i);
  const gaps = ticks.slice(1).map((start, k) => given[start]!.arrivalMs - given[ticks[k]!]!.arrivalMs).sort((a, b) => a - b);
  const lastGap = gaps.length === 0 ? 0 : gaps[Math.floor(gaps.length / 2)]!;
  const requests: TraceRequest[] = [];
  ticks.forEach((start, k) => {
    const end = k + 1 < ticks.length ? ticks[k + 1]! : given.length;
    const t = given[start]!.arrivalMs;
    const span = (end < given.length ? given[end]!.arrivalMs : t + lastGap) - t;
    for (let i = start; i < end; i++) requests.push({ ...given[i]!, arrivalMs: t + (span * (i - start)) / (end - start) });
  });
  return { ...trace, name: `${trace.name} (arrivals spread over their tick)`, requests };
}
