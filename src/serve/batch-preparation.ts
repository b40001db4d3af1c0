// One ZeroMQ event batch made ready to apply: decoded (msgpack, 64-bit
// integers as bigints), identified (its publication time and a digest of its
// bytes, part of its identity at every replica), measured against its
// upstream's per-batch limits and cut into slices (event-slicing.ts). The same
// work runs in the batch decoder's worker for a large batch and inline for a
// small one, so both give the same slices.

import { createHash } from "node:crypto";
import { Decoder } from "@msgpack/msgpack";
import { sliceKvEvents } from "../kv-event-slices.js";
import { overLimits, SLICE_BLOCKS, type BatchLimits } from "./event-slicing.js";

/** A batch prepared: its slices and identity, or why it is not applied. */
export type PreparedBatch =
  | { readonly kind: "ok"; readonly time: string; readonly digest: string; readonly slices: readonly unknown[] }
  | { readonly kind: "unparseable" | "oversized"; readonly detail: string };

/**
 * A msgpack decoder for event batches: 64-bit integers as bigints (block
 * hashes keep every bit), sizes bounded: no list longer than a batch may name
 * tokens or blocks (`maxItems`) is allocated, whatever its header declares.
 */
export function batchDecoder(maxItems = 1 << 24): Decoder {
  return new Decoder({ useBigInt64: true, maxStrLength: 1 << 16, maxBinLength: 1 << 10, maxArrayLength: maxItems, maxMapLength: 1 << 10, maxExtLength: 0 });
}

/**
 * A batch's publication time (`ts`, map or positional), part of its identity:
 * a restarted publisher numbers its batches from 0 again, at other times.
 */
function batchTime(batch: unknown): string {
  const ts = Array.isArray(batch) ? batch[0] : typeof batch === "object" && batch !== null ? (batch as Record<string, unknown>).ts : undefined;
  return typeof ts === "number" || typeof ts === "bigint" ? String(ts) : "";
}

/** Decodes, identifies, measures and cuts one batch's payload. */
export function prepareBatch(payload: Uint8Array, decoder: Decoder, limits: BatchLimits): PreparedBatch {
  let events: unknown;
  try {
    events = decoder.decode(payload);
  } catch (error) {
    return { kind: "unparseable", detail: `not msgpack: ${(error as Error).message.slice(0, 120)}` };
  }
  const size = sliceKvEvents(events, Infinity);
  const refused = overLimits(size, limits);
  if (refused !== null) return { kind: "oversized", detail: refused };
  const slices = size.blocks > SLICE_BLOCKS ? sliceKvEvents(events, SLICE_BLOCKS).slices : [events];
  return { kind: "ok", time: batchTime(events), digest: createHash("sha256").update(payload).digest("base64url").slice(0, 22), slices };
}
