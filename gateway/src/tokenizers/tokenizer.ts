// How the gateway turns a request's prompt into the token ids it routes by.
// The seam for the engines' own tokenizers (HuggingFaceTokenizer,
// gateway/src/tokenizers/hf-tokenizer.ts); this file ships the UTF-8 byte tokenizer over a
// canonical rendering of the request, which gives equal token prefixes to
// equal prompt prefixes: all prefix affinity needs.

import type { TokenIds } from "adp-router";

/** A chat message as OpenAI's API carries it. */
export interface ChatMessage {
  readonly role: string;
  readonly content: unknown;
  readonly name?: unknown;
}

/**
 * The rest of a request's body, as received (parsed, unchecked): what an
 * engine's tokenizer reads besides the prompt (`tools`, `documents`,
 * `add_generation_prompt`, `add_special_tokens`, `chat_template_kwargs`).
 */
export type RequestFields = Readonly<Record<string, unknown>>;

/**
 * A request's long string literals a reader set aside (requests/long-literals.ts):
 * where a prompt's text is a placeholder, its UTF-8 bytes.
 */
export interface LiteralSource {
  /** The UTF-8 bytes `s` stands for, or null when it is no placeholder. */
  bytesOf(s: string): Buffer | null;
}

/** Turns prompts into token ids. Implementations must be deterministic. */
export interface Tokenizer {
  /** A short name for logs and metrics. */
  readonly name: string;
  /**
   * Whether it takes a prompt's long texts as their bytes (`literals`): a
   * reader then sets them aside instead of parsing them into strings. Only a
   * tokenizer whose ids are a text's UTF-8 bytes can.
   */
  readonly readsLiterals?: boolean;
  /**
   * Token ids of a chat request's messages, as the engine would see them;
   * `request` is the body's other fields (a tokenizer that renders a chat
   * template reads its tools and options there). Throws
   * TokenizerRequestError for a request it cannot tokenize. With
   * `readsLiterals`, a message's content (or a text part's text) may be a
   * placeholder whose bytes `literals` has.
   */
  encodeChat(messages: readonly ChatMessage[], request?: RequestFields, literals?: LiteralSource): TokenIds;
  /** Token ids of a completion request's prompt (a string, or token ids as given); `request` and `literals` as for encodeChat. */
  encodePrompt(prompt: string | readonly number[], request?: RequestFields, literals?: LiteralSource): TokenIds;
  /**
   * Takes back ids this tokenizer returned, once the caller is done with them
   * (optional): it may hand their memory out again, so the caller must not
   * read them afterwards.
   */
  release?(ids: TokenIds): void;
}

/**
 * A request a tokenizer cannot turn into tokens: a chat template that refuses
 * it (its `raise_exception` message, as the engine would answer), or a field
 * of the wrong shape. The gateway answers it 400, as the engine would.
 */
export class TokenizerRequestError extends Error {
  /** Stable error code. */
  readonly code = "ERR_ADP_TOKENIZER_REQUEST";
  constructor(message: string) {
    super(message);
    this.name = "TokenizerRequestError";
  }
}

/** Separator bytes of the canonical rendering (control characters no JSON text holds raw). */
const ROLE_START = 0x1e;
const CONTENT_START = 0x1f;

/**
 * The UTF-8 byte tokenizer. A chat request is rendered canonically, message
 * by message: 0x1E, the role, 0x1F, then the content (a string as is; an
 * array of parts as the text of its `text` parts, other parts as their JSON),
 * then each next message. Token ids are the rendering's UTF-8 bytes, so a
 * conversation's next turn extends the previous turn's tokens exactly.
 */
export class Utf8ByteTokenizer implements Tokenizer {
  readonly name = "utf8-bytes";
  readonly #encoder = new TextEncoder();
  /** Where a text is encoded before its bytes are copied out as token ids (reused; grown up to SCRATCH_MAX). */
  #scratch = new Uint8Array(1 << 14);
  /** Where the ids go (see TokenPool). */
  readonly #pool = new TokenPool();

  readonly readsLiterals = true;

  /**
   * Encodes each role and content into the scratch in turn, never joined into
   * one string: a long prompt's text is not copied into a second string of
   * its size (which, past 128 KiB, V8 allocates in the old generation, each
   * one a step toward a full collection). The separators are ASCII, so no
   * surrogate pair spans two pieces: the bytes are those of the joined text.
   * A text that is a placeholder of `literals` is its bytes, copied as they are.
   */
  encodeChat(messages: readonly ChatMessage[], _request?: RequestFields, literals?: LiteralSource): TokenIds {
    // Per message: its role, then its content's pieces (texts, or literals' bytes), the message's end marked by null.
    const pieces: (string | Buffer | null)[] = [];
    let most = 0;
    for (const m of messages) {
      pieces.push(m.role);
      most += 2 + 3 * m.role.length; // UTF-8 takes at most 3 bytes per UTF-16 code unit
      most += contentPieces(m.content, literals, pieces);
      pieces.push(null);
    }
    if (most > SCRATCH_MAX) return this.#bytes(joinedRendering(pieces));
    // Texts are sized at 3 bytes a code unit; when they are short (roles, a literal's surroundings) that
    // bound is close, and the rendering goes straight into pooled memory instead of being copied there.
    let chars = 0;
    for (const piece of pieces) if (typeof piece === "string") chars += piece.length;
    const direct = chars <= DIRECT_TEXT_CHARS;
    const scratch = direct ? this.#pool.takeBytes(most) : this.#scratchOf(most);
    let at = 0;
    let role = true;
    for (const piece of pieces) {
      if (piece === null) {
        role = true;
        continue;
      }
      if (role) scratch[at++] = ROLE_START;
      if (typeof piece === "string") at += this.#encoder.encodeInto(piece, scratch.subarray(at)).written;
      else {
        scratch.set(piece, at);
        at += piece.length;
      }
      if (role) scratch[at++] = CONTENT_START;
      role = false;
    }
    return direct ? scratch.subarray(0, at) : this.#lend(at);
  }

  encodePrompt(prompt: string | readonly number[], _request?: RequestFields, literals?: LiteralSource): TokenIds {
    if (typeof prompt !== "string") return Uint32Array.from(prompt); // ids as given: any below 2^32
    const bytes = literals?.bytesOf(prompt) ?? null;
    if (bytes === null || bytes.length > SCRATCH_MAX) return this.#bytes(bytes === null ? prompt : bytes.toString("latin1"));
    this.#scratchOf(bytes.length).set(bytes);
    return this.#lend(bytes.length);
  }

  release(ids: TokenIds): void {
    this.#pool.release(ids);
  }

  /**
   * The UTF-8 bytes of `text` as token ids. The whole text is encoded in one
   * call (so a surrogate pair is never split) into reused scratch memory, then
   * copied into pooled memory.
   */
  #bytes(text: string): Uint8Array {
    const most = text.length * 3; // UTF-8 takes at most 3 bytes per UTF-16 code unit
    if (most > SCRATCH_MAX) return this.#encoder.encode(text);
    return this.#lend(this.#encoder.encodeInto(text, this.#scratchOf(most)).written);
  }

  /** The scratch, grown to hold `most` bytes (at most SCRATCH_MAX). */
  #scratchOf(most: number): Uint8Array {
    if (most > this.#scratch.length) this.#scratch = new Uint8Array(Math.min(SCRATCH_MAX, Math.max(most, this.#scratch.length * 2)));
    return this.#scratch;
  }

  /** The scratch's first `n` bytes copied into pooled memory: the ids, one byte each (the library hashes them as bytes in its core). */
  #lend(n: number): Uint8Array {
    const ids = this.#pool.takeBytes(n);
    ids.set(this.#scratch.subarray(0, n));
    return ids;
  }
}

/** The role and content separators as text. */
const SEPARATORS = [String.fromCharCode(ROLE_START), String.fromCharCode(CONTENT_START)] as const;
/** The largest scratch kept (a bigger text is encoded into memory of its own). */
const SCRATCH_MAX = 1 << 20;
/**
 * Most UTF-16 code units of text in a chat rendered straight into pooled ids
 * (at most twice as many bytes of slack): a ~55 KB prompt of one long literal
 * then costs one copy of its bytes, not two (3 µs a request).
 */
const DIRECT_TEXT_CHARS = 512;

/**
 * Appends a message content's pieces to `pieces`: its text, or where a text
 * is a placeholder of `literals` its bytes (the texts around one joined, as
 * contentText joins them: a literal is ASCII, so nothing spans it). Returns
 * the most bytes they take.
 */
function contentPieces(content: unknown, literals: LiteralSource | undefined, pieces: (string | Buffer | null)[]): number {
  if (literals === undefined || (typeof content !== "string" && !Array.isArray(content))) {
    const text = contentText(content);
    pieces.push(text);
    return 3 * text.length;
  }
  if (typeof content === "string") {
    const bytes = literals.bytesOf(content);
    pieces.push(bytes ?? content);
    return bytes?.length ?? 3 * content.length;
  }
  let most = 0;
  let run = "";
  for (const part of content) {
    const p = part as { type?: unknown; text?: unknown } | null;
    const isText = p !== null && typeof p === "object" && p.type === "text" && typeof p.text === "string";
    const bytes = isText ? literals.bytesOf(p.text as string) : null;
    if (bytes === null) {
      run += isText ? (p!.text as string) : JSON.stringify(part);
      continue;
    }
    if (run !== "") pieces.push(run);
    most += 3 * run.length + bytes.length;
    run = "";
    pieces.push(bytes);
  }
  pieces.push(run);
  return most + 3 * run.length;
}

/** The rendering of `pieces` (as encodeChat lays them out) as one string: a literal's bytes are ASCII, their latin1 text. */
function joinedRendering(pieces: readonly (string | Buffer | null)[]): string {
  let text = "";
  let role = true;
  for (const piece of pieces) {
    if (piece === null) {
      role = true;
      continue;
    }
    if (role) text += SEPARATORS[0];
    text += typeof piece === "string" ? piece : piece.toString("latin1");
    if (role) text += SEPARATORS[1];
    role = false;
  }
  return text;
}

/** The text of a message's content: a string, or the parts of a multi-part content. */
function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    let text = "";
    for (const part of content) {
      const p = part as { type?: unknown; text?: unknown } | null;
      text += p !== null && typeof p === "object" && p.type === "text" && typeof p.text === "string" ? p.text : JSON.stringify(part);
    }
    return text;
  }
  return content === null || content === undefined ? "" : JSON.stringify(content);
}

/** Smallest and largest pooled buffers, in bytes (the largest: 4 MiB, a million-token prompt's u32 ids); bigger ones are allocated and left to the GC. */
const POOL_MIN_BYTES = 1 << 10;
const POOL_MAX_BYTES = 1 << 22;
/**
 * Most bytes the pool keeps while nobody uses them. Ids go back once their
 * request is placed (the batch it arrived in, most often), so a few arrays of
 * the sizes the load asks for cover it; an array that does not fit pushes out
 * free arrays of other sizes, largest first, so what is kept follows the load.
 * One free array of each size is 8 MiB (1 KiB to 4 MiB), so any cap
 * at or under that makes the largest sizes push one another out: with 8 MiB,
 * bench:peers' trace (prompts of 10 KB to 1.4 MB) took 101 fresh arrays,
 * 113 MiB, in 3,000 requests, and V8 counts fresh backing stores against its
 * old-generation limit until its next mark-compact. With 16 MiB it took 33,
 * 14 MiB (24 and 32 MiB: 36), and bench:peers put the gateway's CPU per trace
 * request at 0.86-0.92x the 8 MiB build's, its peak RSS within the rounds'
 * noise (docs/performance.md); those were u32 ids, four times the bytes of
 * the byte tokenizer's ids now. Kept arrays are resident memory.
 */
const POOL_FREE_BYTES = 16 << 20;

/**
 * Token-id arrays recycled between requests. A fresh 14 KB Uint32Array per
 * request made V8 run a full mark-compact every ~900 requests (its backing
 * store counts as external memory, which V8 adds to the old generation's
 * size since its last mark-compact): 46 of them in one bench:serve run,
 * against 1 for the pass-through, and about a third of the gateway's CPU per
 * request. Buffers come in power-of-two sizes, kept by their bytes whichever
 * array they were lent as, and are handed out as views of exactly the length
 * asked for (u32 ids with `take`, byte ids with `takeBytes`); `release` takes
 * one back once (an array it did not lend, or lent and got back, is ignored).
 */
export class TokenPool {
  /** Free buffers by size in bytes. */
  readonly #free = new Map<number, ArrayBuffer[]>();
  /** Buffers out on loan. */
  readonly #lent = new WeakSet<ArrayBuffer>();
  #freeBytes = 0;
  readonly #capBytes: number;

  /** A pool keeping at most `capBytes` free (tests shrink it). */
  constructor(capBytes = POOL_FREE_BYTES) {
    this.#capBytes = capBytes;
  }

  /** An array of `n` u32 ids, its contents unspecified (the caller fills it). */
  take(n: number): Uint32Array {
    const buffer = this.#lendBuffer(n * 4);
    return buffer === null ? new Uint32Array(n) : new Uint32Array(buffer, 0, n);
  }

  /** An array of `n` byte ids, its contents unspecified (the caller fills it). */
  takeBytes(n: number): Uint8Array {
    const buffer = this.#lendBuffer(n);
    return buffer === null ? new Uint8Array(n) : new Uint8Array(buffer, 0, n);
  }

  /** Takes back an array `take` or `takeBytes` lent, for reuse. */
  release(ids: TokenIds): void {
    const buffer = ids.buffer;
    if (!(buffer instanceof ArrayBuffer) || !this.#lent.has(buffer)) return;
    this.#lent.delete(buffer);
    const bytes = buffer.byteLength;
    let list = this.#free.get(bytes);
    // Its own size's free arrays and it would pass the cap: one more of it is not kept, and nothing else is pushed out for it.
    if ((list?.length ?? 0) * bytes + bytes > this.#capBytes) return;
    if (this.#freeBytes + bytes > this.#capBytes) this.#evictFor(bytes);
    if (list === undefined) this.#free.set(bytes, (list = []));
    list.push(buffer);
    this.#freeBytes += bytes;
  }

  /** Bytes kept free now. */
  get freeBytes(): number {
    return this.#freeBytes;
  }

  /** A buffer of at least `bytes` bytes (a free one when the pool has one), now on loan; null past the largest pooled size. */
  #lendBuffer(bytes: number): ArrayBuffer | null {
    if (bytes > POOL_MAX_BYTES) return null;
    const size = bytes <= POOL_MIN_BYTES ? POOL_MIN_BYTES : 2 ** (32 - Math.clz32(bytes - 1));
    let buffer = this.#free.get(size)?.pop();
    if (buffer === undefined) buffer = new ArrayBuffer(size);
    else this.#freeBytes -= size;
    this.#lent.add(buffer);
    return buffer;
  }

  /** Lets go of free buffers of other sizes than `bytes`, largest first, until `bytes` more fit. */
  #evictFor(bytes: number): void {
    const sizes = [...this.#free.keys()].sort((a, b) => b - a);
    for (const size of sizes) {
      if (size === bytes) continue;
      const list = this.#free.get(size)!;
      while (list.length > 0 && this.#freeBytes + bytes > this.#capBytes) this.#freeBytes -= list.pop()!.byteLength;
      if (this.#freeBytes + bytes <= this.#capBytes) return;
    }
  }
}
