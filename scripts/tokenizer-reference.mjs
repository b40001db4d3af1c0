// Writes test/fixtures/tokenizers/<family>/reference.json: the token ids the
// engines would compute for each reference prompt, obtained independently of
// the gateway's code. scripts/tokenizer-reference.py renders the chat requests
// with Python's jinja2 as transformers' apply_chat_template does (after
// TensorRT-LLM's message and tool normalisation, and after vLLM's), checked
// against transformers' own apply_chat_template; this script encodes the
// texts with Hugging Face's Rust tokenizers (the crate `tokenizers` 0.22,
// through the N-API package @anush008/tokenizers), as the engines' fast
// tokenizers do (both engines pin transformers 4, which reads tokenizer.json
// as it is): chat texts without adding special tokens (the engines' default
// add_special_tokens=False: the template holds them), completion prompts with
// them (add_special_tokens=True), unless the request says otherwise.
//
// Each chat case holds TensorRT-LLM's rendering and ids (`rendered`, `ids`, or
// the template's refusal, `error`); `vllm` where vLLM's differ; `as_sent`
// (text or refusal) where transformers on the request as the client sent it
// differs (no engine renders that); `transformers_ids` where transformers' own tokenize=True ids
// differ from the Rust ones (transformers 5 rebuilds Mistral's tokenizer from
// its class: docs/engines.md).
//
// Rerun (needs python3 with jinja2 and transformers; the Rust binding goes in
// a temporary folder, not in the project):
//
//   npm install --prefix /tmp/tokref @anush008/tokenizers@0.6.0
//   node scripts/tokenizer-reference.mjs /tmp/tokref

import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const prefix = process.argv[2];
if (!prefix) {
  console.error("usage: node scripts/tokenizer-reference.mjs PREFIX (the folder @anush008/tokenizers was installed into; see the header)");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(prefix), "node_modules", "index.js"));
const { Tokenizer } = require("@anush008/tokenizers");
const bindingVersion = require("@anush008/tokenizers/package.json").version;

const rendered = JSON.parse(execFileSync("python3", [path.join(root, "scripts", "tokenizer-reference.py")], { encoding: "utf8", maxBuffer: 64 << 20 }));
/** A rendering's fields in reference.json: its text and Rust ids (and transformers' where they differ), or the refusal. */
async function encoded(tokenizer, r, addSpecialTokens) {
  if (r.error !== undefined) return { error: r.error };
  const ids = Array.from((await tokenizer.encode(r.text, null, { addSpecialTokens })).getIds());
  const tf = r.transformers_ids ?? r.ids;
  return { rendered: r.text, ids, ...(tf !== undefined && tf.join() !== ids.join() ? { transformers_ids: tf } : {}) };
}

const same = (a, b) => a.rendered === b.rendered && a.error === b.error;

for (const [family, cases] of Object.entries(rendered.families)) {
  const folder = path.join(root, "test", "fixtures", "tokenizers", family);
  const tokenizer = Tokenizer.fromFile(path.join(folder, "tokenizer.json"));
  const out = [];
  let differ = 0;
  for (const c of cases) {
    if (c.kind !== "chat") {
      const encoding = await tokenizer.encode(c.text, null, { addSpecialTokens: c.add_special_tokens });
      out.push({ name: c.name, kind: c.kind, request: c.request, ids: Array.from(encoding.getIds()) });
      continue;
    }
    const trt = await encoded(tokenizer, c.engines["tensorrt-llm"], c.add_special_tokens);
    const vllm = await encoded(tokenizer, c.engines.vllm, c.add_special_tokens);
    const asSent = await encoded(tokenizer, c.as_sent, false);
    if (trt.transformers_ids !== undefined) differ++;
    out.push({
      name: c.name,
      kind: c.kind,
      request: c.request,
      ...trt,
      ...(same(vllm, trt) && vllm.ids?.join() === trt.ids?.join() ? {} : { vllm }),
      ...(same(asSent, trt) ? {} : { as_sent: asSent.error !== undefined ? { error: asSent.error } : { rendered: asSent.rendered } }),
    });
  }
  const reference = {
    family,
    how: `chat: TensorRT-LLM's (and vLLM's) normalisation + transformers' apply_chat_template rendered by Python jinja2 ${rendered.jinja2}, checked against transformers ${rendered.transformers}; ids: Hugging Face tokenizers (Rust) via @anush008/tokenizers@${bindingVersion}, compared with transformers' own; scripts/tokenizer-reference.mjs`,
    cases: out,
  };
  writeFileSync(path.join(folder, "reference.json"), JSON.stringify(reference, null, 1) + "\n");
  console.log(`${family}: ${out.length} cases (${out.filter((c) => c.error !== undefined).length} the template refuses, ${out.filter((c) => c.vllm !== undefined).length} vLLM renders otherwise, ${differ} where transformers ${rendered.transformers}'s ids differ)`);
}
