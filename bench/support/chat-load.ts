// The load the gateway benches put on a server: chat requests through one
// undici pool, a fixed number in flight, each one's latency recorded.
import type { Pool } from "undici";

/** Sends `n` chat requests (bodies from `bodyOf`) through `pool` with `concurrency` in flight; returns each one's latency (ms). Throws on any answer but 200. */
export async function sendChats(pool: Pool, n: number, concurrency: number, bodyOf: (i: number) => string): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      const started = performance.now();
      const response = await pool.request({ path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" }, body: bodyOf(i) });
      await response.body.dump();
      if (response.statusCode !== 200) throw new Error(`status ${response.statusCode}`);
      latencies.push(performance.now() - started);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return latencies;
}
