// One worker of the gateway's tokenizer pool (tokenize-pool.ts): loads the
// Hugging Face tokenizer from the folder it is started with, says so (or why
// it cannot), then runs readRequest on each body it is sent and posts the
// result back, the token ids' buffer transferred rather than copied.

import { readlinkSync } from "node:fs";
import { setPriority } from "node:os";
import { parentPort, workerData } from "node:worker_threads";
import { HttpError, readRequest } from "./openai.js";
import type { HttpErrorFields, TokenizeAnswer, TokenizeJob, TokenizeWorkerData } from "./tokenize-pool.js";
import { loadHuggingFaceTokenizer } from "../tokenizers/tokenizer-loading.js";
import type { HuggingFaceTokenizer } from "../tokenizers/hf-tokenizer.js";

/** The folder, bounds and LoRA map this worker reads with. */
const data = workerData as TokenizeWorkerData;
/** The pool's end of the channel. */
const port = parentPort!;

/** Posts an answer (typed: the pool reads it as a TokenizeAnswer). */
const post = (answer: TokenizeAnswer, transfer: ArrayBuffer[] = []) => port.postMessage(answer, transfer);

/**
 * How much nicer than the event loop this thread runs (Linux nice levels):
 * when tokenizing and the event loop want the same core, the event loop's
 * answers (health checks, streams, placements) go first. On this 2-core VM,
 * with the pool's two workers busy beside the event loop, /health's p99 under
 * a burst of 1,000 chats fell from 163 ms to the figure in bench:edge.
 */
const NICENESS = 10;

/** Renices this thread alone (Linux: /proc/thread-self names its thread id); elsewhere nothing. */
function yieldToEventLoop(): void {
  try {
    const tid = Number(readlinkSync("/proc/thread-self").split("/").pop());
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, NICENESS);
  } catch {
    // Not Linux, or not allowed: the thread keeps the process's priority.
  }
}
yieldToEventLoop();

/** The tokenizer, or null when it could not be loaded (the pool then replaces this worker). */
let tokenizer: HuggingFaceTokenizer | null = null;
try {
  tokenizer = loadHuggingFaceTokenizer(data.path, data.engine === undefined ? {} : { engine: data.engine });
} catch (error) {
  post({ type: "load_failed", message: (error as Error).message });
}

if (tokenizer !== null) {
  const hf = tokenizer;
  const lora = new Map(data.loraAdapters);
  port.on("message", ({ job, kind, raw, headers }: TokenizeJob) => {
    try {
      const request = readRequest(kind, Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength), headers, hf, lora, data.limits);
      // The ids' buffer (pooled here) goes to the main thread: the pool lends a fresh one next time.
      post({ type: "done", job, request }, [request.tokens.buffer as ArrayBuffer]);
    } catch (error) {
      if (!(error instanceof HttpError)) return post({ type: "failed", job, message: error instanceof Error ? error.message : String(error) });
      const fields: HttpErrorFields = { status: error.status, message: error.message, type: error.type, code: error.code, headers: error.headers, param: error.param };
      post({ type: "refused", job, error: fields });
    }
  });
  post({ type: "ready", name: hf.name });
}
