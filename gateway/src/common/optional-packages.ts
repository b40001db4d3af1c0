// Packages only some configurations use, loaded the first time one is used
// rather than when the gateway starts: ZeroMQ for KV events over ZeroMQ (its
// native addon and bindings were 7.6 MiB of a bare process's RSS) and msgpack
// for those events and replication (5.2 MiB). Both are CommonJS, so an ES
// import elsewhere (a test's, say) shares the one instance required here.

import { createRequire } from "node:module";
import type * as ZeroMq from "zeromq";
import type * as MsgPack from "@msgpack/msgpack";

/** require() from this module's place (the package's dependencies resolve as its imports would). */
const requireHere = createRequire(import.meta.url);

let zeromqModule: typeof ZeroMq | null = null;
let msgpackModule: typeof MsgPack | null = null;

/** The zeromq package, required on first use. */
export function zeromq(): typeof ZeroMq {
  return (zeromqModule ??= requireHere("zeromq") as typeof ZeroMq);
}

/** The @msgpack/msgpack package, required on first use. */
export function msgpack(): typeof MsgPack {
  return (msgpackModule ??= requireHere("@msgpack/msgpack") as typeof MsgPack);
}
