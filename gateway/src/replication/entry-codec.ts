// State-log entries as the replicas exchange them: one msgpack message per
// entry, `[VERSION, origin, counter, op, ...fields]`, a learned prompt as its
// block hashes (8 little-endian bytes a block, PrefixIndex.blockHashes: the
// receiver's insert of them is the same change as inserting the tokens), engine events as they were decoded (bigints for 64-bit
// integers, bytes for byte hashes). An entry names its upstream by URL, not by
// rank: replicas reloading a new fleet at different moments number it
// differently for a while, and a URL means the same upstream at all of them.
// Reading one back checks every field before anything is applied, against the
// reading replica's own bounds (its fleet size, its longest prompt, its
// engines' batch limits), and the decoder allocates no list or byte string
// longer than those allow: a damaged or hostile message is a SyncEntryError,
// never a half-applied change nor an allocation its header asked for.

import type { Decoder, Encoder } from "@msgpack/msgpack";
import { msgpack } from "../common/optional-packages.js";
import { MAX_KEY_LENGTH } from "adp-router";
import { sliceKvEvents } from "adp-router";
import type { StateEntry } from "../fleet/routing-state.js";
import { maxBatchEvents } from "../events/event-slicing.js";

/** The codec's version, first in every message. */
const VERSION = 1;

/** The entries replicas share (a routed batch stays with the replica that routed it: its tie-breaks and counters are its own). */
export type SharedEntry = Extract<StateEntry, { op: "learn-blocks" | "bind" | "kv-events" | "clear" }>;

/** A fleet change as replicas share it: the upstreams' URLs in their new order, and their engine views' shapes. */
export interface FleetEntry {
  readonly op: "fleet";
  readonly urls: readonly string[];
  readonly dpRanks: readonly (number | null)[];
}

/** One entry as it travels: the change, who made it, and its number there. */
export type SyncMessage =
  | {
      /** The replica incarnation that made it (`replica#incarnation`). */
      readonly origin: string;
      /** Its number at that origin (from 0). */
      readonly counter: number;
      /** The upstream's URL (the entry's `upstream` is only the sender's rank for it). */
      readonly url: string;
      readonly entry: SharedEntry;
    }
  | { readonly origin: string; readonly counter: number; readonly entry: FleetEntry };

/** A message that is not an entry this codec wrote, or one over the reader's bounds (`overBounds`). */
export class SyncEntryError extends Error {
  readonly code = "ERR_ADP_SYNC_ENTRY";
  constructor(
    message: string,
    readonly overBounds = false,
  ) {
    super(message);
    this.name = "SyncEntryError";
  }
}

/** What a replica takes in one entry at most: its own configuration's bounds. */
export interface EntryBounds {
  /** Upstreams a fleet change may name (sync.max_fleet). */
  readonly maxFleet: number;
  /** Blocks a learned prompt may have (limits.max_prompt_tokens in routing.tokens_per_block blocks). */
  readonly maxLearnBlocks: number;
  /** Blocks and tokens an engine batch may name (its upstreams' largest kv_events.max_batch_blocks and max_batch_tokens). */
  readonly maxBatchBlocks: number;
  readonly maxBatchTokens: number;
}

/** The codec's own bounds, for a reader that gives none. */
export const CODEC_BOUNDS: EntryBounds = Object.freeze({ maxFleet: 65535, maxLearnBlocks: 1 << 22, maxBatchBlocks: 1 << 24, maxBatchTokens: 1 << 24 });

/** Decoders by bounds (a replica has one set; tests a few). */
const decoders = new WeakMap<EntryBounds, Decoder>();

/** A decoder that allocates no list or byte string past `bounds`. */
function decoderFor(bounds: EntryBounds): Decoder {
  let d = decoders.get(bounds);
  if (d === undefined) {
    const items = Math.max(bounds.maxFleet, bounds.maxBatchBlocks, bounds.maxBatchTokens) + 16;
    d = new (msgpack().Decoder)({ useBigInt64: true, maxStrLength: 1 << 16, maxBinLength: 8 * bounds.maxLearnBlocks, maxArrayLength: items, maxMapLength: 1 << 10, maxExtLength: 0 });
    decoders.set(bounds, d);
  }
  return d;
}

/** Whether an entry is one replicas share. */
export const isShared = (entry: StateEntry): entry is SharedEntry => entry.op === "learn-blocks" || entry.op === "bind" || entry.op === "kv-events" || entry.op === "clear";

/** The entries' encoder (made on first use: msgpack is loaded only by a replica). */
let encoderMade: Encoder | null = null;
const entryEncoder = (): Encoder => (encoderMade ??= new (msgpack().Encoder)({ useBigInt64: true, ignoreUndefined: true }));

/** u32 words as little-endian bytes (the same on every platform). */
function wordBytes(words: Uint32Array): Uint8Array {
  const out = new Uint8Array(words.length * 4);
  const view = new DataView(out.buffer);
  for (let i = 0; i < words.length; i++) view.setUint32(4 * i, words[i]!, true);
  return out;
}

/** Encodes one shared entry. */
export function encodeEntry(message: SyncMessage): Uint8Array {
  const { origin, counter } = message;
  const encoder = entryEncoder();
  if ("url" in message) {
    const { url, entry } = message;
    switch (entry.op) {
      // A DP rank (phase 2's choice) last, where there is one: entries without stay as they were.
      case "learn-blocks":
        return encoder.encode([VERSION, origin, counter, "learn", url, wordBytes(entry.hashes), entry.namespace.loraTaskId ?? null, entry.namespace.cacheSalt ?? null, ...(entry.rank === undefined ? [] : [entry.rank])]);
      case "bind":
        return encoder.encode([VERSION, origin, counter, "bind", url, entry.key, ...(entry.rank === undefined ? [] : [entry.rank])]);
      case "kv-events":
        return encoder.encode([VERSION, origin, counter, "kv-events", url, entry.dpRank ?? null, entry.events, entry.id ?? null]);
      case "clear":
        return encoder.encode([VERSION, origin, counter, "clear", url, entry.dpRank ?? null, entry.id ?? null]);
    }
  }
  return encoder.encode([VERSION, origin, counter, "fleet", message.entry.urls, message.entry.dpRanks]);
}

/** Longest upstream URL taken. */
const MAX_URL = 2048;
/** Most upstreams a fleet entry names (the router's most ranks). */
const MAX_UPSTREAMS = 65535;

/** An upstream URL, or a SyncEntryError. */
function urlOf(v: unknown): string {
  if (typeof v !== "string" || v.length === 0 || v.length > MAX_URL) throw new SyncEntryError("the upstream must be a URL");
  return v;
}

/** A non-negative integer below `max`, or a SyncEntryError naming `field`. */
function index(v: unknown, max: number, field: string): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v >= max) throw new SyncEntryError(`${field} must be an integer in [0, ${max})`);
  return v;
}

/** A DP rank or none. */
const dpRankOf = (v: unknown): number | undefined => (v === null ? undefined : index(v, 1024, "dpRank"));
/** The DP rank a learned prompt or binding was placed on (phase 2), or none (absent: a replica that routes no ranks). */
const placedRankOf = (v: unknown): number | undefined => (v === undefined || v === null ? undefined : index(v, 1024, "rank"));

/** Decodes one message into an entry, checking every field against `bounds`; throws SyncEntryError. */
export function decodeEntry(bytes: Uint8Array, bounds: EntryBounds = CODEC_BOUNDS): SyncMessage {
  let raw: unknown;
  try {
    raw = decoderFor(bounds).decode(bytes);
  } catch (error) {
    const message = (error as Error).message;
    throw new SyncEntryError(`not msgpack: ${message.slice(0, 120)}`, message.includes("Max length exceeded"));
  }
  if (!Array.isArray(raw) || raw[0] !== VERSION) throw new SyncEntryError(`not a version ${VERSION} entry`);
  const [, origin, counter, op] = raw as unknown[];
  if (typeof origin !== "string" || origin.length === 0 || origin.length > 200) throw new SyncEntryError("origin must be a short string");
  if (typeof counter !== "number" || !Number.isSafeInteger(counter) || counter < 0) throw new SyncEntryError("counter must be a non-negative safe integer");
  if (op === "fleet") {
    const urls = raw[4];
    const dpRanks = raw[5];
    if (!Array.isArray(urls) || urls.length === 0 || urls.length > MAX_UPSTREAMS) throw new SyncEntryError("fleet: urls must be a list of upstream URLs");
    if (urls.length > bounds.maxFleet) throw new SyncEntryError(`fleet: ${urls.length} upstreams, over sync.max_fleet (${bounds.maxFleet})`, true);
    if (!Array.isArray(dpRanks) || dpRanks.length !== urls.length) throw new SyncEntryError("fleet: one dpRanks entry per upstream");
    const names = urls.map(urlOf);
    if (new Set(names).size !== names.length) throw new SyncEntryError("fleet: an upstream is named twice");
    return { origin, counter, entry: { op: "fleet", urls: names, dpRanks: dpRanks.map((d) => (d === null ? null : 1 + index(typeof d === "number" ? d - 1 : d, 1024, "dpRanks"))) } };
  }
  const url = urlOf(raw[4]);
  const upstream = -1; // the receiver's rank for `url` is its own
  if (op === "learn") {
    const bytes = raw[5];
    if (!(bytes instanceof Uint8Array) || bytes.length % 8 !== 0) throw new SyncEntryError("learn: block hashes must be whole 8-byte hashes");
    if (bytes.length > 8 * bounds.maxLearnBlocks) throw new SyncEntryError(`learn: ${bytes.length / 8} blocks, over this replica's longest prompt (${bounds.maxLearnBlocks} blocks)`, true);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const hashes = new Uint32Array(bytes.length / 4);
    for (let i = 0; i < hashes.length; i++) hashes[i] = view.getUint32(4 * i, true);
    const lora = raw[6];
    const salt = raw[7];
    if (lora !== null && !(typeof lora === "number" && Number.isSafeInteger(lora))) throw new SyncEntryError("learn: loraTaskId must be a safe integer or null");
    if (salt !== null && !(typeof salt === "string" && salt.length <= MAX_KEY_LENGTH)) throw new SyncEntryError("learn: cacheSalt must be a short string or null");
    const rank = placedRankOf(raw[8]);
    return { origin, counter, url, entry: { op: "learn-blocks", upstream, hashes, namespace: { loraTaskId: lora as number | null, cacheSalt: salt as string | null }, ...(rank === undefined ? {} : { rank }) } };
  }
  if (op === "bind") {
    const key = raw[5];
    if (typeof key !== "string" || key.length === 0 || key.length > MAX_KEY_LENGTH) throw new SyncEntryError("bind: key must be a string of 1 to 4096 characters");
    const rank = placedRankOf(raw[6]);
    return { origin, counter, url, entry: { op: "bind", upstream, key, ...(rank === undefined ? {} : { rank }) } };
  }
  if (op === "kv-events") {
    const dpRank = dpRankOf(raw[5]);
    const id = raw[7];
    if (id !== null && id !== undefined && !(typeof id === "string" && id.length <= 512)) throw new SyncEntryError("kv-events: id must be a short string or null");
    const size = sliceKvEvents(raw[6], Infinity);
    // Its list bounded as an engine's batch's is: events naming no block are work too.
    const maxEvents = maxBatchEvents(bounds);
    if (size.blocks > bounds.maxBatchBlocks || size.tokens > bounds.maxBatchTokens || size.events > maxEvents) throw new SyncEntryError(`kv-events: ${size.blocks} blocks, ${size.tokens} tokens and ${size.events} events, over this replica's batch limits (${bounds.maxBatchBlocks} blocks, ${bounds.maxBatchTokens} tokens, ${maxEvents} events)`, true);
    return { origin, counter, url, entry: { op: "kv-events", upstream, events: raw[6], ...(dpRank === undefined ? {} : { dpRank }), ...(typeof id === "string" ? { id } : {}) } };
  }
  if (op === "clear") {
    const dpRank = dpRankOf(raw[5]);
    const id = raw[6];
    if (id !== null && id !== undefined && !(typeof id === "string" && id.length <= 512)) throw new SyncEntryError("clear: id must be a short string or null");
    if (typeof id === "string") return { origin, counter, url, entry: { op: "clear", upstream, ...(dpRank === undefined ? {} : { dpRank }), id } };
    return { origin, counter, url, entry: { op: "clear", upstream, ...(dpRank === undefined ? {} : { dpRank }) } };
  }
  throw new SyncEntryError("op must be learn, bind, kv-events, clear or fleet");
}
