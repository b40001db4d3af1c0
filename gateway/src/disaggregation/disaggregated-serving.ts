// Disaggregated serving: a request's prompt on a prefill (context) server of
// one pool, its generation on a decode (generation) server of the other, each
// pool placed by its own scheduler and router, the hand-over between them in
// the engines' protocol (protocols.ts). Both phases go through the proxy, so
// each keeps the one delivery rule: a phase goes to another server of its pool
// only when it provably never reached the first.
//
// Context first (trtllm, vllm), as TensorRT-LLM's and vLLM's front ends run it:
//   1. (trtllm, max_local_prefill_length) place on the decode pool first; a
//      prompt that server holds with at most that many tokens left is served
//      whole there;
//   2. place on the prefill pool and send the context request; its answer is
//      held (captured-answer.ts). A failure there is the client's answer
//      (a prefill server's 4xx passed through), and no decode server is ever
//      contacted;
//   3. place on the decode pool (unless step 1 did) and proxy the generation
//      request, streamed or not as the client asked.
// (context-first.ts). Paired (sglang), as SGLang's mini load balancer runs it:
// both placed first, the same body with one bootstrap room sent to both
// (paired.ts). A client that leaves aborts every phase running.

import type { TokenIds } from "adp-router";
import type { DisaggregationConfig } from "../config/config-types.js";
import { contextFirst } from "./context-first.js";
import { paired } from "./paired.js";
import type { DisaggregatedCall, DisaggregatedOutcome, Pool, Serving, Track } from "./phases.js";
import { withoutHandOff } from "./protocols.js";
import { RequestIds } from "./request-ids.js";

export type { DisaggregatedCall, DisaggregatedOutcome, Pool } from "./phases.js";

/** Serves requests over a prefill pool and a decode pool. */
export class DisaggregatedServing {
  readonly prefill: Pool;
  readonly decode: Pool;
  readonly #serving: Serving;
  readonly #release: (tokens: TokenIds) => void;

  /**
   * `release` hands a request's token ids back to its reader once its last
   * placement is made; `authKey` is TensorRT-LLM's internal_request_auth_key
   * (its workers' signatures), or null.
   */
  constructor(config: DisaggregationConfig, prefill: Pool, decode: Pool, release: (tokens: TokenIds) => void, authKey: string | null = null) {
    this.prefill = prefill;
    this.decode = decode;
    this.#serving = { prefill, decode, config, ids: new RequestIds(config.nodeId), authKey };
    this.#release = release;
  }

  /**
   * Serves one request; resolves with how it ended, or throws the HttpError to
   * answer. `onPool` learns, as the request moves, the pool its phase runs on
   * (a failure thrown is that pool's).
   */
  async serve(call: DisaggregatedCall, onPool: (pool: Pool) => void = () => {}): Promise<DisaggregatedOutcome> {
    let released = false;
    const placed = () => {
      if (!released) (released = true), this.#release(call.request.tokens);
    };
    let pool = this.prefill;
    const track: Track = {
      get pool() {
        return pool;
      },
      set pool(p: Pool) {
        pool = p;
        onPool(p);
      },
      placed,
    };
    onPool(pool);
    try {
      const client = withoutHandOff(call.raw.toString("utf8"));
      return this.#serving.config.protocol === "sglang" ? await paired(this.#serving, call, client, track) : await contextFirst(this.#serving, call, client, track);
    } finally {
      placed();
    }
  }
}
