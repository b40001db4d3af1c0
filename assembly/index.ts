// The wasm core's ABI: numeric arguments and results only, no managed objects.
// The TypeScript shell (src/wasm.ts, src/core.ts) allocates its scratch regions
// with `allocate`, writes inputs through typed-array views, calls one export per
// batch and reads the results back through the same views.

import { MAX_ALLOC, storageAlloc, storageFree } from "./pages";
export { memoryRefused, setPageLimit } from "./pages";

/** Bytes before each `allocate`d region: its size, for `release`. */
// @ts-ignore: decorator
@inline const HEADER: usize = 16;

/**
 * Allocates `bytes` bytes of unmanaged memory, 16-byte aligned; 0 when
 * `bytes` is above MAX_ALLOC or memory cannot grow (the shell checks sizes
 * first and turns a 0 into a typed error; nothing here can wrap).
 */
export function allocate(bytes: usize): usize {
  if (bytes > MAX_ALLOC - HEADER) return 0;
  const at = storageAlloc(bytes + HEADER);
  if (at == 0) return 0;
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
  indexInit, hashBlocks, hashByteBlocks, hashBlockKeys, indexMatch, indexMatchTokens, indexMatchBegin, indexMatchFeed, indexMatchEnd,
  indexInsert, indexInsertBegin, indexInsertBelowBegin, indexInsertFeed, indexInsertEnd, indexInsertFound, indexClearRank,
  indexBlockCount, indexNodeCount, indexResidencyCount, indexEvictions, indexBytes, indexRemovePath, indexHolds, indexStampResets,
  indexExportBytes, indexExportBegin, indexExportPiece, indexImportBegin, indexImportPiece, indexImportEnd, indexStamp,
  indexReservedBytes, indexTableBytes, indexKeyAll,
} from "./prefix-index";
