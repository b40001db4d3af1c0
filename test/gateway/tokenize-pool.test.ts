// Tokenizing off the event loop: the worker pool behind a Hugging Face
// tokenizer (gateway/src/tokenizers/tokenize-pool.ts, request-reader.ts) gives the ids and
// routing fields the same tokenizer gives inline; the prompt bounds refuse
// what is too long, inline and pooled; a full queue sheds (429), a job past
// timeout_ms is answered 503 and its worker replaced, a job whose client left
// is dropped, and the main thread keeps running while a worker grinds. The
// workers run the built dist/tokenize-worker.js (npm test's pretest builds it).
import { cpSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { GatewayConfigError, loadGatewayConfig } from "../../gateway/src/config/config.js";
import { HttpError, readRequest, type PromptLimits, type RoutedRequest } from "../../gateway/src/requests/openai.js";
import { createRequestReader, type RequestReader } from "../../gateway/src/requests/request-reader.js";
import { preferredWorker } from "../../gateway/src/requests/tokenize-pool.js";
import { loadHuggingFaceTokenizer, TokenizerLoadError } from "../../gateway/src/tokenizers/tokenizer-loading.js";
import type { TokenizerSettings } from "../../gateway/src/config/tokenizer-settings.js";
import { Utf8ByteTokenizer } from "../../gateway/src/tokenizers/tokenizer.js";
import qwenReference from "../fixtures/tokenizers/qwen2.5/reference.json" with { type: "json" };

const QWEN = path.resolve("test/fixtures/tokenizers/qwen2.5");
const NO_LIMITS: PromptLimits = { maxPromptChars: Infinity, maxPromptTokens: Infinity };
const LORA = new Map([["m-lora", 7]]);
/** Spaces the Qwen BPE takes about a second over (one pre-tokenized word: merged quadratically). */
const SLOW_SPACES = 150_000;

const open: RequestReader[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()!.close();
});

/** A reader (closed after the test). */
async function reader(settings: TokenizerSettings, limits: PromptLimits = NO_LIMITS): Promise<RequestReader> {
  const r = await createRequestReader({ settings, limits, loraAdapters: LORA });
  open.push(r);
  return r;
}

/** A pooled Qwen reader with `workers` workers. */
const pooled = (workers: number, more: { queueSize?: number; timeoutMs?: number } = {}, limits?: PromptLimits) => reader({ kind: "huggingface", path: QWEN, workers, ...more }, limits);

/** A JSON body as the gateway receives it. */
const body = (b: unknown) => Buffer.from(JSON.stringify(b));
/** A chat of one user message. */
const chat = (content: string, extra: Record<string, unknown> = {}) => body({ model: "m", messages: [{ role: "user", content }], ...extra });

/** The HttpError `p` rejects with (fails the test if it resolves or rejects otherwise). */
async function refusal(p: Promise<unknown>): Promise<HttpError> {
  const outcome = await p.then(
    () => null,
    (error: unknown) => error,
  );
  if (!(outcome instanceof HttpError)) throw new Error(`expected an HttpError, got ${outcome === null ? "a result" : String(outcome)}`);
  return outcome;
}

/** A request with its ids as a plain array, to compare. */
const plain = (r: RoutedRequest) => ({ ...r, tokens: Array.from(r.tokens) });

describe("the pooled reader reads as the inline tokenizer does", () => {
  it("the same ids and routing fields for chats and completions, read concurrently on two workers", async () => {
    const r = await pooled(2);
    expect(r.tokenizerName).toBe("huggingface:qwen2.5");
    const inline = loadHuggingFaceTokenizer(QWEN);
    const cases = qwenReference.cases.filter((c) => !("error" in c) || c.error === undefined);
    expect(cases.length).toBeGreaterThan(20);
    const headers = { "x-session-id": "s-1", "x-trtllm-subagent-affinity-id": "agent-2" };
    const reads = cases.map((c, i) => {
      const raw = body({ model: i % 2 === 0 ? "m-lora" : "m", stream: i % 3 === 0, cache_salt: `salt-${i}`, ...(i % 4 === 0 ? { conversation_params: { conversation_id: `c-${i}` } } : {}), ...c.request });
      return { c, raw, kind: c.kind as "chat" | "completion", pooled: r.read(c.kind as "chat" | "completion", raw, headers) };
    });
    for (const { c, raw, kind, pooled: p } of reads) {
      const got = plain(await p);
      expect(got.tokens).toEqual(c.ids);
      expect(got).toEqual(plain(readRequest(kind, raw, headers, inline, LORA)));
    }
    expect(r.stats()).toMatchObject({ workers: 2, busy: 0, queued: 0, completed: cases.length, refused: 0, shed: 0, crashed: 0 });
    // Both workers took jobs' preferences into account, and the hash spreads these bodies over both.
    expect(new Set(reads.map((x) => preferredWorker(x.kind, x.raw, 2))).size).toBe(2);
  });

  it("a body readRequest refuses comes back as the same HttpError", async () => {
    const r = await pooled(1);
    const inlineReader = await reader({ kind: "huggingface", path: QWEN, workers: 0 });
    // Refused by the chat template's checks (TokenizerRequestError), so by the worker's tokenizer.
    const refused = chat("hi", { tools: "not a list" });
    const inline = await refusal(inlineReader.read("chat", refused, {}));
    const fromWorker = await refusal(r.read("chat", refused, {}));
    expect(fromWorker).toBeInstanceOf(HttpError);
    expect(fromWorker).toMatchObject({ status: 400, message: "tools must be a list", param: "messages" });
    expect({ ...fromWorker, message: fromWorker.message }).toEqual({ ...inline, message: inline.message });
    expect((await refusal(r.read("chat", Buffer.from("{"), {}))).code).toBe("invalid_json");
    expect(r.stats().refused).toBe(2);
  });

  it("prefers a worker by the prompt's first bytes, deterministically", () => {
    const a = chat("the same system prompt and question");
    expect(preferredWorker("chat", a, 8)).toBe(preferredWorker("chat", Buffer.from(a), 8));
    // What comes before the messages key does not move a prompt.
    const b = Buffer.from(JSON.stringify({ model: "other-model", stream: true, messages: [{ role: "user", content: "the same system prompt and question" }] }));
    expect(preferredWorker("chat", b, 8)).toBe(preferredWorker("chat", a, 8));
    const spread = new Set(Array.from({ length: 64 }, (_, i) => preferredWorker("chat", chat(`question ${i}`), 8)));
    expect(spread.size).toBeGreaterThan(4);
  });
});

describe("prompt bounds", () => {
  const limits: PromptLimits = { maxPromptChars: 100, maxPromptTokens: 60 };
  const readers: [string, () => Promise<RequestReader>][] = [
    ["bytes, inline", () => reader({ kind: "bytes" }, limits)],
    ["huggingface, inline (workers: 0)", () => reader({ kind: "huggingface", path: QWEN, workers: 0 }, limits)],
    ["huggingface, pooled", () => pooled(1, {}, limits)],
  ];

  it.each(readers)("%s: 413 past max_prompt_chars, 400 past max_prompt_tokens, the setting and its value named", async (_name, make) => {
    const r = await make();
    const chars = await refusal(r.read("chat", chat("x".repeat(101)), {}));
    expect(chars).toMatchObject({ status: 413, type: "invalid_request_error", code: "prompt_too_large", param: "messages" });
    expect(chars.message).toMatch(/^the prompt is \d+\+ characters, over limits\.max_prompt_chars \(100\)$/);
    // Tools count toward the characters too.
    const tools = await refusal(r.read("chat", chat("hi", { tools: [{ type: "function", function: { name: "f", description: "d".repeat(200) } }] }), {}));
    expect(tools).toMatchObject({ status: 413, code: "prompt_too_large", param: "messages" });
    const prompt = await refusal(r.read("completion", body({ model: "m", prompt: "y".repeat(150) }), {}));
    expect(prompt).toMatchObject({ status: 413, code: "prompt_too_large", param: "prompt" });
    expect(prompt.message).toBe("the prompt is 150+ characters, over limits.max_prompt_chars (100)");
    // 65 digits: under the character bound (93 with the keys and the role), over 60 tokens with either tokenizer (Qwen's takes digits one by one).
    const tokens = await refusal(r.read("chat", chat("1".repeat(65)), {}));
    expect(tokens).toMatchObject({ status: 400, type: "invalid_request_error", code: "context_length_exceeded", param: "messages" });
    expect(tokens.message).toMatch(/^the prompt is \d+ tokens, over limits\.max_prompt_tokens \(60\)$/);
    const ids = await refusal(r.read("completion", body({ model: "m", prompt: Array.from({ length: 61 }, (_, i) => i) }), {}));
    expect(ids).toMatchObject({ status: 400, code: "context_length_exceeded", param: "prompt" });
    expect(ids.message).toBe("the prompt is 61 tokens, over limits.max_prompt_tokens (60)");
    // Within both bounds: read.
    expect((await r.read("completion", body({ model: "m", prompt: Array.from({ length: 60 }, (_, i) => i) }), {})).tokens.length).toBe(60);
    expect((await r.read("chat", chat("hi"), {})).tokens.length).toBeLessThanOrEqual(60);
    expect(r.stats()).toMatchObject({ completed: 2, refused: 5 });
  });

  it("flat messages are counted in one pass exactly as the walk counts them: at the bound read, one past it refused with the walk's count", () => {
    const tok = new Utf8ByteTokenizer();
    const at = { maxPromptChars: 100, maxPromptTokens: Infinity };
    // [{role, content}]: 2 + 1 (the list) + 2 (the object) + 4 + 4 + 4 ("role", "user") + 7 + 4 (the key "content") + its length.
    expect(readRequest("chat", chat("x".repeat(72)), {}, tok, new Map(), at).tokens.length).toBeGreaterThan(72);
    expect(() => readRequest("chat", chat("x".repeat(73)), {}, tok, new Map(), at)).toThrow("the prompt is 101+ characters, over limits.max_prompt_chars (100)");
    // Numbers, booleans and null count at their JSON length, as in the walk; a nested value is the walk's.
    const mixed = (n: number) => body({ model: "m", messages: [{ role: "user", content: "y".repeat(n), name: null, weight: 12.5, flag: true }] });
    // 3 + 2 + 12 (role) + 11 + n (content) + 12 (name: null) + 14 (weight: 12.5) + 12 (flag: true) = 66 + n.
    expect(() => readRequest("chat", mixed(34), {}, tok, new Map(), at)).not.toThrow();
    expect(() => readRequest("chat", mixed(35), {}, tok, new Map(), at)).toThrow("the prompt is 101+ characters");
    const nestedPart = body({ model: "m", messages: [{ role: "user", content: [{ type: "text", text: "z".repeat(80) }] }] });
    expect(() => readRequest("chat", nestedPart, {}, tok, new Map(), at)).toThrow(/the prompt is \d+\+ characters/);
  });

  it("the character count stops at the bound, and a body nested deeper than any template renders is a 400", () => {
    const tok = new Utf8ByteTokenizer();
    // 10,000 messages of 100 characters (about 1.25 million counted in all): the count stops at the messages
    // array itself (10,002: each element costs at least its separator), not at the total.
    const many = body({ model: "m", messages: Array.from({ length: 10_000 }, () => ({ role: "user", content: "z".repeat(100) })) });
    const error = (() => {
      try {
        readRequest("chat", many, {}, tok, new Map(), { maxPromptChars: 1000, maxPromptTokens: Infinity });
      } catch (e) {
        return e as HttpError;
      }
      throw new Error("accepted");
    })();
    expect(error.status).toBe(413);
    const counted = Number(/is (\d+)\+ characters/.exec(error.message)![1]);
    expect(counted).toBeGreaterThan(1000);
    expect(counted).toBeLessThanOrEqual(10_002);
    let deep: unknown = "leaf";
    for (let i = 0; i < 200; i++) deep = [deep];
    const nested = body({ model: "m", messages: [{ role: "user", content: deep }] });
    expect(() => readRequest("chat", nested, {}, tok, new Map(), { maxPromptChars: 1000, maxPromptTokens: Infinity })).toThrow("messages are nested too deeply");
    // Without bounds nothing is counted: the same body reads as before.
    expect(readRequest("chat", nested, {}, tok).tokens.length).toBeGreaterThan(0);
  });
});

describe("shedding, timeouts, dropped jobs", () => {
  it("a full queue answers 429 tokenizer_busy with retry-after; close() answers what waits 503", async () => {
    const r = await pooled(1, { queueSize: 1 });
    const slow = r.read("chat", chat(" ".repeat(SLOW_SPACES)), {});
    const waiting = r.read("chat", chat("next"), {});
    const shed = await refusal(r.read("chat", chat("one too many"), {}));
    expect(shed).toMatchObject({ status: 429, code: "tokenizer_busy", headers: { "retry-after": "1" } });
    expect(shed.message).toContain("tokenizer.queue_size 1");
    expect(r.stats()).toMatchObject({ busy: 1, queued: 1, shed: 1 });
    expect(r.metricLines("adp_gateway_")).toContain('adp_gateway_tokenizer_jobs_total{outcome="shed"} 1');
    expect(r.metricLines("adp_gateway_")).toContain("adp_gateway_tokenizer_queued 1");
    await slow;
    expect((await waiting).tokens.length).toBeGreaterThan(0);
    const again = refusal(r.read("chat", chat(" ".repeat(SLOW_SPACES)), {}));
    const queued = refusal(r.read("chat", chat("queued at close"), {}));
    await r.close();
    expect(await again).toMatchObject({ status: 503, code: "shutting_down" });
    expect(await queued).toMatchObject({ status: 503, code: "shutting_down" });
    expect(await refusal(r.read("chat", chat("after close"), {}))).toMatchObject({ status: 503, code: "shutting_down" });
  });

  it("a job past timeout_ms is answered 503 tokenize_timeout, its worker restarts, and the jobs behind it are read", async () => {
    const r = await pooled(1, { timeoutMs: 50 });
    const slow = r.read("chat", chat(" ".repeat(SLOW_SPACES)), {});
    const behind = r.read("chat", chat("hello"), {});
    const timedOut = await refusal(slow);
    expect(timedOut).toMatchObject({ status: 503, type: "server_error", code: "tokenize_timeout", headers: { "retry-after": "1" } });
    expect(timedOut.message).toContain("tokenizer.timeout_ms (50)");
    const hello = await behind;
    expect(Array.from(hello.tokens)).toEqual(Array.from(loadHuggingFaceTokenizer(QWEN).encodeChat([{ role: "user", content: "hello" }])));
    expect(r.stats()).toMatchObject({ timedOut: 1, restarts: 1, completed: 1 });
    expect((await r.read("completion", body({ model: "m", prompt: "and again" }), {})).tokens.length).toBeGreaterThan(0);
    expect(r.metricLines("p_")).toEqual(expect.arrayContaining(['p_tokenizer_jobs_total{outcome="timeout"} 1', "p_tokenizer_worker_restarts_total 1"]));
  });

  it("a queued job whose client has gone is dropped (499) when its turn comes, not tokenized", async () => {
    const r = await pooled(1);
    const slow = r.read("chat", chat(" ".repeat(SLOW_SPACES)), {});
    const signal = { aborted: false };
    const gone = r.read("chat", chat("the client leaves"), {}, signal);
    const after = r.read("chat", chat("the client stays"), {});
    signal.aborted = true;
    await slow;
    expect(await refusal(gone)).toMatchObject({ status: 499 });
    expect((await after).tokens.length).toBeGreaterThan(0);
    expect(r.stats()).toMatchObject({ completed: 2, dropped: 1 });
    // Already gone when submitted: refused at once.
    expect(await refusal(r.read("chat", chat("x"), {}, { aborted: true }))).toMatchObject({ status: 499 });
  });
});

describe("the event loop while a worker grinds", () => {
  /** The order in which a 5 ms timer set first and a slow read settle. */
  async function order(r: RequestReader): Promise<string[]> {
    const seen: string[] = [];
    const timer = new Promise<void>((resolve) => setTimeout(() => (seen.push("timer"), resolve()), 5));
    await Promise.all([r.read("chat", chat(" ".repeat(SLOW_SPACES)), {}).then(() => seen.push("read")), timer]);
    return seen;
  }

  it("runs a timer before the huge job settles on a worker (inline, the job runs first)", async () => {
    expect(await order(await pooled(1))).toEqual(["timer", "read"]);
    // The control: on the event loop the read holds the timer up, so the assertion above can fail.
    expect(await order(await reader({ kind: "huggingface", path: QWEN, workers: 0 }))).toEqual(["read", "timer"]);
  });
});

describe("loading", () => {
  it("a tokenizer folder that cannot load rejects createRequestReader with TokenizerLoadError naming the file", async () => {
    const missing = path.join(tmpdir(), "adp-no-such-tokenizer");
    const error = await createRequestReader({ settings: { kind: "huggingface", path: missing, workers: 2 }, limits: NO_LIMITS, loraAdapters: new Map() }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(TokenizerLoadError);
    expect((error as Error).message).toContain(`${missing}: no such folder`);
    const dir = mkdtempSync(path.join(tmpdir(), "adp-bad-tokenizer-"));
    cpSync(QWEN, dir, { recursive: true });
    writeFileSync(path.join(dir, "tokenizer_config.json"), "{ not json");
    const broken = await createRequestReader({ settings: { kind: "huggingface", path: dir, workers: 1 }, limits: NO_LIMITS, loraAdapters: new Map() }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(broken).toBeInstanceOf(TokenizerLoadError);
    expect((broken as Error).message).toMatch(new RegExp(`^${path.join(dir, "tokenizer_config.json").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: not valid JSON`));
    expect((broken as Error).message).not.toContain("\n");
  });

  it("bytes, an embedder's tokenizer, or workers: 0 read inline; the inline reader reports no workers and only ok/refused", async () => {
    const r = await reader({ kind: "bytes" });
    expect(r.tokenizerName).toBe("utf8-bytes");
    const request = await r.read("chat", chat("hi"), {});
    r.release(request.tokens);
    expect(r.stats()).toMatchObject({ workers: 0, completed: 1 });
    const lines = r.metricLines("adp_gateway_");
    expect(lines).toContain("adp_gateway_tokenizer_workers 0");
    expect(lines.filter((l) => l.startsWith("adp_gateway_tokenizer_jobs_total{"))).toEqual(['adp_gateway_tokenizer_jobs_total{outcome="ok"} 1', 'adp_gateway_tokenizer_jobs_total{outcome="refused"} 0']);
    const own = await createRequestReader({ settings: { kind: "huggingface", path: "/nowhere" }, limits: NO_LIMITS, loraAdapters: new Map(), tokenizer: new Utf8ByteTokenizer() });
    expect(own.stats().workers).toBe(0);
    expect((await reader({ kind: "huggingface", path: QWEN, workers: 0 })).stats().workers).toBe(0);
  });
});

describe("the tokenizer's pool settings", () => {
  const UPSTREAMS = "upstreams:\n  - http://127.0.0.1:8001\n";
  const load = (yaml: string) => loadGatewayConfig({ file: { name: "gateway.yaml", text: UPSTREAMS + yaml } });
  /** The message `yaml` is refused with. */
  function refused(yaml: string): string {
    try {
      load(yaml);
    } catch (error) {
      if (error instanceof GatewayConfigError) return error.message;
      throw error;
    }
    throw new Error("accepted");
  }

  it("workers, queue_size and timeout_ms are read, checked, and for kind huggingface only", () => {
    expect(load(`tokenizer: { kind: huggingface, path: ${QWEN}, workers: 0, queue_size: 5, timeout_ms: 100 }\n`).tokenizer).toEqual({ kind: "huggingface", path: QWEN, workers: 0, queueSize: 5, timeoutMs: 100 });
    expect(refused(`tokenizer: { kind: huggingface, path: ${QWEN}, workers: 65 }\n`)).toContain("tokenizer.workers: must be an integer in [0, 64], got 65");
    expect(refused(`tokenizer: { kind: huggingface, path: ${QWEN}, timeout_ms: 5 }\n`)).toContain("tokenizer.timeout_ms: must be an integer in [10, 600000]");
    expect(refused(`tokenizer: { kind: huggingface, path: ${QWEN}, queue_size: -1 }\n`)).toContain("tokenizer.queue_size: must be an integer in [0, 1048576]");
    expect(refused("tokenizer: { kind: bytes, workers: 2 }\n")).toContain("tokenizer.workers: is a setting of kind huggingface only");
  });
});
