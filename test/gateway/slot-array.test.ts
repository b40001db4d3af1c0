// The set the gateway keeps its exchanges in flight and its connections in
// (gateway/src/common/slot-array.ts): it holds what a Set would under any
// adds and deletes, and a backward walk visits everything held throughout,
// whatever the visits remove or add.

import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { SlotArray, type Slotted } from "../../gateway/src/common/slot-array.js";

/** A held object, named for the messages. */
class Thing implements Slotted {
  slotIndex = -1;
  constructor(readonly id: number) {}
}

describe("SlotArray", () => {
  it("holds what a Set would, each object at its own slot, under any adds and deletes", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.boolean(), fc.nat(15)), { maxLength: 300 }), (ops) => {
        const things = Array.from({ length: 16 }, (_, i) => new Thing(i));
        const held = new SlotArray<Thing>();
        const model = new Set<Thing>();
        for (const [add, k] of ops) {
          const t = things[k]!;
          expect(add ? held.add(t) : held.delete(t)).toBe(add ? !model.has(t) : model.has(t));
          if (add) model.add(t);
          else model.delete(t);
          expect(held.size).toBe(model.size);
          for (const x of things) expect([held.has(x), x.slotIndex >= 0]).toEqual([model.has(x), model.has(x)]);
        }
        expect(new Set(held.toArray())).toEqual(model);
        expect(held.toArray().map((t) => t.slotIndex)).toEqual(Array.from({ length: model.size }, (_, i) => i));
      }),
    );
  });

  it("does not take an object another SlotArray holds for its own", () => {
    const a = new SlotArray<Thing>();
    const b = new SlotArray<Thing>();
    const t = new Thing(0);
    const u = new Thing(1);
    a.add(t);
    b.add(u); // both at slot 0
    expect(b.has(t)).toBe(false);
    expect(b.delete(t)).toBe(false);
    expect([a.size, b.size, t.slotIndex, u.slotIndex]).toEqual([1, 1, 0, 0]);
  });

  it("visits, walking backward, every object held throughout, whatever each visit removes or adds", () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ self: fc.boolean(), others: fc.array(fc.nat(60), { maxLength: 4 }), adds: fc.nat(2) }), { minLength: 1, maxLength: 50 }),
        (specs) => {
          const held = new SlotArray<Thing>();
          const all: Thing[] = specs.map((_, i) => new Thing(i));
          for (const t of all) held.add(t);
          const initial = all.slice();
          const left = new Set<Thing>();
          const visits = new Map<Thing, number>();
          held.forEachBackward((t) => {
            expect(left.has(t)).toBe(false); // never visited once it left
            visits.set(t, (visits.get(t) ?? 0) + 1);
            if ((visits.get(t) ?? 0) > 1) return;
            const spec = specs[t.id];
            if (spec === undefined) return; // one added during the walk (not visited, but checked below)
            for (const o of spec.others) if (all[o] !== undefined && held.delete(all[o]!)) left.add(all[o]!);
            if (spec.self && held.delete(t)) left.add(t);
            for (let k = 0; k < spec.adds; k++) {
              const added = new Thing(all.length);
              all.push(added);
              held.add(added);
            }
          });
          for (const t of initial) if (!left.has(t)) expect(visits.get(t) ?? 0).toBeGreaterThan(0);
          expect(new Set(held.toArray())).toEqual(new Set(all.filter((t) => !left.has(t))));
        },
      ),
      { numRuns: 2000 },
    );
  });
});
