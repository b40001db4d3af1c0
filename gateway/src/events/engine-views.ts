// What each upstream's engine says its KV cache holds, from its own KV-cache
// events: one prefix index per upstream, one rank of it per data-parallel rank
// of the engine (each DP rank keeps its own blocks, and its own hash chain).
// An upstream's match for a prompt is its best DP rank's, as in TensorRT-LLM's
// cross-instance router (a combined trie per instance). While an upstream's
// event stream is not live, its match comes from the gateway's own view of it
// (what the gateway placed there), so a stale stream is never trusted silently.

import type { KvEventsResult, PrefixIndex, PrefixNamespace, TokenIds } from "adp-router";
import { createEngineCacheView, type EngineCacheView, type KvGroupSpec } from "adp-router/engine-cache";
import type { GatewayConfig } from "../config/config.js";

/** Shape of one upstream's engine view. */
export interface EngineViewShape {
  /** Data-parallel ranks of the engine (each publishes its own events). */
  readonly dpRanks: number;
  /** Its KV-cache groups as configured (empty: as its events say). */
  readonly groups: readonly KvGroupSpec[];
}

/** Options of {@link EngineViews}. */
export interface EngineViewsOptions {
  /** Tokens per KV-cache block: the engines' block size. */
  readonly tokensPerBlock: number;
  /** Memory budget of each upstream's view. */
  readonly maxMemoryBytes: number;
  /** LoRA task ids by adapter name (events name their adapter; requests map a model name to a task id). */
  readonly loraIds: ReadonlyMap<string, number>;
}

/** The engine view an upstream (or its configuration) asks for: one rank per DP rank of its engine, or none. */
export const shapeOf = (u: { readonly kvEvents: { readonly dpRanks: number; readonly groups?: readonly KvGroupSpec[] } | null }): EngineViewShape | null =>
  u.kvEvents === null ? null : { dpRanks: u.kvEvents.dpRanks, groups: "groups" in u.kvEvents ? (u.kvEvents.groups ?? []) : [] };

/** Whether two group lists say the same. */
const sameGroups = (a: readonly KvGroupSpec[], b: readonly KvGroupSpec[]): boolean => a.length === b.length && a.every((g, i) => g.kind === b[i]!.kind && g.slidingWindow === b[i]!.slidingWindow);

/** Engine views as a gateway configuration asks for them (`shapes`: by default its upstreams'), with its routing settings. */
export function gatewayEngineViews(config: GatewayConfig, shapes: readonly (EngineViewShape | null)[] = config.upstreams.map(shapeOf)): EngineViews {
  return new EngineViews(shapes, { tokensPerBlock: config.routing.tokensPerBlock, maxMemoryBytes: config.routing.indexBytes, loraIds: config.routing.loraAdapters });
}

/** The engine views of all upstreams, by rank (null: the upstream publishes no events): each one engine cache view (its DP ranks, its KV-cache groups). */
export class EngineViews {
  #views: (EngineCacheView | null)[];
  readonly #options: EngineViewsOptions;
  /** Match scratch, one slot per DP rank (grown to the widest engine). */
  #scratch = new Uint32Array(1);

  constructor(shapes: readonly (EngineViewShape | null)[], options: EngineViewsOptions) {
    this.#options = options;
    this.#views = shapes.map((s) => this.#create(s));
  }

  /** Takes `views` (restored from a snapshot) in place of its own, which it frees. */
  adopt(views: readonly (EngineCacheView | null)[]): void {
    for (const v of this.#views) v?.dispose();
    this.#views = [...views];
  }

  /** Each upstream's view, or null (for snapshots). */
  get all(): readonly (EngineCacheView | null)[] {
    return this.#views;
  }

  /** Whether any upstream has an engine view. */
  get any(): boolean {
    return this.#views.some((v) => v !== null);
  }

  /** Upstream `upstream`'s view, or null. */
  view(upstream: number): EngineCacheView | null {
    return this.#views[upstream] ?? null;
  }

  /** Applies a batch of engine events to `upstream`'s view (`dpRank`: the rank of events that name none). */
  apply(upstream: number, events: unknown, dpRank: number | undefined): KvEventsResult | null {
    const view = this.view(upstream);
    if (view === null) return null;
    return view.applyKvEvents(events, { ...(dpRank === undefined ? {} : { rank: dpRank }), loraIds: this.#options.loraIds });
  }

  /** Empties one DP rank of `upstream`'s view, or all of them. */
  clear(upstream: number, dpRank: number | undefined): void {
    const view = this.view(upstream);
    if (view === null) return;
    if (dpRank !== undefined) {
      if (dpRank >= 0 && dpRank < view.numRanks) view.clearRank(dpRank);
      return;
    }
    for (let r = 0; r < view.numRanks; r++) view.clearRank(r);
  }

  /**
   * Writes each upstream's match for a probe (the prompt's tokens but its
   * last, as the routers probe) into `out`: its best DP rank's reuse over all
   * its KV-cache groups for upstreams whose stream is live, else what
   * `learned` (the gateway's own view) holds.
   */
  matchInto(out: Uint32Array, probe: TokenIds, ns: PrefixNamespace, learned: PrefixIndex, live: readonly boolean[]): void {
    learned.matchInto(out, probe, ns);
    for (let u = 0; u < out.length; u++) if (live[u] === true && this.view(u) !== null) out[u] = this.bestMatch(u, probe, ns);
  }

  /** `upstream`'s best DP rank's match for a probe (0 without a view). */
  bestMatch(upstream: number, probe: TokenIds, ns: PrefixNamespace): number {
    const view = this.view(upstream);
    if (view === null) return 0;
    if (this.#scratch.length < view.numRanks) this.#scratch = new Uint32Array(view.numRanks);
    view.matchInto(this.#scratch, probe, ns);
    let best = 0;
    for (let r = 0; r < view.numRanks; r++) best = Math.max(best, this.#scratch[r]!);
    return best;
  }

  /**
   * Moves to a new fleet: upstream i takes the view of old upstream
   * `ranks[i]` when it has the same shape, else a new empty one (`shapes[i]`).
   * Views no upstream takes are freed.
   */
  move(ranks: readonly (number | null)[], shapes: readonly (EngineViewShape | null)[]): void {
    const old = this.#views;
    const taken = new Set<number>();
    const next = shapes.map((shape, i) => {
      const from = ranks[i];
      const view = from === null || from === undefined ? null : (old[from] ?? null);
      if (view !== null && shape !== null && view.numRanks === shape.dpRanks && sameGroups(view.declaredGroups, shape.groups)) {
        taken.add(from!);
        return view;
      }
      return this.#create(shape);
    });
    old.forEach((v, i) => {
      if (v !== null && !taken.has(i)) v.dispose();
    });
    this.#views = next;
  }

  /** Frees every view. */
  dispose(): void {
    for (const v of this.#views) v?.dispose();
    this.#views = this.#views.map(() => null);
  }

  /** A new empty view of `shape`, or null. */
  #create(shape: EngineViewShape | null): EngineCacheView | null {
    if (shape === null) return null;
    return createEngineCacheView({ numRanks: shape.dpRanks, tokensPerBlock: this.#options.tokensPerBlock, maxMemoryBytes: this.#options.maxMemoryBytes, groups: shape.groups });
  }
}
