// Writes test/fixtures/tokenizers/<family>/reference.json: the token ids the
// engines would compute for each reference prompt, obtained independently of
// the gateway's code. scripts/tokenizer-reference.py renders the chat requests
// with Python's jinja2 as transformers' apply_chat_template does (after
// TensorRT-LLM's message and tool normalisation); this script encodes the
// texts with Hugging Face's Rust tokenizers (the crate `tokenizers` 0.22,
// through the N-API package @anush008/tokenizers), as the engines' fast
// tokenizers do: chat texts without adding special tokens (the engines'
// default add_special_tokens=False: the template holds them), completion
// prompts with them (add_special_tokens=True), unless the request says
// otherwise.
//
// Rerun (needs python3 with jinja2; the Rust binding goes in a temporary
// folder, not in the project):
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
for (const [family, cases] of Object.entries(rendered.families)) {
  const folder = path.join(root, "test", "fixtures", "tokenizers", family);
  const tokenizer = Tokenizer.fromFile(path.join(folder, "tokenizer.json"));
  const out = [];
  for (const c of cases) {
    if (c.error !== undefined) {
      out.push({ name: c.name, kind: c.kind, request: c.request, error: c.error });
      continue;
    }
    const encoding = await tokenizer.encode(c.text, null, { addSpecialTokens: c.add_special_tokens });
    out.push({ name: c.name, kind: c.kind, request: c.request, ...(c.kind === "chat" ? { rendered: c.text } : {}), ids: Array.from(encoding.getIds()) });
  }
  const reference = {
    family,
    how: `chat: TensorRT-LLM's normalisation + transformers' apply_chat_template rendered by Python jinja2 ${rendered.jinja2}; ids: Hugging Face tokenizers (Rust) via @anush008/tokenizers@${bindingVersion}; scripts/tokenizer-reference.mjs`,
    cases: out,
  };
  writeFileSync(path.join(folder, "reference.json"), JSON.stringify(reference, null, 1) + "\n");
  console.log(`${family}: ${out.length} cases (${out.filter((c) => c.error !== undefined).length} the template refuses)`);
}
