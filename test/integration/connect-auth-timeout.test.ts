/**
 * A server that closes a connection because its CONNECT came after the auth timeout (a loaded
 * client or server: `pnpm bench:scale` met it connecting thousands of agents on a busy machine)
 * is not a creds problem: the SDK tries again, and if the server keeps doing it says
 * UNAVAILABLE (retryable) — not UNAUTHENTICATED with advice to rotate creds that are fine.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { newId, ParleyError } from '@parley/contracts';
import { connect } from '@parley/sdk';
import { startServer } from '../harness/index.js';

// An auth timeout no client can meet: every connection is closed with "Authentication Timeout".
const server = await startServer({ operator: true, authTimeoutSeconds: 0.000001 });
after(() => server.stop());
const id = newId('agent');

test('an authentication timeout is UNAVAILABLE after retries, not "creds refused"', async () => {
  const creds = await server.operator?.participantCreds(id);
  assert.ok(creds);
  const err = await connect({ servers: server.url, creds: creds.creds, presence: false }).then(
    () => assert.fail('connected despite the auth timeout'),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ParleyError, String(err));
  assert.equal(err.code, 'UNAVAILABLE', err.message);
  // nats.js reports it as the server's "Authentication Timeout" or, having retried, as a timeout.
  assert.match(err.message, /before it finished authenticating, 5 times|cannot reach NATS .*timeout/);
  assert.ok((err.retryAfterMs ?? 0) > 0);
});

test('the same creds connect with the default auth timeout (they were never the problem)', async () => {
  const normal = await startServer({ operator: true, keys: server.operator?.keys });
  assert.match(
    await readFile(join(normal.dir, 'n1', 'nats-server.conf'), 'utf8'),
    /authorization \{ timeout: 10 \}/,
  );
  try {
    const creds = await normal.operator?.participantCreds(id);
    assert.ok(creds);
    const agent = await connect({ servers: normal.url, creds: creds.creds, presence: false });
    assert.equal(agent.id, id);
    await agent.close();
  } finally {
    await normal.stop();
  }
});
