// A request waiting for an upstream in the scheduler's queue (scheduler.ts):
// what routing reads of it, and how its wait ends, once.

import { HttpError, type RoutedRequest } from "../requests/openai.js";
import type { Hangup } from "./hangup.js";
import type { Upstream } from "./upstream.js";
import type { TokenIds } from "adp-router";

/** Now, in ms since the epoch to a fraction of a ms: workers compare their requests' arrivals by it (ms ties would be many). */
export const epochNow = (): number => performance.timeOrigin + performance.now();

/** What a waiting request tells the scheduler that queues it. */
export interface WaitingOwner {
  /** `w` was answered (placed, refused, timed out, or its client left). */
  settled(w: Waiting): void;
}

/** Where a request was placed, and how many of its prompt's tokens the prefix index holds there. */
export interface Placement {
  readonly upstream: Upstream;
  readonly matchedTokens: number;
  /** The upstream's own DP rank phase 2 chose (sent as X-Data-Parallel-Rank), or null: the engine's balancer picks. */
  readonly rank: number | null;
}

/**
 * A request waiting for an upstream: what routing reads of it (not the
 * request itself, which holds more), and how its wait ends, once (placed,
 * refused, timed out, or its client left). One object a request: its
 * settling and its hang-up listener are methods, not closures.
 */
export class Waiting {
  readonly id: number;
  readonly conversationId: string | null;
  readonly subagentId: string | null;
  /** Its prompt's namespace in the prefix index (LoRA task and cache salt). */
  readonly namespace: { readonly loraTaskId: number | null; readonly cacheSalt: string | null };
  /** Its prompt's token ids. */
  readonly tokens: TokenIds;
  readonly enqueuedAt: number;
  /** Whether it was already answered (placed, timed out, or its client left). */
  done = false;
  /** Whether it was taken into the queue (counted in `queued`). */
  admitted = false;
  /** Whether its worker holds it while it asks for a queue slot (counted in the scheduler's `#holding`). */
  held = false;
  /** Whether it waits, with no queue slot, for a unit of the cap a sibling leaves unused (counted in the scheduler's `#unslotted`). */
  unslotted = false;
  /** Whether its worker asked its primary for a slot a second time, its wait for a unit over (it is answered 429 if none then). */
  reasked = false;
  /** Its queue timeout, armed only once it has to wait past its first batch (most never do). */
  timer: NodeJS.Timeout | null = null;
  /** Its prompt's block hashes, when its batch's routing made them. */
  hashes: Uint32Array | null = null;
  readonly #scheduler: WaitingOwner;
  readonly #signal: Hangup;
  #resolve: ((placement: Placement) => void) | null = null;
  #reject: ((error: HttpError) => void) | null = null;
  readonly #onAbort = () => this.reject(new HttpError(499, "the client closed the request"));

  constructor(id: number, request: RoutedRequest, subagentId: string | null, scheduler: WaitingOwner, signal: Hangup) {
    this.id = id;
    this.conversationId = request.conversationId;
    this.subagentId = subagentId;
    this.namespace = { loraTaskId: request.loraTaskId, cacheSalt: request.cacheSalt };
    this.tokens = request.tokens;
    this.enqueuedAt = epochNow();
    this.#scheduler = scheduler;
    this.#signal = signal;
  }

  /** The promise it settles, listening for its client's hang-up meanwhile. */
  wait(): Promise<Placement> {
    this.#signal.once("abort", this.#onAbort);
    return new Promise<Placement>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
  }

  resolve(placement: Placement): void {
    if (this.#settle()) this.#resolve!(placement);
  }

  reject(error: HttpError): void {
    if (this.#settle()) this.#reject!(error);
  }

  /**
   * Takes it off the queue's count once, whatever answers it, and lets go of
   * the hang-up: the signal lives as long as the response, and a listener left
   * on it would hold the request's tokens as long.
   */
  #settle(): boolean {
    if (this.done) return false;
    this.done = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.#signal.off("abort", this.#onAbort);
    this.#scheduler.settled(this);
    return true;
  }
}
