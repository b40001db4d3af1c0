// How many requests one process may hold waiting for room. limits.queue_size
// is the gateway's: one process holds all of it (`fixedSlots`); the workers of
// `serve --workers N` hold none of their own, and ask their primary for slots
// when a request would wait past the room their upstreams have
// (workers/queue-lending.ts), so that the gateway as a whole turns away the
// same requests one process would: the first queue_size to wait are held,
// whichever worker their clients reach, and no more.

import type { GatewayConfig } from "../config/config.js";

/** The slots of limits.queue_size one process holds, and how it asks for more. */
export interface QueueSlots {
  /** Whether it asks for more slots (a worker of `--workers N`); one process holds the whole queue_size and never asks. */
  readonly lends: boolean;
  /** Requests this process may hold waiting past the room its upstreams have now. */
  held(): number;
  /**
   * Asks for `n` more slots; `answer` is called once with how many it got
   * (0 to n, counted in held() from then), or 0 when no answer came in time.
   */
  ask(n: number, answer: (granted: number) => void): void;
  /** Requests waiting past the room now: the slots held beyond them go back. */
  using(n: number): void;
}

/** One process's slots: the configured queue_size, never lent. */
export const fixedSlots = (config: GatewayConfig): QueueSlots => ({ lends: false, held: () => config.limits.queueSize, ask: (_n, answer) => answer(0), using: () => {} });
