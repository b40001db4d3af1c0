// The gateway's queue across workers (workers/queue-lending.ts): the primary
// holds limits.queue_size and lends it as requests would wait. Whatever the
// order messages arrive in, workers exiting with slots held or on their way,
// and asks given up on, the slots add up to queue_size and no worker admits
// more waiting requests than it holds.
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ASK_TIMEOUT_MS, isQueueMessage, QUEUE_MESSAGE, QueueBroker, QueueLending, type QueueMessage } from "../../gateway/src/workers/queue-lending.js";

afterEach(() => {
  vi.useRealTimers();
});

/** A worker as the property test drives it: its lending, its requests admitted and asked for, and its channel both ways. */
interface Worker {
  lending: QueueLending;
  /** Requests admitted past the room, waiting. */
  waiting: number;
  /** Requests held while an ask is under way. */
  pending: number;
  /** Requests that arrived while an ask was under way (asked for at its answer). */
  later: number;
  toPrimary: QueueMessage[];
  toWorker: QueueMessage[];
  /** Requests refused 429. */
  refused: number;
}

type Step =
  | { readonly kind: "arrive"; readonly slot: number; readonly n: number }
  | { readonly kind: "leave"; readonly slot: number; readonly n: number }
  | { readonly kind: "toPrimary" | "toWorker" | "exit" | "timeout"; readonly slot: number; readonly n: number };

const step: fc.Arbitrary<Step> = fc.record({
  kind: fc.constantFrom("arrive" as const, "arrive" as const, "leave" as const, "toPrimary" as const, "toPrimary" as const, "toWorker" as const, "toWorker" as const, "exit" as const, "timeout" as const),
  slot: fc.integer({ min: 1, max: 3 }),
  n: fc.integer({ min: 1, max: 5 }),
});

describe("queue lending between workers", () => {
  it("the slots add up to queue_size and no worker admits past what it holds, whatever the order, exits and timeouts (property)", () => {
    vi.useFakeTimers();
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 8 }), fc.array(step, { maxLength: 120 }), (queueSize, steps) => {
        const broker = new QueueBroker(queueSize);
        const workers = new Map<number, Worker>();
        const fresh = (slot: number): Worker => {
          const w: Worker = { lending: null as unknown as QueueLending, waiting: 0, pending: 0, later: 0, toPrimary: [], toWorker: [], refused: 0 };
          w.lending = new QueueLending((m) => w.toPrimary.push(m));
          workers.set(slot, w);
          return w;
        };
        for (const slot of [1, 2, 3]) fresh(slot);
        /** The scheduler's part: an answer admits the held requests while they fit, refuses the rest, asks for those after. */
        const ask = (w: Worker) => {
          w.pending += w.later;
          w.later = 0;
          if (w.pending === 0) return;
          w.lending.ask(w.pending, () => {
            for (; w.pending > 0; w.pending--) {
              if (w.waiting < w.lending.held()) w.waiting++;
              else w.refused++;
            }
            w.lending.using(w.waiting);
            ask(w);
          });
        };
        for (const s of steps) {
          const w = workers.get(s.slot)!;
          if (s.kind === "arrive") {
            // Admitted at once while they fit in the slots held and none is held before them; asked for otherwise.
            let n = s.n;
            while (n > 0 && w.pending === 0 && w.later === 0 && w.waiting < w.lending.held()) (w.waiting++, n--);
            if (n > 0) {
              if (w.pending > 0) w.later += n;
              else {
                w.later += n;
                ask(w);
              }
            }
          } else if (s.kind === "leave") {
            w.waiting = Math.max(0, w.waiting - s.n);
            w.lending.using(w.waiting);
          } else if (s.kind === "toPrimary") {
            const m = w.toPrimary.shift();
            const answer = m === undefined ? null : broker.receive(s.slot, m);
            if (answer !== null) w.toWorker.push(answer);
          } else if (s.kind === "toWorker") {
            const m = w.toWorker.shift();
            if (m !== undefined) expect(w.lending.receive(m)).toBe(true);
          } else if (s.kind === "exit") {
            // Its requests and messages go with it; a new worker starts in its slot with none.
            broker.exited(s.slot);
            fresh(s.slot);
          } else vi.advanceTimersByTime(ASK_TIMEOUT_MS);
          // Every slot is somewhere: the reserve, a worker, or a message on its way.
          let total = broker.reserve();
          for (const x of workers.values()) {
            total += x.lending.held();
            for (const m of [...x.toPrimary, ...x.toWorker]) if (m.op !== "ask") total += m.n;
            expect(x.waiting).toBeLessThanOrEqual(x.lending.held());
          }
          expect(total).toBe(queueSize);
          expect(broker.reserve()).toBeGreaterThanOrEqual(0);
        }
      }),
      { numRuns: 400 },
    );
  });

  it("asks are answered at once from the reserve, first come first served; what returns or a worker that exits held goes back", () => {
    const broker = new QueueBroker(4);
    expect(broker.receive(1, { type: QUEUE_MESSAGE, op: "ask", id: 1, n: 3 })).toEqual({ type: QUEUE_MESSAGE, op: "give", id: 1, n: 3 });
    expect(broker.receive(2, { type: QUEUE_MESSAGE, op: "ask", id: 1, n: 3 })).toEqual({ type: QUEUE_MESSAGE, op: "give", id: 1, n: 1 });
    expect(broker.receive(2, { type: QUEUE_MESSAGE, op: "ask", id: 2, n: 1 })).toEqual({ type: QUEUE_MESSAGE, op: "give", id: 2, n: 0 });
    // A return past what the worker holds counts only what it holds.
    expect(broker.receive(2, { type: QUEUE_MESSAGE, op: "return", n: 5 })).toBeNull();
    expect(broker.reserve()).toBe(1);
    broker.exited(1);
    expect(broker.reserve()).toBe(4);
    broker.exited(1);
    expect(broker.reserve()).toBe(4);
  });

  it("a worker asks once at a time, gives up on an ask after its timeout, and gives a late answer's slots straight back", () => {
    vi.useFakeTimers();
    const sent: QueueMessage[] = [];
    const lending = new QueueLending((m) => sent.push(m));
    const answers: number[] = [];
    lending.ask(2, (n) => answers.push(n));
    lending.ask(1, (n) => answers.push(n)); // one under way: answered 0 at once
    expect(answers).toEqual([0]);
    expect(sent).toEqual([{ type: QUEUE_MESSAGE, op: "ask", id: 1, n: 2 }]);
    vi.advanceTimersByTime(ASK_TIMEOUT_MS);
    expect(answers).toEqual([0, 0]);
    // The primary counted these as the worker's: back at once (an idle worker would hold them for good).
    expect(lending.receive({ type: QUEUE_MESSAGE, op: "give", id: 1, n: 2 })).toBe(true);
    expect(answers).toEqual([0, 0]);
    expect(lending.held()).toBe(0);
    expect(sent.at(-1)).toEqual({ type: QUEUE_MESSAGE, op: "return", n: 2 });
    lending.ask(3, (n) => answers.push(n));
    expect(lending.receive({ type: QUEUE_MESSAGE, op: "give", id: 2, n: 3 })).toBe(true);
    expect(answers).toEqual([0, 0, 3]);
    expect(lending.held()).toBe(3);
    lending.using(1);
    expect(lending.held()).toBe(1);
    expect(sent.at(-1)).toEqual({ type: QUEUE_MESSAGE, op: "return", n: 2 });
    // A shorter queue_timeout_ms is its timeout.
    const quick = new QueueLending(() => {}, 100);
    const quickAnswers: number[] = [];
    quick.ask(1, (n) => quickAnswers.push(n));
    vi.advanceTimersByTime(99);
    expect(quickAnswers).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(quickAnswers).toEqual([0]);
    expect(lending.receive({ type: "other" })).toBe(false);
  });

  it("messages are checked whole", () => {
    expect(isQueueMessage({ type: QUEUE_MESSAGE, op: "ask", id: 1, n: 2 })).toBe(true);
    expect(isQueueMessage({ type: QUEUE_MESSAGE, op: "return", n: 0 })).toBe(true);
    for (const bad of [null, 1, { type: QUEUE_MESSAGE, op: "ask", n: 2 }, { type: QUEUE_MESSAGE, op: "give", id: 1, n: -1 }, { type: QUEUE_MESSAGE, op: "give", id: 1.5, n: 1 }, { type: QUEUE_MESSAGE, op: "return", n: 2 ** 21 }, { type: QUEUE_MESSAGE, op: "take", id: 1, n: 1 }, { type: "x", op: "ask", id: 1, n: 1 }]) expect(isQueueMessage(bad)).toBe(false);
  });
});
