// Signed stream messages: every entry and snapshot a replica stores carries an
// HMAC-SHA-256 tag over its bytes with a key the replicas share (from a file
// or an environment variable), and the key's id, so keys can be rotated (sign
// with the first, accept any listed). A replica with keys applies only what a
// listed key signed: anyone who can publish on NATS can no longer rewrite the
// replicated state without the key.
//
// Layout of a signed message: the body, then a trailer
//   "ADPS" (4 bytes) · key id (UTF-8) · key id length (1 byte) · tag (32 bytes)
// read from the end, so the body is the codec's bytes unchanged.

import { createHmac, timingSafeEqual } from "node:crypto";
import { KEY_ID, type SigningKey } from "../config/sync-auth-settings.js";

export type { SigningKey };

/** Why a message was refused. */
export type SignatureProblem = "unsigned" | "unknown key" | "bad signature";

/** A message that fails its signature check. */
export class SignatureError extends Error {
  readonly code = "ERR_ADP_SYNC_SIGNATURE";
  constructor(readonly problem: SignatureProblem) {
    super(`the message is refused: ${problem}`);
    this.name = "SignatureError";
  }
}

/** The trailer's magic. */
const MAGIC = Buffer.from("ADPS");
/** Bytes of an HMAC-SHA-256 tag. */
const TAG_BYTES = 32;

/** The tag of `body` under `key`: HMAC-SHA-256 over the key id's bytes, a zero byte, then the body. */
function tagOf(key: SigningKey, body: Uint8Array): Buffer {
  return createHmac("sha256", key.secret).update(key.id).update(Buffer.of(0)).update(body).digest();
}

/** `body` signed with `key`. */
export function sign(body: Uint8Array, key: SigningKey): Uint8Array {
  const id = Buffer.from(key.id, "utf8");
  return Buffer.concat([body, MAGIC, id, Buffer.of(id.length), tagOf(key, body)]);
}

/**
 * The body of a message signed by one of `keys` (compared in constant time);
 * throws SignatureError otherwise. Nothing of the body is read before the tag
 * checks out.
 */
export function verify(message: Uint8Array, keys: readonly SigningKey[]): Uint8Array {
  const bytes = Buffer.from(message.buffer, message.byteOffset, message.byteLength);
  if (bytes.length < MAGIC.length + 1 + TAG_BYTES) throw new SignatureError("unsigned");
  const idLength = bytes[bytes.length - TAG_BYTES - 1]!;
  const magicAt = bytes.length - TAG_BYTES - 1 - idLength - MAGIC.length;
  if (idLength === 0 || magicAt < 0 || !bytes.subarray(magicAt, magicAt + MAGIC.length).equals(MAGIC)) throw new SignatureError("unsigned");
  const id = bytes.subarray(magicAt + MAGIC.length, magicAt + MAGIC.length + idLength).toString("utf8");
  const key = keys.find((k) => k.id === id);
  if (key === undefined) throw new SignatureError("unknown key");
  const body = bytes.subarray(0, magicAt);
  if (!timingSafeEqual(tagOf(key, body), bytes.subarray(bytes.length - TAG_BYTES))) throw new SignatureError("bad signature");
  return body;
}
