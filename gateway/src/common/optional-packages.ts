// Packages only some configurations use, loaded the first time one is used
// rather than when the gateway starts: ZeroMQ for KV events over ZeroMQ (its
// native addon and bindings were 7.6 MiB of a bare process's RSS), msgpack
// for those events and replication (5.2 MiB), and the NATS client for
// replication (11.5 MiB; 1.2 MiB of the gateway's idle V8 heap, for each full
// collection to walk), and undici for https:// upstreams (19.7 MiB of a bare
// process's RSS and 6 MiB of V8 heap; http:// upstreams go through the
// gateway's own client, http1/). All are CommonJS, so an ES import elsewhere (a test's,
// say) shares the one instance required here.

import { createRequire } from "node:module";
import type * as ZeroMq from "zeromq";
import type * as MsgPack from "@msgpack/msgpack";
import type * as NatsTransport from "@nats-io/transport-node";
import type * as NatsJetStream from "@nats-io/jetstream";
import type * as NatsObjects from "@nats-io/obj";
import type * as Undici from "undici";

/** require() from this module's place (the package's dependencies resolve as its imports would). */
const requireHere = createRequire(import.meta.url);

let zeromqModule: typeof ZeroMq | null = null;
let msgpackModule: typeof MsgPack | null = null;
let undiciModule: typeof Undici | null = null;

/** What replication uses of the NATS client's three packages. */
export interface NatsPackages {
  readonly transport: typeof NatsTransport;
  readonly jetstream: typeof NatsJetStream;
  readonly objects: typeof NatsObjects;
}

let natsModules: NatsPackages | null = null;

/** The zeromq package, required on first use. */
export function zeromq(): typeof ZeroMq {
  return (zeromqModule ??= requireHere("zeromq") as typeof ZeroMq);
}

/** The @msgpack/msgpack package, required on first use. */
export function msgpack(): typeof MsgPack {
  return (msgpackModule ??= requireHere("@msgpack/msgpack") as typeof MsgPack);
}

/** The undici package, required on first use (an https:// upstream). */
export function undici(): typeof Undici {
  return (undiciModule ??= requireHere("undici") as typeof Undici);
}

/** The NATS client's packages, required on first use. */
export function nats(): NatsPackages {
  return (natsModules ??= {
    transport: requireHere("@nats-io/transport-node") as typeof NatsTransport,
    jetstream: requireHere("@nats-io/jetstream") as typeof NatsJetStream,
    objects: requireHere("@nats-io/obj") as typeof NatsObjects,
  });
}
