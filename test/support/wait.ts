// Polling for a condition in end-to-end tests, with a deadline that names what never happened.

/** Resolves once `condition()` holds; rejects after `ms` with `describe()` in the message. */
export async function waitFor(condition: () => boolean, describe: () => string = () => "", ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting (${describe()})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
