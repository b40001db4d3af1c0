// The batch decoder's worker thread (batch-decoder.ts): prepares the large
// event batches it is sent (batch-preparation.ts) and answers each with a
// head carrying a port on which its slices wait, a message each, so the event
// loop that applies them deserializes one slice per turn.

import { MessageChannel, parentPort } from "node:worker_threads";
import type { Decoder } from "@msgpack/msgpack";
import { batchDecoder, prepareBatch, type EventRun } from "./batch-preparation.js";
import type { BatchRequest, BatchReply } from "./batch-decoder.js";

/** Decoders by their item bound (an upstream's limits; few distinct). */
const decoders = new Map<number, Decoder>();

/** A polled answer's run with its events as JSON text. */
const textRun = (run: EventRun) => ({ continues: run.continues, events: JSON.stringify(run.events) });

parentPort!.on("message", (request: BatchRequest) => {
  const post = (reply: BatchReply) => parentPort!.postMessage(reply);
  let decoder = decoders.get(request.maxItems);
  if (decoder === undefined) decoders.set(request.maxItems, (decoder = batchDecoder(request.maxItems)));
  const prepared = prepareBatch(request.payload, request.format, decoder, request.limits);
  if (prepared.kind !== "ok") return post({ id: request.id, kind: prepared.kind, detail: prepared.detail });
  // Every slice queued on the port before the head carries it away: each is there when the event loop asks.
  const { port1, port2 } = new MessageChannel();
  // A polled answer's runs go back as JSON text: the event loop parses 1,024 blocks of TensorRT-LLM events
  // in about 4 ms, twice as fast as it deserializes the same objects posted (long integers are text already).
  for (const slice of prepared.slices) port2.postMessage(request.format === "json" ? textRun(slice as EventRun) : slice);
  port2.close();
  parentPort!.postMessage({ id: request.id, kind: "head", time: prepared.time, digest: prepared.digest, slices: prepared.slices.length, port: port1 } satisfies BatchReply, [port1]);
});
