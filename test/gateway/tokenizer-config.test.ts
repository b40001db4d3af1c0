// The `tokenizer:` setting (and --tokenizer), and building the tokenizer it
// names from a folder: every problem with its file and line, a missing folder
// or broken file as one message naming it.
import { spawn } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { GatewayConfigError, loadGatewayConfig } from "../../gateway/src/config/config.js";
import { gatewayConfigSchema } from "../../gateway/src/config/config-schema.js";
import { HuggingFaceTokenizer } from "../../gateway/src/tokenizers/hf-tokenizer.js";
import { Utf8ByteTokenizer } from "../../gateway/src/tokenizers/tokenizer.js";
import { loadHuggingFaceTokenizer, loadTokenizer, TokenizerLoadError } from "../../gateway/src/tokenizers/tokenizer-loading.js";
import { startMockEngine, trackedForCleanup } from "../support/mock-engine.js";
import qwenReference from "../fixtures/tokenizers/qwen2.5/reference.json" with { type: "json" };
import { metricsByIndex } from "../support/metrics.js";

const QWEN = path.resolve("test/fixtures/tokenizers/qwen2.5");
const UPSTREAMS = "upstreams:\n  - http://127.0.0.1:8001\n";

/** The configuration of `yaml` (upstreams added), or the GatewayConfigError's message. */
function load(yaml: string, flags: { tokenizer?: string } = {}) {
  return loadGatewayConfig({ file: { name: "gateway.yaml", text: UPSTREAMS + yaml }, flags });
}
/** The message `yaml` is refused with. */
function refusal(yaml: string, flags: { tokenizer?: string } = {}): string {
  try {
    load(yaml, flags);
  } catch (error) {
    if (error instanceof GatewayConfigError) return error.message;
    throw error;
  }
  throw new Error("accepted");
}

describe("the tokenizer: setting", () => {
  it("defaults to UTF-8 bytes, 128-byte index blocks", () => {
    const config = load("");
    expect(config.tokenizer).toEqual({ kind: "bytes" });
    expect(config.routing.tokensPerBlock).toBe(128);
    expect(load("tokenizer: { kind: bytes }\n").tokenizer).toEqual({ kind: "bytes" });
  });

  it("kind huggingface takes a folder, and index blocks default to the engine's 32 tokens (an explicit size wins)", () => {
    const config = load(`tokenizer:\n  kind: huggingface\n  path: ${QWEN}\n`);
    expect(config.tokenizer).toEqual({ kind: "huggingface", path: QWEN });
    expect(config.routing.tokensPerBlock).toBe(32);
    expect(load(`tokenizer: { kind: huggingface, path: ${QWEN} }\nrouting: { tokens_per_block: 64 }\n`).routing.tokensPerBlock).toBe(64);
  });

  it("--tokenizer DIR is kind huggingface and wins over the file", () => {
    expect(load("tokenizer: { kind: bytes }\n", { tokenizer: "/models/x" }).tokenizer).toEqual({ kind: "huggingface", path: "/models/x" });
    expect(refusal("", { tokenizer: " " })).toContain("--tokenizer: tokenizer: must name a folder");
  });

  it("each mistake with its file and line", () => {
    expect(refusal("tokenizer:\n  kind: sentencepiece\n")).toContain('gateway.yaml:4: tokenizer.kind: must be one of bytes, huggingface, got "sentencepiece"');
    expect(refusal("tokenizer:\n  kind: huggingface\n")).toContain("gateway.yaml:3: tokenizer.path: is required");
    expect(refusal("tokenizer:\n  kind: bytes\n  path: /x\n")).toContain("gateway.yaml:5: tokenizer.path: is a setting of kind huggingface only");
    expect(refusal("tokenizer:\n  kind: huggingface\n  path: /x\n  cache_mb: 3\n")).toContain("gateway.yaml:6: tokenizer.cache_mb: is not a setting here (expected kind, path, workers, queue_size, timeout_ms, engine)");
    expect(refusal("tokenizer: huggingface\n")).toContain("gateway.yaml:3: tokenizer: must be a mapping");
    const several = refusal("tokenizer: { kind: huggingface, path: 7 }\nlisten: { port: -1 }\n");
    expect(several).toContain("tokenizer.path: must be a non-empty string");
    expect(several).toContain("listen.port");
  });

  it("is in the file's JSON Schema", () => {
    const schema = gatewayConfigSchema.properties.tokenizer as { properties: Record<string, unknown>; then: unknown };
    expect(Object.keys(schema.properties)).toEqual(["kind", "path", "engine", "workers", "queue_size", "timeout_ms"]);
    expect(schema.then).toEqual({ required: ["path"] });
  });
});

describe("loading the tokenizer a setting names", () => {
  it("a model folder gives the engine's ids; bytes gives the byte tokenizer", () => {
    const tok = loadTokenizer({ kind: "huggingface", path: QWEN });
    expect(tok).toBeInstanceOf(HuggingFaceTokenizer);
    expect(tok.name).toBe("huggingface:qwen2.5");
    const c = qwenReference.cases.find((x) => x.name === "chat: system and user")!;
    expect(Array.from(tok.encodeChat(c.request.messages!))).toEqual(c.ids);
    expect(loadTokenizer({ kind: "bytes" })).toBeInstanceOf(Utf8ByteTokenizer);
  });

  it("chat_template.jinja in the folder is the template", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "adp-tok-"));
    cpSync(QWEN, dir, { recursive: true });
    writeFileSync(path.join(dir, "chat_template.jinja"), "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}\n");
    expect(loadHuggingFaceTokenizer(dir).render([{ role: "user", content: "hi" }])).toBe("<user>hi");
  });

  /** The message loading `dir` fails with. */
  const failure = (dir: string) => {
    try {
      loadHuggingFaceTokenizer(dir);
    } catch (error) {
      expect(error).toBeInstanceOf(TokenizerLoadError);
      return (error as Error).message;
    }
    throw new Error("loaded");
  };

  it("a missing folder, a file for a folder, a missing file, broken JSON, a broken template: one message naming it", () => {
    expect(failure("/nonexistent/model")).toBe("/nonexistent/model: no such folder (tokenizer.path or --tokenizer must name the folder holding the model's tokenizer.json and tokenizer_config.json)");
    expect(failure(path.join(QWEN, "tokenizer.json"))).toContain("tokenizer.json: not a folder");
    const dir = mkdtempSync(path.join(tmpdir(), "adp-tok-"));
    expect(failure(dir)).toBe(`${path.join(dir, "tokenizer.json")}: no such file (the tokenizer folder must hold tokenizer.json and tokenizer_config.json)`);
    cpSync(path.join(QWEN, "tokenizer.json"), path.join(dir, "tokenizer.json"));
    expect(failure(dir)).toContain(`${path.join(dir, "tokenizer_config.json")}: no such file`);
    writeFileSync(path.join(dir, "tokenizer_config.json"), "{ not json");
    expect(failure(dir)).toMatch(new RegExp(`^${path.join(dir, "tokenizer_config.json").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: not valid JSON`));
    cpSync(path.join(QWEN, "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));
    writeFileSync(path.join(dir, "chat_template.jinja"), "{% if %}");
    expect(failure(dir)).toContain(`${path.join(dir, "chat_template.jinja")}: the chat template does not parse`);
    const other = mkdtempSync(path.join(tmpdir(), "adp-tok-"));
    mkdirSync(other, { recursive: true });
    writeFileSync(path.join(other, "tokenizer.json"), JSON.stringify({ version: "1.0", model: { type: "Nonsense" } }));
    writeFileSync(path.join(other, "tokenizer_config.json"), "{}");
    expect(failure(other)).toContain(`${path.join(other, "tokenizer.json")}: is not a tokenizer this gateway can load`);
  });
});

describe("adp-router-gateway serve with an engine's tokenizer (the built CLI)", () => {
  const CLI = path.resolve("gateway/dist/cli.js");
  const { children, engines } = trackedForCleanup();

  /** Runs `adp-router-gateway serve ARGS`; resolves with its URL once it prints it, or with its exit status and standard error. */
  function serve(args: string[]): Promise<{ url: string } | { status: number | null; stderr: string }> {
    return new Promise((resolve) => {
      const child = spawn(process.execPath, [CLI, "serve", "--workers", "1", ...args], { stdio: ["ignore", "pipe", "pipe"] });
      children.push(child);
      let stdout = "";
      let stderr = "";
      child.stdout!.on("data", (d) => {
        stdout += d;
        const line = stdout.split("\n").find((l) => /^http:\/\/\S+$/.test(l));
        if (line) resolve({ url: line });
      });
      child.stderr!.on("data", (d) => (stderr += d));
      child.on("exit", (status) => resolve({ status, stderr }));
    });
  }

  it("--tokenizer DIR routes by the engine's ids: a chat request is proxied", async () => {
    const engine = await startMockEngine("e0");
    engines.push(engine);
    const started = await serve(["--port", "0", "--upstream", engine.url, "--log-level", "silent", "--tokenizer", QWEN]);
    expect(started).toHaveProperty("url");
    const { url } = started as { url: string };
    const c = qwenReference.cases.find((x) => x.name === "chat: multi-turn")!;
    const response = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", ...c.request }) });
    expect(response.status).toBe(200);
    const metrics = metricsByIndex(await (await fetch(`${url}/metrics`)).text());
    expect(metrics).toMatch(new RegExp(`^adp_gateway_upstream_prompt_tokens_total\\{upstream="0"\\} ${c.ids!.length}$`, "m"));
  });

  it("a missing folder, or a broken file named by the config: one message, exit 2, no stack trace", async () => {
    const missing = await serve(["--upstream", "http://127.0.0.1:9", "--tokenizer", "/nonexistent/model"]);
    expect(missing).toMatchObject({ status: 2 });
    const { stderr } = missing as { stderr: string };
    expect(stderr).toBe("adp-router-gateway serve: /nonexistent/model: no such folder (tokenizer.path or --tokenizer must name the folder holding the model's tokenizer.json and tokenizer_config.json)\n");
    const dir = mkdtempSync(path.join(tmpdir(), "adp-tok-"));
    cpSync(QWEN, dir, { recursive: true });
    writeFileSync(path.join(dir, "tokenizer.json"), '{"model": ');
    const file = path.join(dir, "gateway.yaml");
    writeFileSync(file, `upstreams: [http://127.0.0.1:9]\ntokenizer:\n  kind: huggingface\n  path: ${dir}\n`);
    const broken = await serve(["--config", file]);
    expect(broken).toMatchObject({ status: 2 });
    expect((broken as { stderr: string }).stderr).toContain(`adp-router-gateway serve: ${path.join(dir, "tokenizer.json")}: not valid JSON`);
    expect((broken as { stderr: string }).stderr).not.toMatch(/\n\s+at /);
    writeFileSync(file, "upstreams: [http://127.0.0.1:9]\ntokenizer:\n  kind: huggingface\n");
    const unset = await serve(["--config", file]);
    expect(unset).toMatchObject({ status: 2 });
    expect((unset as { stderr: string }).stderr).toContain(`${file}:2: tokenizer.path: is required`);
  });
});

describe("tokenizer.engine", () => {
  it("reaches the rendering: vLLM keeps strict only where sent, TensorRT-LLM dumps it on every tool; a wrong name is one problem", async () => {
    const { loadGatewayConfig: load, loadTokenizer: loadTok } = await import("../../gateway/src/index.js");
    const dir = new URL("../fixtures/tokenizers/qwen2.5/", import.meta.url).pathname;
    const chat = { model: "m", messages: [{ role: "user", content: "hi" }], tools: [{ type: "function", function: { name: "f", description: "d", parameters: { type: "object", properties: {} } } }] };
    const ids = (engine: string) => {
      const config = load({ file: { name: "g.yaml", text: `upstreams: [http://127.0.0.1:9]\ntokenizer: { kind: huggingface, path: ${dir}, engine: ${engine} }\n` } });
      return loadTok(config.tokenizer).encodeChat(chat.messages as never, chat);
    };
    const trt = ids("tensorrt-llm");
    const vllm = ids("vllm");
    expect(trt.length).toBeGreaterThan(vllm.length); // "strict": null, on TensorRT-LLM's side only
    expect(() => load({ file: { name: "g.yaml", text: `upstreams: [http://127.0.0.1:9]\ntokenizer: { kind: huggingface, path: ${dir}, engine: sglang }\n` } })).toThrow(/tokenizer.engine: must be tensorrt-llm or vllm/);
  });
});
