// One worker of `adp-router tune`'s pool (src/cli/tune-pool.ts): scores
// each config it is sent with the trace and engine it was started with.

import { parentPort, workerData } from "node:worker_threads";
import type { TuneAnswer, TuneJob, TuneWorkerData } from "./tune-pool.js";
import { evaluateConfig } from "../simulate/tune.js";

const { trace, engine } = workerData as TuneWorkerData;

parentPort!.on("message", ({ job, config }: TuneJob) => {
  let answer: TuneAnswer;
  try {
    answer = { job, metrics: evaluateConfig(trace, engine, config) };
  } catch (error) {
    answer = { job, error: (error as Error).message };
  }
  parentPort!.postMessage(answer);
});
