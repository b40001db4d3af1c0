// What an engine's event source hands the routing state (fleet/routing-state.ts):
// an update of its upstream's engine view, and the source's own contract.

import type { FeedStatus } from "./event-freshness.js";

/** What an index update source hands over for its upstream (`dpRank`: the DP rank whose stream it came from, when it names none itself). */
export type IndexUpdate =
  | {
      readonly kind: "kv-events";
      readonly events: unknown;
      readonly dpRank?: number;
      /** The batch's identity, the same at every replica that receives it (replicas share one copy of it). */
      readonly id?: string;
    }
  | {
      readonly kind: "cleared";
      readonly dpRank?: number;
      /** As for events: the same at every replica that sees the engine restart (replicas share one copy of it). */
      readonly id?: string;
    };

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
  /** A request was sent to the source's engine (a stream silent while its engine works goes stale). */
  routed(): void;
  /** Stops delivering and lets go of its connections. */
  close(): Promise<void>;
}
