// One queue across the workers of `serve --workers N`. limits.queue_size is
// the gateway's and the primary holds all of it (QueueBroker): a worker holds
// no slot of its own, admits a request at once while it fits in the room its
// upstreams have (or in slots it holds), and otherwise asks the primary for
// slots, the request held meanwhile, answered 429 queue_full if none is left
// (unless units of the cap its siblings leave unused would start it, as one
// process would: fleet/scheduler.ts). A worker gives back the slots it holds
// past the requests that wait past its room (a moment later: the scheduler's
// SLOT_LINGER_MS), so that the gateway holds at most queue_size waiting
// requests whichever worker their clients reach, as one process would, and a
// worker's queue no longer fills (429) while a sibling's share sits empty.
// Per slot, while every worker runs,
//
//   the primary's reserve + the slots workers hold + slots on their way = queue_size
//
// and a worker that exits leaves what it held to the reserve at once (its
// waiting requests went with it: none reached an engine).
//
// Messages (on the worker's IPC channel to its primary):
//   worker → primary   ask(id, n): n requests would wait past the slots held
//                      return(n): n slots back
//   primary → worker   give(id, n): n of ask id's slots (0 to its n)

import type { QueueSlots } from "../fleet/queue-slots.js";

/** The message kind queue lending travels as (both ways). */
export const QUEUE_MESSAGE = "adp-gateway-queue";
/** Most slots one message moves (queue_size's own bound). */
const MAX_SLOTS = 1 << 20;
/**
 * How long a worker waits for its primary's answer at most, ms (less when
 * limits.queue_timeout_ms is less): past it the requests asked for are
 * answered 429 unless they fit by then (a late answer's slots go straight
 * back). The primary answers at once; only a primary that no longer reads is
 * this slow.
 */
export const ASK_TIMEOUT_MS = 1_000;

/** A queue lending message, as it crosses. */
export type QueueMessage =
  | { readonly type: typeof QUEUE_MESSAGE; readonly op: "ask" | "give"; readonly id: number; readonly n: number }
  | { readonly type: typeof QUEUE_MESSAGE; readonly op: "return"; readonly n: number };

/** Whether `v` is a queue lending message within the bounds (anything else is dropped). */
export function isQueueMessage(v: unknown): v is QueueMessage {
  if (typeof v !== "object" || v === null) return false;
  const m = v as Record<string, unknown>;
  if (m.type !== QUEUE_MESSAGE || !Number.isSafeInteger(m.n) || (m.n as number) < 0 || (m.n as number) > MAX_SLOTS) return false;
  if (m.op === "return") return true;
  return (m.op === "ask" || m.op === "give") && Number.isSafeInteger(m.id) && (m.id as number) >= 0;
}

/** A worker's slots of the gateway's queue: none of its own, asked of the primary as requests would wait past its room. */
export class QueueLending implements QueueSlots {
  readonly lends = true;
  readonly #send: (message: QueueMessage) => void;
  /** How long an ask waits for its answer, ms. */
  readonly #timeoutMs: number;
  /** Slots held now (granted, not given back). */
  #held = 0;
  /** The ask waiting for its answer: its id, its answer, and the timer that gives up on it (null: none). */
  #asking: { readonly id: number; readonly answer: (granted: number) => void; readonly timer: NodeJS.Timeout } | null = null;
  #nextId = 1;

  /** `send` reaches the primary; an ask is given up after `queueTimeoutMs` (limits.queue_timeout_ms; ASK_TIMEOUT_MS at most, and when 0: none). */
  constructor(send: (message: QueueMessage) => void, queueTimeoutMs = ASK_TIMEOUT_MS) {
    this.#send = send;
    this.#timeoutMs = queueTimeoutMs > 0 ? Math.min(ASK_TIMEOUT_MS, queueTimeoutMs) : ASK_TIMEOUT_MS;
  }

  held(): number {
    return this.#held;
  }

  /** Asks for `n` slots (one ask at a time: the scheduler asks again for what arrived meanwhile once it is answered). */
  ask(n: number, answer: (granted: number) => void): void {
    if (this.#asking !== null || n <= 0) return answer(0);
    const id = this.#nextId++;
    const timer = setTimeout(() => this.#answered(id, 0), this.#timeoutMs);
    timer.unref();
    this.#asking = { id, answer, timer };
    this.#send({ type: QUEUE_MESSAGE, op: "ask", id, n: Math.min(n, MAX_SLOTS) });
  }

  using(n: number): void {
    const spare = this.#held - Math.max(0, n);
    if (spare <= 0) return;
    this.#held -= spare;
    this.#send({ type: QUEUE_MESSAGE, op: "return", n: spare });
  }

  /** Takes a message from the primary; false when it is not a queue lending message. */
  receive(message: unknown): boolean {
    if (!isQueueMessage(message)) return false;
    if (message.op !== "give") return true;
    if (this.#asking?.id !== message.id) {
      // The answer to an ask given up on: its requests were answered, and its slots go straight back (held, nothing
      // would give them back while this worker stays idle).
      if (message.n > 0) this.#send({ type: QUEUE_MESSAGE, op: "return", n: message.n });
      return true;
    }
    this.#held += message.n;
    this.#answered(message.id, message.n);
    return true;
  }

  /** Ask `id` answered with `granted` slots, or given up on (0). */
  #answered(id: number, granted: number): void {
    const asking = this.#asking;
    if (asking === null || asking.id !== id) return;
    this.#asking = null;
    clearTimeout(asking.timer);
    asking.answer(granted);
  }
}

/** The primary's side: the gateway's queue_size, lent to the workers as their requests wait. */
export class QueueBroker {
  #reserve: number;
  /** Slots each worker slot holds (given, not returned). */
  readonly #held = new Map<number, number>();

  /** `queueSize` is the gateway's limits.queue_size. */
  constructor(queueSize: number) {
    this.#reserve = queueSize;
  }

  /** Slots held here now. */
  reserve(): number {
    return this.#reserve;
  }

  /** Takes worker `slot`'s message (checked by the caller); the answer to send it back, if any. */
  receive(slot: number, m: QueueMessage): QueueMessage | null {
    const held = this.#held.get(slot) ?? 0;
    if (m.op === "return") {
      // Never more than it holds: a worker's count is its own, but the sum must stay queue_size.
      const back = Math.min(m.n, held);
      this.#reserve += back;
      this.#held.set(slot, held - back);
      return null;
    }
    if (m.op !== "ask") return null; // give goes the other way
    const granted = Math.min(m.n, this.#reserve);
    this.#reserve -= granted;
    this.#held.set(slot, held + granted);
    return { type: QUEUE_MESSAGE, op: "give", id: m.id, n: granted };
  }

  /** Worker `slot` exited (or could not start): what it held comes back (its waiting requests went with it). */
  exited(slot: number): void {
    this.#reserve += this.#held.get(slot) ?? 0;
    this.#held.delete(slot);
  }
}
