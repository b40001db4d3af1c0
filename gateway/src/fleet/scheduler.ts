// Routing in batches: requests wait here for an upstream, and every request
// that arrives in one turn of the event loop is routed in one `route()` call,
// so TensorRT-LLM's batch semantics (fair share, warm-up, the tie shuffle)
// apply as in the engine; those no upstream can take wait for room (a bounded
// queue with a timeout). Placing a request counts its load on its upstream and
// teaches the prefix index where its prompt went.

import type { GatewayConfig } from "../config/config.js";
import type { Fleet } from "./fleet.js";
import { HttpError, type RoutedRequest } from "../requests/openai.js";
import { subagentHintAccepted } from "../requests/subagent-auth.js";
import type { Upstream } from "./upstream.js";
import { CentralizedSelection } from "./centralized-selection.js";
import { fixedShares, type InFlightShares } from "./in-flight-shares.js";
import { fixedSlots, type QueueSlots } from "./queue-slots.js";
import type { Hangup } from "./hangup.js";
import { epochNow, Waiting, type Placement, type WaitingOwner } from "./waiting.js";
import { Placer } from "./placement.js";
import type { RankState, RouteRequest, TokenIds } from "adp-router";

/** Gateway-wide request counters, kept by the scheduler (rendered by metrics.ts). */
export interface GatewayCounters {
  /** Completion requests by outcome (`ok`, `client_closed`, an error code). */
  readonly requests: Map<string, number>;
  /** Completion requests by the HTTP status the client got (499: it hung up first). */
  readonly codes: Map<number, number>;
  /** Requests waiting for an upstream now. */
  queued: number;
  /** Requests refused with 429 (queue full or timed out waiting). */
  rejectedFull: number;
  /** Sub-agent hints ignored: unsigned, wrongly signed, or on an aggregated request, with an internal_request_auth_key set. */
  subagentRefused: number;
}

/** Counters at zero. */
export const newCounters = (): GatewayCounters => ({ requests: new Map(), codes: new Map(), queued: 0, rejectedFull: 0, subagentRefused: 0 });

/**
 * How long a worker keeps the queue slots it holds past its waiting requests
 * before it gives them back, ms: under a steady overload a slot one request
 * leaves is taken by the next within it, where giving it back at once cost an
 * ask, an answer and a return a request (worker and primary CPU +5-25%, 64
 * clients behind a cap of 4); a sibling may be refused meanwhile.
 */
const SLOT_LINGER_MS = 10;
/**
 * How long a worker's request with no queue slot waits for a unit of the cap
 * a sibling leaves unused, ms, before it is answered 429 queue_full: the
 * unit comes in a few messages through the primary when the sibling has one
 * (one process would have started the request on it), and none comes when it
 * has none (one process would have refused the request). Bursts of 12 chats
 * (cap 4, queue_size 8, a 1 s engine) on two workers: at 50 ms, with no slot
 * taken over, 7 bursts in 10 lost one or two chats; at 200 ms, the slot taken
 * over, 5 in 54 lost one to four (no unit came: its sibling had its requests
 * on both); asking once more when the wait is over, 1 in 76 (the first, as
 * the gateway started). A client refused waits longer for it, well within
 * its Retry-After.
 */
const UNIT_WAIT_MS = 200;

/** No request short of units (a batch with nothing to place says so). */
const NONE_SHORT: ReadonlyMap<Upstream, number> = new Map();

/** The queue of requests waiting for an upstream, and the batches that place them. */
export class Scheduler implements WaitingOwner {
  #queue: Waiting[] = [];
  /** Requests a worker holds while it asks its primary for queue slots, in arrival order (see QueueSlots). */
  #asking: Waiting[] = [];
  /** How many of `#asking`'s first the ask under way is for (0: none under way). */
  #asked = 0;
  /** Requests held while their worker asks for queue slots, not answered yet (those of `#asking` not done). */
  #holding = 0;
  /** Requests in the queue with no queue slot, waiting UNIT_WAIT_MS for a unit a sibling leaves unused. */
  #unslotted = 0;
  /** The timer that gives back the queue slots held past what waits, SLOT_LINGER_MS after they were first found so (null: none armed). */
  #lingering: NodeJS.Timeout | null = null;
  #flushScheduled = false;
  /** Requests taken into the queue since the last batch began (a worker's lending keeps the units they may start on). */
  #unbatched = 0;
  /**
   * Whether the shares were last told that requests here wait for units: a
   * request that leaves the queue between batches (asked for a slot again)
   * must not leave that want standing, or the primary has a sibling give its
   * units to a worker with nothing to start on them.
   */
  #wantsUnits = false;
  #nextId = 1;
  #stopped = false;
  readonly #fleet: Fleet;
  readonly #config: GatewayConfig;
  readonly #counters: GatewayCounters;
  /** The in-flight cap of one upstream, the whole gateway's (the router's maxNumActiveRequests, against loads that count every worker's requests). */
  readonly #cap: number;
  /** The requests this process may have in flight on each upstream: the cap, or with N workers this one's share of it. */
  readonly #shares: InFlightShares;
  /** When this process last placed a request while others waited (ms since the epoch), for its shares' turn. */
  #lastPlaced = 0;
  /** Where a batch the router refuses is logged. */
  readonly #onRouterError: (error: unknown) => void;
  /** Hands each routed request its upstream and DP rank, and teaches the routing state where its prompt went. */
  readonly #placer: Placer;
  /** Hands a request's token ids back to its tokenizer once it is placed or refused (nothing here reads them after). */
  readonly #release: (tokens: TokenIds) => void;
  /** Routes each request alone as it arrives (no batching window: for measuring what the window costs). */
  readonly #perRequest: boolean;
  /** Phase 1 as TensorRT-LLM's centralized router (policy centralized), or null: the router the config selects. */
  readonly #centralized: CentralizedSelection | null;
  /** The requests this process may hold waiting past its room: queue_size, or with N workers the slots it asked for. */
  readonly #slots: QueueSlots;

  constructor(fleet: Fleet, config: GatewayConfig, counters: GatewayCounters, onRouterError: (error: unknown) => void, release: (tokens: TokenIds) => void = () => {}, perRequest = false, shares: InFlightShares = fixedShares(config), slots: QueueSlots = fixedSlots(config)) {
    this.#perRequest = perRequest;
    this.#centralized = config.centralized ? new CentralizedSelection(config.routing.loadWeight, config.routing.tokensPerBlock) : null;
    this.#fleet = fleet;
    this.#config = config;
    this.#counters = counters;
    this.#cap = config.limits.maxInFlightPerUpstream;
    this.#shares = shares;
    this.#slots = slots;
    this.#onRouterError = onRouterError;
    this.#release = release;
    this.#placer = new Placer(fleet, onRouterError);
  }

  /** Whether `u` takes a request from this process now: available, and within this process's share of its cap. */
  #hasRoom(u: Upstream): boolean {
    return this.#fleet.available(u) && u.inFlight < this.#shares.of(u);
  }

  /** Requests this process may have in flight on `u` now (its share of the cap, with workers). */
  shareOf(u: Upstream): number {
    return this.#shares.of(u);
  }

  /** Requests taken into the queue since the last batch began: the next one places them on the room held now. */
  unbatched(): number {
    return this.#unbatched;
  }

  /** Requests waiting now (those held while their worker asks for queue slots too). */
  waiting(): number {
    return this.#queue.filter((w) => !w.done).length + this.#holding;
  }

  /** Routes the waiting requests on the next turn of the event loop. */
  schedule(): void {
    if (this.#flushScheduled || (this.#queue.length === 0 && !this.#wantsUnits)) return;
    this.#flushScheduled = true;
    setImmediate(() => this.#flush());
  }

  /** Answers every waiting request 503 and takes no more (shutdown). */
  stop(): void {
    this.#stopped = true;
    for (const w of [...this.#queue, ...this.#asking]) w.reject(new HttpError(503, "the gateway is shutting down", "server_error", "shutting_down", { "retry-after": "1" }));
    this.#queue = [];
    this.#asking = [];
    this.#noneWaits();
  }

  /** Tells the shares that no request waits (a worker wants no more units), and gives back queue slots held past what waits. */
  #noneWaits(): void {
    this.#wantsUnits = false;
    this.#shares.waiting(NONE_SHORT, 0, Infinity);
    this.#giveBack();
  }

  /** The request's sub-agent hint, if taken: as sent, or with TensorRT-LLM's key only when signed as its edge signs it. */
  #subagentOf(request: RoutedRequest): string | null {
    const key = this.#config.auth.internalRequestAuthKey;
    const claim = request.subagentClaim;
    if (key === null || claim === null) return request.subagentId;
    if (subagentHintAccepted(key, claim, claim.signature)) return claim.affinityId;
    this.#counters.subagentRefused++;
    return null;
  }

  /**
   * Waits for an upstream for `request` (routed with the next batch), or
   * rejects 429/499/503. A worker whose request would wait past its slots
   * holds it while it asks its primary for one (in arrival order: none is
   * admitted past those held so); one the primary has no slot for (or with
   * queue_size 0) waits a moment for a unit its siblings leave unused, as
   * one process would start it on that unit (#waitForUnit).
   */
  acquire(request: RoutedRequest, signal: Hangup): Promise<Placement> {
    const how = this.#refusal(signal) ?? this.#howToWait();
    if (how instanceof HttpError) {
      this.#release(request.tokens);
      return Promise.reject(how);
    }
    const w = new Waiting(this.#nextId++, request, this.#subagentOf(request), this, signal);
    const placed = w.wait();
    if (how === "admit") this.#admit(w);
    else if (how === "unit") this.#waitForUnit(w);
    else {
      w.held = true;
      this.#holding++;
      this.#asking.push(w);
      this.#askSlots();
    }
    return placed;
  }

  /**
   * How a request that may wait waits now: taken into the queue (it fits, and
   * none is held before it), held while its worker asks for a queue slot
   * (never more than the gateway's queue and the units that could start them
   * would take), or, with no slot to ask for (queue_size 0), waiting for a
   * unit a sibling leaves unused; a 429 when none of these.
   */
  #howToWait(): "admit" | "hold" | "unit" | HttpError {
    if (this.#holding === 0 && this.#admits()) return "admit";
    if (!this.#slots.lends) return this.#queueFull();
    const queueSize = this.#config.limits.queueSize;
    const spare = this.#spareElsewhere();
    if (queueSize === 0) return this.#unslotted < spare ? "unit" : this.#queueFull();
    return this.#holding < queueSize + this.#room() + spare ? "hold" : this.#queueFull();
  }

  /** Takes `w` into the queue, routed with the next batch (off the held ones, if held). */
  #admit(w: Waiting): void {
    if (w.held) {
      w.held = false;
      this.#holding--;
    }
    w.admitted = true;
    this.#counters.queued++;
    this.#unbatched++;
    if (w.reasked) this.#queue.splice(this.#arrivedAfter(w), 0, w); // asked for again: before those that came after it
    else this.#queue.push(w);
    if (this.#perRequest) this.#flush();
    else this.schedule();
  }

  /** Where in the queue `w` goes by arrival: before the first that came after it. */
  #arrivedAfter(w: Waiting): number {
    const at = this.#queue.findIndex((q) => q.id > w.id);
    return at < 0 ? this.#queue.length : at;
  }

  /**
   * Takes `w` into the queue with no queue slot, for UNIT_WAIT_MS: its batch
   * finds no room in this worker's units, and the worker wants one, which a
   * sibling gives back if it leaves one unused; `w` starts on it, or is
   * answered 429 queue_full when none came in time. (Counting a sibling's
   * unused units as room instead took the same unit in every worker a burst
   * reached: more requests than one process takes.)
   */
  #waitForUnit(w: Waiting): void {
    w.unslotted = true;
    this.#unslotted++;
    const timeout = this.#config.limits.queueTimeoutMs;
    w.timer = setTimeout(() => this.#unitWaitOver(w), timeout > 0 ? Math.min(UNIT_WAIT_MS, timeout) : UNIT_WAIT_MS);
    w.timer.unref();
    this.#admit(w);
  }

  /**
   * `w` waited UNIT_WAIT_MS with no queue slot and no unit came: it takes a
   * slot the held ones leave free, if one; else its worker asks its primary
   * once more (a sibling may have given back the slot it held when `w` was
   * asked for: 1 in 12 of a burst's chats was refused so), and 429 if none.
   */
  #unitWaitOver(w: Waiting): void {
    w.timer = null;
    if (w.done) return;
    if (this.#fits()) this.#slotted(w);
    // No second ask with queue_size 0 (no slot to give) or with its queue timeout over (its slot would go unused;
    // a timer fires on the millisecond, up to 1 ms before its time by this clock).
    else if (this.#config.limits.queueSize === 0 || this.#queueTimeLeft(w) <= 1) w.reject(this.#queueFull());
    else this.#askAgain(w);
    // The next batch starts `w` on room that came with no batch since (a sibling's unit, arriving quietly), or,
    // `w` gone from the queue, tells the shares what this worker still wants (none, if `w` was all).
    this.schedule();
  }

  /**
   * Requests waiting with no queue slot take the slots the held ones leave
   * free, in queue order: a unit a sibling gave back starts the first request
   * of a batch, which holds a slot, and its slot stays here; the requests
   * without one had a 429 when their UNIT_WAIT_MS was over (a burst of
   * cap + queue_size on one worker lost one to three of twelve).
   */
  #slotFreed(): void {
    let slotted = false;
    for (let i = 0; i < this.#queue.length && this.#unslotted > 0 && this.#fits(); i++) {
      const w = this.#queue[i]!;
      if (!w.done && w.unslotted) {
        this.#slotted(w);
        slotted = true;
      }
    }
    if (slotted) this.schedule(); // the room it fits in, if that is what it takes, starts it with the next batch
  }

  /** Takes `w` off the queue, held again while its worker asks for a slot for it (and those held meanwhile). */
  #askAgain(w: Waiting): void {
    const at = this.#queue.indexOf(w);
    if (at >= 0) this.#queue.splice(at, 1);
    this.#counters.queued = Math.max(0, this.#counters.queued - 1);
    w.admitted = false;
    w.unslotted = false;
    this.#unslotted--;
    w.reasked = true;
    w.held = true;
    this.#holding++;
    // Its queue timeout, from its arrival, goes on while it is held: a slow primary answers within a second.
    this.#armQueueTimeout(w);
    this.#asking.push(w);
    this.#askSlots();
  }

  /** `w`, waiting with no queue slot, holds one now: it waits as any queued request, up to queue_timeout_ms from its arrival. */
  #slotted(w: Waiting): void {
    w.unslotted = false;
    this.#unslotted--;
    if (w.timer !== null) clearTimeout(w.timer);
    w.timer = null;
    this.#armQueueTimeout(w);
  }

  /**
   * Whether a request waiting in the queue without a queue slot may hold
   * one: those in the queue with a slot within the slots held and the room
   * this process's units leave now.
   */
  #fits(): boolean {
    return this.#counters.queued - this.#unslotted < this.#slots.held() + this.#room();
  }

  /**
   * Whether a request arriving, or held while its worker asked for slots,
   * may join the queue behind all of it: every request in the queue, with a
   * slot or without, within the slots held and the room. Those without a
   * slot are older and start first on the room (a batch starts the oldest),
   * so they count against it: counted as not there, a unit a sibling gave
   * back admitted a request it then did not start, which waited with no
   * slot (with queue_size 0, cap 4: 5 to 7 of 12 chats at once taken in 3 to
   * 5 bursts of 10, where one process takes 4).
   */
  #admits(): boolean {
    return this.#counters.queued < this.#slots.held() + this.#room();
  }

  /** A 429 for a full queue, counted. */
  #queueFull(): HttpError {
    this.#counters.rejectedFull++;
    return new HttpError(429, this.#config.limits.queueSize === 0 ? "every upstream is at capacity, and limits.queue_size is 0: no request waits" : "the gateway's queue is full", "rate_limit_exceeded", "queue_full", { "retry-after": "1" });
  }

  /** Asks for slots for the requests held meanwhile, unless an ask is under way (its answer asks for those after it). */
  #askSlots(): void {
    if (this.#asked > 0) return;
    this.#asked = this.#asking.length;
    // As many slots as it holds requests still unanswered (a client gone meanwhile wants none).
    this.#slots.ask(this.#holding, () => this.#slotsAnswered());
  }

  /**
   * The primary answered (the slots it gave are held now): the requests asked
   * for are taken into the queue while they fit, the others answered 429;
   * those held since are taken while they fit, and asked for again if not.
   */
  #slotsAnswered(): void {
    const asked = this.#asking.splice(0, this.#asked);
    this.#asked = 0;
    // Those the slots do not cover may still start on units its siblings leave unused (as many as their last reports say).
    const spare = this.#spareElsewhere();
    for (const w of asked) {
      if (w.done) continue;
      if (this.#admits()) this.#admit(w);
      else if (!w.reasked && this.#unslotted < spare) this.#waitForUnit(w);
      else w.reject(this.#queueFull());
    }
    const later = this.#asking.filter((w) => !w.done);
    let taken = 0;
    while (taken < later.length && this.#admits()) this.#admit(later[taken++]!);
    this.#asking = later.slice(taken);
    if (this.#asking.length > 0) this.#askSlots();
    if (this.#unslotted > 0) this.#slotFreed();
    this.#giveBack();
  }

  /** Gives back, SLOT_LINGER_MS later, the queue slots held past the requests that wait past the room then (a worker's; one process lends none). */
  #giveBack(): void {
    if (!this.#slots.lends || this.#lingering !== null || this.#slots.held() <= this.#excess()) return;
    this.#lingering = setTimeout(() => {
      this.#lingering = null;
      this.#slots.using(this.#excess());
    }, SLOT_LINGER_MS);
    this.#lingering.unref();
  }

  /** Requests admitted past the room the upstreams have now with a queue slot: those the slots hold. */
  #excess(): number {
    return Math.max(0, this.#counters.queued - this.#unslotted - this.#room());
  }

  /** A waiting request was answered: off the queue's count (or the held ones), its token ids handed back. @internal */
  settled(w: Waiting): void {
    if (w.admitted) this.#counters.queued = Math.max(0, this.#counters.queued - 1);
    else if (w.held) this.#holding--;
    if (w.unslotted) this.#unslotted--;
    // A slot its leaving frees (its client left, its queue timeout) goes to a request waiting without one.
    else if (w.admitted && this.#unslotted > 0) this.#slotFreed();
    this.#release(w.tokens);
    // Slots a worker holds past what waits go back, SLOT_LINGER_MS later (one timer for this turn's requests).
    if (this.#slots.lends && this.#slots.held() > 0) this.#giveBack();
  }

  /** Why a request cannot even wait (shutting down, its client gone), or null. */
  #refusal(signal: Hangup): HttpError | null {
    if (this.#stopped) return new HttpError(503, "the gateway is shutting down", "server_error", "shutting_down", { "retry-after": "1" });
    if (signal.aborted) return new HttpError(499, "the client closed the request");
    return null;
  }

  /** The available upstream with the fewest in-flight requests and room (within this process's share), outside `tried`. */
  leastLoaded(tried: ReadonlySet<Upstream>): Upstream | null {
    let best: Upstream | null = null;
    for (const u of this.#fleet.upstreams) {
      if (tried.has(u) || !this.#hasRoom(u)) continue;
      if (best === null || u.inFlight < best.inFlight || (u.inFlight === best.inFlight && u.inFlightTokens < best.inFlightTokens)) best = u;
    }
    return best;
  }

  /** Routes every waiting request as one batch; those no upstream can take wait for the next. */
  #flush(): void {
    this.#flushScheduled = false;
    this.#unbatched = 0;
    const fleet = this.#fleet;
    const shares = this.#shares;
    const waiting = this.#queue.filter((w) => !w.done);
    this.#queue = [];
    if (waiting.length === 0) return this.#noneWaits();
    const upstreams = fleet.upstreams;
    if (!upstreams.some((u) => fleet.available(u))) {
      for (const w of waiting) w.reject(new HttpError(503, "no healthy upstream", "server_error", "no_healthy_upstream", { "retry-after": "1" }));
      return this.#noneWaits();
    }
    const byId = new Map(waiting.map((w) => [w.id, w]));
    let result;
    try {
      result = this.#route(upstreams, waiting);
    } catch (error) {
      // Nothing a request can carry should make the router refuse a batch; if it does, the batch is answered, not lost.
      this.#onRouterError(error);
      for (const w of waiting) w.reject(new HttpError(500, "the router could not route the request", "server_error", "routing_failed"));
      return this.#noneWaits();
    }
    // Each prompt's block hashes, made once by the routing (its learn inserts them, not its tokens hashed again).
    result.hashes.forEach((h, i) => (waiting[i]!.hashes = h));
    const ranked = new Map<Upstream, Waiting[]>();
    // Requests left waiting for want of room in this process's share of the upstream the router chose, by upstream.
    const short = new Map<Upstream, number>();
    let oldest = Infinity;
    let requeued = 0; // those the router assigned that had to wait all the same
    // Placed oldest first (the router's order is its own): where a worker's share has less room than the gateway,
    // the oldest of those routed start.
    const assigned: { readonly w: Waiting; readonly chosen: Upstream }[] = [];
    result.assignments.forEach((ids, rank) => {
      for (const id of ids) {
        assigned.push({ w: byId.get(id as number)!, chosen: upstreams[rank]! });
        byId.delete(id as number);
      }
    });
    assigned.sort((a, b) => a.w.id - b.w.id);
    for (const { w, chosen } of assigned) {
      // The conversation router may keep a conversation on a rank at its cap or ejected, and with workers the
      // router's choice may have room in the gateway but not in this worker's share: take the least loaded
      // available one then.
      let target = chosen;
      if (!this.#hasRoom(target)) target = this.leastLoaded(new Set()) ?? target;
      if (!this.#hasRoom(target)) {
        if (fleet.available(chosen)) short.set(chosen, (short.get(chosen) ?? 0) + 1);
        oldest = Math.min(oldest, w.enqueuedAt);
        requeued++;
        this.#requeue(w);
        continue;
      }
      this.#placer.place(w, target, ranked);
    }
    for (const [u, placed] of ranked) this.#placer.chooseRanks(u, placed);
    for (const w of byId.values()) {
      oldest = Math.min(oldest, w.enqueuedAt);
      this.#requeue(w); // unassigned: every upstream is full
    }
    // Back in arrival order (those assigned and left waiting went back first), for the next batch's oldest.
    if (requeued > 0 && byId.size > 0) this.#queue.sort((a, b) => a.id - b.id);
    if (short.size > 0 || byId.size > 0) {
      // How long this process has waited for a unit: since its oldest request came, or since it last placed one
      // when that was later (the router picks which waiting request starts, not always the oldest). Units go
      // to the worker that has waited longest, so workers take turns as one process's queue would.
      if (requeued + byId.size < waiting.length) this.#lastPlaced = epochNow(); // this batch placed some
      this.#wantsUnits = true;
      shares.waiting(short, byId.size, Math.max(oldest, this.#lastPlaced));
      if (this.#unslotted > 0) this.#slotFreed();
      this.#giveBack();
    } else this.#noneWaits();
  }

  /** Routes `waiting` over `upstreams` in one `route()` call (an unavailable upstream is reported full): each upstream's ids, and each request's block hashes when made. */
  #route(upstreams: readonly Upstream[], waiting: readonly Waiting[]): { readonly assignments: readonly (readonly (number | string | bigint)[])[]; readonly hashes: readonly (Uint32Array | null)[] } {
    const fleet = this.#fleet;
    const cap = this.#cap;
    let prompts = 0;
    let placed = 0;
    for (const u of upstreams) {
      prompts += u.promptTokens;
      placed += u.placed;
    }
    const meanPrompt = placed === 0 ? 0 : prompts / placed;
    // TensorRT-LLM's centralized router takes them in arrival order and stops where nothing has room, by its own
    // count of room (no engine report, no requests in transfer): all of them, as it reads them.
    if (this.#centralized !== null) return { ...this.#centralized.route(fleet, waiting, cap, this.#shares, meanPrompt), hashes: [] };
    // Pushed one by one, not made by map(): TurboFan's inlined map() makes a holey array
    // where the built-in made a packed one, and the router's optimized code, which had
    // seen packed ones only, was deoptimized when this function was optimized.
    const rankStates: RankState[] = [];
    let room = 0;
    for (const u of upstreams) {
      const load = u.rankLoad(meanPrompt, cap - this.#shares.of(u));
      const active = fleet.available(u) ? Math.min(load.numActiveRequests, cap) : cap;
      rankStates.push({ numActiveRequests: active, numActiveTokens: load.numActiveTokens });
      room += cap - active;
    }
    // As TensorRT-LLM's executor pops its waiting queue (reference §7): the oldest requests, as many as the ranks
    // have room for, are routed; the rest wait, in order, for the next batch. Routing them all let the router's
    // own order (its balance takes the longest prompts first) choose which start: 16 clients behind a cap of 4 and
    // a 100 ms engine had 8 requests wait 6.2 s while the median took 206 ms.
    const popped = room >= waiting.length ? waiting : waiting.slice(0, room);
    if (popped.length === 0) return { assignments: [], hashes: [] };
    const requests: RouteRequest[] = [];
    for (const w of popped) requests.push(routeRequest(w));
    const { result, hashes } = fleet.state.route({ rankStates, maxNumActiveRequests: cap, requests });
    return { assignments: result.assignments, hashes };
  }

  /**
   * Puts `w` back to wait for room, arming its queue timeout (counted from its
   * arrival) the first time: a timer per request would cost every request,
   * and most are placed by the batch they arrive in.
   */
  #requeue(w: Waiting): void {
    this.#queue.push(w);
    this.#armQueueTimeout(w);
  }

  /** Arms `w`'s queue timeout, counted from its arrival, unless a timer is armed already (its own, or the unit wait's). */
  #armQueueTimeout(w: Waiting): void {
    if (w.timer !== null || this.#config.limits.queueTimeoutMs <= 0) return;
    w.timer = setTimeout(() => {
      this.#counters.rejectedFull++;
      w.reject(new HttpError(429, "every upstream is at capacity", "rate_limit_exceeded", "upstreams_full", { "retry-after": "1" }));
    }, Math.max(0, this.#queueTimeLeft(w)));
    w.timer.unref();
  }

  /** What is left of `w`'s queue timeout, counted from its arrival, ms (negative: over; Infinity: none). */
  #queueTimeLeft(w: Waiting): number {
    const timeout = this.#config.limits.queueTimeoutMs;
    return timeout > 0 ? timeout - (epochNow() - w.enqueuedAt) : Infinity;
  }

  /**
   * Units of the caps of available upstreams that other workers hold (or the
   * primary keeps) and leave unused, as the workers' last load reports say:
   * how many requests may wait for one (#waitForUnit; 0 in one process,
   * which holds every cap whole).
   */
  #spareElsewhere(): number {
    return this.#fleet.upstreams.reduce((n, u) => n + (this.#fleet.available(u) ? Math.max(0, this.#cap - this.#shares.of(u) - u.siblingInFlight) : 0), 0);
  }

  /** Requests that could start now: the room left on available upstreams. */
  #room(): number {
    return this.#fleet.upstreams.reduce((n, u) => n + (this.#fleet.available(u) ? Math.max(0, this.#shares.of(u) - u.inFlight) : 0), 0);
  }
}

/** What the router reads of a waiting request (only the fields it has: the router checks each one given). */
function routeRequest(w: Waiting): RouteRequest {
  const r: { id: number; tokens: TokenIds; conversationId?: string; subagentAffinityId?: string; cacheSalt?: string; loraTaskId?: number } = { id: w.id, tokens: w.tokens };
  if (w.conversationId !== null) r.conversationId = w.conversationId;
  if (w.subagentId !== null) r.subagentAffinityId = w.subagentId;
  if (w.namespace.cacheSalt !== null) r.cacheSalt = w.namespace.cacheSalt;
  if (w.namespace.loraTaskId !== null) r.loraTaskId = w.namespace.loraTaskId;
  return r;
}
