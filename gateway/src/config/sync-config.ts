// The gateway's `sync:` setting: the NATS server its replicas share one
// routing state through (gateway/src/replication/replication.ts), checked like the rest
// of its configuration.
//
//   sync: { url: nats://127.0.0.1:4222, cluster: prod, replica_id: gw-1 }
//
// or `--sync nats://HOST:PORT [--replica-id ID]`, which override the file.

import { hostname } from "node:os";
import { describeValue, excerpt } from "adp-router";
import type { SettingReader } from "./events-config.js";
import { readNatsAuth, readNatsTls, readSigningKeys, type AuthSettingReader, type NatsAuth, type NatsTls } from "./sync-auth-settings.js";
import type { SigningKey } from "./sync-auth-settings.js";

/** Where and as whom a replica shares its routing state. */
export interface SyncConfig {
  /** The NATS server (`nats://HOST:PORT`). */
  readonly url: string;
  /** The replicas' cluster: the JetStream stream `ADP_<CLUSTER>` and subject `adp.<cluster>.state` are its own. */
  readonly cluster: string;
  /** This replica's name (unique in the cluster), in its entries' ids and in `/sync/state`. */
  readonly replicaId: string;
  /** Most entries held while NATS cannot take them; past it the oldest are dropped (and counted). */
  readonly maxBufferedEntries: number;
  /** Entries the stream keeps (older ones go; a replica behind them starts from a snapshot). */
  readonly maxEntries: number;
  /** A snapshot of the replicated state is stored every this many entries. */
  readonly snapshotEvery: number;
  /** The most upstreams a fleet change from the stream may name (a larger one is rejected, counted). */
  readonly maxFleet: number;
  /** How it authenticates to NATS (sync-auth-settings.ts), or null: as no one. */
  readonly auth: NatsAuth | null;
  /** TLS settings (a tls:// URL without them uses the system's CAs), or null. */
  readonly tls: NatsTls | null;
  /** The keys entries and snapshots are signed with (the first) and checked against (any), or null: unauthenticated. */
  readonly signing: readonly SigningKey[] | null;
}

/** The flags that override the file's `sync:`. */
export interface SyncFlags {
  readonly sync?: string;
  readonly replicaId?: string;
}

/** A cluster or replica name: letters, digits, `-` and `_` (they become subject and stream names). */
const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** A NATS URL checked; a reason when it is not one. */
export function checkNatsUrl(text: string): string | null {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return `must be nats://HOST:PORT, got ${describeValue(excerpt(text, 80))}`;
  }
  if (url.protocol !== "nats:" && url.protocol !== "tls:") return `must be a nats:// (or tls://) URL, got ${url.protocol}//`;
  if (!url.hostname) return "has no host";
  if (url.username || url.password) return "must not carry credentials";
  return null;
}

/** Reads `sync:` and its flags (null: this gateway shares nothing). */
export function readSyncSettings(r: SettingReader & AuthSettingReader, value: unknown, flags: SyncFlags, env: Record<string, string | undefined> = process.env): SyncConfig | null {
  const s = r.section(value, ["sync"], ["url", "cluster", "replica_id", "max_buffered_entries", "max_entries", "snapshot_every", "max_fleet", "auth", "tls", "signing"]);
  const url = flags.sync ?? (s.url === undefined ? undefined : r.str(s.url, ["sync", "url"], ""));
  if (url === undefined || url === "") {
    if (flags.replicaId !== undefined || Object.keys(s).length > 0) r.fail(["sync", "url"], "is required to share state (sync.url, or --sync nats://HOST:PORT)");
    return null;
  }
  const why = checkNatsUrl(url);
  if (why !== null) r.fail(flags.sync !== undefined ? ["sync"] : ["sync", "url"], why);
  const cluster = r.str(s.cluster, ["sync", "cluster"], "adp");
  if (!NAME.test(cluster)) r.fail(["sync", "cluster"], `must be 1-64 letters, digits, - or _, got ${describeValue(cluster)}`);
  const replicaId = flags.replicaId ?? r.str(s.replica_id, ["sync", "replica_id"], `${hostname()}-${process.pid}`.replace(/[^A-Za-z0-9_-]/g, "_").slice(0, 64));
  if (!NAME.test(replicaId)) r.fail(flags.replicaId !== undefined ? ["replica-id"] : ["sync", "replica_id"], `must be 1-64 letters, digits, - or _, got ${describeValue(replicaId)}`);
  const maxBufferedEntries = r.int(s.max_buffered_entries, ["sync", "max_buffered_entries"], 1, 10_000_000, 100_000);
  const maxEntries = r.int(s.max_entries, ["sync", "max_entries"], 10, 1_000_000_000, 1_000_000);
  const snapshotEvery = r.int(s.snapshot_every, ["sync", "snapshot_every"], 1, 1_000_000_000, 10_000);
  if (snapshotEvery >= maxEntries) r.fail(["sync", "snapshot_every"], `must be below max_entries (${maxEntries}), or a replica could fall behind the stream with no snapshot to start from`);
  const auth = readNatsAuth(r, s.auth, env);
  const tls = readNatsTls(r, s.tls);
  if (tls !== null && url.startsWith("nats://")) r.fail(["sync", "tls"], "is set for a nats:// URL: write tls://HOST:PORT (the connection is then TLS)");
  const signing = readSigningKeys(r, s.signing, env);
  const maxFleet = r.int(s.max_fleet, ["sync", "max_fleet"], 1, 65_535, 256);
  return { url, cluster, replicaId, maxBufferedEntries, maxEntries, snapshotEvery, maxFleet, auth, tls, signing };
}

/** JSON Schema of `sync:`. */
export const syncSchema = Object.freeze({
  type: "object",
  additionalProperties: false,
  required: ["url"],
  description: "Share one routing state with the other replicas of this gateway through NATS JetStream.",
  properties: {
    url: { type: "string", pattern: "^(nats|tls)://" },
    cluster: { type: "string", pattern: "^[A-Za-z0-9_-]{1,64}$", default: "adp" },
    replica_id: { type: "string", pattern: "^[A-Za-z0-9_-]{1,64}$", description: "Unique in the cluster; default HOST-PID." },
    max_buffered_entries: { type: "integer", minimum: 1, default: 100000 },
    max_entries: { type: "integer", minimum: 10, default: 1000000, description: "Entries the stream keeps; a replica behind them starts from the latest snapshot." },
    snapshot_every: { type: "integer", minimum: 1, default: 10000, description: "Entries between snapshots of the replicated state (in a JetStream object store)." },
    max_fleet: { type: "integer", minimum: 1, maximum: 65535, default: 256, description: "The most upstreams a fleet change from the stream may name; a larger one is rejected and counted." },
    auth: {
      type: "object",
      additionalProperties: false,
      description: "How the replica authenticates to NATS: one of a token, a user and password, an nkey seed, a creds file. Secrets from files or environment variables only.",
      properties: {
        token_env: { type: "string", pattern: "^[A-Za-z_][A-Za-z0-9_]*$" },
        token_file: { type: "string", minLength: 1 },
        user: { type: "string", minLength: 1 },
        password_env: { type: "string", pattern: "^[A-Za-z_][A-Za-z0-9_]*$" },
        password_file: { type: "string", minLength: 1 },
        nkey_seed_file: { type: "string", minLength: 1, description: "A file holding the user's nkey seed (SU…)." },
        creds_file: { type: "string", minLength: 1, description: "A NATS creds file (user JWT and seed, from nsc)." },
      },
    },
    signing: {
      type: "object",
      additionalProperties: false,
      required: ["keys"],
      description: "Entries and snapshots signed with HMAC-SHA-256: the first key signs, any listed verifies (rotation). Without it, entries are unauthenticated (said at start).",
      properties: {
        keys: {
          type: "array",
          minItems: 1,
          items: {
            type: "object",
            additionalProperties: false,
            required: ["id"],
            properties: { id: { type: "string", pattern: "^[A-Za-z0-9_.-]{1,64}$" }, key_env: { type: "string", pattern: "^[A-Za-z_][A-Za-z0-9_]*$" }, key_file: { type: "string", minLength: 1 } },
          },
        },
      },
    },
    tls: {
      type: "object",
      additionalProperties: false,
      description: "TLS to NATS (with a tls:// URL): the CA of the server's certificate, and a client certificate and key when the server verifies clients.",
      properties: { ca_file: { type: "string", minLength: 1 }, cert_file: { type: "string", minLength: 1 }, key_file: { type: "string", minLength: 1 } },
    },
  },
});
