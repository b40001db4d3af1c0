// The snapshot container: "ADPSNAP1", then a u32 length and UTF-8 JSON, then a
// u32 count of binary sections, each a u32 length and its bytes. Little-endian,
// so a snapshot taken on one platform restores on any other.

import { AdpInputError } from "./errors.js";

/** The first eight bytes of every snapshot. */
const MAGIC = "ADPSNAP1";

/** Packs a JSON-able state and binary sections into bytes. */
export function encodeSnapshot(state: unknown, sections: readonly Uint8Array[] = []): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(state));
  const size = 8 + 4 + json.length + 4 + sections.reduce((a, s) => a + 4 + s.length, 0);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  out.set(new TextEncoder().encode(MAGIC), 0);
  let at = 8;
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
  return out;
}

/** Unpacks bytes made by {@link encodeSnapshot}; throws AdpInputError on anything else. */
export function decodeSnapshot(bytes: unknown, field = "snapshot"): { state: Record<string, unknown>; sections: Uint8Array[] } {
  if (!(bytes instanceof Uint8Array)) throw new AdpInputError(field, "must be a Uint8Array from snapshot()", bytes);
  const fail = (why: string): never => {
    throw new AdpInputError(field, `is not a valid snapshot (${why})`, `${bytes.length} bytes`);
  };
  if (bytes.length < 16 || new TextDecoder().decode(bytes.subarray(0, 8)) !== MAGIC) fail("bad header");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 8;
  const jsonLength = view.getUint32(at, true);
  at += 4;
  if (at + jsonLength + 4 > bytes.length) fail("truncated");
  let state: Record<string, unknown>;
  try {
    state = JSON.parse(new TextDecoder().decode(bytes.subarray(at, at + jsonLength))) as Record<string, unknown>;
  } catch {
    return fail("corrupt state");
  }
  at += jsonLength;
  const count = view.getUint32(at, true);
  at += 4;
  const sections: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    if (at + 4 > bytes.length) fail("truncated");
    const n = view.getUint32(at, true);
    at += 4;
    if (at + n > bytes.length) fail("truncated");
    sections.push(bytes.slice(at, at + n));
    at += n;
  }
  return { state, sections };
}
