// The process's ZAP handler (ZeroMQ RFC 27): when a socket that is a CURVE
// server (a bound event stream) takes a connection, libzmq asks the handler
// bound at inproc://zeromq.zap.01 in the socket's context whether the client's
// public key may connect, and drops the connection unless it answers 200. One
// handler serves the context, so streams register their allow-lists under a
// ZAP domain of their own, and the handler runs while any is registered.

import { timingSafeEqual } from "node:crypto";
import type { Router } from "zeromq";
import { zeromq } from "../common/optional-packages.js";

/** Where libzmq sends its ZAP requests. */
const ZAP_ENDPOINT = "inproc://zeromq.zap.01";
/** Z85's alphabet (ZeroMQ RFC 32). */
const Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/** A 40-character Z85 key as its 32 bytes. */
export function z85Decode(text: string): Buffer {
  const out = Buffer.alloc((text.length / 5) * 4);
  for (let i = 0, value = 0; i < text.length; i++) {
    value = value * 85 + Z85.indexOf(text[i]!);
    if (i % 5 === 4) {
      out.writeUInt32BE(value, ((i - 4) / 5) * 4);
      value = 0;
    }
  }
  return out;
}

/** One registered stream: the keys it accepts, and what to tell about a refusal. */
interface Registration {
  readonly allowed: readonly Buffer[];
  readonly onRefused: (address: string) => void;
}

/** Streams by ZAP domain. */
const registrations = new Map<string, Registration>();
/** The running handler, while any stream is registered. */
let handler: { readonly socket: Router; readonly ready: Promise<void> } | null = null;
/** Domains handed out so far (each stream has its own). */
let domains = 0;

/** Whether `key` (32 bytes) is one of `allowed`. */
const isAllowed = (key: Buffer | undefined, allowed: readonly Buffer[]): boolean => key !== undefined && key.length === 32 && allowed.some((k) => timingSafeEqual(k, key));

/** Answers ZAP requests until the handler is closed. */
async function serve(socket: Router): Promise<void> {
  try {
    for await (const frames of socket) {
      // [routing id, empty, version, request id, domain, address, identity, mechanism, credentials...]
      const [peer, empty, version, requestId, domain, address, , mechanism, key] = frames;
      if (peer === undefined || requestId === undefined) continue;
      const r = registrations.get(domain?.toString() ?? "");
      const ok = version?.toString() === "1.0" && mechanism?.toString() === "CURVE" && r !== undefined && isAllowed(key, r.allowed);
      if (!ok) r?.onRefused(address?.toString() ?? "");
      await socket.send([peer, empty ?? Buffer.alloc(0), "1.0", requestId, ok ? "200" : "400", ok ? "OK" : "public key not allowed", ok ? "publisher" : "", ""]);
    }
  } catch {
    // Closed.
  }
}

/**
 * Registers a CURVE server's allow-list (Z85 public keys) and returns its ZAP
 * domain (to set as the socket's `zapDomain` before it binds) and a function
 * that unregisters it. The handler is bound before this resolves.
 */
export async function registerAllowList(allowedClients: readonly string[], onRefused: (address: string) => void): Promise<{ domain: string; release: () => void }> {
  const domain = `adp-kv-${++domains}`;
  registrations.set(domain, { allowed: allowedClients.map(z85Decode), onRefused });
  if (handler === null) {
    const socket = new (zeromq().Router)({ linger: 0 });
    handler = { socket, ready: socket.bind(ZAP_ENDPOINT).then(() => void serve(socket)) };
  }
  const running = handler;
  try {
    await running.ready;
  } catch (error) {
    registrations.delete(domain);
    if (handler === running) {
      handler = null;
      running.socket.close();
    }
    throw new Error(`cannot serve ZeroMQ authentication (another ZAP handler holds ${ZAP_ENDPOINT}?): ${(error as Error).message}`);
  }
  const release = () => {
    if (!registrations.delete(domain) || registrations.size > 0 || handler === null) return;
    handler.socket.close();
    handler = null;
  };
  return { domain, release };
}
