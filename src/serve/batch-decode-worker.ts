// The batch decoder's worker thread (batch-decoder.ts): prepares the large
// event batches it is sent (batch-preparation.ts) and posts each back as a
// head, then one message per slice, so the event loop that applies them
// deserializes one slice per turn.

import { parentPort } from "node:worker_threads";
import type { Decoder } from "@msgpack/msgpack";
import { batchDecoder, prepareBatch } from "./batch-preparation.js";
import type { BatchRequest, BatchReply } from "./batch-decoder.js";

/** Decoders by their item bound (an upstream's limits; few distinct). */
const decoders = new Map<number, Decoder>();

parentPort!.on("message", (request: BatchRequest) => {
  const post = (reply: BatchReply) => parentPort!.postMessage(reply);
  let decoder = decoders.get(request.maxItems);
  if (decoder === undefined) decoders.set(request.maxItems, (decoder = batchDecoder(request.maxItems)));
  const prepared = prepareBatch(request.payload, decoder, request.limits);
  if (prepared.kind !== "ok") return post({ id: request.id, kind: prepared.kind, detail: prepared.detail });
  post({ id: request.id, kind: "head", time: prepared.time, digest: prepared.digest, slices: prepared.slices.length });
  prepared.slices.forEach((slice, k) => post({ id: request.id, kind: "slice", k, slice }));
});
