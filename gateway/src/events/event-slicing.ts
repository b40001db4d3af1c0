// A decoded engine batch checked against its upstream's per-batch limits and
// handed to the routing state a slice at a time, one slice per turn of the
// event loop: a batch the limits accept never holds the loop for more than one
// slice's application (SLICE_BLOCKS blocks, about 2 ms here), so /health and
// requests are served between its slices. Each slice is its own update (and,
// replicated, its own entry of bounded size), named after its batch.

import { sliceKvEvents } from "adp-router";
import type { IndexUpdate } from "./index-update.js";

/**
 * Blocks applied per turn of the event loop. 1,024 blocks of 16 tokens apply
 * in about 2 ms on this 2-core machine (`npm run bench:kv-slices`); a
 * 65,536-block batch whole took 137 ms.
 */
export const SLICE_BLOCKS = 1024;

/** An upstream's per-batch limits (kv_events.max_batch_blocks and max_batch_tokens). */
export interface BatchLimits {
  readonly maxBatchBlocks: number;
  readonly maxBatchTokens: number;
}

/** Why a batch was refused, or null when it may be applied. */
export function overLimits(size: { readonly blocks: number; readonly tokens: number }, limits: BatchLimits): string | null {
  if (size.blocks > limits.maxBatchBlocks) return `${size.blocks} blocks, over kv_events.max_batch_blocks (${limits.maxBatchBlocks})`;
  if (size.tokens > limits.maxBatchTokens) return `${size.tokens} tokens, over kv_events.max_batch_tokens (${limits.maxBatchTokens})`;
  return null;
}

/**
 * A later turn of the event loop, after the I/O pending now has been served.
 * Two immediates: one set while the loop polls I/O (a message from the worker,
 * a socket's data) runs before the loop polls again, so two slices would be
 * applied back to back with no request served between them (measured: 18 ms
 * without a timer firing); the second runs after the next poll whatever phase
 * the first was set in.
 */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(() => setImmediate(resolve)));

/**
 * Emits `events` (of DP rank `dpRank`, batch `id`) in slices, the first now
 * and each later one on a later turn of the event loop, unless `stopped()`
 * says the source closed meanwhile. Returns the reason it emitted nothing when
 * the batch is over `limits`, else null.
 */
export async function emitInSlices(events: unknown, dpRank: number | undefined, id: string | undefined, limits: BatchLimits, emit: (update: IndexUpdate) => void, stopped: () => boolean): Promise<string | null> {
  const size = sliceKvEvents(events, Infinity);
  const refused = overLimits(size, limits);
  if (refused !== null) return refused;
  if (size.blocks > SLICE_BLOCKS) {
    // Cutting a large batch (checking its hashes and tokens, copying its slices) takes a turn of its own, after its decoding.
    await nextTurn();
    if (stopped()) return null;
  }
  const cut = size.blocks > SLICE_BLOCKS ? sliceKvEvents(events, SLICE_BLOCKS) : { slices: [events] };
  for (let k = 0; k < cut.slices.length; k++) {
    if (k > 0) {
      await nextTurn();
      if (stopped()) return null;
    }
    const name = id === undefined ? undefined : k === 0 ? id : `${id}#${k}`;
    emit({ kind: "kv-events", events: cut.slices[k], ...(dpRank === undefined ? {} : { dpRank }), ...(name === undefined ? {} : { id: name }) });
  }
  return null;
}
