// The error a call throws, for tests that inspect it (browser-safe: no node: imports).

/** The error `fn` throws (fails if it returns). */
export function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error("expected a throw");
}
