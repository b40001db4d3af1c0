// An engine's KV-event batch measured (the blocks and tokens it names) and cut
// into slices of at most so many blocks, in the batch's own encoding, for
// applying a large batch a slice per turn of the event loop: applying 1,024
// blocks of 16 tokens takes about 2 ms here, a 65,536-block batch 137 ms whole.
//
// A batch is cut between its events, and a stored chain longer than a slice
// is cut into chains of its own, each below the previous one's last block (the
// index inserts below a known parent without its namespace, so the pieces are
// the chain). Applied in order, the slices make the batch's change whenever a
// chain's parent is held, the normal case; a chain whose parent is not held is
// skipped whole, while its later pieces still apply below their own parents
// where the view holds them (what the engine says it stores, then, is kept).
// Only chains whose every block is addressable the same way are cut (valid
// hashes and tokens, one block size, one LoRA id, no multimodal or other extra
// keys past the first block): anything else stays one event, so a malformed or
// partly addressable event is judged whole exactly as before. Later pieces of
// a TensorRT-LLM event carry no event_id (its order was checked on the first).
//
// Measuring and cutting never throw: a batch that cannot be read (a getter
// that throws, a proxy) is left whole and measured as empty, for the parser to
// judge; the gateway's batches are decoded msgpack or JSON, plain data.

import { engineHash, POSITIONAL, tokenId } from "./kv-events.js";

/** A batch measured and cut by {@link sliceKvEvents}. */
export interface KvEventSlices {
  /** Blocks the batch names (stored and removed). */
  readonly blocks: number;
  /** Token ids it carries. */
  readonly tokens: number;
  /** Events it holds (each at least one unit of work to apply, whatever blocks it names; a lone event is 1). */
  readonly events: number;
  /** The batch in order, in slices of at most `maxBlocks` blocks and `maxEvents` events (an event that cannot be cut may hold more blocks). */
  readonly slices: unknown[];
}

/** Whether `v` is a plain object. */
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** One event in a uniform form: its fields by name, and how to write fields back in its own encoding. */
interface EventView {
  get(name: string): unknown;
  with(fields: Record<string, unknown>): unknown;
}

/** A vLLM or TensorRT-LLM event read by field name (positional events through their tag's field list), or null. */
function viewOf(e: unknown): EventView | null {
  if (isObject(e)) return { get: (n) => e[n], with: (f) => ({ ...e, ...f }) };
  if (!Array.isArray(e) || typeof e[0] !== "string" || !Object.hasOwn(POSITIONAL, e[0])) return null;
  const names = POSITIONAL[e[0]]!;
  return {
    get: (n) => (n === "type" ? e[0] : names.includes(n) ? e[names.indexOf(n) + 1] : undefined),
    with: (f) => e.map((v, i) => (i > 0 && Object.hasOwn(f, names[i - 1]!) ? f[names[i - 1]!] : v)),
  };
}

/** Length of `v` when it is a list, else 0. */
const lengthOf = (v: unknown): number => (Array.isArray(v) ? v.length : 0);

/** Blocks and tokens one event names. */
function sizeOf(e: unknown): { blocks: number; tokens: number } {
  const v = viewOf(e);
  if (v === null) return { blocks: 0, tokens: 0 };
  const data = v.get("data");
  if (isObject(data)) {
    // TensorRT-LLM: {event_id, data: {type, blocks | block_hashes}}.
    const blocks = data.blocks;
    if (Array.isArray(blocks)) {
      let tokens = 0;
      for (const b of blocks) if (isObject(b)) tokens += lengthOf(b.tokens);
      return { blocks: blocks.length, tokens };
    }
    return { blocks: lengthOf(data.block_hashes), tokens: 0 };
  }
  return { blocks: lengthOf(v.get("block_hashes")), tokens: lengthOf(v.get("token_ids")) };
}

/** Whether every element of `list` is a valid engine hash. */
const allHashes = (list: unknown[]): boolean => list.every((h) => engineHash(h) !== null);
/** Whether every element of `list` is a valid token id (a number, or a token object in TensorRT-LLM's form). */
function allTokens(list: unknown[]): boolean {
  // A plain loop with a fast path for numbers: a million tokens are checked in about a millisecond.
  for (let i = 0; i < list.length; i++) {
    const t = list[i];
    if (typeof t === "number") {
      if (!(t >= 0 && t < 4294967296 && Math.floor(t) === t)) return false;
    } else if (tokenId(isObject(t) ? t.token_id : t) < 0) return false;
  }
  return true;
}

/** A vLLM BlockStored's pieces of at most `max` blocks, or null when it cannot be cut (see the file's head). */
function cutVllmStored(v: EventView, max: number): unknown[] | null {
  const hashes = v.get("block_hashes");
  const tokens = v.get("token_ids");
  if (!Array.isArray(hashes) || !Array.isArray(tokens) || hashes.length === 0 || tokens.length % hashes.length !== 0) return null;
  const size = tokens.length / hashes.length;
  const declared = v.get("block_size");
  if (declared !== undefined && declared !== null && tokenId(declared) !== size) return null;
  const extra = v.get("extra_keys");
  const loraName = v.get("lora_name");
  if (extra !== undefined && extra !== null) {
    if (!Array.isArray(extra)) return null;
    // Past the first block, only the adapter's own name may appear (the salt rides on the first block alone).
    for (let i = 1; i < extra.length; i++) {
      const keys: unknown = extra[i];
      if (keys === null || keys === undefined) continue;
      if (!Array.isArray(keys) || keys.some((k) => k !== loraName)) return null;
    }
  }
  if (!allHashes(hashes) || !allTokens(tokens)) return null;
  const pieces: unknown[] = [];
  for (let from = 0; from < hashes.length; from += max) {
    const to = Math.min(from + max, hashes.length);
    pieces.push(v.with({
      block_hashes: hashes.slice(from, to),
      parent_block_hash: from === 0 ? v.get("parent_block_hash") : hashes[from - 1],
      token_ids: tokens.slice(from * size, to * size),
      ...(Array.isArray(extra) ? { extra_keys: extra.slice(from, to) } : {}),
    }));
  }
  return pieces;
}

/** A TensorRT-LLM stored event's pieces of at most `max` blocks, or null when it cannot be cut. */
function cutTrtllmStored(v: EventView, data: Record<string, unknown>, max: number): unknown[] | null {
  const blocks = data.blocks;
  if (!Array.isArray(blocks) || blocks.length === 0) return null;
  let size = -1;
  let lora: number | null | undefined;
  for (let i = 0; i < blocks.length; i++) {
    const b: unknown = blocks[i];
    if (!isObject(b) || engineHash(b.block_hash) === null) return null;
    if (Array.isArray(b.mm_keys) && b.mm_keys.length > 0) return null;
    const n = b.tokens === undefined || b.tokens === null ? 0 : Array.isArray(b.tokens) && allTokens(b.tokens) ? b.tokens.length : -1;
    // A last block not yet full (a prompt's tail) rides in the last piece, as the parser keeps the rest without it.
    const tail = i === blocks.length - 1 && i > 0 && size > 0 && n > 0 && n < size;
    if (n < 0 || (size >= 0 && n !== size && !tail)) return null;
    if (!tail) size = n;
    // The chain's adapter is the last one a block names: cut only when every block names the same, or none.
    const id = typeof b.lora_id === "number" && Number.isSafeInteger(b.lora_id) ? b.lora_id : null;
    if (lora !== undefined && id !== lora) return null;
    lora = id;
  }
  const pieces: unknown[] = [];
  for (let from = 0; from < blocks.length; from += max) {
    const parentBlock = from === 0 ? null : (blocks[from - 1] as Record<string, unknown>);
    pieces.push(v.with({
      ...(from === 0 ? {} : { event_id: null }),
      data: { ...data, blocks: blocks.slice(from, from + max), parent_hash: parentBlock === null ? data.parent_hash : parentBlock.block_hash },
    }));
  }
  return pieces;
}

/** A removal's pieces of at most `max` hashes, or null when it cannot be cut. */
function cutRemoved(v: EventView, data: Record<string, unknown> | null, max: number): unknown[] | null {
  const hashes = data === null ? v.get("block_hashes") : data.block_hashes;
  if (!Array.isArray(hashes) || !allHashes(hashes)) return null;
  const pieces: unknown[] = [];
  for (let from = 0; from < hashes.length; from += max) {
    const part = hashes.slice(from, from + max);
    pieces.push(data === null ? v.with({ block_hashes: part }) : v.with({ ...(from === 0 ? {} : { event_id: null }), data: { ...data, block_hashes: part } }));
  }
  return pieces;
}

/** One event in pieces of at most `max` blocks (itself alone when it is no larger, or cannot be cut). */
function cutEvent(e: unknown, max: number): unknown[] {
  if (sizeOf(e).blocks <= max) return [e];
  const v = viewOf(e)!;
  const data = v.get("data");
  let pieces: unknown[] | null = null;
  if (isObject(data)) pieces = data.type === "stored" ? cutTrtllmStored(v, data, max) : data.type === "removed" ? cutRemoved(v, data, max) : null;
  else {
    const type = v.get("type");
    pieces = type === "BlockStored" ? cutVllmStored(v, max) : type === "BlockRemoved" ? cutRemoved(v, null, max) : null;
  }
  return pieces ?? [e];
}

/**
 * A slice of a bare list of events, written so that it still reads as one: an
 * element that is no object or list (never an event, malformed in the whole
 * batch) becomes null, malformed alike, so that a slice starting with a number
 * or a string is not read as a positional batch or a tagged event.
 */
const asEventList = (events: unknown[]): unknown[] => events.map((e) => (typeof e === "object" && e !== null ? e : null));

/** A batch's events, and how to write a slice of them back as a batch of the same kind. */
function unitsOf(batch: unknown): { events: unknown[]; wrap: (events: unknown[]) => unknown } {
  if (isObject(batch) && Array.isArray(batch.events)) return { events: batch.events, wrap: (events) => ({ ...batch, events }) };
  if (Array.isArray(batch)) {
    // A positional batch [ts, events, rank?], a tagged event, or a list of events.
    if ((batch.length === 2 || batch.length === 3) && typeof batch[0] === "number" && Array.isArray(batch[1])) return { events: batch[1], wrap: (events) => [batch[0], events, ...batch.slice(2)] };
    if (typeof batch[0] === "string" && Object.hasOwn(POSITIONAL, batch[0])) return { events: [batch], wrap: (events) => events };
    return { events: batch, wrap: asEventList };
  }
  return { events: [batch], wrap: (events) => events };
}

/** `limit` as a bound: Infinity (none), else a whole number of at least 1. */
const boundOf = (limit: number): number => (limit === Infinity || (Number.isSafeInteger(limit) && limit >= 1) ? limit : 1);

/**
 * Measures an engine's KV-event batch (anything PrefixIndex.applyKvEvents
 * takes) and cuts it into slices of at most `maxBlocks` blocks and
 * `maxEvents` events (many events of few blocks are as much work as their
 * count); see the file's head for what applying the slices in order does.
 * Never throws.
 */
export function sliceKvEvents(batch: unknown, maxBlocks: number, maxEvents = Infinity): KvEventSlices {
  // Infinity measures without cutting.
  const max = boundOf(maxBlocks);
  const most = boundOf(maxEvents);
  try {
    const { events, wrap } = unitsOf(batch);
    let blocks = 0;
    let tokens = 0;
    for (const e of events) {
      const size = sizeOf(e);
      blocks += size.blocks;
      tokens += size.tokens;
    }
    if (blocks <= max && events.length <= most) return { blocks, tokens, events: events.length, slices: [batch] };
    const slices: unknown[] = [];
    let slice: unknown[] = [];
    let held = 0;
    for (const e of events) {
      for (const piece of cutEvent(e, max)) {
        const n = sizeOf(piece).blocks;
        if (slice.length > 0 && (held + n > max || slice.length >= most)) {
          slices.push(wrap(slice));
          slice = [];
          held = 0;
        }
        slice.push(piece);
        held += n;
      }
    }
    if (slice.length > 0) slices.push(wrap(slice));
    return { blocks, tokens, events: events.length, slices };
  } catch {
    // Something could not be read (a getter, a proxy): the parser judges it whole.
    return { blocks: 0, tokens: 0, events: 0, slices: [batch] };
  }
}
