// A model's chat template, rendered as the engines render it, so the gateway's
// token ids for a chat request are the engine's. The messages and tools are
// first normalised as the engine's OpenAI server normalises them
// (chat-inputs.ts: TensorRT-LLM's by default, or vLLM's); then, as
// transformers' apply_chat_template does, the template is rendered with
// messages, tools, documents, add_generation_prompt (default true), the
// tokenizer's special tokens (bos_token, eos_token, ... as text) and the
// request's chat_template_kwargs, in a Jinja environment with trim_blocks and
// lstrip_blocks (which @huggingface/jinja applies), raise_exception,
// strftime_now and a tojson that escapes nothing. A template that fails
// (its raise_exception, or an error) refuses the request: a 400, never ids.
//
// Platform-neutral (no node: imports): it runs in browsers too.

import { Environment, Interpreter, Template } from "@huggingface/jinja";
import { record, templateMessages, templateTools, type ChatEngine } from "./chat-inputs.js";
import { TokenizerRequestError, type ChatMessage, type RequestFields } from "./tokenizer.js";

/** The template's text and where it came from (for messages). */
export interface ChatTemplateSource {
  /** The default template (null: the model has none). */
  readonly text: string | null;
  /** The template for requests with tools, when the model names one `tool_use`. */
  readonly toolUse: string | null;
  /** The file it was read from. */
  readonly file: string;
}

/** transformers' SPECIAL_TOKENS_ATTRIBUTES: the special tokens a template sees by name. */
const SPECIAL_TOKEN_ATTRIBUTES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"] as const;
/** Template variables the request's chat_template_kwargs cannot replace (transformers passes them by name). */
const RESERVED = new Set(["messages", "tools", "documents", "add_generation_prompt"]);

/** A chat template that does not parse; names the file. */
export class ChatTemplateSyntaxError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_CHAT_TEMPLATE";
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`${file}: the chat template does not parse: ${message}`);
    this.name = "ChatTemplateSyntaxError";
  }
}

/**
 * The template transformers would pick: chat_template.jinja (where newer
 * models keep it), else tokenizer_config.json's `chat_template` (a string, or
 * named templates: `default`, and `tool_use` for requests with tools), else
 * chat_template.json's.
 */
export function chatTemplateSource(config: Readonly<Record<string, unknown>>, jinja: string | null, json: unknown): ChatTemplateSource {
  if (jinja !== null) return { text: jinja, toolUse: null, file: "chat_template.jinja" };
  const named = config.chat_template;
  if (typeof named === "string") return { text: named, toolUse: null, file: "tokenizer_config.json" };
  if (Array.isArray(named)) {
    const byName = new Map<string, string>();
    for (const t of named as unknown[]) {
      const entry = t as { name?: unknown; template?: unknown } | null;
      if (entry !== null && typeof entry === "object" && typeof entry.name === "string" && typeof entry.template === "string") byName.set(entry.name, entry.template);
    }
    return { text: byName.get("default") ?? null, toolUse: byName.get("tool_use") ?? null, file: "tokenizer_config.json" };
  }
  const fromJson = (json as { chat_template?: unknown } | null)?.chat_template;
  if (typeof fromJson === "string") return { text: fromJson, toolUse: null, file: "chat_template.json" };
  return { text: null, toolUse: null, file: "tokenizer_config.json" };
}

/** A special token as text: tokenizer_config.json writes a string or an AddedToken ({content, ...}). */
function tokenText(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (v !== null && typeof v === "object" && typeof (v as { content?: unknown }).content === "string") return (v as { content: string }).content;
  return null;
}

/** transformers' special_tokens_map: each special token the config sets (non-empty), as text. */
export function specialTokenVariables(config: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of SPECIAL_TOKEN_ATTRIBUTES) {
    const v = config[name];
    if (name === "additional_special_tokens") {
      const list = Array.isArray(v) ? v.map(tokenText).filter((t): t is string => t !== null) : [];
      if (list.length > 0) out[name] = list;
    } else {
      const text = tokenText(v);
      if (text) out[name] = text;
    }
  }
  return out;
}

/** A boolean field of the request, or `fallback` when absent or null. */
export function flag(request: RequestFields | undefined, name: string, fallback: boolean): boolean {
  const v = request?.[name];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== "boolean") throw new TokenizerRequestError(`${name} must be a boolean`);
  return v;
}

/** Python's range(): [start, stop) by step. */
function range(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error("range() step must not be zero");
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

/**
 * transformers' strftime_now: the local date and time in a strftime format
 * (the directives @huggingface/jinja knows: %Y %m %d %b %B %H %M %%). The
 * clock reaches only templates that print today's date (Llama 3's), as it
 * does in the engine; no routing decision reads it otherwise.
 */
function strftimeNow(format: string): string {
  const now = new Date();
  const pad = (n: number) => String(n).padStart(2, "0");
  return format.replace(/%[YmdbBHM%]/g, (d) => {
    switch (d) {
      case "%Y":
        return String(now.getFullYear());
      case "%m":
        return pad(now.getMonth() + 1);
      case "%d":
        return pad(now.getDate());
      case "%b":
        return new Intl.DateTimeFormat(undefined, { month: "short" }).format(now);
      case "%B":
        return new Intl.DateTimeFormat(undefined, { month: "long" }).format(now);
      case "%H":
        return pad(now.getHours());
      case "%M":
        return pad(now.getMinutes());
      default:
        return "%";
    }
  });
}

/**
 * The template's globals, as @huggingface/jinja's Template.render sets them,
 * but with a raise_exception of ours: the template's own refusal must be told
 * apart from a failure to render (Template.render's cannot be replaced).
 */
function globals(env: Environment): void {
  for (const [name, value] of [["false", false], ["true", true], ["none", null], ["False", false], ["True", true], ["None", null]] as const) env.set(name, value);
  env.set("range", range);
  env.set("strftime_now", strftimeNow);
  env.set("raise_exception", (message: unknown) => {
    throw new TokenizerRequestError(String(message));
  });
}

/** A value of the interpreter: its type's name and its JavaScript value (the library's classes are not exported). */
interface RuntimeValue {
  readonly type: string;
  readonly value: unknown;
}
/** What is used here of @huggingface/jinja's Interpreter (whose declarations TypeScript cannot resolve under nodenext: it sees `any`). */
interface JinjaInterpreter {
  run(program: unknown): RuntimeValue;
  evaluate(node: unknown, environment: Environment): RuntimeValue;
}
/** A binary expression node, as the interpreter's evaluateBinaryExpression reads it. */
interface BinaryNode {
  readonly operator: { readonly value: string };
  readonly left: unknown;
  readonly right: unknown;
}
/** The library's Interpreter, typed as used. */
const BaseInterpreter = Interpreter as unknown as new (environment: Environment) => JinjaInterpreter;
/** Python's names of the interpreter's value types, for its TypeError's words. */
const PYTHON_TYPES: Readonly<Record<string, string>> = { StringValue: "str", IntegerValue: "int", FloatValue: "float", BooleanValue: "bool", ObjectValue: "dict", ArrayValue: "list", TupleValue: "tuple", FunctionValue: "function", NamespaceValue: "Namespace" };

/** A value of `like`'s class (the library's value classes take their JavaScript value as sole argument). */
const valueLike = (like: RuntimeValue, value: unknown): RuntimeValue => new (like.constructor as new (value: unknown) => RuntimeValue)(value);

/**
 * The interpreter, with `+` as Python's: @huggingface/jinja joins a string
 * and anything else as text ("x" + {...} is "x[object Map]", "x" + 5 is
 * "x5") where Python raises TypeError, and the engine answers 400. A template
 * that adds a tool call's arguments (an object once the engine parsed them)
 * to a string must be refused here too, not turned into ids no engine
 * computes.
 */
class PythonInterpreter extends BaseInterpreter {}
{
  // evaluateBinaryExpression is private in the library's types, not at run time (the version is pinned; the test of `+` fails if it moves).
  const base = (Interpreter.prototype as unknown as { evaluateBinaryExpression?: (node: BinaryNode, env: Environment) => RuntimeValue }).evaluateBinaryExpression;
  if (typeof base !== "function") throw new Error("@huggingface/jinja: Interpreter.evaluateBinaryExpression is gone (chat-template.ts patches it)");
  (PythonInterpreter.prototype as unknown as { evaluateBinaryExpression: typeof base }).evaluateBinaryExpression = function (this: PythonInterpreter, node: BinaryNode, env: Environment): RuntimeValue {
    if (node.operator.value !== "+") return base.call(this, node, env);
    // Each side once (a chain of + nests to the left), then the sum as the library's + makes it.
    const left = this.evaluate(node.left, env);
    const right = this.evaluate(node.right, env);
    const l = PYTHON_TYPES[left.type];
    const r = PYTHON_TYPES[right.type];
    if (l === "str" && r === "str") return valueLike(left, (left.value as string) + (right.value as string));
    if ((l === "int" || l === "float") && (r === "int" || r === "float")) return valueLike(r === "float" ? right : left, (left.value as number) + (right.value as number));
    if (l === r && (l === "list" || l === "tuple")) return valueLike(left, (left.value as unknown[]).concat(right.value as unknown[]));
    if (l !== undefined && r !== undefined && (l === "str") !== (r === "str")) {
      throw new TypeError(l === "str" || l === "list" ? `can only concatenate ${l} (not "${r}") to ${l}` : `unsupported operand type(s) for +: '${l}' and '${r}'`);
    }
    return base.call(this, node, env); // the rest (undefined or none on a side, ...) the library refuses, evaluating again
  };
}

/** A model's chat template, compiled once, rendered per request. */
export class ChatTemplate {
  /** The default template, or null when the model has none. */
  readonly #default: Template | null;
  /** The `tool_use` template, when the model names one. */
  readonly #toolUse: Template | null;
  /** The special tokens as template variables. */
  readonly #specials: Record<string, unknown>;
  /** Whose normalisation of messages and tools the rendering follows. */
  readonly engine: ChatEngine;

  /** Compiles `source`'s templates; throws ChatTemplateSyntaxError naming its file. */
  constructor(source: ChatTemplateSource, config: Readonly<Record<string, unknown>>, engine: ChatEngine = "tensorrt-llm") {
    const compile = (text: string | null) => {
      if (text === null) return null;
      try {
        return new Template(text);
      } catch (error) {
        throw new ChatTemplateSyntaxError(source.file, (error as Error).message);
      }
    };
    this.#default = compile(source.text);
    this.#toolUse = compile(source.toolUse);
    this.#specials = specialTokenVariables(config);
    this.engine = engine;
  }

  /** Whether the model has a chat template at all. */
  get present(): boolean {
    return this.#default !== null || this.#toolUse !== null;
  }

  /**
   * The prompt text of a chat request. Throws TokenizerRequestError when the
   * template refuses the request (its raise_exception message), cannot render
   * it, or a field has the wrong shape.
   */
  render(messages: readonly ChatMessage[], request: RequestFields | undefined): string {
    const tools = templateTools(request?.tools, this.engine);
    const template = tools !== null && this.#toolUse !== null ? this.#toolUse : (this.#default ?? this.#toolUse);
    if (template === null) throw new TokenizerRequestError("the model has no chat template (tokenizer_config.json, chat_template.jinja or chat_template.json)");
    const kwargs = request?.chat_template_kwargs;
    if (kwargs !== undefined && kwargs !== null && record(kwargs) === null) throw new TokenizerRequestError("chat_template_kwargs must be an object");
    const documents = request?.documents ?? null;
    if (documents !== null && !Array.isArray(documents)) throw new TokenizerRequestError("documents must be a list");
    const variables: Record<string, unknown> = { ...this.#specials };
    for (const [k, v] of Object.entries(record(kwargs) ?? {})) if (!RESERVED.has(k)) variables[k] = v;
    variables.messages = templateMessages(messages, this.engine);
    variables.tools = tools;
    variables.documents = documents;
    variables.add_generation_prompt = flag(request, "add_generation_prompt", true);
    try {
      const env = new Environment();
      globals(env);
      for (const [k, v] of Object.entries(variables)) if (env.variables.has(k)) env.setVariable(k, new Environment().set(k, v)); else env.set(k, v);
      return new PythonInterpreter(env).run(template.parsed).value as string;
    } catch (error) {
      // The template's own refusal reaches the client word for word, as the engine's does.
      if (error instanceof TokenizerRequestError) throw error;
      throw new TokenizerRequestError(`the chat template cannot render this request: ${(error as Error).message}`);
    }
  }
}
