// The gateway's routing state (the router: its conversations, its tie-break
// generator, its cache view of every upstream) and the only door through
// which it changes. Every change is one entry of a state log, in order:
// because routing is deterministic, a replica that applies the same entries
// from the same start holds the same state, byte for byte (the seam many
// gateway replicas will share their state through). What each upstream's
// cache holds comes from the gateway's own placements or, through an index
// update source, from the engine itself (its KV-cache events).

import type { RouteInput } from "../batch.js";
import type { PrefixNamespace } from "../prefix-index.js";
import { restoreRouter, type Router } from "../router.js";
import type { RouteResult } from "../routers/types.js";
import type { FeedStatus } from "./event-freshness.js";

/** One change to the routing state, as the state log carries it. */
export type StateEntry =
  /** A batch routed (it moves conversations, the tie-break generator and the counters). */
  | { readonly op: "route"; readonly input: RouteInput }
  /** An upstream was given a prompt: its cache view now holds it. */
  | { readonly op: "learn"; readonly upstream: number; readonly tokens: Uint32Array; readonly namespace: PrefixNamespace }
  /** An engine's own KV-cache events for an upstream (TensorRT-LLM's or vLLM's, see PrefixIndex.applyKvEvents). */
  | { readonly op: "kv-events"; readonly upstream: number; readonly events: unknown }
  /** An upstream's cache view emptied (its engine restarted, or its events cannot be trusted). */
  | { readonly op: "clear"; readonly upstream: number }
  /** The fleet changed: rank i is the old rank `ranks[i]`, or new when null. */
  | { readonly op: "ranks"; readonly ranks: readonly (number | null)[] };

/**
 * Where state changes go, in order. `append` runs synchronously, right after
 * the change it records and before anything else can see it; it must copy
 * what it keeps (token arrays are reused once it returns).
 */
export interface StateLog {
  append(entry: StateEntry): void;
}

/** What an index update source hands over for its upstream. */
export type IndexUpdate = { readonly kind: "kv-events"; readonly events: unknown } | { readonly kind: "cleared" };

/**
 * Where an upstream's cache view is learned from besides the gateway's own
 * placements: an engine's KV-cache event stream. A source reports whether its
 * picture is live; while it is not, the gateway learns from its placements.
 */
export interface IndexUpdateSource {
  /** A short name for logs and metrics. */
  readonly kind: string;
  /** `live` while its updates can be trusted; `gapped` after a sequence gap it could not fill; `stale` after a silence. */
  readonly status: FeedStatus;
  /** Starts delivering updates, in order, to `emit`. */
  start(emit: (update: IndexUpdate) => void): void;
  /** Stops delivering and lets go of its connections. */
  close(): Promise<void>;
}

/** The router, changed only through entries of the state log. */
export class RoutingState {
  #router: Router;
  readonly #log: StateLog | null;

  constructor(router: Router, log: StateLog | null = null) {
    this.#router = router;
    this.#log = log;
  }

  /** The router as it is now (a fleet change replaces it). */
  get router(): Router {
    return this.#router;
  }

  /** Routes a batch. A batch the router refuses changes nothing and is not logged. */
  route(input: RouteInput): RouteResult {
    const result = this.#router.route(input);
    this.#log?.append({ op: "route", input });
    return result;
  }

  /** Teaches `upstream`'s cache view a prompt; returns the tokens it held of it before. */
  learn(upstream: number, tokens: Uint32Array, namespace: PrefixNamespace): number {
    const index = this.#router.prefixIndex;
    if (index === null || tokens.length === 0) return 0;
    const held = index.insert(upstream, tokens, namespace);
    this.#log?.append({ op: "learn", upstream, tokens, namespace });
    return held;
  }

  /** Applies an update from `upstream`'s index update source. */
  update(upstream: number, update: IndexUpdate): void {
    const index = this.#router.prefixIndex;
    if (index === null) return;
    if (update.kind === "cleared") {
      index.clearRank(upstream);
      this.#log?.append({ op: "clear", upstream });
    } else {
      index.applyKvEvents(update.events, { rank: upstream });
      this.#log?.append({ op: "kv-events", upstream, events: update.events });
    }
  }

  /**
   * Moves to a new set of ranks (see restoreRouter's `ranks`). Throws, changing
   * nothing, when the router cannot move (its index would not fit its budget).
   */
  moveRanks(ranks: readonly (number | null)[]): void {
    const next = restoreRouter(this.#router.snapshot(), { ranks });
    this.#router = next;
    this.#log?.append({ op: "ranks", ranks });
  }

  /** Applies an entry of another replica's log (the same change, and logged here too). */
  apply(entry: StateEntry): void {
    switch (entry.op) {
      case "route":
        this.route(entry.input);
        break;
      case "learn":
        this.learn(entry.upstream, entry.tokens, entry.namespace);
        break;
      case "kv-events":
        this.update(entry.upstream, { kind: "kv-events", events: entry.events });
        break;
      case "clear":
        this.update(entry.upstream, { kind: "cleared" });
        break;
      case "ranks":
        this.moveRanks(entry.ranks);
        break;
    }
  }
}
