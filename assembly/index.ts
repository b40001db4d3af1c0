// The wasm core's ABI: numeric arguments and results only, no managed objects.
// The TypeScript shell (src/wasm.ts, src/core.ts) allocates its scratch regions
// with `allocate`, writes inputs through typed-array views, calls one export per
// batch and reads the results back through the same views.

import { storageAlloc, storageFree } from "./pages";

/** Bytes before each `allocate`d region: its size, for `release`. */
// @ts-ignore: decorator
@inline const HEADER: usize = 16;

/** Allocates `bytes` bytes of unmanaged memory, 16-byte aligned. */
export function allocate(bytes: usize): usize {
  const at = storageAlloc(bytes + HEADER);
  store<u32>(at, <u32>(bytes + HEADER));
  return at + HEADER;
}

/** Frees memory returned by `allocate`. */
export function release(ptr: usize): void {
  const at = ptr - HEADER;
  storageFree(at, <usize>load<u32>(at));
}

export { seed, nextUint32, randBelow, shuffleWords } from "./mt19937";
export { balanceDefault } from "./default-balance";
export { scoreKvAware, kvWorkBytes, kvTrailer } from "./kv-score";
export {
  indexInit, hashBlocks, hashBlockKeys, indexMatch, indexMatchTokens, indexInsert, indexInsertBelow, indexPathKeys, indexClearRank,
  indexBlockCount, indexNodeCount, indexResidencyCount, indexEvictions, indexBytes, indexRemovePath,
  indexHolds, indexStampResets, indexExportBytes, indexExport, indexImport, indexStamp, indexReservedBytes, indexTableBytes,
} from "./prefix-index";
