// The @nats-io packages, loaded the first time a replica connects. A gateway
// without `sync:` never loads them: imported at start-up they were 1.2 MiB of
// the gateway's idle V8 heap, for each full collection to walk, and 11.5 MiB
// of a bare process's RSS (docs/performance.md#footprint).

import type * as Transport from "@nats-io/transport-node";
import type * as JetStream from "@nats-io/jetstream";
import type * as ObjectStore from "@nats-io/obj";

/** What replication uses of the three packages. */
export interface NatsModules {
  readonly transport: typeof Transport;
  readonly jetstream: typeof JetStream;
  readonly objects: typeof ObjectStore;
}

/** The packages once loaded (one load, however many replicas ask). */
let loading: Promise<NatsModules> | null = null;

/** The @nats-io packages, imported on first use. */
export function natsModules(): Promise<NatsModules> {
  loading ??= Promise.all([import("@nats-io/transport-node"), import("@nats-io/jetstream"), import("@nats-io/obj")]).then(([transport, jetstream, objects]) => ({ transport, jetstream, objects }));
  return loading;
}
