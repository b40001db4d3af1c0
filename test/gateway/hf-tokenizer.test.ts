// The engines' tokenizers, id for id: each fixture family's reference prompts
// (test/fixtures/tokenizers/<family>/reference.json: chat requests rendered by
// Python's jinja2 as transformers does, ids from Hugging Face's Rust
// tokenizers; scripts/tokenizer-reference.mjs) must come out of
// HuggingFaceTokenizer exactly, with its shortcuts (segments, the segment
// cache, SentencePiece words) on. Runs in Node and in Chromium: the fixtures
// are JSON imports.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ChatTemplateSyntaxError } from "../../gateway/src/tokenizers/chat-template.js";
import { HuggingFaceTokenizer, TokenizerFilesError } from "../../gateway/src/tokenizers/hf-tokenizer.js";
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

/** One reference case as scripts/tokenizer-reference.mjs writes it. */
interface ReferenceCase {
  readonly name: string;
  readonly kind: "chat" | "completion";
  readonly request: RequestFields & { messages?: ChatMessage[]; prompt?: string };
  readonly rendered?: string;
  readonly ids?: number[];
  readonly error?: string;
  /** transformers 5's own ids, where they differ from the Rust tokenizer's (scripts/tokenizer-reference.mjs). */
  readonly transformers_ids?: number[];
}

/** Each family: its files, its reference, and whether SentencePiece words apply to it. */
const FAMILIES = [
  { family: "qwen2.5", files: { tokenizer: qwenTokenizer, config: qwenConfig }, cases: qwenReference.cases as ReferenceCase[], wordwise: false },
  { family: "qwen3", files: { tokenizer: qwen3Tokenizer, config: qwen3Config }, cases: qwen3Reference.cases as ReferenceCase[], wordwise: false },
  { family: "mistral-v1", files: { tokenizer: mistralTokenizer, config: mistralConfig }, cases: mistralReference.cases as ReferenceCase[], wordwise: true },
];

const ids = (a: Uint32Array) => Array.from(a);

describe.each(FAMILIES)("HuggingFaceTokenizer: $family", ({ family, files, cases, wordwise }) => {
  const tok = new HuggingFaceTokenizer(files);

  it("uses its shortcuts on this family (segments always; SentencePiece words where they are exact)", () => {
    expect(tok.segmented).toBe(true);
    expect(tok.wordwise).toBe(wordwise);
    expect(tok.hasChatTemplate).toBe(true);
  });

  it.each(cases.filter((c) => c.kind === "chat" && c.error === undefined).map((c) => [c.name, c] as const))("%s: the engine's rendering and ids", (_name, c) => {
    const { messages, ...rest } = c.request;
    expect(tok.render(messages!, rest)).toBe(c.rendered);
    expect(ids(tok.encodeChat(messages!, rest))).toEqual(c.ids);
    expect(ids(tok.encodeChat(messages!, rest))).toEqual(c.ids); // again, now from the segment cache
  });

  it.each(cases.filter((c) => c.error !== undefined).map((c) => [c.name, c] as const))("%s: refused with the template's own message", (_name, c) => {
    const { messages, ...rest } = c.request;
    expect(() => tok.encodeChat(messages!, rest)).toThrow(TokenizerRequestError);
    expect(() => tok.encodeChat(messages!, rest)).toThrow(c.error);
  });

  it.each(cases.filter((c) => c.kind === "completion").map((c) => [c.name, c] as const))("%s: the engine's ids", (_name, c) => {
    const { prompt, ...rest } = c.request;
    expect(ids(tok.encodePrompt(prompt!, rest))).toEqual(c.ids);
  });

  it("a conversation's next turn reuses its cached segments, and cached ids equal uncached ones", () => {
    const fresh = new HuggingFaceTokenizer(files);
    const long = cases.find((c) => c.name === "chat: long multi-turn")!;
    const next = cases.find((c) => c.name === "chat: long multi-turn, next turn")!;
    fresh.encodeChat(long.request.messages!);
    const before = { ...fresh.stats };
    const got = ids(fresh.encodeChat(next.request.messages!));
    // Every earlier segment is a hit; only the new turn's (with the template's text around it) is encoded. Qwen3's
    // template gives the last assistant turn an empty <think></think> until a user turn follows: that one is encoded again.
    const rerendered = family === "qwen3" ? String(long.request.messages!.at(-1)!.content).length : 0;
    expect(fresh.stats.hits - before.hits).toBeGreaterThanOrEqual(4);
    expect(fresh.stats.misses - before.misses).toBeLessThanOrEqual(rerendered > 0 ? 3 : 2);
    expect(fresh.stats.missedChars - before.missedChars).toBeLessThan(120 + rerendered);
    expect(fresh.render(next.request.messages!).length).toBeGreaterThan(8_000);
    expect(got).toEqual(next.ids);
    expect(got).toEqual(fresh.encodeUncached(fresh.render(next.request.messages!), false));
    const off = new HuggingFaceTokenizer(files, { cacheBytes: 0 });
    expect(ids(off.encodeChat(next.request.messages!))).toEqual(got);
    expect(off.stats.hits).toBe(0);
  });

  it("long segments that share a fingerprint (same length, same sampled characters) are told apart", () => {
    const t = new HuggingFaceTokenizer(files);
    const base = "x".repeat(1000);
    for (let round = 0; round < 2; round++) {
      for (let k = 480; k < 520; k++) {
        const content = `${base.slice(0, k)}y${base.slice(k + 1)}`;
        expect(ids(t.encodeChat([{ role: "user", content }]))).toEqual(t.encodeUncached(t.render([{ role: "user", content }]), false));
      }
    }
  });

  it("a small cache evicts (least recently used first) and still gives the same ids", () => {
    const small = new HuggingFaceTokenizer(files, { cacheBytes: 8_000 });
    const chats = cases.filter((c) => c.kind === "chat" && c.error === undefined);
    for (let round = 0; round < 2; round++) {
      for (const c of chats) {
        const { messages, ...rest } = c.request;
        expect(ids(small.encodeChat(messages!, rest))).toEqual(c.ids);
      }
    }
  });

  it("released ids come back filled with the next prompt's ids; cached segments are never handed out", () => {
    const t = new HuggingFaceTokenizer(files);
    const c = cases.find((x) => x.name === "chat: multi-turn")!;
    const first = t.encodeChat(c.request.messages!);
    first.fill(0xdeadbeef); // a caller scribbling on its ids must not reach the cache
    t.release(first);
    const again = t.encodeChat(c.request.messages!);
    expect(again.buffer).toBe(first.buffer); // the pool lent the same memory
    expect(ids(again)).toEqual(c.ids);
  });

  it("where transformers 5 rebuilds the tokenizer from its class (Mistral's), the ids are the Rust tokenizer's: transformers 4's, which the engines pin", () => {
    const differ = cases.filter((c) => c.transformers_ids !== undefined);
    expect(differ.length > 0).toBe(family === "mistral-v1");
    for (const c of differ) {
      const { messages, ...rest } = c.request;
      expect(ids(tok.encodeChat(messages!, rest))).toEqual(c.ids);
      expect(c.ids).not.toEqual(c.transformers_ids);
    }
  });

  it("token-id prompts are taken as given", () => {
    expect(ids(tok.encodePrompt([1, 2, 4_000_000_000]))).toEqual([1, 2, 4_000_000_000]);
  });

  it("any text, special tokens anywhere: segments and words give the library's plain encode", () => {
    const specials = (files.tokenizer.added_tokens as { content: string }[]).map((t) => t.content);
    const piece = fc.oneof(
      fc.string({ unit: "grapheme", maxLength: 12 }),
      fc.constantFrom(...specials, " ", "  ", "\n", "\t", "▁", "▁▁", "e\u0301", "世界", "😀", "1234", " [INST] "),
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 12 }), fc.boolean(), (parts, special) => {
        const text = parts.join("");
        const t = new HuggingFaceTokenizer(files);
        expect(ids(t.encodePrompt(text, { add_special_tokens: special }))).toEqual(t.encodeUncached(text, special));
        expect(ids(t.encodePrompt(text, { add_special_tokens: special }))).toEqual(t.encodeUncached(text, special));
      }),
      { numRuns: 60, seed: 12 },
    );
  });

  it("request fields of the wrong shape are refused (400), not guessed", () => {
    const messages = [{ role: "user", content: "hi" }];
    expect(() => tok.encodeChat(messages, { tools: "all" })).toThrow(/tools must be a list/);
    expect(() => tok.encodeChat(messages, { tools: [{ type: "function", function: {} }] })).toThrow(/tools\[0\]\.function\.name must be a string/);
    expect(() => tok.encodeChat(messages, { add_generation_prompt: "yes" })).toThrow(/add_generation_prompt must be a boolean/);
    expect(() => tok.encodeChat([{ role: "user", content: 42 }])).toThrow(/messages\[0\]\.content must be a string/);
    expect(() => tok.encodePrompt("x", { add_special_tokens: 1 })).toThrow(TokenizerRequestError);
  });
});

describe("HuggingFaceTokenizer: a pre-tokenizer that treats the prompt's first section apart", () => {
  // Newer conversions of SentencePiece tokenizers prepend "▁" to the first section only (Metaspace,
  // prepend_scheme "first"): a segment encodes differently at the start of a prompt than after an added token.
  const files = {
    tokenizer: { ...mistralTokenizer, normalizer: null, pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false } },
    config: mistralConfig,
  };

  it("segments still give the library's plain encode, wherever they stand", () => {
    const tok = new HuggingFaceTokenizer(files);
    expect(tok.segmented).toBe(true);
    expect(tok.wordwise).toBe(false);
    // The same text first and after </s> encodes differently, and both come out as the library's.
    expect(tok.encodeUncached("hello world", false)).not.toEqual(tok.encodeUncached("</s>hello world", false).slice(1));
    for (const text of ["hello world</s>hello world", "</s>hello world</s>hello world", "hello<s> world </s>  x"]) {
      for (let round = 0; round < 2; round++) expect(ids(tok.encodePrompt(text, { add_special_tokens: false }))).toEqual(tok.encodeUncached(text, false));
    }
    const c = mistralReference.cases.find((x) => x.name === "chat: long multi-turn")!;
    const rendered = tok.render(c.request.messages as ChatMessage[]);
    expect(ids(tok.encodeChat(c.request.messages as ChatMessage[]))).toEqual(tok.encodeUncached(rendered, false));
    expect(ids(tok.encodeChat(c.request.messages as ChatMessage[]))).toEqual(tok.encodeUncached(rendered, false));
  });
});

describe("HuggingFaceTokenizer: broken files", () => {
  it("names the file at fault", () => {
    expect(() => new HuggingFaceTokenizer({ tokenizer: [], config: {} })).toThrow(TokenizerFilesError);
    expect(() => new HuggingFaceTokenizer({ tokenizer: { model: null }, config: {} })).toThrow(/tokenizer\.json: has no model/);
    expect(() => new HuggingFaceTokenizer({ tokenizer: qwenTokenizer, config: "x" })).toThrow(/tokenizer_config\.json: must hold a JSON object/);
    expect(() => new HuggingFaceTokenizer({ tokenizer: qwenTokenizer, config: qwenConfig, chatTemplateJinja: "{% for x in %}" })).toThrow(ChatTemplateSyntaxError);
    expect(() => new HuggingFaceTokenizer({ tokenizer: qwenTokenizer, config: qwenConfig, chatTemplateJinja: "{% for x in %}" })).toThrow(/^chat_template\.jinja: the chat template does not parse/);
  });

  it("takes chat_template.jinja over the config's template, and refuses chat without any template", () => {
    const jinja = new HuggingFaceTokenizer({ tokenizer: qwenTokenizer, config: qwenConfig, chatTemplateJinja: "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}" });
    expect(jinja.render([{ role: "user", content: "hi" }])).toBe("[user]hi");
    const { chat_template: _dropped, ...bare } = qwenConfig as Record<string, unknown>;
    const none = new HuggingFaceTokenizer({ tokenizer: qwenTokenizer, config: bare });
    expect(none.hasChatTemplate).toBe(false);
    expect(() => none.encodeChat([{ role: "user", content: "hi" }])).toThrow(/has no chat template/);
    const fromJson = new HuggingFaceTokenizer({ tokenizer: qwenTokenizer, config: bare, chatTemplateJson: { chat_template: "{{ messages[0].content }}!" } });
    expect(fromJson.render([{ role: "user", content: "hi" }])).toBe("hi!");
  });
});
