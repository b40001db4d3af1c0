// How a replica authenticates to NATS and secures its connection, as the
// configuration says it: the `sync.auth`, `sync.tls` and `sync.signing`
// settings (replication/nats-connection.ts makes the client's options of them).
//
//   sync:
//     url: tls://nats.internal:4222
//     auth: { user: gateway, password_env: NATS_PASSWORD }   # or token_env / token_file,
//                                                          # nkey_seed_file, creds_file
//     tls: { ca_file: /etc/nats/ca.pem, cert_file: /etc/nats/gw.pem, key_file: /etc/nats/gw-key.pem }
//     signing: { keys: [{ id: k1, key_env: SYNC_KEY }] }
//
// Secrets come from files or environment variables only, never inline: a key
// written in a configuration file ends up in repositories. Their values never
// appear in a message, an error or a log line.

import { describeValue } from "adp-router";

/** One signing key: its id (in every tag) and its secret. */
export interface SigningKey {
  readonly id: string;
  readonly secret: Uint8Array;
}

/** A key id: what may name a key (it travels in every message). */
export const KEY_ID = /^[A-Za-z0-9_.-]{1,64}$/;

/** How a replica proves who it is to NATS. */
export type NatsAuth =
  /** A token (`authorization { token: … }` on the server). */
  | { readonly kind: "token"; readonly token: string }
  /** A user and password. */
  | { readonly kind: "user"; readonly user: string; readonly password: string }
  /** An nkey seed (`SU…`): the server knows the public key. */
  | { readonly kind: "nkey"; readonly seed: string }
  /** A creds file (a user JWT and its nkey seed, from `nsc`). */
  | { readonly kind: "creds"; readonly creds: string };

/** TLS to NATS: the CA that signs the server, and a client certificate when the server verifies clients. */
export interface NatsTls {
  readonly caFile: string | null;
  readonly certFile: string | null;
  readonly keyFile: string | null;
}

/** What reading the settings needs from the configuration's reader (gateway/src/config/config.ts). */
export interface AuthSettingReader {
  fail(path: readonly (string | number)[], message: string): void;
  section(v: unknown, path: (string | number)[], keys: readonly string[]): Record<string, unknown>;
  str(v: unknown, path: (string | number)[], fallback: string): string;
  env(name: unknown, path: (string | number)[], env: Record<string, string | undefined>): string | null;
  /** The trimmed text of the file a setting names, or null (the reason recorded). */
  file(v: unknown, path: (string | number)[]): string | null;
}

/** A file that must exist and be readable (a TLS file, read by the client itself), or null. */
function readableFile(r: AuthSettingReader, value: unknown, path: (string | number)[]): string | null {
  return r.file(value, path) === null ? null : (value as string);
}

/** A secret from `<key>_env` or `<key>_file` (exactly one), or null when neither is set. */
function secret(r: AuthSettingReader, s: Record<string, unknown>, key: string, path: (string | number)[], env: Record<string, string | undefined>): string | null {
  const fromEnv = s[`${key}_env`];
  const fromFile = s[`${key}_file`];
  if (s[key] !== undefined) r.fail([...path, key], `is not taken inline (it would end up in repositories): use ${key}_env or ${key}_file`);
  if (fromEnv !== undefined && fromFile !== undefined) r.fail([...path, `${key}_env`], `set ${key}_env or ${key}_file, not both`);
  if (fromEnv !== undefined) return r.env(fromEnv, [...path, `${key}_env`], env);
  if (fromFile !== undefined) return r.file(fromFile, [...path, `${key}_file`]);
  return null;
}

/** Reads `sync.auth` (null: none, or a problem recorded in `r`). */
export function readNatsAuth(r: AuthSettingReader, value: unknown, env: Record<string, string | undefined>): NatsAuth | null {
  if (value === undefined || value === null) return null;
  const path = ["sync", "auth"];
  const s = r.section(value, path, ["token", "token_env", "token_file", "user", "password", "password_env", "password_file", "nkey_seed_file", "creds_file"]);
  const set = (...keys: string[]) => keys.some((k) => s[k] !== undefined);
  const ways = { token: set("token", "token_env", "token_file"), user: set("user", "password", "password_env", "password_file"), nkey: set("nkey_seed_file"), creds: set("creds_file") };
  const count = Object.values(ways).filter(Boolean).length;
  if (count !== 1) {
    r.fail(path, count === 0 ? "names no way to authenticate (token_env or token_file; user with password_env or password_file; nkey_seed_file; creds_file)" : "takes one way to authenticate: a token, a user and password, an nkey seed, or a creds file");
    return null;
  }
  if (ways.token) {
    const token = secret(r, s, "token", path, env);
    if (token === null && !set("token_env", "token_file")) r.fail([...path, "token_env"], "is required (or token_file)");
    return token === null ? null : { kind: "token", token };
  }
  if (ways.user) {
    if (s.user === undefined) r.fail([...path, "user"], "is required with a password");
    const user = s.user === undefined ? "" : r.str(s.user, [...path, "user"], "");
    const password = secret(r, s, "password", path, env);
    if (password === null && !set("password", "password_env", "password_file")) r.fail([...path, "password_env"], "is required with a user (or password_file)");
    return user !== "" && password !== null ? { kind: "user", user, password } : null;
  }
  if (ways.nkey) {
    const seed = r.file(s.nkey_seed_file, [...path, "nkey_seed_file"]);
    if (seed !== null && !/^SU[A-Z2-7]{50,}$/.test(seed)) r.fail([...path, "nkey_seed_file"], "does not hold a user nkey seed (SU…)");
    return seed === null ? null : { kind: "nkey", seed };
  }
  const creds = r.file(s.creds_file, [...path, "creds_file"]);
  if (creds !== null && !creds.includes("BEGIN NATS USER JWT")) r.fail([...path, "creds_file"], "is not a NATS creds file (no user JWT in it)");
  return creds === null ? null : { kind: "creds", creds };
}

/** Reads `sync.tls` (null: none; a tls:// URL then uses the system's CAs). */
export function readNatsTls(r: AuthSettingReader, value: unknown): NatsTls | null {
  if (value === undefined || value === null) return null;
  const path = ["sync", "tls"];
  const s = r.section(value, path, ["ca_file", "cert_file", "key_file"]);
  const tls = { caFile: readableFile(r, s.ca_file, [...path, "ca_file"]), certFile: readableFile(r, s.cert_file, [...path, "cert_file"]), keyFile: readableFile(r, s.key_file, [...path, "key_file"]) };
  if ((s.cert_file === undefined) !== (s.key_file === undefined)) r.fail([...path, s.cert_file === undefined ? "cert_file" : "key_file"], "goes with cert_file and key_file both (a client certificate and its key)");
  return tls;
}

/** The shortest signing key taken (shorter is guessable). */
const MIN_SIGNING_KEY = 32;

/** Reads `sync.signing: { keys: [{ id, key_env | key_file }, ...] }` (the first signs, any verifies); null: none. */
export function readSigningKeys(r: AuthSettingReader, value: unknown, env: Record<string, string | undefined>): SigningKey[] | null {
  if (value === undefined || value === null) return null;
  const path = ["sync", "signing"];
  const s = r.section(value, path, ["keys"]);
  if (!Array.isArray(s.keys) || s.keys.length === 0) {
    r.fail([...path, "keys"], "must list at least one key: { id, key_env or key_file } (the first signs, every one verifies)");
    return null;
  }
  const keys: SigningKey[] = [];
  s.keys.forEach((entry: unknown, i: number) => {
    const at = [...path, "keys", i];
    const k = r.section(entry, at, ["id", "key", "key_env", "key_file"]);
    const id = r.str(k.id, [...at, "id"], "");
    if (!KEY_ID.test(id)) r.fail([...at, "id"], `must be 1-64 letters, digits, '.', '_' or '-', got ${describeValue(id)}`);
    if (k.key === undefined && k.key_env === undefined && k.key_file === undefined) r.fail([...at, "key_env"], "is required (or key_file)");
    const value = k.key === undefined && k.key_env === undefined && k.key_file === undefined ? null : secret(r, k, "key", at, env);
    if (value !== null && Buffer.byteLength(value) < MIN_SIGNING_KEY) r.fail([...at, secretFrom(k)], `holds a key of ${Buffer.byteLength(value)} bytes: at least ${MIN_SIGNING_KEY} (say, openssl rand -hex 32)`);
    if (keys.some((x) => x.id === id)) r.fail([...at, "id"], `${describeValue(id)} is listed twice`);
    if (value !== null && KEY_ID.test(id)) keys.push({ id, secret: Buffer.from(value, "utf8") });
  });
  return keys.length === s.keys.length ? keys : null;
}

/** Which setting a key came from, for messages. */
const secretFrom = (k: Record<string, unknown>) => (k.key_env !== undefined ? "key_env" : "key_file");
