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
