/** Runs the soak (see scripts/soak.mjs) and returns its figures. */
export declare function runSoak(options?: { requests?: number; conversations?: number; ranks?: number; batch?: number; budgetBytes?: number; warmupFraction?: number; samples?: number }): {
  requests: number;
  conversations: number;
  seconds: number;
  us_per_request: number;
  index_budget_bytes: number;
  index_bytes_peak: number;
  index_evictions: number;
  conversations_tracked: number;
  conversation_evictions: number;
  rss_after_warmup: number;
  rss_peak_after_warmup: number;
  rss_final: number;
  heap_after_warmup: number;
  heap_peak_after_warmup: number;
  heap_final: number;
  wasm_memory_after_warmup: number;
  wasm_memory_final: number;
  flat: boolean;
};
