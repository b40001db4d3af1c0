// The @nats-io client options a replica's `sync.auth` and `sync.tls` settings
// make (config/sync-auth-settings.ts reads them), and the words for what
// failed when a connection cannot work.

import type { ConnectionOptions } from "@nats-io/transport-node";
import type { NatsAuth, NatsTls } from "../config/sync-auth-settings.js";

/** The authenticators of @nats-io/transport-node (loaded on first use: common/optional-packages.ts). */
export interface Authenticators {
  nkeyAuthenticator(seed: Uint8Array): NonNullable<ConnectionOptions["authenticator"]>;
  credsAuthenticator(creds: Uint8Array): NonNullable<ConnectionOptions["authenticator"]>;
}

/** The @nats-io connect options of `auth` and `tls` (a tls:// URL asks for TLS even without `tls`). */
export function connectOptions({ nkeyAuthenticator, credsAuthenticator }: Authenticators, url: string, auth: NatsAuth | null, tls: NatsTls | null): Partial<ConnectionOptions> {
  const encoder = new TextEncoder();
  const secure = tls !== null || url.startsWith("tls://");
  return {
    servers: url.replace(/^(nats|tls):\/\//, ""),
    ...(auth?.kind === "token" ? { token: auth.token } : {}),
    ...(auth?.kind === "user" ? { user: auth.user, pass: auth.password } : {}),
    ...(auth?.kind === "nkey" ? { authenticator: nkeyAuthenticator(encoder.encode(auth.seed)) } : {}),
    ...(auth?.kind === "creds" ? { authenticator: credsAuthenticator(encoder.encode(auth.creds)) } : {}),
    ...(secure ? { tls: { ...(tls?.caFile ? { caFile: tls.caFile } : {}), ...(tls?.certFile ? { certFile: tls.certFile } : {}), ...(tls?.keyFile ? { keyFile: tls.keyFile } : {}) } } : {}),
  };
}

/** What stops a replica's sync, in words for logs and /health (null: nothing is known to, it may just be away). */
export type SyncProblem = "authentication failed" | "not authorized on the stream's subjects" | "TLS failed" | "JetStream is not enabled on the NATS server" | "NATS unreachable";

/** The problem a connection or set-up error shows, and its detail (a code, never a secret). */
export function syncProblem(error: unknown): { problem: SyncProblem; detail: string } {
  const e = error as { code?: unknown; name?: unknown; message?: unknown; cause?: unknown } | null;
  const text = `${String(e?.name ?? "")} ${String(e?.code ?? "")} ${String(e?.message ?? "")}`.toLowerCase();
  const detail = typeof e?.code === "string" ? e.code : typeof e?.name === "string" ? e.name : "error";
  if (text.includes("authorization") || text.includes("authentication")) return { problem: "authentication failed", detail };
  if (text.includes("permission")) return { problem: "not authorized on the stream's subjects", detail };
  if (text.includes("tls") || text.includes("ssl") || text.includes("certificate") || text.includes("self signed") || text.includes("cert_")) return { problem: "TLS failed", detail };
  if (text.includes("jetstream") && (text.includes("not enabled") || text.includes("no responders") || text.includes("503"))) return { problem: "JetStream is not enabled on the NATS server", detail };
  return { problem: "NATS unreachable", detail };
}

