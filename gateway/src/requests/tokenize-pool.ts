// The worker_threads pool that renders and tokenizes prompts for the gateway
// (request-reader.ts), so a long prompt never stalls the event loop that
// answers /health and every other request: one 4 MB chat of spaces took the
// Hugging Face tokenizer 48.9 s. Each worker loads the tokenizer once and runs
// readRequest on the bodies it is sent (tokenize-worker.ts), one at a time
// (tokenizing is synchronous). Node-only.
//
// - Queue: jobs wait here, in order, for a worker; past queue_size they are
//   shed (429). A job whose client has gone is dropped when its turn comes.
// - Affinity: each worker keeps its own segment cache, so a job prefers the
//   worker its prompt's first bytes hash to (a conversation's turns share
//   them). An idle worker takes the first of the next AFFINITY_WINDOW jobs
//   that prefers it, else the head: a busy preferred worker never holds a job
//   up while another is idle.
// - Faults: a job past timeout_ms has its worker terminated (nothing else
//   stops synchronous code) and replaced; a worker that dies fails its job
//   503 and is replaced, after a growing pause when it keeps dying or cannot
//   load its tokenizer, so a broken tokenizer folder does not spin.

import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { HttpError, SESSION_HEADERS, SUBAGENT_HEADER, type PromptLimits, type RoutedRequest } from "./openai.js";
import { SUBAGENT_AUTH_HEADER } from "./subagent-auth.js";
import { TokenizerLoadError } from "../tokenizers/tokenizer-loading.js";

/** What a worker is started with. */
export interface TokenizeWorkerData {
  /** The tokenizer folder (loadHuggingFaceTokenizer's). */
  readonly path: string;
  readonly limits: PromptLimits;
  /** routing.lora_adapters as entries (a Map crosses threads, but entries say what is meant). */
  readonly loraAdapters: readonly (readonly [string, number])[];
  /** tokenizer.engine: whose chat normalisation the rendering follows (absent: TensorRT-LLM's). */
  readonly engine?: "tensorrt-llm" | "vllm";
}

/** A job sent to a worker: one body, copied (its buffer transferred), and the headers readRequest reads. */
export interface TokenizeJob {
  readonly job: number;
  readonly kind: "chat" | "completion";
  readonly raw: Uint8Array;
  readonly headers: Record<string, string | string[] | undefined>;
}

/** An HttpError as it crosses from a worker (a structured clone keeps only an Error's message). */
export interface HttpErrorFields {
  readonly status: number;
  readonly message: string;
  readonly type: string;
  readonly code: string;
  readonly headers: Record<string, string>;
  readonly param: string | null;
}

/** What a worker posts: it loaded (or could not), or how a job came out. */
export type TokenizeAnswer =
  | { readonly type: "ready"; readonly name: string }
  | { readonly type: "load_failed"; readonly message: string }
  | { readonly type: "done"; readonly job: number; readonly request: RoutedRequest }
  | { readonly type: "refused"; readonly job: number; readonly error: HttpErrorFields }
  | { readonly type: "failed"; readonly job: number; readonly message: string };

/** Counters of a request reader (request-reader.ts), for /metrics. */
export interface TokenizeStats {
  /** Worker threads (0: tokenizing on the event loop). */
  readonly workers: number;
  /** Workers on a job now. */
  readonly busy: number;
  /** Jobs waiting for a worker now. */
  readonly queued: number;
  /** Jobs tokenized. */
  readonly completed: number;
  /** Jobs readRequest refused (4xx: malformed, over the prompt bounds). */
  readonly refused: number;
  /** Jobs turned away because the queue was full (429). */
  readonly shed: number;
  /** Jobs past timeout_ms (503; their worker was replaced). */
  readonly timedOut: number;
  /** Jobs whose worker died under them (503). */
  readonly crashed: number;
  /** Queued jobs dropped because their client had gone (499). */
  readonly dropped: number;
  /** Jobs readRequest failed on unexpectedly (not an HttpError: a bug, answered 500). */
  readonly failed: number;
  /** Workers started again after one was lost or timed out. */
  readonly restarts: number;
}

/** What the pool is built with. */
export interface TokenizePoolOptions {
  /** The worker's script: the built dist/tokenize-worker.js. */
  readonly script: URL;
  readonly size: number;
  readonly queueSize: number;
  readonly timeoutMs: number;
  readonly data: TokenizeWorkerData;
}

/** How many queued jobs, from the head, an idle worker looks through for one that prefers it. */
const AFFINITY_WINDOW = 8;
/** Bytes of the prompt hashed to pick a job's preferred worker. */
const AFFINITY_BYTES = 256;
/** The keys the prompt follows in a body. */
const PROMPT_KEYS = { chat: Buffer.from('"messages"'), completion: Buffer.from('"prompt"') } as const;
/** First and longest pause before a worker that keeps failing is started again. */
const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 30_000;
/** Heap a worker may grow to (a huge prompt's rendering and BPE); past it the worker dies and its job fails, not the gateway. */
const WORKER_HEAP_MB = 1024;
/** The headers readRequest reads (only these are copied to a worker). */
const READ_HEADERS = [...SESSION_HEADERS, SUBAGENT_HEADER, SUBAGENT_AUTH_HEADER];

/**
 * The worker a body's job prefers: FNV-1a (deterministic, no seed) of the
 * AFFINITY_BYTES after its "messages" (or "prompt") key, modulo `n`. Bodies
 * that start their prompt alike (a conversation's turns, a shared system
 * prompt) go to the worker whose segment cache holds it.
 */
export function preferredWorker(kind: "chat" | "completion", raw: Uint8Array, n: number): number {
  if (n <= 1) return 0;
  const at = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).indexOf(PROMPT_KEYS[kind]);
  const from = at < 0 ? 0 : at + PROMPT_KEYS[kind].length;
  const end = Math.min(raw.length, from + AFFINITY_BYTES);
  let h = 0x811c9dc5;
  for (let i = from; i < end; i++) h = Math.imul(h ^ raw[i]!, 0x01000193);
  return (h >>> 0) % n;
}

/** A job on the main thread: the body, where it would rather go, and how to settle it. */
interface Job {
  readonly kind: "chat" | "completion";
  readonly raw: Buffer;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly signal: ClientSignal | undefined;
  readonly preferred: number;
  readonly resolve: (request: RoutedRequest) => void;
  readonly reject: (error: Error) => void;
}

/** A FIFO of jobs in a ring, from which a job near the head can be taken out of turn (AFFINITY_WINDOW). */
class JobQueue {
  /** The ring; its size a power of two. */
  #items: (Job | undefined)[] = new Array<Job | undefined>(16);
  /** Where the first job is. */
  #head = 0;
  /** Jobs in the ring. */
  #length = 0;

  /** Jobs waiting. */
  get length(): number {
    return this.#length;
  }

  /** The job `i` places from the head (`i` < length). */
  at(i: number): Job {
    return this.#items[(this.#head + i) & (this.#items.length - 1)]!;
  }

  /** Adds a job at the tail, growing the ring when full. */
  push(job: Job): void {
    if (this.#length === this.#items.length) {
      const items = new Array<Job | undefined>(this.#items.length * 2);
      for (let i = 0; i < this.#length; i++) items[i] = this.at(i);
      this.#items = items;
      this.#head = 0;
    }
    this.#items[(this.#head + this.#length) & (this.#items.length - 1)] = job;
    this.#length++;
  }

  /** Takes out the job `i` places from the head (`i` small: the ones before it move up one). */
  take(i: number): Job {
    const mask = this.#items.length - 1;
    const job = this.at(i);
    for (let k = i; k > 0; k--) this.#items[(this.#head + k) & mask] = this.#items[(this.#head + k - 1) & mask];
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) & mask;
    this.#length--;
    return job;
  }

  /** Takes out every job, in order. */
  drain(): Job[] {
    const jobs: Job[] = [];
    while (this.#length > 0) jobs.push(this.take(0));
    return jobs;
  }
}

/**
 * A client's hang-up as the pool sees it: whether it came, and (optionally,
 * as the gateway's Hangup has) a way to hear it coming while a job runs.
 */
export interface ClientSignal {
  readonly aborted: boolean;
  once?(event: "abort", listener: () => void): unknown;
  off?(event: "abort", listener: () => void): unknown;
}

/**
 * How long a running job whose client left may go on before its worker is
 * replaced: a short one (most take milliseconds) finishes on its own; a long
 * one would hold the worker for a client that is gone (send a pathological
 * prompt, hang up, repeat).
 */
const ABANDON_AFTER_MS = 50;

/** One worker thread's place in the pool: the thread (none while it is replaced), its state and its job. */
interface Slot {
  readonly index: number;
  worker: Worker | null;
  /** starting: loading its tokenizer; ready: takes jobs; down: lost, to be started again; failed: its tokenizer could not load (started again later). */
  state: "starting" | "ready" | "down" | "failed";
  job: Job | null;
  /** The number the job was sent with (an answer must carry it). */
  jobId: number;
  /** The job's timeout, or the pause before a restart. */
  timer: NodeJS.Timeout | null;
  /** Listens for the running job's client leaving, or null. */
  onLeave: (() => void) | null;
  /** Failures (losses, failed loads) since its last job came out: the restart pause doubles with each. */
  failures: number;
}

/** The 503 of a job whose worker died under it. */
const lostJob = () => new HttpError(503, "the tokenizer failed on this request (its worker was lost and is being replaced)", "server_error", "tokenizer_failed", { "retry-after": "1" });

/** A pool of tokenizer workers; start it with TokenizePool.start, close it when done. */
export class TokenizePool {
  /** What it was started with. */
  readonly #options: TokenizePoolOptions;
  /** One per worker thread, by index (a job's preferred worker is an index). */
  readonly #slots: Slot[];
  /** Jobs waiting for a worker. */
  readonly #queue = new JobQueue();
  /** The job counters (stats()). */
  readonly #counts = { completed: 0, refused: 0, shed: 0, timedOut: 0, crashed: 0, dropped: 0, failed: 0, restarts: 0 };
  /** Settles start(): set until every worker reported ready (or one failed). */
  #starting: { resolve: () => void; reject: (error: Error) => void } | null = null;
  /** The number the next job is sent with. */
  #nextJob = 0;
  /** Set by close(): no job is taken, no worker started again. */
  #closing = false;
  /** The tokenizer's name, as the workers report it. */
  #name = "huggingface";

  /** Use TokenizePool.start. */
  private constructor(options: TokenizePoolOptions) {
    this.#options = options;
    this.#slots = Array.from({ length: options.size }, (_, index) => ({ index, worker: null, state: "starting", job: null, jobId: -1, timer: null, onLeave: null, failures: 0 }));
  }

  /** Starts `options.size` workers; resolves once each has loaded its tokenizer, rejects with TokenizerLoadError when one cannot. */
  static async start(options: TokenizePoolOptions): Promise<TokenizePool> {
    const pool = new TokenizePool(options);
    const started = new Promise<void>((resolve, reject) => (pool.#starting = { resolve, reject }));
    for (const slot of pool.#slots) pool.#spawn(slot);
    try {
      await started;
    } catch (error) {
      await pool.close();
      throw error;
    }
    return pool;
  }

  /** The tokenizer's name (for logs). */
  get name(): string {
    return this.#name;
  }

  /** Reads a body on a worker: resolves with its RoutedRequest, rejects with an HttpError (or an Error: a readRequest bug). */
  run(kind: "chat" | "completion", raw: Buffer, headers: Record<string, string | string[] | undefined>, signal?: ClientSignal): Promise<RoutedRequest> {
    if (this.#closing) return Promise.reject(new HttpError(503, "the gateway is shutting down", "server_error", "shutting_down", { "retry-after": "1" }));
    if (signal?.aborted) return Promise.reject(new HttpError(499, "the client closed the request"));
    if (this.#slots.every((s) => s.state === "failed")) return Promise.reject(new HttpError(503, "the tokenizer cannot load (its workers are being restarted)", "server_error", "tokenizer_failed", { "retry-after": "1" }));
    if (this.#queue.length >= this.#options.queueSize && !this.#slots.some((s) => s.state === "ready" && s.job === null)) {
      this.#counts.shed++;
      const error = new HttpError(429, `the tokenizer is busy: ${this.#queue.length} requests are waiting for a worker (tokenizer.queue_size ${this.#options.queueSize})`, "rate_limit_exceeded", "tokenizer_busy", { "retry-after": "1" });
      return Promise.reject(error);
    }
    return new Promise<RoutedRequest>((resolve, reject) => {
      this.#queue.push({ kind, raw, headers, signal, preferred: preferredWorker(kind, raw, this.#slots.length), resolve, reject });
      this.#dispatch();
    });
  }

  /** The counters, and the workers' and queue's state now. */
  stats(): TokenizeStats {
    return { workers: this.#slots.length, busy: this.#slots.filter((s) => s.job !== null).length, queued: this.#queue.length, ...this.#counts };
  }

  /** Stops every worker; queued jobs and jobs in flight are answered 503 shutting_down. */
  async close(): Promise<void> {
    this.#closing = true;
    const shutting = () => new HttpError(503, "the gateway is shutting down", "server_error", "shutting_down", { "retry-after": "1" });
    for (const job of this.#queue.drain()) job.reject(shutting());
    const stopping: Promise<number>[] = [];
    for (const slot of this.#slots) {
      if (slot.timer !== null) clearTimeout(slot.timer);
      slot.timer = null;
      slot.job?.reject(shutting());
      slot.job = null;
      if (slot.worker !== null) stopping.push(slot.worker.terminate());
      slot.worker = null; // its exit is expected now
      slot.state = "down";
    }
    await Promise.all(stopping);
  }

  /** Starts `slot`'s worker thread. */
  #spawn(slot: Slot): void {
    const worker = new Worker(this.#options.script, { workerData: this.#options.data, resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB } });
    slot.worker = worker;
    slot.state = "starting";
    slot.timer = null;
    // A thread replaced since (timed out, closed) may still speak or exit: only the slot's current one counts.
    worker.on("message", (answer: TokenizeAnswer) => slot.worker === worker && this.#answer(slot, answer));
    worker.on("error", (error) => slot.worker === worker && this.#lost(slot, error.message));
    worker.on("messageerror", (error) => slot.worker === worker && this.#lost(slot, `sent an unreadable message: ${error.message}`));
    worker.on("exit", (code) => slot.worker === worker && this.#lost(slot, `exited with status ${code}`));
  }

  /** A worker's message. */
  #answer(slot: Slot, answer: TokenizeAnswer): void {
    if (answer.type === "ready") return this.#ready(slot, answer.name);
    if (answer.type === "load_failed") return this.#loadFailed(slot, answer.message);
    const job = slot.job;
    if (job === null || answer.job !== slot.jobId) return;
    this.#finish(slot);
    slot.failures = 0;
    if (answer.type === "done") {
      this.#counts.completed++;
      job.resolve(answer.request);
    } else if (answer.type === "refused") {
      this.#counts.refused++;
      const e = answer.error;
      job.reject(new HttpError(e.status, e.message, e.type, e.code, e.headers, e.param));
    } else {
      this.#counts.failed++;
      job.reject(new Error(answer.message));
    }
    this.#dispatch();
  }

  /** A worker loaded its tokenizer: it takes jobs (and the pool has started once all have). */
  #ready(slot: Slot, name: string): void {
    slot.state = "ready";
    this.#name = name;
    if (this.#starting !== null && this.#slots.every((s) => s.state === "ready")) {
      this.#starting.resolve();
      this.#starting = null;
    }
    this.#dispatch();
  }

  /** A worker could not load its tokenizer: the start fails with its message; later, the worker is tried again after a pause. */
  #loadFailed(slot: Slot, message: string): void {
    void slot.worker?.terminate();
    slot.worker = null;
    if (this.#starting !== null) return this.#starting.reject(new TokenizerLoadError(message));
    slot.state = "failed";
    slot.failures++;
    this.#restartLater(slot);
    // With no worker able to load it, waiting jobs would wait for good.
    if (this.#slots.every((s) => s.state === "failed")) for (const job of this.#queue.drain()) job.reject(new HttpError(503, `the tokenizer cannot load: ${message}`, "server_error", "tokenizer_failed", { "retry-after": "1" }));
  }

  /** A worker died or erred: its job fails 503, and it is started again (after a pause when it keeps dying). */
  #lost(slot: Slot, why: string): void {
    void slot.worker?.terminate(); // after an error, make sure it is gone
    slot.worker = null;
    if (this.#starting !== null) {
      const script = fileURLToPath(this.#options.script);
      const hint = existsSync(script) ? "" : " (no such file: npm run build writes it)";
      return this.#starting.reject(new TokenizerLoadError(`${script}: the tokenizer worker ${why} before it was ready${hint}`));
    }
    if (slot.job !== null) {
      this.#counts.crashed++;
      slot.job.reject(lostJob());
      this.#finish(slot);
    }
    slot.state = "down";
    slot.failures++;
    this.#restartLater(slot);
    this.#dispatch();
  }

  /** Starts `slot` again after a pause doubling with each failure since its last job came out (none before any: a timeout is the job's fault, not counted). */
  #restartLater(slot: Slot): void {
    if (this.#closing) return;
    const pause = slot.failures === 0 ? 0 : Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (slot.failures - 1));
    const restart = () => {
      if (this.#closing) return;
      this.#counts.restarts++;
      this.#spawn(slot);
    };
    if (pause === 0) return restart();
    slot.timer = setTimeout(restart, pause);
    slot.timer.unref(); // a pause must not keep the process alive on its own
  }

  /** A job ran past timeout_ms: it is answered 503, its worker terminated and replaced at once. */
  #timedOut(slot: Slot): void {
    const job = slot.job!;
    this.#finish(slot);
    this.#counts.timedOut++;
    job.reject(new HttpError(503, `tokenizing the prompt took longer than tokenizer.timeout_ms (${this.#options.timeoutMs})`, "server_error", "tokenize_timeout", { "retry-after": "1" }));
    void slot.worker?.terminate();
    slot.worker = null;
    slot.state = "down";
    this.#restartLater(slot);
    this.#dispatch();
  }

  /** Clears `slot`'s job, its timeout and its hang-up listener. */
  #finish(slot: Slot): void {
    if (slot.timer !== null) clearTimeout(slot.timer);
    slot.timer = null;
    if (slot.onLeave !== null) slot.job?.signal?.off?.("abort", slot.onLeave);
    slot.onLeave = null;
    slot.job = null;
  }

  /** A running job's client left and the job ran on past ABANDON_AFTER_MS: answered 499, its worker replaced. */
  #abandoned(slot: Slot): void {
    const job = slot.job!;
    this.#finish(slot);
    this.#counts.dropped++;
    job.reject(new HttpError(499, "the client closed the request"));
    void slot.worker?.terminate();
    slot.worker = null;
    slot.state = "down";
    this.#restartLater(slot);
    this.#dispatch();
  }

  /** Hands queued jobs to idle workers: each the first of the next few that prefers it, else the head. */
  #dispatch(): void {
    for (;;) {
      while (this.#queue.length > 0 && this.#queue.at(0).signal?.aborted) this.#drop(this.#queue.take(0));
      if (this.#queue.length === 0) return;
      const idle = this.#slots.filter((s) => s.state === "ready" && s.job === null);
      if (idle.length === 0) return;
      const window = Math.min(AFFINITY_WINDOW, this.#queue.length);
      let placed = false;
      for (const slot of idle) {
        for (let i = 0; i < window; i++) {
          if (this.#queue.at(i).preferred !== slot.index) continue;
          this.#assign(slot, this.#queue.take(i));
          placed = true;
          break;
        }
        if (placed) break;
      }
      // No job near the head prefers an idle worker: the head's preferred one is busy, and the first idle worker takes it.
      if (!placed) this.#assign(idle[0]!, this.#queue.take(0));
    }
  }

  /** Sends `job` to `slot`'s worker (its body copied into a buffer of its own, transferred), and starts its timeout. */
  #assign(slot: Slot, job: Job): void {
    if (job.signal?.aborted) return this.#drop(job);
    const raw = new Uint8Array(job.raw.length);
    raw.set(job.raw);
    const headers: Record<string, string | string[] | undefined> = {};
    for (const name of READ_HEADERS) if (job.headers[name] !== undefined) headers[name] = job.headers[name];
    const message: TokenizeJob = { job: this.#nextJob++, kind: job.kind, raw, headers };
    slot.job = job;
    slot.jobId = message.job;
    slot.worker!.postMessage(message, [raw.buffer]);
    slot.timer = setTimeout(() => this.#timedOut(slot), this.#options.timeoutMs);
    const startedAt = performance.now();
    if (job.signal?.once !== undefined) {
      // The client left while its job runs: give the job a moment, then take the worker back.
      slot.onLeave = () => {
        if (slot.job !== job) return;
        clearTimeout(slot.timer!);
        slot.timer = setTimeout(() => this.#abandoned(slot), Math.max(0, ABANDON_AFTER_MS - (performance.now() - startedAt)));
      };
      job.signal.once("abort", slot.onLeave);
    }
  }

  /** Answers a job whose client has gone, without tokenizing it. */
  #drop(job: Job): void {
    this.#counts.dropped++;
    job.reject(new HttpError(499, "the client closed the request"));
  }
}
