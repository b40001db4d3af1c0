// The routers `adp-router simulate` drives, one per gateway replica: round-robin
// (the floor) and TensorRT-LLM's routers, each with a way to take what another
// replica shares (src/simulate/replicas.ts): the prompts it placed, the
// conversations it bound.

import type { RouteRequest } from "../batch.js";
import { parseAttentionDpConfig, type AttentionDpConfigInput } from "../config.js";
import { createPrefixIndex, type PrefixIndex } from "../prefix-index.js";
import { bindConversation, createRouter, routerKindFor } from "../router.js";
import type { RouteResult } from "../routers/types.js";
import type { RouterSide } from "./engine.js";
import { EventFeed, type EventFeedCounts, type EventModel, type StreamStatus } from "./event-feed.js";

/** What a run's event streams did, and what the two views held at its end. */
export interface EventReport extends EventFeedCounts {
  /** Stored events the engine view skipped: their parent block was not in it (lost, or stored before a rebuild). */
  readonly stored_events_skipped: number;
  /** Blocks in the engine view (from events), all ranks, at the end. */
  readonly engine_view_blocks_at_end: number;
  /** Blocks in the router's own view (from placements), all ranks, at the end. */
  readonly own_view_blocks_at_end: number;
}

/** One gateway replica's router, as the engine drives it, with what it shares. */
export interface ReplicaRouter extends RouterSide {
  /** What its event feed did (null when its index learns from routing alone). */
  readonly eventCounts: (() => EventReport) | null;
  /**
   * Teaches its learned view a prompt another replica placed on `rank`, or
   * null when the policy keeps no prefix view (and so, like the gateway's
   * RoutingState.learn, makes no learn entries).
   */
  readonly learn: ((rank: number, blockKeys: readonly number[]) => void) | null;
  /**
   * Records another replica's binding of a conversation to `rank` in its
   * conversation map (bindConversation, as the gateway takes one), or null
   * when the policy keeps no conversations (and so makes no bindings).
   */
  readonly bind: ((key: string, rank: number) => void) | null;
  /**
   * Called with every engine batch it applies to its engine view (its own
   * subscription: delivered or replayed), which the gateway republishes as a
   * kv-events entry. Set by whoever counts those entries.
   */
  onEngineBatch: ((events: unknown) => void) | null;
}

/** The floor: rotate over ranks with room, ignoring load and cache. */
export function roundRobin(ranks: number): ReplicaRouter {
  let cursor = 0;
  return {
    discountCached: false,
    eventCounts: null,
    learn: null,
    bind: null,
    onEngineBatch: null,
    route(states, cap, requests) {
      const counts = states.map((s) => s.numActiveRequests);
      return requests.map(() => {
        for (let k = 0; k < ranks; k++) {
          const r = (cursor + k) % ranks;
          if (counts[r]! < cap) {
            counts[r]!++;
            cursor = (r + 1) % ranks;
            return r;
          }
        }
        return -1;
      });
    },
  };
}

/** Each request's rank in `result` (-1 where it was not placed), in request order. */
function ranksOf(result: RouteResult, requests: readonly RouteRequest[]): number[] {
  const rankOf = new Map<number, number>();
  result.assignments.forEach((ids, rank) => ids.forEach((id) => rankOf.set(Number(id), rank)));
  return requests.map((r) => rankOf.get(Number(r.id)) ?? -1);
}

/**
 * The router of `policy` (anything but round_robin) for one replica; policy
 * "config" is the router `config` selects, as it is. With
 * engine events (`eventModel` set) the KV-cache-aware router works as the
 * gateway does: its prefix index is the engine view, fed by an
 * {@link EventFeed}; it also keeps its own view, learned from every
 * placement (its own, and the others' learn entries); and a rank whose stream
 * is not live (gapped or stale) is matched on that own view.
 */
export function adpRouter(policy: string, ranks: number, blockTokens: number, config: AttentionDpConfigInput | undefined, eventModel: EventModel | null): ReplicaRouter {
  let attentionDp: AttentionDpConfigInput = {};
  if (policy === "config") attentionDp = config ?? {}; // the router the config selects, exactly as TensorRT-LLM builds it
  else if (policy === "kv_cache_aware") attentionDp = { ...config, enable_kv_cache_aware_routing: true, kv_cache_routing_conversation_affinity: false };
  else if (policy.startsWith("conversation:")) {
    attentionDp = { kv_cache_routing_conversation_affinity: true, kv_cache_routing_new_conv_placement: policy.slice(13) as never };
  }
  const kv = routerKindFor(parseAttentionDpConfig(attentionDp)) === "kv_cache_aware";
  const events = eventModel !== null;
  const router = createRouter({
    numRanks: ranks,
    attentionDp,
    ...(kv ? { prefixIndex: { tokensPerBlock: blockTokens }, learnFromRouting: !events } : {}),
  });
  const bind = router.kind === "conversation" ? (key: string, rank: number) => void bindConversation(router, key, rank) : null;
  const routeBatch: RouterSide["route"] = (states, cap, requests) => ranksOf(router.route({ rankStates: states, maxNumActiveRequests: cap, requests }), requests);
  const engineView = router.prefixIndex;
  const discountCached = router.kind === "kv_cache_aware";
  if (engineView === null) return { discountCached, route: routeBatch, eventCounts: null, learn: null, bind, onEngineBatch: null };
  if (!events) {
    // Learning from routing: the router's index is the learned view, and another replica's placement is learned into it too.
    return { discountCached, route: routeBatch, eventCounts: null, learn: (rank, keys) => engineView.insertBlocks(rank, keys), bind: null, onEngineBatch: null };
  }

  const ownView = createPrefixIndex({ numRanks: ranks, tokensPerBlock: blockTokens });
  const side: ReplicaRouter = {
    discountCached,
    onEngineBatch: null,
    bind: null,
    learn: (rank, keys) => ownView.insertBlocks(rank, keys),
    eventCounts: () => ({
      ...feed.counts(),
      stored_events_skipped: engineView.stats().kvEvents.unknownParent,
      engine_view_blocks_at_end: sumBlocks(engineView, ranks),
      own_view_blocks_at_end: sumBlocks(ownView, ranks),
    }),
    route(states, cap, requests, nowMs) {
      feed.deliverDue(nowMs);
      const status = Array.from({ length: ranks }, (_, r) => feed.status(r, nowMs));
      // All live: the router probes the engine view itself. Otherwise each
      // request brings its matches, rank by rank from the view that rank is trusted on.
      const routed = status.every((s) => s === "live") ? requests : requests.map((req) => withMatches(req, status, engineView, ownView));
      const placed = routeBatch(states, cap, routed, nowMs);
      placed.forEach((rank, i) => {
        if (rank < 0) return;
        feed.placed(rank, status[rank]!);
        ownView.insertBlocks(rank, requests[i]!.blockKeys!); // the gateway learns every placement
      });
      return placed;
    },
    publish: (rank, e, atMs) => feed.publish(rank, e, atMs),
  };
  const feed = new EventFeed(ranks, eventModel, {
    applyKvEvents: (e) => {
      engineView.applyKvEvents(e);
      side.onEngineBatch?.(e);
    },
    clearRank: (r) => engineView.clearRank(r),
  });
  return side;
}

/**
 * `req` with its matched tokens per rank: the engine view's for live ranks,
 * the router's own view's for the others, over the blocks the router's own
 * probe covers (every full block of the prompt but its last token).
 */
function withMatches(req: RouteRequest, status: readonly StreamStatus[], engineView: PrefixIndex, ownView: PrefixIndex): RouteRequest {
  const keys = req.blockKeys as readonly number[];
  const probe = keys.slice(0, Math.min(keys.length, Math.floor(((req.numTokens ?? 0) - 1) / engineView.tokensPerBlock)));
  if (probe.length === 0) return req;
  const engine = engineView.matchBlocks(probe);
  const own = ownView.matchBlocks(probe);
  return { ...req, prefixMatches: status.map((s, r) => (s === "live" ? engine[r]! : own[r]!)) };
}

/** Blocks held by all ranks of a view. */
function sumBlocks(view: PrefixIndex, ranks: number): number {
  let n = 0;
  for (let r = 0; r < ranks; r++) n += view.blockCount(r);
  return n;
}
