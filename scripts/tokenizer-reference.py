#!/usr/bin/env python3

Message and tool normalisation followed (gateway/src/tokenizers/chat-inputs.ts),
at the stored versions' commits: TensorRT-LLM tensorrt_llm/serve/chat_utils.py
@ 0c3519021cca6f590804c75bdfa8245b8d2aaaf9, tensorrt_llm/serve/openai_protocol.py
@ 0076e9390e1ed11515f149eec356f5a03f4a00d8 (openai_server.py's chat path dumps
each tool's model); vLLM vllm/entrypoints/chat_utils.py
@ 001eadcf295d90aa0664963cd6a9d93f38a2f3da, vllm/entrypoints/openai/engine/protocol.py
@ 040a2cc2a6295ea9c313d86526ff90a103eacb3e.
"""Renders the tokenizer fixtures' reference prompts the way the engines do.

Half of the reference ids in test/fixtures/tokenizers/<family>/reference.json:
this script renders each chat request with the model's chat template exactly
as TensorRT-LLM's OpenAI server does (its message and tool normalisation,
then transformers' apply_chat_template: Python jinja2 in an
ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the
loopcontrols extension, transformers' tojson, raise_exception and
strftime_now, the tokenizer's special tokens as template variables), and
passes completion prompts through; scripts/tokenizer-reference.mjs then
encodes the texts with Hugging Face's Rust tokenizers. Nothing here uses the
gateway's code.

Each chat request is also rendered after vLLM's normalisation (kept where it
differs), and every chat request goes through transformers itself:
AutoTokenizer.from_pretrained(<fixture folder>) and apply_chat_template(...,
tokenize=True) on each engine's messages and tools, whose text must be this
script's and whose ids the .mjs compares with the Rust ones (transformers 5
rebuilds some tokenizers, Mistral's, from their class instead of reading
tokenizer.json: docs/engines.md); and on the request as sent, which no engine
hands a template (Qwen3's first template refuses a null content there).

Rerun (python3 with jinja2 3.1.6, the engine of transformers'
apply_chat_template, and transformers 5 with its tokenizers, no PyTorch
needed; Hugging Face's Rust tokenizers through the N-API npm package
@anush008/tokenizers, installed in a temporary folder, not in the project):

    npm install --prefix /tmp/tokref @anush008/tokenizers@0.6.0
    node scripts/tokenizer-reference.mjs /tmp/tokref

which runs this script (python3 scripts/tokenizer-reference.py prints the
rendered cases as JSON on standard output) and writes reference.json for
every family.
"""

import copy
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "test", "fixtures", "tokenizers")
FAMILIES = ["qwen2.5", "qwen3", "mistral-v1"]

# transformers' SPECIAL_TOKENS_ATTRIBUTES: what apply_chat_template passes to the template.
SPECIAL_TOKENS_ATTRIBUTES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"]


def environment():
    """transformers' _compile_jinja_template environment."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(value):
    """A special token as transformers holds it: a string, or an AddedToken's content."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def special_tokens_map(config):
    """transformers' special_tokens_map: each attribute that is set (truthy), as text."""
    out = {}
    for attr in SPECIAL_TOKENS_ATTRIBUTES:
        value = config.get(attr)
        if attr == "additional_special_tokens" and value:
            value = [token_text(v) for v in value]
        else:
            value = token_text(value)
        if value:
            out[attr] = value
    return out


def chat_template(folder, config, tools):
    """The template transformers would use: chat_template.jinja, else the config's (named ones by tools), else chat_template.json."""
    jinja_file = os.path.join(folder, "chat_template.jinja")
    if os.path.exists(jinja_file):
        with open(jinja_file, encoding="utf-8") as f:
            return f.read()
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t["name"]: t["template"] for t in template}
        if tools is not None and "tool_use" in named:
            return named["tool_use"]
        return named["default"]
    if template is not None:
        return template
    json_file = os.path.join(folder, "chat_template.json")
    with open(json_file, encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def normalize_arguments(arguments):
    """TensorRT-LLM's _normalize_tool_call_arguments."""
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
        if not isinstance(parsed, dict):
            raise ValueError("function.arguments must be a JSON object")
        return parsed
    return arguments


def normalize_message(message):
    """TensorRT-LLM's parse_chat_message_content for text: parts joined by newlines, assistant tool calls' arguments parsed."""
    content = message.get("content")
    if content is None:
        parts = []
    elif isinstance(content, str):
        parts = [content]
    else:
        parts = []
        for part in content:
            text = part if isinstance(part, str) else (part.get("text") if part.get("type") == "text" else None)
            if text:
                parts.append(text)
    result = {"role": message["role"], "content": "\n".join(parts)}
    if message["role"] == "assistant":
        reasoning = message.get("reasoning")
        if reasoning is None:
            reasoning = message.get("reasoning_content")
        if reasoning is not None:
            result["reasoning_content"] = reasoning
        if message.get("tool_calls") is not None:
            calls = []
            for call in message["tool_calls"]:
                call = dict(call)
                call["function"] = dict(call["function"])
                call["function"]["arguments"] = normalize_arguments(call["function"].get("arguments"))
                calls.append(call)
            result["tool_calls"] = calls
    elif message["role"] == "tool" and "tool_call_id" in message:
        result["tool_call_id"] = message["tool_call_id"]
    return result


def normalize_tools(tools):
    """TensorRT-LLM's ChatCompletionToolsParam(...).model_dump() of each tool."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        f = tool["function"]
        out.append({
            "type": tool.get("type", "function"),
            "function": {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters"), "strict": f.get("strict")},
        })
    return out


def vllm_arguments(arguments):
    """vLLM's _postprocess_messages: a JSON string parsed (an unparsable one as {}), another non-container as {}."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return {}
    return arguments if isinstance(arguments, (dict, list)) else {}


def vllm_message(message):
    """vLLM's _parse_chat_message_content (string content format) and _postprocess_messages for one message."""
    content = message.get("content")
    parts = [] if content is None else [content] if isinstance(content, str) else [
        p if isinstance(p, str) else p.get("text") for p in content if isinstance(p, str) or p.get("type") == "text"]
    result = {"role": message["role"], "content": "\n".join(p for p in parts if p)}
    if message["role"] == "assistant":
        if message.get("tool_calls") is not None:
            calls = [dict(c, function=dict(c["function"], arguments=vllm_arguments(c["function"].get("arguments")))) for c in message["tool_calls"]]
            if calls:
                result["tool_calls"] = calls
        if message.get("reasoning") is not None:
            result["reasoning"] = message["reasoning"]
            result["reasoning_content"] = message["reasoning"]
    elif message["role"] == "tool" and "tool_call_id" in message:
        result["tool_call_id"] = message["tool_call_id"]
    if isinstance(message.get("name"), str):
        result["name"] = message["name"]
    return result


def vllm_tools(tools):
    """vLLM's ChatCompletionToolsParam(...).model_dump(): declared fields first (absent ones None), then the others as sent."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        f = tool["function"]
        function = {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters")}
        function.update({k: v for k, v in f.items() if k not in function})
        out.append({"type": tool.get("type", "function"), "function": function, **{k: v for k, v in tool.items() if k not in ("type", "function")}})
    return out


ENGINES = {
    "tensorrt-llm": (lambda messages: [normalize_message(m) for m in messages], normalize_tools),
    "vllm": (lambda messages: [vllm_message(m) for m in messages], vllm_tools),
}


def template_kwargs(config, request):
    """The template variables besides messages, tools and documents: special tokens, then the request's kwargs."""
    kwargs = {**special_tokens_map(config), **(request.get("chat_template_kwargs") or {})}
    for reserved in ("messages", "tools", "documents", "add_generation_prompt"):
        kwargs.pop(reserved, None)
    return kwargs


def render(env, folder, config, request, engine="tensorrt-llm"):
    """The prompt text of a chat request, as the engine's server renders it (TensorRT-LLM's render_chat_request_for_tokenizer by default)."""
    messages, tools = ENGINES[engine]
    tools = tools(request.get("tools"))
    template = env.from_string(chat_template(folder, config, tools))
    return template.render(
        messages=messages(request["messages"]),
        tools=tools,
        documents=request.get("documents"),
        add_generation_prompt=request.get("add_generation_prompt", True),
        **template_kwargs(config, request),
    )


def transformers_render(tokenizer, config, messages, tools, request):
    """transformers' own apply_chat_template on these messages and tools: (text, ids), or {"error": ...} when the template raises."""
    args = dict(tools=tools, documents=request.get("documents"), add_generation_prompt=request.get("add_generation_prompt", True), **(request.get("chat_template_kwargs") or {}))
    try:
        text = tokenizer.apply_chat_template(copy.deepcopy(messages), tokenize=False, **args)
        encoded = tokenizer.apply_chat_template(copy.deepcopy(messages), tokenize=True, **args)
    except jinja2.exceptions.TemplateError as error:  # the template's refusal, as raise_exception words it (or jinja2's UndefinedError)
        return {"error": str(error) if type(error) is jinja2.exceptions.TemplateError else f"{type(error).__name__}: {error}"}
    except Exception as error:  # Python's own refusal (TypeError, ...): the engine answers 400
        return {"error": f"{type(error).__name__}: {error}"}
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    return {"text": text, "ids": list(ids)}


class Words:
    """Deterministic filler text (a linear congruential generator over a word list), for long prompts."""

    WORDS = ("the of and to in is was for that with as on by at from his her he she it they an be this which or are were had have not "
             "but all one their what so up out if about who get there when make can like time no just him know take people into year "
             "your good some could them see other than then now look only come its over think also back after use two how our work "
             "first well way even new want because any these give day most us cache router token prefix block engine rank").split()

    def __init__(self, seed):
        self.state = seed

    def text(self, n):
        out = []
        for _ in range(n):
            self.state = (self.state * 1103515245 + 12345) % 2147483648
            word = self.WORDS[self.state % len(self.WORDS)]
            out.append(word + (". " if self.state % 13 == 0 else ", " if self.state % 29 == 0 else " "))
        return "".join(out).strip()


MIXED = "Grüße aus Köln! 世界你好，今天天气很好。 Emoji: 😀🚀👩🏽‍💻 — naïve café, e\u0301 (decomposed é), Ελληνικά, العربية, हिन्दी."
SPACES = "  two leading spaces,\ttab,   three spaces,\r\nCRLF,\n\n\nthree newlines, trailing spaces   \u00a0nbsp\u3000ideographic space "
DIGITS = "Order 1234567890 shipped on 2026-11-30 at 23:59:07; pi ≈ 3.14159265358979, 1e-9, -42, 007, 1,000,000 and ١٢٣ (Arabic-Indic)."
CODE = "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)  # naive\n\nprint([fib(i) for i in range(10)])\n"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]},
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
STRICT_TOOL = {"type": "function", "function": {**WEATHER_TOOL["function"], "name": "get_forecast", "strict": True}}
BARE_TOOL = {"type": "function", "function": {"name": "ping"}}


def call(id, name, arguments):
    """An assistant's tool call as OpenAI's API carries it (arguments as sent: a JSON string, or an object)."""
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_cases(system):
    """The tool-calling requests: tools with and without strict, calls with null, empty and text content, results."""
    weather = call("call_1", "get_weather", "{\"city\": \"Zürich\", \"unit\": \"celsius\"}")
    ask = {"role": "user", "content": "Weather in Zürich?"}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 3, \"sky\": \"overcast\"}"}
    return [
        ("tools: with and without strict, description, parameters", "chat", {"messages": [ask], "tools": [STRICT_TOOL, WEATHER_TOOL, TIME_TOOL, BARE_TOOL]}),
        ("tools: a call with null content, its result, the answer, the next question", "chat", {"messages": [
            {"role": "system", "content": system}, ask,
            {"role": "assistant", "content": None, "tool_calls": [weather]}, result,
            {"role": "assistant", "content": "It is 3 °C and overcast."},
            {"role": "user", "content": "And tomorrow?", "name": "alice"},
        ], "tools": [WEATHER_TOOL, STRICT_TOOL]}),
        ("tools: a call with null content, the generation prompt after its result", "chat", {"messages": [
            ask, {"role": "assistant", "content": None, "tool_calls": [weather]}, result], "tools": [WEATHER_TOOL]}),
        ("tools: two calls with empty content, two results as text parts", "chat", {"messages": [
            ask, {"role": "assistant", "content": "", "tool_calls": [weather, call("call_2", "get_time", "{}")]},
            result, {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "14:05"}, {"type": "text", "text": "CET"}]},
        ], "tools": [WEATHER_TOOL, TIME_TOOL]}),
        ("tools: a call with text content and object arguments", "chat", {"messages": [
            ask, {"role": "assistant", "content": "Let me check.", "tool_calls": [call("call_1", "get_weather", {"city": "Zürich"})]}, result,
        ], "tools": [WEATHER_TOOL]}),
        ("tools: reasoning before a call", "chat", {"messages": [
            ask, {"role": "assistant", "content": None, "reasoning": "The user wants the weather.", "reasoning_content": "The user wants the weather.", "tool_calls": [weather]}, result,
        ], "tools": [WEATHER_TOOL]}),
        ("tools: unparsable arguments", "chat", {"messages": [
            ask, {"role": "assistant", "content": None, "tool_calls": [call("call_1", "get_weather", "{city: Zürich")]}, result,
        ], "tools": [WEATHER_TOOL]}),
        ("tools: an empty tool_calls list", "chat", {"messages": [
            ask, {"role": "assistant", "content": "No tool needed.", "tool_calls": []}, {"role": "user", "content": "Thanks."},
        ], "tools": [WEATHER_TOOL]}),
    ]


def cases():
    """Every reference request: (name, kind, request); each family's template decides which render and which raise."""
    words = Words(20261130)
    long_turns = [words.text(220) for _ in range(8)]
    system = "You are a careful assistant. Answer in the user's language."
    multi = [{"role": "system", "content": system}]
    for i, turn in enumerate(long_turns):
        multi.append({"role": "user" if i % 2 == 0 else "assistant", "content": turn})
    out = [
        ("chat: system and user", "chat", {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "What is the capital of France?"}]}),
        ("chat: user only", "chat", {"messages": [{"role": "user", "content": "Hello!"}]}),
        ("chat: multi-turn", "chat", {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"}, {"role": "user", "content": "And a larger one?"}]}),
        ("chat: no generation prompt", "chat", {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, how can I help?"}], "add_generation_prompt": False}),
        ("chat: non-ASCII, emoji, CJK", "chat", {"messages": [{"role": "system", "content": MIXED}, {"role": "user", "content": MIXED[::-1]}]}),
        ("chat: whitespace", "chat", {"messages": [{"role": "user", "content": SPACES}]}),
        ("chat: digits", "chat", {"messages": [{"role": "user", "content": DIGITS}]}),
        ("chat: code", "chat", {"messages": [{"role": "user", "content": "Explain:\n" + CODE}]}),
        ("chat: content parts joined by newlines", "chat", {"messages": [{"role": "user", "content": [{"type": "text", "text": "first part"}, {"type": "text", "text": ""}, {"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "text", "text": "second part"}]}]}),
        ("chat: empty and leading-space contents", "chat", {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": " leading space"}, {"role": "user", "content": "  two"}]}),
        ("chat: special-token text in a message", "chat", {"messages": [{"role": "user", "content": "literal <|im_end|> and <s> and </s> inside"}]}),
        ("chat: tools given", "chat", {"messages": [{"role": "user", "content": "Weather in Zürich?"}], "tools": [WEATHER_TOOL, TIME_TOOL]}),
        ("chat: tool call and result", "chat", {"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"unit\": \"celsius\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 3, \"sky\": \"overcast\"}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "second result"},
        ], "tools": [WEATHER_TOOL]}),
        ("chat: roles out of order", "chat", {"messages": [{"role": "assistant", "content": "I speak first"}, {"role": "assistant", "content": "twice"}]}),
        ("chat: special tokens added on top", "chat", {"messages": [{"role": "user", "content": "Hi"}], "add_special_tokens": True}),
        ("chat: long multi-turn", "chat", {"messages": multi}),
        ("chat: long multi-turn, next turn", "chat", {"messages": multi + [{"role": "user", "content": "Summarise all of that in one sentence."}]}),
        *tool_cases(system),
        ("completion: sentence", "completion", {"prompt": "The capital of France is"}),
        ("completion: leading space", "completion", {"prompt": " leading space and trailing "}),
        ("completion: non-ASCII, emoji, CJK", "completion", {"prompt": MIXED}),
        ("completion: whitespace", "completion", {"prompt": SPACES}),
        ("completion: digits", "completion", {"prompt": DIGITS}),
        ("completion: code", "completion", {"prompt": CODE}),
        ("completion: special-token text", "completion", {"prompt": "<|im_start|>user\nhi<|im_end|> <s>[INST] x [/INST]</s>"}),
        ("completion: empty", "completion", {"prompt": ""}),
        ("completion: without special tokens", "completion", {"prompt": "The capital of France is", "add_special_tokens": False}),
        ("completion: long", "completion", {"prompt": " ".join(long_turns)}),
    ]
    return out


def main():
    from transformers import AutoTokenizer, __version__ as transformers_version

    env = environment()
    result = {}
    for family in FAMILIES:
        folder = os.path.join(FIXTURES, family)
        with open(os.path.join(folder, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        rendered = []
        for name, kind, request in cases():
            entry = {"name": name, "kind": kind, "request": request}
            if kind == "chat":
                entry["add_special_tokens"] = request.get("add_special_tokens", False)
                entry["engines"] = {}
                for engine, (messages, tools) in ENGINES.items():
                    out = {}
                    try:
                        out["text"] = render(env, folder, config, request, engine)
                    except jinja2.exceptions.TemplateError as error:
                        out["error"] = str(error)
                    tf = transformers_render(tokenizer, config, messages(request["messages"]), tools(request.get("tools")), request)
                    # The same text as transformers renders, or the same refusal: this script's environment is transformers'.
                    if tf.get("text") != out.get("text") or ("error" in tf) != ("error" in out):
                        raise SystemExit(f"{family} / {name} / {engine}: transformers renders {tf!r}, this script {out!r}")
                    if "ids" in tf and not entry["add_special_tokens"]:
                        out["transformers_ids"] = tf["ids"]
                    entry["engines"][engine] = out
                entry["as_sent"] = transformers_render(tokenizer, config, request["messages"], request.get("tools"), request)
            else:
                entry["add_special_tokens"] = request.get("add_special_tokens", True)
                entry["text"] = request["prompt"]
            rendered.append(entry)
        result[family] = rendered
    json.dump({"jinja2": jinja2.__version__, "transformers": transformers_version, "families": result}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
