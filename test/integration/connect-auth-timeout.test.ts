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
import { readFile } from 'node:fs/promises';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { isParleyError, newId } from '@parley/contracts';
import { connect } from '@parley/sdk';
import { codeOf, startServer, type TestServer } from '@parley/test/harness';

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
  // A 1 s auth timeout, so a stalled attempt costs 1 s (the default is 10 s, checked below).
  let server: TestServer;
  const id = newId('agent');
  let creds: string;

  before(async () => {
    server = await startServer({ operator: true, authTimeoutSeconds: 1 });
    const minted = await server.operator?.participantCreds(id);
    assert.ok(minted);
    creds = minted.creds;
  });
  after(async () => {
    await server?.stop();
  });

  it('tries again and connects when one attempt timed out', async () => {
    const proxy = await stallingProxy(new URL(server.url.split(',')[0] ?? ''), 1);
    try {
      const agent = await connect({ servers: proxy.url, creds, presence: false });
      assert.equal(proxy.connections(), 2, 'one timed-out attempt, then one that connected');
      assert.equal(agent.id, id);
      await agent.close();
    } finally {
      await proxy.close();
    }
  });

  it('says UNAVAILABLE, not UNAUTHENTICATED, when every attempt times out', async () => {
    // An auth timeout no client can meet: the server closes every connection with the -ERR.
    const strict = await startServer({
      operator: true,
      authTimeoutSeconds: 0.000001,
      keys: server.operator?.keys,
    });
    try {
      const err = await connect({ servers: strict.url, creds, presence: false }).then(
        () => assert.fail('connected despite the auth timeout'),
        (e: unknown) => e,
      );
      assert.equal(await codeOf(Promise.reject(err)), 'UNAVAILABLE');
      // The server's -ERR, or (when it closed first) the client's connect timeout: never bad creds.
      assert.ok(isParleyError(err) && !/rotate/.test(err.message), String(err));
      assert.match(String(err), /timed out the authentication of .* 5 times|cannot reach NATS .*timeout/);
      assert.ok((err.retryAfterMs ?? 0) > 0);
    } finally {
      await strict.stop();
    }
  });

  it("a deployment's server gives 10 s to authenticate (the 2 s default closed agents connecting at once)", async () => {
    const normal = await startServer({ operator: true, keys: server.operator?.keys });
    try {
      assert.match(
        await readFile(join(normal.dir, 'n1', 'nats-server.conf'), 'utf8'),
        /authorization \{ timeout: 10 \}/,
      );
      const agent = await connect({ servers: normal.url, creds, presence: false });
      assert.equal(agent.id, id);
      await agent.close();
    } finally {
      await normal.stop();
    }
  });
});
