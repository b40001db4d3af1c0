// `adp-router simulate --replicas N`: N gateway replicas in front of one engine,
// each with its own router (its own tie-break generator, conversation map and
// prefix views), sharing what they learn through one ordered stream, as the
// gateway's replicas do through NATS JetStream (gateway/src/replication/).
//
// Clients spread requests over the replicas round-robin in arrival order (as a
// round-robin load balancer or DNS name in front of them would): request i of
// the trace goes to replica i mod N, whatever its conversation, so a
// conversation's turns land on different replicas.
//
// Each iteration every replica routes the requests that reached it, in replica
// order, each on the engine's rank loads as the iteration began: replicas do
// not see each other's placements of the same iteration (which is how replicas
// herd onto the rank that looks emptiest).
//
// The entries are the gateway's (gateway/src/fleet/scheduler.ts, RoutingState): every
// placement by a router with a prefix view is a learn entry (the prompt, on the
// rank it went to), and every placement of a conversation's request by a
// conversation-affinity router is a binding (the conversation is on that rank).
// A replica's router takes its own placements at once, as TensorRT-LLM's router
// does, and the others' entries `delayMs` later, in one order (entry time,
// then replica, then the replica's own order), like a stream: an entry made
// during an iteration reaches the others at the earliest in the next one. A
// binding that arrives is recorded whatever the replica had bound (the gateway's
// RoutingState.bind), so the latest binding to arrive holds. With
// `sync: "none"` replicas never see each other's entries.
//
// Engine KV events reach every replica by its own subscription (replica k's
// link loses its own batches: it draws with seed + k). The gateway republishes
// each batch it ingests as a kv-events entry named by the batch's identity, and
// JetStream keeps the first copy: one entry a batch, counted here, changing no
// other replica's routing (each has the batch from its own subscription).

import type { RouteRequest } from "../batch.js";
import { AdpInputError } from "../errors.js";
import type { RouterSide } from "./engine.js";
import { bindingEntryBytes, GATEWAY_TOKENS_PER_BLOCK, kvEventsEntryBytes, learnEntryBytes } from "./entry-size.js";
import type { ReplicaRouter } from "./router-sides.js";

/** How replicas share their entries: one ordered stream, or not at all. */
export type SyncMode = "stream" | "none";

/** The replica options of `simulate`, as the caller gives them. */
export interface ReplicaOptions {
  /** Gateway replicas, each routing its share of the requests. @default 1 */
  readonly replicas?: number;
  /** `"stream"`: replicas share entries through one ordered stream; `"none"`: independent replicas. @default "stream" */
  readonly sync?: SyncMode;
  /** Simulated ms between an entry's making and its application at the other replicas (stream only). @default 5 */
  readonly syncDelayMs?: number;
}

/** The replica options' names, in the order messages list them. */
export const REPLICA_OPTION_KEYS = ["replicas", "sync", "syncDelayMs"] as const;

/** Most replicas a simulation takes (each holds its own prefix views). */
export const MAX_REPLICAS = 1024;

/**
 * The stream's delay when none is given: a JetStream publication reaches the
 * subscribers of a nearby server within a few milliseconds.
 */
export const DEFAULT_SYNC_DELAY_MS = 5;

/** The replicas of a run and how they share. */
export interface ReplicaModel {
  /** Gateway replicas. */
  readonly replicas: number;
  /** Whether they share entries. */
  readonly sync: SyncMode;
  /** Ms between an entry's making and its application elsewhere (0 with sync "none": nothing travels). */
  readonly delayMs: number;
}

/** One gateway, the model of a run given no replica options (today's simulation). */
export const SINGLE_REPLICA: ReplicaModel = Object.freeze({ replicas: 1, sync: "stream", delayMs: DEFAULT_SYNC_DELAY_MS });

/**
 * The replica model the options ask for, or null when they give none; throws
 * {@link AdpInputError} naming the first bad option. A delay with
 * `sync: "none"` is refused: it would change nothing, silently.
 */
export function readReplicaModel(options: ReplicaOptions): ReplicaModel | null {
  const { replicas = 1, sync = "stream", syncDelayMs } = options;
  if (options.replicas === undefined && options.sync === undefined && syncDelayMs === undefined) return null;
  if (typeof replicas !== "number" || !Number.isInteger(replicas) || replicas < 1 || replicas > MAX_REPLICAS) throw new AdpInputError("replicas", `must be an integer in [1, ${MAX_REPLICAS}]`, replicas);
  if (sync !== "stream" && sync !== "none") throw new AdpInputError("sync", 'must be "stream" or "none"', sync);
  if (syncDelayMs !== undefined && sync === "none") throw new AdpInputError("syncDelayMs", 'applies only with sync "stream"', syncDelayMs);
  const delayMs = syncDelayMs ?? (sync === "none" ? 0 : DEFAULT_SYNC_DELAY_MS);
  if (typeof delayMs !== "number" || !Number.isFinite(delayMs) || delayMs < 0) throw new AdpInputError("syncDelayMs", "must be a finite number of milliseconds ≥ 0", delayMs);
  return { replicas, sync, delayMs };
}

/** The model in words, for the text and HTML reports. */
export function describeReplicaModel(model: ReplicaModel): string {
  const n = model.replicas;
  if (n === 1) return `1 gateway replica${model.sync === "stream" ? ", publishing its entries to the stream" : ", sharing nothing"}`;
  const who = `${n} gateway replicas, requests spread over them round-robin in arrival order`;
  if (model.sync === "none") return `${who}, none seeing another's entries`;
  return `${who}, each taking the others' entries ${model.delayMs} ms after they were made (the next iteration at the earliest), in stream order`;
}

/** What a policy's replicas put on the stream, and what came of sharing. */
export interface SyncReport {
  /** Entries on the stream, all replicas (0 with sync "none": nothing is shared). */
  readonly entries: number;
  /** Learn entries: one per placement by a policy with a prefix view. */
  readonly learn_entries: number;
  /** Conversation bindings: one per placement of a conversation's request by a conversation-affinity policy. */
  readonly binding_entries: number;
  /** Engine KV-event batches some replica ingested and republished (one entry a batch: JetStream drops the other replicas' copies). */
  readonly kv_event_entries: number;
  /** Entries per request the replicas routed. */
  readonly entries_per_routed_request: number;
  /** Entries a second at the trace's arrival rate (over its arrival span, after the rate scale). */
  readonly entries_per_second: number;
  /** Bytes of the entries as the gateway encodes them (msgpack payload; NATS adds its framing). */
  readonly bytes: number;
  /** Bytes per request the replicas routed. */
  readonly bytes_per_routed_request: number;
  /** Bytes a second at the trace's arrival rate. */
  readonly bytes_per_second: number;
  /** Entries some replica had not yet applied when the run ended. */
  readonly entries_in_flight_at_end: number;
  /**
   * Bindings that reached a replica whose last binding of that conversation
   * (its own or another's) named another rank: its turns had been routed
   * apart, or two replicas bound it at about the same time. Counted at each replica.
   */
  readonly bindings_moved: number;
}

/** One shared change on its way through the stream. */
interface Entry {
  /** The replica that made it. */
  readonly origin: number;
  /** When the other replicas apply it. */
  readonly dueMs: number;
  /** The rank (the gateway's upstream) it names. */
  readonly rank: number;
  /** A learn entry's prompt blocks. */
  readonly blockKeys: readonly number[] | null;
  /** A binding's conversation. */
  readonly conversation: string | null;
}

/** The replicas of one policy's run as one router side for the engine, and their stream. */
export class ReplicatedSide implements RouterSide {
  /** Whether rank loads discount cached tokens (every replica runs the same policy). */
  readonly discountCached: boolean;
  /** One rank's KV events, to every replica's own subscription (absent when the policy learns from routing alone). */
  readonly publish?: (rank: number, events: unknown[], atMs: number) => void;
  /** One router per replica, in replica order. */
  readonly #routers: readonly ReplicaRouter[];
  /** How the replicas share. */
  readonly #model: ReplicaModel;
  /** Entries on their way, in stream order (one delay for all: the order they were made in). */
  readonly #stream: Entry[] = [];
  /** The next entry to deliver. */
  #head = 0;
  /** Per replica: its number for the next entry it publishes (entry ids count from 0 at each origin). */
  readonly #counters: number[];
  /** Per replica: the rank of its last binding of each conversation, its own or another's (what the gateway's router holds). */
  readonly #bound: Map<string, number>[];
  /** Engine batches already on the stream (one copy each, whichever replica republished it first). */
  readonly #batches = new WeakSet<object>();
  /** The counts of the report (see {@link SyncReport}). */
  #learn = 0;
  #bind = 0;
  #kvEvents = 0;
  #bytes = 0;
  #moved = 0;

  /** `routers`: one per replica, in replica order, all of one policy. */
  constructor(routers: readonly ReplicaRouter[], model: ReplicaModel) {
    this.#routers = routers;
    this.#model = model;
    this.#counters = routers.map(() => 0);
    this.#bound = routers.map(() => new Map());
    this.discountCached = routers[0]!.discountCached;
    if (routers[0]!.publish) {
      // Every replica subscribes to every rank's events itself.
      this.publish = (rank, events, atMs) => {
        for (const router of routers) router.publish!(rank, events, atMs);
      };
    }
    if (model.sync === "stream") {
      routers.forEach((router, k) => {
        router.onEngineBatch = (events) => {
          const counter = this.#counters[k]!++; // every replica publishes its copy
          if (this.#batches.has(events as object)) return;
          this.#batches.add(events as object);
          this.#kvEvents++;
          this.#bytes += kvEventsEntryBytes(events, counter);
        };
      });
    }
  }

  /** The replica request `req` reached: its arrival index, round-robin over the replicas. */
  replicaOf(req: RouteRequest): number {
    return Number(req.id) % this.#routers.length;
  }

  /** The engine's batch of this iteration: the entries due are applied, then each replica routes its share. */
  route(states: { numActiveRequests: number; numActiveTokens: number }[], cap: number, requests: RouteRequest[], nowMs: number): number[] {
    this.#deliverDue(nowMs);
    const n = this.#routers.length;
    const placed = new Array<number>(requests.length).fill(-1);
    if (n === 1) this.#routeAt(0, states, cap, requests, nowMs, requests.map((_, i) => i), placed);
    else {
      const shares: number[][] = Array.from({ length: n }, () => []);
      requests.forEach((req, i) => shares[this.replicaOf(req)]!.push(i));
      for (let k = 0; k < n; k++) {
        const share = shares[k]!;
        if (share.length > 0) this.#routeAt(k, states, cap, share.map((i) => requests[i]!), nowMs, share, placed);
      }
    }
    return placed;
  }

  /** Replica `k` routes `requests` (at positions `at` of the engine's batch) on the iteration's loads and publishes its entries. */
  #routeAt(k: number, states: { numActiveRequests: number; numActiveTokens: number }[], cap: number, requests: RouteRequest[], nowMs: number, at: number[], placed: number[]): void {
    const router = this.#routers[k]!;
    const ranks = router.route(states, cap, requests, nowMs);
    ranks.forEach((rank, i) => (placed[at[i]!] = rank));
    if (this.#model.sync === "none") return;
    const dueMs = nowMs + this.#model.delayMs;
    ranks.forEach((rank, i) => {
      if (rank < 0) return;
      const req = requests[i]!;
      // In the gateway's order: the prompt learned, then the conversation bound (Scheduler#place).
      if (router.learn !== null) {
        this.#learn++;
        this.#bytes += learnEntryBytes(Math.floor((req.numTokens ?? 0) / GATEWAY_TOKENS_PER_BLOCK), this.#counters[k]!++);
        this.#stream.push({ origin: k, dueMs, rank, blockKeys: req.blockKeys as readonly number[], conversation: null });
      }
      const key = req.conversationId;
      if (router.bind !== null && key != null) {
        this.#bind++;
        this.#bytes += bindingEntryBytes(key, this.#counters[k]!++);
        this.#bound[k]!.set(key, rank);
        this.#stream.push({ origin: k, dueMs, rank, blockKeys: null, conversation: key });
      }
    });
  }

  /** Applies every entry due by `nowMs`, in stream order, at every replica but its maker. */
  #deliverDue(nowMs: number): void {
    const stream = this.#stream;
    while (this.#head < stream.length && stream[this.#head]!.dueMs <= nowMs) {
      const e = stream[this.#head++]!;
      for (let k = 0; k < this.#routers.length; k++) {
        if (k === e.origin) continue;
        if (e.conversation === null) this.#routers[k]!.learn!(e.rank, e.blockKeys!);
        else this.#applyBinding(k, e.rank, e.conversation);
      }
    }
    // Compact now and then so the stream does not grow with the run.
    if (this.#head > 4096 && this.#head * 2 > stream.length) {
      stream.splice(0, this.#head);
      this.#head = 0;
    }
  }

  /** Another replica's binding of `key` to `rank` reaches replica `k`: recorded, whatever `k` had bound. */
  #applyBinding(k: number, rank: number, key: string): void {
    const bound = this.#bound[k]!;
    const before = bound.get(key);
    if (before !== undefined && before !== rank) this.#moved++;
    bound.set(key, rank);
    this.#routers[k]!.bind!(key, rank);
  }

  /** The stream's figures for a run that routed `routed` requests whose arrivals spanned `spanMs` (after the rate scale). */
  report(routed: number, spanMs: number): SyncReport {
    const entries = this.#learn + this.#bind + this.#kvEvents;
    const perRequest = (x: number) => round(x / Math.max(routed, 1), 3);
    const perSecond = (x: number) => round(spanMs > 0 ? (1000 * x) / spanMs : 0, 2);
    return {
      entries,
      learn_entries: this.#learn,
      binding_entries: this.#bind,
      kv_event_entries: this.#kvEvents,
      entries_per_routed_request: perRequest(entries),
      entries_per_second: perSecond(entries),
      bytes: this.#bytes,
      bytes_per_routed_request: perRequest(this.#bytes),
      bytes_per_second: perSecond(this.#bytes),
      entries_in_flight_at_end: this.#stream.length - this.#head,
      bindings_moved: this.#moved,
    };
  }
}

/** `x` rounded to `digits` decimals. */
const round = (x: number, digits: number) => Number(x.toFixed(digits));
