// Runs one conformance scenario (the JSON-lines format of TensorRT-LLM-labelled
// routing, balance-gate and config-validation cases) through the public API and
// returns the answer in the scenario's `expected` shape. Platform-neutral: the
// CLI and the tests in Node and in a browser share it.

import { BalanceGate } from "./balance-gate.js";
import type { RouteInput, RouteRequest } from "./batch.js";
import { parseAttentionDpConfig } from "./config.js";
import { AdpInputError, readInput } from "./errors.js";
import { createPrefixIndex } from "./prefix-index.js";
import { createInstanceRouter, type RankRoutingKind } from "./instances.js";
import { createRouter } from "./router.js";

/** A JSON value. */
type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
/** A JSON object. */
type JsonObject = { [key: string]: Json };

/** The answer to one scenario: the shape of its `expected` field, or an error. */
export type ScenarioAnswer = JsonObject;

/** `v` as a JSON object, or an error naming `what`. */
const asObject = (v: unknown, what: string): JsonObject => {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new AdpInputError(what, "must be an object", v);
  return v as JsonObject;
};
/** `v` as a JSON array, or an error naming `what`. */
const asArray = (v: unknown, what: string): Json[] => {
  if (!Array.isArray(v)) throw new AdpInputError(what, "must be an array", v);
  return v;
};

/** Converts a scenario request (snake_case) to a {@link RouteRequest}. */
function toRequest(raw: JsonObject, matchesByRank: Map<string, number>[] | null, numRanks: number): RouteRequest {
  const id = raw.id as number;
  let tokens = raw.tokens as number[] | undefined;
  if (tokens === undefined && typeof raw.num_tokens === "number") {
    tokens = Array.from({ length: raw.num_tokens }, (_, i) => i);
  }
  const req: Record<string, unknown> = { id, tokens };
  if (raw.scheduling_params === null) req.schedulingParams = false;
  if ("attention_dp_rank" in raw) req.attentionDpRank = raw.attention_dp_rank;
  if ("attention_dp_relax" in raw) req.attentionDpRelax = raw.attention_dp_relax;
  if ("conversation_id" in raw) req.conversationId = raw.conversation_id;
  if ("subagent_affinity_id" in raw) req.subagentAffinityId = raw.subagent_affinity_id;
  if ("lora_task_id" in raw) req.loraTaskId = raw.lora_task_id;
  if ("cache_salt" in raw) req.cacheSalt = raw.cache_salt;
  if (matchesByRank !== null) {
    const key = String(id);
    req.prefixMatches = Array.from({ length: numRanks }, (_, r) => matchesByRank[r]?.get(key) ?? 0);
  }
  return req as unknown as RouteRequest;
}

/** A scenario batch (snake_case) as a `route()` input; its `cached_prefixes` are not applied here. */
export function toRouteInput(rawBatch: unknown, numRanks: number): RouteInput {
  return readInput("batch", () => readRouteInput(rawBatch, numRanks));
}

/** {@link toRouteInput} without the guard that types what the caller's getters throw. */
function readRouteInput(rawBatch: unknown, numRanks: number): RouteInput {
  const batch = asObject(rawBatch, "batch");
  let matchesByRank: Map<string, number>[] | null = null;
  if (batch.prefix_matches !== undefined) {
    matchesByRank = asArray(batch.prefix_matches, "prefix_matches").map(
      (m) => new Map(Object.entries(asObject(m, "prefix_matches[]")) as [string, number][]),
    );
  }
  return {
    rankStates: asArray(batch.rank_states, "rank_states").map((st) => {
      const o = asObject(st, "rank_states[]");
      return { rank: o.rank as number, numActiveRequests: o.num_active_requests as number, numActiveTokens: o.num_active_tokens as number };
    }),
    maxNumActiveRequests: batch.max_num_active_requests as number,
    requests: asArray(batch.requests, "requests").map((r) => toRequest(asObject(r, "request"), matchesByRank, numRanks)),
  };
}

/** Answers a `route` scenario. */
function runRoute(s: JsonObject): ScenarioAnswer {
  const numRanks = s.tp_size as number;
  const router = createRouter({ numRanks, attentionDp: asObject(s.config ?? {}, "config") as never, learnFromRouting: false });
  const batches: Json[] = [];
  for (const [b, rawBatch] of asArray(s.batches, "batches").entries()) {
    const batch = asObject(rawBatch, `batches[${b}]`);
    // Each batch's cache picture: `cached_prefixes` loads exactly those sequences
    // into a fresh index the router probes; otherwise the router has no index.
    if (batch.cached_prefixes !== undefined) {
      const index = createPrefixIndex({ numRanks, tokensPerBlock: (batch.tokens_per_block as number | undefined) ?? 32 });
      for (const [rank, sequences] of Object.entries(asObject(batch.cached_prefixes, "cached_prefixes"))) {
        for (const seq of asArray(sequences, `cached_prefixes.${rank}`)) {
          const o = asObject(seq, "cached prefix");
          index.insert(Number(rank), o.tokens as number[], { loraTaskId: (o.lora_task_id as number | undefined) ?? null, cacheSalt: (o.cache_salt as string | undefined) ?? null });
        }
      }
      router.prefixIndex?.dispose();
      router.setPrefixIndex(index);
    } else {
      router.prefixIndex?.dispose();
      router.setPrefixIndex(null);
    }
    const result = router.route(toRouteInput(batch, numRanks));
    const assignments: JsonObject = {};
    result.assignments.forEach((ids, rank) => (assignments[String(rank)] = ids.map(Number)));
    batches.push({
      assignments,
      expected_num_active_requests: result.expectedNumActiveRequests,
      unassigned: result.unassigned.map(Number),
    });
  }
  return { router: router.kind, batches };
}

/** The prefix views of one instance's ranks for a batch: exactly each rank's `cached_prefixes`. */
function viewsOf(ranks: Json[], tokensPerBlock: number, what: string) {
  const index = createPrefixIndex({ numRanks: ranks.length, tokensPerBlock });
  ranks.forEach((raw, rank) => {
    const cached = asObject(raw, what).cached_prefixes;
    if (cached === undefined) return;
    for (const seq of asArray(cached, `${what}.cached_prefixes`)) {
      const o = asObject(seq, "cached prefix");
      index.insert(rank, o.tokens as number[], { loraTaskId: (o.lora_task_id as number | undefined) ?? null, cacheSalt: (o.cache_salt as string | undefined) ?? null });
    }
  });
  return index;
}

/** Answers an `instances` scenario: two-phase routing over several engines' ranks. */
function runInstances(s: JsonObject): ScenarioAnswer {
  const instances = asArray(s.instances, "instances").map((i) => asObject(i, "instances[]"));
  const given = instances.map((i) => i.id);
  if (given.some((id) => typeof id !== "string" || id === "") || new Set(given).size !== given.length) throw new AdpInputError("instances[].id", "must be distinct non-empty strings", given);
  const ids = given as string[];
  const tokensPerBlock = (s.tokens_per_block as number | undefined) ?? 32;
  const router = createInstanceRouter({
    instances: instances.map((i) => ({ numRanks: i.tp_size as number })),
    rankRouting: s.rank_routing as RankRoutingKind,
    attentionDp: asObject(s.config ?? {}, "config") as never,
    ...(s.load_weight !== undefined ? { loadWeight: s.load_weight as number } : {}),
    tokensPerBlock,
  });
  const batches: Json[] = [];
  for (const [b, rawBatch] of asArray(s.batches, "batches").entries()) {
    const batch = asObject(rawBatch, `batches[${b}]`);
    const ranksOf = asObject(batch.ranks, `batches[${b}].ranks`);
    const perInstance = ids.map((id) => asArray(ranksOf[id], `batches[${b}].ranks.${id}`));
    const views = perInstance.map((ranks, i) => viewsOf(ranks, tokensPerBlock, `ranks.${ids[i]}[]`));
    try {
      const requests = asArray(batch.requests, "requests").map((raw) => {
        const req = toRequest(asObject(raw, "request"), null, 0);
        // Each instance's ranks probe the prompt without its last token, in the request's namespace.
        const probe = Array.from(req.tokens ?? []).slice(0, -1);
        const ns = { loraTaskId: req.loraTaskId ?? null, cacheSalt: req.cacheSalt ?? null };
        return { ...req, instanceMatches: views.map((v) => v.match(probe, ns)) };
      });
      const placements = router.route({
        instances: perInstance.map((ranks) => ({
          ranks: ranks.map((raw) => {
            const o = asObject(raw, "rank");
            return { numActiveRequests: o.num_active_requests as number, numQueuedRequests: (o.num_queued_requests as number | undefined) ?? 0, numActiveTokens: o.num_active_tokens as number };
          }),
        })),
        maxNumActiveRequests: batch.max_num_active_requests as number,
        requests,
      });
      batches.push({ placements: placements.map((p, k) => ({ id: Number(requests[k]!.id), instance: p.instance < 0 ? null : ids[p.instance]!, rank: p.rank })) });
    } finally {
      for (const v of views) v.dispose();
    }
  }
  return { batches };
}

/** Answers a `balance` scenario. */
function runBalance(s: JsonObject): ScenarioAnswer {
  const c = asObject(s.balance_config, "balance_config");
  const gate = new BalanceGate({
    maxBatchSize: c.max_batch_size as number,
    timeoutIters: c.timeout_iters as number,
    batchingWaitIters: c.batching_wait_iters as number,
  });
  const iterations = asArray(s.iterations, "iterations").map((it) =>
    gate.step(asArray(asObject(it, "iteration").ranks, "ranks").map((r) => {
      const o = asObject(r, "rank");
      return { numCtx: o.num_ctx as number, numGen: o.num_gen as number };
    })),
  );
  return { iterations };
}

/** Answers a `validate` scenario. */
function runValidate(s: JsonObject): ScenarioAnswer {
  try {
    parseAttentionDpConfig(s.config);
    return { config_error: false };
  } catch (error) {
    if ((error as { code?: string }).code === "ERR_ADP_CONFIG") return { config_error: true };
    throw error;
  }
}

/** Answers one parsed scenario; a scenario the project cannot run gets `{ error }`. */
export function runScenario(scenario: unknown): ScenarioAnswer {
  try {
    const s = asObject(scenario, "scenario");
    switch (s.mode) {
      case "route":
        return runRoute(s);
      case "balance":
        return runBalance(s);
      case "validate":
        return runValidate(s);
      case "instances":
        return runInstances(s);
      default:
        throw new Error(`unknown mode ${JSON.stringify(s.mode)}`);
    }
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) };
  }
}

/** The first difference between two JSON values, as "path: expected X, got Y", or null when equal. */
export function firstDifference(expected: unknown, actual: unknown, path = "$"): string | null {
  if (Object.is(expected, actual)) return null;
  const show = (v: unknown) => JSON.stringify(v);
  if (Array.isArray(expected) && Array.isArray(actual)) {
    for (let i = 0; i < Math.max(expected.length, actual.length); i++) {
      if (i >= expected.length || i >= actual.length) return `${path}: expected ${show(expected)}, got ${show(actual)}`;
      const d = firstDifference(expected[i], actual[i], `${path}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  if (typeof expected === "object" && expected && typeof actual === "object" && actual && !Array.isArray(expected) && !Array.isArray(actual)) {
    const e = expected as Record<string, unknown>;
    const a = actual as Record<string, unknown>;
    for (const k of new Set([...Object.keys(e), ...Object.keys(a)])) {
      if (!(k in a)) return `${path}.${k}: missing (expected ${show(e[k])})`;
      if (!(k in e)) return `${path}.${k}: unexpected ${show(a[k])}`;
      const d = firstDifference(e[k], a[k], `${path}.${k}`);
      if (d) return d;
    }
    return null;
  }
  return `${path}: expected ${show(expected)}, got ${show(actual)}`;
}
