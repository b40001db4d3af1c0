// The snapshot container, self-checking: a snapshot is verified whole before
// anything in it is parsed, so damaged bytes are refused with a typed error
// instead of reaching the decoders.
//
// Layout (little-endian, so a snapshot taken on one platform restores on any other):
//   0   "ADPSNAP2"          magic and format version
//   8   u32 kind            1 = router, 2 = prefix index
//   12  u32 payload length  bytes after the header; the snapshot is exactly header + payload
//   16  u32 CRC-32C         of the payload
//   20  payload             u32 length · UTF-8 JSON state · u32 section count ·
//                           each section as u32 length · bytes
//
// The checksum catches damage; a crafted snapshot with a valid checksum is
// still checked field by field by the restore functions.

import { AdpInputError, readInput } from "./errors.js";

/** The first eight bytes of every snapshot of this format. */
const MAGIC = "ADPSNAP2";
/** The magic of the format before checksums, refused with its own message. */
const OLD_MAGIC = "ADPSNAP1";
/** Bytes before the payload. */
const HEADER = 20;
/** Largest snapshot accepted (the payload length is a u32). */
const MAX_PAYLOAD = 2 ** 32 - 1;

/** What a snapshot holds. */
export const SNAPSHOT_KINDS = Object.freeze({ router: 1, prefixIndex: 2, engineCache: 3 });
/** Kind names, for messages. */
const KIND_NAMES: Record<number, string> = { 1: "router", 2: "prefix index", 3: "engine cache view" };

/** CRC-32C (Castagnoli) table, reflected polynomial 0x82f63b78. */
const CRC_TABLE = (() => {
  const table = new Int32Array(256 * 4);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    table[n] = c;
  }
  // Slicing by four: table[k·256 + n] is the CRC of byte n followed by k zero bytes.
  for (let n = 0; n < 256; n++) {
    let c = table[n]!;
    for (let k = 1; k < 4; k++) {
      c = table[c & 0xff]! ^ (c >>> 8);
      table[k * 256 + n] = c;
    }
  }
  return table;
})();

/** CRC-32C of `bytes` (check value of "123456789": 0xe3069283). */
export function crc32c(bytes: Uint8Array): number {
  const t = CRC_TABLE;
  let c = -1;
  let i = 0;
  const n = bytes.length;
  for (; i + 4 <= n; i += 4) {
    c ^= bytes[i]! | (bytes[i + 1]! << 8) | (bytes[i + 2]! << 16) | (bytes[i + 3]! << 24);
    c = t[768 + (c & 0xff)]! ^ t[512 + ((c >>> 8) & 0xff)]! ^ t[256 + ((c >>> 16) & 0xff)]! ^ t[c >>> 24]!;
  }
  for (; i < n; i++) c = t[(c ^ bytes[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

/** Packs a JSON-able state and binary sections into a checksummed snapshot of `kind`. */
export function encodeSnapshot(kind: number, state: unknown, sections: readonly Uint8Array[] = []): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(state));
  const payload = 4 + json.length + 4 + sections.reduce((a, s) => a + 4 + s.length, 0);
  if (payload > MAX_PAYLOAD) throw new RangeError(`adp-router: a snapshot of ${payload} bytes exceeds the format's 4 GiB`);
  const out = new Uint8Array(HEADER + payload);
  const view = new DataView(out.buffer);
  out.set(new TextEncoder().encode(MAGIC), 0);
  view.setUint32(8, kind, true);
  view.setUint32(12, payload, true);
  let at = HEADER;
  view.setUint32(at, json.length, true);
  out.set(json, (at += 4));
  at += json.length;
  view.setUint32(at, sections.length, true);
  at += 4;
  for (const s of sections) {
    view.setUint32(at, s.length, true);
    out.set(s, (at += 4));
    at += s.length;
  }
  view.setUint32(16, crc32c(out.subarray(HEADER)), true);
  return out;
}

/**
 * Unpacks a snapshot of `kind` made by {@link encodeSnapshot}: magic, kind,
 * exact length and checksum first, then the layout of the payload. Throws
 * AdpInputError naming `field` on anything else; what it returns is only
 * well-formed, and its state still has to be checked by the caller.
 */
export function decodeSnapshot(input: unknown, kind: number, field = "snapshot"): { state: Record<string, unknown>; sections: Uint8Array[] } {
  if (!readInput(field, () => input instanceof Uint8Array && ArrayBuffer.isView(input))) throw new AdpInputError(field, "must be a Uint8Array from snapshot()", input);
  const bytes = input as Uint8Array;
  const length = bytes.byteLength;
  const fail = (why: string): never => {
    throw new AdpInputError(field, `is not a valid snapshot (${why})`, `${length} bytes`);
  };
  const magic = length >= 8 ? String.fromCharCode(...bytes.subarray(0, 8)) : "";
  if (magic === OLD_MAGIC) fail("it was written by an earlier adp-router without a checksum; take a new snapshot");
  if (length < HEADER || magic !== MAGIC) fail("bad header");
  const view = new DataView(bytes.buffer, bytes.byteOffset, length);
  const got = view.getUint32(8, true);
  if (got !== kind) fail(`it holds ${KIND_NAMES[got] ? `a ${KIND_NAMES[got]}` : `kind ${got}`}, not a ${KIND_NAMES[kind]}`);
  const payload = view.getUint32(12, true);
  if (HEADER + payload > length) fail("truncated");
  if (HEADER + payload < length) fail(`${length - HEADER - payload} bytes after its end`);
  if (crc32c(bytes.subarray(HEADER)) !== view.getUint32(16, true)) fail("checksum mismatch: the bytes are damaged");
  // The smallest payload is two u32 counts; a shorter one with a valid checksum was crafted.
  if (payload < 8) fail("its payload is shorter than its two counts");
  let at = HEADER;
  const jsonLength = view.getUint32(at, true);
  at += 4;
  if (jsonLength > length - at - 4) fail("its state overruns the payload");
  let state: unknown;
  try {
    state = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(at, at + jsonLength)));
  } catch {
    return fail("its state is not UTF-8 JSON");
  }
  if (typeof state !== "object" || state === null || Array.isArray(state)) fail("its state is not an object");
  at += jsonLength;
  const count = view.getUint32(at, true);
  at += 4;
  const sections: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    if (at + 4 > length) fail("a section overruns the payload");
    const n = view.getUint32(at, true);
    at += 4;
    if (n > length - at) fail("a section overruns the payload");
    sections.push(bytes.slice(at, at + n));
    at += n;
  }
  if (at !== length) fail(`${length - at} bytes after its last section`);
  return { state: state as Record<string, unknown>, sections };
}
