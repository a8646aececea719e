import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, commonEnv, loadEnv } from '@parley/kit';
import * as z from 'zod';

const Env = z.object({ ...commonEnv, EXTRA: z.coerce.number().int().min(1).describe('x') });

describe('loadEnv', () => {
  it('treats empty strings as unset and fills defaults', () => {
    const c = loadEnv('t', Env, { NATS_URL: '', EXTRA: '3', LOG_LEVEL: '' });
    assert.equal(c.NATS_URL, 'nats://127.0.0.1:4222');
    assert.equal(c.LOG_LEVEL, 'info');
    assert.equal(c.EXTRA, 3);
    assert.ok(Object.isFrozen(c));
  });

  it('lists every problem at once', () => {
    try {
      loadEnv('t', Env, { HTTP_PORT: '99999', LOG_LEVEL: 'loud' });
      assert.fail('accepted');
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      assert.deepEqual(
        err.problems.map((p) => p.split(':')[0]),
        ['LOG_LEVEL', 'HTTP_PORT', 'EXTRA'],
      );
      assert.match(err.message, /invalid configuration for t/);
    }
  });
});
