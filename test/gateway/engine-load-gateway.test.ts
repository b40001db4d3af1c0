// The gateway combining engines' own load reports with its in-flight counts: a
// fake vLLM engine serves its Prometheus /metrics on 127.0.0.1; a busy engine
// gets no new requests while an idle one is there, and one whose report is
// older than max_age_ms is excluded until it reports again.
import pino from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { createGateway, loadGatewayConfig, type Gateway } from "../../gateway/src/index.js";
import { startMockEngine } from "../support/mock-engine.js";
import { waitFor } from "../support/wait.js";
import { metricsByIndex } from "../support/metrics.js";

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** vLLM's /metrics page for one DP rank with `running` and `waiting` requests. */
const vllmPage = (running: number, waiting: number) =>
  [
    "# HELP vllm:num_requests_running Number of requests in model execution batches.",
    "# TYPE vllm:num_requests_running gauge",
    `vllm:num_requests_running{engine="0",model_name="m"} ${running}.0`,
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
    "# TYPE vllm:num_requests_waiting gauge",
    `vllm:num_requests_waiting{engine="0",model_name="m"} ${waiting}.0`,
    "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
    "# TYPE vllm:kv_cache_usage_perc gauge",
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5',
    "",
  ].join("\n");

const metric = (g: Gateway, name: string, labels: string) => {
  const line = metricsByIndex(g.metrics()).split("\n").find((l) => l.startsWith(`adp_gateway_${name}{${labels}}`));
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(" ") + 1));
};

async function ask(g: Gateway, i: number): Promise<number> {
  const r = await fetch(`${g.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: `distinct prompt number ${i} `.repeat(20) }) });
  await r.text();
  expect(r.status).toBe(200);
  return Number(r.headers.get("x-adp-upstream"));
}

describe("engine load", () => {
  it("a busy engine's report steers requests away; a report too old excludes it until it reports again", async () => {
    const b = await startMockEngine("B");
    const a = await startMockEngine("A", { loadMetrics: vllmPage(0, 0) });
    open.push(b, a);
    const text = `listen: { port: 0 }\nhealth: { interval_ms: 60000 }\nupstreams:\n  - url: ${b.url}\n  - url: ${a.url}\n    load: { kind: vllm, interval_ms: 50, max_age_ms: 400 }\n`;
    const logs: Record<string, unknown>[] = [];
    const gateway = await createGateway(loadGatewayConfig({ file: { name: "g.yaml", text } }), { logger: pino({ level: "info" }, { write: (l: string) => logs.push(JSON.parse(l)) }) });
    open.push(gateway);
    await waitFor(() => metric(gateway, "upstream_load_reporting", 'upstream="1"') === 1);
    const idle = [];
    for (let i = 0; i < 6; i++) idle.push(await ask(gateway, i));
    expect(idle).toContain(1); // idle, A takes its share

    a.behaviour.loadMetrics = vllmPage(40, 10);
    await waitFor(() => metric(gateway, "upstream_engine_requests", 'upstream="1",state="waiting"') === 10);
    const busy = [];
    for (let i = 0; i < 6; i++) busy.push(await ask(gateway, 100 + i));
    expect(busy).toEqual([0, 0, 0, 0, 0, 0]);

    a.behaviour.loadMetrics = vllmPage(0, 0);
    await waitFor(() => metric(gateway, "upstream_engine_requests", 'upstream="1",state="running"') === 0);
    a.behaviour.loadMetrics = 500; // it stops reporting
    await waitFor(() => metric(gateway, "upstream_load_reporting", 'upstream="1"') === 0, () => "A excluded", 3000);
    expect(metric(gateway, "upstream_load_scrapes_total", 'upstream="1",outcome="failed"')).toBeGreaterThan(0);
    const excluded = [];
    for (let i = 0; i < 4; i++) excluded.push(await ask(gateway, 200 + i));
    expect(excluded).toEqual([0, 0, 0, 0]);
    await waitFor(() => logs.some((l) => String(l.msg).startsWith("engine load report older than")), () => "a warning", 3000);

    a.behaviour.loadMetrics = vllmPage(0, 0);
    await waitFor(() => metric(gateway, "upstream_load_reporting", 'upstream="1"') === 1, () => "A back", 3000);
    const back = [];
    for (let i = 0; i < 6; i++) back.push(await ask(gateway, 300 + i));
    expect(back).toContain(1);
  });
});
