/**
 * How a failed connect reads: creds the server refuses are UNAUTHENTICATED (new creds are the fix),
 * a handshake the server gave up on because it was slow is UNAVAILABLE (trying again is the fix).
 * The server here speaks the NATS client protocol's first lines (INFO, then -ERR) as nats-server
 * does; the client is the SDK's.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type Server } from 'node:net';
import { after, describe, it } from 'node:test';
import { isParleyError } from '@parley/contracts';
import { createKeyMaterial, mintServiceCreds } from '@parley/keys';
import { connectWithCreds } from '@parley/sdk';

/** A server that answers every client's handshake with `-ERR '<error>'` and closes. */
async function refusingServer(error: string): Promise<{ url: string; server: Server }> {
  const server = createServer((socket) => {
    socket.on('error', () => {});
    const info = {
      server_id: 'TEST',
      version: '2.9.10',
      proto: 1,
      auth_required: true,
      nonce: 'bm9uY2U',
      max_payload: 1048576,
    };
    socket.write(`INFO ${JSON.stringify(info)}\r\n`);
    socket.once('data', () => socket.end(`-ERR '${error}'\r\n`));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  assert.ok(address && typeof address === 'object');
  return { url: `nats://127.0.0.1:${address.port}`, server };
}

/** Real service creds, minted as Parley mints them (the server here never checks them). */
async function creds(): Promise<string> {
  const m = createKeyMaterial();
  const minted = await mintServiceCreds(m, 'connecttest');
  return minted.creds;
}

describe('sdk: connect failures', () => {
  const servers: Server[] = [];
  after(() => {
    for (const s of servers) s.close();
  });

  it('an authorization violation is UNAUTHENTICATED and says how to get new creds', async () => {
    const { url, server } = await refusingServer('Authorization Violation');
    servers.push(server);
    await assert.rejects(connectWithCreds({ servers: url, creds: await creds() }), (err: unknown) => {
      assert.ok(isParleyError(err, 'UNAUTHENTICATED'), String(err));
      assert.match((err as Error).message, /parley agent rotate/);
      return true;
    });
  });

  it('an authentication timeout is UNAVAILABLE with a retry hint, not a creds problem', async () => {
    const { url, server } = await refusingServer('Authentication Timeout');
    servers.push(server);
    await assert.rejects(connectWithCreds({ servers: url, creds: await creds() }), (err: unknown) => {
      assert.ok(isParleyError(err, 'UNAVAILABLE'), String(err));
      assert.ok(isParleyError(err) && (err.retryAfterMs ?? 0) > 0);
      assert.doesNotMatch((err as Error).message, /rotate/);
      return true;
    });
  });
});
