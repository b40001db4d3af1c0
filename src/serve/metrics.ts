// The gateway's own metrics as Prometheus text, after the router's: per
// upstream (labelled by its index in the configuration, so label values stay
// bounded) in-flight requests and tokens, health, responses by status class
// and by exact code,
// prompt and matched tokens (its prefix hit rate), retries away from it, and
// latency and time-to-first-byte histograms; for upstreams whose engines
// publish KV events, each DP rank's stream state (live, gapped, stale), what
// came of their batches and events, and the blocks their engine views hold.

import { escapeLabel } from "../prometheus.js";
import type { EngineViews } from "./engine-views.js";
import { LATENCY_BOUNDS, type Histogram, type Upstream } from "./upstream.js";

/** The stream states, one series each (Prometheus' enum pattern). */
const FEED_STATES = ["live", "gapped", "stale"] as const;

/** Lines of the engine-load metrics of the upstreams whose load is scraped. */
function loadLines(p: string, upstreams: readonly Upstream[]): string[] {
  const scraped = upstreams.filter((u) => u.load !== null);
  if (scraped.length === 0) return [];
  const lines = [`# HELP ${p}upstream_load_reporting 1 while the engine's last load report is recent enough (else the upstream takes no requests).`, `# TYPE ${p}upstream_load_reporting gauge`];
  for (const u of scraped) lines.push(`${p}upstream_load_reporting{upstream="${u.index}"} ${u.loadKnown ? 1 : 0}`);
  lines.push(`# HELP ${p}upstream_load_scrapes_total Engine load scrapes by outcome.`, `# TYPE ${p}upstream_load_scrapes_total counter`);
  for (const u of scraped) for (const [outcome, n] of Object.entries(u.load!.counts)) lines.push(`${p}upstream_load_scrapes_total{upstream="${u.index}",outcome="${outcome}"} ${n}`);
  lines.push(`# HELP ${p}upstream_engine_requests Requests the engine last reported, running and waiting (all its DP ranks).`, `# TYPE ${p}upstream_engine_requests gauge`);
  for (const u of scraped) {
    const report = u.load!.report;
    if (report !== null) lines.push(`${p}upstream_engine_requests{upstream="${u.index}",state="running"} ${report.total.running}`, `${p}upstream_engine_requests{upstream="${u.index}",state="waiting"} ${report.total.waiting}`);
  }
  return lines;
}

/** Lines of the KV-event metrics of the upstreams that have a source. */
function eventLines(p: string, upstreams: readonly Upstream[], views: EngineViews | null): string[] {
  const fed = upstreams.filter((u) => u.events !== null);
  if (fed.length === 0) return [];
  const lines = [`# HELP ${p}upstream_kv_events_state Each DP rank's KV-event stream: 1 in its current state (live: routing on the engine's view; gapped or stale: on the gateway's own placements).`, `# TYPE ${p}upstream_kv_events_state gauge`];
  for (const u of fed) {
    u.events!.rankStatuses.forEach((status, r) => {
      for (const state of FEED_STATES) lines.push(`${p}upstream_kv_events_state{upstream="${u.index}",dp_rank="${r}",state="${state}"} ${status === state ? 1 : 0}`);
    });
  }
  lines.push(`# HELP ${p}upstream_kv_events_used 1 while routing matches prompts against the engine's own view (its streams live and its events usable), else 0 (the gateway's own placements).`, `# TYPE ${p}upstream_kv_events_used gauge`);
  for (const u of fed) lines.push(`${p}upstream_kv_events_used{upstream="${u.index}"} ${u.loggedStatus === "live" ? 1 : 0}`);
  lines.push(`# HELP ${p}upstream_kv_event_batches_total KV-event batches by outcome (applied, replayed into a gap, unparseable and skipped, duplicate and skipped).`, `# TYPE ${p}upstream_kv_event_batches_total counter`);
  for (const u of fed) {
    const c = u.events!.counters;
    for (const [outcome, n] of [["applied", c.batches], ["replayed", c.replayed], ["unparseable", c.unparseable], ["duplicate", c.duplicates]] as const) lines.push(`${p}upstream_kv_event_batches_total{upstream="${u.index}",outcome="${outcome}"} ${n}`);
  }
  lines.push(`# HELP ${p}upstream_kv_event_gaps_total Sequence gaps, and those replay could not fill (the stream was gapped while its view went on).`, `# TYPE ${p}upstream_kv_event_gaps_total counter`);
  for (const u of fed) lines.push(`${p}upstream_kv_event_gaps_total{upstream="${u.index}",filled="true"} ${u.events!.counters.gaps - u.events!.counters.unfilled}`, `${p}upstream_kv_event_gaps_total{upstream="${u.index}",filled="false"} ${u.events!.counters.unfilled}`);
  lines.push(`# HELP ${p}upstream_kv_event_restarts_total Engine restarts seen in its events (its view was emptied).`, `# TYPE ${p}upstream_kv_event_restarts_total counter`);
  for (const u of fed) lines.push(`${p}upstream_kv_event_restarts_total{upstream="${u.index}"} ${u.events!.counters.restarts}`);
  if (views === null) return lines;
  lines.push(`# HELP ${p}upstream_kv_events_total Engine KV events by outcome (applied, unknown_parent, unknown_block, malformed, ignored).`, `# TYPE ${p}upstream_kv_events_total counter`);
  const blocks = [`# HELP ${p}upstream_engine_view_blocks Blocks the upstream's engine view holds, over its DP ranks.`, `# TYPE ${p}upstream_engine_view_blocks gauge`];
  for (const u of fed) {
    const view = views.view(u.index);
    if (view === null) continue;
    const k = view.stats().kvEvents;
    for (const [outcome, n] of [["applied", k.applied], ["unknown_parent", k.unknownParent], ["unknown_block", k.unknownBlock], ["malformed", k.malformed], ["ignored", k.ignored]] as const) lines.push(`${p}upstream_kv_events_total{upstream="${u.index}",outcome="${outcome}"} ${n}`);
    let held = 0;
    for (let r = 0; r < view.numRanks; r++) held += view.blockCount(r);
    blocks.push(`${p}upstream_engine_view_blocks{upstream="${u.index}"} ${held}`);
  }
  return [...lines, ...blocks];
}

/** Gateway-wide counters. */
export interface GatewayCounters {
  /** Completion requests by outcome (`ok`, `client_closed`, an error code). */
  readonly requests: Map<string, number>;
  /** Completion requests by the HTTP status the client got (499: it hung up first). */
  readonly codes: Map<number, number>;
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
export function formatGatewayMetrics(upstreams: readonly Upstream[], counters: GatewayCounters, queued: number, views: EngineViews | null = null): string {
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
  lines.push(`# HELP ${p}upstream_responses_by_code_total Upstream responses by exact HTTP status code (only the codes seen, 100-599).`, `# TYPE ${p}upstream_responses_by_code_total counter`);
  for (const u of upstreams) for (const [code, n] of [...u.byCode].sort((a, b) => a[0] - b[0])) lines.push(`${p}upstream_responses_by_code_total{upstream="${u.index}",code="${code}"} ${n}`);
  lines.push(`# HELP ${p}upstream_prompt_tokens_total Prompt tokens of the requests placed on the upstream.`, `# TYPE ${p}upstream_prompt_tokens_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_prompt_tokens_total{upstream="${u.index}"} ${u.promptTokens}`);
  lines.push(`# HELP ${p}upstream_matched_tokens_total Of those, the tokens its cache view already held (matched / prompt is its prefix hit rate).`, `# TYPE ${p}upstream_matched_tokens_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_matched_tokens_total{upstream="${u.index}"} ${u.matchedTokens}`);
  lines.push(`# HELP ${p}upstream_retries_total Requests retried on another upstream because this one could not be reached.`, `# TYPE ${p}upstream_retries_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_retries_total{upstream="${u.index}"} ${u.retriedAway}`);
  lines.push(...eventLines(p, upstreams, views));
  lines.push(...loadLines(p, upstreams));
  lines.push(...histogram(`${p}upstream_latency_seconds`, "Time from sending a request to the end of its response.", upstreams, (u) => u.latency));
  lines.push(...histogram(`${p}upstream_first_byte_seconds`, "Time from sending a request to the upstream's response headers.", upstreams, (u) => u.firstByte));
  lines.push(`# HELP ${p}requests_total Completion requests by outcome.`, `# TYPE ${p}requests_total counter`);
  for (const [outcome, n] of [...counters.requests].sort()) lines.push(`${p}requests_total{outcome="${escapeLabel(outcome)}"} ${n}`);
  lines.push(`# HELP ${p}requests_by_code_total Completion requests by the HTTP status code answered (only the codes seen; 499: the client hung up).`, `# TYPE ${p}requests_by_code_total counter`);
  for (const [code, n] of [...counters.codes].sort((a, b) => a[0] - b[0])) lines.push(`${p}requests_by_code_total{code="${code}"} ${n}`);
  lines.push(`# HELP ${p}queued_requests Requests waiting for an upstream.`, `# TYPE ${p}queued_requests gauge`, `${p}queued_requests ${queued}`);
  lines.push(`# HELP ${p}rejected_full_total Requests refused with 429.`, `# TYPE ${p}rejected_full_total counter`, `${p}rejected_full_total ${counters.rejectedFull}`);
  return lines.join("\n") + "\n";
}
