// The engines' own tokenizers: a Hugging Face tokenizer (tokenizer.json,
// tokenizer_config.json, the chat template) as a gateway Tokenizer, so the
// token ids the gateway routes by are the ids the engine computes and caches.
// Chat requests are rendered with the model's chat template (chat-template.ts)
// and encoded without adding special tokens (the engines' default: the
// template holds them); completion prompts are encoded with them, as the
// engines do; token-id prompts are taken as given. @huggingface/tokenizers
// encodes, checked id for id against Hugging Face's Rust tokenizers on each
// fixture family (test/serve/hf-tokenizer.test.ts).
//
// Two things make it affordable (README, "The engines' tokenizers"):
// - Segments. Added tokens (the template's special tokens, mostly) are split
//   out before anything else and never merged with their neighbours, so the
//   text between two of them (a message, mostly) encodes the same alone as
//   within the prompt. Each segment's ids are kept in a bounded LRU (found by
//   a fingerprint, confirmed by the text): a conversation's next turn encodes
//   only what is new.
// - Words, for a SentencePiece BPE without pre-tokenizer (Mistral, Llama 2,
//   Gemma style): the library runs BPE over a whole segment as one word (~20
//   to 30 ms per 2,000 tokens). Where no vocabulary piece holds "▁" after the
//   character before a "▁", no merge can join the two sides, so the segment
//   is cut there and each word merged alone: the same ids, and the library's
//   per-word cache applies (~1.5 ms).
// Both are checked against a plain encode of a probe text when the tokenizer
// is built, and turned off for a tokenizer on which they would differ.
//
// Platform-neutral (no node: imports): it runs in browsers too. Reading the
// files from a folder is tokenizer-config.ts's job.

import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { CHAT_ENGINES, type ChatEngine } from "./chat-inputs.js";
import { ChatTemplate, chatTemplateSource, flag } from "./chat-template.js";
import { TokenPool, type ChatMessage, type RequestFields, type Tokenizer } from "./tokenizer.js";

/** A model's tokenizer files, parsed (tokenizer-config.ts reads them from a folder). */
export interface HuggingFaceTokenizerFiles {
  /** tokenizer.json. */
  readonly tokenizer: unknown;
  /** tokenizer_config.json. */
  readonly config: unknown;
  /** chat_template.jinja's text, where the model keeps its template there. */
  readonly chatTemplateJinja?: string | null;
  /** chat_template.json, parsed, where the model keeps its template there. */
  readonly chatTemplateJson?: unknown;
}

/** Options of {@link HuggingFaceTokenizer}. */
export interface HuggingFaceTokenizerOptions {
  /** The name in logs (default: "huggingface"). */
  readonly name?: string;
  /** Memory the segment cache may hold, in bytes (estimated: text and ids); 0 turns it off. Default 16 MiB. */
  readonly cacheBytes?: number;
  /** The engine whose normalisation of chat messages and tools the rendering follows (chat-inputs.ts); default "tensorrt-llm". */
  readonly engine?: ChatEngine;
}

/** A tokenizer's files that cannot make a tokenizer; names the file. */
export class TokenizerFilesError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_TOKENIZER_FILES";
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
    this.name = "TokenizerFilesError";
  }
}

/** Default segment cache budget. */
const CACHE_BYTES = 16 << 20;
/** Bytes a cached segment costs besides its text (2 bytes a code unit) and ids (4 bytes each): map entry, string and array headers. */
const ENTRY_OVERHEAD = 160;
/** Most characters a vocabulary may hold before an inner "▁" for words to apply (each is a place words are not cut). */
const MAX_JOINING = 32;

/**
 * Where a SentencePiece segment may be cut into words, or null: before each
 * "▁" that follows a character X such that no piece holds X then "▁" (no
 * merge can then join the two sides; Gemma 3's vocabulary has one such piece,
 * ">▁</", Mistral's none).
 */
function wordStarts(pieces: readonly string[]): RegExp | null {
  const joining = new Set<string>();
  for (const piece of pieces) {
    if (piece.indexOf("\u2581", 1) < 0) continue; // most pieces: none, or only leading
    let before = "";
    for (const c of piece) {
      if (c === "\u2581" && before !== "" && before !== "\u2581") joining.add(before);
      before = c;
    }
  }
  if (joining.size > MAX_JOINING) return null;
  const excluded = ["\u2581", ...joining].map((c) => c.replace(/[\\\]^-]/g, "\\$&")).join("");
  return new RegExp(`(?<=[^${excluded}])(?=\u2581)`, "u");
}

/** The probe text's pieces, joined by special tokens to check segments and words against a plain encode. */
const PROBE = [
  "Hello, world! The quick brown fox jumps over the lazy dog.",
  "  two leading spaces\tand a tab\n\nthen lines\r\n",
  " leading space, digits 1234567890 and 3.14159, code: x = f(y) ** 2;",
  "Grüße, naïve café, e\u0301, 世界你好, 😀👩🏽‍💻, Ελληνικά, العربية",
  "trailing spaces   ",
  "",
  "end",
];

/** An object, or throws TokenizerFilesError naming `file`. */
function object(v: unknown, file: string): Record<string, unknown> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new TokenizerFilesError(file, "must hold a JSON object");
  return v as Record<string, unknown>;
}

/** Escapes `text` for a regular expression. */
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Whether a pre-tokenizer (or one in a Sequence) treats a prompt's first section apart: Metaspace with prepend_scheme "first". */
function firstSectionApart(pre: unknown): boolean {
  const p = pre as { type?: unknown; prepend_scheme?: unknown; pretokenizers?: unknown } | null;
  if (p === null || typeof p !== "object") return false;
  if (p.type === "Metaspace" && p.prepend_scheme === "first") return true;
  return Array.isArray(p.pretokenizers) && p.pretokenizers.some(firstSectionApart);
}

/** A node of the added tokens' trie: children by UTF-16 code unit, and the id of the token ending here (-1: none). */
interface TrieNode {
  /** Children by the next code unit. */
  readonly next: Map<number, TrieNode>;
  /** The id of the token ending here, or -1. */
  id: number;
}

/**
 * Finds added tokens in a text as Hugging Face's tokenizers split them out:
 * leftmost, then longest (their Aho-Corasick match kind). A trie walked from
 * each position where a token may start (a regular expression finds those):
 * a model has up to thousands of added tokens (Gemma 3: 6,415), too many for
 * one alternation.
 */
class AddedTokenMatcher {
  readonly #root: TrieNode = { next: new Map(), id: -1 };
  /** Matches a code unit that starts some token (global; no u flag: units, not code points). */
  readonly #starts: RegExp;

  /** The trie of `tokens` (their texts and ids). */
  constructor(tokens: readonly { readonly content: string; readonly id: number }[]) {
    const first = new Set<number>();
    for (const { content, id } of tokens) {
      let node = this.#root;
      for (let i = 0; i < content.length; i++) {
        const unit = content.charCodeAt(i);
        let child = node.next.get(unit);
        if (child === undefined) node.next.set(unit, (child = { next: new Map(), id: -1 }));
        node = child;
      }
      node.id = id;
      first.add(content.charCodeAt(0));
    }
    this.#starts = new RegExp(`[${[...first].map((u) => `\\u${u.toString(16).padStart(4, "0")}`).join("")}]`, "g");
  }

  /** The first added token at or after `from`: where it starts, its length, its id; or null. */
  next(text: string, from: number): { index: number; length: number; id: number } | null {
    this.#starts.lastIndex = from;
    for (let m = this.#starts.exec(text); m !== null; m = this.#starts.exec(text)) {
      let node: TrieNode | undefined = this.#root;
      let found: { index: number; length: number; id: number } | null = null;
      for (let i = m.index; i < text.length; i++) {
        node = node.next.get(text.charCodeAt(i));
        if (node === undefined) break;
        if (node.id >= 0) found = { index: m.index, length: i + 1 - m.index, id: node.id };
      }
      if (found !== null) return found;
      this.#starts.lastIndex = m.index + 1;
    }
    return null;
  }
}

/** A cached segment: its text (to tell it from another of the same fingerprint), its ids, its estimated bytes. */
interface CachedSegment {
  readonly text: string;
  readonly ids: Uint32Array;
  readonly cost: number;
}

/** Characters sampled across a long segment for its fingerprint. */
const SAMPLES = 64;

/**
 * The cache key of a segment: a short one's own text; a long one's length and
 * characters sampled across it, so a lookup hashes ~100 characters rather
 * than a whole system prompt (~14 µs for 9 KB); the text is then compared
 * (memcmp-fast) to tell segments of one fingerprint apart. `apart`: a segment
 * that does not start the prompt, for a pre-tokenizer that treats the first
 * one apart.
 */
function fingerprint(text: string, apart: boolean): string {
  const tag = apart ? "\u0001" : "\u0002";
  const n = text.length;
  if (n <= 2 * SAMPLES) return tag + text;
  const codes = new Array<number>(SAMPLES);
  for (let i = 0; i < SAMPLES; i++) codes[i] = text.charCodeAt(Math.floor((i * (n - 1)) / (SAMPLES - 1)));
  return `${tag}${n}:${String.fromCharCode(...codes)}${text.slice(0, 24)}${text.slice(-24)}`;
}

/** An added token as tokenizer.json writes it. */
interface AddedToken {
  readonly id: number;
  readonly content: string;
  readonly special?: boolean;
  readonly lstrip?: boolean;
  readonly rstrip?: boolean;
  readonly single_word?: boolean;
  readonly normalized?: boolean;
}

/**
 * A Hugging Face tokenizer as a gateway Tokenizer (see the file's header).
 * Returned ids may be pooled: hand them back with `release` once done.
 */
export class HuggingFaceTokenizer implements Tokenizer {
  /** The name in logs. */
  readonly name: string;
  /** Whether prompts are encoded segment by segment (and segments cached); false when the probe showed a difference. */
  readonly segmented: boolean;
  /** Whether SentencePiece segments are merged word by word; false when not exact for this vocabulary. */
  readonly wordwise: boolean;
  /** The library's tokenizer. */
  readonly #hf: HfTokenizer;
  /** The model's chat template. */
  readonly #template: ChatTemplate;
  /** Finds the added tokens a prompt is cut at, or null when there are none. */
  readonly #boundaries: AddedTokenMatcher | null;
  /** The boundary tokens' texts (the probe is joined with one). */
  readonly #boundaryTexts: readonly string[];
  /** Matches any other added token (a segment holding one is left to the library whole), or null. */
  readonly #otherAdded: RegExp | null;
  /** A boundary token prepended to a segment that does not start the prompt, for a pre-tokenizer that treats the first section apart; else null. */
  readonly #sentinel: string | null;
  /** What add_special_tokens puts around a text's ids (from the post-processor), or null when it is not a fixed prefix and suffix. */
  readonly #wrap: { readonly prefix: readonly number[]; readonly suffix: readonly number[] } | null;
  /** The unknown token's id (for a word the vocabulary lacks, which byte fallback normally prevents). */
  readonly #unkId: number;
  /** Where words start (wordStarts), or null when they cannot be cut exactly. */
  readonly #wordStarts: RegExp | null;
  /** The segment cache's budget in bytes. */
  readonly #cacheBytes: number;
  /** Cached segments by fingerprint (a Map in use order: the first key is the least recently used). */
  readonly #cache = new Map<string, CachedSegment>();
  /** What the cached segments cost now (estimated). */
  #cachedBytes = 0;
  /** Where returned ids live (see TokenPool). */
  readonly #pool = new TokenPool();
  /** Segment cache hits and misses, and the characters the misses made it encode (for the bench and tests). */
  readonly stats = { hits: 0, misses: 0, missedChars: 0 };

  /** Builds the tokenizer; throws TokenizerFilesError (or ChatTemplateSyntaxError) naming the file at fault. */
  constructor(files: HuggingFaceTokenizerFiles, options: HuggingFaceTokenizerOptions = {}) {
    this.name = options.name ?? "huggingface";
    this.#cacheBytes = options.cacheBytes ?? CACHE_BYTES;
    const json = object(files.tokenizer, "tokenizer.json");
    const config = object(files.config, "tokenizer_config.json");
    if (json.model === null || typeof json.model !== "object" || Array.isArray(json.model)) throw new TokenizerFilesError("tokenizer.json", "has no model (is it a tokenizer.json?)");
    try {
      this.#hf = new HfTokenizer(json, config);
    } catch (error) {
      throw new TokenizerFilesError("tokenizer.json", `is not a tokenizer this gateway can load: ${(error as Error).message}`);
    }
    const engine = options.engine ?? "tensorrt-llm";
    if (!CHAT_ENGINES.includes(engine)) throw new TypeError(`engine must be one of ${CHAT_ENGINES.join(", ")}, got ${String(engine)}`);
    this.#template = new ChatTemplate(chatTemplateSource(config, files.chatTemplateJinja ?? null, files.chatTemplateJson ?? null), config, engine);

    const added = Array.isArray(json.added_tokens) ? (json.added_tokens as AddedToken[]) : [];
    // Added tokens matched on the raw text that change nothing around them cut a prompt into segments;
    // others (stripping their neighbours' spaces, matched on normalised text) are left to the library.
    const cutting = added.filter((t) => !t.lstrip && !t.rstrip && !t.single_word && !(t.normalized ?? !t.special) && t.content !== "");
    const cuts = new Set(cutting);
    const others = added.filter((t) => !cuts.has(t) && t.content !== "");
    this.#boundaries = cutting.length > 0 ? new AddedTokenMatcher(cutting) : null;
    this.#boundaryTexts = [...cutting.filter((t) => t.special), ...cutting.filter((t) => !t.special)].map((t) => t.content);
    this.#otherAdded = others.length > 0 ? new RegExp(others.map((t) => escape(t.content)).join("|")) : null;
    this.#sentinel = firstSectionApart(json.pre_tokenizer) ? (this.#boundaryTexts[0] ?? null) : null;
    this.#unkId = this.#hf.model?.unk_token_id ?? 0;

    const model = json.model as { type?: unknown; vocab?: unknown; ignore_merges?: unknown; dropout?: unknown; continuing_subword_prefix?: unknown; end_of_word_suffix?: unknown };
    const vocab = model.vocab !== null && typeof model.vocab === "object" && !Array.isArray(model.vocab) ? Object.keys(model.vocab) : [];
    // A pre-tokenizer that only splits at spaces does nothing once the normaliser has made every space a "▁" (Gemma 3's).
    const spaces = json.pre_tokenizer as { type?: unknown; pattern?: { String?: unknown } } | null | undefined;
    const noSpacesLeft = this.#hf.normalizer !== null && !this.#hf.normalizer(" a b ").includes(" ");
    const splitsNothing = spaces === null || spaces === undefined || (spaces.type === "Split" && spaces.pattern?.String === " " && noSpacesLeft);
    this.#wordStarts = vocab.includes("\u2581") ? wordStarts(vocab) : null;
    let wordwise =
      splitsNothing &&
      this.#wordStarts !== null &&
      model.type === "BPE" &&
      !model.ignore_merges &&
      !model.dropout &&
      !model.continuing_subword_prefix &&
      !model.end_of_word_suffix &&
      config.remove_space !== true &&
      config.do_lowercase_and_remove_accent !== true &&
      !added.some((t) => t.normalized ?? !t.special); // the library matches those on normalised text, across words

    // The shortcuts must give a plain encode's ids on the probe: words are dropped first, then segments.
    const probe = PROBE.join(this.#boundaryTexts[0] ?? "");
    const plain: number[] = this.#hf.encode(probe, { add_special_tokens: false }).ids;
    const matches = () => {
      const ids = this.#encodeText(probe, false, false);
      return ids.length === plain.length && plain.every((x, i) => ids[i] === x);
    };
    this.wordwise = wordwise;
    if (wordwise && !matches()) this.wordwise = wordwise = false;
    this.segmented = matches();
    this.#wrap = this.#findWrap();
  }

  /** The engine whose normalisation of chat messages and tools the rendering follows. */
  get engine(): ChatEngine {
    return this.#template.engine;
  }

  /** Whether the model has a chat template (without one, chat requests are refused, as the engine refuses them). */
  get hasChatTemplate(): boolean {
    return this.#template.present;
  }

  /** The prompt text of a chat request: its messages rendered with the model's chat template. */
  render(messages: readonly ChatMessage[], request?: RequestFields): string {
    return this.#template.render(messages, request);
  }

  /** The chat request's ids: rendered, then encoded without adding special tokens unless the body's add_special_tokens says so. */
  encodeChat(messages: readonly ChatMessage[], request?: RequestFields): Uint32Array {
    const text = this.#template.render(messages, request);
    return this.#encode(text, flag(request, "add_special_tokens", false), true);
  }

  /** A completion prompt's ids: encoded with special tokens unless the body's add_special_tokens says otherwise; ids as given. */
  encodePrompt(prompt: string | readonly number[], request?: RequestFields): Uint32Array {
    if (typeof prompt !== "string") {
      const ids = this.#pool.take(prompt.length);
      ids.set(prompt);
      return ids;
    }
    // A completion's prompt is mostly one long segment seen once: not worth a place in the cache.
    return this.#encode(prompt, flag(request, "add_special_tokens", true), false);
  }

  /** Token ids of `text` as the library gives them, without the segment cache or words (for tests and the bench). */
  encodeUncached(text: string, addSpecialTokens: boolean): number[] {
    return this.#hf.encode(text, { add_special_tokens: addSpecialTokens }).ids;
  }

  /** Takes back ids this tokenizer returned (see TokenPool). */
  release(ids: Uint32Array): void {
    this.#pool.release(ids);
  }

  /** Empties the segment cache (the bench measures cold and warm encodes). */
  clearCache(): void {
    this.#cache.clear();
    this.#cachedBytes = 0;
  }

  /** `text`'s ids into pooled memory, with the post-processor's special tokens when `addSpecial`. */
  #encode(text: string, addSpecial: boolean, cache: boolean): Uint32Array {
    if (addSpecial && this.#wrap === null) return this.#pooled(this.#hf.encode(text, { add_special_tokens: true }).ids);
    const body = this.segmented ? this.#encodeText(text, cache, true) : this.#hf.encode(text, { add_special_tokens: false }).ids;
    if (!addSpecial) return Array.isArray(body) ? this.#pooled(body) : (body as Uint32Array);
    const { prefix, suffix } = this.#wrap!;
    const ids = this.#pool.take(prefix.length + body.length + suffix.length);
    ids.set(prefix);
    ids.set(body, prefix.length);
    ids.set(suffix, prefix.length + body.length);
    if (!Array.isArray(body)) this.#pool.release(body as Uint32Array);
    return ids;
  }

  /** `ids` copied into pooled memory. */
  #pooled(ids: readonly number[]): Uint32Array {
    const out = this.#pool.take(ids.length);
    out.set(ids);
    return out;
  }

  /**
   * `text`'s ids (no post-processing), segment by segment: the text between
   * two boundary tokens (added tokens) is encoded alone (or found in the
   * cache), each boundary token is its id. `pooled`: into pooled memory, else a fresh array.
   */
  #encodeText(text: string, cache: boolean, pooled: boolean): Uint32Array | number[] {
    const pieces: (Uint32Array | number)[] = [];
    let total = 0;
    let at = 0;
    const boundaries = this.#boundaries;
    for (let m = boundaries?.next(text, 0) ?? null; m !== null; m = boundaries!.next(text, at)) {
      if (m.index > at) {
        const ids = this.#segment(text.slice(at, m.index), at === 0, cache);
        pieces.push(ids);
        total += ids.length;
      }
      pieces.push(m.id);
      total++;
      at = m.index + m.length;
    }
    if (at < text.length) {
      const ids = this.#segment(text.slice(at), at === 0, cache);
      pieces.push(ids);
      total += ids.length;
    }
    const out = pooled ? this.#pool.take(total) : new Uint32Array(total);
    let k = 0;
    for (const p of pieces) {
      if (typeof p === "number") out[k++] = p;
      else {
        out.set(p, k);
        k += p.length;
      }
    }
    return out;
  }

  /** One segment's ids: from the cache, or encoded (and cached when `cache`). */
  #segment(text: string, first: boolean, cache: boolean): Uint32Array {
    // A pre-tokenizer that treats the first section apart encodes the same text differently there: key them apart.
    const apart = this.#sentinel !== null && !first;
    const key = cache && this.#cacheBytes > 0 ? fingerprint(text, apart) : null;
    if (key !== null) {
      const hit = this.#cache.get(key);
      if (hit !== undefined && hit.text === text) {
        this.stats.hits++;
        this.#cache.delete(key); // to the most recently used end
        this.#cache.set(key, hit);
        return hit.ids;
      }
      this.stats.misses++;
      this.stats.missedChars += text.length;
    }
    let ids: Uint32Array;
    if (apart) ids = Uint32Array.from(this.#hf.encode(this.#sentinel + text, { add_special_tokens: false }).ids.slice(1));
    else ids = Uint32Array.from(this.#segmentIds(text, this.wordwise));
    if (key !== null) this.#remember(key, text, ids);
    return ids;
  }

  /** A segment's ids from the library: whole, or word by word (see the file's header) when `wordwise` and it holds no added token. */
  #segmentIds(text: string, wordwise: boolean): number[] {
    if (!wordwise || this.#otherAdded?.test(text)) return this.#hf.encode(text, { add_special_tokens: false }).ids;
    const normalizer = this.#hf.normalizer;
    const normalized = normalizer === null ? text : normalizer(text);
    if (normalized.length === 0) return [];
    const model = this.#hf.model!;
    const tokens: string[] = model(normalized.split(this.#wordStarts!));
    return tokens.map((t) => model.tokens_to_ids.get(t) ?? this.#unkId);
  }

  /** Caches a segment's ids under its fingerprint (replacing a segment that shares it), evicting the least recently used past the budget. */
  #remember(key: string, text: string, ids: Uint32Array): void {
    const cost = text.length * 2 + ids.byteLength + ENTRY_OVERHEAD;
    if (cost > this.#cacheBytes / 4) return; // one huge segment must not flush the others
    const replaced = this.#cache.get(key);
    if (replaced !== undefined) {
      this.#cache.delete(key);
      this.#cachedBytes -= replaced.cost;
    }
    // A copy: the segment is a slice of the whole rendered prompt, which it would otherwise keep alive.
    this.#cache.set(key, { text: `\u0000${text}`.slice(1), ids, cost });
    this.#cachedBytes += cost;
    for (const [k, v] of this.#cache) {
      if (this.#cachedBytes <= this.#cacheBytes) break;
      this.#cache.delete(k);
      this.#cachedBytes -= v.cost;
    }
  }

  /**
   * The ids add_special_tokens puts before and after a text's (BOS for a
   * Llama-style template, nothing for a byte-level one), found by encoding
   * two probes both ways; null when they are not a fixed prefix and suffix
   * (then such requests go to the library whole).
   */
  #findWrap(): { prefix: number[]; suffix: number[] } | null {
    let found: { prefix: number[]; suffix: number[] } | null = null;
    for (const text of ["probe", PROBE[0]!]) {
      const bare: number[] = this.#hf.encode(text, { add_special_tokens: false }).ids;
      const full: number[] = this.#hf.encode(text, { add_special_tokens: true }).ids;
      let at = -1;
      for (let i = 0; i + bare.length <= full.length && at < 0; i++) if (bare.every((x, j) => full[i + j] === x)) at = i;
      if (at < 0) return null;
      const wrap = { prefix: full.slice(0, at), suffix: full.slice(at + bare.length) };
      if (found !== null && (found.prefix.join() !== wrap.prefix.join() || found.suffix.join() !== wrap.suffix.join())) return null;
      found = wrap;
    }
    return found;
  }
}
