// The seeded synthetic multi-turn workload (`--workload multi-turn`): sessions
// that share one system prompt, each turn's prompt extending the previous turn's
// prompt and answer, with conversation ids. Segment lengths are whole blocks, so
// every turn's blocks are the previous turn's blocks plus new ones.

import type { Trace, TraceRequest } from "./trace.js";

/** Options of the multi-turn workload. */
export interface MultiTurnOptions {
  /** Seed of the generator. @default 1 */
  readonly seed?: number;
  /** Sessions. @default 400 */
  readonly sessions?: number;
  /** Turns per session, from 1 to this. @default 10 */
  readonly maxTurns?: number;
  /** Tokens per block. @default 64 */
  readonly blockTokens?: number;
  /** System prompt length in blocks. @default 24 */
  readonly systemBlocks?: number;
  /** Window over which sessions start, ms. @default 600000 */
  readonly spanMs?: number;
}

/** A small seeded generator (mulberry32): the same seed gives the same stream everywhere. */
export function mulberry32(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Generates the workload; the same options give the same trace on every platform. */
export function multiTurnWorkload(options: MultiTurnOptions = {}): Trace {
  const { seed = 1, sessions = 400, maxTurns = 10, blockTokens = 64, systemBlocks = 24, spanMs = 600_000 } = options;
  const rand = mulberry32(seed);
  const between = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  let nextKey = systemBlocks;
  const system = Array.from({ length: systemBlocks }, (_, i) => i);
  const requests: TraceRequest[] = [];
  for (let s = 0; s < sessions; s++) {
    let at = rand() * spanMs;
    const turns = between(1, maxTurns);
    const context = [...system];
    for (let turn = 0; turn < turns; turn++) {
      for (let b = between(1, 8); b > 0; b--) context.push(nextKey++); // the user's message
      const outputLength = between(2, 8) * blockTokens;
      requests.push({ arrivalMs: Math.round(at), inputLength: context.length * blockTokens, outputLength, blocks: [...context], conversationId: `session-${s}` });
      for (let b = outputLength / blockTokens; b > 0; b--) context.push(nextKey++); // the answer joins the context
      at += between(20_000, 90_000); // reading and typing before the next turn
    }
  }
  requests.sort((a, b) => a.arrivalMs - b.arrivalMs);
  return { name: `multi-turn(seed=${seed}, sessions=${sessions})`, blockTokens, requests };
}
