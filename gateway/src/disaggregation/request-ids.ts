// The 64-bit ids a disaggregated request carries to both of its servers
// (TensorRT-LLM's disagg_request_id, SGLang's bootstrap_room), made as
// TensorRT-LLM's `get_global_disagg_request_id` makes them
// (tensorrt_llm/llmapi/disagg_utils.py): a snowflake of
//   0 (1) | milliseconds (39) | node id (8) | process id (6) | counter (10)
// rotated into [2^40, 2^63 - 1), TensorRT-LLM's global-id range (below it are
// an engine's local ids). Gateways with distinct node ids in front of the
// same engines never make the same id; one gateway makes at most 1,024 a
// millisecond before its counter wraps (as TensorRT-LLM's does). The ids are
// names, not decisions: no routing depends on them.

const NODE_BITS = 8n;
const PROCESS_BITS = 6n;
const COUNTER_BITS = 10n;
const TIMESTAMP_MASK = (1n << 39n) - 1n;
const COUNTER_MASK = (1n << COUNTER_BITS) - 1n;
/** TensorRT-LLM's MIN_GLOBAL_ID. */
export const MIN_GLOBAL_ID = 1n << 40n;
/** The largest id (2^63 - 1, a positive int64). */
export const MAX_INT64 = (1n << 63n) - 1n;

/** Makes one gateway's request ids. */
export class RequestIds {
  readonly #node: bigint;
  readonly #process: bigint;
  readonly #now: () => number;
  #counter = 0n;

  /** `node` in [0, 255], `process` in [0, 63]; `now` gives milliseconds (injectable for tests). */
  constructor(node: number, process = 0, now: () => number = () => Math.floor(performance.timeOrigin + performance.now())) {
    if (!Number.isInteger(node) || node < 0 || node > 255) throw new RangeError(`node must be an integer in [0, 255], got ${node}`);
    if (!Number.isInteger(process) || process < 0 || process > 63) throw new RangeError(`process must be an integer in [0, 63], got ${process}`);
    this.#node = BigInt(node);
    this.#process = BigInt(process);
    this.#now = now;
  }

  /** The next id, in [2^40, 2^63 - 1). */
  next(): bigint {
    const ms = BigInt(Math.max(0, Math.floor(this.#now()))) & TIMESTAMP_MASK;
    const counter = this.#counter & COUNTER_MASK;
    this.#counter++;
    const id = (ms << (NODE_BITS + PROCESS_BITS + COUNTER_BITS)) | (this.#node << (PROCESS_BITS + COUNTER_BITS)) | (this.#process << COUNTER_BITS) | counter;
    return (id % (MAX_INT64 - MIN_GLOBAL_ID)) + MIN_GLOBAL_ID;
  }
}
