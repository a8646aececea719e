/**
 * A durable worker (the rooms dead-letter worker, the consent outbox) started while its cluster has
 * no JetStream quorum — a service restarted during a fault — waits for JetStream instead of exiting
 * on "JetStream system temporarily unavailable" (a rooms replica of the chaos test exited so), says
 * so in its log, and handles messages once a majority is back.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { type DurableWorker, durableWorker } from '@parley/kit';
import { capturingLogger, startServer, type TestServer, waitFor } from '@parley/test/harness';

describe('a durable worker started without JetStream quorum', () => {
  let cluster: TestServer | undefined;
  let nc: NatsConnection | undefined;
  let worker: DurableWorker | undefined;
  after(async () => {
    await worker?.stop();
    await nc?.close();
    await cluster?.stop();
  });

  it('waits, logs why, then consumes once a majority of the nodes is back', async () => {
    cluster = await startServer({ nodes: 3 });
    nc = await cluster.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    const jsm = await jetstreamManager(nc, { timeout: 2_000 });
    await jsm.streams.add({ name: 'WORK', subjects: ['work.>'], num_replicas: 3 });
    // Two of three nodes down: the stream and the meta layer have no leader.
    await cluster.kill9(1);
    await cluster.kill9(2);

    const { log, lines } = capturingLogger();
    const handled: string[] = [];
    worker = durableWorker({
      js: jetstream(nc),
      jsm,
      stream: 'WORK',
      consumer: { durable_name: 'worker', ack_policy: AckPolicy.Explicit },
      maxMessages: 8,
      handle: async (m) => {
        handled.push(m.string());
      },
      retry: () => 1_000,
      log,
    });
    let failed: unknown;
    let started = false;
    const starting = worker.start().then(
      () => {
        started = true;
      },
      (err: unknown) => {
        failed = err;
      },
    );
    await waitFor(
      () => failed !== undefined || lines.some((l) => l.includes('JetStream not available yet')),
      'the worker to say it waits for JetStream',
      30_000,
    );
    assert.equal(failed, undefined, `the start failed: ${String(failed)}`);
    assert.equal(started, false, 'started with no quorum');

    await cluster.restart(1);
    await starting;
    assert.equal(failed, undefined, `the start failed: ${String(failed)}`);
    // The stream elects its own leader, maybe after the worker started: published until it takes it
    // (under one id: a retry after a lost acknowledgement is stored once).
    await waitFor(
      () =>
        jetstream(nc as NatsConnection)
          .publish('work.1', 'after the outage', { msgID: 'after-the-outage', timeout: 2_000 })
          .then(
            () => true,
            () => false,
          ),
      'the stream to take the message',
      30_000,
    );
    await waitFor(() => handled.length === 1, 'the message to be handled', 30_000);
    assert.deepEqual(handled, ['after the outage']);
  });
});
