// Token timing of a streamed answer, read off its bytes without parsing them:
// an SSE event carries a token when one of its OpenAI fields holds something
// (`"content":"x`, `"text":"x`, `"reasoning_content":"x`, `"tool_calls":[{`),
// so the first such field is the time to first token and the gaps between
// them the inter-token latency. vLLM's, SGLang's and TensorRT-LLM's servers
// write compact JSON; a space after the colon is allowed too. A chunk holding
// k such events counts k gaps of (its time - the last token's) / k: the engine
// sent them together, and that is the latency each token saw on average.
// It also frames the stream: only whole events are passed on, the bytes after
// a chunk's last blank line held until the rest of their event comes (at most
// HOLD_MAX bytes; a bigger event is passed on as it comes), so a stream the
// upstream cuts mid-event ends with the gateway's error event after whole
// events only, never after half a JSON the client would fail to parse.

/** The fields whose non-empty value is a token, and the byte their value must start with. */
const FIELDS: readonly { readonly key: Buffer; readonly opens: number; readonly empty: number }[] = [
  { key: Buffer.from('"content":'), opens: 0x22, empty: 0x22 },
  { key: Buffer.from('"text":'), opens: 0x22, empty: 0x22 },
  { key: Buffer.from('"reasoning_content":'), opens: 0x22, empty: 0x22 },
  { key: Buffer.from('"tool_calls":'), opens: 0x5b, empty: 0x5d },
];
/** Bytes kept from a chunk's end, so a field cut between two chunks is still seen (the longest key and its value's first bytes). */
const CARRY = 24;
/** The most bytes of an unfinished event held back. */
const HOLD_MAX = 64 << 10;
/** What a chunk passes on while its event is still coming. */
const EMPTY = Buffer.alloc(0);
/**
 * Event boundaries: a blank line, ended by LF, CRLF or a bare CR (SSE's three
 * line ends; a CR-ended blank line passes on without the LF that may follow
 * it, which a client's parser skips as the rest of that CRLF). Event data is
 * JSON, which never holds a raw CR.
 */
const LF_LF = Buffer.from("\n\n");
const LF_CRLF = Buffer.from("\n\r\n");
const CR_CR = Buffer.from("\r\r");

/** Where the bytes of `data` after its last event boundary begin (0: none). */
function afterLastBoundary(data: Buffer): number {
  const lf = data.lastIndexOf(LF_LF);
  const crlf = data.lastIndexOf(LF_CRLF);
  const cr = data.lastIndexOf(CR_CR);
  return Math.max(lf < 0 ? 0 : lf + 2, crlf < 0 ? 0 : crlf + 3, cr < 0 ? 0 : cr + 2);
}

/** Whether `data` ends on an event boundary (most chunks do: engines write whole events), found without a search. */
function endsAtBoundary(data: Buffer): boolean {
  const n = data.length;
  if (n < 2) return false;
  const last = data[n - 1];
  if (last === 0x0d) return data[n - 2] === 0x0d;
  return last === 0x0a && (data[n - 2] === 0x0a || (n >= 3 && data[n - 2] === 0x0d && data[n - 3] === 0x0a));
}

/**
 * Counts the token fields of `bytes`. With `seam` (the length of the stream's
 * carry at the start of `bytes`), only those the chunks before could
 * not tell: starting in the carry and needing a byte after it.
 */
function tokenFields(bytes: Buffer, seam = -1): number {
  let n = 0;
  for (const { key, opens, empty } of FIELDS) {
    for (let at = bytes.indexOf(key); at >= 0 && (seam < 0 || at < seam); at = bytes.indexOf(key, at + key.length)) {
      let i = at + key.length;
      while (i < bytes.length && bytes[i] === 0x20) i++;
      if (i + 1 < bytes.length && bytes[i] === opens && bytes[i + 1] !== empty && (seam < 0 || i + 1 >= seam)) n++;
    }
  }
  return n;
}

/** One answer's token timing, fed its chunks as they pass. */
export class TokenTiming {
  /** When the exchange began (performance.now()). */
  readonly #startedAt: number;
  /** When the first token came, or null. */
  firstTokenAt: number | null = null;
  /** When the last token came. */
  #lastTokenAt = 0;
  /** The stream's last bytes so far (up to CARRY), or null after an event boundary. */
  #carry: Buffer | null = null;
  /** Whether the bytes passed on so far end on an event boundary. */
  #boundary = true;
  /** The start of an event not yet whole, held back in the pieces it came in, and their bytes. */
  #held: Buffer[] = [];
  #heldBytes = 0;
  /** Inter-token gaps seen (seconds each), passed to `onGap`. */
  readonly #onGap: (seconds: number) => void;
  /** The clock (ms), injectable for tests. */
  readonly #now: () => number;

  constructor(startedAt: number, onGap: (seconds: number) => void, now: () => number = () => performance.now()) {
    this.#startedAt = startedAt;
    this.#onGap = onGap;
    this.#now = now;
  }

  /** Seconds from the start to the first token, or null when none came. */
  get ttftSeconds(): number | null {
    return this.firstTokenAt === null ? null : (this.firstTokenAt - this.#startedAt) / 1000;
  }

  /** Whether what was passed on so far ends where a new SSE event may begin. */
  get atBoundary(): boolean {
    return this.#boundary;
  }

  /**
   * Notes one chunk of the answer and returns the bytes to pass on now: the
   * whole events it completes (an empty buffer while one is still coming).
   */
  chunk(bytes: Buffer): Buffer {
    if (bytes.length === 0) return bytes;
    // The carry ends with what is held: both are the stream's bytes since a boundary, the carry up to CARRY of them.
    const before = this.#carry;
    this.#time(bytes);
    // What is held has no boundary in it: only the new bytes, and the held bytes' last two a boundary may start in,
    // are searched, and the held pieces joined once an event is whole (an event sent a byte at a time costs its
    // length, not its length squared).
    const seam = Math.min(2, this.#heldBytes);
    const searched = seam === 0 ? bytes : Buffer.concat([before!.subarray(before!.length - seam), bytes]);
    const found = endsAtBoundary(searched) ? searched.length : afterLastBoundary(searched);
    const length = this.#heldBytes + bytes.length;
    if (found === 0 && length <= HOLD_MAX) {
      this.#held.push(Buffer.from(bytes)); // copied: the reader may reuse its buffer
      this.#heldBytes = length;
      return EMPTY;
    }
    const data = this.#heldBytes === 0 ? bytes : Buffer.concat([...this.#held, bytes]);
    const end = found === 0 ? 0 : found - seam + this.#heldBytes;
    this.#held = [];
    this.#heldBytes = 0;
    if (end === data.length || data.length - end > HOLD_MAX) {
      // All whole, or an event too big to hold: passed on as it is.
      this.#boundary = end === data.length;
      return data;
    }
    this.#held.push(Buffer.from(data.subarray(end)));
    this.#heldBytes = data.length - end;
    this.#boundary = true; // passed on up to a boundary
    return data.subarray(0, end);
  }

  /** The bytes still held when the answer ended (an upstream's last event without its blank line), to pass on; or null. */
  flush(): Buffer | null {
    if (this.#heldBytes === 0) return null;
    const held = Buffer.concat(this.#held);
    this.#held = [];
    this.#heldBytes = 0;
    this.#boundary = false;
    return held;
  }

  /** Counts the chunk's token fields and times them. */
  #time(bytes: Buffer): void {
    let tokens = tokenFields(bytes);
    if (this.#carry !== null) {
      // A field cut between chunks: found in the carry and the chunk's first bytes.
      tokens += tokenFields(Buffer.concat([this.#carry, bytes.subarray(0, CARRY)]), this.#carry.length);
    }
    // No field spans an event boundary: after one, nothing is carried. A chunk shorter than the carry keeps the
    // previous carry's end before it (a field may span three chunks or more).
    if (endsAtBoundary(bytes)) this.#carry = null;
    else if (bytes.length >= CARRY || this.#carry === null) this.#carry = Buffer.from(bytes.subarray(Math.max(0, bytes.length - CARRY)));
    else this.#carry = Buffer.concat([this.#carry, bytes]).subarray(-CARRY);
    if (tokens === 0) return;
    const now = this.#now();
    if (this.firstTokenAt === null) {
      this.firstTokenAt = now;
      tokens--; // the first token has no gap before it
    } else {
      const gap = (now - this.#lastTokenAt) / 1000 / tokens;
      for (let i = 0; i < tokens; i++) this.#onGap(gap);
      tokens = 0;
    }
    if (tokens > 0) for (let i = 0; i < tokens; i++) this.#onGap(0); // more tokens in the first token's chunk: sent with it
    this.#lastTokenAt = now;
  }
}
