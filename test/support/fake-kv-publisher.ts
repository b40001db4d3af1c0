// A fake engine's KV-event publisher on real ZeroMQ sockets, as vLLM and
// TensorRT-LLM run theirs (kv-events reference §2): per DP rank an XPUB socket
// (a PUB that also tells us when the gateway has subscribed, so no batch is
// lost to ZeroMQ's slow-joiner window) bound at the base port plus the rank,
// and optionally a ROUTER replay socket that answers a start sequence with the
// buffered batches from there, then the end marker (seq -1, empty payload).
// Payloads are the recorded fixture bytes, sent as they are.

import { createServer } from "node:net";
import { Router, XPublisher } from "zeromq";

/** Listens on `port` on loopback for a moment: whether it is free. */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/** The next port tried: below Linux's ephemeral range (32768 and up), spread by process (vitest's workers run files side by side). */
let nextPort = 20_000 + (process.pid % 200) * 50;

/**
 * The first of `n` consecutive free loopback ports, below the ephemeral range:
 * an outgoing connection (a SUB socket reconnecting to a publisher that went
 * away) takes its local port from that range, and could take a port handed
 * out here before the publisher binds it.
 */
export async function freePorts(n: number): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (nextPort + n > 32_000) nextPort = 20_000 + (nextPort % 1000);
    const base = nextPort;
    nextPort += n;
    let ok = true;
    for (let i = 0; i < n && ok; i++) ok = await portFree(base + i);
    if (ok) return base;
  }
  throw new Error("no consecutive free ports");
}

/** How the replay socket frames its replies: vLLM `(seq, payload)`, TensorRT-LLM `(topic, seq, payload)`. */
export type ReplayStyle = "vllm" | "trtllm";

/** A running fake publisher. */
export interface FakePublisher {
  /** DP rank 0's PUB endpoint. */
  readonly endpoint: string;
  /** DP rank 0's replay endpoint, or null. */
  readonly replayEndpoint: string | null;
  /** Resolves once the gateway has subscribed to rank `rank`'s socket (`count` subscribers: several gateways). */
  subscribed(rank: number, count?: number): Promise<void>;
  /** Publishes a batch on rank `rank` (and keeps it for replay). */
  publish(rank: number, seq: bigint, payload: Buffer, topic?: string): Promise<void>;
  /** Keeps a batch for replay without publishing it (a batch the subscriber lost). */
  lose(rank: number, seq: bigint, payload: Buffer): void;
  /** Sends raw frames on rank `rank`'s PUB socket (a malformed message). */
  sendFrames(rank: number, frames: Buffer[]): Promise<void>;
  /** Replay requests received, per rank (their start sequences). */
  readonly replayRequests: bigint[][];
  /** Holds the answers to replay requests (as a busy engine's publisher thread does) until the returned function is called. */
  holdReplays(): () => void;
  /** Closes rank `rank`'s PUB socket and binds a new one on its port, as a network blip looks to a subscriber (its buffer is kept). */
  bounce(rank: number): Promise<void>;
  close(): Promise<void>;
}

/** The 8-byte big-endian sequence frame. */
export const seqFrame = (seq: bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(seq, 0);
  return b;
};

/**
 * Starts a publisher for `dpRanks` ranks on consecutive ports (and a replay
 * socket per rank when `replay` is given). With `connect`, its PUB sockets
 * connect to those ports instead (vLLM with an endpoint without `*`): the
 * gateway binds them. `curve`: a secret key makes it a CURVE server (an
 * engine configured for it); a key set makes it a CURVE client of a gateway
 * that is the server (bind mode).
 */
export async function startFakePublisher(dpRanks: number, replay: ReplayStyle | null = null, connect = false, curve: string | { serverPublicKey: string; publicKey: string; secretKey: string } | null = null): Promise<FakePublisher> {
  const base = await freePorts(dpRanks);
  const replayBase = replay === null ? 0 : await freePorts(dpRanks);
  const pubs: XPublisher[] = [];
  const routers: Router[] = [];
  const subscriptions: { n: number; waiters: { count: number; resolve: () => void }[] }[] = [];
  const buffers: { seq: bigint; payload: Buffer; topic: string }[][] = [];
  const replayRequests: bigint[][] = [];
  const loops: Promise<void>[] = [];
  let held: Promise<void> = Promise.resolve();
  // With a secret key, a CURVE server (as an engine configured for it): only clients that know its public key get its events.
  const curveOptions = curve === null ? {} : typeof curve === "string" ? { curveServer: true, curveSecretKey: curve } : { curveServerKey: curve.serverPublicKey, curvePublicKey: curve.publicKey, curveSecretKey: curve.secretKey };
  /** Rank `r`'s PUB socket, bound (or connected), passing each subscription up: the tests wait for every gateway's. */
  const openPub = async (r: number): Promise<XPublisher> => {
    const pub = new XPublisher({ linger: 0, verbosity: "allSubs", ...curveOptions });
    if (connect) pub.connect(`tcp://127.0.0.1:${base + r}`);
    else await pub.bind(`tcp://127.0.0.1:${base + r}`);
    const seen = subscriptions[r]!;
    void (async () => {
      try {
        for (;;) {
          await pub.receive();
          seen.n++;
          seen.waiters = seen.waiters.filter((w) => (w.count <= seen.n ? (w.resolve(), false) : true));
        }
      } catch {
        // closed
      }
    })();
    return pub;
  };
  for (let r = 0; r < dpRanks; r++) {
    // Subscription messages say the gateways' SUB sockets are connected and subscribed.
    subscriptions.push({ n: 0, waiters: [] });
    pubs.push(await openPub(r));
    buffers.push([]);
    replayRequests.push([]);
    if (replay !== null) {
      const router = new Router({ linger: 0 });
      await router.bind(`tcp://127.0.0.1:${replayBase + r}`);
      routers.push(router);
      loops.push(
        (async () => {
          try {
            for await (const [identity, , start] of router) {
              const from = start!.readBigInt64BE(0);
              replayRequests[r]!.push(from);
              await held;
              for (const b of buffers[r]!) {
                if (b.seq < from) continue;
                await router.send(replay === "vllm" ? [identity!, "", seqFrame(b.seq), b.payload] : [identity!, "", b.topic, seqFrame(b.seq), b.payload]);
              }
              await router.send(replay === "vllm" ? [identity!, "", seqFrame(-1n), ""] : [identity!, "", "", seqFrame(-1n), ""]);
            }
          } catch {
            // closed
          }
        })(),
      );
    }
  }
  return {
    endpoint: `tcp://127.0.0.1:${base}`,
    replayEndpoint: replay === null ? null : `tcp://127.0.0.1:${replayBase}`,
    replayRequests,
    subscribed: (rank, count = 1) =>
      new Promise<void>((resolve) => {
        const seen = subscriptions[rank]!;
        if (seen.n >= count) resolve();
        else seen.waiters.push({ count, resolve });
      }),
    async publish(rank, seq, payload, topic = "") {
      buffers[rank]!.push({ seq, payload, topic });
      await pubs[rank]!.send([topic, seqFrame(seq), payload]);
    },
    holdReplays() {
      let release!: () => void;
      held = new Promise<void>((resolve) => (release = resolve));
      return release;
    },
    async bounce(rank) {
      pubs[rank]!.close();
      // The port is free once the socket's close is processed; binding again retries until it is.
      for (let attempt = 0; ; attempt++) {
        try {
          pubs[rank] = await openPub(rank);
          return;
        } catch (error) {
          if (attempt > 50) throw error;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
      }
    },
    lose(rank, seq, payload) {
      buffers[rank]!.push({ seq, payload, topic: "" });
    },
    async sendFrames(rank, frames) {
      await pubs[rank]!.send(frames);
    },
    async close() {
      for (const s of [...pubs, ...routers]) s.close();
      await Promise.all(loops);
    },
  };
}
