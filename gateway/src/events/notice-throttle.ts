// How often an event source's notices reach the log. A publisher that sends
// malformed messages, or skips a sequence number each batch, makes a notice
// of every message: 248,000 log lines (42.5 MB) in 6 s from one stream, the
// logging itself holding the event loop. Each kind of notice of each DP rank
// is passed on the first time, then every EVERY-th time, saying how many
// there were.

/** A notice as a source gives it (its DP rank, what happened, details). */
export interface Notice {
  readonly rank: number;
  readonly what: string;
  readonly detail?: string;
}

/** A kind of notice of a rank is passed on again after this many of it. */
export const EVERY = 100;
/** Most (rank, kind) pairs counted apart (a source has about ten kinds and up to 1,024 ranks); past it, the rest are counted together. */
const MAX_KEYS = 16_384;
/** The key the notices of pairs past MAX_KEYS are counted under. */
const OVERFLOW = "\u0000overflow";

/** Passes on the first of each (rank, kind) of notice and every EVERY-th after it, counting the rest. */
export class NoticeThrottle {
  readonly #pass: (notice: Notice) => void;
  readonly #counts = new Map<string, number>();

  constructor(pass: (notice: Notice) => void) {
    this.#pass = pass;
  }

  /** Counts `notice`; passes it on when it is the first of its rank and kind, or an EVERY-th. */
  notice(notice: Notice): void {
    const pair = `${notice.rank}\u0000${notice.what}`;
    const key = this.#counts.has(pair) || this.#counts.size < MAX_KEYS - 1 ? pair : OVERFLOW;
    const n = (this.#counts.get(key) ?? 0) + 1;
    this.#counts.set(key, n);
    if (n === 1) this.#pass(notice);
    else if (n % EVERY === 0) this.#pass({ ...notice, detail: `${notice.detail === undefined ? "" : `${notice.detail}; `}${n} of these on this rank so far` });
  }
}
