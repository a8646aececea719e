/**
 * A durable worker whose consumer nats-server lost the state of (nats-server before 2.11.11 rewrites
 * a consumer's state file in place; a kill -9 between the truncate and the write leaves it empty).
 * Made here exactly: the state file is emptied while nats-server is stopped.
 */
import assert from 'node:assert/strict';
import { truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  AckPolicy,
  type JetStreamManager,
  type JsMsg,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { type DurableWorker, durableWorker, workerFloorKey } from '@parley/kit';
import { startServer, streamDir, type TestServer, waitFor } from '@parley/test/harness';

describe('a durable worker whose consumer nats-server lost the state of', () => {
  let server: TestServer;
  let nc: NatsConnection;
  let jsm: JetStreamManager;
  let floors: KV;
  before(async () => {
    server = await startServer();
    nc = await server.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    jsm = await jetstreamManager(nc);
    floors = await new Kvm(nc).create('kit_floors');
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  /** A worker on `stream`'s consumer `name` that records the sequences it handles. */
  const worker = (stream: string, name: string, handled: number[], fromEnd: boolean): DurableWorker =>
    durableWorker({
      js: jetstream(nc),
      jsm,
      stream,
      consumer: { durable_name: name, ack_policy: AckPolicy.Explicit },
      maxMessages: 16,
      fromEnd,
      floors,
      floorsEveryMs: 100,
      handle: async (m: JsMsg) => {
        handled.push(m.seq);
      },
      retry: () => 'term',
    });

  async function publish(subject: string, n: number): Promise<number[]> {
    const js = jetstream(nc);
    const seqs: number[] = [];
    for (let i = 0; i < n; i++) seqs.push((await js.publish(subject, `m${i}`)).seq);
    return seqs;
  }

  /** Kills nats-server, empties the consumer's state file, and starts it again. */
  async function loseState(stream: string, consumer: string): Promise<void> {
    await server.kill9();
    const dir = await streamDir(server.dir, stream);
    assert.ok(dir, `${stream} is in the store`);
    await truncate(join(dir, 'obs', consumer, 'o.dat'), 0);
    await server.restart();
    await waitFor(
      async () => !!(await jsm.consumers.info(stream, consumer).catch(() => undefined)),
      'JetStream',
    );
  }

  for (const fromEnd of [false, true]) {
    it(`${fromEnd ? 'started from the end of its stream: handles what was stored while it was away, not' : 'handles what came after its recorded floor, not'} what it handled before${fromEnd ? ' and not the events before its start' : ''}`, async () => {
      const stream = fromEnd ? 'WORKER_END' : 'WORKER_ALL';
      const subject = fromEnd ? 'wend.x' : 'wall.x';
      await jsm.streams.add({
        name: stream,
        subjects: [subject],
        retention: RetentionPolicy.Limits,
        storage: StorageType.File,
      });
      const before = fromEnd ? await publish(subject, 10) : [];
      const handled: number[] = [];
      const first = worker(stream, 'w', handled, fromEnd);
      await first.start();
      const earlier = await publish(subject, 50);
      await waitFor(() => handled.length === earlier.length, 'the earlier messages handled');
      const last = earlier.at(-1);
      await waitFor(
        async () => Number((await floors.get(workerFloorKey('w')))?.string()) === last,
        'the floor recorded',
      );
      await first.stop();
      assert.deepEqual(handled, earlier);

      // Stored while the worker is away (a deploy, say), then the crash.
      const away = await publish(subject, 5);
      await loseState(stream, 'w');
      const again: number[] = [];
      const second = worker(stream, 'w', again, fromEnd);
      await second.start();
      const later = await publish(subject, 5);
      try {
        await waitFor(() => later.every((s) => again.includes(s)), 'the later messages handled');
        console.log(
          `worker-floors (${fromEnd ? 'from the end' : 'from the start'}): after the state was lost the worker handled ${again.length} messages (${away.length + later.length} new, ${earlier.length} handled before${before.length ? `, ${before.length} before its start` : ''})`,
        );
        assert.deepEqual(again, [...away, ...later]);
      } finally {
        await second.stop();
      }
    });
  }
});
