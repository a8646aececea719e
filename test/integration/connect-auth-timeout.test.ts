/**
 * A connect whose CONNECT reaches the server after its authentication timeout (2 s from INFO; on a
 * loaded machine either side can miss it — `pnpm soak` met it at load 12) is a passing condition:
 * the SDK tries again and connects, and when every try times out it says UNAVAILABLE — never
 * UNAUTHENTICATED with advice to rotate creds that are fine.
 *
 * A TCP proxy of the test's own holds the client's bytes of the first `stalled` connections until
 * the server has given up on them (it closes them after its -ERR), and passes the rest through.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { isParleyError } from '@parley/contracts';
import { connect } from '@parley/sdk';
import { codeOf, connectAdmin, createAgent, startParley, type TestParley } from '@parley/test/harness';

/** A proxy to `target` whose first `stalled` connections never forward what the client sends. */
async function stallingProxy(target: URL, stalled: number) {
  let seen = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const stall = seen++ < stalled;
    const upstream = createConnection({ host: target.hostname, port: Number(target.port) });
    sockets.add(client).add(upstream);
    upstream.pipe(client);
    // The server's INFO reaches the client; the client's CONNECT never reaches the server, which
    // answers -ERR 'Authentication Timeout' and closes, as when the CONNECT comes too late.
    if (!stall) client.pipe(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  assert.ok(address && typeof address === 'object');
  return {
    url: `nats://127.0.0.1:${address.port}`,
    connections: () => seen,
    async close() {
      for (const s of sockets) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

describe('connect when the server times out the authentication', () => {
  let parley: TestParley;
  let creds: string;

  before(async () => {
    parley = await startParley();
    const admin = await connectAdmin(parley);
    creds = (await createAgent(admin, { name: 'slow-to-connect' })).creds;
    await admin.close();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('tries again and connects when one attempt timed out', async () => {
    const proxy = await stallingProxy(new URL(parley.natsUrl.split(',')[0] ?? ''), 1);
    try {
      const agent = await connect({ servers: proxy.url, creds, presence: false });
      assert.equal(proxy.connections(), 2, 'one timed-out attempt, then one that connected');
      assert.ok((await agent.whoami()).id.startsWith('agt_'));
      await agent.close();
    } finally {
      await proxy.close();
    }
  });

  it('says UNAVAILABLE, not UNAUTHENTICATED, when every attempt times out', async () => {
    const proxy = await stallingProxy(new URL(parley.natsUrl.split(',')[0] ?? ''), 100);
    try {
      const err = await connect({ servers: proxy.url, creds, presence: false }).then(
        () => assert.fail('connected through a proxy that never forwards the CONNECT'),
        (e: unknown) => e,
      );
      assert.equal(await codeOf(Promise.reject(err)), 'UNAVAILABLE');
      assert.ok(isParleyError(err) && /timed out the authentication/.test(err.message), String(err));
      assert.equal(proxy.connections(), 3);
    } finally {
      await proxy.close();
    }
  });
});
