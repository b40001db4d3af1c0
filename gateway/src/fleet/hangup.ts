// A client's hang-up, as the steps of its request (its wait in the queue, its
// exchange with the upstream) listen for it.

/**
 * A client's hang-up, which the queue and the exchange with the upstream both
 * listen to: a flag and a short list of listeners, the part of an
 * EventEmitter they use (whose `once` wraps each listener in two more
 * objects), for a request's every step.
 */
export class Hangup {
  aborted = false;
  /** A listener on its own (a request's steps listen one after another: its queue, then its exchange), or null. */
  #first: (() => void) | null = null;
  /** The listeners after `#first`, in the order they came (null: none yet). */
  #more: (() => void)[] | null = null;

  /** Calls `listener` once, at the hang-up (`event` is always "abort"). */
  once(_event: "abort", listener: () => void): this {
    // Alone in #first only while no other listens (calls keep the order listeners came in).
    if (this.#first === null && (this.#more === null || this.#more.length === 0)) this.#first = listener;
    else (this.#more ??= []).push(listener);
    return this;
  }

  /** Stops listening. */
  off(_event: "abort", listener: () => void): this {
    const more = this.#more;
    const i = more === null ? -1 : more.lastIndexOf(listener);
    if (i >= 0) more!.splice(i, 1);
    else if (this.#first === listener) this.#first = null;
    return this;
  }

  /** How many listen now (`event` is always "abort"). */
  listenerCount(_event: "abort"): number {
    return (this.#first === null ? 0 : 1) + (this.#more?.length ?? 0);
  }

  /** Signals the hang-up once. */
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const first = this.#first;
    const more = this.#more;
    this.#first = null;
    this.#more = null;
    first?.();
    if (more !== null) for (const l of more) l();
  }
}
