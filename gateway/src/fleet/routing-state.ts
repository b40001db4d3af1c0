// The gateway's routing state (the router: its conversations, its tie-break
// generator, its cache view of every upstream) and the only door through
// which it changes. Every change is one entry of a state log, in order:
// because routing is deterministic, a replica that applies the same entries
// from the same start holds the same state, byte for byte (the seam many
// gateway replicas will share their state through). What each upstream's
// cache holds comes from the gateway's own placements or, through an index
// update source, from the engine itself (its KV-cache events).

import type { RouteInput, RouteRequest, TokenIds } from "adp-router";
import type { KvEventsResult, PrefixNamespace } from "adp-router";
import { bindConversation, restoreRouter, type Router } from "adp-router";
import type { RouteResult } from "adp-router";
import type { EngineViews, EngineViewShape } from "../events/engine-views.js";
import type { IndexUpdate, IndexUpdateSource } from "../events/index-update.js";

export type { IndexUpdate, IndexUpdateSource };

/** One change to the routing state, as the state log carries it. */
export type StateEntry =
  /** A batch routed (it moves conversations, the tie-break generator and the counters). */
  | { readonly op: "route"; readonly input: RouteInput }
  /** A conversation (or sub-agent) went to an upstream: its next turns go there too (under conversation affinity). */
  /** (`rank`: on that DP rank of the upstream, which phase 2 chose.) */
  | { readonly op: "bind"; readonly key: string; readonly upstream: number; readonly rank?: number }
  /** Another replica's learned prompt, as its block hashes (PrefixIndex.blockHashes): the same change as `learn`. */
  | { readonly op: "learn-blocks"; readonly upstream: number; readonly hashes: Uint32Array; readonly namespace: PrefixNamespace; readonly rank?: number }
  /** An upstream was given a prompt: its cache view now holds it (and, with `rank`, that DP rank's view in phase 2). */
  /** (`hashes`: its block hashes, made once for the index and the log's readers, when a log listens.) */
  | { readonly op: "learn"; readonly upstream: number; readonly tokens: TokenIds; readonly namespace: PrefixNamespace; readonly rank?: number; readonly hashes?: Uint32Array }
  /** An engine's own KV-cache events for an upstream (TensorRT-LLM's or vLLM's, see PrefixIndex.applyKvEvents), from one DP rank's stream or naming their ranks. */
  | { readonly op: "kv-events"; readonly upstream: number; readonly events: unknown; readonly dpRank?: number; readonly id?: string }
  /** An upstream's engine view emptied, one DP rank or all (its engine restarted, or its events cannot be trusted). */
  | { readonly op: "clear"; readonly upstream: number; readonly dpRank?: number; readonly id?: string }
  /** The fleet changed: rank i is the old rank `ranks[i]`, or new when null; `shapes` are the new upstreams' engine views. */
  | { readonly op: "ranks"; readonly ranks: readonly (number | null)[]; readonly shapes?: readonly (EngineViewShape | null)[]; readonly urls?: readonly string[] };

/**
 * Where state changes go, in order. `append` runs synchronously, right after
 * the change it records and before anything else can see it; it must copy
 * what it keeps (token arrays are reused once it returns).
 */
export interface StateLog {
  append(entry: StateEntry): void;
}

/** Where the routing state learns each upstream's engine's own view (both or neither). */
export interface EngineFeeds {
  /** The engine views. */
  readonly views: EngineViews;
  /** Which upstreams' event streams are live now (the others' matches come from the gateway's own view). */
  readonly live: () => readonly boolean[];
}

/** Where another replica's phase-2 placements go: an upstream's own DP ranks' views and conversations (fleet/rank-routing.ts). */
export interface RankPlacements {
  learnBlocks(rank: number, hashes: Uint32Array, namespace: PrefixNamespace): void;
  bind(key: string, rank: number): void;
}

/**
 * `req` with its prefix matches, field by field. Not `{ ...req, prefixMatches }`:
 * V8 11 (Node 20) gives each object made by a spread and then a key the source
 * lacks a hidden class of its own, so every request routed made one (7,993 in
 * bench:peers' 8,000) and every function reading requests went megamorphic or
 * was deoptimized again.
 */
export function withPrefixMatches(req: RouteRequest, prefixMatches: Uint32Array): RouteRequest {
  // Every key of RouteRequest, or this does not compile: a field added there is not dropped here.
  const out: { [K in keyof Required<RouteRequest>]: RouteRequest[K] } = {
    id: req.id,
    tokens: req.tokens,
    numTokens: req.numTokens,
    schedulingParams: req.schedulingParams,
    attentionDpRank: req.attentionDpRank,
    attentionDpRelax: req.attentionDpRelax,
    subagentAffinityId: req.subagentAffinityId,
    conversationId: req.conversationId,
    loraTaskId: req.loraTaskId,
    cacheSalt: req.cacheSalt,
    prefixMatches,
    blockKeys: req.blockKeys,
  };
  return out;
}

/** Whether a request's token ids are a typed array the index takes as they are (TokenIds), not a plain array. */
const isTokenIds = (tokens: unknown): tokens is TokenIds => tokens instanceof Uint32Array || tokens instanceof Uint8Array;

/** The router, changed only through entries of the state log. */
export class RoutingState {
  #router: Router;
  readonly #log: StateLog | null;
  readonly #feeds: EngineFeeds | null;
  /**
   * Each upstream's phase 2, for entries that name a DP rank (the fleet sets
   * it; a replica's mirror of the stream has none: it keeps no phase 2).
   */
  rankPlacements: ((upstream: number) => RankPlacements | null) | null = null;
  /** While set, changes are not logged (another replica's entries, which came from the log). */
  #quiet = false;
  /** The last batch routed, kept only so that its objects' hidden classes outlive mark-compacts (see lastBody in requests/openai.ts). */
  #lastBatch: readonly unknown[] | null = null;

  constructor(router: Router, log: StateLog | null = null, feeds: EngineFeeds | null = null) {
    this.#router = router;
    this.#log = log;
    this.#feeds = feeds;
  }

  /** Logs a change (unless applying one that came from the log). */
  #append(entry: StateEntry): void {
    if (!this.#quiet) this.#log?.append(entry);
  }

  /** The engine views, or null when no upstream publishes events. */
  get views(): EngineViews | null {
    return this.#feeds?.views ?? null;
  }

  /** The router as it is now (a fleet change replaces it). */
  get router(): Router {
    return this.#router;
  }

  /**
   * Routes a batch. With engine views, each request with tokens is routed on
   * its upstreams' matches (a live stream's from its engine's view, the others'
   * from the gateway's own), which the logged input carries: replaying the
   * log makes the same decisions whatever the streams did. Without them, a
   * request's prompt is hashed once here: its matches in the gateway's own
   * view come from its block hashes (the input carries them, as the router's
   * own probe of the same blocks would give them), and `hashes[i]` hands
   * request i's hashes to `learn` (null where none were made). A batch the
   * router refuses changes nothing and is not logged.
   */
  route(input: RouteInput): { readonly result: RouteResult; readonly hashes: readonly (Uint32Array | null)[] } {
    const hashes: (Uint32Array | null)[] = new Array<Uint32Array | null>(input.requests.length).fill(null);
    const routed = this.#withMatches(input, hashes);
    const result = this.#router.route(routed);
    this.#lastBatch = [input, routed, result]; // their maps outlive mark-compacts (see lastBody in requests/openai.ts)
    this.#append({ op: "route", input: routed });
    return { result, hashes };
  }

  /** `input` with each request's prefix matches filled: from the engine views when any stream is live, else from the learned view by block hashes (kept in `hashes`). */
  #withMatches(input: RouteInput, hashes: (Uint32Array | null)[]): RouteInput {
    const feeds = this.#feeds;
    const learned = this.#router.prefixIndex;
    if (learned === null) return input;
    const numRanks = input.rankStates.length;
    const tpb = learned.tokensPerBlock;
    const live = feeds === null || !feeds.views.any ? null : feeds.live();
    if (live !== null && live.includes(true)) {
      const requests = input.requests.map((req): RouteRequest => {
        const tokens = req.tokens;
        if (tokens === undefined || req.prefixMatches !== undefined || tokens.length <= tpb) return req;
        const all = isTokenIds(tokens) ? tokens : Uint32Array.from(tokens);
        const matches = new Uint32Array(numRanks);
        feeds!.views.matchInto(matches, all.subarray(0, all.length - 1), { loraTaskId: req.loraTaskId ?? null, cacheSalt: req.cacheSalt ?? null }, learned, live);
        return withPrefixMatches(req, matches);
      });
      return { ...input, requests };
    }
    let requests: RouteRequest[] | null = null;
    input.requests.forEach((req, i) => {
      const tokens = req.tokens;
      // The router's probe: the full blocks of all tokens but the last.
      const probe = isTokenIds(tokens) && req.prefixMatches === undefined ? Math.floor((tokens.length - 1) / tpb) : 0;
      if (probe <= 0) return;
      const blocks = learned.blockHashes(tokens as TokenIds);
      const matches = new Uint32Array(numRanks);
      learned.matchHashesInto(matches, blocks, probe, { loraTaskId: req.loraTaskId ?? null, cacheSalt: req.cacheSalt ?? null });
      hashes[i] = blocks;
      (requests ??= input.requests.slice())[i] = withPrefixMatches(req, matches);
    });
    return requests === null ? input : { ...input, requests };
  }

  /**
   * What each upstream holds of a prompt (all its tokens but the last), as
   * routing sees it: a live stream's by its engine's view (its best DP rank),
   * the others' by the gateway's own placements.
   */
  upstreamMatches(tokens: TokenIds, namespace: PrefixNamespace): Uint32Array {
    const learned = this.#router.prefixIndex;
    const out = new Uint32Array(this.#router.numRanks);
    if (learned === null) return out;
    const probe = tokens.subarray(0, Math.max(tokens.length - 1, 0));
    const feeds = this.#feeds;
    const live = feeds === null || !feeds.views.any ? null : feeds.live();
    if (live === null || !live.includes(true)) learned.matchInto(out, probe, namespace);
    else feeds!.views.matchInto(out, probe, namespace, learned, live);
    return out;
  }

  /**
   * Records that conversation `key` is on `upstream` (where its request really
   * went), when the router keeps conversations; logged then only.
   */
  bind(key: string, upstream: number, rank?: number): void {
    // With a rank the binding is phase 2's too (its router may keep conversations when phase 1's does not).
    const kept = bindConversation(this.#router, key, upstream);
    if (rank !== undefined) this.rankPlacements?.(upstream)?.bind(key, rank);
    if (kept || rank !== undefined) this.#append({ op: "bind", key, upstream, ...(rank === undefined ? {} : { rank }) });
  }

  /**
   * Teaches `upstream`'s cache view a prompt; returns the tokens it held of it
   * before. `rank`: the DP rank phase 2 placed it on (which learned it itself;
   * the entry tells the other replicas).
   */
  learn(upstream: number, tokens: TokenIds, namespace: PrefixNamespace, rank?: number, blocks?: Uint32Array | null): number {
    const index = this.#router.prefixIndex;
    if (index === null || tokens.length === 0) return 0;
    // Hashed once: by route(), or here when a log's readers want the prompt as its block hashes (the same change as inserting its tokens).
    if (blocks == null && (this.#log === null || this.#quiet)) return index.insert(upstream, tokens, namespace);
    const hashes = blocks ?? index.blockHashes(tokens);
    const held = index.insertBlockHashes(upstream, hashes, namespace);
    if (this.#log === null || this.#quiet) return held;
    this.#append({ op: "learn", upstream, tokens, hashes, namespace, ...(rank === undefined ? {} : { rank }) });
    return held;
  }

  /**
   * What `upstream`'s engine would reuse of a prompt by its own view (its best
   * DP rank's match of all tokens but the last), or null when its event
   * stream is not live (the caller then counts the gateway's own view).
   */
  engineMatch(upstream: number, tokens: TokenIds, namespace: PrefixNamespace): number | null {
    const feeds = this.#feeds;
    if (feeds === null || feeds.views.view(upstream) === null || feeds.live()[upstream] !== true) return null;
    return feeds.views.bestMatch(upstream, tokens.subarray(0, Math.max(tokens.length - 1, 0)), namespace);
  }

  /**
   * What each DP rank of `upstream`'s engine would reuse of a prompt by its own
   * view (all tokens but the last), as a function of the prompt, or null when
   * its event stream is not live or its view is not one rank per DP rank (`ranks`).
   */
  engineRankMatcher(upstream: number, ranks: number): ((tokens: TokenIds, namespace: PrefixNamespace) => Uint32Array) | null {
    // Asked once a batch: whether the stream is live is the same for all its requests.
    const feeds = this.#feeds;
    const view = feeds?.views.view(upstream) ?? null;
    if (feeds === null || view === null || view.numRanks !== ranks || feeds.live()[upstream] !== true) return null;
    return (tokens, namespace) => {
      const out = new Uint32Array(ranks);
      view.matchInto(out, tokens.subarray(0, Math.max(tokens.length - 1, 0)), namespace);
      return out;
    };
  }

  /** Teaches `upstream`'s cache view a prompt given as its block hashes (another replica's learn). */
  learnBlocks(upstream: number, hashes: Uint32Array, namespace: PrefixNamespace, rank?: number): void {
    const index = this.#router.prefixIndex;
    if (index === null || hashes.length === 0) return;
    index.insertBlockHashes(upstream, hashes, namespace);
    if (rank !== undefined) this.rankPlacements?.(upstream)?.learnBlocks(rank, hashes, namespace);
    this.#append({ op: "learn-blocks", upstream, hashes, namespace, ...(rank === undefined ? {} : { rank }) });
  }

  /** Applies an update from `upstream`'s index update source to its engine view; returns what came of its events (null for a clear, or without a view). */
  update(upstream: number, update: IndexUpdate): KvEventsResult | null {
    const views = this.#feeds?.views;
    if (views === undefined || views.view(upstream) === null) return null;
    const dpRank = update.dpRank;
    if (update.kind === "cleared") {
      views.clear(upstream, dpRank);
      this.#append({ op: "clear", upstream, ...(dpRank === undefined ? {} : { dpRank }), ...(update.id === undefined ? {} : { id: update.id }) });
      return null;
    }
    const result = views.apply(upstream, update.events, dpRank);
    this.#append({ op: "kv-events", upstream, events: update.events, ...(dpRank === undefined ? {} : { dpRank }), ...(update.id === undefined ? {} : { id: update.id }) });
    return result;
  }

  /** Starts over from a router snapshot (a replica's first state, from the cluster's snapshot); not logged. */
  restore(bytes: Uint8Array): void {
    const next = restoreRouter(bytes);
    this.#router.prefixIndex?.dispose();
    this.#router = next;
  }

  /**
   * Moves to a new set of ranks (see restoreRouter's `ranks`). Throws, changing
   * nothing, when the router cannot move (its index would not fit its budget).
   */
  moveRanks(ranks: readonly (number | null)[], shapes?: readonly (EngineViewShape | null)[], urls?: readonly string[]): void {
    const next = restoreRouter(this.#router.snapshot(), { ranks });
    this.#router = next;
    if (shapes !== undefined) this.#feeds?.views.move(ranks, shapes);
    this.#append({ op: "ranks", ranks, ...(shapes === undefined ? {} : { shapes }), ...(urls === undefined ? {} : { urls }) });
  }

  /** Applies an entry that came from the shared log (another replica's change): the same change, not logged again. */
  applyQuietly(entry: StateEntry): void {
    this.#quiet = true;
    try {
      this.apply(entry);
    } finally {
      this.#quiet = false;
    }
  }

  /** Applies an entry of another replica's log (the same change, and logged here too). */
  apply(entry: StateEntry): void {
    switch (entry.op) {
      case "route":
        // As logged: its matches were filled (or not) when it was routed, whatever the streams and views say now.
        this.#router.route(entry.input);
        this.#append(entry);
        break;
      case "learn":
        this.learn(entry.upstream, entry.tokens, entry.namespace, entry.rank);
        break;
      case "learn-blocks":
        this.learnBlocks(entry.upstream, entry.hashes, entry.namespace, entry.rank);
        break;
      case "bind":
        this.bind(entry.key, entry.upstream, entry.rank);
        break;
      case "kv-events":
        this.update(entry.upstream, { kind: "kv-events", events: entry.events, ...(entry.dpRank === undefined ? {} : { dpRank: entry.dpRank }) });
        break;
      case "clear":
        this.update(entry.upstream, { kind: "cleared", ...(entry.dpRank === undefined ? {} : { dpRank: entry.dpRank }), ...(entry.id === undefined ? {} : { id: entry.id }) });
        break;
      case "ranks":
        this.moveRanks(entry.ranks, entry.shapes, entry.urls);
        break;
    }
  }
}
