// The two sides of a connection's overflow under `serve --workers N`
// (gateway/src/workers/connection-overflow.ts) in one process: a worker's gate
// on a real node:net server with real loopback connections, its messages to
// the primary recorded; and the primary's relay with recorded workers.
import { connect, createServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ConnectionOverflow, FULL_PAUSE_MS, isOverflowMessage, MAX_PASSING, type NativeHandle, OVERFLOW_MESSAGE, type OverflowMessage, OverflowRelay, type OverflowTarget } from "../../gateway/src/workers/connection-overflow.js";

const servers: Server[] = [];
const clients: Socket[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  for (const s of servers.splice(0)) await new Promise((r) => s.close(r));
});

/** A message as sent, with whether a descriptor came with it and a way to settle its send. */
interface Sent {
  readonly message: OverflowMessage;
  readonly handle: NativeHandle | undefined;
  readonly done: (error: Error | null) => void;
}

/**
 * Worker `self` of `workers` gating a listening server at `limit` connections;
 * `served` lists the sockets its own listener got, `sent` what went to the primary.
 */
async function gatedServer(self: number, workers: number, limit: number, clock = { now: 0 }) {
  const sent: Sent[] = [];
  const gate = new ConnectionOverflow((message, handle, done) => void sent.push({ message, handle, done }), self, workers, () => clock.now);
  const counts = { connections: 0, refusedConnections: 0, passedConnections: 0 };
  const served: Socket[] = [];
  const server = createServer();
  servers.push(server);
  server.on("connection", (socket) => {
    counts.connections++;
    served.push(socket);
    socket.once("close", () => counts.connections--);
  });
  gate.attach(server, counts, limit);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return { gate, counts, served, sent, server, port, clock };
}

/** Opens a client connection to `port`; resolves once connected, with a promise of its close. */
async function client(port: number): Promise<{ socket: Socket; closed: Promise<void> }> {
  const socket = connect(port, "127.0.0.1");
  clients.push(socket);
  socket.on("error", () => {});
  const closed = new Promise<void>((r) => socket.once("close", () => r()));
  await new Promise((r) => socket.once("connect", r));
  return { socket, closed };
}

/** Resolves once `check` holds (polled each 5 ms, at most 2 s). */
async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 400 && !check(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(check()).toBe(true);
}

describe("a worker's connection gate", () => {
  it("serves up to its share; the next connection's descriptor goes to the primary unread, and this process's copy is closed once sent", async () => {
    const w = await gatedServer(1, 2, 1);
    await client(w.port);
    await until(() => w.served.length === 1);
    const second = await client(w.port);
    second.socket.write("GET / HTTP/1.1\r\n\r\n"); // sent before the hand-off completes: left unread for the taker
    await until(() => w.sent.length === 1);
    expect(w.served).toHaveLength(1);
    expect(w.sent[0]!.message).toEqual({ type: OVERFLOW_MESSAGE, op: "pass", tried: [1] });
    expect(w.counts).toMatchObject({ connections: 1, passedConnections: 1, refusedConnections: 0 });
    // Not closed until the send settles (the message holds the descriptor meanwhile)...
    const early = await Promise.race([second.closed.then(() => "closed"), new Promise((r) => setTimeout(() => r("open"), 100))]);
    expect(early).toBe("open");
    // ... then this process's copy closes (with no other process holding it here, the client sees the close).
    w.sent[0]!.done(null);
    await second.closed;
    expect(w.counts.refusedConnections).toBe(0);
  });

  it("a send that fails closes the connection and counts it refused here", async () => {
    const w = await gatedServer(1, 2, 1);
    await client(w.port);
    await until(() => w.served.length === 1);
    const second = await client(w.port);
    await until(() => w.sent.length === 1);
    w.sent[0]!.done(new Error("the primary's channel is closed"));
    await second.closed;
    expect(w.counts).toMatchObject({ passedConnections: 1, refusedConnections: 1 });
  });

  it(`passes at most MAX_PASSING (${MAX_PASSING}) at once: past them a connection over the share is closed and counted`, async () => {
    const w = await gatedServer(1, 2, 0);
    await Promise.all(Array.from({ length: MAX_PASSING }, () => client(w.port)));
    await until(() => w.sent.length === MAX_PASSING);
    const over = await client(w.port);
    await over.closed;
    expect(w.sent).toHaveLength(MAX_PASSING);
    expect(w.counts).toMatchObject({ passedConnections: MAX_PASSING, refusedConnections: 1 });
    // One settled: room to pass another.
    w.sent[0]!.done(null);
    await client(w.port);
    await until(() => w.sent.length === MAX_PASSING + 1);
  });

  it(`told that every worker was full, it counts the refusal and closes what arrives past its share at once for ${FULL_PAUSE_MS} ms (its clock); a refusal for want of queue room does not pause it`, async () => {
    const w = await gatedServer(2, 3, 0);
    expect(w.gate.receive({ type: OVERFLOW_MESSAGE, op: "refused", tried: [2, 3] }, undefined)).toBe(true);
    expect(w.counts.refusedConnections).toBe(1);
    await client(w.port);
    await until(() => w.sent.length === 1);
    expect(w.gate.receive({ type: OVERFLOW_MESSAGE, op: "refused", tried: [2, 3, 1], full: true }, undefined)).toBe(true);
    expect(w.counts.refusedConnections).toBe(2);
    const shut = await client(w.port);
    await shut.closed;
    expect(w.sent).toHaveLength(1);
    expect(w.counts.refusedConnections).toBe(3);
    w.clock.now += FULL_PAUSE_MS;
    await client(w.port);
    await until(() => w.sent.length === 2);
    // A refusal of another worker's connection is that worker's to count.
    w.gate.receive({ type: OVERFLOW_MESSAGE, op: "refused", tried: [1, 2], full: true }, undefined);
    expect(w.counts.refusedConnections).toBe(3);
  });

  it("takes a connection the primary offers as one it accepted, and serves it; one it has no room for goes on, or, all tried, is refused to the first worker", async () => {
    // Descriptors to offer: the server sides of loopback connections to another server, taken off their sockets.
    const source = createServer();
    servers.push(source);
    const incoming: Socket[] = [];
    source.on("connection", (socket) => incoming.push(socket));
    await new Promise<void>((r) => source.listen(0, "127.0.0.1", r));
    const offered = async (): Promise<{ handle: NativeHandle; peer: Socket }> => {
      const { socket: peer } = await client((source.address() as { port: number }).port);
      await until(() => incoming.length > 0);
      const socket = incoming.shift()!;
      const handle = (socket as unknown as { _handle: NativeHandle & { reading: boolean } })._handle;
      handle.readStop();
      handle.reading = false;
      (socket as unknown as { _handle: unknown })._handle = null;
      socket.destroy();
      return { handle, peer };
    };
    const w = await gatedServer(2, 3, 1);
    const first = await offered();
    expect(w.gate.receive({ type: OVERFLOW_MESSAGE, op: "take", tried: [1] }, first.handle)).toBe(true);
    expect(w.served).toHaveLength(1);
    expect(w.counts.connections).toBe(1);
    // The same connection, end to end: what the client sends reaches the taker's socket.
    const got = new Promise<string>((r) => w.served[0]!.once("data", (d) => r(String(d))));
    first.peer.write("hello");
    expect(await got).toBe("hello");
    // Full now: a second offer goes on to the primary, this worker added to the tried.
    const second = await offered();
    w.gate.receive({ type: OVERFLOW_MESSAGE, op: "take", tried: [1] }, second.handle);
    expect(w.sent.map((s) => s.message)).toEqual([{ type: OVERFLOW_MESSAGE, op: "pass", tried: [1, 2] }]);
    expect(w.sent[0]!.handle).toBe(second.handle);
    // All three workers had the third: closed, and reported for worker 1 (the first) to count.
    const third = await offered();
    const closed = new Promise((r) => third.peer.once("close", r));
    w.gate.receive({ type: OVERFLOW_MESSAGE, op: "take", tried: [1, 3] }, third.handle);
    await closed;
    expect(w.sent.slice(1).map((s) => [s.message, s.handle])).toEqual([[{ type: OVERFLOW_MESSAGE, op: "refused", tried: [1, 3, 2], full: true }, undefined]]);
    expect(w.counts.refusedConnections).toBe(0);
    w.sent[0]!.done(null);
  });

  it("checks a message whole", () => {
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "pass", tried: [1] })).toBe(true);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "refused", tried: [1], full: true })).toBe(true);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "refused", tried: [1], full: "yes" })).toBe(false);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "steal", tried: [1] })).toBe(false);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "pass", tried: [] })).toBe(false);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "pass", tried: ["1"] })).toBe(false);
    expect(isOverflowMessage({ type: OVERFLOW_MESSAGE, op: "pass", tried: Array.from({ length: 2000 }, () => 1) })).toBe(false);
    expect(isOverflowMessage({ type: "other", op: "pass", tried: [1] })).toBe(false);
  });
});

describe("the primary's overflow relay", () => {
  /** A worker that records what it is sent; its sends settle when told (or at once with `fails`). */
  const target = (slot: number, fails = false) => {
    const sent: Sent[] = [];
    const t: OverflowTarget & { sent: Sent[] } = {
      slot,
      sent,
      send: (message, handle, done) => {
        sent.push({ message, handle, done });
        if (fails) done(new Error("closed"));
      },
    };
    return t;
  };
  const descriptor = () => {
    const h = { closed: 0, readStop: () => 0, close: () => void h.closed++ };
    return h;
  };
  const pass = (tried: number[]): OverflowMessage => ({ type: OVERFLOW_MESSAGE, op: "pass", tried });
  const ops = (t: { sent: Sent[] }) => t.sent.map((s) => `${s.message.op} ${s.message.tried.join(",")}${s.message.full === true ? " full" : ""}`);

  it("offers a connection to the next worker after its sender that has not had it, wrapping, and closes its copy once the offer is sent", () => {
    const workers = [target(1), target(2), target(3)];
    const relay = new OverflowRelay(() => workers);
    const h = descriptor();
    relay.receive(pass([2]), h, 2, false);
    expect(ops(workers[2]!)).toEqual(["take 2"]);
    expect(workers[2]!.sent[0]!.handle).toBe(h);
    expect(h.closed).toBe(0);
    workers[2]!.sent[0]!.done(null);
    expect(h.closed).toBe(1);
    relay.receive(pass([1, 3]), descriptor(), 3, false);
    expect(ops(workers[1]!)).toEqual(["take 1,3"]);
  });

  it("with no worker left, while stopping, or when the offer cannot be sent: closes the descriptor and reports it to the first worker", () => {
    const workers = [target(1), target(2, true), target(3)];
    const relay = new OverflowRelay(() => workers);
    const all = descriptor();
    relay.receive(pass([3, 1, 2]), all, 2, false);
    expect(all.closed).toBe(1);
    expect(ops(workers[2]!)).toEqual(["refused 3,1,2 full"]);
    const stopping = descriptor();
    relay.receive(pass([1]), stopping, 1, true);
    expect(stopping.closed).toBe(1);
    expect(ops(workers[0]!)).toEqual(["refused 1"]);
    const failed = descriptor();
    relay.receive(pass([1, 3]), failed, 3, false); // to worker 2, whose channel is closed
    expect(failed.closed).toBe(1);
    expect(ops(workers[0]!)).toEqual(["refused 1", "refused 1,3"]);
    // A worker's own refusal of another's connection goes to that worker, full or not as the worker said.
    relay.receive({ type: OVERFLOW_MESSAGE, op: "refused", tried: [3, 1] }, undefined, 1, false);
    relay.receive({ type: OVERFLOW_MESSAGE, op: "refused", tried: [3, 1, 2], full: true }, undefined, 2, false);
    expect(ops(workers[2]!)).toEqual(["refused 3,1,2 full", "refused 3,1", "refused 3,1,2 full"]);
  });

  it(`queues at most MAX_PASSING (${MAX_PASSING}) offers to a worker; offers queued to a worker that exits are closed and reported, their late settling ignored`, () => {
    const workers = [target(1), target(2)];
    const relay = new OverflowRelay(() => workers);
    const queued = Array.from({ length: MAX_PASSING }, () => descriptor());
    for (const h of queued) relay.receive(pass([1]), h, 1, false);
    expect(workers[1]!.sent).toHaveLength(MAX_PASSING);
    const over = descriptor();
    relay.receive(pass([1]), over, 1, false);
    expect(over.closed).toBe(1);
    expect(ops(workers[0]!)).toEqual(["refused 1"]);
    relay.exited(2);
    expect(queued.every((h) => h.closed === 1)).toBe(true);
    expect(workers[0]!.sent).toHaveLength(1 + MAX_PASSING);
    workers[1]!.sent[0]!.done(null); // node settling after the exit: nothing closed twice
    expect(queued[0]!.closed).toBe(1);
    // A message with a descriptor that is not a pass (or names another sender last) is closed.
    const odd = descriptor();
    relay.receive({ type: OVERFLOW_MESSAGE, op: "take", tried: [1] }, odd, 1, false);
    const forged = descriptor();
    relay.receive(pass([2]), forged, 1, false);
    expect([odd.closed, forged.closed]).toEqual([1, 1]);
  });
});
