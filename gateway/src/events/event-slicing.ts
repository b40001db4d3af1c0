// How a decoded engine batch is held to its upstream's per-batch limits and
// handed to the routing state a slice at a time, one slice per turn of the
// event loop (batch-preparation.ts cuts, batch-decoder.ts paces): a batch the
// limits accept never holds the loop for more than one slice's application
// (SLICE_BLOCKS blocks, about 2 ms here), so /health and requests are served
// between its slices. Each slice is its own update (and, replicated, its own
// entry of bounded size), named after its batch.

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

/** The longest list of events a batch within `limits` may hold: the larger of its two limits (see overLimits). */
export const maxBatchEvents = (limits: BatchLimits): number => Math.max(limits.maxBatchBlocks, limits.maxBatchTokens);

/**
 * Why a batch was refused, or null when it may be applied. Its list of
 * events is bounded as a ZeroMQ batch's decoding bounds any list: no longer
 * than the larger of the two limits (a polled answer of 8.4 million zeros in
 * 16 MiB took the process to 1.9 GB). Events that name no block are not
 * bounded by the blocks: TensorRT-LLM's `updated` (one a block whose priority
 * or level changed) can outnumber them; each slice holds at most SLICE_BLOCKS
 * of them instead (batch-preparation.ts).
 */
export function overLimits(size: { readonly blocks: number; readonly tokens: number; readonly events: number }, limits: BatchLimits): string | null {
  if (size.blocks > limits.maxBatchBlocks) return `${size.blocks} blocks, over kv_events.max_batch_blocks (${limits.maxBatchBlocks})`;
  const maxEvents = maxBatchEvents(limits);
  if (size.events > maxEvents) return `${size.events} events, over the longest list a batch may hold (${maxEvents}: kv_events.max_batch_blocks or max_batch_tokens, the larger)`;
  if (size.tokens > limits.maxBatchTokens) return `${size.tokens} tokens, over kv_events.max_batch_tokens (${limits.maxBatchTokens})`;
  return null;
}

/** A later turn of the event loop (common/next-turn.ts): each slice is applied on its own. */
export { nextTurn } from "../common/next-turn.js";
