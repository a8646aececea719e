import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type PulledMsg, PullLoop } from '@parley/contracts';
import { startServer, type TestServer, waitFor } from '@parley/test/harness';

describe('the pull loop of inboxes and partitions (in place of nats.js consume)', () => {
  let server: TestServer;
  let nc: NatsConnection;
  let n = 0;
  before(async () => {
    server = await startServer();
    nc = await server.connect({
      inboxPrefix: '_INBOX.tester',
      maxReconnectAttempts: -1,
      reconnectTimeWait: 50,
    });
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  /** A stream with one durable consumer, and a loop on it that records what arrives. */
  async function setup(expiresMs = 1_000) {
    const name = `S${++n}`;
    const jsm = await jetstreamManager(nc);
    await jsm.streams.add({ name, subjects: [`${name}.>`] });
    await jsm.consumers.add(name, { durable_name: 'c', ack_policy: AckPolicy.Explicit, ack_wait: 30e9 });
    const got: PulledMsg[] = [];
    const errors: Error[] = [];
    const loop = new PullLoop(nc, {
      stream: name,
      consumer: 'c',
      inboxPrefix: '_INBOX.tester',
      expiresMs,
      maxMessages: 8,
      onMessage: (m) => got.push(m),
      onError: (e) => errors.push(e),
    });
    const js = jetstream(nc);
    const publish = (i: number) => js.publish(`${name}.x`, `m${i}`);
    return { name, jsm, loop, got, errors, publish };
  }

  it('delivers in stream order, more than one pull batch, with delivery count, time and subject', async () => {
    const { loop, got, publish } = await setup();
    const before = Date.now();
    for (let i = 1; i <= 50; i++) await publish(i);
    await waitFor(() => got.length === 50, '50 messages');
    loop.close();
    assert.deepEqual(
      got.map((m) => m.seq),
      Array.from({ length: 50 }, (_, i) => i + 1),
    );
    assert.equal(new TextDecoder().decode(got[49]?.data), 'm50');
    assert.equal(got[0]?.info.deliveryCount, 1);
    assert.equal(got[0]?.subject.endsWith('.x'), true);
    const ms = (got[0]?.info.timestampNanos ?? 0) / 1e6;
    assert.ok(ms >= before - 1_000 && ms <= Date.now() + 1_000, `stored at ${ms}`);
    assert.ok(loop.stats.requests >= 50 / 8, `${loop.stats.requests} requests for 50 messages of at most 8`);
    for (const m of got) m.ack();
  });

  it('accounts for every expired pull request through its 408: none counted as silently lost', async () => {
    const { loop, publish, got } = await setup(500);
    // Idle: each request expires at the server, which answers 408.
    await waitFor(() => loop.stats.requests >= 6, 'six pull requests');
    await publish(1);
    await waitFor(() => got.length === 1, 'the message');
    loop.close();
    assert.equal(loop.stats.silent, 0);
  });

  it('nak with a delay redelivers after it, counted; ackAck is confirmed; term stops redelivery', async () => {
    const { loop, got, publish, jsm, name } = await setup();
    await publish(1);
    await publish(2);
    await waitFor(() => got.length === 2, 'two messages');
    const t = Date.now();
    got[0]?.nak(300);
    await waitFor(() => got.length === 3, 'the redelivery');
    assert.ok(Date.now() - t >= 250, `redelivered after ${Date.now() - t} ms`);
    assert.equal(got[2]?.seq, 1);
    assert.equal(got[2]?.info.deliveryCount, 2);
    assert.equal(await got[2]?.ackAck(), true);
    got[1]?.term();
    await waitFor(async () => (await jsm.consumers.info(name, 'c')).num_ack_pending === 0, 'nothing pending');
    loop.close();
  });

  it('resumes after nats-server is killed and restarted, and reports a deleted consumer', async () => {
    const { loop, got, errors, publish, jsm, name } = await setup();
    await publish(1);
    await waitFor(() => got.length === 1, 'the first message');
    await server.kill9();
    await server.restart();
    await waitFor(async () => {
      try {
        await publish(2);
        return true;
      } catch {
        return false;
      }
    }, 'a publish accepted after the restart');
    await waitFor(() => got.some((m) => m.seq === 2), 'the message sent after the restart', 15_000);
    await jsm.consumers.delete(name, 'c');
    await waitFor(() => errors.some((e) => /\bc\b/.test(e.message)), 'an error naming the consumer', 15_000);
    loop.close();
  });
});
