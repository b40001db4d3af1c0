// `adp-router-gateway serve` (also `adp-router serve` where both packages are installed): loads the configuration (a YAML file, flags over it),
// starts the gateway, prints the URL it listens on on a line of its own, and
// shuts down gracefully on SIGTERM or SIGINT; SIGHUP rereads the file and moves
// to its upstreams. Every failure to start is one clear message on standard
// error and a non-zero exit, never a stack trace.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { GatewayConfigError, limitsShare, loadGatewayConfig, workerShare, type GatewayConfig, type GatewayFlags } from "./config/config.js";
import { createGateway, createGatewayReader, type Gateway, GatewayListenError } from "./gateway.js";
import { refuseSelf, unreachableAtStart } from "./fleet/reachability.js";
import { TokenizerLoadError } from "./tokenizers/tokenizer-loading.js";
import { capYoungGeneration, setHeapGrowth } from "./common/heap-growth.js";
import { scavengeOnMainThread } from "./common/collector-threads.js";
import { collectYoungBuffers } from "./common/young-buffers.js";
import { isControl, isGatewayWorker, LISTENING_MESSAGE, runPrimary, WORKER_ENV } from "./workers/cluster-primary.js";
import { autoWorkers, usableCores, WORKERS_ENV } from "./common/usable-cores.js";
import { Siblings } from "./workers/sibling-log.js";
import { LINK_MESSAGE, SiblingLinks, type LinkMessage } from "./workers/sibling-links.js";
import { Socket } from "node:net";
import { MetricsRelay } from "./workers/metrics-relay.js";
import { ConnectionOverflow, type NativeHandle } from "./workers/connection-overflow.js";
import { carriedFrom, InFlightLending } from "./workers/in-flight-lending.js";
import { QueueLending } from "./workers/queue-lending.js";
import { afterReload, askConfig, ConfigKeeper, type ConfigTexts, type ReadText } from "./workers/config-relay.js";

/** The help text of `adp-router-gateway serve`. */
export const SERVE_USAGE = `Usage: adp-router-gateway serve [--config FILE] [options]

Starts an OpenAI-compatible gateway that routes each request to one of the
upstream engines with adp-router (one upstream per rank).

  --config FILE          gateway YAML (listen, upstreams, attention_dp_config, limits, ...)
  --upstream URL         an upstream's base URL, http:// or https:// (repeat for each);
                         replaces the file's upstreams
  --disaggregation P     prefill/decode pools with protocol P (trtllm, vllm or sglang):
                         --prefill and --decode name their servers
  --prefill URL          a prefill (context) server (repeat for each)
  --decode URL           a decode (generation) server (repeat for each); with
                         --prefill they replace the file's upstreams
  --host H               address to listen on (127.0.0.1)
  --port N               port to listen on; 0 takes a free one (8000)
  --policy P             kv_cache_aware (default), conversation, default, or centralized
                         (TensorRT-LLM's centralized router picks the upstream)
  --log-level L          fatal, error, warn, info (default), debug, trace or silent
  --tokenizer DIR        route by the engine's own token ids: the Hugging Face
                         tokenizer in DIR (tokenizer.json, tokenizer_config.json);
                         default: UTF-8 bytes (or the file's tokenizer: setting)
  --sync URL             share one routing state with the other replicas through
                         NATS JetStream at URL (nats://HOST:PORT)
  --replica-id ID        this replica's name in the cluster (HOST-PID)
  --shutdown-deadline S  seconds to let in-flight requests finish on SIGTERM (30)
  --workers N            worker processes sharing the port and one routing state
                         (auto: one per core this process may use, within its
                         cgroup's CPU quota, at most 8; 1: one process). The
                         in-flight cap, queue and connection limits stay the
                         gateway's, shared between them. /metrics answers
                         for all of them, /health for the worker that takes the
                         request. With --sync, --disaggregation, the admin
                         endpoints, polled or bound KV events or TensorRT-LLM
                         load, auto is one process
  --allow-unreachable    start even when an upstream cannot be reached (it starts
                         unhealthy and takes requests once its health checks
                         pass); without it, an unreachable upstream is an error
                         (health.on_start: require)

Endpoints: POST /v1/chat/completions, /v1/completions; GET /v1/models, /health,
/metrics, /sync/state (with --sync); /admin/upstreams (list, add, remove, drain;
with auth.admin_api_key or admin_api_key_env). Signals: SIGTERM or SIGINT
finish in-flight requests and exit; SIGHUP rereads --config and moves to its upstreams.
The default policy routes by prefix (KV-cache aware); session headers pin
conversations under --policy conversation. Run the installed bin (not through npx,
which does not pass signals on) for a long-lived server.
`;

/** Runs `adp-router-gateway serve`; resolves with the exit status once it has stopped (or failed to start). */
export async function serveCommand(args: string[]): Promise<number> {
  const status = await serve(args);
  // A worker's IPC channel would keep it alive: it exits, and the primary sees its status.
  if (isGatewayWorker()) process.exit(status);
  return status;
}

/**
 * A worker's share of the one routing state: its batches on its links to the
 * `count` siblings, and through the primary (naming the siblings it has links
 * to) while a sibling has none; a link that ends is reported to the primary,
 * which makes it again.
 */
function workerSiblings(count: number, self: number): Siblings {
  const links: SiblingLinks = new SiblingLinks(count, {
    deliver: (m) => siblings.receive(m),
    added: () => siblings.resend(),
    ended: (slot) => {
      siblings.gone(slot);
      toPrimary({ type: LINK_MESSAGE, lost: slot } satisfies LinkMessage);
    },
  });
  const siblings: Siblings = new Siblings(
    (m) => {
      links.send(m);
      if (links.relay) toPrimary({ ...m, linked: links.slots() });
    },
    self,
    links,
  );
  return siblings;
}

/**
 * Sends a worker's message (with `handle`, a descriptor, if given) to its
 * primary; one the closing channel cannot carry is dropped (with no callback,
 * the EPIPE would be an unhandled "error"). `done` learns whether it was
 * written (the error, or null).
 */
const toPrimary = (message: object, handle?: NativeHandle, done: (error: Error | null) => void = () => undefined): void => {
  if (!process.connected || process.send === undefined) return done(new Error("the primary's channel is closed"));
  process.send(message, handle as unknown as Socket, undefined, (error: Error | null) => done(error ?? null));
};

/** What the limits come to with `n` workers, said once at start. */
export function workersLimits(n: number, limits: GatewayConfig["limits"]): string {
  const share = limitsShare(limits, n);
  const units = limits.maxInFlightPerUpstream < n ? `${share.inFlightShare} or 0` : limits.maxInFlightPerUpstream % n === 0 ? `${share.inFlightShare}` : `${share.inFlightShare - 1} or ${share.inFlightShare}`;
  return `${n} workers sharing the limits: each starts with ${units} of limits.max_in_flight_per_upstream ${limits.maxInFlightPerUpstream} per upstream (the shares add up to it) and borrows what the others leave unused; the gateway holds up to ${limits.queueSize} queued (limits.queue_size, lent to the workers as their requests wait); each holds up to ${share.connectionShare} client connections (max_connections ${limits.maxConnections} is the gateway's, split in ${n} shares that add up to it, at least 1 a worker); max_receiving_bytes ${limits.maxReceivingBytes} is each worker's; a connection past a worker's share goes to a worker with room`;
}

/**
 * Why `config` must run in one process, or null: replication, disaggregated
 * pools and the admin endpoints change one process's state, which several
 * workers would split.
 */
export function oneProcessReason(config: GatewayConfig): string | null {
  if (config.sync !== null) return "sync: (run one replica per process, each with its own replica id)";
  if (config.disaggregation !== null) return "disaggregation: (yet): each worker would place on its own copy of both pools";
  if (config.auth.adminApiKey !== null) return "the admin endpoints (auth.admin_api_key or admin_api_key_env): an admin change would reach one worker only";
  // Each worker takes its engines' events and load itself: a socket only one can bind, or answers each read drains.
  const bound = config.upstreams.find((u) => u.kvEvents?.kind === "zmq" && u.kvEvents.bind);
  if (bound !== undefined) return `kv_events with bind: true (upstream ${bound.url}): only one process can bind its endpoint`;
  const polled = config.upstreams.find((u) => u.kvEvents?.kind === "http");
  if (polled !== undefined) return `kv_events kind http (upstream ${polled.url}): each poll drains the engine's event buffer, so each worker would see part of the events`;
  const drained = config.upstreams.find((u) => u.load?.kind === "trtllm");
  if (drained !== undefined) return `load kind trtllm (upstream ${drained.url}): each scrape drains trtllm-serve's statistics, so each worker would see part of them`;
  return null;
}

/**
 * The configuration file's text for a reload of `--workers N`, read once by
 * the primary and checked as a worker would take it (upstreams that are the
 * gateway itself, on `host` and `port` when known); rejects with what is wrong.
 */
async function reloadText(name: string, flags: GatewayFlags, host: string, port: number | null): Promise<ReadText> {
  const text = readFileSync(name, "utf8");
  const settingFiles = new Map<string, string>();
  const next = loadGatewayConfig({ file: { name, text }, flags, settingFiles });
  refuseOneProcess(next);
  if (port !== null) await refuseSelf(next.upstreams.map((u) => u.url), host, port);
  return { text, files: [...settingFiles] };
}

/** Throws when `next` needs one process: the workers keep the state they share, and a reload cannot split it. */
function refuseOneProcess(next: GatewayConfig): void {
  const alone = oneProcessReason(next);
  if (alone !== null) throw new Error(`--workers above 1 cannot be combined with ${alone}; restart with --workers 1 to use it`);
}

/**
 * Moves `gateway` to the upstreams of the configuration file `name` (its
 * text and setting files when given, as a worker's primary read them; else
 * read again), made this process's by `share`; said on standard error after
 * `why`. A text that cannot be taken changes nothing.
 */
async function moveTo(gateway: Gateway, flags: GatewayFlags, share: (c: GatewayConfig) => GatewayConfig, name: string, read: ReadText | undefined, why: string): Promise<void> {
  try {
    const next = share(loadGatewayConfig({ file: { name, text: read?.text ?? readFileSync(name, "utf8") }, flags, settingFiles: new Map(read?.files ?? []) }));
    if (isGatewayWorker()) refuseOneProcess(next); // its primary checked: never thrown in practice
    const change = await gateway.reload(next);
    const notes = [
      change.draining.length > 0 ? `draining: ${change.draining.join(", ")}` : "",
      flags.upstreams || flags.prefill || flags.decode ? "the upstreams come from the flags, not the file" : "",
      change.needRestart.length > 0 ? `changed but needing a restart: ${change.needRestart.join(", ")}` : "",
      change.unreachable.length > 0 ? `unreachable, unhealthy until their health checks pass: ${change.unreachable.map((u) => `${u.url} (${u.reason})`).join(", ")}` : "",
    ].filter((n) => n !== "");
    process.stderr.write(`${said()}: ${why}: upstreams reloaded (${change.added.length} added, ${change.removed.length} removed, ${change.kept.length} kept)${notes.length > 0 ? `; ${notes.join("; ")}` : ""}\n`);
  } catch (error) {
    process.stderr.write(`${said()}: ${why}: the configuration was not reloaded: ${error instanceof GatewayConfigError ? error.message : (error as Error).message}\n`);
  }
}

/**
 * A worker's start, asked of its primary (config-relay.ts): the configuration
 * file as the gateway started with it (under `name`, when the command line
 * names one), the last reload's text, and what its slot holds of the
 * in-flight caps. A worker reads no file, so it runs what its siblings run.
 */
async function workerStart(name: string | undefined): Promise<{ file?: { name: string; text: string }; texts: ConfigTexts }> {
  const texts = await askConfig(toPrimary, (l) => process.on("message", l), (l) => process.off("message", l));
  if (name === undefined) return { texts };
  if (texts.start === null) throw new Error("the primary has no configuration file to send");
  return { file: { name, text: texts.start }, texts };
}

/** The name this process's lines on standard error start with (a worker's with its number: each worker says its own). */
const said = (): string => (isGatewayWorker() ? `adp-router-gateway serve (worker ${process.env[WORKER_ENV]})` : "adp-router-gateway serve");

/**
 * The upstreams checked before serving: one that is this gateway is a problem
 * (exit 2), one nobody can connect to (a typo or a stopped engine) is one
 * (exit 1) under health.on_start require, else it starts unhealthy, said on
 * standard error. A worker (`joining`) checks only which it cannot reach, in
 * silence: its primary checked and said the rest.
 */
async function checkUpstreams(config: GatewayConfig, joining: boolean): Promise<{ readonly problem: string; readonly status: number } | { readonly unhealthy: number[] }> {
  // An upstream that is this gateway (its port, a name for its address) is refused before it would read as unreachable
  // (nothing listens there yet); with port 0 none can be, and the gateway checks again once it listens.
  if (config.listen.port !== 0 && !joining) {
    try {
      await refuseSelf(config.upstreams.map((u) => u.url), config.listen.host, config.listen.port);
    } catch (error) {
      if (error instanceof GatewayConfigError) return { problem: error.message, status: 2 };
      throw error;
    }
  }
  const unreachable = await unreachableAtStart(config);
  if (unreachable.length > 0 && !joining) {
    const list = unreachable.map((u) => `  upstream ${u.index} (${u.url}): ${u.reason}`).join("\n");
    const them = unreachable.length === 1 ? "it" : "them";
    if (config.health.onStart === "require") return { problem: `${unreachable.length === 1 ? "an upstream cannot" : `${unreachable.length} upstreams cannot`} be reached:\n${list}\nStart ${them} first, or pass --allow-unreachable (health.on_start: warn) to start without ${them}.`, status: 1 };
    const n = config.health.healthyThreshold;
    process.stderr.write(`${said()}: warning: starting with unreachable upstreams; they start unhealthy (no request tries them, /health shows them) until ${n} health check${n === 1 ? "" : "s"} in a row pass${n === 1 ? "es" : ""}:\n${list}\n`);
  }
  return { unhealthy: unreachable.map((u) => u.index) };
}

/** serveCommand's work, in this process (a primary of workers, a worker, or the one gateway). */
async function serve(args: string[]): Promise<number> {
  // A worker's reload is its primary's message: a terminal's SIGHUP reaches it too (the whole process group), from
  // its start on, and is the primary's to read (unheard, it would end a worker still starting).
  if (isGatewayWorker()) process.on("SIGHUP", () => {});
  const fail = (message: string, status = 2): number => {
    process.stderr.write(`${said()}: ${message}\n`);
    return status;
  };
  let values: ReturnType<typeof parse>["values"];
  try {
    values = parse(args).values;
  } catch (error) {
    return fail(`${(error as Error).message}\n\n${SERVE_USAGE}`);
  }
  if (values.help) {
    process.stdout.write(SERVE_USAGE);
    return 0;
  }
  const flags: { -readonly [K in keyof GatewayFlags]: GatewayFlags[K] } = {};
  if (values.upstream) flags.upstreams = values.upstream;
  if (values.prefill) flags.prefill = values.prefill;
  if (values.decode) flags.decode = values.decode;
  if (values.disaggregation !== undefined) flags.disaggregation = values.disaggregation;
  if (values.host !== undefined) flags.host = values.host;
  if (values.port !== undefined) {
    if (!/^\d{1,5}$/.test(values.port)) return fail(`--port must be an integer in [0, 65535], got ${JSON.stringify(values.port)}`);
    flags.port = Number(values.port);
  }
  if (values.policy !== undefined) flags.policy = values.policy;
  if (values["log-level"] !== undefined) flags.logLevel = values["log-level"];
  if (values.tokenizer !== undefined) flags.tokenizer = values.tokenizer;
  if (values.sync !== undefined) flags.sync = values.sync;
  if (values["replica-id"] !== undefined) flags.replicaId = values["replica-id"];
  if (values["allow-unreachable"] === true) flags.allowUnreachable = true;
  const deadlineText = values["shutdown-deadline"] ?? "30";
  const deadline = Number(deadlineText);
  if (deadlineText.trim() === "" || !Number.isFinite(deadline) || deadline < 0) return fail(`--shutdown-deadline must be a non-negative number of seconds, got ${JSON.stringify(deadlineText)}`);
  const workersText = values.workers ?? "auto";
  // null: auto (the default), one worker per usable core where the configuration allows more than one process.
  const workersAsked = workersText === "auto" ? null : Number(workersText);
  if (!/^(auto|\d{1,4})$/.test(workersText) || (workersAsked !== null && (workersAsked < 1 || workersAsked > 1024))) return fail(`--workers must be auto or an integer in [1, 1024], got ${JSON.stringify(workersText)}`);
  let file: { name: string; text: string } | undefined;
  let texts: ConfigTexts | null = null;
  if (isGatewayWorker()) {
    try {
      ({ file, texts } = await workerStart(values.config));
    } catch (error) {
      return fail((error as Error).message, 1);
    }
  } else if (values.config !== undefined) {
    try {
      file = { name: values.config, text: readFileSync(values.config, "utf8") };
    } catch (error) {
      return fail(`cannot read ${values.config}: ${(error as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (error as Error).message}`);
    }
  }
  // The setting files read for the configuration (keys named by `*_file` settings): a worker takes its primary's, and
  // a primary of workers sends those it read to each.
  const settingFiles = new Map<string, string>(texts?.startFiles ?? []);
  let config;
  try {
    config = loadGatewayConfig({ ...(file ? { file } : {}), flags, settingFiles });
  } catch (error) {
    if (error instanceof GatewayConfigError) return fail(error.message);
    throw error;
  }
  // A worker started again after a reload starts on its upstreams, as its siblings run (before it listens).
  if (file !== undefined && texts?.reloaded != null) {
    try {
      config = afterReload(config, loadGatewayConfig({ file: { name: file.name, text: texts.reloaded }, flags, settingFiles: new Map(texts.reloadedFiles) }));
      process.stderr.write(`${said()}: started on the last reload's upstreams (${config.upstreams.length})\n`);
    } catch (error) {
      process.stderr.write(`${said()}: warning: the last reload's upstreams could not be taken (${(error as Error).message}): started on the start's, unlike the other workers\n`);
    }
  }
  const alone = oneProcessReason(config);
  if (workersAsked !== null && workersAsked > 1 && alone !== null && !isGatewayWorker()) return fail(`--workers above 1 cannot be combined with ${alone}`);
  // A worker runs as many as its primary started (which it was told); else as asked, or one per usable core.
  const asked = workersAsked ?? autoWorkers();
  const workers = isGatewayWorker() ? Number(process.env[WORKERS_ENV] ?? asked) : alone === null ? asked : 1;
  if (!isGatewayWorker() && workersAsked === null && asked > 1 && alone !== null) process.stderr.write(`${said()}: one process, not one worker per core (--workers auto): it cannot be combined with ${alone}\n`);
  // Said, not refused: a worker a core is the most that helps (more take turns on the cores, each with its own memory).
  const cores = usableCores();
  if (!isGatewayWorker() && workers > cores) process.stderr.write(`${said()}: warning: --workers ${workers} is more than the ${cores} core${cores === 1 ? "" : "s"} this process may use: the workers take turns on them (--workers auto: one a core)\n`);
  // This process a worker of `--workers N`: its share of the routing state goes to its siblings on the links the
  // primary makes, and through the primary to those it has no link to.
  const siblings = isGatewayWorker() ? workerSiblings(workers - 1, Number(process.env[WORKER_ENV])) : undefined;
  // A worker serves its share of the gateway's limits (the primary says what that is, from the whole).
  const share = (c: GatewayConfig): GatewayConfig => (isGatewayWorker() ? workerShare(c, workers, Number(process.env[WORKER_ENV])) : c);
  const workerMetrics = isGatewayWorker() ? new MetricsRelay((m) => toPrimary(m), Number(process.env[WORKER_ENV])) : undefined;
  // A worker passes a connection past its share of limits.max_connections to a sibling with room, through the primary.
  const overflow = isGatewayWorker() ? new ConnectionOverflow(toPrimary, Number(process.env[WORKER_ENV]), workers) : undefined;
  // A worker starts up to its share of each upstream's in-flight cap, and borrows what its siblings leave unused through the primary.
  // This process's configuration: the file's, with a worker's share of the limits.
  const served = share(config);
  const lending = isGatewayWorker() ? new InFlightLending((m) => toPrimary(m), served.limits.inFlightShare, carriedFrom(texts?.carried)) : undefined;
  // A worker holds no queue slot of its own: it asks the primary, which holds limits.queue_size, as requests would wait.
  const queueSlots = isGatewayWorker() ? new QueueLending((m) => toPrimary(m), served.limits.queueTimeoutMs) : undefined;
  if (workers > 1 && siblings === undefined) {
    // Checked once here, said once: the workers join without checking again.
    const checked = await checkUpstreams(config, false);
    if ("problem" in checked) return fail(checked.problem, checked.status);
    process.stderr.write(`${said()}: ${workersLimits(workers, config.limits)}\n`);
    const keeper = file === undefined ? null : new ConfigKeeper({ text: file.text, files: [...settingFiles] }, (port) => reloadText(file.name, flags, config.listen.host, port));
    return runPrimary(workers, config.listen.connectionBalance, keeper, (slot) => limitsShare(config.limits, workers, slot).inFlightShare, config.limits.queueSize);
  }
  // This process serves requests (the one gateway, or a worker): fewer full collections of its small heap, a smaller
  // young generation scavenged on the main thread, and the buffers its reads leave collected young.
  setHeapGrowth();
  scavengeOnMainThread();
  capYoungGeneration();
  collectYoungBuffers();
  // The tokenizer first: a folder that cannot load is a configuration problem (exit 2), whatever the upstreams do.
  let reader;
  try {
    reader = await createGatewayReader(config);
  } catch (error) {
    if (error instanceof TokenizerLoadError) return fail(error.message);
    throw error;
  }
  // A worker joins a gateway its primary checked (and, started again, one that serves already): it says nothing of its
  // upstreams and starts those it cannot reach unhealthy, as its siblings did.
  const checked = await checkUpstreams(config, isGatewayWorker());
  if ("problem" in checked) {
    await reader.close();
    return fail(checked.problem, checked.status);
  }
  let gateway;
  try {
    gateway = await createGateway(served, { requestReader: reader, startUnhealthy: checked.unhealthy, ...(siblings === undefined ? {} : { siblings }), ...(workerMetrics === undefined ? {} : { workerMetrics }), ...(overflow === undefined ? {} : { connectionGate: overflow }), ...(lending === undefined ? {} : { inFlightLending: lending }), ...(queueSlots === undefined ? {} : { queueSlots }) });
  } catch (error) {
    if (error instanceof GatewayListenError) return fail(error.message, 1);
    // A tokenizer folder that cannot load, or an upstream that is this gateway itself.
    if (error instanceof TokenizerLoadError || error instanceof GatewayConfigError) return fail(error.message);
    throw error;
  }
  /** The reloads under way, one after another (each waits for a DNS lookup of its upstreams: a later one must not end first). */
  let reloads = Promise.resolve();
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) {
        process.stderr.write(`${said()}: ${signal} again, exiting now\n`);
        resolve(1);
        process.exit(1);
      }
      stopping = true;
      process.stderr.write(`${said()}: ${signal}: finishing in-flight requests (up to ${deadline} s)\n`);
      void gateway.close(deadline * 1000).then(() => resolve(0));
    };
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));
    // SIGHUP: read the file again and move to its upstreams. A worker moves to the text its primary read and sent.
    const reload = (read?: ReadText) => {
      if (stopping) return; // shutting down: nothing to reload into
      if (file === undefined) process.stderr.write(`${said()}: SIGHUP: no --config file to reload\n`);
      else reloads = reloads.then(() => moveTo(gateway, flags, share, file.name, read, "SIGHUP"));
    };
    if (siblings === undefined) process.on("SIGHUP", () => reload());
    if (siblings !== undefined) {
      // A worker: the primary sends links to the siblings (or relays their changes) and its signals; it prints the URL once all listen.
      process.on("message", (m: unknown, handle: unknown) => {
        if (siblings.links!.receive(m, handle)) return;
        if (overflow!.receive(m, handle)) return;
        if (handle instanceof Socket) handle.destroy(); // only a link or a connection comes with a handle
        if (workerMetrics?.receive(m) === true) return;
        if (lending?.receive(m) === true) return;
        if (queueSlots?.receive(m) === true) return;
        if (!isControl(m)) siblings.receive(m);
        else if (m.action === "reload") reload(m.text === undefined ? undefined : { text: m.text, files: m.files ?? [] });
        else if (!stopping) stop("the primary's stop");
      });
      toPrimary({ type: LISTENING_MESSAGE, url: gateway.url });
      return;
    }
    // The URL on a line of its own, whatever the log format, for scripts to read;
    // printed once the signal handlers are in place, so a signal sent on reading it is handled.
    process.stdout.write(`${gateway.url}\n`);
  });
}

/** The flags of `adp-router-gateway serve`. */
/** Options whose value is a number, which a user may write negative (the check then names its bounds). */
const NUMBER_OPTIONS = new Set(["--workers", "--port", "--shutdown-deadline"]);

/**
 * `args` with `--workers -1` written `--workers=-1`: parseArgs refuses a
 * value that starts with "-" as ambiguous, where serve's own check says what
 * the option takes.
 */
function negativeValuesJoined(args: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const next = args[i + 1];
    if (NUMBER_OPTIONS.has(args[i]!) && next !== undefined && /^-\d/.test(next)) {
      out.push(`${args[i]}=${next}`);
      i++;
    } else out.push(args[i]!);
  }
  return out;
}

function parse(args: string[]) {
  return parseArgs({
    args: negativeValuesJoined(args),
    options: {
      config: { type: "string" },
      upstream: { type: "string", multiple: true },
      prefill: { type: "string", multiple: true },
      decode: { type: "string", multiple: true },
      disaggregation: { type: "string" },
      host: { type: "string" },
      port: { type: "string" },
      policy: { type: "string" },
      "log-level": { type: "string" },
      tokenizer: { type: "string" },
      sync: { type: "string" },
      "replica-id": { type: "string" },
      "shutdown-deadline": { type: "string" },
      "allow-unreachable": { type: "boolean" },
      workers: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
    allowPositionals: false,
    strict: true,
  });
}
