/**
 * Requests made while the connection to nats-server is away are sent once it is back, within their
 * one timeout. nats.js (3.x) resets its outbound buffer at every dial attempt, so a request
 * published while it reconnects was never sent and waited out its whole timeout: right after a
 * nats-server restart, an SDK send took 5.1 s (its retry answered) and a registry call failed after
 * 5 s (contracts/src/connection.ts). The three request paths of Parley, each against a real
 * nats-server that is stopped while the request is made and started again: an API call (contracts'
 * `request`), the SDK's reply mux (every send), the services' JetStream publisher, and the JetStream
 * clients' own calls (a KV write) on a connection made the way Parley makes them.
 */
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  defineApi,
  failConnectOnEarlyClose,
  holdRequestsWhileAway,
  isParleyError,
  ReplyMux,
  request,
  watchConnection,
} from '@parley/contracts';
import { JsPublisher } from '@parley/kit';
import { startServer, type TestServer, waitFor } from '@parley/test/harness';
import * as z from 'zod';

const echo = defineApi({
  service: 'test',
  method: 'echo',
  summary: 'answers with what it was sent',
  access: 'any',
  request: z.object({ n: z.number() }),
  response: z.object({ n: z.number() }),
});

describe('requests made while nats-server is away', () => {
  let server: TestServer;
  let nc: NatsConnection;
  // What the connection reported, for a failure's message (clean clones found it not back 15 s after
  // the restart four times: its last reconnect had been taken and closed by the stopping server,
  // and nats.js waited for that attempt's PONG; see failConnectOnEarlyClose and the case before).
  const events: { at: number; status: string }[] = [];
  before(async () => {
    server = await startServer();
    nc = await server.connect({ reconnectTimeWait: 100, maxReconnectAttempts: -1 });
    // As Parley's connections (kit's connectNats, the SDK's connect) are made.
    failConnectOnEarlyClose(nc);
    watchConnection(nc);
    void (async () => {
      for await (const s of nc.status())
        events.push({ at: Date.now(), status: JSON.stringify(s).slice(0, 200) });
    })();
    // The responder is on the same connection: nats.js subscribes again before it sends anything
    // else after a reconnect, so the request cannot come before the responder is back.
    nc.subscribe(echo.listen, {
      callback: (_err, m) => {
        m.respond(m.data);
      },
    });
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name: 'AWAY', subjects: ['away.>'] });
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  /** Stops nats-server and waits until the connection knows. */
  async function goAway(): Promise<void> {
    await server.stopNode(0);
    await waitFor(() => !watchConnection(nc).connected, 'the connection to see nats-server gone');
  }

  it('an API call is sent when the connection is back, and answered within its timeout', async () => {
    await goAway();
    const call = request(nc, 'caller', echo, { n: 1 }, { timeout: 15_000 });
    await server.restart(0);
    assert.deepEqual(await call, { n: 1 });
  });

  it('a request through the reply mux (SDK sends) is sent when the connection is back', async () => {
    const mux = new ReplyMux(nc, '_INBOX.mux');
    await mux.start();
    await goAway();
    const reply = mux.request(echo.subject('caller'), new TextEncoder().encode('2'), 15_000);
    await server.restart(0);
    assert.equal(new TextDecoder().decode((await reply).data), '2');
    mux.close();
  });

  it('a JetStream publish is sent when the connection is back, and stored once', async () => {
    const publisher = new JsPublisher(nc, '_INBOX.jsp');
    await publisher.start();
    await goAway();
    const ack = publisher.publish('away.one', new TextEncoder().encode('3'), { timeoutMs: 15_000 });
    await server.restart(0);
    const stored = await ack;
    assert.equal(stored.stream, 'AWAY');
    assert.equal(stored.duplicate, false);
    const jsm = await jetstreamManager(nc);
    assert.equal((await jsm.streams.info('AWAY')).state.messages, 1);
    publisher.close();
  });

  it('a KV write (the JetStream clients’ own request) is sent when the connection is back', async () => {
    // Parley's connections (kit's connectNats, the SDK's connect) hold their requests like this one.
    const held = await server.connect({ reconnectTimeWait: 100, maxReconnectAttempts: -1 });
    holdRequestsWhileAway(held);
    try {
      const kv = await new Kvm(held).create('away', { timeout: 15_000 });
      await server.stopNode(0);
      await waitFor(() => !watchConnection(held).connected, 'the connection to see nats-server gone');
      const put = kv.put('k', 'while away');
      await server.restart(0);
      assert.ok((await put) > 0);
      assert.equal((await kv.get('k'))?.string(), 'while away');
    } finally {
      await held.close();
    }
  });

  it('a reconnect the server closes before it answers the connect is tried again at once', async () => {
    // What a nats-server stopping on SIGTERM does to a reconnect it takes: an INFO, then the close
    // (no PONG). nats.js waited for that PONG until its 20 s connect timeout, the connection down all
    // the while (this file's last case failed so in clean clones).
    const c = await server.connect({ reconnectTimeWait: 100, maxReconnectAttempts: -1 });
    failConnectOnEarlyClose(c);
    const watch = watchConnection(c);
    const port = Number(new URL(server.url).port);
    const sockets = new Set<Socket>();
    let attempts = 0;
    const closing = createServer((sock) => {
      attempts++;
      sockets.add(sock);
      sock.write('INFO {"server_id":"STOPPING","version":"2.9.10","proto":1,"max_payload":1048576}\r\n');
      // The client's CONNECT and PING: closed, unanswered.
      sock.once('data', () => sock.destroy());
    });
    try {
      await server.stopNode(0);
      await waitFor(() => !watch.connected, 'the connection to see nats-server gone');
      await new Promise<void>((resolve, reject) => {
        closing.once('error', reject);
        closing.listen(port, '127.0.0.1', resolve);
      });
      const since = Date.now();
      await waitFor(
        () => attempts >= 3,
        () => `3 attempts against the closing server (${attempts} in ${Date.now() - since} ms)`,
        5_000,
      );
      await new Promise((r) => closing.close(r).unref());
      for (const sock of sockets) sock.destroy();
      await server.restart(0);
      const restarted = Date.now();
      assert.ok(await watch.whenConnected(5_000), 'connected again within 5 s of the restart');
      console.log(
        `reconnect-requests: ${attempts} attempts closed before their PONG, connected ${Date.now() - restarted} ms after the restart`,
      );
      // A round trip to the server on it.
      await c.flush();
    } finally {
      closing.close();
      for (const sock of sockets) sock.destroy();
      await c.close();
    }
  });

  it('a request whose timeout passes before the connection is back fails UNAVAILABLE, unsent', async () => {
    await goAway();
    const err = await request(nc, 'caller', echo, { n: 4 }, { timeout: 100 }).then(
      () => 'answered',
      (e: unknown) => e,
    );
    assert.ok(isParleyError(err, 'UNAVAILABLE'), String(err));
    assert.match((err as Error).message, /not connected to NATS/);
    const restarting = Date.now();
    await server.restart(0);
    const restarted = Date.now();
    // Nothing was left to go out late: the next call is the one answered.
    const answer = await request(nc, 'caller', echo, { n: 5 }, { timeout: 15_000 }).catch(async (err) => {
      const fresh = await server.connect().then(
        async (c) => {
          await c.close();
          return 'a new connection connects';
        },
        (e: Error) => `a new connection fails too (${e.message})`,
      );
      // The last events before the restart too: a connection that reports nothing after it is stuck
      // in one dial attempt (nats.js reports "reconnecting" at each), and which one started last.
      const since = events
        .filter((e) => e.at >= restarting - 2_000)
        .slice(-12)
        .map((e) => `${e.at - restarting >= 0 ? '+' : ''}${e.at - restarting} ms ${e.status}`);
      // nats.js's own view of the connection (not public API: read for this message only).
      const protocol = (nc as unknown as { protocol?: Record<string, unknown> }).protocol;
      const inside = protocol
        ? JSON.stringify({
            connected: protocol.connected,
            transportClosed: (protocol.transport as { isClosed?: boolean } | undefined)?.isClosed,
            dialing: protocol.connectPromise !== null,
            server: String(protocol.server ?? ''),
          })
        : 'unknown';
      throw new Error(
        `${(err as Error).message}: nats-server restarted in ${restarted - restarting} ms; ${fresh}; the connection's status from 2 s before the restart: ${since.join(', ') || 'none'}; nats.js: ${inside}`,
      );
    });
    assert.deepEqual(answer, { n: 5 });
  });
});
