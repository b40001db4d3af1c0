// The worker_threads pool behind `adp-router tune`: each worker holds the trace
// and the engine once and scores the configs it is sent, so a stage of the
// search runs on every core. Node-only (the CLI's); the search itself is
// src/simulate/tune.ts and does not know how its evaluator runs.

import { Worker } from "node:worker_threads";
import type { AttentionDpConfigInput } from "../config.js";
import type { TuneShape } from "../simulate/tune.js";
import type { Trace } from "../simulate/trace.js";
import type { TuneEvaluator } from "../simulate/tune.js";
import type { TuneMetrics } from "../simulate/tune-types.js";

/** What a worker is started with. */
export interface TuneWorkerData {
  readonly trace: Trace;
  readonly engine: TuneShape;
}

/** A job sent to a worker: one config to simulate. */
export type TuneJob = { readonly job: number; readonly config: AttentionDpConfigInput };
/** A worker's answer to a {@link TuneJob}: its metrics, or why it could not simulate it. */
export type TuneAnswer = { readonly job: number; readonly metrics: TuneMetrics } | { readonly job: number; readonly error: string };

/** A pool of tune workers; `evaluate` is a {@link TuneEvaluator}. Close it when done. */
export class TunePool {
  readonly #workers: Worker[];
  readonly #idle: Worker[];
  /** Jobs waiting for a worker, in order. */
  readonly #queue: TuneJob[] = [];
  /** Per job in flight: how to settle it. */
  readonly #pending = new Map<number, { resolve: (m: TuneMetrics) => void; reject: (e: Error) => void }>();
  #nextJob = 0;
  /** Set when a worker died: every later job fails with it. */
  #broken: Error | null = null;
  /** Set by close(): workers exiting then are expected. */
  #closing = false;

  /** Starts `size` workers from `script` (the built dist/tune-worker.js), each given the trace and engine. */
  constructor(script: URL, size: number, data: TuneWorkerData) {
    this.#workers = Array.from({ length: size }, () => {
      const worker = new Worker(script, { workerData: data });
      worker.on("message", (answer: TuneAnswer) => this.#settle(worker, answer));
      worker.on("error", (error) => this.#fail(error));
      worker.on("messageerror", (error) => this.#fail(error));
      // A worker that ends before close(), even with status 0, would leave its job unanswered for good.
      worker.on("exit", (code) => this.#closing || this.#fail(new Error(`a tune worker exited (status ${code}) while the search needed it`)));
      return worker;
    });
    this.#idle = [...this.#workers];
  }

  /** Scores `configs` across the workers; answers come back in the configs' order. */
  readonly evaluate: TuneEvaluator = (configs) => Promise.all(configs.map((config) => this.#submit(config)));

  /** Stops every worker. */
  async close(): Promise<void> {
    this.#closing = true;
    await Promise.all(this.#workers.map((w) => w.terminate()));
  }

  /** Queues one config; resolves with its metrics. */
  #submit(config: AttentionDpConfigInput): Promise<TuneMetrics> {
    if (this.#broken) return Promise.reject(this.#broken);
    const job = this.#nextJob++;
    const settled = new Promise<TuneMetrics>((resolve, reject) => this.#pending.set(job, { resolve, reject }));
    this.#queue.push({ job, config });
    this.#dispatch();
    return settled;
  }

  /** Hands queued jobs to idle workers. */
  #dispatch(): void {
    while (this.#idle.length > 0 && this.#queue.length > 0) this.#idle.pop()!.postMessage(this.#queue.shift()!);
  }

  /** A worker's answer: settle its job, give the worker the next one. */
  #settle(worker: Worker, answer: TuneAnswer): void {
    const pending = this.#pending.get(answer.job);
    this.#pending.delete(answer.job);
    if ("error" in answer) pending?.reject(new Error(answer.error));
    else pending?.resolve(answer.metrics);
    this.#idle.push(worker);
    this.#dispatch();
  }

  /** A worker failed: every job waiting or in flight fails with it. */
  #fail(error: Error): void {
    this.#broken ??= error;
    for (const { reject } of this.#pending.values()) reject(this.#broken);
    this.#pending.clear();
    this.#queue.length = 0;
  }
}
