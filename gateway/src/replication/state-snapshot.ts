// The replicated state as one checksummed object: what a replica that starts,
// restarts or falls behind the stream's retention loads, then replays the
// stream from the sequence it covers.
//
//   ╔═══════════════════════════════════════════════════════════════╗
//   ║ "ADPSYNC1" (8 bytes)                                          ║
//   ║ sequence it covers               u64 big-endian               ║
//   ║ the fleet's upstream URLs        u32 length, JSON list        ║
//   ║ router snapshot                  u32 length, bytes            ║
//   ║ engine views                     u32 count, then per upstream ║
//   ║                                  u32 length (0: none), bytes  ║
//   ╚═══════════════════════════════════════════════════════════════╝
//
// Its digest (stateDigest of what it restores to) travels beside it and is
// checked after restoring: a damaged snapshot is refused, never half-used.

import { createHash } from "node:crypto";
import { restoreEngineCacheView, type EngineCacheView } from "adp-router/engine-cache";
import { restoreRouter, type Router } from "adp-router";

/** The container's magic. */
const MAGIC = Buffer.from("ADPSYNC1", "latin1");

/** A snapshot that cannot be used. */
export class SnapshotError extends Error {
  readonly code = "ERR_ADP_SYNC_SNAPSHOT";
  constructor(message: string) {
    super(message);
    this.name = "SnapshotError";
  }
}

/** The replicated state's parts. */
export interface StateParts {
  /** The upstreams' URLs, in rank order (entries name upstreams by URL). */
  readonly urls: readonly string[];
  readonly router: Router;
  /** Each upstream's engine view, or null. */
  readonly views: readonly (EngineCacheView | null)[];
}

/** SHA-256 of the replicated state (its router snapshot, then each engine view's or a 0 byte), hex. */
export function stateDigest(parts: StateParts): string {
  const hash = createHash("sha256").update(JSON.stringify(parts.urls)).update(parts.router.snapshot());
  for (const view of parts.views) hash.update(view === null ? Uint8Array.of(0) : view.snapshot());
  return hash.digest("hex");
}

/** Writes the state at `seq` as one object. */
export function encodeStateSnapshot(seq: number, parts: StateParts): Uint8Array {
  const router = parts.router.snapshot();
  const urls = Buffer.from(JSON.stringify(parts.urls), "utf8");
  const views = parts.views.map((v) => (v === null ? new Uint8Array(0) : v.snapshot()));
  const out = Buffer.alloc(8 + 8 + 4 + urls.length + 4 + router.length + 4 + views.reduce((n, v) => n + 4 + v.length, 0));
  let at = MAGIC.copy(out, 0);
  out.writeBigUInt64BE(BigInt(seq), at);
  at += 8;
  out.writeUInt32BE(urls.length, at);
  at += 4;
  at += urls.copy(out, at);
  out.writeUInt32BE(router.length, at);
  at += 4;
  out.set(router, at);
  at += router.length;
  out.writeUInt32BE(views.length, at);
  at += 4;
  for (const v of views) {
    out.writeUInt32BE(v.length, at);
    at += 4;
    out.set(v, at);
    at += v.length;
  }
  return out;
}

/**
 * Reads a snapshot back and checks it against `digest`; throws SnapshotError
 * (having freed what it restored) when it is damaged or differs.
 */
export function decodeStateSnapshot(bytes: Uint8Array, digest: string): { seq: number; parts: StateParts } {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const need = (at: number, n: number) => {
    if (at + n > b.length) throw new SnapshotError("truncated");
  };
  need(0, 20);
  if (!b.subarray(0, 8).equals(MAGIC)) throw new SnapshotError("not a replicated-state snapshot");
  const seq = Number(b.readBigUInt64BE(8));
  if (!Number.isSafeInteger(seq)) throw new SnapshotError("sequence out of range");
  let at = 16;
  const urlsLength = b.readUInt32BE(at);
  at += 4;
  need(at, urlsLength + 4);
  let urls: unknown;
  try {
    urls = JSON.parse(b.subarray(at, at + urlsLength).toString("utf8"));
  } catch {
    throw new SnapshotError("its upstream list is not JSON");
  }
  if (!Array.isArray(urls) || !urls.every((u) => typeof u === "string")) throw new SnapshotError("its upstream list is not a list of URLs");
  at += urlsLength;
  const routerLength = b.readUInt32BE(at);
  at += 4;
  need(at, routerLength + 4);
  const views: (EngineCacheView | null)[] = [];
  let router: Router | null = null;
  try {
    router = restoreRouter(b.subarray(at, at + routerLength));
    at += routerLength;
    const count = b.readUInt32BE(at);
    at += 4;
    if (count !== router.numRanks || urls.length !== count) throw new SnapshotError(`${count} engine views and ${urls.length} URLs for ${router.numRanks} upstreams`);
    for (let i = 0; i < count; i++) {
      need(at, 4);
      const n = b.readUInt32BE(at);
      at += 4;
      need(at, n);
      views.push(n === 0 ? null : restoreEngineCacheView(b.subarray(at, at + n)));
      at += n;
    }
    if (at !== b.length) throw new SnapshotError("trailing bytes");
    const parts = { urls: urls as string[], router, views };
    if (stateDigest(parts) !== digest) throw new SnapshotError("its digest differs from the one recorded with it");
    return { seq, parts };
  } catch (error) {
    for (const v of views) v?.dispose();
    router?.prefixIndex?.dispose();
    if (error instanceof SnapshotError) throw error;
    throw new SnapshotError(`cannot be restored: ${(error as Error).message.slice(0, 200)}`);
  }
}
