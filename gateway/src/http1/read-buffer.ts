// Server sockets read into one buffer of the process, each read's bytes
// handed over as a view of it, not into a fresh 64 KiB buffer per read shrunk
// to size, wrapped and pushed through the socket's Readable: what the pool's
// client sockets get from net's `onread` (http1-pool.ts). net.Server takes no
// `onread`, but a socket follows the same path when it carries the symbols
// `onread` sets (net's own kBuffer, kBufferCb and kBufferGen, found here by
// their descriptions on a socket made with `onread`) and its handle reads
// into the buffer (`useUserBuffer`): net then hands each read to the callback,
// pause() and resume() stop and start the handle's reads, and the end of the
// stream still reaches the socket's 'end'. A Node without them
// (SERVER_READS_INTO_BUFFER false) leaves sockets to 'data' events. It exists
// for cost: 0.943-0.975 of the CPU per small request under wrk side by side
// (docs/performance.md).

import { Socket } from "node:net";

/**
 * The one buffer the process's sockets read into, server sockets here and the
 * pool's upstream sockets through `onread` (http1-pool.ts): reads run one at a
 * time on the event loop, and each read's bytes are taken (copied or consumed)
 * in its callback, before the next read can come.
 */
export const READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);

/** net's symbols for a socket that reads into a buffer of its own, or null when this Node has none by those names. */
const SYMBOLS = ((): { readonly buffer: symbol; readonly callback: symbol; readonly generator: symbol } | null => {
  // `onread` is typed for net.connect's options only; Socket's constructor takes it the same way.
  const probe = new Socket({ onread: { buffer: Buffer.alloc(1), callback: () => true } } as unknown as ConstructorParameters<typeof Socket>[0]);
  const named = (description: string) => Object.getOwnPropertySymbols(probe).find((s) => s.description === description);
  const buffer = named("kBuffer");
  const callback = named("kBufferCb");
  const generator = named("kBufferGen");
  // The probe must hold what `onread` set under them, or they are not the symbols net reads.
  const own = probe as unknown as Record<symbol, unknown>;
  if (buffer === undefined || callback === undefined || generator === undefined || !(own[buffer] instanceof Uint8Array) || typeof own[callback] !== "function") return null;
  return { buffer, callback, generator };
})();

/** Whether this Node lets server sockets read into the process's read buffer. */
export const SERVER_READS_INTO_BUFFER = SYMBOLS !== null;

/**
 * Makes `socket` (reading, with a stream handle) read into the process's read
 * buffer, each read's bytes given to `take` as a view of it that is valid only
 * during the call (`take` copies what it keeps; false: stop reading until the
 * socket is resumed); returns false, changing nothing, when it cannot (then
 * read its 'data' events).
 */
export function readIntoBuffer(socket: Socket, take: (bytes: Buffer) => boolean): boolean {
  const handle = (socket as unknown as { _handle?: { useUserBuffer?: (buffer: Uint8Array) => void } | null })._handle;
  if (SYMBOLS === null || typeof handle?.useUserBuffer !== "function") return false;
  const own = socket as unknown as Record<symbol, unknown>;
  own[SYMBOLS.buffer] = READ_BUFFER;
  own[SYMBOLS.generator] = null;
  // Its answer is net's: false stops the handle's reads (so does pause()), resume() starts them.
  own[SYMBOLS.callback] = (n: number): boolean => take(READ_BUFFER.subarray(0, n));
  handle.useUserBuffer(READ_BUFFER);
  return true;
}
