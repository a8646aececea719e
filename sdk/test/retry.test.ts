import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isParleyError, ParleyError } from '@parley/contracts';
import { retryIdempotent } from '@parley/sdk';

const unavailable = (retryAfterMs?: number) =>
  new ParleyError('UNAVAILABLE', 'try later', retryAfterMs === undefined ? {} : { retryAfterMs });

describe('retryIdempotent', () => {
  it('tries again on a retryable failure until it succeeds', async () => {
    let n = 0;
    const r = await retryIdempotent(
      async () => {
        if (++n < 3) throw unavailable(1);
        return 'done';
      },
      { deadlineMs: 10_000, retryable: (e) => isParleyError(e, 'UNAVAILABLE') },
    );
    assert.deepEqual([r, n], ['done', 3]);
  });

  it('throws a failure that is not retryable at once', async () => {
    let n = 0;
    await assert.rejects(
      retryIdempotent(
        async () => {
          n++;
          throw new ParleyError('PERMISSION_DENIED', 'no');
        },
        { deadlineMs: 10_000, retryable: (e) => isParleyError(e, 'UNAVAILABLE') },
      ),
      (e: unknown) => isParleyError(e, 'PERMISSION_DENIED'),
    );
    assert.equal(n, 1);
  });

  it('a wait asked in full that ends past the deadline gives up at once', async () => {
    let n = 0;
    await assert.rejects(
      retryIdempotent(
        async () => {
          n++;
          throw new ParleyError('RATE_LIMITED', 'slow down', { retryAfterMs: 60_000 });
        },
        {
          deadlineMs: 1_000,
          retryable: (e) => isParleyError(e, 'RATE_LIMITED'),
          waitInFull: (e) => isParleyError(e, 'RATE_LIMITED'),
        },
      ),
      (e: unknown) => isParleyError(e, 'RATE_LIMITED'),
    );
    assert.equal(n, 1);
  });

  it('gives the attempt what is left of the deadline, and throws the last failure once it passed', async () => {
    const left: number[] = [];
    await assert.rejects(
      retryIdempotent(
        async (remainingMs) => {
          left.push(remainingMs);
          throw unavailable(20);
        },
        { deadlineMs: 100, retryable: () => true },
      ),
      (e: unknown) => isParleyError(e, 'UNAVAILABLE'),
    );
    assert.ok(left.length >= 2, `${left.length} attempts`);
    assert.ok(left[0] !== undefined && left[0] <= 100);
    for (let i = 1; i < left.length; i++) assert.ok((left[i] as number) < (left[i - 1] as number));
  });
});
