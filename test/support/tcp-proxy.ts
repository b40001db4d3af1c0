// A TCP proxy on loopback that a test can cut and restore: what stands between
// a gateway replica and its nats-server when the network between them fails.

import { connect as connectTcp, createServer, type Socket } from "node:net";

/** A running proxy to a loopback port. */
export interface CuttableProxy {
  readonly port: number;
  /** Stops accepting and drops every connection through it. */
  cut(): Promise<void>;
  /** Accepts again, on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

/** Starts a proxy from a free loopback port to `target`. */
export async function startProxy(target: number): Promise<CuttableProxy> {
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connectTcp(target, "127.0.0.1");
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => s.destroy());
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  const cut = () =>
    new Promise<void>((r) => {
      server.close(() => r());
      for (const s of sockets) s.destroy();
    });
  return {
    port,
    cut,
    restore: () => new Promise<void>((r) => server.listen(port, "127.0.0.1", r)),
    close: async () => {
      if (server.listening) await cut();
    },
  };
}
