/**
 * Retrying an idempotent request (the same id each time, so it takes effect once): waits what the
 * server asks (`retryAfterMs` of its ParleyError), else backs off exponentially, until a deadline.
 */
import { isParleyError } from '@parley/contracts';

/** Options of {@link retryIdempotent}. */
export interface RetryOptions {
  /** How long to keep trying, from the first attempt (ms). */
  deadlineMs: number;
  /** Which failures are worth another attempt; others are thrown at once. */
  retryable: (err: unknown) => boolean;
  /**
   * Failures whose `retryAfterMs` is waited in full (backpressure: asking sooner is refused again);
   * when that wait ends past the deadline, the failure is thrown at once. Other failures wait at
   * most `maxWaitMs` and never past the deadline.
   */
  waitInFull?: (err: unknown) => boolean;
  /** Longest wait between attempts, except for `waitInFull` failures. @default 2000 */
  maxWaitMs?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Runs `attempt` until it succeeds, fails with something not retryable, or the deadline passes
 * (then the last failure is thrown). `attempt` gets the milliseconds left before the deadline.
 */
export async function retryIdempotent<T>(
  attempt: (remainingMs: number) => Promise<T>,
  o: RetryOptions,
): Promise<T> {
  const deadline = Date.now() + o.deadlineMs;
  const maxWaitMs = o.maxWaitMs ?? 2_000;
  for (let n = 0; ; n++) {
    try {
      return await attempt(deadline - Date.now());
    } catch (err) {
      if (!o.retryable(err)) throw err;
      const asked = isParleyError(err) ? err.retryAfterMs : undefined;
      if (o.waitInFull?.(err)) {
        const wait = Math.max(1, asked ?? 100);
        if (Date.now() + wait >= deadline) throw err;
        await sleep(wait);
        continue;
      }
      if (Date.now() >= deadline) throw err;
      await sleep(Math.min(asked ?? 100 * 2 ** n, maxWaitMs, Math.max(0, deadline - Date.now())));
    }
  }
}
