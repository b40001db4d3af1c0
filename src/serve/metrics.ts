// The gateway's own metrics as Prometheus text, after the router's: per
// upstream (labelled by its index in the configuration, so label values stay
// bounded) in-flight requests and tokens, health, responses by status class,
// prompt and matched tokens (its prefix hit rate), retries away from it, and
// latency and time-to-first-byte histograms.

import { escapeLabel } from "../prometheus.js";
import { LATENCY_BOUNDS, type Histogram, type Upstream } from "./upstream.js";

/** Gateway-wide counters. */
export interface GatewayCounters {
  /** Completion requests by outcome (`ok`, `client_closed`, an error code). */
  readonly requests: Map<string, number>;
  /** Requests waiting for an upstream now. */
  queued: number;
  /** Requests refused with 429 (queue full or timed out waiting). */
  rejectedFull: number;
}

/** The lines of one histogram per upstream. */
function histogram(name: string, help: string, upstreams: readonly Upstream[], pick: (u: Upstream) => Histogram): string[] {
  const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
  for (const u of upstreams) {
    const h = pick(u);
    let cumulative = 0;
    LATENCY_BOUNDS.forEach((bound, i) => {
      cumulative += h.counts[i]!;
      lines.push(`${name}_bucket{upstream="${u.index}",le="${bound}"} ${cumulative}`);
    });
    lines.push(`${name}_bucket{upstream="${u.index}",le="+Inf"} ${h.count}`, `${name}_sum{upstream="${u.index}"} ${h.sum}`, `${name}_count{upstream="${u.index}"} ${h.count}`);
  }
  return lines;
}

/** Prometheus text of the gateway's metrics. */
export function formatGatewayMetrics(upstreams: readonly Upstream[], counters: GatewayCounters, queued: number): string {
  const p = "adp_gateway_";
  const lines: string[] = [];
  const gauge = (name: string, help: string, value: (u: Upstream) => number) => {
    lines.push(`# HELP ${p}${name} ${help}`, `# TYPE ${p}${name} gauge`);
    for (const u of upstreams) lines.push(`${p}${name}{upstream="${u.index}"} ${value(u)}`);
  };
  lines.push(`# HELP ${p}upstream_info The configured upstreams (name bounded to 64 characters).`, `# TYPE ${p}upstream_info gauge`);
  for (const u of upstreams) lines.push(`${p}upstream_info{upstream="${u.index}",name="${escapeLabel(u.name.slice(0, 64))}"} 1`);
  gauge("upstream_in_flight_requests", "Requests routed to the upstream and not yet ended.", (u) => u.inFlight);
  gauge("upstream_in_flight_tokens", "Prompt tokens of those requests.", (u) => u.inFlightTokens);
  gauge("upstream_healthy", "1 while the upstream takes requests.", (u) => (u.healthy ? 1 : 0));
  lines.push(`# HELP ${p}upstream_responses_total Upstream responses by status class, and requests that failed there.`, `# TYPE ${p}upstream_responses_total counter`);
  for (const u of upstreams) for (const [status, n] of [...u.byStatus].sort()) lines.push(`${p}upstream_responses_total{upstream="${u.index}",status="${status}"} ${n}`);
  lines.push(`# HELP ${p}upstream_prompt_tokens_total Prompt tokens of the requests placed on the upstream.`, `# TYPE ${p}upstream_prompt_tokens_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_prompt_tokens_total{upstream="${u.index}"} ${u.promptTokens}`);
  lines.push(`# HELP ${p}upstream_matched_tokens_total Of those, the tokens its cache view already held (matched / prompt is its prefix hit rate).`, `# TYPE ${p}upstream_matched_tokens_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_matched_tokens_total{upstream="${u.index}"} ${u.matchedTokens}`);
  lines.push(`# HELP ${p}upstream_retries_total Requests retried on another upstream because this one could not be reached.`, `# TYPE ${p}upstream_retries_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_retries_total{upstream="${u.index}"} ${u.retriedAway}`);
  lines.push(...histogram(`${p}upstream_latency_seconds`, "Time from sending a request to the end of its response.", upstreams, (u) => u.latency));
  lines.push(...histogram(`${p}upstream_first_byte_seconds`, "Time from sending a request to the upstream's response headers.", upstreams, (u) => u.firstByte));
  lines.push(`# HELP ${p}requests_total Completion requests by outcome.`, `# TYPE ${p}requests_total counter`);
  for (const [outcome, n] of [...counters.requests].sort()) lines.push(`${p}requests_total{outcome="${escapeLabel(outcome)}"} ${n}`);
  lines.push(`# HELP ${p}queued_requests Requests waiting for an upstream.`, `# TYPE ${p}queued_requests gauge`, `${p}queued_requests ${queued}`);
  lines.push(`# HELP ${p}rejected_full_total Requests refused with 429.`, `# TYPE ${p}rejected_full_total counter`, `${p}rejected_full_total ${counters.rejectedFull}`);
  return lines.join("\n") + "\n";
}
