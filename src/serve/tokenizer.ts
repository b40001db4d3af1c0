// How the gateway turns a request's prompt into the token ids it routes by.
// The seam for the engines' own tokenizers (next issue); this file ships the
// UTF-8 byte tokenizer over a canonical rendering of the request, which gives
// equal token prefixes to equal prompt prefixes: all prefix affinity needs.

/** A chat message as OpenAI's API carries it. */
export interface ChatMessage {
  readonly role: string;
  readonly content: unknown;
  readonly name?: unknown;
}

/** Turns prompts into token ids. Implementations must be deterministic. */
export interface Tokenizer {
  /** A short name for logs and metrics. */
  readonly name: string;
  /** Token ids of a chat request's messages, as the engine would see them. */
  encodeChat(messages: readonly ChatMessage[]): Uint32Array;
  /** Token ids of a completion request's prompt (a string, or token ids as given). */
  encodePrompt(prompt: string | readonly number[]): Uint32Array;
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

  encodeChat(messages: readonly ChatMessage[]): Uint32Array {
    let text = "";
    for (const m of messages) text += `${String.fromCharCode(ROLE_START)}${m.role}${String.fromCharCode(CONTENT_START)}${contentText(m.content)}`;
    return new Uint32Array(this.#encoder.encode(text)); // a bulk widening copy (Uint32Array.from iterates)
  }

  encodePrompt(prompt: string | readonly number[]): Uint32Array {
    if (typeof prompt !== "string") return Uint32Array.from(prompt);
    return new Uint32Array(this.#encoder.encode(prompt));
  }
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
