// The gateway's own metrics as Prometheus text, after the router's: per
// upstream (labelled by its name, which stays with it when reloads move its
// index; `upstream_info` maps names to indexes) in-flight requests and tokens,
// health and ejections by cause, responses by status class and by exact code,
// prompt and matched tokens (its prefix hit rate), retries away from it,
// streams cut short, and histograms of time to first byte, time to first
// token, inter-token latency and end-to-end latency; for upstreams whose
// engines publish KV events, each DP rank's stream state (live, gapped,
// stale), what came of their batches and events, and the blocks their engine
// views hold; then the edge's connections, bounds and tokenizer pool.

import type { GatewayCounters } from "./fleet/scheduler.js";

export type { GatewayCounters };
import { escapeLabel } from "adp-router/prometheus";
import type { EngineViews } from "./events/engine-views.js";
import type { EdgeCounters } from "./edge/edge.js";
import { EJECTION_CAUSES } from "./fleet/outlier.js";
import type { Histogram, Upstream } from "./fleet/upstream.js";

/** An upstream's label value: its name (bounded to 64 characters, escaped). */
/** An upstream's label value: its name. */
export const label = (u: Upstream) => escapeLabel(u.name.slice(0, 64));

/** The stream states, one series each (Prometheus' enum pattern). */
const FEED_STATES = ["live", "gapped", "stale"] as const;

/** Lines of the engine-load metrics of the upstreams whose load is scraped. */
function loadLines(p: string, upstreams: readonly Upstream[]): string[] {
  const scraped = upstreams.filter((u) => u.load !== null);
  if (scraped.length === 0) return [];
  const lines = [`# HELP ${p}upstream_load_reporting 1 while the engine's last load report is recent enough (else the upstream takes no requests).`, `# TYPE ${p}upstream_load_reporting gauge`];
  for (const u of scraped) lines.push(`${p}upstream_load_reporting{upstream="${label(u)}"} ${u.loadKnown ? 1 : 0}`);
  lines.push(`# HELP ${p}upstream_load_scrapes_total Engine load scrapes by outcome.`, `# TYPE ${p}upstream_load_scrapes_total counter`);
  for (const u of scraped) for (const [outcome, n] of Object.entries(u.load!.counts)) lines.push(`${p}upstream_load_scrapes_total{upstream="${label(u)}",outcome="${outcome}"} ${n}`);
  lines.push(`# HELP ${p}upstream_engine_requests Requests the engine last reported, running and waiting (all its DP ranks).`, `# TYPE ${p}upstream_engine_requests gauge`);
  for (const u of scraped) {
    const report = u.load!.report;
    if (report !== null) lines.push(`${p}upstream_engine_requests{upstream="${label(u)}",state="running"} ${report.total.running}`, `${p}upstream_engine_requests{upstream="${label(u)}",state="waiting"} ${report.total.waiting}`);
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
      for (const state of FEED_STATES) lines.push(`${p}upstream_kv_events_state{upstream="${label(u)}",dp_rank="${r}",state="${state}"} ${status === state ? 1 : 0}`);
    });
  }
  lines.push(`# HELP ${p}upstream_kv_events_used 1 while routing matches prompts against the engine's own view (its streams live and its events usable), else 0 (the gateway's own placements).`, `# TYPE ${p}upstream_kv_events_used gauge`);
  for (const u of fed) lines.push(`${p}upstream_kv_events_used{upstream="${label(u)}"} ${u.loggedStatus === "live" ? 1 : 0}`);
  lines.push(`# HELP ${p}upstream_kv_event_batches_total KV-event batches by outcome (applied, replayed into a gap, unparseable and skipped, oversized and refused (over kv_events.max_batch_bytes, max_batch_blocks or max_batch_tokens), duplicate and skipped).`, `# TYPE ${p}upstream_kv_event_batches_total counter`);
  for (const u of fed) {
    const c = u.events!.counters;
    for (const [outcome, n] of [["applied", c.batches], ["replayed", c.replayed], ["unparseable", c.unparseable], ["oversized", c.oversized], ["duplicate", c.duplicates]] as const) lines.push(`${p}upstream_kv_event_batches_total{upstream="${label(u)}",outcome="${outcome}"} ${n}`);
  }
  lines.push(`# HELP ${p}upstream_kv_event_publishers_refused_total Publishers a CURVE-protected bound stream turned away at the handshake (public key not allowed).`, `# TYPE ${p}upstream_kv_event_publishers_refused_total counter`);
  for (const u of fed) lines.push(`${p}upstream_kv_event_publishers_refused_total{upstream="${label(u)}"} ${u.events!.counters.refusedPeers}`);
  lines.push(`# HELP ${p}upstream_kv_event_gaps_total Sequence gaps, and those replay could not fill (the stream was gapped while its view went on).`, `# TYPE ${p}upstream_kv_event_gaps_total counter`);
  for (const u of fed) lines.push(`${p}upstream_kv_event_gaps_total{upstream="${label(u)}",filled="true"} ${u.events!.counters.gaps - u.events!.counters.unfilled}`, `${p}upstream_kv_event_gaps_total{upstream="${label(u)}",filled="false"} ${u.events!.counters.unfilled}`);
  lines.push(`# HELP ${p}upstream_kv_partial_tails_total Stored events whose last block was not yet full: their full blocks applied, that tail left out (no other request can reuse it until the engine stores it full).`, `# TYPE ${p}upstream_kv_partial_tails_total counter`);
  for (const u of fed) lines.push(`${p}upstream_kv_partial_tails_total{upstream="${label(u)}"} ${u.partialTails}`);
  lines.push(`# HELP ${p}upstream_kv_event_restarts_total Engine restarts seen in its events (its view was emptied).`, `# TYPE ${p}upstream_kv_event_restarts_total counter`);
  for (const u of fed) lines.push(`${p}upstream_kv_event_restarts_total{upstream="${label(u)}"} ${u.events!.counters.restarts}`);
  lines.push(`# HELP ${p}upstream_kv_event_reconnects_total Connections to an engine's publisher that came back (each asks for a replay of what it published meanwhile).`, `# TYPE ${p}upstream_kv_event_reconnects_total counter`);
  for (const u of fed) lines.push(`${p}upstream_kv_event_reconnects_total{upstream="${label(u)}"} ${u.events!.counters.reconnects}`);
  if (views === null) return lines;
  lines.push(`# HELP ${p}upstream_kv_events_total Engine KV events by outcome (applied, unknown_parent, unknown_block, malformed, ignored).`, `# TYPE ${p}upstream_kv_events_total counter`);
  const blocks = [`# HELP ${p}upstream_engine_view_blocks Blocks the upstream's engine view holds, over its DP ranks.`, `# TYPE ${p}upstream_engine_view_blocks gauge`];
  for (const u of fed) {
    const view = views.view(u.index);
    if (view === null || !view.usable) continue; // retired: its memory could not grow (logged where it happened)
    const k = view.stats().kvEvents;
    for (const [outcome, n] of [["applied", k.applied], ["unknown_parent", k.unknownParent], ["unknown_block", k.unknownBlock], ["malformed", k.malformed], ["ignored", k.ignored]] as const) lines.push(`${p}upstream_kv_events_total{upstream="${label(u)}",outcome="${outcome}"} ${n}`);
    let held = 0;
    for (let r = 0; r < view.numRanks; r++) held += view.blockCount(r);
    blocks.push(`${p}upstream_engine_view_blocks{upstream="${label(u)}"} ${held}`);
  }
  return [...lines, ...blocks];
}

/** Per (upstream, DP rank) of the upstreams whose ranks phase 2 chooses: requests placed, their prompt and matched tokens, those in flight. */
function rankLines(p: string, upstreams: readonly Upstream[]): string[] {
  const ranked = upstreams.filter((u) => u.rankRouting !== null);
  if (ranked.length === 0) return [];
  const series: [string, string, string, (u: Upstream, r: number) => number][] = [
    ["upstream_rank_requests_total", "counter", "Requests the gateway placed on each DP rank of an upstream (rank_routing adp or instance).", (u, r) => u.rankRouting!.placed[r]!],
    ["upstream_rank_prompt_tokens_total", "counter", "Their prompt tokens.", (u, r) => u.rankRouting!.promptTokens[r]!],
    ["upstream_rank_matched_tokens_total", "counter", "Their tokens the rank held, by its engine's view while live, else by the gateway's placements.", (u, r) => u.rankRouting!.matchedTokens[r]!],
    ["upstream_rank_in_flight", "gauge", "Requests in flight on each DP rank.", (u, r) => u.rankRouting!.inFlight[r]!],
  ];
  const lines: string[] = [];
  for (const [name, type, help, value] of series) {
    lines.push(`# HELP ${p}${name} ${help}`, `# TYPE ${p}${name} ${type}`);
    for (const u of ranked) for (let r = 0; r < u.rankRouting!.ranks; r++) lines.push(`${p}${name}{upstream="${label(u)}",dp_rank="${r}"} ${value(u, r)}`);
  }
  return lines;
}

/** The lines of one histogram per upstream. */
function histogram(name: string, help: string, upstreams: readonly Upstream[], pick: (u: Upstream) => Histogram): string[] {
  const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
  for (const u of upstreams) {
    const h = pick(u);
    let cumulative = 0;
    h.bounds.forEach((bound, i) => {
      cumulative += h.counts[i]!;
      lines.push(`${name}_bucket{upstream="${label(u)}",le="${bound}"} ${cumulative}`);
    });
    lines.push(`${name}_bucket{upstream="${label(u)}",le="+Inf"} ${h.count}`, `${name}_sum{upstream="${label(u)}"} ${h.sum}`, `${name}_count{upstream="${label(u)}"} ${h.count}`);
  }
  return lines;
}

/** Prometheus text of the gateway's metrics. */
export function formatGatewayMetrics(upstreams: readonly Upstream[], counters: GatewayCounters, queued: number, views: EngineViews | null = null, share: ((u: Upstream) => number) | null = null): string {
  const p = "adp_gateway_";
  const lines: string[] = [];
  const gauge = (name: string, help: string, value: (u: Upstream) => number) => {
    lines.push(`# HELP ${p}${name} ${help}`, `# TYPE ${p}${name} gauge`);
    for (const u of upstreams) lines.push(`${p}${name}{upstream="${label(u)}"} ${value(u)}`);
  };
  lines.push(`# HELP ${p}upstream_info The upstreams: each name's index in the configured list now (x-adp-upstream) and URL.`, `# TYPE ${p}upstream_info gauge`);
  for (const u of upstreams) lines.push(`${p}upstream_info{upstream="${label(u)}",index="${u.index}",url="${escapeLabel(u.url.slice(0, 200))}"} 1`);
  gauge("upstream_in_flight_requests", "Requests routed to the upstream and not yet ended.", (u) => u.inFlight);
  gauge("upstream_in_flight_tokens", "Prompt tokens of those requests.", (u) => u.inFlightTokens);
  if (share !== null) gauge("upstream_in_flight_share", "Requests this process may have in flight on the upstream now: limits.max_in_flight_per_upstream in one process; with --workers, the units of it this worker holds (lent to where requests wait).", share);
  gauge("upstream_in_transfer_requests", "Disaggregated serving: requests whose prefill the upstream answered and whose decode has not begun, counted in its load (kv_cache_routing_account_for_in_transfer).", (u) => u.inTransfer);
  gauge("upstream_healthy", "1 while the upstream takes requests.", (u) => (u.healthy ? 1 : 0));
  lines.push(`# HELP ${p}upstream_ejections_total Ejections by cause: failed health checks, outlier detection (consecutive 5xx, consecutive gateway failures), unreachable at start.`, `# TYPE ${p}upstream_ejections_total counter`);
  for (const u of upstreams) for (const cause of EJECTION_CAUSES) lines.push(`${p}upstream_ejections_total{upstream="${label(u)}",cause="${cause}"} ${u.health.ejectionsTotal.get(cause) ?? 0}`);
  lines.push(`# HELP ${p}upstream_ejections_refused_total Outlier ejections not made because health.max_ejected_percent of the fleet was out.`, `# TYPE ${p}upstream_ejections_refused_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_ejections_refused_total{upstream="${label(u)}"} ${u.health.refusedEjections}`);
  lines.push(`# HELP ${p}upstream_stream_cuts_total Answers cut short, by reason (upstream_died, idle_timeout, client_stalled, max_duration).`, `# TYPE ${p}upstream_stream_cuts_total counter`);
  for (const u of upstreams) for (const [reason, n] of [...u.cutStreams].sort()) lines.push(`${p}upstream_stream_cuts_total{upstream="${label(u)}",reason="${reason}"} ${n}`);
  lines.push(`# HELP ${p}upstream_responses_total Upstream responses by status class, and requests that failed there.`, `# TYPE ${p}upstream_responses_total counter`);
  for (const u of upstreams) for (const [status, n] of [...u.byStatus].sort()) lines.push(`${p}upstream_responses_total{upstream="${label(u)}",status="${status}"} ${n}`);
  lines.push(`# HELP ${p}upstream_responses_by_code_total Upstream responses by exact HTTP status code (only the codes seen, 100-599).`, `# TYPE ${p}upstream_responses_by_code_total counter`);
  for (const u of upstreams) for (const [code, n] of [...u.byCode].sort((a, b) => a[0] - b[0])) lines.push(`${p}upstream_responses_by_code_total{upstream="${label(u)}",code="${code}"} ${n}`);
  lines.push(`# HELP ${p}upstream_prompt_tokens_total Prompt tokens of the requests placed on the upstream.`, `# TYPE ${p}upstream_prompt_tokens_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_prompt_tokens_total{upstream="${label(u)}"} ${u.promptTokens}`);
  lines.push(`# HELP ${p}upstream_matched_tokens_total Of those, the tokens its cache view already held (matched / prompt is its prefix hit rate).`, `# TYPE ${p}upstream_matched_tokens_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_matched_tokens_total{upstream="${label(u)}"} ${u.matchedTokens}`);
  lines.push(...rankLines(p, upstreams));
  lines.push(`# HELP ${p}upstream_retries_total Requests retried on another upstream because they provably never reached this one.`, `# TYPE ${p}upstream_retries_total counter`);
  for (const u of upstreams) lines.push(`${p}upstream_retries_total{upstream="${label(u)}"} ${u.retriedAway}`);
  lines.push(...eventLines(p, upstreams, views));
  lines.push(...loadLines(p, upstreams));
  lines.push(...histogram(`${p}upstream_e2e_request_latency_seconds`, "Time from sending a request to the end of its answer.", upstreams, (u) => u.e2e));
  lines.push(...histogram(`${p}upstream_first_byte_seconds`, "Time from sending a request to the upstream's response headers.", upstreams, (u) => u.firstByte));
  lines.push(...histogram(`${p}upstream_time_to_first_token_seconds`, "Time from sending a request to its first token: the first SSE event with content, or the whole answer when not streamed.", upstreams, (u) => u.ttft));
  lines.push(...histogram(`${p}upstream_inter_token_latency_seconds`, "Time between a stream's tokens (events with content; k in one chunk share its gap).", upstreams, (u) => u.itl));
  lines.push(`# HELP ${p}requests_total Completion requests by outcome.`, `# TYPE ${p}requests_total counter`);
  for (const [outcome, n] of [...counters.requests].sort()) lines.push(`${p}requests_total{outcome="${escapeLabel(outcome)}"} ${n}`);
  lines.push(`# HELP ${p}requests_by_code_total Completion requests by the HTTP status code answered (only the codes seen; 499: the client hung up).`, `# TYPE ${p}requests_by_code_total counter`);
  for (const [code, n] of [...counters.codes].sort((a, b) => a[0] - b[0])) lines.push(`${p}requests_by_code_total{code="${code}"} ${n}`);
  lines.push(`# HELP ${p}queued_requests Requests waiting for an upstream.`, `# TYPE ${p}queued_requests gauge`, `${p}queued_requests ${queued}`);
  lines.push(`# HELP ${p}rejected_full_total Requests refused with 429.`, `# TYPE ${p}rejected_full_total counter`, `${p}rejected_full_total ${counters.rejectedFull}`);
  lines.push(`# HELP ${p}subagent_hints_refused_total Sub-agent hints ignored with an internal_request_auth_key set: unsigned, wrongly signed, or on an aggregated request.`, `# TYPE ${p}subagent_hints_refused_total counter`, `${p}subagent_hints_refused_total ${counters.subagentRefused}`);
  return lines.join("\n") + "\n";
}

/** Prometheus text of the edge's bounds and their use, then the tokenizer pool's lines. */
export function formatEdgeMetrics(edge: EdgeCounters, maxConnections: number, tokenizerLines: readonly string[]): string {
  const p = "adp_gateway_";
  return [
    `# HELP ${p}client_connections Client connections open now.`,
    `# TYPE ${p}client_connections gauge`,
    `${p}client_connections ${edge.connections}`,
    `# HELP ${p}client_connections_limit limits.max_connections: connections past it are closed as they arrive.`,
    `# TYPE ${p}client_connections_limit gauge`,
    `${p}client_connections_limit ${maxConnections}`,
    `# HELP ${p}client_connections_refused_total Connections closed on arrival because limits.max_connections were open (with serve --workers: no worker had room).`,
    `# TYPE ${p}client_connections_refused_total counter`,
    `${p}client_connections_refused_total ${edge.refusedConnections}`,
    `# HELP ${p}client_connections_passed_total Connections past this worker's share of limits.max_connections passed to another worker to serve (serve --workers).`,
    `# TYPE ${p}client_connections_passed_total counter`,
    `${p}client_connections_passed_total ${edge.passedConnections}`,
    `# HELP ${p}client_read_timeouts_total Requests not received in time (timeouts.headers_ms, timeouts.request_ms): answered 408.`,
    `# TYPE ${p}client_read_timeouts_total counter`,
    `${p}client_read_timeouts_total ${edge.readTimeouts}`,
    `# HELP ${p}client_malformed_requests_total Requests refused as malformed (400: unparsable, or HTTP/1.1 without Host), or with headers too large (431).`,
    `# TYPE ${p}client_malformed_requests_total counter`,
    `${p}client_malformed_requests_total{status="400"} ${edge.malformed}`,
    `${p}client_malformed_requests_total{status="431"} ${edge.headersTooLarge}`,
    `# HELP ${p}client_bodies_refused_total Request bodies answered 503 because limits.max_receiving_bytes of bodies were being received.`,
    `# TYPE ${p}client_bodies_refused_total counter`,
    `${p}client_bodies_refused_total ${edge.bodiesRefused}`,
    `# HELP ${p}loops_detected_total Requests that came back to this gateway (its Via entry): answered 508.`,
    `# TYPE ${p}loops_detected_total counter`,
    `${p}loops_detected_total ${edge.loops}`,
    ...tokenizerLines,
  ].join("\n") + "\n";
}
