// Engine load: the Prometheus text parser, vLLM's and TensorRT-LLM's load
// formats read exactly, their combination with the gateway's own counts, and
// the scraper against fake engines on loopback (real node:http servers):
// refusals, 500s, garbage, slow and endless bodies counted rather than thrown,
// freshness on an injected clock, no overlapping scrapes, and nothing left
// running after close().
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { createRouter } from "../../src/router.js";
import { PAGE_STEP_LINES, parsePrometheusTextStepped } from "../../gateway/src/load/engine-load-prometheus.js";
import { parseEngineLoadStepped } from "../../gateway/src/load/engine-load-parse.js";
import { EngineLoadScraper, parsePrometheusText, parseSglangMetrics, parseTrtllmMetrics, parseVllmMetrics, rankStateFromLoad, dpRankStateFromLoad, type EngineLoadReport, type EngineLoadScraperOptions, type ScrapeOutcome } from "../../gateway/src/load/engine-load.js";
import { closedPort, startFakeLoadEngine, type FakeAnswer, type FakeLoadEngine } from "../support/fake-load-engine.js";
import { waitFor } from "../support/wait.js";

// vLLM V1 with data parallelism 2, as prometheus_client's generate_latest
// writes it (text format 0.0.4): metric names, HELP texts and the
// `model_name`/`engine` labels (in that order) are those of
// vllm/v1/metrics/loggers.py (PrometheusStatLogger); the 0.10 series served
// both KV-usage names (the old one deprecated), as a capture of vLLM v0.10.2
// (Qwen/Qwen3-0.6B) recorded in ai-dynamo's docs lists them; counters come as
// `_total` plus a `_created` gauge, and floats in prometheus_client's Go-style
// notation (`e+010`). Assembled from those sources, values made up: not a
// capture of a live engine.
const VLLM_V1_DP2 = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12716.0
python_gc_objects_collected_total{generation="1"} 2377.0
python_gc_objects_collected_total{generation="2"} 913.0
# HELP process_virtual_memory_bytes Virtual memory size in bytes.
# TYPE process_virtual_memory_bytes gauge
process_virtual_memory_bytes 1.19634688e+010
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="Qwen/Qwen3-0.6B",engine="0"} 3.0
vllm:num_requests_running{model_name="Qwen/Qwen3-0.6B",engine="1"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="Qwen/Qwen3-0.6B",engine="0"} 0.0
vllm:num_requests_waiting{model_name="Qwen/Qwen3-0.6B",engine="1"} 2.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="0"} 0.1171875
vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="1"} 0.4296875
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="0"} 0.1171875
vllm:kv_cache_usage_perc{model_name="Qwen/Qwen3-0.6B",engine="1"} 0.4296875
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="Qwen/Qwen3-0.6B",engine="0"} 48213.0
vllm:prompt_tokens_total{model_name="Qwen/Qwen3-0.6B",engine="1"} 51877.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{model_name="Qwen/Qwen3-0.6B",engine="0"} 1.7600063453856535e+09
vllm:prompt_tokens_created{model_name="Qwen/Qwen3-0.6B",engine="1"} 1.760006345385712e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen3-0.6B",engine="0",le="0.001"} 0.0
vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen3-0.6B",engine="0",le="0.005"} 0.0
vllm:time_to_first_token_seconds_bucket{model_name="Qwen/Qwen3-0.6B",engine="0",le="+Inf"} 31.0
vllm:time_to_first_token_seconds_count{model_name="Qwen/Qwen3-0.6B",engine="0"} 31.0
vllm:time_to_first_token_seconds_sum{model_name="Qwen/Qwen3-0.6B",engine="0"} 1.9071226119995117
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="32768",prefix_caching_hash_algo="builtin"} 1.0
`;

// vLLM V0 (0.6 series): no `engine` label, the KV usage under its old name,
// HELP texts of vllm/engine/metrics.py of that series. Assembled, values made up.
const VLLM_V0 = `# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
`;

// trtllm-serve `GET /metrics`, PyTorch backend, before rows carried a rank:
// the example of docs/source/commands/trtllm-serve/trtllm-serve.rst (gpuMemUsage,
// iter, iterLatencyMS, kvCacheStats, numActiveRequests as printed there) with
// every other field IterationStats serializes
// (cpp/tensorrt_llm/executor/jsonSerialization.cpp; nlohmann's std::map keeps
// keys sorted), as FastAPI's JSONResponse writes a list (compact separators).
// Not a capture of a live engine.
const TRTLLM_PYTORCH =
  '[{"cpuMemUsage":0,"gpuMemUsage":76665782272,"inflightBatchingStats":{"avgNumDecodedTokensPerIter":0.0,"microBatchId":0,"numContextRequests":0,"numCtxTokens":0,"numGenRequests":1,"numPausedRequests":0,"numScheduledRequests":1},"iter":154,"iterLatencyMS":7.00688362121582,"kvCacheStats":{"allocNewBlocks":3126,"allocTotalBlocks":3126,"cacheHitRate":0.00128,"freeNumBlocks":101253,"maxNumBlocks":101256,"missedBlocks":3121,"reusedBlocks":4,"tokensPerBlock":32,"usedNumBlocks":3},"maxBatchSizeRuntime":0,"maxBatchSizeStatic":0,"maxBatchSizeTunerRecommended":0,"maxNumActiveRequests":2048,"maxNumTokensRuntime":0,"maxNumTokensStatic":0,"maxNumTokensTunerRecommended":0,"newActiveRequestsQueueLatencyMS":0.0007503032684326172,"numActiveRequests":1,"numCompletedRequests":0,"numNewActiveRequests":0,"numQueuedRequests":0,"pinnedMemUsage":0,"specDecodingStats":null,"staticBatchingStats":null,"timestamp":""}]';

// trtllm-serve with attention DP over 2 ranks, a recent release: two
// iterations' rows per rank, interleaved, oldest first (the endpoint drains a
// queue), each tagged `attentionDpRank` and followed by the keys
// tensorrt_llm/executor/base_worker.py's `_stats_serializer` appends after the
// sorted C++ ones (hostStepTimeMS, prevDeviceStepTimeMS, gpuForwardTimeMS,
// schedulerMode), with the ForwardPassMetrics fields jsonSerialization.cpp
// adds (scheduled*/queued*). Newer inflightBatchingStats fields (KV-token
// counts) are left out: their JSON names were not confirmed. Assembled, not
// captured.
const TRTLLM_ADP_ROWS = [
  '{"cpuMemUsage":0,"gpuMemUsage":171798691840,"inflightBatchingStats":{"avgNumDecodedTokensPerIter":0.0,"microBatchId":0,"numContextRequests":1,"numCtxTokens":1536,"numGenRequests":11,"numPausedRequests":0,"numScheduledRequests":12},"iter":311,"iterLatencyMS":31.52,"kvCacheStats":{"allocNewBlocks":2521,"allocTotalBlocks":2616,"cacheHitRate":0.041,"freeNumBlocks":34360,"maxNumBlocks":35540,"missedBlocks":2521,"reusedBlocks":95,"tokensPerBlock":32,"usedNumBlocks":1180},"maxBatchSizeRuntime":0,"maxBatchSizeStatic":0,"maxBatchSizeTunerRecommended":0,"maxNumActiveRequests":256,"maxNumTokensRuntime":0,"maxNumTokensStatic":0,"maxNumTokensTunerRecommended":0,"newActiveRequestsQueueLatencyMS":0.0,"numActiveRequests":12,"numCompletedRequests":0,"numNewActiveRequests":1,"numQueuedRequests":0,"pinnedMemUsage":0,"queuedNumDecodeRequests":0,"queuedNumPrefillRequests":0,"queuedSumDecodeKvTokens":0,"queuedSumPrefillTokens":0,"scheduledNumDecodeRequests":11,"scheduledNumPrefillRequests":1,"scheduledSumDecodeKvTokens":20900,"scheduledSumPrefillKvTokens":0,"scheduledSumPrefillTokens":1536,"specDecodingStats":null,"staticBatchingStats":null,"timestamp":"","attentionDpRank":0,"hostStepTimeMS":15.81,"prevDeviceStepTimeMS":14.97,"gpuForwardTimeMS":14.97,"schedulerMode":"overlap"}',
  '{"cpuMemUsage":0,"gpuMemUsage":171798691840,"inflightBatchingStats":{"avgNumDecodedTokensPerIter":0.0,"microBatchId":0,"numContextRequests":0,"numCtxTokens":0,"numGenRequests":9,"numPausedRequests":0,"numScheduledRequests":9},"iter":311,"iterLatencyMS":31.49,"kvCacheStats":{"allocNewBlocks":2521,"allocTotalBlocks":2616,"cacheHitRate":0.041,"freeNumBlocks":34580,"maxNumBlocks":35540,"missedBlocks":2521,"reusedBlocks":95,"tokensPerBlock":32,"usedNumBlocks":960},"maxBatchSizeRuntime":0,"maxBatchSizeStatic":0,"maxBatchSizeTunerRecommended":0,"maxNumActiveRequests":256,"maxNumTokensRuntime":0,"maxNumTokensStatic":0,"maxNumTokensTunerRecommended":0,"newActiveRequestsQueueLatencyMS":0.0,"numActiveRequests":9,"numCompletedRequests":0,"numNewActiveRequests":0,"numQueuedRequests":2,"pinnedMemUsage":0,"queuedNumDecodeRequests":0,"queuedNumPrefillRequests":2,"queuedSumDecodeKvTokens":0,"queuedSumPrefillTokens":3072,"scheduledNumDecodeRequests":9,"scheduledNumPrefillRequests":0,"scheduledSumDecodeKvTokens":17100,"scheduledSumPrefillKvTokens":0,"scheduledSumPrefillTokens":0,"specDecodingStats":null,"staticBatchingStats":null,"timestamp":"","attentionDpRank":1,"hostStepTimeMS":15.77,"prevDeviceStepTimeMS":14.2,"gpuForwardTimeMS":14.2,"schedulerMode":"overlap"}',
  '{"cpuMemUsage":0,"gpuMemUsage":171798691840,"inflightBatchingStats":{"avgNumDecodedTokensPerIter":0.0,"microBatchId":0,"numContextRequests":2,"numCtxTokens":3072,"numGenRequests":11,"numPausedRequests":0,"numScheduledRequests":13},"iter":312,"iterLatencyMS":30.88,"kvCacheStats":{"allocNewBlocks":2522,"allocTotalBlocks":2617,"cacheHitRate":0.041,"freeNumBlocks":34304,"maxNumBlocks":35540,"missedBlocks":2522,"reusedBlocks":95,"tokensPerBlock":32,"usedNumBlocks":1236},"maxBatchSizeRuntime":0,"maxBatchSizeStatic":0,"maxBatchSizeTunerRecommended":0,"maxNumActiveRequests":256,"maxNumTokensRuntime":0,"maxNumTokensStatic":0,"maxNumTokensTunerRecommended":0,"newActiveRequestsQueueLatencyMS":0.0,"numActiveRequests":13,"numCompletedRequests":0,"numNewActiveRequests":2,"numQueuedRequests":1,"pinnedMemUsage":0,"queuedNumDecodeRequests":0,"queuedNumPrefillRequests":1,"queuedSumDecodeKvTokens":0,"queuedSumPrefillTokens":1536,"scheduledNumDecodeRequests":11,"scheduledNumPrefillRequests":2,"scheduledSumDecodeKvTokens":20900,"scheduledSumPrefillKvTokens":0,"scheduledSumPrefillTokens":3072,"specDecodingStats":null,"staticBatchingStats":null,"timestamp":"","attentionDpRank":0,"hostStepTimeMS":15.42,"prevDeviceStepTimeMS":14.63,"gpuForwardTimeMS":14.63,"schedulerMode":"overlap"}',
  '{"cpuMemUsage":0,"gpuMemUsage":171798691840,"inflightBatchingStats":{"avgNumDecodedTokensPerIter":0.0,"microBatchId":0,"numContextRequests":1,"numCtxTokens":1536,"numGenRequests":9,"numPausedRequests":0,"numScheduledRequests":10},"iter":312,"iterLatencyMS":30.91,"kvCacheStats":{"allocNewBlocks":2522,"allocTotalBlocks":2617,"cacheHitRate":0.041,"freeNumBlocks":34533,"maxNumBlocks":35540,"missedBlocks":2522,"reusedBlocks":95,"tokensPerBlock":32,"usedNumBlocks":1007},"maxBatchSizeRuntime":0,"maxBatchSizeStatic":0,"maxBatchSizeTunerRecommended":0,"maxNumActiveRequests":256,"maxNumTokensRuntime":0,"maxNumTokensStatic":0,"maxNumTokensTunerRecommended":0,"newActiveRequestsQueueLatencyMS":0.0,"numActiveRequests":10,"numCompletedRequests":0,"numNewActiveRequests":1,"numQueuedRequests":3,"pinnedMemUsage":0,"queuedNumDecodeRequests":0,"queuedNumPrefillRequests":3,"queuedSumDecodeKvTokens":0,"queuedSumPrefillTokens":4608,"scheduledNumDecodeRequests":9,"scheduledNumPrefillRequests":1,"scheduledSumDecodeKvTokens":17100,"scheduledSumPrefillKvTokens":0,"scheduledSumPrefillTokens":1536,"specDecodingStats":null,"staticBatchingStats":null,"timestamp":"","attentionDpRank":1,"hostStepTimeMS":15.4,"prevDeviceStepTimeMS":14.18,"gpuForwardTimeMS":14.18,"schedulerMode":"overlap"}',
];
const TRTLLM_ADP = `[${TRTLLM_ADP_ROWS.join(",")}]`;

// TensorRT-LLM's centralized router's WorkerLoadReport
// (tensorrt_llm/serve/kv_cache_router/messages.py) as JSON, per rank
// ("instance:rankN" worker ids). It travels over ZMQ there; an engine or
// sidecar serving it over HTTP is the case this shape is read for.
const WORKER_LOAD_REPORTS =
  '[{"worker_id":"9c1f5e0a-1b7d-4c1e-8d0e-2f4b6a8c0d12:rank0","namespace":"gen","seq":418,"num_active_requests":7,"num_queued_requests":1,"max_batch_size":256,"num_active_tokens":9120},{"worker_id":"9c1f5e0a-1b7d-4c1e-8d0e-2f4b6a8c0d12:rank1","namespace":"gen","seq":418,"num_active_requests":4,"num_queued_requests":0,"max_batch_size":256,"num_active_tokens":5312}]';

/** The report of a successful parse (fails the test otherwise, showing the problem). */
function ok(parse: ReturnType<typeof parseVllmMetrics>): EngineLoadReport {
  if (!parse.ok) expect.fail(`expected a report, got ${parse.problem.kind}: ${parse.problem.message}`);
  return parse.report;
}

describe("parsePrometheusText", () => {
  it("reads prometheus_client's page: every sample, labels in order, Go-style exponents, HELP/TYPE metadata", () => {
    const page = parsePrometheusText(VLLM_V1_DP2);
    if (!page.ok) expect.fail(JSON.stringify(page.problem));
    expect(page.samples).toHaveLength(22);
    const vm = page.samples.find((s) => s.name === "process_virtual_memory_bytes")!;
    expect(vm.value).toBe(11963468800);
    expect([...vm.labels]).toEqual([]);
    const created = page.samples.find((s) => s.name === "vllm:prompt_tokens_created")!;
    expect(created.value).toBeCloseTo(1760006345.3856535, 3);
    const inf = page.samples.find((s) => s.labels.get("le") === "+Inf")!;
    expect([...inf.labels]).toEqual([["model_name", "Qwen/Qwen3-0.6B"], ["engine", "0"], ["le", "+Inf"]]);
    expect(inf.value).toBe(31);
    expect(page.types.get("vllm:time_to_first_token_seconds")).toBe("histogram");
    expect(page.types.get("vllm:prompt_tokens_total")).toBe("counter");
  });

  it("unescapes label values, allows a trailing comma and blanks, reads NaN, ±Inf and timestamps", () => {
    const page = parsePrometheusText(
      [
        'a{path="C:\\\\dir\\\\",quote="say \\"hi\\"",nl="x\\ny",} 1 1700000000000',
        "b NaN",
        "\tc{ x = \"1\" , y=\"2\" }\t+Inf\t-5",
        "d -Inf",
        "e 1e-3",
        "# a plain comment",
        "",
        "# HELP f help with \\\\ and \\n escapes",
        "f{z=\"\"} .5",
      ].join("\n"),
    );
    if (!page.ok) expect.fail(JSON.stringify(page.problem));
    const [a, b, c, d, e, f] = page.samples;
    expect(Object.fromEntries(a!.labels)).toEqual({ path: "C:\\dir\\", quote: 'say "hi"', nl: "x\ny" });
    expect(a!.timestampMs).toBe(1700000000000);
    expect(b!.value).toBeNaN();
    expect(Object.fromEntries(c!.labels)).toEqual({ x: "1", y: "2" });
    expect(c!.value).toBe(Number.POSITIVE_INFINITY);
    expect(c!.timestampMs).toBe(-5);
    expect(d!.value).toBe(Number.NEGATIVE_INFINITY);
    expect(e!.value).toBe(0.001);
    expect(f!.labels.get("z")).toBe("");
    expect(f!.value).toBe(0.5);
  });

  it.each([
    ['a{x="\\t"} 1', 1, "escapes"],
    ['a{x="open} 1', 1, "closing quote"],
    ['a{x="1",x="2"} 1', 1, "the label x once"],
    ["a", 1, "value"],
    ["a{} abc", 1, "number"],
    ["a 1 2 3", 1, "at most"],
    ["a 1 1.5", 1, "integer timestamp"],
    ['a{x="1"}1', 1, "blank"],
    ["1a 1", 1, "metric name"],
    ['a{1x="1"} 1', 1, "label name"],
    ["a 1\na 2", 2, "already given"],
    ["# TYPE a gauge\n# TYPE a counter\na 1", 2, "second TYPE"],
    ["# TYPE a meter\na 1", 1, "counter, gauge"],
    ["# HELP 9a nope", 1, "metric name"],
  ])("rejects %j at line %i (%s)", (text, line, rule) => {
    const page = parsePrometheusText(text);
    if (page.ok) expect.fail("accepted");
    expect(page.problem.line).toBe(line);
    expect(page.problem.rule).toContain(rule);
  });

  it("counts every bad line and keeps the first, with a bounded excerpt", () => {
    const page = parsePrometheusText(`ok 1\n<html>\n${"x".repeat(500)}{\nalso bad\nfine 2\n`);
    if (page.ok) expect.fail("accepted");
    expect(page.problems).toBe(3);
    expect(page.problem.line).toBe(2);
    expect(page.problem.excerpt).toBe("<html>");
    const long = parsePrometheusText(`${"y".repeat(500)}{`);
    if (long.ok) expect.fail("accepted");
    expect(long.problem.excerpt).toBe(`${"y".repeat(80)}...`);
  });

  it("a step of lines a turn reads exactly what the whole parse reads (random pages, steps of one line), and a rejected turn stops it", async () => {
    const alphabet = fc.constantFrom(..."ab_:{}=\",\\ \t\r\n#.+-eE019NaIf".split(""));
    const line = fc.oneof(fc.constantFrom("a 1", 'b{x="1"} 2', "# TYPE a gauge", "# HELP a says", "", "a 1", "\r", "c{y=\"\\\\\"} 1 17"), fc.array(alphabet, { maxLength: 20 }).map((cs) => cs.join("")));
    await fc.assert(
      fc.asyncProperty(fc.array(line, { maxLength: 12 }), fc.boolean(), async (lines, lastNewline) => {
        const text = lines.join("\n") + (lastNewline ? "\n" : "");
        const whole = parsePrometheusText(text);
        const stepped = await parsePrometheusTextStepped(text, async () => {}, { stepLines: 1 });
        expect(stepped).toEqual(whole);
      }),
      { numRuns: 1000, seed: 20261206 },
    );
    // A page of 50,000 series: a turn after each PAGE_STEP_LINES lines at most, fewer once a turn's 2 ms are up (the clock read
    // every 64 lines), and the samples the caller keeps.
    const page = Array.from({ length: 50_000 }, (_, i) => `m${i % 3}{i="${i}"} ${i}`).join("\n");
    let turns = 0;
    const kept = await parsePrometheusTextStepped(page, async () => void turns++, { keep: (name) => name === "m1" });
    expect(turns).toBeGreaterThanOrEqual(Math.ceil(50_000 / PAGE_STEP_LINES) - 1);
    expect(turns).toBeLessThanOrEqual(Math.ceil(50_000 / 64) - 1);
    if (!kept.ok) expect.fail("refused");
    expect(kept.samples.length).toBe(Math.floor(50_000 / 3) + (50_000 % 3 > 1 ? 1 : 0));
    expect(kept.samples.every((x) => x.name === "m1")).toBe(true);
    // A repeated series is still found among the samples not kept.
    const repeated = await parsePrometheusTextStepped(`m0 1\nm2 1\nm0 2\n`, async () => {}, { keep: (name) => name === "m2" });
    expect(repeated.ok).toBe(false);
    let stops = 0;
    await expect(parsePrometheusTextStepped(page, async () => {
      if (++stops === 3) throw new Error("timed out");
    })).rejects.toThrow("timed out");
    expect(stops).toBe(3);
  });

  it("samples handed to a taker as they are read are not held, and an engine's load read so equals the page read whole (random vLLM and SGLang pages)", async () => {
    const page = Array.from({ length: 5_000 }, (_, i) => `m${i % 3}{i="${i}"} ${i}`).join("\n");
    const taken: number[] = [];
    const kept = await parsePrometheusTextStepped(page, async () => {}, { keep: (name) => name === "m1", take: (sample) => void taken.push(sample.value) });
    if (!kept.ok) expect.fail("refused");
    expect(kept.samples).toEqual([]);
    expect(taken).toEqual(Array.from({ length: 5_000 }, (_, i) => i).filter((i) => i % 3 === 1));
    // Lines of the series the engines' loads read, with ranks, models and values good and bad, repeats and junk.
    const name = fc.constantFrom("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "other_total");
    const label = fc.oneof(fc.constantFrom("", 'engine="0"', 'engine="1"', 'dp_rank="0"', 'dp_rank="2"', 'engine="x"', 'engine="99999999"', 'model_name="m"', 'model_name="n"', 'tp_rank="1"'));
    const value = fc.constantFrom("0", "3", "2.5", "-1", "0.5", "NaN", "1e40", "+Inf", "7");
    const sample = fc.tuple(name, fc.array(label, { maxLength: 3 }), value).map(([n, ls, v]) => {
      const uniq = [...new Set(ls.filter((l) => l !== ""))].filter((l, i, all) => all.findIndex((m) => m.split("=")[0] === l.split("=")[0]) === i);
      return `${n}${uniq.length > 0 ? `{${uniq.join(",")}}` : ""} ${v}`;
    });
    const line = fc.oneof({ weight: 8, arbitrary: sample }, { weight: 1, arbitrary: fc.constantFrom("# TYPE vllm:num_requests_running gauge", "<html>", "") });
    await fc.assert(
      fc.asyncProperty(fc.array(line, { maxLength: 40 }), fc.constantFrom("vllm" as const, "sglang" as const), fc.constantFrom(undefined, "m", "n"), fc.integer({ min: 1, max: 5 }), async (lines, engine, model, step) => {
        const text = lines.join("\n") + "\n";
        const options = model === undefined ? {} : { model };
        const whole = engine === "vllm" ? parseVllmMetrics(text, options) : parseSglangMetrics(text, options);
        let turns = 0;
        expect(await parseEngineLoadStepped(engine, text, options, async () => void turns++, step)).toEqual(whole);
        // Read `step` lines a turn: the sums and the problems carry over the turns.
        expect(turns).toBe(Math.max(0, Math.ceil(lines.length / step) - 1));
      }),
      { numRuns: 2000, seed: 20261206 },
    );
  });

  it("never throws, whatever the text", () => {
    const alphabet = fc.constantFrom(..."ab_:{}=\",\\ \t\n#.+-eE019NaIf".split(""));
    fc.assert(
      fc.property(fc.array(alphabet, { maxLength: 80 }).map((cs) => cs.join("")), (text) => {
        const page = parsePrometheusText(text);
        expect(typeof page.ok).toBe("boolean");
      }),
      { numRuns: 2000, seed: 12 },
    );
  });
});

describe("parseSglangMetrics", () => {
  /** SGLang's /metrics as its collector writes it (scripts/engine-event-fixtures.py, prometheus_client). */
  const SGLANG = (JSON.parse(readFileSync(new URL("../fixtures/kv-events/engines.json", import.meta.url), "utf8")) as { sglang_metrics: { text: string } }).sglang_metrics.text;

  it("reads each dp_rank's running and queued requests and token usage, as SGLang's collector labels them", () => {
    const r = ok(parseSglangMetrics(SGLANG));
    expect(r.engine).toBe("sglang");
    expect(r.ranks).toEqual([
      { rank: 0, model: "qwen", running: 3, waiting: 1, kvUsage: 0.25, activeTokens: null },
      { rank: 1, model: "qwen", running: 0, waiting: 0, kvUsage: 0, activeTokens: null },
    ]);
    // vLLM's reader finds none of it: the dialects are told apart.
    expect(parseVllmMetrics(SGLANG)).toMatchObject({ ok: false, problem: { kind: "missing" } });
  });

  it("series of one DP rank from several pipeline stages count the same requests: the largest, not the sum", () => {
    const stage = (pp: number, running: number) => `sglang:num_running_reqs{dp_rank="0",pp_rank="${pp}"} ${running}\nsglang:num_queue_reqs{dp_rank="0",pp_rank="${pp}"} 2\n`;
    expect(ok(parseSglangMetrics(stage(0, 4) + stage(1, 5))).ranks[0]).toMatchObject({ running: 5, waiting: 2 });
    expect(ok(parseSglangMetrics("sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\n")).ranks).toEqual([{ rank: 0, model: null, running: 1, waiting: 0, kvUsage: null, activeTokens: null }]);
    expect(parseSglangMetrics('sglang:num_running_reqs{dp_rank="x"} 1\nsglang:num_queue_reqs{dp_rank="x"} 0\n')).toMatchObject({ ok: false, problem: { kind: "shape" } });
  });
});

describe("parseVllmMetrics", () => {
  it("reads V1's page per engine (DP rank), the current KV-usage name, and the total", () => {
    const r = ok(parseVllmMetrics(VLLM_V1_DP2));
    expect(r.engine).toBe("vllm");
    expect(r.ranks).toEqual([
      { rank: 0, model: "Qwen/Qwen3-0.6B", running: 3, waiting: 0, kvUsage: 0.1171875, activeTokens: null },
      { rank: 1, model: "Qwen/Qwen3-0.6B", running: 5, waiting: 2, kvUsage: 0.4296875, activeTokens: null },
    ]);
    expect(r.total).toEqual({ running: 8, waiting: 2, kvUsage: (0.1171875 + 0.4296875) / 2, activeTokens: null });
  });

  it("reads V0's page (no engine label: rank 0; KV usage under its old name)", () => {
    const r = ok(parseVllmMetrics(VLLM_V0));
    expect(r.ranks).toEqual([{ rank: 0, model: "meta-llama/Llama-3.1-8B-Instruct", running: 2, waiting: 1, kvUsage: 0.25, activeTokens: null }]);
  });

  it("prefers kv_cache_usage_perc to the deprecated name when both are served, and falls back to the old one", () => {
    const both = 'vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_waiting{engine="0"} 0\nvllm:gpu_cache_usage_perc{engine="0"} 0.9\nvllm:kv_cache_usage_perc{engine="0"} 0.3\n';
    expect(ok(parseVllmMetrics(both)).ranks[0]!.kvUsage).toBe(0.3);
    expect(ok(parseVllmMetrics(both.replace("0.3", "NaN"))).ranks[0]!.kvUsage).toBe(0.9);
  });

  it("a KV usage that is NaN, infinite or outside [0, 1] is not reported; no KV series at all is null", () => {
    for (const v of ["NaN", "+Inf", "-Inf", "1.5", "-0.1"]) {
      const r = ok(parseVllmMetrics(`vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc ${v}\n`));
      expect(r.ranks[0]!.kvUsage, v).toBeNull();
      expect(r.total.kvUsage, v).toBeNull();
    }
    expect(ok(parseVllmMetrics("vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n")).ranks[0]!.kvUsage).toBeNull();
  });

  it("a count that is NaN, infinite or negative is a value problem", () => {
    for (const v of ["NaN", "+Inf", "-1"]) {
      const p = parseVllmMetrics(`vllm:num_requests_running{engine="0"} ${v}\nvllm:num_requests_waiting{engine="0"} 0\n`);
      expect(p.ok ? "ok" : p.problem.kind, v).toBe("value");
    }
    const p = parseVllmMetrics('vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_waiting{engine="0"} -2\n');
    expect(p.ok ? "ok" : p.problem.message).toContain("vllm:num_requests_waiting is -2");
  });

  it("several models: all by default, one with `model`, a model not served is missing", () => {
    const text = ['vllm:num_requests_running{model_name="b",engine="0"} 4', 'vllm:num_requests_waiting{model_name="b",engine="0"} 1', 'vllm:num_requests_running{model_name="a",engine="0"} 2', 'vllm:num_requests_waiting{model_name="a",engine="0"} 0', ""].join("\n");
    const all = ok(parseVllmMetrics(text));
    expect(all.ranks.map((r) => [r.model, r.running])).toEqual([["a", 2], ["b", 4]]);
    expect(all.total.running).toBe(6);
    expect(ok(parseVllmMetrics(text, { model: "b" })).ranks).toEqual([{ rank: 0, model: "b", running: 4, waiting: 1, kvUsage: null, activeTokens: null }]);
    const none = parseVllmMetrics(text, { model: "c" });
    expect(none.ok ? "ok" : `${none.problem.kind}: ${none.problem.message}`).toBe('missing: no vllm:num_requests_running series for model "c"');
  });

  it("reads escaped label values exactly (a model name with quotes and backslashes)", () => {
    const text = 'vllm:num_requests_running{model_name="org/\\"q\\" m\\\\v2",engine="3"} 7.0\nvllm:num_requests_waiting{model_name="org/\\"q\\" m\\\\v2",engine="3"} 1.0\n';
    expect(ok(parseVllmMetrics(text)).ranks[0]).toMatchObject({ rank: 3, model: 'org/"q" m\\v2', running: 7 });
    expect(ok(parseVllmMetrics(text, { model: 'org/"q" m\\v2' })).total.running).toBe(7);
  });

  it("series of one (model, engine) that differ by other labels add up", () => {
    const text = 'vllm:num_requests_running{engine="0",pid="11"} 2\nvllm:num_requests_running{engine="0",pid="12"} 3\nvllm:num_requests_waiting{engine="0",pid="11"} 1\nvllm:num_requests_waiting{engine="0",pid="12"} 0\n';
    expect(ok(parseVllmMetrics(text)).ranks).toEqual([{ rank: 0, model: null, running: 5, waiting: 1, kvUsage: null, activeTokens: null }]);
  });

  it.each([
    ["process_cpu_seconds_total 3.5\n", "missing", "no vllm:num_requests_running series"],
    ["", "missing", "no vllm:num_requests_running series"],
    ['vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="1"} 1\nvllm:num_requests_waiting{engine="0"} 0\n', "missing", 'no vllm:num_requests_waiting{engine="1"}'],
    ['vllm:num_requests_waiting{engine="0"} 1\nvllm:num_requests_running{engine="1"} 1\nvllm:num_requests_waiting{engine="1"} 0\n', "missing", 'no vllm:num_requests_running{engine="0"}'],
    ['vllm:num_requests_running{engine="dp0"} 1\n', "shape", "not a DP rank"],
    ["<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n", "syntax", "line 1"],
    ['{"object":"error","message":"Not Found"}', "syntax", "not Prometheus text"],
  ])("%j is a %s problem", (text, kind, message) => {
    const p = parseVllmMetrics(text);
    if (p.ok) expect.fail("accepted");
    expect(p.problem.kind).toBe(kind);
    expect(p.problem.message).toContain(message);
  });
});

describe("parseTrtllmMetrics", () => {
  it("reads the documented PyTorch-backend row: rank 0, used over max blocks", () => {
    const r = ok(parseTrtllmMetrics(TRTLLM_PYTORCH));
    expect(r.engine).toBe("trtllm");
    expect(r.ranks).toEqual([{ rank: 0, model: null, running: 1, waiting: 0, kvUsage: 3 / 101256, activeTokens: null }]);
    expect(r.total).toEqual({ running: 1, waiting: 0, kvUsage: 3 / 101256, activeTokens: null });
  });

  it("statistics past the JSON bounds (600,000 small rows, a list of 100,001 numbers, 5 lists of 100,000, a row of 1,025 members) are a shape problem before JSON.parse reads them; 10,000 of the documented rows are read", () => {
    const lists = Array.from({ length: 6 }, () => `[${Array.from({ length: 100_000 }, () => "{}").join(",")}]`);
    const many = parseTrtllmMetrics(`[${lists.join(",")}]`);
    if (many.ok) expect.fail("accepted");
    expect(many.problem).toEqual({ kind: "shape", message: "the answer has more than 500000 objects, arrays and members" });
    // A list of numbers is one array to those counts: its length is bounded too, and so is an object's.
    expect(parseTrtllmMetrics(`[${"0,".repeat(100_000)}0]`)).toMatchObject({ ok: false, problem: { kind: "shape", message: "the answer has a list of more than 100000 elements" } });
    const zeros = (lists: number) => `[${Array.from({ length: lists }, () => `[${"0,".repeat(99_999)}0]`).join(",")}]`;
    expect(parseTrtllmMetrics(zeros(5))).toMatchObject({ ok: false, problem: { kind: "shape", message: "the answer has more than 500000 list elements in all" } });
    expect(parseTrtllmMetrics(zeros(4))).toMatchObject({ ok: false, problem: { kind: "shape", message: "row 0 is not an object" } });
    const rows = JSON.parse(TRTLLM_PYTORCH) as Record<string, unknown>[];
    const own = Object.keys(rows[0]!).length;
    const wide = (n: number) => JSON.stringify([{ ...rows[0], ...Object.fromEntries(Array.from({ length: n - own }, (_, i) => [`extra${i}`, i])) }]);
    expect(parseTrtllmMetrics(wide(1025))).toMatchObject({ ok: false, problem: { kind: "shape", message: "the answer has an object of more than 1024 members" } });
    expect(ok(parseTrtllmMetrics(wide(1024))).ranks).toHaveLength(1);
    expect(ok(parseTrtllmMetrics(JSON.stringify(Array.from({ length: 10_000 }, () => rows[0])))).ranks).toHaveLength(1);
  });

  it("attention DP: each rank's newest row (the list is oldest first)", () => {
    const r = ok(parseTrtllmMetrics(TRTLLM_ADP));
    expect(r.ranks).toEqual([
      { rank: 0, model: null, running: 13, waiting: 1, kvUsage: 1236 / 35540, activeTokens: null },
      { rank: 1, model: null, running: 10, waiting: 3, kvUsage: 1007 / 35540, activeTokens: null },
    ]);
    expect(r.total.running).toBe(23);
    expect(r.total.waiting).toBe(4);
    // Reversed, the older rows would win: the order is what decides.
    const reversed = ok(parseTrtllmMetrics(`[${[...TRTLLM_ADP_ROWS].reverse().join(",")}]`));
    expect(reversed.ranks.map((x) => x.running)).toEqual([12, 9]);
  });

  it("an empty list is an idle engine: no ranks, nothing running", () => {
    expect(ok(parseTrtllmMetrics("[]"))).toEqual({ engine: "trtllm", ranks: [], total: { running: 0, waiting: 0, kvUsage: null, activeTokens: null } });
  });

  it("reads WorkerLoadReport rows (rank from the worker id) with their active tokens", () => {
    const r = ok(parseTrtllmMetrics(WORKER_LOAD_REPORTS));
    expect(r.ranks).toEqual([
      { rank: 0, model: null, running: 7, waiting: 1, kvUsage: null, activeTokens: 9120 },
      { rank: 1, model: null, running: 4, waiting: 0, kvUsage: null, activeTokens: 5312 },
    ]);
    expect(r.total.activeTokens).toBe(14432);
    // One object alone; 0 tokens from a reporter that does not measure them, with requests running, is unknown.
    const single = ok(parseTrtllmMetrics('{"worker_id":"w","namespace":"ctx","seq":1,"num_active_requests":3,"num_queued_requests":0,"max_batch_size":64,"num_active_tokens":0}'));
    expect(single.ranks).toEqual([{ rank: 0, model: null, running: 3, waiting: 0, kvUsage: null, activeTokens: null }]);
    expect(single.total.activeTokens).toBeNull();
    const idle = ok(parseTrtllmMetrics('{"worker_id":"w","num_active_requests":0,"num_active_tokens":0}'));
    expect(idle.ranks[0]!.activeTokens).toBe(0);
  });

  it("rows an older server encoded twice (a list of JSON strings) are read", () => {
    expect(ok(parseTrtllmMetrics(JSON.stringify(TRTLLM_ADP_ROWS))).total.running).toBe(23);
  });

  it("KV usage from max minus free when used is absent; null without max blocks", () => {
    expect(ok(parseTrtllmMetrics('[{"numActiveRequests":1,"kvCacheStats":{"maxNumBlocks":100,"freeNumBlocks":75}}]')).ranks[0]!.kvUsage).toBe(0.25);
    expect(ok(parseTrtllmMetrics('[{"numActiveRequests":1,"kvCacheStats":{"maxNumBlocks":0,"usedNumBlocks":0}}]')).ranks[0]!.kvUsage).toBeNull();
    expect(ok(parseTrtllmMetrics('[{"numActiveRequests":1,"kvCacheStats":null}]')).ranks[0]!.kvUsage).toBeNull();
  });

  it.each([
    ["<html>Internal Server Error</html>", "syntax", "not JSON"],
    ["", "syntax", "not JSON"],
    ['{"detail":"Not Found"}', "missing", "neither numActiveRequests"],
    ["[1,2]", "shape", "row 0 is not an object"],
    ['["not json"]', "shape", "row 0 is a string"],
    ['[{"numActiveRequests":-1}]', "value", "numActiveRequests"],
    ['[{"numActiveRequests":"3"}]', "value", "numActiveRequests"],
    ['[{"numActiveRequests":1.5}]', "value", "numActiveRequests"],
    ['[{"numActiveRequests":1,"numQueuedRequests":null,"attentionDpRank":"x"}]', "shape", "rank"],
    ['[{"numActiveRequests":1,"numQueuedRequests":-4}]', "value", "numQueuedRequests"],
    ['[{"num_active_requests":1,"num_active_tokens":-1}]', "value", "num_active_tokens"],
    ["null", "shape", "not an object"],
  ])("%j is a %s problem", (body, kind, message) => {
    const p = parseTrtllmMetrics(body);
    if (p.ok) expect.fail("accepted");
    expect(p.problem.kind).toBe(kind);
    expect(p.problem.message).toContain(message);
  });

  it("never throws, whatever the JSON", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 3 }), (value) => {
        expect(typeof parseTrtllmMetrics(JSON.stringify(value)).ok).toBe("boolean");
        expect(typeof parseTrtllmMetrics(value).ok).toBe("boolean");
      }),
      { numRuns: 1000, seed: 7 },
    );
  });
});

describe("dpRankStateFromLoad (one DP rank of an engine, for phase 2)", () => {
  const rank = (r: number, model: string | null, running: number, waiting: number, activeTokens: number | null) => ({ rank: r, model, running, waiting, kvUsage: null, activeTokens });
  const report = (ranks: ReturnType<typeof rank>[]): EngineLoadReport => ({ engine: "vllm", ranks, total: { running: 99, waiting: 99, kvUsage: null, activeTokens: null } });

  it("reads only that rank's entries (summed over its models), never the engine's total, by the same rules", () => {
    const r = report([rank(0, "a", 1, 0, null), rank(1, "a", 3, 2, null), rank(1, "b", 1, 0, null), rank(2, null, 0, 0, 700)]);
    expect(dpRankStateFromLoad({ inFlight: 2, inFlightTokens: 200 }, r, 1)).toEqual({ numActiveRequests: 6, numActiveTokens: 200 + 4 * 100 });
    expect(dpRankStateFromLoad({ inFlight: 0, inFlightTokens: 0 }, r, 2)).toEqual({ numActiveRequests: 0, numActiveTokens: 700 });
    // A rank the report does not name, or no report: the own counts stand.
    expect(dpRankStateFromLoad({ inFlight: 3, inFlightTokens: 30 }, r, 5)).toEqual({ numActiveRequests: 3, numActiveTokens: 30 });
    expect(dpRankStateFromLoad({ inFlight: 3, inFlightTokens: 30 }, null, 0)).toEqual({ numActiveRequests: 3, numActiveTokens: 30 });
    // Tokens reported by one of a rank's models only: a partial sum would understate, so none is taken.
    expect(dpRankStateFromLoad({ inFlight: 0, inFlightTokens: 0 }, report([rank(0, "a", 2, 0, 500), rank(0, "b", 1, 0, null)]), 0, { tokensPerRequest: 10 })).toEqual({ numActiveRequests: 3, numActiveTokens: 30 });
  });
});

describe("rankStateFromLoad", () => {
  const vllm = (running: number, waiting: number): EngineLoadReport => ({ engine: "vllm", ranks: [], total: { running, waiting, kvUsage: null, activeTokens: null } });
  const withTokens = (running: number, activeTokens: number): EngineLoadReport => ({ engine: "trtllm", ranks: [], total: { running, waiting: 0, kvUsage: null, activeTokens } });

  it("without a report the gateway's own counts stand", () => {
    expect(rankStateFromLoad({ inFlight: 3, inFlightTokens: 450 }, null)).toEqual({ numActiveRequests: 3, numActiveTokens: 450 });
  });

  it("requests: the larger of own in flight and the engine's running + waiting", () => {
    // Traffic from elsewhere: the engine has more than the gateway sent.
    expect(rankStateFromLoad({ inFlight: 2, inFlightTokens: 200 }, vllm(3, 2)).numActiveRequests).toBe(5);
    // Placed since the scrape: the gateway knows of more than the engine said.
    expect(rankStateFromLoad({ inFlight: 6, inFlightTokens: 600 }, vllm(3, 1))).toEqual({ numActiveRequests: 6, numActiveTokens: 600 });
  });

  it("tokens without an engine count: own tokens plus the extra requests at the gateway's mean prompt there", () => {
    expect(rankStateFromLoad({ inFlight: 2, inFlightTokens: 200 }, vllm(3, 2)).numActiveTokens).toBe(200 + 3 * 100);
    // Nothing of its own there to average: tokensPerRequest, else nothing added.
    expect(rankStateFromLoad({ inFlight: 0, inFlightTokens: 0 }, vllm(4, 0), { tokensPerRequest: 512 })).toEqual({ numActiveRequests: 4, numActiveTokens: 2048 });
    expect(rankStateFromLoad({ inFlight: 0, inFlightTokens: 0 }, vllm(4, 0))).toEqual({ numActiveRequests: 4, numActiveTokens: 0 });
  });

  it("tokens with an engine count: the larger of own and the engine's, brought to the gateway's unit", () => {
    expect(rankStateFromLoad({ inFlight: 1, inFlightTokens: 100 }, withTokens(5, 2_000)).numActiveTokens).toBe(2_000);
    expect(rankStateFromLoad({ inFlight: 1, inFlightTokens: 100 }, withTokens(5, 2_000), { tokenScale: 4 }).numActiveTokens).toBe(8_000);
    expect(rankStateFromLoad({ inFlight: 9, inFlightTokens: 9_000 }, withTokens(5, 2_000)).numActiveTokens).toBe(9_000);
  });

  it("is deterministic, integral and within what the router accepts, whatever it is given", () => {
    const huge: EngineLoadReport = { engine: "vllm", ranks: [], total: { running: 1e15, waiting: 1e15, kvUsage: null, activeTokens: null } };
    const states = [
      rankStateFromLoad({ inFlight: -3, inFlightTokens: Number.NaN }, null),
      rankStateFromLoad({ inFlight: 1, inFlightTokens: 1e300 }, huge),
      rankStateFromLoad({ inFlight: 2.7, inFlightTokens: 10.2 }, vllm(1, 0), { tokenScale: -1, tokensPerRequest: Number.POSITIVE_INFINITY }),
    ];
    expect(states[0]).toEqual({ numActiveRequests: 0, numActiveTokens: 0 });
    expect(states[2]).toEqual({ numActiveRequests: 2, numActiveTokens: 10 });
    expect(rankStateFromLoad({ inFlight: 2, inFlightTokens: 200 }, vllm(3, 2))).toEqual(rankStateFromLoad({ inFlight: 2, inFlightTokens: 200 }, vllm(3, 2)));
    // The router itself takes them.
    const router = createRouter({ numRanks: 3 });
    expect(() => router.route({ rankStates: states, maxNumActiveRequests: 2 ** 30, requests: [{ id: 1, tokens: [1, 2, 3] }] })).not.toThrow();
  });
});

// ---------------------------------------------------------------------------
// The scraper against fake engines on loopback.

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** A fake engine answering with `answer`, closed after the test. */
async function engine(answer: FakeAnswer | ((index: number) => FakeAnswer)): Promise<FakeLoadEngine> {
  const e = await startFakeLoadEngine((_, i) => (typeof answer === "function" ? answer(i) : answer));
  open.push(e);
  return e;
}

/** A scraper over `options`, closed after the test. */
function scraper(options: EngineLoadScraperOptions): EngineLoadScraper {
  const s = new EngineLoadScraper(options);
  open.push(s);
  return s;
}

/** `o` as a failure (fails the test otherwise). */
function failed(o: ScrapeOutcome) {
  if (o.kind !== "failed") expect.fail(`expected a failure, got ${JSON.stringify(o)}`);
  return o;
}

describe("EngineLoadScraper", () => {
  it("scrapes vLLM's page under the upstream's path, with the key as bearer and Prometheus' Accept", async () => {
    const e = await engine({ body: VLLM_V1_DP2 });
    const s = scraper({ baseUrl: `${e.url}/engine-a/`, engine: "vllm", intervalMs: 1_000, apiKey: "sk-engine-1" });
    const outcome = await s.scrapeNow();
    expect(outcome.kind).toBe("ok");
    expect(s.report?.total).toEqual({ running: 8, waiting: 2, kvUsage: (0.1171875 + 0.4296875) / 2, activeTokens: null });
    expect(e.received[0]!.path).toBe("/engine-a/metrics");
    expect(e.received[0]!.headers.authorization).toBe("Bearer sk-engine-1");
    expect(e.received[0]!.headers.accept).toContain("text/plain");
    expect(s.counts).toEqual({ ok: 1, failed: 0, unparseable: 0 });
    expect(s.lastError).toBeNull();
  });

  it("reads a page of 100,000 other series a step at a time, and the four gauges after them", async () => {
    const other = Array.from({ length: 100_000 }, (_, i) => `vllm:other_total{engine="0",i="${i}"} ${i}`).join("\n");
    const e = await engine({ body: `${other}\n${VLLM_V1_DP2}` });
    const s = scraper({ baseUrl: e.url, engine: "vllm", intervalMs: 1_000 });
    let ticks = 0;
    let ticking = true;
    const tick = () => {
      ticks++;
      if (ticking) setImmediate(tick);
    };
    setImmediate(tick);
    const outcome = await s.scrapeNow();
    ticking = false;
    expect(outcome.kind).toBe("ok");
    expect(s.report?.total).toEqual({ running: 8, waiting: 2, kvUsage: (0.1171875 + 0.4296875) / 2, activeTokens: null });
    // Each step of the parse is its own turn of the event loop (one turn for the whole page before).
    expect(ticks).toBeGreaterThan(100_000 / PAGE_STEP_LINES);
  });

  it("scrapes trtllm-serve's JSON, and reads only the configured model of a vLLM page", async () => {
    const t = await engine({ body: TRTLLM_ADP, contentType: "application/json" });
    const st = scraper({ baseUrl: t.url, engine: "trtllm", intervalMs: 1_000 });
    expect((await st.scrapeNow()).kind).toBe("ok");
    expect(st.report?.ranks.map((r) => [r.rank, r.running, r.waiting])).toEqual([[0, 13, 1], [1, 10, 3]]);
    expect(t.received[0]!.headers.authorization).toBeUndefined();
    const v = await engine({ body: VLLM_V1_DP2 });
    const sv = scraper({ baseUrl: v.url, engine: "vllm", intervalMs: 1_000, model: "another-model" });
    const o = await sv.scrapeNow();
    expect(o.kind === "unparseable" ? o.problem.kind : o.kind).toBe("missing");
  });

  it("a refused connection, a 500 and garbage are counted, never thrown, and the last report stays", async () => {
    const e = await engine((i) => (i === 0 ? { body: VLLM_V0 } : i === 1 ? { status: 500, body: "Internal Server Error" } : { body: "<html>hello</html>" }));
    const s = scraper({ baseUrl: e.url, engine: "vllm", intervalMs: 1_000 });
    expect((await s.scrapeNow()).kind).toBe("ok");
    const status = failed(await s.scrapeNow());
    expect(status.reason).toBe("status");
    expect(status.message).toBe(`${e.url}/metrics: HTTP 500`);
    const garbage = await s.scrapeNow();
    expect(garbage.kind).toBe("unparseable");
    expect(s.counts).toEqual({ ok: 1, failed: 1, unparseable: 1 });
    expect(s.consecutiveFailures).toBe(2);
    expect(s.lastError).toContain("unparseable (syntax)");
    expect(s.report?.total.running).toBe(2); // the last good one

    const port = await closedPort();
    const refused = scraper({ baseUrl: `http://127.0.0.1:${port}`, engine: "trtllm", intervalMs: 1_000 });
    const r = failed(await refused.scrapeNow());
    expect(r.reason).toBe("connect");
    expect(r.message).toContain(`http://127.0.0.1:${port}/metrics: `);
    expect(r.message).toContain("ECONNREFUSED");
    expect(refused.report).toBeNull();
    expect(refused.fresh(60_000)).toBe(false);
  });

  it("a slow engine times out (and is hung up on); an endless body is cut at the deadline", async () => {
    const slow = await engine({ body: VLLM_V0, delayMs: 10_000 });
    const s = scraper({ baseUrl: slow.url, engine: "vllm", intervalMs: 1_000, timeoutMs: 200 });
    const started = Date.now();
    const o = failed(await s.scrapeNow());
    expect(o.reason).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(5_000);
    await waitFor(() => slow.aborted === 1, () => `aborted ${slow.aborted}`);

    const endless = await engine({ body: "", chunkBytes: 64, dripMs: 20, endless: true });
    const s2 = scraper({ baseUrl: endless.url, engine: "vllm", intervalMs: 1_000, timeoutMs: 300 });
    expect(failed(await s2.scrapeNow()).reason).toBe("timeout");
    expect(s2.counts.failed).toBe(1);
  });

  it("a body over the cap fails, whether its length is declared or not", async () => {
    const big = "x".repeat(10_000);
    const declared = await engine({ body: big });
    const s = scraper({ baseUrl: declared.url, engine: "vllm", intervalMs: 1_000, maxBodyBytes: 4_096 });
    expect(failed(await s.scrapeNow()).reason).toBe("too_large");
    const chunked = await engine({ body: big, chunkBytes: 1_000 });
    const s2 = scraper({ baseUrl: chunked.url, engine: "vllm", intervalMs: 1_000, maxBodyBytes: 4_096 });
    const o = failed(await s2.scrapeNow());
    expect(o.reason).toBe("too_large");
    expect(o.message).toContain("4096-byte cap");
  });

  it("messages hold no userinfo, query or key; URL userinfo is never sent", async () => {
    const e = await engine({ status: 401, body: '{"error":"bad key"}', contentType: "application/json" });
    const key = "sk-very-secret-123";
    const s = scraper({ baseUrl: `${e.url.replace("http://", "http://admin:pa55word@")}/prefix?token=qwerty`, engine: "vllm", intervalMs: 1_000, apiKey: key });
    const o = failed(await s.scrapeNow());
    expect(o.reason).toBe("status");
    for (const text of [o.message, s.lastError!, s.url]) {
      expect(text).not.toContain("admin");
      expect(text).not.toContain("pa55word");
      expect(text).not.toContain("qwerty");
      expect(text).not.toContain(key);
    }
    expect(s.url).toBe(`${e.url}/prefix/metrics`);
    expect(e.received[0]!.path).toBe("/prefix/metrics");
    expect(e.received[0]!.headers.authorization).toBe(`Bearer ${key}`);
  });

  it("freshness follows the injected clock: a report is fresh up to maxAgeMs, failures do not refresh it", async () => {
    const e = await engine((i) => (i === 1 ? { status: 503 } : { body: VLLM_V0 }));
    const clock = { t: 1_000 };
    const s = scraper({ baseUrl: e.url, engine: "vllm", intervalMs: 1_000, now: () => clock.t });
    expect(s.fresh(3_000)).toBe(false);
    expect(s.current(3_000)).toBeNull();
    await s.scrapeNow();
    expect(s.receivedAt).toBe(1_000);
    clock.t = 4_000;
    expect(s.fresh(3_000)).toBe(true);
    expect(s.current(3_000)?.total.running).toBe(2);
    clock.t = 4_001;
    expect(s.fresh(3_000)).toBe(false); // TensorRT-LLM's load_suspend_s: older than 3 s is out
    expect(s.current(3_000)).toBeNull();
    expect((await s.scrapeNow()).kind).toBe("failed"); // the 503
    expect(s.fresh(3_000)).toBe(false);
    expect(s.receivedAt).toBe(1_000);
    clock.t = 5_000;
    await s.scrapeNow();
    expect(s.receivedAt).toBe(5_000);
    expect(s.fresh(3_000)).toBe(true);
  });

  it("polls on its interval without ever overlapping a slow engine; scrapeNow joins the scrape under way", async () => {
    const e = await engine({ body: VLLM_V0, delayMs: 120 });
    const outcomes: ScrapeOutcome[] = [];
    const s = scraper({ baseUrl: e.url, engine: "vllm", intervalMs: 5, onScrape: (o) => {
      outcomes.push(o);
      throw new Error("a callback's failure must not stop the polling");
    } });
    s.start();
    s.start(); // a second start does nothing
    await waitFor(() => s.polling, () => "no scrape started");
    const a = s.scrapeNow();
    const b = s.scrapeNow();
    expect(a).toBe(b);
    await waitFor(() => outcomes.length >= 4, () => `${outcomes.length} scrapes`, 10_000);
    expect(e.maxActive).toBe(1);
    expect(outcomes.every((o) => o.kind === "ok")).toBe(true);
    expect(e.received.length).toBeLessThanOrEqual(outcomes.length + 1);
    await s.close();
    const seen = e.received.length;
    await new Promise((r) => setTimeout(r, 100));
    expect(e.received.length).toBe(seen); // nothing after close
    expect((await s.scrapeNow()).kind).toBe("closed");
  });

  it("close() closes an idle keep-alive connection, aborts and awaits a scrape under way, and leaves no timer or socket", async () => {
    // Counts of sockets, servers and timers; other tests' resources may still be going away, so "no more than before".
    const kinds = ["TCPSocketWrap", "TCPServerWrap", "Timeout"];
    const census = () => kinds.map((k) => process.getActiveResourcesInfo().filter((r) => r === k).length);
    const noMoreThan = (base: number[]) => census().every((n, i) => n <= base[i]!);
    await new Promise((r) => setTimeout(r, 50));
    const before = census();
    const e = await startFakeLoadEngine((_, i) => (i < 3 ? { body: VLLM_V0 } : { body: VLLM_V0, delayMs: 30_000 }));
    const withEngine = census();

    // Idle between scrapes, on a kept-alive connection (undici would keep it 4 s): close() ends it at once.
    const idle = new EngineLoadScraper({ baseUrl: e.url, engine: "vllm", intervalMs: 60_000 });
    idle.start();
    await waitFor(() => idle.counts.ok === 1, () => "no scrape");
    expect(census()[0]).toBeGreaterThan(withEngine[0]!); // the connection, both ends
    await idle.close();
    await waitFor(() => noMoreThan(withEngine), () => `${kinds.join("/")}: ${census().join("/")} now, ${withEngine.join("/")} with the engine alone`, 2_000);

    // Mid-scrape against an engine that answers in 30 s (and a deadline later still: only close() can end it soon).
    const s = new EngineLoadScraper({ baseUrl: e.url, engine: "vllm", intervalMs: 10, timeoutMs: 60_000 });
    s.start();
    await waitFor(() => e.received.length >= 4 && s.polling, () => `${e.received.length} requests`);
    const started = Date.now();
    await s.close();
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(s.polling).toBe(false);
    expect(s.counts).toEqual({ ok: 2, failed: 0, unparseable: 0 });
    await s.close(); // twice is fine
    await waitFor(() => e.aborted === 1, () => `aborted ${e.aborted}`);
    await e.close();
    await waitFor(() => noMoreThan(before), () => `${kinds.join("/")}: ${census().join("/")} now, ${before.join("/")} before`);
  });

  it("a process whose scraper was closed exits by itself", async () => {
    const { build } = await import("esbuild");
    const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
    const child = `
      import { createServer } from "node:http";
      import { EngineLoadScraper } from "./gateway/src/load/engine-load.ts";
      (async () => {
        const server = createServer((req, res) => res.end('vllm:num_requests_running 1\\nvllm:num_requests_waiting 0\\n'));
        await new Promise((r) => server.listen(0, "127.0.0.1", () => r(undefined)));
        const { port } = server.address() as { port: number };
        const s = new EngineLoadScraper({ baseUrl: "http://127.0.0.1:" + port, engine: "vllm", intervalMs: 10 });
        s.start();
        server.unref(); // only the scraper may keep this process alive
        while (s.counts.ok < 3) await new Promise((r) => setTimeout(r, 10));
        await s.close();
        await new Promise((r) => setTimeout(r, 200));
        const left = process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap" || r === "Timeout");
        console.log(JSON.stringify({ ok: s.counts.ok, left }));
      })();
    `;
    const out = await build({ stdin: { contents: child, resolveDir: root, sourcefile: "child.ts", loader: "ts" }, bundle: true, platform: "node", format: "esm", target: "node20", write: false, logLevel: "silent" });
    const dir = mkdtempSync(path.join(tmpdir(), "engine-load-"));
    try {
      const file = path.join(dir, "child.mjs");
      writeFileSync(file, out.outputFiles[0]!.text);
      const proc = spawn(process.execPath, [file], { stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      proc.stdout.on("data", (d) => (stdout += d));
      proc.stderr.on("data", (d) => (stderr += d));
      const code = await new Promise<number | string>((resolve) => {
        const killer = setTimeout(() => {
          proc.kill("SIGKILL");
          resolve("did not exit within 20 s");
        }, 20_000);
        proc.on("exit", (c) => {
          clearTimeout(killer);
          resolve(c ?? "signal");
        });
      });
      expect(code, stderr).toBe(0);
      const report = JSON.parse(stdout) as { ok: number; left: string[] };
      expect(report.ok).toBeGreaterThanOrEqual(3);
      expect(report.left).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses options that cannot work", () => {
    expect(() => new EngineLoadScraper({ baseUrl: "localhost:8000", engine: "vllm", intervalMs: 1 })).toThrow(TypeError);
    expect(() => new EngineLoadScraper({ baseUrl: "ftp://h/", engine: "vllm", intervalMs: 1 })).toThrow(TypeError);
    expect(() => new EngineLoadScraper({ baseUrl: "http://h/", engine: "tgi" as "vllm", intervalMs: 1 })).toThrow(TypeError);
    expect(() => new EngineLoadScraper({ baseUrl: "http://h/", engine: "vllm", intervalMs: 1, path: "metrics" })).toThrow(TypeError);
    expect(() => new EngineLoadScraper({ baseUrl: "http://h/", engine: "vllm", intervalMs: 1, path: "/metrics?key=1" })).toThrow(TypeError);
    expect(() => new EngineLoadScraper({ baseUrl: "http://h/", engine: "vllm", intervalMs: 0 })).toThrow(RangeError);
    expect(() => new EngineLoadScraper({ baseUrl: "http://h/", engine: "vllm", intervalMs: 10, timeoutMs: Number.NaN })).toThrow(RangeError);
  });
});
