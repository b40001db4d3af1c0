// The only file that touches `WebAssembly`. The release core is inlined as a
// string of one character a byte (src/generated/wasm-bytes.ts: escaped ASCII,
// which gzips about 2 KB smaller than base64), compiled synchronously on
// first use and cached; every router and prefix index gets its own Instance,
// and so its own linear memory, which the garbage collector frees with it.

import { AdpMemoryError } from "./errors.js";
import { WASM_TEXT } from "./generated/wasm-bytes.js";

/** The core's exports (assembly/index.ts); pointers are i32, read them `>>> 0`. */
export interface CoreExports {
  readonly memory: WebAssembly.Memory;
  allocate(bytes: number): number;
  release(ptr: number): void;
  seed(lo: number, hi: number): void;
  nextUint32(): number;
  randBelow(n: number): number;
  shuffleWords(ptr: number, length: number): void;
  balanceDefault(
    numRanks: number, counts: number, tokens: number,
    numRequests: number, sizes: number, out: number, cap: number, heap: number,
  ): number;
  kvWorkBytes(numRanks: number): number;
  kvTrailer(numRanks: number, work: number): number;
  scoreKvAware(
    numRanks: number, counts: number, tokens: number,
    numRequests: number, requests: number, matches: number, out: number,
    cap: number, beta: number, threshold: number, work: number,
  ): number;
  setPageLimit(pages: number): void;
  indexKeyAll(): void;
  memoryRefused(): number;
  indexInit(numRanks: number, tokensPerBlock: number, capacityPerRank: number, maxBytes: number, saltLo: number, saltHi: number): number;
  hashBlocks(tokens: number, numTokens: number, out: number): number;
  hashByteBlocks(tokens: number, numTokens: number, out: number): number;
  hashBlockKeys(keys: number, count: number): void;
  indexMatch(seedLo: number, seedHi: number, blocks: number, count: number, out: number): void;
  indexMatchTokens(seedLo: number, seedHi: number, tokens: number, numTokens: number, out: number): void;
  indexMatchBegin(seedLo: number, seedHi: number): void;
  indexMatchFeed(tokens: number, blocks: number, count: number): number;
  indexMatchEnd(out: number): void;
  indexInsert(rank: number, seedLo: number, seedHi: number, blocks: number, count: number): number;
  indexInsertBegin(rank: number, seedLo: number, seedHi: number, count: number): void;
  indexInsertBelowBegin(rank: number, parentLo: number, parentHi: number, count: number): number;
  indexInsertFeed(blocks: number, count: number, keysOut: number): number;
  indexInsertEnd(): number;
  indexInsertFound(): number;
  indexClearRank(rank: number): void;
  indexBlockCount(rank: number): number;
  indexNodeCount(): number;
  indexResidencyCount(): number;
  indexEvictions(): number;
  indexBytes(): number;
  indexRemovePath(rank: number, lo: number, hi: number): number;
  indexHolds(rank: number, lo: number, hi: number): number;
  indexStampResets(): number;
  indexExportBytes(): number;
  indexExportBegin(): void;
  indexExportPiece(out: number, room: number): number;
  indexImportBegin(stamp: number): number;
  indexImportPiece(data: number, bytes: number): number;
  indexImportEnd(evictions: number, stampResets: number): number;
  indexStamp(): number;
  indexReservedBytes(): number;
  indexTableBytes(): number;
}

/** The compiled core, once compiled. */
let compiled: WebAssembly.Module | undefined;
/** The compilation `init()` started, while it runs. */
let compiling: Promise<WebAssembly.Module> | undefined;

/** The bytes of a string of one character a byte. */
function decodeBytes(text: string): Uint8Array {
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

/**
 * Compiles the wasm core ahead of first use, off the main thread where the
 * platform allows. Optional: routers and indexes compile synchronously on
 * first use without it.
 */
export function init(): Promise<void> {
  if (compiled) return Promise.resolve();
  compiling ??= WebAssembly.compile(decodeBytes(WASM_TEXT) as BufferSource).then(
    (module) => (compiled = module),
    (error: unknown) => {
      compiling = undefined;
      throw error;
    },
  );
  return compiling.then(() => undefined);
}

/** Whether `error` is a trap of the core (a WebAssembly.RuntimeError): a change it was making was cut short. */
export function isTrap(error: unknown): boolean {
  return error instanceof WebAssembly.RuntimeError;
}

/**
 * The error to throw for a trap `error` of core `ex`: AdpMemoryError when the
 * core trapped because memory could not grow, else an Error naming the trap
 * as the core's own fault (a bug, never the caller's input).
 */
export function trapError(ex: CoreExports, error: unknown): Error {
  if (ex.memoryRefused() === 1) return new AdpMemoryError(error);
  return new Error("adp-router: the prefix index's wasm core trapped (a bug in adp-router; please report it), so the index is retired", { cause: error });
}

/** A fresh instance of the core with its own memory. */
export function instantiateCore(): CoreExports {
  compiled ??= new WebAssembly.Module(decodeBytes(WASM_TEXT) as BufferSource);
  return new WebAssembly.Instance(compiled, {}).exports as unknown as CoreExports;
}
