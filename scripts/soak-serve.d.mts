/** Runs the gateway soak (see scripts/soak-serve.mjs) and returns its figures. */
export declare function soakServe(options?: { requests?: number; engines?: number; concurrency?: number; sessions?: number; streamEvery?: number; warmupFraction?: number; samples?: number }): Promise<{
  requests: number;
  failed: number;
  leaked_in_flight: number;
  seconds: number;
  requests_per_s: number;
  heap_used_mib: { after_warmup: number; peak: number; final: number };
  rss_mib: { after_warmup: number; peak: number; final: number };
  index_bytes: { after_warmup: number; final: number };
  flat: boolean;
}>;
