// Large engine event batches are prepared off the event loop: decoding one
// MiB of msgpack takes 7 to 20 ms here (`npm run bench:kv-slices`), one MiB
// of TensorRT-LLM's JSON about 11 ms, longer than any turn of the gateway's
// loop may. One worker thread, shared by every
// event source of the process while any runs, decodes, measures and cuts each
// batch over INLINE_BYTES and hands it back as a port holding a message per
// slice (each read and applied on a turn of the loop of its own); smaller ones
// (every engine step's usual batch) are prepared inline, where a round trip
// would cost more than the work. A worker that dies (a batch too large for
// its heap) fails the batches it had not answered, counted unparseable, and the
// next batch starts a new one.

import { receiveMessageOnPort, Worker, type MessagePort } from "node:worker_threads";
import { batchDecoder, prepareBatch, type BatchFormat, type EventRun, type PreparedBatch } from "./batch-preparation.js";
import { builtScript } from "../common/built-script.js";
import { nextTurn, type BatchLimits } from "./event-slicing.js";

/** Batches at most this large are prepared inline (64 KiB decode in well under a millisecond). */
export const INLINE_BYTES = 64 << 10;
/** The worker's heap: a batch whose decoding needs more stops it (and is counted unparseable). */
const WORKER_HEAP_MB = 1024;

/** What the event loop asks of the worker. */
export interface BatchRequest {
  readonly id: number;
  readonly payload: Uint8Array;
  readonly format: BatchFormat;
  /** The longest list the decoder may allocate (the upstream's largest batch limit). */
  readonly maxItems: number;
  readonly limits: BatchLimits;
}

/** What the worker answers: a refusal, or a head carrying a port that holds the batch's slices, a message each. */
export type BatchReply =
  | { readonly id: number; readonly kind: "unparseable" | "oversized"; readonly detail: string }
  | { readonly id: number; readonly kind: "head"; readonly time: string; readonly digest: string; readonly slices: number; readonly port: MessagePort };

/** A batch prepared, its slices read a turn of the loop each. */
export type ArrivingBatch =
  | { readonly kind: "ok"; readonly time: string; readonly digest: string; readonly slices: AsyncIterable<unknown> }
  | { readonly kind: "unparseable" | "oversized"; readonly detail: string };

/** `slices`, each after the one before on a later turn of the event loop. */
async function* turnByTurn(slices: readonly unknown[]): AsyncGenerator<unknown> {
  for (let k = 0; k < slices.length; k++) {
    if (k > 0) await nextTurn();
    yield slices[k];
  }
}

/**
 * The `count` slices queued on `port`, one taken (and deserialized) a turn.
 * Why a port read by hand: Node dispatches every message already queued on a
 * port in one callback, so slices posted as messages of the worker's own would
 * all be deserialized in one turn (16 slices of 1,024 blocks: 8 to 15 ms
 * here); the worker queues them all before it sends the head, so each is
 * there when asked for. A polled answer's runs come as JSON text.
 */
async function* fromPort(port: MessagePort, count: number, format: BatchFormat): AsyncGenerator<unknown> {
  try {
    for (let k = 0; k < count; k++) {
      if (k > 0) await nextTurn();
      const message = receiveMessageOnPort(port);
      if (message === undefined) throw new Error(`the batch decoder's worker sent ${k} of ${count} slices`);
      if (format === "msgpack") yield message.message;
      else {
        const run = message.message as { continues: boolean; events: string };
        yield { continues: run.continues, events: JSON.parse(run.events) as unknown[] } satisfies EventRun;
      }
    }
  } finally {
    port.close();
  }
}

/** One batch in the worker: the promise of its head. */
class Pending {
  readonly head: Promise<ArrivingBatch>;
  #settle!: (batch: ArrivingBatch) => void;

  constructor(readonly format: BatchFormat) {
    this.head = new Promise((resolve) => (this.#settle = resolve));
  }

  /** Takes the worker's reply for this batch. */
  take(reply: BatchReply): void {
    if (reply.kind === "head") this.#settle({ kind: "ok", time: reply.time, digest: reply.digest, slices: fromPort(reply.port, reply.slices, this.format) });
    else this.#settle({ kind: reply.kind, detail: reply.detail });
  }

  /** The worker stopped before it answered: the batch is unparseable. */
  fail(error: Error): void {
    this.#settle({ kind: "unparseable", detail: `the batch decoder's worker stopped: ${error.message.slice(0, 120)}` });
  }
}

/** The process's batch decoder: prepares large batches in its worker, small ones inline. */
export class BatchDecoder {
  static #shared: BatchDecoder | null = null;
  static #users = 0;
  #worker: Worker | null = null;
  readonly #pending = new Map<number, Pending>();
  #next = 0;
  /** Inline decoders by their item bound. */
  readonly #inline = new Map<number, ReturnType<typeof batchDecoder>>();

  /** The shared decoder, for one more user (an event source); give it back with `release`. */
  static acquire(): BatchDecoder {
    BatchDecoder.#users++;
    return (BatchDecoder.#shared ??= new BatchDecoder());
  }

  /** One user less: the worker stops with the last. */
  static release(): void {
    if (--BatchDecoder.#users > 0 || BatchDecoder.#shared === null) return;
    BatchDecoder.#shared.#stop();
    BatchDecoder.#shared = null;
  }

  /**
   * Prepares `payload`, encoded as `format` (see batch-preparation.ts): inline
   * when small, else in the worker, to which an `owned` payload (the caller
   * never reads it again) is moved rather than copied.
   */
  prepare(payload: Uint8Array, format: BatchFormat, maxItems: number, limits: BatchLimits, owned = false): Promise<ArrivingBatch> {
    if (payload.length <= INLINE_BYTES) return Promise.resolve(this.#prepareInline(payload, format, maxItems, limits));
    const id = this.#next++;
    const pending = new Pending(format);
    this.#pending.set(id, pending);
    // Moved to the worker: the payload's own memory when the caller gives it away (a polled answer read into a
    // buffer of its own), else a copy (a ZeroMQ message's memory is the socket's; copying 16 MB takes 9 ms here).
    const copy = owned && payload.byteOffset === 0 && payload.byteLength === payload.buffer.byteLength ? payload : new Uint8Array(payload);
    this.#start().postMessage({ id, payload: copy, format, maxItems, limits } satisfies BatchRequest, [copy.buffer as ArrayBuffer]);
    return pending.head;
  }

  /** A small batch prepared here, its slices already at hand. */
  #prepareInline(payload: Uint8Array, format: BatchFormat, maxItems: number, limits: BatchLimits): ArrivingBatch {
    let decoder = this.#inline.get(maxItems);
    if (decoder === undefined) this.#inline.set(maxItems, (decoder = batchDecoder(maxItems)));
    const prepared: PreparedBatch = prepareBatch(payload, format, decoder, limits);
    if (prepared.kind !== "ok") return prepared;
    return { ...prepared, slices: turnByTurn(prepared.slices) };
  }

  /** The worker, started on first use (again after one stopped). */
  #start(): Worker {
    if (this.#worker !== null) return this.#worker;
    const worker = new Worker(builtScript("batch-decode-worker.js"), { resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB } });
    worker.unref();
    worker.on("message", (reply: BatchReply) => {
      this.#pending.get(reply.id)?.take(reply);
      this.#pending.delete(reply.id);
    });
    const lost = (error: Error) => {
      if (this.#worker !== worker) return;
      this.#worker = null;
      for (const p of [...this.#pending.values()]) p.fail(error);
      this.#pending.clear();
    };
    worker.on("error", lost);
    worker.on("exit", (code) => lost(new Error(`exit code ${code}`)));
    this.#worker = worker;
    return worker;
  }

  /** Stops the worker (its batches under way end). */
  #stop(): void {
    const worker = this.#worker;
    if (worker === null) return;
    void worker.terminate();
  }
}
