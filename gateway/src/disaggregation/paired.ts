// SGLang's flow, as its mini load balancer runs it
// (python/sglang/srt/disaggregation/mini_lb.py): both servers placed first,
// the same body with one bootstrap room to both, the decode request sent once
// the prefill request is on the wire (so a prefill that never went out may
// still go to another prefill server, with that server's bootstrap address).
// A prefill that fails before the decode server answered stops the decode and
// is the client's answer; a decode that fails stops the prefill; a client
// that leaves stops both.

import type { Placement } from "../fleet/waiting.js";
import type { Upstream } from "../fleet/upstream.js";
import { headGiven, proxy, type ProxyOutcome } from "../proxy/proxy.js";
import { HttpError } from "../requests/openai.js";
import { at, captureFor, outcomeOf, passThrough, phaseHangup, unplace, type DisaggregatedCall, type DisaggregatedOutcome, type Serving, type Track } from "./phases.js";
import { sglangBody } from "./protocols.js";
import { MAX_INT64, MIN_GLOBAL_ID } from "./request-ids.js";

/**
 * The bootstrap room for prefill server `u`: `room`, or, when the gateway
 * pins the request to DP rank `rank` of an engine of several, the room next
 * to it that is `rank` modulo the engine's DP size. SGLang's decode side finds
 * the prefill's DP group holding the KV cache as `bootstrap_room % dp_size`,
 * so the pinned rank and the room must agree.
 */
export function roomFor(room: bigint, u: Upstream, rank: number | null): bigint {
  if (rank === null || u.dpRanks < 2) return room;
  const size = BigInt(u.dpRanks);
  const aligned = room - (room % size) + BigInt(rank);
  if (aligned < MIN_GLOBAL_ID) return aligned + size;
  return aligned > MAX_INT64 ? aligned - size : aligned;
}

/** Serves `call` over a prefill and a decode server at once; `track` follows where it is. */
export async function paired(s: Serving, call: DisaggregatedCall, client: string, track: Track): Promise<DisaggregatedOutcome> {
  const { request, hangup, tokens } = call;
  track.pool = s.prefill;
  const prefillAt = await s.prefill.scheduler.acquire(request, hangup);
  let decodeAt: Placement;
  try {
    track.pool = s.decode;
    decodeAt = await s.decode.scheduler.acquire(request, hangup);
  } catch (error) {
    unplace(s.prefill, prefillAt, tokens);
    throw error;
  }
  track.placed();
  track.pool = s.prefill;
  const room = s.ids.next();
  const bodies = new Map<Upstream, Buffer>();
  // The proxy pins the rank on the first prefill server only (a retried one gets none): its room follows.
  const bodyFor = (u: Upstream) => {
    let body = bodies.get(u);
    if (body === undefined) bodies.set(u, (body = Buffer.from(sglangBody(client, new URL(u.url).hostname, u.bootstrapPort, roomFor(room, u, u === prefillAt.upstream ? prefillAt.rank : null)))));
    return body;
  };
  const prefillPhase = phaseHangup(hangup);
  const decodePhase = phaseHangup(hangup);
  const decode = decodeOnSent(s, call, decodeAt, decodePhase.hangup, bodyFor, () => prefillPhase.hangup.abort());
  // A 2xx prefill answer is discarded: a large one is not a failure (its bytes are dropped past the bound).
  const captured = captureFor(call, () => {});
  try {
    let failure: unknown = null;
    let first: ProxyOutcome | null = null;
    try {
      first = await proxy(s.prefill.proxying, { ...call, res: captured, hangup: prefillPhase.hangup, body: bodyFor, onSent: decode.start }, prefillAt.upstream, prefillAt.rank);
    } catch (error) {
      failure = error;
    }
    const running = decode.run();
    if (running === null) {
      // The prefill never went out: neither did the decode.
      unplace(s.decode, decodeAt, tokens);
      throw failure ?? new HttpError(499, "the client closed the request");
    }
    const ended = decode.ended();
    if (ended !== null) {
      // The decode phase is over (it answered, or failed and took the prefill with it): its end is the request's.
      track.pool = s.decode;
      if ("error" in ended) throw ended.error;
      return outcomeOf(ended.outcome, s.decode, prefillAt.matchedTokens);
    }
    const prefillFailed = failure !== null || first === null || (first.outcome !== "ok" && !hangup.aborted) || captured.status >= 300;
    if (prefillFailed && !headGiven(call.res)) {
      // The decode server has not answered yet: it is stopped, and the prefill's failure is the client's answer.
      decodePhase.hangup.abort();
      await running.catch(() => undefined);
      if (failure !== null) throw failure;
      const u = first!.upstream;
      if (captured.status >= 300 && captured.writableEnded && !captured.overflowed) return passThrough(call.res, captured, u, s.prefill, prefillAt.matchedTokens);
      throw new HttpError(502, `the prefill server failed (${first!.outcome})`, "server_error", "prefill_failed", at(u));
    }
    track.pool = s.decode;
    return outcomeOf(await running, s.decode, prefillAt.matchedTokens);
  } finally {
    prefillPhase.done();
    decodePhase.done();
  }
}

/** The decode phase of a pair: started (once) when the prefill request is on the wire; how it ended, once it has. */
function decodeOnSent(s: Serving, call: DisaggregatedCall, decodeAt: Placement, hangup: DisaggregatedCall["hangup"], bodyFor: (u: Upstream) => Buffer, stopPrefill: () => void) {
  let run: Promise<ProxyOutcome> | null = null;
  let ended: { outcome: ProxyOutcome } | { error: unknown } | null = null;
  return {
    start(prefilled: Upstream): void {
      if (run !== null) return;
      run = proxy(s.decode.proxying, { ...call, hangup, body: () => bodyFor(prefilled) }, decodeAt.upstream, decodeAt.rank);
      run.then(
        (outcome) => {
          ended = { outcome };
          // A decode that failed (cut short, or answered an error) takes its prefill with it: nothing will take that KV cache.
          if (outcome.outcome !== "ok" || outcome.status >= 300) stopPrefill();
        },
        (error: unknown) => {
          ended = { error };
          stopPrefill();
        },
      );
    },
    run: () => run,
    ended: () => ended,
  };
}
