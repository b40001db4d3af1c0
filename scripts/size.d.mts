/** The library's size budget, gzipped bytes. */
export declare const BUDGET_BYTES: number;
/** Sizes of the wasm core and the minified, gzipped library entry. */
export declare function measureSize(): Promise<{
  wasm_bytes: number;
  wasm_gzip_bytes: number;
  library_min_bytes: number;
  library_min_gzip_bytes: number;
  budget_gzip_bytes: number;
}>;
