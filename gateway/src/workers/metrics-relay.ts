// `/metrics` under `serve --workers N`: whichever worker takes the scrape
// answers for all of them. It asks the primary, which asks every worker for
// its own page and hands the pages back; the worker merges them, each sample
// labelled worker="N" (common/labelled-metrics.ts), so a scrape never sees
// one worker's counters as the gateway's. A worker that does not answer
// within the relay's timeout is left out of that scrape (its restart, say).

/** The type of every metrics message between a worker and the primary. */
export const METRICS_MESSAGE = "adp-gateway-metrics";
/** How long a scrape waits for the other workers' pages. */
export const METRICS_TIMEOUT_MS = 2_000;

/** A metrics message: a worker asks (`ask`), the primary asks each worker to render (`render`), each answers (`page`), the primary hands them back (`pages`). */
export type MetricsMessage =
  | { readonly type: typeof METRICS_MESSAGE; readonly op: "ask" | "render"; readonly id: number }
  | { readonly type: typeof METRICS_MESSAGE; readonly op: "page"; readonly id: number; readonly worker: number; readonly text: string }
  | { readonly type: typeof METRICS_MESSAGE; readonly op: "pages"; readonly id: number; readonly pages: readonly WorkerPage[] };

/** One worker's page. */
export interface WorkerPage {
  readonly worker: number;
  readonly text: string;
}

/** Whether `m` is a metrics message (checked whole: the channel is the primary's, but a message is data). */
export function isMetricsMessage(m: unknown): m is MetricsMessage {
  if (typeof m !== "object" || m === null || (m as { type?: unknown }).type !== METRICS_MESSAGE) return false;
  const x = m as Record<string, unknown>;
  if (!Number.isSafeInteger(x.id)) return false;
  if (x.op === "ask" || x.op === "render") return true;
  if (x.op === "page") return Number.isSafeInteger(x.worker) && typeof x.text === "string";
  return x.op === "pages" && Array.isArray(x.pages) && x.pages.every((p: unknown) => typeof p === "object" && p !== null && Number.isSafeInteger((p as WorkerPage).worker) && typeof (p as WorkerPage).text === "string");
}

/** A worker's side of the relay. */
export class MetricsRelay {
  readonly #send: (m: MetricsMessage) => void;
  readonly #self: number;
  #render: () => string = () => "";
  #next = 1;
  readonly #waiting = new Map<number, (pages: readonly WorkerPage[]) => void>();

  /** `send` reaches the primary; `self` is this worker's number. */
  constructor(send: (m: MetricsMessage) => void, self: number) {
    this.#send = send;
    this.#self = self;
  }

  /** This worker's number (1, 2, ...): /health says which worker answered. */
  get worker(): number {
    return this.#self;
  }

  /** Sets how this worker renders its own page (its gateway's metrics). */
  renderWith(render: () => string): void {
    this.#render = render;
  }

  /** Every worker's page, this one's included (alone when the primary does not answer in time), in worker order. */
  pages(timeoutMs = METRICS_TIMEOUT_MS): Promise<readonly WorkerPage[]> {
    const id = this.#next++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => settle([{ worker: this.#self, text: this.#render() }]), timeoutMs);
      const settle = (pages: readonly WorkerPage[]) => {
        clearTimeout(timer);
        this.#waiting.delete(id);
        resolve([...pages].sort((a, b) => a.worker - b.worker));
      };
      this.#waiting.set(id, settle);
      this.#send({ type: METRICS_MESSAGE, op: "ask", id });
    });
  }

  /** Handles a message from the primary; false when it is not a metrics message. */
  receive(m: unknown): boolean {
    if (!isMetricsMessage(m)) return false;
    if (m.op === "render") this.#send({ type: METRICS_MESSAGE, op: "page", id: m.id, worker: this.#self, text: this.#render() });
    else if (m.op === "pages") this.#waiting.get(m.id)?.(m.pages);
    return true;
  }
}

/** The primary's side: each worker's ask answered with every worker's page. */
export class MetricsGather {
  #next = 1;
  readonly #rounds = new Map<number, { readonly asker: (m: MetricsMessage) => void; readonly askId: number; readonly pages: WorkerPage[]; readonly expected: number; readonly timer: NodeJS.Timeout; readonly own: ReadonlyMap<number, string> }>();

  /**
   * A worker's `ask` (`reply` reaches it): `workers` are the ones to render,
   * each reached by its send function; answers after `timeoutMs` are left out.
   * `own` are the primary's lines for each worker slot, added to its page (a
   * page of their own for a slot whose worker is down).
   */
  ask(askId: number, reply: (m: MetricsMessage) => void, workers: readonly ((m: MetricsMessage) => void)[], timeoutMs = METRICS_TIMEOUT_MS - 200, own: ReadonlyMap<number, string> = new Map()): void {
    const id = this.#next++;
    const timer = setTimeout(() => this.#finish(id), timeoutMs);
    this.#rounds.set(id, { asker: reply, askId, pages: [], expected: workers.length, timer, own });
    for (const send of workers) send({ type: METRICS_MESSAGE, op: "render", id });
    if (workers.length === 0) this.#finish(id);
  }

  /** A worker's page. */
  page(id: number, page: WorkerPage): void {
    const round = this.#rounds.get(id);
    if (round === undefined || round.pages.some((p) => p.worker === page.worker)) return;
    round.pages.push(page);
    if (round.pages.length >= round.expected) this.#finish(id);
  }

  /** Hands a round's pages to its asker. */
  #finish(id: number): void {
    const round = this.#rounds.get(id);
    if (round === undefined) return;
    this.#rounds.delete(id);
    clearTimeout(round.timer);
    const pages = round.pages.map((p) => (round.own.has(p.worker) ? { worker: p.worker, text: `${p.text}\n${round.own.get(p.worker)!}` } : p));
    for (const [worker, text] of round.own) if (!pages.some((p) => p.worker === worker)) pages.push({ worker, text });
    round.asker({ type: METRICS_MESSAGE, op: "pages", id: round.askId, pages });
  }
}
