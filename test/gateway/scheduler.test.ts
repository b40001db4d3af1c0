// The scheduler alone (no HTTP): what a placed request leaves behind.
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { loadGatewayConfig } from "../../gateway/src/config/config.js";
import { Fleet } from "../../gateway/src/fleet/fleet.js";
import { readRequest } from "../../gateway/src/requests/openai.js";
import { Hangup, newCounters, Scheduler } from "../../gateway/src/fleet/scheduler.js";
import { Utf8ByteTokenizer } from "../../gateway/src/tokenizers/tokenizer.js";

let fleet: Fleet | null = null;
afterEach(async () => {
  await fleet?.destroy();
  fleet = null;
});

describe("Scheduler", () => {
  it("a placed or refused request leaves no listener on its client's hang-up signal (which lives as long as the response, and would hold the prompt's tokens)", async () => {
    const config = loadGatewayConfig({ flags: { upstreams: ["http://127.0.0.1:9"], port: 0, logLevel: "silent" }, file: { name: "g.yaml", text: "health: { interval_ms: 60000 }\nlimits: { max_in_flight_per_upstream: 1, queue_timeout_ms: 50 }\n" } });
    const f = new Fleet(config, pino({ level: "silent" }), () => scheduler.schedule());
    fleet = f;
    const scheduler = new Scheduler(f, config, newCounters(), (e) => {
      throw e;
    });
    const request = () => readRequest("chat", Buffer.from(JSON.stringify({ model: "m", messages: [{ role: "user", content: "hello there" }] })), {}, new Utf8ByteTokenizer());
    const placed = new Hangup();
    const waiting = new Hangup();
    const first = scheduler.acquire(request(), placed);
    const second = scheduler.acquire(request(), waiting); // the upstream takes one: this one waits, then times out
    expect(placed.listenerCount("abort")).toBe(1);
    const p = await first;
    expect(p.upstream.index).toBe(0);
    expect(placed.listenerCount("abort")).toBe(0);
    await expect(second).rejects.toMatchObject({ status: 429 });
    expect(waiting.listenerCount("abort")).toBe(0);
  });
});

describe("Hangup", () => {
  it("calls each listener still listening once, in the order they came, whatever was removed between", () => {
    const heard: string[] = [];
    const l = (name: string) => () => heard.push(name);
    const [a, b, c, d] = [l("a"), l("b"), l("c"), l("d")];
    const h = new Hangup();
    h.once("abort", a).once("abort", b).off("abort", a).once("abort", c); // b came before c, a went
    h.once("abort", d).off("abort", d).once("abort", d).once("abort", a).off("abort", a);
    expect(h.listenerCount("abort")).toBe(3);
    h.abort();
    h.abort();
    expect(heard).toEqual(["b", "c", "d"]);
    expect(h.listenerCount("abort")).toBe(0);
    const alone = new Hangup();
    alone.once("abort", a).off("abort", a).once("abort", b).once("abort", c).off("abort", c).once("abort", a);
    alone.abort();
    expect(heard.slice(3)).toEqual(["b", "a"]);
  });
});
