// `serve --workers N`: N worker processes share the listen socket (node:cluster).
// By default (`listen.connection_balance: kernel`) each worker accepts from it
// as it is free, so the primary is no hop of any connection: handing one over
// cost the primary ~400 µs of CPU and halved `--workers 2`'s requests/s when
// each request came on a connection of its own (docs/performance.md);
// `round_robin` has the primary accept each and hand it to the next free
// worker. This primary keeps the workers one gateway:
//   - it links each pair of workers that listen by a socket of their own
//     (sibling-links.ts), over which they send each other their shared routing
//     changes (sibling-log.ts); where a pair has no link it relays them, in
//     the order it received them;
//   - it prints the URL once every worker listens, and stops them all when one
//     cannot start (its own message says why, on standard error);
//   - SIGTERM/SIGINT stop every worker gracefully; on SIGHUP it reads the
//     configuration file once and sends every worker its text, which moves
//     them to its upstreams (config-relay.ts: a worker never reads the file);
//   - a worker's `/metrics` scrape gathers every started worker's page
//     (metrics-relay.ts);
//   - a connection past a worker's share of limits.max_connections goes to
//     another worker with room (connection-overflow.ts);
//   - it lends the workers' shares of limits.max_in_flight_per_upstream to
//     the workers whose requests wait for them (lending-broker.ts);
//   - it holds limits.queue_size and lends its slots to the workers whose
//     requests would wait past their room (queue-lending.ts);
//   - a worker that dies after it started is started again (at most once a
//     second) with the configuration its siblings run; its routing state then
//     begins empty and learns from the others' new changes and its engines' events.
// The primary itself serves nothing and holds no routing state.

import cluster, { type Worker } from "node:cluster";
import { STATE_MESSAGE } from "./sibling-log.js";
import { isLinkMessage, LINK_MESSAGE, WorkerLinks } from "./sibling-links.js";
import { isMetricsMessage, METRICS_MESSAGE, MetricsGather } from "./metrics-relay.js";
import { isNativeHandle, isOverflowMessage, type NativeHandle, OVERFLOW_MESSAGE, OverflowRelay, type OverflowTarget } from "./connection-overflow.js";
import { isLendingMessage, LENDING_MESSAGE } from "./in-flight-lending.js";
import { DOWN_GRACE_MS, LendingBroker } from "./lending-broker.js";
import { isQueueMessage, QUEUE_MESSAGE, QueueBroker } from "./queue-lending.js";
import { CONFIG_MESSAGE, type ConfigKeeper, type ConfigMessage, isConfigMessage, isSettingFilePairs, type ReadText, type SettingFilePairs } from "./config-relay.js";
import { collectorThreadsChosen } from "../common/collector-threads.js";
import { WORKERS_ENV } from "../common/usable-cores.js";
import type { ConnectionBalance } from "../config/config-types.js";

/** A worker's message to the primary that it listens (with the URL). */
export const LISTENING_MESSAGE = "adp-gateway-listening";
/** The primary's message to a worker: stop gracefully, or reload (to the configuration text it carries). */
export const CONTROL_MESSAGE = "adp-gateway-control";
/** The environment variable a worker finds its number in (1-based). */
export const WORKER_ENV = "ADP_GATEWAY_WORKER";
/** Longest wait between two tries to start a worker slot again whose restarts fail (doubling from RESTART_MS). */
const MAX_RESTART_MS = 30_000;
/** glibc's own default trim threshold (bytes), which a worker starts with fixed (see workerEnv). */
const GLIBC_TRIM_THRESHOLD = "131072";
/** Shortest time between two restarts of one worker slot (doubling, to MAX_RESTART_MS, while its restarts fail to start). */
const RESTART_MS = 1_000;

/** A control message from the primary. */
export interface ControlMessage {
  readonly type: typeof CONTROL_MESSAGE;
  readonly action: "stop" | "reload";
  /** A reload's configuration text, as the primary read and checked it (absent: the gateway has no file). */
  readonly text?: string;
  /** The setting files the primary read for `text` (workers take them in place of the files). */
  readonly files?: SettingFilePairs;
}

/**
 * Sends `message` (with `handle`, a descriptor, if given) to a worker, dropping
 * it when the channel is closing: a worker that is exiting needs no more
 * messages (its "exit" is handled), and without a callback node:child_process
 * would emit the EPIPE as an unhandled "error" and end the primary. `done`
 * learns whether it was written (the error, or null).
 */
const post = (w: Worker, message: object, handle?: NativeHandle, done: (error: Error | null) => void = () => undefined): void => {
  if (!w.isConnected()) return done(new Error("the worker's channel is closed"));
  w.send(message, handle as never, undefined, (error: Error | null) => done(error ?? null));
};

/** A worker as the OverflowRelay reaches it. */
const overflowTarget = (w: Worker, slot: number): OverflowTarget => ({ slot, send: (message, handle, done) => post(w, message, handle, done) });

/**
 * What worker `slot`'s environment adds to the primary's `env`: its number,
 * and glibc's trim threshold fixed at its default (as the container image
 * sets it) unless `env` already tunes the allocator (any `MALLOC_*`
 * variable, or `glibc.malloc` tunables). Left dynamic, glibc
 * raises the threshold to twice the largest chunk it ever unmapped and then
 * keeps the freed buffers of large bodies (docs/performance.md#footprint).
 * glibc reads it when a process starts, so a worker can be given it and a
 * process already running cannot; musl ignores it.
 */
export function workerEnv(slot: number, env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  // Any allocator setting is the operator's choice, left whole: a MALLOC_* variable, or glibc.malloc tunables.
  const tuned = Object.keys(env).some((k) => k.startsWith("MALLOC_")) || /glibc\.malloc\./.test(env.GLIBC_TUNABLES ?? "");
  return { [WORKER_ENV]: String(slot), ...(tuned ? {} : { MALLOC_TRIM_THRESHOLD_: GLIBC_TRIM_THRESHOLD }) };
}

/**
 * The node flags a worker starts with: the primary's (`execArgv`), and
 * `--single-threaded-gc` unless they already say how the collector uses
 * threads. A worker is one of one a core: helper threads that mark or
 * scavenge beside its main thread take a core from a sibling (or from the
 * engines and clients on the same machine) for no gain (bench:peers,
 * docs/performance.md). V8 takes the flag at start only, hence here.
 */
export function workerExecArgv(execArgv: readonly string[] = process.execArgv): string[] {
  return collectorThreadsChosen(execArgv) ? [...execArgv] : [...execArgv, "--single-threaded-gc"];
}

/** Whether this process is a worker of `serve --workers N` (forked by runPrimary). */
export const isGatewayWorker = (): boolean => cluster.isWorker && process.env[WORKER_ENV] !== undefined;

/** Whether `v` is a control message. */
export const isControl = (v: unknown): v is ControlMessage =>
  typeof v === "object" && v !== null && (v as ControlMessage).type === CONTROL_MESSAGE && ((v as ControlMessage).action === "stop" || (v as ControlMessage).action === "reload") && ((v as ControlMessage).text === undefined || typeof (v as ControlMessage).text === "string") && ((v as ControlMessage).files === undefined || isSettingFilePairs((v as ControlMessage).files));

/** node:cluster's scheduling policy for a connection balance (an operator's NODE_CLUSTER_SCHED_POLICY gives way to the configuration). */
export const schedulingPolicy = (balance: ConnectionBalance): number => (balance === "round_robin" ? cluster.SCHED_RR : cluster.SCHED_NONE);

/** The primary's lines for a worker slot's /metrics page: whether it serves now, and how often it was started again. */
export function workerLines(up: boolean, restarts: number): string {
  return [
    "# HELP adp_gateway_worker_up Whether this worker listens now (0: down, being started again; the primary's count).",
    "# TYPE adp_gateway_worker_up gauge",
    `adp_gateway_worker_up ${up ? 1 : 0}`,
    "# HELP adp_gateway_worker_restarts_total Times the primary started this worker again after it exited (failed starts included).",
    "# TYPE adp_gateway_worker_restarts_total counter",
    `adp_gateway_worker_restarts_total ${restarts}`,
  ].join("\n");
}

/**
 * Runs the primary of `n` workers, each running this process's command line,
 * sharing the listen socket's connections as `balance` says, and starting
 * from `config`'s texts (null: the gateway has no configuration file), each
 * with its share of every upstream's in-flight cap (`inFlightShare`, by slot)
 * and lent slots of the gateway's queue (`queueSize`, limits.queue_size);
 * resolves with the exit status once all have exited.
 */
export function runPrimary(n: number, balance: ConnectionBalance = "kernel", config: ConfigKeeper | null = null, inFlightShare: (slot: number) => number = () => 0, queueSize = 0): Promise<number> {
  // Read by node:cluster at the first fork.
  cluster.schedulingPolicy = schedulingPolicy(balance);
  cluster.setupPrimary({ exec: process.argv[1]!, args: process.argv.slice(2), execArgv: workerExecArgv(), serialization: "json" });
  const say = (text: string) => process.stderr.write(`adp-router-gateway serve: ${text}\n`);
  return new Promise<number>((resolve) => {
    const slots = new Map<Worker, number>();
    /** The configuration generation each worker was given when it asked (one that listens behind a reload is sent it then). */
    const given = new Map<Worker, number>();
    const started = new Set<number>();
    const lastStart = new Map<number, number>();
    /** When each slot's units may go to the reserve: DOWN_GRACE_MS after the exit of the last worker of it that served. */
    const graceEnds = new Map<number, number>();
    /** Slots whose worker served (listened) at least once: one that fails to start again is retried, not fatal. */
    const served = new Set<number>();
    /** Each slot's restarts in a row that did not reach listening. */
    const failedRestarts = new Map<number, number>();
    let url: string | null = null;
    let stopping = false;
    let status = 0;
    const gather = new MetricsGather();
    /** Each slot's worker starts after its first (restarts, failed ones included), for /metrics. */
    const restarts = new Map<number, number>();
    /** The primary's lines for each slot's page: whether its worker serves, and how often it was started again. */
    const ownLines = () => new Map(Array.from({ length: n }, (_, i) => [i + 1, workerLines(started.has(i + 1), restarts.get(i + 1) ?? 0)] as const));
    const links = new WorkerLinks(slots, started, say);
    const overflow = new OverflowRelay(() => [...slots].filter(([o, k]) => started.has(k) && o.isConnected()).map(([o, k]) => overflowTarget(o, k)));
    const lending = new LendingBroker({
      post: (slot, message) => {
        for (const [w, k] of slots) if (k === slot) post(w, message);
      },
      started: () => [...started],
    }, inFlightShare);
    const queue = new QueueBroker(queueSize);
    const control = (action: ControlMessage["action"], read?: ReadText) => {
      for (const [w, slot] of slots) {
        // One still starting reads no message yet (and has no signal handler: SIGTERM ends it, as it had served nothing;
        // it asked for the texts already, or will be given the new one).
        if (!started.has(slot)) {
          if (action === "stop") w.process.kill("SIGTERM");
        } else post(w, { type: CONTROL_MESSAGE, action, ...(read === undefined ? {} : { text: read.text, files: read.files }) } satisfies ControlMessage);
      }
    };
    /** The reloads under way, one after another: the workers take them in the order the signals came. */
    let reloads = Promise.resolve();
    /** SIGHUP: the file read once, checked, and its text sent to every worker; a file that cannot be taken changes nothing. */
    const reload = () => {
      if (stopping) return;
      if (config === null) return control("reload"); // each worker says there is no file
      reloads = reloads.then(async () => {
        let read: ReadText;
        try {
          // Upstreams that are the gateway itself are checked on the port its workers listen on (once one does).
          read = await config.reload(url === null ? null : Number(new URL(url).port));
        } catch (error) {
          say(`SIGHUP: the configuration was not reloaded: ${(error as Error).message}`);
          return;
        }
        if (!stopping) control("reload", read);
      });
    };
    const stop = (why: string, code: number) => {
      if (stopping) return;
      stopping = true;
      status = code;
      say(why);
      control("stop");
    };
    const fork = (slot: number) => {
      if (lastStart.has(slot)) restarts.set(slot, (restarts.get(slot) ?? 0) + 1);
      lastStart.set(slot, Date.now());
      // A worker joins a gateway the primary checked: an upstream it cannot reach starts unhealthy in it (command.ts).
      let w: Worker;
      try {
        w = cluster.fork({ ...workerEnv(slot), [WORKERS_ENV]: String(n) });
      } catch (error) {
        say(`worker ${slot} could not be started: ${(error as Error).message}`);
        return ended(null, slot, 1, null);
      }
      slots.set(w, slot);
      w.on("message", (m: unknown, handle: unknown) => {
        const type = typeof m === "object" && m !== null ? (m as { type?: unknown }).type : undefined;
        if (type === OVERFLOW_MESSAGE) {
          // A connection past the sender's share: to the next listening worker that has not had it (none while stopping).
          const descriptor = isNativeHandle(handle) ? handle : undefined;
          if (isOverflowMessage(m)) overflow.receive(m, descriptor, slot, stopping);
          else descriptor?.close();
        } else if (type === STATE_MESSAGE) {
          // Relayed in the order received, under its sender's number, to the workers it has no link to (it names
          // those it has); each receiver checks it whole (Siblings.receive).
          const sentOn = (m as { linked?: unknown }).linked;
          const skip = Array.isArray(sentOn) ? sentOn : [];
          const relayed = { ...(m as object), from: slot, linked: undefined };
          for (const [other, otherSlot] of slots) if (other !== w && !skip.includes(otherSlot)) post(other, relayed);
        } else if (type === CONFIG_MESSAGE) {
          // A starting worker's ask: the texts its siblings run, and what its slot holds of the in-flight caps (from here it is up).
          if (isConfigMessage(m) && m.op === "ask") {
            given.set(w, config?.generation ?? 0);
            const texts = { start: config?.start.text ?? null, reloaded: config?.reloaded?.text ?? null, startFiles: config?.start.files ?? [], reloadedFiles: config?.reloaded?.files ?? [] };
            post(w, { type: CONFIG_MESSAGE, op: "texts", ...texts, carried: lending.carried(slot) } satisfies ConfigMessage);
          }
        } else if (type === LENDING_MESSAGE) {
          // Only from the slot's running worker: one read after its exit would count against its restart.
          if (slots.has(w) && isLendingMessage(m)) lending.receive(slot, m);
        } else if (type === QUEUE_MESSAGE) {
          // Answered at once (the worker holds its requests meanwhile); only from the slot's running worker, as above.
          const answer = slots.has(w) && isQueueMessage(m) ? queue.receive(slot, m) : null;
          if (answer !== null) post(w, answer);
        } else if (type === LINK_MESSAGE) {
          if (isLinkMessage(m) && m.lost !== undefined) links.lost(slot, m.lost);
        } else if (type === METRICS_MESSAGE) {
          if (!isMetricsMessage(m)) return;
          // Each page under the number of the worker that sent it (the primary's slot, not the message's).
          if (m.op === "ask") gather.ask(m.id, (reply) => post(w, reply), [...slots].filter(([o, k]) => started.has(k) && o.isConnected()).map(([o]) => (msg) => post(o, msg)), undefined, ownLines());
          else if (m.op === "page") gather.page(m.id, { worker: slot, text: m.text });
        } else if (type === LISTENING_MESSAGE) {
          // Only from the slot's running worker (one read after its exit would mark the slot as serving).
          if (!slots.has(w)) return;
          started.add(slot);
          served.add(slot);
          // A reload taken while it started reached it only if it asked after: else it is sent now.
          if (config !== null && config.reloaded !== null && (given.get(w) ?? 0) < config.generation) post(w, { type: CONTROL_MESSAGE, action: "reload", text: config.reloaded.text, files: config.reloaded.files } satisfies ControlMessage);
          failedRestarts.delete(slot);
          links.started(slot);
          lending.started(slot);
          if (url === null && started.size === n) {
            url = String((m as { url?: unknown }).url);
            process.stdout.write(`${url}\n`);
          }
        }
      });
      let over = false;
      const end = (code: number | null, signal: string | null) => {
        if (over) return;
        over = true;
        ended(w, slot, code, signal);
      };
      w.on("exit", end);
      // A fork that fails (no descriptor left to spawn it with, EMFILE) emits "error" and no "exit": a start that failed.
      // Unheard, the error would end the primary and every worker with it.
      w.on("error", (error: Error) => {
        say(`worker ${slot}${w.process.pid === undefined ? " could not be started" : ""}: ${error.message}`);
        if (w.process.pid === undefined) end(1, null);
      });
    };
    /** Worker `w` of `slot` ended (null: it was never forked): started again unless the gateway stops or it never served. */
    const ended = (w: Worker | null, slot: number, code: number | null, signal: string | null) => {
      if (w !== null) {
        slots.delete(w);
        given.delete(w);
        links.exited(w, slot);
        // Its requests are gone with it: the others drop its load report (and take none from a late batch of it).
        const pid = w.process.pid ?? 0;
        for (const other of slots.keys()) post(other, { type: STATE_MESSAGE, from: slot, epoch: pid, seq: 0, ended: true, entries: [], loads: [] });
      }
      overflow.exited(slot);
      // Its units serve the others until it is started again, once its requests at the engine can have ended: those
      // of the last worker of the slot that served (one whose restart failed before it listened sent none).
      lending.exited(slot);
      queue.exited(slot);
      if (started.has(slot) || !graceEnds.has(slot)) graceEnds.set(slot, Date.now() + DOWN_GRACE_MS);
      setTimeout(() => lending.releaseDown(slot), Math.max(0, graceEnds.get(slot)! - Date.now())).unref();
      if (!stopping && !served.has(slot)) stop(`worker ${slot} could not start (exit ${code ?? signal}): stopping the others`, code === 0 || code === null ? 1 : code);
      else if (!stopping) {
        // The others serve meanwhile: a restart that fails (no descriptor left to fork with, a tokenizer folder
        // removed since, ...) is tried again, less often.
        const failed = started.has(slot) ? 0 : (failedRestarts.get(slot) ?? 0) + 1;
        failedRestarts.set(slot, failed);
        const wait = Math.min(MAX_RESTART_MS, RESTART_MS * 2 ** failed);
        say(failed === 0 ? `worker ${slot} exited (${code ?? signal}): starting it again` : `worker ${slot} could not start again (exit ${code ?? signal}): trying again in ${wait / 1000} s`);
        started.delete(slot);
        // Not before its slot's grace is over: a worker started within it took over its predecessor's units while
        // that one's requests could still run at the engine, and lent them (the engine had 3 behind a cap of 2).
        const due = Math.max((lastStart.get(slot) ?? 0) + wait, graceEnds.get(slot) ?? 0);
        setTimeout(() => stopping || fork(slot), Math.max(0, due - Date.now()));
      }
      if (slots.size === 0 && stopping) resolve(status);
    };
    // A second signal ends everything now, as it ends one process (exit 1): the workers are killed, unfinished.
    const signalled = (signal: string) => {
      if (!stopping) return stop(`${signal}: the workers finish their in-flight requests`, 0);
      say(`${signal} again, stopping the workers now`);
      status = 1;
      for (const w of slots.keys()) w.process.kill("SIGKILL");
    };
    process.on("SIGTERM", () => signalled("SIGTERM"));
    process.on("SIGINT", () => signalled("SIGINT"));
    process.on("SIGHUP", reload);
    for (let slot = 1; slot <= n; slot++) fork(slot);
  });
}

