// limits.max_receiving_bytes: the bytes of request bodies being received,
// all client connections together. Each body is bounded by max_body_bytes,
// but a slow client holds its body's buffer for up to timeouts.request_ms,
// and max_connections such clients could hold max_body_bytes each (32 GiB at
// the defaults; 200 connections sending 4 MiB bodies less their last byte
// took the process from 62 MB to 1 GB). What a body's buffer grows to is
// taken from this budget as it grows and given back once the body is whole
// (it is then a request's, bounded by the queue and in-flight limits) or its
// connection ends; a body that would take the budget past its limit is
// answered 503 and its connection closed.

/** What the budget counts into (the edge's counters, which /metrics prints). */
export interface ReceivingCounts {
  /** Bytes taken now. */
  receivingBytes: number;
  /** Bodies refused for want of bytes (503). */
  bodiesRefused: number;
}

/** The bytes of request bodies being received, against limits.max_receiving_bytes. */
export class ReceivingBudget {
  /** The limit. */
  readonly limit: number;
  readonly #counts: ReceivingCounts;

  constructor(limit: number, counts: ReceivingCounts) {
    this.limit = limit;
    this.#counts = counts;
  }

  /** Takes `n` bytes: false (and counted) when that would pass the limit, and nothing is taken. */
  take(n: number): boolean {
    const counts = this.#counts;
    if (counts.receivingBytes + n > this.limit) {
      counts.bodiesRefused++;
      return false;
    }
    counts.receivingBytes += n;
    return true;
  }

  /** Gives back `n` bytes taken. */
  give(n: number): void {
    this.#counts.receivingBytes -= n;
  }
}
