// Chat templates on tool calls, rendered as the engines render them: for each
// fixture family (test/fixtures/tokenizers/<family>/reference.json, from
// scripts/tokenizer-reference.py and .mjs: transformers' apply_chat_template
// on each engine's messages and tools, ids from Hugging Face's Rust
// tokenizers), the tool-calling requests (tools with and without strict,
// assistant tool calls with null, empty and text content, tool results) give
// TensorRT-LLM's ids by default and vLLM's with `engine: "vllm"`; what the
// engines refuse is refused (a 400, never ids).
import { describe, expect, it } from "vitest";
import { HttpError, readRequest } from "../../gateway/src/requests/openai.js";
import { HuggingFaceTokenizer, type HuggingFaceTokenizerFiles } from "../../gateway/src/tokenizers/hf-tokenizer.js";
import { TokenizerRequestError, type ChatMessage, type RequestFields } from "../../gateway/src/tokenizers/tokenizer.js";
import mistralConfig from "../fixtures/tokenizers/mistral-v1/tokenizer_config.json" with { type: "json" };
import mistralTokenizer from "../fixtures/tokenizers/mistral-v1/tokenizer.json" with { type: "json" };
import mistralReference from "../fixtures/tokenizers/mistral-v1/reference.json" with { type: "json" };
import qwenConfig from "../fixtures/tokenizers/qwen2.5/tokenizer_config.json" with { type: "json" };
import qwenTokenizer from "../fixtures/tokenizers/qwen2.5/tokenizer.json" with { type: "json" };
import qwenReference from "../fixtures/tokenizers/qwen2.5/reference.json" with { type: "json" };
import qwen3Config from "../fixtures/tokenizers/qwen3/tokenizer_config.json" with { type: "json" };
import qwen3Tokenizer from "../fixtures/tokenizers/qwen3/tokenizer.json" with { type: "json" };
import qwen3Reference from "../fixtures/tokenizers/qwen3/reference.json" with { type: "json" };

/** A rendering in reference.json: the text and ids, or the template's refusal. */
interface Rendering {
  readonly rendered?: string;
  readonly ids?: number[];
  readonly error?: string;
}

/** One chat case of reference.json: TensorRT-LLM's rendering, vLLM's where it differs, transformers' on the request as sent where that differs. */
interface ToolCase extends Rendering {
  readonly name: string;
  readonly kind: string;
  readonly request: RequestFields & { messages?: ChatMessage[] };
  readonly vllm?: Rendering;
  readonly as_sent?: { readonly rendered?: string; readonly error?: string };
}

const FAMILIES = [
  { family: "qwen2.5", files: { tokenizer: qwenTokenizer, config: qwenConfig }, cases: qwenReference.cases as ToolCase[] },
  { family: "qwen3", files: { tokenizer: qwen3Tokenizer, config: qwen3Config }, cases: qwen3Reference.cases as ToolCase[] },
  { family: "mistral-v1", files: { tokenizer: mistralTokenizer, config: mistralConfig }, cases: mistralReference.cases as ToolCase[] },
];

/** Whether a request calls tools: tools given, an assistant's tool_calls, or a tool message. */
const callsTools = (c: ToolCase) => c.kind === "chat" && (c.request.tools !== undefined || c.request.messages!.some((m) => m.role === "tool" || "tool_calls" in m));
/** Whether an assistant message of the request calls tools with a null content. */
const nullContentCall = (c: ToolCase) => c.request.messages!.some((m) => m.role === "assistant" && m.content === null && "tool_calls" in m);

const ids = (a: Uint32Array) => Array.from(a);
const WEATHER = qwenReference.cases.find((c) => c.name === "chat: tools given")!.request.tools![0]!;
const ASK = [{ role: "user", content: "Weather in Zürich?" }];

/** The request's fields besides its messages. */
function split(c: ToolCase): [ChatMessage[], RequestFields] {
  const { messages, ...rest } = c.request;
  return [messages!, rest];
}

describe.each(FAMILIES)("tool calls as the engines render them: $family", ({ family, files, cases }) => {
  const tools = cases.filter(callsTools);
  const engines = { "tensorrt-llm": new HuggingFaceTokenizer(files), vllm: new HuggingFaceTokenizer(files, { engine: "vllm" }) };

  it("covers tools, tool calls with null content and tool results", () => {
    expect(tools.length).toBeGreaterThanOrEqual(10);
    expect(tools.filter(nullContentCall).length).toBeGreaterThanOrEqual(4);
    expect(engines["tensorrt-llm"].engine).toBe("tensorrt-llm");
    expect(engines.vllm.engine).toBe("vllm");
  });

  describe.each(["tensorrt-llm", "vllm"] as const)("%s", (engine) => {
    const tok = engines[engine];
    it.each(tools.map((c) => [c.name, c] as const))("%s", (_name, c) => {
      const want = engine === "vllm" ? (c.vllm ?? c) : c;
      const [messages, rest] = split(c);
      if (want.error !== undefined) {
        expect(() => tok.encodeChat(messages, rest)).toThrow(TokenizerRequestError);
        expect(() => tok.encodeChat(messages, rest)).toThrow(want.error);
        return;
      }
      expect(tok.render(messages, rest)).toBe(want.rendered);
      expect(ids(tok.encodeChat(messages, rest))).toEqual(want.ids);
    });
  });

  it("a null content is rendered as the engines hand it to the template (\"\"), not as Python's None", () => {
    for (const c of tools.filter(nullContentCall)) {
      const [messages, rest] = split(c);
      const asEmpty = messages.map((m) => (m.content === null ? { ...m, content: "" } : m));
      if (c.error !== undefined) continue; // Mistral's template refuses tool roles either way
      expect(ids(engines["tensorrt-llm"].encodeChat(messages, rest))).toEqual(ids(engines["tensorrt-llm"].encodeChat(asEmpty, rest)));
    }
    // Qwen3's first template refuses None ('</think>' in None): transformers on the request as sent raises,
    // the engines (and the gateway) render. Qwen2.5's renders either way (`if message.content`).
    const refusedAsSent = tools.filter((c) => nullContentCall(c) && c.as_sent?.error !== undefined && c.error === undefined);
    if (family === "qwen3") {
      expect(refusedAsSent.length).toBeGreaterThanOrEqual(3);
      for (const c of refusedAsSent) expect(c.as_sent!.error).toMatch(/NoneType|'None'/);
    } else expect(refusedAsSent).toEqual([]);
  });
});

describe("tools as each engine dumps them", () => {
  const trt = new HuggingFaceTokenizer({ tokenizer: qwen3Tokenizer, config: qwen3Config });
  const vllm = new HuggingFaceTokenizer({ tokenizer: qwen3Tokenizer, config: qwen3Config }, { engine: "vllm" });

  it('TensorRT-LLM adds "strict": null to a tool sent without it; vLLM keeps strict only where sent', () => {
    const c = qwen3Reference.cases.find((x) => x.name === "tools: with and without strict, description, parameters")! as ToolCase;
    const [messages, rest] = split(c);
    const t = trt.render(messages, rest);
    const v = vllm.render(messages, rest);
    expect(t.match(/"strict": null/g)).toHaveLength(3);
    expect(t.match(/"strict": true/g)).toHaveLength(1);
    expect(v).not.toContain('"strict": null');
    expect(v.match(/"strict": true/g)).toHaveLength(1);
    // Both dump absent descriptions and parameters as null, as their pydantic models do.
    for (const text of [t, v]) expect(text).toContain('{"name": "ping", "description": null, "parameters": null');
    expect(ids(trt.encodeChat(messages, rest)).length - ids(vllm.encodeChat(messages, rest)).length).toBeGreaterThan(3 * 4);
  });

  it("a tool whose type is not \"function\", or whose fields have the wrong type: refused, as both engines' models refuse it", () => {
    const bad = [
      [{ type: "code_interpreter", function: WEATHER.function }, /tools\[0\]\.type must be "function"/],
      [{ type: "function", function: { name: "f", description: 7 } }, /tools\[0\]\.function\.description must be a string/],
      [{ type: "function", function: { name: "f", parameters: "{}" } }, /tools\[0\]\.function\.parameters must be an object/],
    ] as const;
    for (const tok of [trt, vllm]) for (const [tool, message] of bad) expect(() => tok.encodeChat(ASK, { tools: [tool] })).toThrow(message);
    expect(() => trt.encodeChat(ASK, { tools: [{ type: "function", function: { name: "f", strict: "yes" } }] })).toThrow(/strict must be a boolean/);
  });

  it("fields the models do not declare: TensorRT-LLM refuses them (extra=forbid), vLLM dumps them after the declared ones", () => {
    const tool = { type: "function", function: { parameters: { type: "object" }, name: "f", defer: true }, cache_control: { type: "ephemeral" } };
    expect(() => trt.encodeChat(ASK, { tools: [{ type: tool.type, function: tool.function }] })).toThrow(/tools\[0\]\.function\.defer: extra inputs are not permitted/);
    expect(() => trt.encodeChat(ASK, { tools: [{ ...WEATHER, cache_control: {} }] })).toThrow(/tools\[0\]\.cache_control: extra inputs/);
    expect(vllm.render(ASK, { tools: [tool] })).toContain('{"type": "function", "function": {"name": "f", "description": null, "parameters": {"type": "object"}, "defer": true}, "cache_control": {"type": "ephemeral"}}');
  });
});

describe("a template Python refuses is refused: a 400, never ids", () => {
  /** A tokenizer over Qwen2.5's files with `template` as its chat template. */
  const withTemplate = (template: string, engine?: "vllm"): HuggingFaceTokenizer => {
    const files: HuggingFaceTokenizerFiles = { tokenizer: qwenTokenizer, config: { ...qwenConfig, chat_template: template } };
    return new HuggingFaceTokenizer(files, engine === undefined ? {} : { engine });
  };
  const call = [
    { role: "user", content: "Weather?" },
    { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city": "Zürich"}' } }] },
  ];

  it("a string plus the arguments the engine parsed to an object: Python's TypeError (DeepSeek-style templates)", () => {
    // Python's words (jinja2 3.1.6 in transformers' environment, checked by hand): can only concatenate str (not "dict") to str.
    for (const engine of [undefined, "vllm"] as const) {
      const tok = withTemplate("{{ 'json: ' + messages[1].tool_calls[0].function.arguments }}", engine);
      expect(() => tok.encodeChat(call)).toThrow(TokenizerRequestError);
      expect(() => tok.encodeChat(call)).toThrow('can only concatenate str (not "dict") to str');
    }
    expect(() => withTemplate("{{ 'n=' + 5 }}").encodeChat(call)).toThrow('can only concatenate str (not "int") to str');
    expect(() => withTemplate("{{ 5 + 'n' }}").encodeChat(call)).toThrow("unsupported operand type(s) for +: 'int' and 'str'");
    expect(() => withTemplate("{{ [1] + 'x' }}").encodeChat(call)).toThrow('can only concatenate list (not "str") to list');
  });

  it("+ still adds strings, numbers and lists as Python does", () => {
    expect(withTemplate("{{ 'a' + 'b' + messages[0].role }}{{ 1 + 2.5 }}{{ ([1] + [2]) | tojson }}{{ messages | length + 1 }}").render(call)).toBe("abuser3.5[1, 2]3");
  });

  it("through the request reader: 400 with the template's words, no ids", () => {
    const tok = withTemplate("{{ 'json: ' + messages[1].tool_calls[0].function.arguments }}");
    const raw = Buffer.from(JSON.stringify({ model: "m", messages: call }));
    let error: unknown;
    try {
      readRequest("chat", raw, {}, tok);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(HttpError);
    expect(error).toMatchObject({ status: 400, param: "messages" });
    expect((error as Error).message).toContain('can only concatenate str (not "dict") to str');
  });
});
