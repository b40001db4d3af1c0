// State-log entries as the replicas exchange them: one msgpack message per
// entry, `[VERSION, origin, counter, op, ...fields]`, token ids as their
// little-endian bytes, engine events as they were decoded (bigints for 64-bit
// integers, bytes for byte hashes). Reading one back checks every field before
// anything is applied: a damaged or hostile message is a SyncEntryError, never
// a half-applied change.

import { Decoder, Encoder } from "@msgpack/msgpack";
import { MAX_KEY_LENGTH } from "../../batch.js";
import type { StateEntry } from "../routing-state.js";

/** The codec's version, first in every message. */
const VERSION = 1;
/** Most token ids one learned prompt carries (16 MiB of ids). */
const MAX_TOKENS = 1 << 22;

/** The entries replicas share (a routed batch stays with the replica that routed it: its tie-breaks and counters are its own). */
export type SharedEntry = Extract<StateEntry, { op: "learn" | "bind" | "kv-events" | "clear" }>;

/** One entry as it travels: the change, who made it, and its number there. */
export interface SyncMessage {
  /** The replica incarnation that made it (`replica#incarnation`). */
  readonly origin: string;
  /** Its number at that origin (from 0). */
  readonly counter: number;
  readonly entry: SharedEntry;
}

/** A message that is not an entry this codec wrote. */
export class SyncEntryError extends Error {
  readonly code = "ERR_ADP_SYNC_ENTRY";
  constructor(message: string) {
    super(message);
    this.name = "SyncEntryError";
  }
}

/** Whether an entry is one replicas share. */
export const isShared = (entry: StateEntry): entry is SharedEntry => entry.op === "learn" || entry.op === "bind" || entry.op === "kv-events" || entry.op === "clear";

const encoder = new Encoder({ useBigInt64: true, ignoreUndefined: true });
const decoder = new Decoder({ useBigInt64: true, maxStrLength: 1 << 20, maxBinLength: 4 * MAX_TOKENS, maxArrayLength: 1 << 24, maxMapLength: 1 << 10, maxExtLength: 0 });

/** Token ids as little-endian bytes (the same on every platform). */
function tokenBytes(tokens: Uint32Array): Uint8Array {
  const out = new Uint8Array(tokens.length * 4);
  const view = new DataView(out.buffer);
  for (let i = 0; i < tokens.length; i++) view.setUint32(4 * i, tokens[i]!, true);
  return out;
}

/** Encodes one shared entry. */
export function encodeEntry(message: SyncMessage): Uint8Array {
  const { origin, counter, entry } = message;
  switch (entry.op) {
    case "learn":
      return encoder.encode([VERSION, origin, counter, "learn", entry.upstream, tokenBytes(entry.tokens), entry.namespace.loraTaskId ?? null, entry.namespace.cacheSalt ?? null]);
    case "bind":
      return encoder.encode([VERSION, origin, counter, "bind", entry.upstream, entry.key]);
    case "kv-events":
      return encoder.encode([VERSION, origin, counter, "kv-events", entry.upstream, entry.dpRank ?? null, entry.events]);
    case "clear":
      return encoder.encode([VERSION, origin, counter, "clear", entry.upstream, entry.dpRank ?? null]);
  }
}

/** A non-negative integer below `max`, or a SyncEntryError naming `field`. */
function index(v: unknown, max: number, field: string): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v >= max) throw new SyncEntryError(`${field} must be an integer in [0, ${max})`);
  return v;
}

/** A DP rank or none. */
const dpRankOf = (v: unknown): number | undefined => (v === null ? undefined : index(v, 1024, "dpRank"));

/** Decodes one message into an entry, checking every field; throws SyncEntryError. */
export function decodeEntry(bytes: Uint8Array): SyncMessage {
  let raw: unknown;
  try {
    raw = decoder.decode(bytes);
  } catch (error) {
    throw new SyncEntryError(`not msgpack: ${(error as Error).message.slice(0, 120)}`);
  }
  if (!Array.isArray(raw) || raw[0] !== VERSION) throw new SyncEntryError(`not a version ${VERSION} entry`);
  const [, origin, counter, op] = raw as unknown[];
  if (typeof origin !== "string" || origin.length === 0 || origin.length > 200) throw new SyncEntryError("origin must be a short string");
  if (typeof counter !== "number" || !Number.isSafeInteger(counter) || counter < 0) throw new SyncEntryError("counter must be a non-negative safe integer");
  const upstream = index(raw[4], 65536, "upstream");
  if (op === "learn") {
    const bytes = raw[5];
    if (!(bytes instanceof Uint8Array) || bytes.length % 4 !== 0 || bytes.length > 4 * MAX_TOKENS) throw new SyncEntryError("learn: tokens must be whole 4-byte ids");
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const tokens = new Uint32Array(bytes.length / 4);
    for (let i = 0; i < tokens.length; i++) tokens[i] = view.getUint32(4 * i, true);
    const lora = raw[6];
    const salt = raw[7];
    if (lora !== null && !(typeof lora === "number" && Number.isSafeInteger(lora))) throw new SyncEntryError("learn: loraTaskId must be a safe integer or null");
    if (salt !== null && !(typeof salt === "string" && salt.length <= MAX_KEY_LENGTH)) throw new SyncEntryError("learn: cacheSalt must be a short string or null");
    return { origin, counter, entry: { op: "learn", upstream, tokens, namespace: { loraTaskId: lora as number | null, cacheSalt: salt as string | null } } };
  }
  if (op === "bind") {
    const key = raw[5];
    if (typeof key !== "string" || key.length === 0 || key.length > MAX_KEY_LENGTH) throw new SyncEntryError("bind: key must be a string of 1 to 4096 characters");
    return { origin, counter, entry: { op: "bind", upstream, key } };
  }
  if (op === "kv-events") {
    const dpRank = dpRankOf(raw[5]);
    return { origin, counter, entry: { op: "kv-events", upstream, events: raw[6], ...(dpRank === undefined ? {} : { dpRank }) } };
  }
  if (op === "clear") {
    const dpRank = dpRankOf(raw[5]);
    return { origin, counter, entry: { op: "clear", upstream, ...(dpRank === undefined ? {} : { dpRank }) } };
  }
  throw new SyncEntryError("op must be learn, bind, kv-events or clear");
}
