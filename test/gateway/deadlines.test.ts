// The proxy's deadline sweep (gateway/src/proxy/deadlines.ts): what it holds
// matches a plain set under any order of adds and deletes, and one sweep
// expires every due item and none other, whatever an expire() removes or adds.

import { describe, expect, it, vi } from "vitest";
import fc from "fast-check";
import { Deadlines, type Expiring } from "../../gateway/src/proxy/deadlines.js";

/** An item due at `dueAt`; `onExpire` runs at each expire() while due. */
class Item implements Expiring {
  slotIndex = -1;
  expired = 0;
  constructor(
    public dueAt: number,
    readonly onExpire: (self: Item) => void = () => {},
  ) {}
  expire(now: number): void {
    if (now < this.dueAt) return;
    this.expired++;
    this.onExpire(this);
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("Deadlines", () => {
  it("holds what a set would hold, under any adds and deletes", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.nat(15)), { maxLength: 200 }), (ops) => {
        const items = Array.from({ length: 16 }, () => new Item(Infinity));
        const d = new Deadlines<Item>();
        const model = new Set<Item>();
        for (const [add, k] of ops) {
          const item = items[k]!;
          if (add) {
            d.add(item, 60_000);
            model.add(item);
          } else {
            d.delete(item);
            model.delete(item);
          }
          expect(d.size).toBe(model.size);
          for (const it of items) expect(it.slotIndex >= 0).toBe(model.has(it));
        }
        // The slots held are distinct and dense: 0 .. size-1.
        expect(new Set([...model].map((it) => it.slotIndex))).toEqual(new Set(Array.from({ length: model.size }, (_, i) => i)));
        for (const it of items) d.delete(it);
        expect(d.size).toBe(0);
      }),
    );
  });

  it("ignores an item it does not hold, even one whose slot points into it", () => {
    const d = new Deadlines<Item>();
    const held = new Item(Infinity);
    d.add(held, 60_000);
    const stranger = new Item(Infinity);
    stranger.slotIndex = 0; // another set's slot
    d.delete(stranger);
    expect(d.size).toBe(1);
    expect(held.slotIndex).toBe(0);
    d.delete(held);
  });

  it("expires every due item and none other, while expire() removes itself and others", async () => {
    const d = new Deadlines<Item>();
    const now = performance.now();
    const due: Item[] = [];
    const later: Item[] = [];
    for (let i = 0; i < 40; i++) later.push(new Item(now + 60_000));
    for (let i = 0; i < 40; i++) {
      // Each due item leaves, and every third one takes two others with it (due or not).
      due.push(
        new Item(now, (self) => {
          d.delete(self);
          if (i % 3 === 0) {
            d.delete(due[(i + 7) % 40]!);
            d.delete(later[i]!);
          }
        }),
      );
    }
    for (let i = 0; i < 40; i++) {
      d.add(due[i]!, 16);
      d.add(later[i]!, 16);
    }
    await sleep(60);
    const thirds = Array.from({ length: 40 }, (_, i) => i).filter((i) => i % 3 === 0);
    // A due item another one removed first may never have been asked; every other due item was.
    const takenDue = new Set(thirds.map((i) => due[(i + 7) % 40]));
    for (const it of due) expect(it.expired).toBeGreaterThanOrEqual(takenDue.has(it) ? 0 : 1);
    for (const it of due) expect(it.slotIndex).toBe(-1);
    for (const it of later) expect(it.expired).toBe(0);
    // A later item left with the due item that took it, when that one was asked.
    const removed = new Set(thirds.filter((i) => due[i]!.expired > 0).map((i) => later[i]));
    expect(removed.size).toBeGreaterThanOrEqual(thirds.length - 3);
    for (const it of later) expect(it.slotIndex >= 0).toBe(!removed.has(it));
    expect(d.size).toBe(40 - removed.size);
    for (const it of later) d.delete(it);
    expect(d.size).toBe(0);
  });

  it("sees an item added by an expire() at a later tick", async () => {
    const d = new Deadlines<Item>();
    const now = performance.now();
    const added = new Item(now);
    const first = new Item(now, (self) => {
      d.delete(self);
      d.add(added, 16);
    });
    d.add(first, 16);
    await sleep(40);
    expect(first.expired).toBe(1);
    expect(added.expired).toBeGreaterThanOrEqual(1); // it stays (it does not leave), asked at each tick
    d.delete(added);
    expect(d.size).toBe(0);
  });

  it("asks every due item that stays in one tick, never one that left, whatever expire() removes or adds", () => {
    vi.useFakeTimers({ toFake: ["setInterval", "clearInterval", "performance"] });
    try {
      fc.assert(
        fc.property(
          fc.array(fc.record({ due: fc.boolean(), self: fc.boolean(), others: fc.array(fc.nat(40), { maxLength: 4 }), adds: fc.nat(3) }), { minLength: 1, maxLength: 40 }),
          (specs) => {
            const d = new Deadlines<Item>();
            const all: Item[] = [];
            const left = new Set<Item>();
            const remove = (x: Item) => {
              if (x.slotIndex >= 0) left.add(x);
              d.delete(x);
            };
            for (const spec of specs) {
              all.push(
                new Item(spec.due ? 0 : 1e12, (self) => {
                  expect(left.has(self)).toBe(false); // never asked once it left
                  if (self.expired > 1) return;
                  for (const o of spec.others) if (all[o] !== undefined) remove(all[o]!);
                  if (spec.self) remove(self);
                  for (let k = 0; k < spec.adds; k++) {
                    const added = new Item(0);
                    all.push(added);
                    d.add(added, 16);
                  }
                }),
              );
            }
            const initial = all.slice();
            for (const x of initial) d.add(x, 16);
            vi.advanceTimersByTime(2); // exactly one tick: the sweep's shortest (16 / 8 ms)
            for (const x of initial) if (x.dueAt === 0) expect(x.expired > 0 || left.has(x)).toBe(true);
            for (const x of initial) if (x.dueAt !== 0) expect(x.expired).toBe(0);
            for (const x of all) d.delete(x);
            expect(d.size).toBe(0);
          },
        ),
        { numRuns: 1000 },
      );
    } finally {
      vi.useRealTimers();
    }
  });
});
