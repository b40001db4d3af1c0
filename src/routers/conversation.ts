// TensorRT-LLM's ConversationAwareADPRouter (reference §5): explicit first turns,
// then sticky conversations under the hard cap, and a placement policy
// (round_robin, least_queued, least_tokens) under the soft cap for everything
// else. Pure bookkeeping over a handful of ranks, so it stays in TypeScript.

import type { Batch, BatchRequest } from "../batch.js";
import type { AttentionDpConfig, NewConversationPlacement } from "../config.js";
import { ConversationMap } from "../conversation-map.js";
import { expectedPerRank, Placements, relaxKeyB, strictFirst } from "./shared.js";
import type { Decision, RoutingPolicy } from "./types.js";

/** The conversation-affinity router; keeps the conversation map and the cursor between batches. */
export class ConversationRouter implements RoutingPolicy {
  readonly kind = "conversation" as const;
  readonly #numRanks: number;
  readonly #multiplier: number;
  readonly #placement: NewConversationPlacement;
  readonly conversations: ConversationMap;
  /** The rotating rank cursor of round_robin and least_tokens. */
  cursor = 0;

  constructor(numRanks: number, config: AttentionDpConfig) {
    this.#numRanks = numRanks;
    this.#multiplier = Math.max(1.0, config.kvCacheRoutingFairShareMultiplier);
    this.#placement = config.kvCacheRoutingNewConvPlacement;
    this.conversations = new ConversationMap(Math.max(1, config.kvCacheRoutingMaxSessions));
  }

  route(batch: Batch, explain = false): Decision {
    const { counts, cap } = batch;
    const tp = this.#numRanks;
    const map = this.conversations;
    const placements = new Placements(tp, batch.requests.length, explain);
    const remaining: BatchRequest[] = [];
    const phaseOneTokens = new Array<number>(tp).fill(0);

    for (const req of strictFirst(batch.requests, relaxKeyB)) {
      const key = req.conversationKey;
      const t = req.rank;
      if (key !== null && map.peek(key) !== undefined) {
        remaining.push(req);
      } else if (t !== null && counts[t]! < cap) {
        counts[t]!++;
        placements.place(req, t, "explicit", key === null ? undefined : { conversation: key });
        phaseOneTokens[t]! += req.numTokens;
        if (key !== null) map.record(key, t);
      } else {
        remaining.push(req);
      }
    }

    const tokenLoad = batch.tokens;
    for (let r = 0; r < tp; r++) tokenLoad[r]! += phaseOneTokens[r]!;
    const soft = expectedPerRank(counts, remaining.length, this.#multiplier, cap);

    const leastQueued = (): number => {
      const anyUnder = counts.some((c) => c < soft);
      let best = -1;
      for (let r = 0; r < tp; r++) {
        if (anyUnder && counts[r]! >= soft) continue;
        if (best < 0 || counts[r]! < counts[best]!) best = r;
      }
      return best;
    };
    const nextRoundRobin = (): number => {
      for (let i = 0; i < tp; i++) {
        const r = this.cursor % tp;
        this.cursor = (this.cursor + 1) % tp;
        if (counts[r]! < soft) return r;
      }
      return leastQueued();
    };
    const leastTokens = (): number => {
      const anyUnder = counts.some((c) => c < soft);
      let best = -1;
      let bestTurn = 0;
      for (let r = 0; r < tp; r++) {
        if (anyUnder && counts[r]! >= soft) continue;
        const turn = (((r - this.cursor) % tp) + tp) % tp;
        if (
          best < 0 ||
          tokenLoad[r]! < tokenLoad[best]! ||
          (tokenLoad[r] === tokenLoad[best] && (counts[r]! < counts[best]! || (counts[r] === counts[best] && turn < bestTurn)))
        ) {
          best = r;
          bestTurn = turn;
        }
      }
      this.cursor = (best + 1) % tp;
      return best;
    };
    const place = this.#placement === "least_queued" ? leastQueued : this.#placement === "least_tokens" ? leastTokens : nextRoundRobin;

    for (const req of remaining) {
      const key = req.conversationKey;
      let rank = -1;
      const home = key === null ? undefined : map.peek(key);
      if (home !== undefined && counts[home]! < cap) {
        rank = home;
        map.record(key!, home);
        placements.place(req, rank, "sticky", { conversation: key! });
      } else {
        rank = place();
        if (key !== null && home === undefined) map.record(key, rank);
        if (home !== undefined) placements.place(req, rank, "overflow", { conversation: key!, home });
        else placements.place(req, rank, "placed", key === null ? undefined : { conversation: key });
      }
      counts[rank]!++;
      tokenLoad[rank]! += req.numTokens;
    }

    let most = soft;
    for (let r = 0; r < tp; r++) if (counts[r]! > most) most = counts[r]!;
    return placements.decide(this.kind, most, batch.requests);
  }
}
