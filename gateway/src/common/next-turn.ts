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
 * The longest the event streams' work runs back to back, in ms, before they
 * let the loop turn: ZeroMQ hands a message already queued at once (a
 * microtask), so a stream that is never empty (a flood of small batches, a
 * publisher posing as an engine) would otherwise keep the loop from polling
 * its sockets: at 60,000 one-block batches a second, a chat took 82 ms
 * instead of 6 and /health 16 instead of 2 (p50).
 */
const STREAM_TURN_MS = 2;
/** When the streams' work of this turn began (null: none yet, or the loop has turned since). */
let busySince: number | null = null;
/** Ends the streams' busy spell: the loop has turned (an immediate runs after it polled). */
const turned = (): void => {
  busySince = null;
};

/**
 * Before an event stream takes its next message: null while the streams'
 * work of this turn is within STREAM_TURN_MS, else the next turn to wait for.
 * Shared by every stream of the process, as the loop they hold is.
 */
export function streamTurn(): Promise<void> | null {
  const now = performance.now();
  if (busySince === null) {
    busySince = now;
    setImmediate(turned);
    return null;
  }
  return now - busySince < STREAM_TURN_MS ? null : nextTurn();
}
