// Large ZeroMQ event batches are prepared off the event loop: decoding one
// MiB of msgpack takes 7 to 20 ms here (`npm run bench:kv-slices`), longer
// than any turn of the gateway's loop may. One worker thread, shared by every
// event source of the process while any runs, decodes, measures and cuts each
// batch over INLINE_BYTES and posts it back a slice per message (applied a
// turn of the loop each); smaller ones
// (every engine step's usual batch) are prepared inline, where a round trip
// would cost more than the work. A worker that dies (a batch too large for
// its heap) fails the batches it held, which are counted unparseable, and the
// next batch starts a new one.

import { Worker } from "node:worker_threads";
import { batchDecoder, prepareBatch, type PreparedBatch } from "./batch-preparation.js";
import { builtScript } from "./built-script.js";
import { nextTurn, type BatchLimits } from "./event-slicing.js";

/** Batches at most this large are prepared inline (64 KiB decode in well under a millisecond). */
export const INLINE_BYTES = 64 << 10;
/** The worker's heap: a batch whose decoding needs more stops it (and is counted unparseable). */
const WORKER_HEAP_MB = 1024;

/** What the event loop asks of the worker. */
export interface BatchRequest {
  readonly id: number;
  readonly payload: Uint8Array;
  /** The longest list the decoder may allocate (the upstream's largest batch limit). */
  readonly maxItems: number;
  readonly limits: BatchLimits;
}

/** What the worker answers: a refusal, or a head followed by its slices, one message each. */
export type BatchReply =
  | { readonly id: number; readonly kind: "unparseable" | "oversized"; readonly detail: string }
  | { readonly id: number; readonly kind: "head"; readonly time: string; readonly digest: string; readonly slices: number }
  | { readonly id: number; readonly kind: "slice"; readonly k: number; readonly slice: unknown };

/** A batch prepared, its slices arriving a message (a turn of the loop) each. */
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

/** One batch in the worker: its head's promise, then its slices as they arrive. */
class Pending {
  readonly head: Promise<ArrivingBatch>;
  #settle!: (batch: ArrivingBatch) => void;
  #slices: unknown[] = [];
  #wake: (() => void) | null = null;
  #left = -1;
  /** Slices still to arrive from the worker. */
  #coming = -1;
  #failed: Error | null = null;

  constructor(readonly done: () => void) {
    this.head = new Promise((resolve) => (this.#settle = resolve));
  }

  /** Takes one reply of this batch's. */
  take(reply: BatchReply): void {
    if (reply.kind === "head") {
      this.#left = this.#coming = reply.slices;
      this.#settle({ kind: "ok", time: reply.time, digest: reply.digest, slices: this.#arriving() });
    } else if (reply.kind === "slice") {
      this.#slices.push(reply.slice);
      // Its last slice here: the worker is done with it (whether or not its slices are ever read).
      if (--this.#coming === 0) this.done();
      this.#wake?.();
    } else {
      this.#settle({ kind: reply.kind, detail: reply.detail });
      this.done();
    }
  }

  /** The worker stopped: a batch not yet begun is unparseable, one under way ends where it is. */
  fail(error: Error): void {
    this.#failed = error;
    this.#settle({ kind: "unparseable", detail: `the batch decoder's worker stopped: ${error.message.slice(0, 120)}` });
    this.#wake?.();
  }

  /** The slices, in order, as they arrive. */
  async *#arriving(): AsyncGenerator<unknown> {
    let first = true;
    while (this.#left > 0) {
      // Node dispatches a port's queued messages in one go: each slice after the first waits for a turn of its own.
      if (!first) await nextTurn();
      first = false;
      if (this.#slices.length === 0) {
        if (this.#failed !== null) throw this.#failed;
        await new Promise<void>((resolve) => (this.#wake = resolve));
        this.#wake = null;
        continue;
      }
      this.#left--;
      yield this.#slices.shift();
    }
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

  /** Prepares `payload` (see batch-preparation.ts): inline when small, else in the worker. */
  prepare(payload: Uint8Array, maxItems: number, limits: BatchLimits): Promise<ArrivingBatch> {
    if (payload.length <= INLINE_BYTES) return Promise.resolve(this.#prepareInline(payload, maxItems, limits));
    const id = this.#next++;
    const pending = new Pending(() => this.#pending.delete(id));
    this.#pending.set(id, pending);
    // A copy of its own, moved to the worker: a message's buffer may be shared with others.
    const copy = new Uint8Array(payload);
    this.#start().postMessage({ id, payload: copy, maxItems, limits } satisfies BatchRequest, [copy.buffer]);
    return pending.head;
  }

  /** A small batch prepared here, its slices already at hand. */
  #prepareInline(payload: Uint8Array, maxItems: number, limits: BatchLimits): ArrivingBatch {
    let decoder = this.#inline.get(maxItems);
    if (decoder === undefined) this.#inline.set(maxItems, (decoder = batchDecoder(maxItems)));
    const prepared: PreparedBatch = prepareBatch(payload, decoder, limits);
    if (prepared.kind !== "ok") return prepared;
    return { ...prepared, slices: turnByTurn(prepared.slices) };
  }

  /** The worker, started on first use (again after one stopped). */
  #start(): Worker {
    if (this.#worker !== null) return this.#worker;
    const worker = new Worker(builtScript("batch-decode-worker.js"), { resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB } });
    worker.unref();
    worker.on("message", (reply: BatchReply) => this.#pending.get(reply.id)?.take(reply));
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
