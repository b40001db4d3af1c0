// A later turn of the event loop, for work done a step at a time (an engine
// batch's slices, a large metrics page's lines) so that requests and /health
// are served between its steps.

/**
 * A later turn of the event loop, after the I/O pending now has been served.
 * Two immediates: one set while the loop polls I/O (a message from the worker,
 * a socket's data) runs before the loop polls again, so two slices would be
 * applied back to back with no request served between them (measured: 18 ms
 * without a timer firing); the second runs after the next poll whatever phase
 * the first was set in.
 */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(() => setImmediate(resolve)));

/**
 * The longest an event stream's work runs back to back, in ms, before it lets
 * the loop turn: ZeroMQ hands a message already queued at once (a microtask),
 * so a stream that is never empty (a flood of small batches, a publisher
 * posing as an engine) would otherwise keep the loop from polling its
 * sockets: at 60,000 one-block batches a second, a chat took 82 ms instead of
 * 6 and /health 16 instead of 2 (p50).
 */
const STREAM_TURN_MS = 2;

/**
 * One event stream's share of the loop's turns. Each stream has its own (a
 * share of the process's would go to whichever stream woke first each turn,
 * the others taking one message a turn), so each takes at most
 * STREAM_TURN_MS of a turn.
 */
export class StreamTurns {
  /** When this stream's work of this turn began (null: none yet, or the loop has turned since). */
  #busySince: number | null = null;
  /** The loop has turned (an immediate set in a turn runs after it polled). */
  readonly #turned = (): void => {
    this.#busySince = null;
  };

  /** Before the stream takes its next message: null while its work of this turn is within its share, else the next turn to wait for. */
  take(): Promise<void> | null {
    const now = performance.now();
    if (this.#busySince === null) {
      this.#busySince = now;
      setImmediate(this.#turned);
      return null;
    }
    return now - this.#busySince < STREAM_TURN_MS ? null : nextTurn();
  }
}
