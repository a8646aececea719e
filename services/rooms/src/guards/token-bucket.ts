/**
 * Token buckets keyed by id (an agent, a room), for the rate-limit guard. A bucket holds at most
 * `burst` tokens and refills at `ratePerSec`; a send takes one. Per send this is a map lookup and a
 * few float operations: no timers, no allocation once a key is known. Full buckets of idle keys are
 * dropped when the map grows, so memory follows the active senders, not all of them.
 */

interface Bucket {
  tokens: number;
  at: number;
}

/** Limits of one kind of bucket. */
export interface BucketLimits {
  ratePerSec: number;
  burst: number;
}

/** Buckets for many keys with the same limits (which may change, e.g. with the replica count). */
export class TokenBuckets {
  readonly #buckets = new Map<string, Bucket>();
  #limits: BucketLimits;
  readonly #maxKeys: number;

  constructor(limits: BucketLimits, maxKeys = 100_000) {
    this.#limits = limits;
    this.#maxKeys = maxKeys;
  }

  /** Current limits. */
  get limits(): BucketLimits {
    return this.#limits;
  }

  /** Changes the limits; buckets keep their tokens (capped at the new burst). */
  setLimits(limits: BucketLimits): void {
    this.#limits = limits;
  }

  /** Takes a token for `key`: 0 when allowed, else the milliseconds until one is available. */
  take(key: string, now = performance.now()): number {
    const { ratePerSec, burst } = this.#limits;
    let b = this.#buckets.get(key);
    if (!b) {
      if (this.#buckets.size >= this.#maxKeys) this.#evict(now);
      b = { tokens: burst, at: now };
      this.#buckets.set(key, b);
    } else {
      b.tokens = Math.min(burst, b.tokens + ((now - b.at) * ratePerSec) / 1000);
      b.at = now;
    }
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.ceil(((1 - b.tokens) * 1000) / ratePerSec);
  }

  /** Gives back the token just taken for `key` (another check refused the send). */
  refund(key: string): void {
    const b = this.#buckets.get(key);
    if (b) b.tokens = Math.min(this.#limits.burst, b.tokens + 1);
  }

  /** Drops buckets that would be full by now (their keys have been idle). */
  #evict(now: number): void {
    const { ratePerSec, burst } = this.#limits;
    for (const [key, b] of this.#buckets) {
      if (b.tokens + ((now - b.at) * ratePerSec) / 1000 >= burst) this.#buckets.delete(key);
    }
    // Everyone is busy: forget the oldest rather than grow without bound.
    if (this.#buckets.size >= this.#maxKeys) {
      const oldest = this.#buckets.keys().next();
      if (!oldest.done) this.#buckets.delete(oldest.value);
    }
  }

  get size(): number {
    return this.#buckets.size;
  }
}
