// One engine event batch made ready to apply: decoded (a ZeroMQ batch's
// msgpack with 64-bit integers as bigints, a polled answer's JSON with long
// integers as text), identified (its publication time and a digest of its
// bytes, part of its identity at every replica), measured against its
// upstream's per-batch limits and cut into slices (event-slicing.ts). The same
// work runs in the batch decoder's worker for a large batch and inline for a
// small one, so both give the same slices.

import { createHash } from "node:crypto";
import type { Decoder } from "@msgpack/msgpack";
import { msgpack } from "../common/optional-packages.js";
import { sliceKvEvents } from "adp-router";
import { maxBatchEvents, overLimits, SLICE_BLOCKS, type BatchLimits } from "./event-slicing.js";
import { parseJsonKeepingIntegers } from "../common/json-integers.js";
import { JsonShape, walkJson } from "../common/json-shape.js";

export { parseJsonKeepingIntegers };

/** How a batch is encoded: a ZeroMQ batch's msgpack, or a polled answer's JSON list of TensorRT-LLM events. */
export type BatchFormat = "msgpack" | "json";

/** A batch prepared: its slices and identity, or why it is not applied. */
export type PreparedBatch =
  | { readonly kind: "ok"; readonly time: string; readonly digest: string; readonly slices: readonly unknown[] }
  | { readonly kind: "unparseable" | "oversized"; readonly detail: string };

/** The most members a map (an event, a block) of a batch may have, in either encoding (an event has a handful). */
const MAX_EVENT_MEMBERS = 1 << 10;

/**
 * A msgpack decoder for event batches: 64-bit integers as bigints (block
 * hashes keep every bit), sizes bounded: no list longer than a batch may name
 * tokens or blocks (`maxItems`) is allocated, whatever its header declares.
 */
export function batchDecoder(maxItems = 1 << 24): Decoder {
  return new (msgpack().Decoder)({ useBigInt64: true, maxStrLength: 1 << 16, maxBinLength: 1 << 10, maxArrayLength: maxItems, maxMapLength: MAX_EVENT_MEMBERS, maxExtLength: 0 });
}

/**
 * A batch's publication time (`ts`, map or positional), part of its identity:
 * a restarted publisher numbers its batches from 0 again, at other times.
 */
function batchTime(batch: unknown): string {
  const ts = Array.isArray(batch) ? batch[0] : typeof batch === "object" && batch !== null ? (batch as Record<string, unknown>).ts : undefined;
  return typeof ts === "number" || typeof ts === "bigint" ? String(ts) : "";
}

/**
 * Blocks a run of a polled answer holds at most. TensorRT-LLM's JSON names
 * every token as an object of its own: 1,024 of its blocks (16 tokens) take
 * about 3 ms to parse and 5 ms to apply here, so a run holds a quarter of a
 * ZeroMQ slice.
 */
export const JSON_RUN_BLOCKS = SLICE_BLOCKS / 4;

/**
 * A run of a polled answer: whole events, or (`continues`) further pieces of
 * the one event that the run before ended with, cut because it holds more
 * blocks than a run may. The source checks each event's id; a piece after the
 * first carries none and follows its first piece.
 */
export interface EventRun {
  readonly events: unknown[];
  readonly continues: boolean;
}

/** A list of events in runs of at most `maxBlocks` blocks (an event that cannot be cut may hold more). */
function eventRuns(list: readonly unknown[], maxBlocks: number): EventRun[] {
  const runs: EventRun[] = [];
  let run: unknown[] = [];
  let blocks = 0;
  const flush = () => {
    if (run.length > 0) runs.push({ events: run, continues: false });
    run = [];
    blocks = 0;
  };
  for (const e of list) {
    // An event of no blocks is still work to apply: it counts as one (a run of 8 million zeros took 5 s).
    const size = Math.max(1, sliceKvEvents([e], Infinity).blocks);
    if (size > maxBlocks) {
      flush();
      const pieces = sliceKvEvents([e], maxBlocks).slices as unknown[][];
      pieces.forEach((events, k) => runs.push({ events, continues: k > 0 }));
      continue;
    }
    if (blocks + size > maxBlocks) flush();
    run.push(e);
    blocks += size;
  }
  flush();
  return runs;
}

/**
 * The deepest nesting of lists and maps an engine's batch may have. Their
 * formats need 8 at most (TensorRT-LLM's JSON: list, event, data, blocks,
 * block, tokens, token, its multimodal keys); a deeper batch is no engine's.
 * A slice crosses from the decoder's worker as a structured clone, read back
 * recursively on the main thread, whose stack is the smaller: a batch nested
 * 4,000 deep decoded in the worker threw there, which ended the stream.
 */
export const MAX_BATCH_DEPTH = 32;

/** A batch nested deeper than MAX_BATCH_DEPTH, refused (no engine's). */
const TOO_DEEP: PreparedBatch = Object.freeze({ kind: "unparseable", detail: `nested deeper than ${MAX_BATCH_DEPTH} lists and maps` });

/** Whether `value` nests lists and maps deeper than `max` (walked with a stack of its own: no recursion). */
function nestedDeeperThan(value: unknown, max: number): boolean {
  const stack: unknown[] = [value];
  const depths: number[] = [1];
  while (stack.length > 0) {
    const v = stack.pop();
    const depth = depths.pop()!;
    if (typeof v !== "object" || v === null) continue;
    if (depth > max) return true;
    const children = Array.isArray(v) ? v : Object.values(v);
    for (const c of children) {
      if (typeof c !== "object" || c === null) continue;
      stack.push(c);
      depths.push(depth + 1);
    }
  }
  return false;
}

/** The events `payload` holds (`format`), or why it holds none. */
function decodeBatch(payload: Uint8Array, format: BatchFormat, decoder: Decoder): { events: unknown } | { detail: string } {
  if (format === "msgpack") {
    try {
      return { events: decoder.decode(payload) };
    } catch (error) {
      return { detail: `not msgpack: ${(error as Error).message.slice(0, 120)}` };
    }
  }
  let list: unknown;
  try {
    list = parseJsonKeepingIntegers(new TextDecoder().decode(payload));
  } catch {
    list = undefined;
  }
  return Array.isArray(list) ? { events: list } : { detail: "not a JSON list of events" };
}

/**
 * Decodes, identifies, measures and cuts one batch's payload: a ZeroMQ batch
 * into slices of its own encoding, a polled answer into runs of events.
 */
export function prepareBatch(payload: Uint8Array, format: BatchFormat, decoder: Decoder, limits: BatchLimits): PreparedBatch {
  if (format === "json") {
    // Walked before it is parsed, as msgpack's decoder bounds what it allocates: no list longer than the batch may
    // name events, no deeper nesting than a batch has, whatever JSON.parse would have built on the way. In all, its
    // lists hold its events, its blocks' tokens and its blocks three times over (in a stored chain, in a removal, and
    // a short list of each such as mm_keys): more is no batch within its limits (8 lists of a million zeros pass the
    // bound on each list, and took 200 MB to parse).
    const list = maxBatchEvents(limits);
    const elements = list + 3 * limits.maxBatchBlocks + limits.maxBatchTokens;
    const shape = new JsonShape(MAX_BATCH_DEPTH, Infinity, Infinity, "the answer", { list, members: MAX_EVENT_MEMBERS, elements });
    walkJson(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength), shape);
    if (shape.bound === "depth") return TOO_DEEP;
    if (shape.problem !== null) return { kind: "oversized", detail: shape.problem };
  }
  const decoded = decodeBatch(payload, format, decoder);
  if ("detail" in decoded) return { kind: "unparseable", detail: decoded.detail };
  const events = decoded.events;
  // A polled answer's nesting was counted on its bytes (the same depth): only a ZeroMQ batch's is walked decoded.
  if (format === "msgpack" && nestedDeeperThan(events, MAX_BATCH_DEPTH)) return TOO_DEEP;
  const size = sliceKvEvents(events, Infinity);
  const refused = overLimits(size, limits);
  if (refused !== null) return { kind: "oversized", detail: refused };
  // A slice holds at most SLICE_BLOCKS blocks and as many events (a run: JSON_RUN_BLOCKS, an event at least one).
  const slices = format === "json" ? eventRuns(events as unknown[], JSON_RUN_BLOCKS) : size.blocks > SLICE_BLOCKS || size.events > SLICE_BLOCKS ? sliceKvEvents(events, SLICE_BLOCKS, SLICE_BLOCKS).slices : [events];
  return { kind: "ok", time: batchTime(events), digest: createHash("sha256").update(payload).digest("base64url").slice(0, 22), slices };
}
