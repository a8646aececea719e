import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { coalesceWrites } from '@parley/contracts';
import { connectNats } from '@parley/kit';
import { startServer, type TestServer } from '@parley/test/harness';

/** Counts the socket writes of `nc` (nats.js hands each one to its transport's `send`). */
function countWrites(nc: NatsConnection): () => number {
  const transport = (nc as unknown as { protocol: { transport: { send(b: Uint8Array): void } } }).protocol
    .transport;
  const send = transport.send.bind(transport);
  let writes = 0;
  transport.send = (b) => {
    writes++;
    send(b);
  };
  return () => writes;
}

/** Publishes `n` messages in one turn of the event loop, each after an `await`, as a service does. */
async function publishAcrossMicrotasks(nc: NatsConnection, subject: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    await Promise.resolve();
    nc.publish(subject, String(i));
  }
}

describe('coalesceWrites (against nats-server)', () => {
  let server: TestServer;
  let reader: NatsConnection;
  const opened: NatsConnection[] = [];
  before(async () => {
    server = await startServer();
    reader = await server.connect();
  });
  after(async () => {
    for (const nc of opened) await nc.close();
    await reader?.close();
    await server?.stop();
  });

  /** Sends 200 messages from one turn on `nc` and returns the socket writes it took; all must arrive in order. */
  async function writesFor(nc: NatsConnection, subject: string): Promise<number> {
    const sub = reader.subscribe(subject, { max: 200 });
    await reader.flush();
    const writes = countWrites(nc);
    await publishAcrossMicrotasks(nc, subject, 200);
    const got: string[] = [];
    for await (const m of sub) got.push(m.string());
    assert.deepEqual(
      got,
      Array.from({ length: 200 }, (_, i) => String(i)),
      'every message, in order',
    );
    return writes();
  }

  it('sends what one turn of the event loop published in one write, where nats.js wrote per microtask checkpoint', async () => {
    const plain = await server.connect();
    const coalesced = await server.connect();
    opened.push(plain, coalesced);
    assert.equal(coalesceWrites(coalesced), true, 'nats.js 3.x has the shape coalesceWrites relies on');

    const plainWrites = await writesFor(plain, 'coalesce.plain');
    const coalescedWrites = await writesFor(coalesced, 'coalesce.on');
    assert.ok(plainWrites >= 100, `nats.js alone wrote ${plainWrites} times for 200 messages`);
    assert.ok(coalescedWrites <= 2, `coalesced: ${coalescedWrites} writes for 200 messages`);
  });

  it('still writes at once past the flush threshold, and flush() and requests still answer', async () => {
    const nc = await server.connect();
    opened.push(nc);
    coalesceWrites(nc);
    const sub = reader.subscribe('coalesce.big', { max: 3 });
    reader.subscribe('coalesce.echo', {
      callback: (_e, m) => {
        m.respond(m.data);
      },
    });
    await reader.flush();
    const writes = countWrites(nc);
    const big = new Uint8Array(40 * 1024);
    nc.publish('coalesce.big', big);
    nc.publish('coalesce.big', big);
    // Past nats.js's 32 KiB threshold: written inline, before this turn ends.
    assert.ok(writes() >= 1, 'a buffer past the threshold is written at once');
    nc.publish('coalesce.big', 'last');
    let n = 0;
    for await (const _ of sub) n++;
    assert.equal(n, 3);
    await nc.flush();
    const reply = await nc.request('coalesce.echo', 'ping', { timeout: 5_000 });
    assert.equal(reply.string(), 'ping');
  });

  it('writes what was published before close() (nats.js closes the socket without writing its buffer)', async () => {
    const nc = await server.connect();
    coalesceWrites(nc);
    const sub = reader.subscribe('coalesce.closing', { max: 1 });
    await reader.flush();
    nc.publish('coalesce.closing', 'last words');
    await nc.close();
    for await (const m of sub) assert.equal(m.string(), 'last words');
    assert.equal(sub.getReceived(), 1);
  });

  it('is on for every connection connectNats makes', async () => {
    const nc = await connectNats({ servers: server.url, name: 'coalesce-test' });
    opened.push(nc);
    const sub = reader.subscribe('coalesce.kit', { max: 200 });
    await reader.flush();
    const writes = countWrites(nc);
    await publishAcrossMicrotasks(nc, 'coalesce.kit', 200);
    let n = 0;
    for await (const _ of sub) n++;
    assert.equal(n, 200);
    assert.ok(writes() <= 2, `connectNats: ${writes()} writes for 200 messages`);
  });
});
