// One upstream's health, in Envoy's words: active health checks eject it after
// `unhealthy_threshold` failures in a row and re-admit it after
// `healthy_threshold` passes; outlier detection ejects it on traffic alone,
// after `consecutive_5xx` 5xx answers or `consecutive_gateway_failures`
// gateway failures (connect errors, resets, timeouts) in a row, for
// `base_ejection_ms` times the number of its recent ejections (at most
// `max_ejection_ms`), after which passing health checks re-admit it. Whether
// an outlier ejection may happen at all (the fleet's `max_ejected_percent`) is
// the fleet's to say: it is asked through `mayEject`.

import type { GatewayConfig } from "../config/config-types.js";

/** Why an upstream is out of the fleet. */
export type EjectionCause = "health_check" | "consecutive_5xx" | "gateway_failures" | "unreachable_at_start";

/** The causes, for metrics (one series each, from the start). */
export const EJECTION_CAUSES: readonly EjectionCause[] = ["health_check", "consecutive_5xx", "gateway_failures", "unreachable_at_start"];

/** The thresholds and times of {@link UpstreamHealth}: the `health:` section's (config-types.ts says what each means). */
export type HealthSettings = Pick<GatewayConfig["health"], "unhealthyThreshold" | "healthyThreshold" | "consecutive5xx" | "consecutiveGatewayFailures" | "baseEjectionMs" | "maxEjectionMs">;

/** What a report of traffic did: nothing, an ejection, or an ejection the fleet's bound refused. */
export type TrafficVerdict = { readonly ejected: false; readonly refused: boolean } | { readonly ejected: true; readonly cause: EjectionCause; readonly forMs: number };

/** Nothing happened. */
const NOTHING: TrafficVerdict = { ejected: false, refused: false };
/** The count was reached but the fleet's bound kept the upstream in. */
const REFUSED: TrafficVerdict = { ejected: false, refused: true };

/** One upstream's health state: counts, ejection, re-admission. */
export class UpstreamHealth {
  /** Why it is out, or null while it takes requests. */
  #out: EjectionCause | null = null;
  /** Consecutive 5xx answers, and consecutive gateway failures. */
  #fiveXx = 0;
  #gatewayFailures = 0;
  /** Consecutive failed and (while out) passing health checks. */
  #checkFailures = 0;
  #checkPasses = 0;
  /** Its recent outlier ejections (the ejection time's multiplier), and when it was last re-admitted. */
  #ejections = 0;
  #admittedAt = Number.NEGATIVE_INFINITY;
  /** When its current outlier ejection ends (checks count only after). */
  #ejectedUntil = 0;
  /** Ejections by cause, for metrics. */
  readonly ejectionsTotal = new Map<EjectionCause, number>(EJECTION_CAUSES.map((c) => [c, 0]));
  /** Outlier ejections the fleet's max_ejected_percent refused. */
  refusedEjections = 0;
  readonly #settings: HealthSettings;
  /** The clock (ms), injectable for tests. */
  readonly #now: () => number;

  constructor(settings: HealthSettings, now: () => number = () => performance.now()) {
    this.#settings = settings;
    this.#now = now;
  }

  /** Whether it takes requests. */
  get healthy(): boolean {
    return this.#out === null;
  }

  /** Why it is out, or null. */
  get cause(): EjectionCause | null {
    return this.#out;
  }

  /** Consecutive 5xx answers and gateway failures now (for tests and /health). */
  get counts(): { readonly fiveXx: number; readonly gatewayFailures: number } {
    return { fiveXx: this.#fiveXx, gatewayFailures: this.#gatewayFailures };
  }

  /** Whether no failure is being counted now (an answer under 500 then changes nothing: the proxy's fast path). */
  get clean(): boolean {
    return this.#fiveXx === 0 && this.#gatewayFailures === 0;
  }

  /** Starts it out (unreachable when the gateway started): passing checks re-admit it. */
  startOut(): void {
    this.#eject("unreachable_at_start");
  }

  /**
   * An answer's status: a 5xx counts toward `consecutive_5xx` (and ejects when
   * `mayEject()` allows), anything under 500 resets that count; any answer
   * resets the count of gateway failures (the upstream answered).
   */
  answered(status: number, mayEject: () => boolean): TrafficVerdict {
    this.#gatewayFailures = 0;
    if (status < 500) {
      this.#fiveXx = 0;
      return NOTHING;
    }
    this.#fiveXx++;
    return this.#outlier(this.#fiveXx >= this.#settings.consecutive5xx, "consecutive_5xx", mayEject);
  }

  /** A gateway failure (a connect error, a reset, a timeout): counts toward `consecutive_gateway_failures`. */
  gatewayFailure(mayEject: () => boolean): TrafficVerdict {
    this.#gatewayFailures++;
    return this.#outlier(this.#gatewayFailures >= this.#settings.consecutiveGatewayFailures, "gateway_failures", mayEject);
  }

  /** A failed health check; returns whether it just ejected the upstream. */
  checkFailed(): boolean {
    this.#checkPasses = 0;
    this.#checkFailures++;
    if (this.#out !== null || this.#checkFailures < this.#settings.unhealthyThreshold) return false;
    this.#eject("health_check");
    return true;
  }

  /**
   * A passing health check; returns whether it just re-admitted the upstream
   * (`healthy_threshold` in a row, counted only once an outlier ejection's
   * time is over: an engine whose /health says 200 while it fails every
   * completion is not bounced straight back).
   */
  checkPassed(): boolean {
    this.#checkFailures = 0;
    if (this.#out === null) return false;
    if (this.#now() < this.#ejectedUntil) {
      this.#checkPasses = 0;
      return false;
    }
    if (++this.#checkPasses < this.#settings.healthyThreshold) return false;
    this.#out = null;
    this.#checkPasses = 0;
    this.#fiveXx = 0;
    this.#gatewayFailures = 0;
    this.#admittedAt = this.#now();
    return true;
  }

  /** An outlier ejection when `reached` and the fleet allows it; refused, the count stays reached, so each further failure is another refusal. */
  #outlier(reached: boolean, cause: EjectionCause, mayEject: () => boolean): TrafficVerdict {
    if (!reached || this.#out !== null) return NOTHING;
    if (!mayEject()) {
      this.refusedEjections++;
      return REFUSED;
    }
    // The multiplier decays by one for every base ejection time it stayed in since its last re-admission.
    const base = this.#settings.baseEjectionMs;
    const stayed = this.#now() - this.#admittedAt;
    this.#ejections = Math.max(0, this.#ejections - Math.floor(stayed / base)) + 1;
    const forMs = Math.min(this.#settings.maxEjectionMs, base * this.#ejections);
    this.#ejectedUntil = this.#now() + forMs;
    this.#eject(cause);
    return { ejected: true, cause, forMs };
  }

  /** Takes it out for `cause`. */
  #eject(cause: EjectionCause): void {
    this.#out = cause;
    this.#checkPasses = 0;
    this.#fiveXx = 0;
    this.#gatewayFailures = 0;
    this.ejectionsTotal.set(cause, (this.ejectionsTotal.get(cause) ?? 0) + 1);
  }
}
