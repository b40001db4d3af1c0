// Small builders for router tests.
import type { RankState, RouteRequest } from "../../src/index.js";

/** Rank states from [numActiveRequests, numActiveTokens] pairs. */
export const states = (...pairs: [number, number][]): RankState[] =>
  pairs.map(([numActiveRequests, numActiveTokens], rank) => ({ rank, numActiveRequests, numActiveTokens }));

/** `n` idle ranks. */
export const idle = (n: number): RankState[] => states(...Array.from({ length: n }, () => [0, 0] as [number, number]));

/** A request of `numTokens` tokens 0..numTokens-1 plus extra fields. */
export const req = (id: number, numTokens: number, extra: Partial<RouteRequest> = {}): RouteRequest => ({
  id,
  tokens: Array.from({ length: numTokens }, (_, i) => i),
  ...extra,
});
