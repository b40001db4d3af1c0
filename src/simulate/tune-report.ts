// The HTML report of `adp-router tune` (its full rendering lands with the report work).
import type { TuneResult } from "./tune-types.js";

/** The report page: the result as JSON for now. */
export function tuneReportHtml(result: TuneResult): string {
  return `<!doctype html><title>adp-router tune</title><h1>attention_dp_config</h1><pre>${JSON.stringify(result, null, 2).replace(/&/g, "&amp;").replace(/</g, "&lt;")}</pre>`;
}
