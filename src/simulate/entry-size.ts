// The size of the stream entries `simulate --replicas` counts, as the gateway
// encodes them (gateway/src/replication/entry-codec.ts): one msgpack array a message,
// `[VERSION, origin, counter, op, upstream URL, ...]`, written by
// @msgpack/msgpack with `useBigInt64` and `ignoreUndefined`. Computed, not
// encoded: the simulator is platform-neutral and has no msgpack dependency,
// and a size needs no bytes. test/simulate-replicas.test.ts checks these
// figures against the gateway's own encoder.

/**
 * Length of an entry's origin, `replica_id#` and 8 hex digits, for the
 * replica ids `gw-1` to `gw-9` (13 characters). A default id (`HOST-PID`) is
 * longer: each extra character is one more byte an entry.
 */
export const ORIGIN_LENGTH = "gw-1#0123abcd".length;

/**
 * Length of an upstream's URL, which names it in an entry (replicas may number
 * a fleet differently while they reload): `http://10.0.1.17:8000`.
 */
export const UPSTREAM_URL_LENGTH = "http://10.0.1.17:8000".length;

/**
 * Length of an engine batch's identity in a kv-events entry (the same at every
 * replica that receives the batch): its ZeroMQ endpoint, number, publication
 * time and 22 characters of a hash of its bytes,
 * `tcp://10.0.1.17:5557|12345|1764547200.123456|` and the hash.
 */
export const BATCH_ID_LENGTH = "tcp://10.0.1.17:5557|12345|1764547200.123456|".length + 22;

/** Bytes of a msgpack array or map header for `n` elements. */
const containerHeader = (n: number): number => (n < 16 ? 1 : n < 65536 ? 3 : 5);

/** Bytes of a msgpack string header for `n` UTF-8 bytes. */
const strHeader = (n: number): number => (n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5);

/** Bytes of a msgpack bin header for `n` bytes. */
const binHeader = (n: number): number => (n < 256 ? 2 : n < 65536 ? 3 : 5);

/** UTF-8 length of a string (without encoding it). */
function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      n += 4; // a surrogate pair is one 4-byte code point
      i++;
    } else n += 3;
  }
  return n;
}

/** Bytes of a msgpack number: the smallest integer form that holds it, else a float64. */
function numberSize(v: number): number {
  if (!Number.isSafeInteger(v)) return 9;
  if (v >= 0) return v < 128 ? 1 : v < 256 ? 2 : v < 65536 ? 3 : v < 2 ** 32 ? 5 : 9;
  return v >= -32 ? 1 : v >= -128 ? 2 : v >= -32768 ? 3 : v >= -(2 ** 31) ? 5 : 9;
}

/**
 * Bytes `value` takes as msgpack the way the gateway's encoder writes it:
 * plain JSON values, byte arrays (bin) and bigints (always 64-bit). Object
 * fields holding undefined are left out, as `ignoreUndefined` does.
 */
export function msgpackSize(value: unknown): number {
  if (value === null || value === undefined || typeof value === "boolean") return 1;
  if (typeof value === "number") return numberSize(value);
  if (typeof value === "bigint") return 9;
  if (typeof value === "string") {
    const n = utf8Length(value);
    return strHeader(n) + n;
  }
  if (value instanceof Uint8Array) return binHeader(value.length) + value.length;
  if (Array.isArray(value)) {
    let n = containerHeader(value.length);
    for (const v of value) n += msgpackSize(v);
    return n;
  }
  let n = 0;
  let fields = 0;
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (v === undefined) continue;
    fields++;
    n += msgpackSize(k) + msgpackSize(v);
  }
  return containerHeader(fields) + n;
}

/** Bytes of a string of `n` ASCII characters. */
const ascii = (n: number): number => strHeader(n) + n;

/** Bytes of the fields every entry starts with: the array header, version 1, origin, counter, op and upstream URL. */
function head(fields: number, counter: number, op: string): number {
  return containerHeader(fields) + 1 + ascii(ORIGIN_LENGTH) + numberSize(counter) + msgpackSize(op) + ascii(UPSTREAM_URL_LENGTH);
}

/** Tokens per block of a gateway routing by an engine's tokenizer (its default: the engines' 32). */
export const GATEWAY_TOKENS_PER_BLOCK = 32;

/**
 * Bytes of a learn entry (`[1, origin, counter, "learn", url, hashes, lora,
 * salt]`): a prompt of `blocks` full blocks, each an 8-byte block hash in one
 * bin field, in the default namespace (no LoRA task, no cache salt: two nils).
 */
export function learnEntryBytes(blocks: number, counter: number): number {
  return head(8, counter, "learn") + binHeader(8 * blocks) + 8 * blocks + 1 + 1;
}

/** Bytes of a conversation binding (`[1, origin, counter, "bind", url, key]`). */
export function bindingEntryBytes(conversationId: string, counter: number): number {
  return head(6, counter, "bind") + msgpackSize(conversationId);
}

/**
 * Bytes of a kv-events entry (`[1, origin, counter, "kv-events", url, dpRank,
 * events, id]`): one engine batch as decoded, with no DP rank (an upstream is
 * one rank here) and an identity of {@link BATCH_ID_LENGTH} characters.
 */
export function kvEventsEntryBytes(events: unknown, counter: number): number {
  return head(8, counter, "kv-events") + 1 + msgpackSize(events) + ascii(BATCH_ID_LENGTH);
}
