import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AckPolicy, jetstreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { isParleyError } from '@parley/contracts';
import {
  isConsumerExists,
  isConsumerInUse,
  isConsumerNotFound,
  isKvConflict,
  isStreamExists,
  isStreamNotFound,
  updateKv,
} from '@parley/kit';
import { startServer, type TestServer } from '@parley/test/harness';
import * as z from 'zod';

const Counter = z.object({ n: z.int().min(0), by: z.array(z.string()) });
type Counter = z.infer<typeof Counter>;

describe('updateKv (against nats-server)', () => {
  let server: TestServer;
  let nc: NatsConnection;
  let kv: KV;
  before(async () => {
    server = await startServer();
    nc = await server.connect();
    kv = await new Kvm(nc).create('kit_kv_update');
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  it('creates an absent record, then changes it with its revision', async () => {
    const first = await updateKv<Counter>(kv, 'a', (c) => ({ n: (c?.n ?? 0) + 1, by: ['x'] }), {
      schema: Counter,
    });
    assert.deepEqual([first.previous, first.value, first.written], [undefined, { n: 1, by: ['x'] }, true]);
    const second = await updateKv<Counter>(
      kv,
      'a',
      (c) => {
        c?.by.push('y'); // its own copy: mutating it does not change `previous`
        return c && { ...c, n: c.n + 1 };
      },
      { schema: Counter },
    );
    assert.deepEqual(second.previous, { n: 1, by: ['x'] });
    assert.deepEqual(second.value, { n: 2, by: ['x', 'y'] });
    assert.equal(second.revision, (await kv.get('a'))?.revision);
    assert.deepEqual((await kv.get('a'))?.json(), { n: 2, by: ['x', 'y'] });
  });

  it('leaves the record when change returns undefined, and a refusal writes nothing', async () => {
    await kv.put('b', JSON.stringify({ n: 5, by: [] }));
    const before = (await kv.get('b'))?.revision;
    const left = await updateKv<Counter>(kv, 'b', () => undefined, { schema: Counter });
    assert.deepEqual([left.written, left.value, left.revision], [false, { n: 5, by: [] }, before]);
    await assert.rejects(
      updateKv<Counter>(kv, 'b', () => {
        throw new Error('refused');
      }),
      /refused/,
    );
    assert.equal((await kv.get('b'))?.revision, before);
  });

  it('re-reads on a conflicting write and applies the change to the newer value', async () => {
    await kv.put('c', JSON.stringify({ n: 0, by: [] }));
    let calls = 0;
    const r = await updateKv<Counter>(kv, 'c', async (c) => {
      calls++;
      // Another writer gets in between the first read and the write.
      if (calls === 1) await kv.put('c', JSON.stringify({ n: 10, by: ['other'] }));
      return c && { n: c.n + 1, by: [...c.by, 'me'] };
    });
    assert.equal(calls, 2);
    assert.deepEqual(r.previous, { n: 10, by: ['other'] });
    assert.deepEqual((await kv.get('c'))?.json(), { n: 11, by: ['other', 'me'] });
  });

  it('two concurrent writers both land (no lost update)', async () => {
    await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        updateKv<Counter>(kv, 'd', (c) => ({ n: (c?.n ?? 0) + 1, by: [...(c?.by ?? []), `w${i}`] }), {
          schema: Counter,
        }),
      ),
    );
    const v = Counter.parse((await kv.get('d'))?.json());
    assert.equal(v.n, 8);
    assert.equal(new Set(v.by).size, 8);
  });

  it('gives up with UNAVAILABLE and retryAfterMs when the key keeps changing', async () => {
    await kv.put('e', JSON.stringify({ n: 0, by: [] }));
    let calls = 0;
    const err = await updateKv<Counter>(
      kv,
      'e',
      async (c) => {
        calls++;
        await kv.put('e', JSON.stringify({ n: 100 + calls, by: [] }));
        return c && { ...c, n: c.n + 1 };
      },
      { attempts: 3, retryAfterMs: 250, what: 'the counter e' },
    ).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(isParleyError(err, 'UNAVAILABLE'), String(err));
    assert.equal(err.retryAfterMs, 250);
    assert.match(err.message, /the counter e/);
    assert.equal(calls, 3);
    assert.deepEqual((await kv.get('e'))?.json(), { n: 103, by: [] });
  });

  it('a stored record that fails the schema is an error naming the key, and nothing is written', async () => {
    await kv.put('f', JSON.stringify({ n: -1 }));
    const before = (await kv.get('f'))?.revision;
    let called = false;
    const err = await updateKv<Counter>(
      kv,
      'f',
      () => {
        called = true;
        return { n: 1, by: [] };
      },
      { schema: Counter },
    ).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    assert.match(String(err?.message), /^f holds an invalid record/);
    assert.ok(!isParleyError(err), 'an internal error, not a client one');
    assert.equal(called, false);
    assert.equal((await kv.get('f'))?.revision, before);
  });

  it('a change that fails the schema writes nothing', async () => {
    await assert.rejects(
      updateKv<Counter>(kv, 'g', () => ({ n: -5, by: [] }) as Counter, { schema: Counter }),
      (e: Error) => e.name === 'ZodError',
    );
    assert.equal(await kv.get('g'), null);
  });

  it('a deleted record counts as absent and is created again', async () => {
    await kv.put('h', JSON.stringify({ n: 3, by: [] }));
    await kv.delete('h');
    const r = await updateKv<Counter>(kv, 'h', (c) => ({ n: (c?.n ?? 0) + 1, by: [] }), { schema: Counter });
    assert.deepEqual([r.previous, r.value], [undefined, { n: 1, by: [] }]);
  });
});

describe('JetStream error predicates (codes from nats-server)', () => {
  let server: TestServer;
  let nc: NatsConnection;
  before(async () => {
    server = await startServer();
    nc = await server.connect();
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  const errorOf = (p: Promise<unknown>) =>
    p.then(
      () => assert.fail('expected a refusal'),
      (e: unknown) => e,
    );

  it('classifies each refusal by its code, and only that one', async () => {
    const jsm = await jetstreamManager(nc);
    const kv = await new Kvm(nc).create('kit_predicates');
    await jsm.streams.add({ name: 'P', subjects: ['p.>'] });
    await jsm.consumers.add('P', { durable_name: 'c', ack_policy: AckPolicy.Explicit });
    await jsm.consumers.add('P', {
      durable_name: 'push',
      ack_policy: AckPolicy.Explicit,
      deliver_subject: 'dp.1',
    });
    const sub = nc.subscribe('dp.1');
    await nc.flush();
    await kv.put('k', 'v');
    const seen = {
      streamNotFound: await errorOf(jsm.streams.info('NOPE')),
      streamExists: await errorOf(jsm.streams.add({ name: 'P', subjects: ['q.>'] })),
      consumerNotFound: await errorOf(jsm.consumers.info('P', 'nope')),
      consumerInUse: await errorOf(jsm.consumers.update('P', 'push', { deliver_subject: 'dp.2' })),
      kvCreateExists: await errorOf(kv.create('k', 'w')),
      kvStaleRevision: await errorOf(kv.update('k', 'w', 999)),
    };
    sub.unsubscribe();
    const predicates = {
      isStreamNotFound,
      isStreamExists,
      isConsumerNotFound,
      isConsumerInUse,
      isKvConflict,
    };
    const table = Object.fromEntries(
      Object.entries(seen).map(([what, err]) => [
        what,
        Object.entries(predicates)
          .filter(([, p]) => p(err))
          .map(([name]) => name),
      ]),
    );
    assert.deepEqual(table, {
      streamNotFound: ['isStreamNotFound'],
      streamExists: ['isStreamExists'],
      consumerNotFound: ['isConsumerNotFound'],
      consumerInUse: ['isConsumerInUse'],
      kvCreateExists: ['isKvConflict'],
      kvStaleRevision: ['isKvConflict'],
    });
    assert.ok(isConsumerExists(seen.consumerInUse));
  });

  it('an error whose message merely reads like a refusal is not one', () => {
    for (const p of [isKvConflict, isConsumerNotFound, isStreamNotFound, isConsumerInUse])
      assert.equal(
        p(new Error('wrong last sequence: consumer not found, stream not found, already in use')),
        false,
      );
    assert.equal(isKvConflict({ code: 'constructor' }), false);
    assert.equal(isKvConflict(undefined), false);
  });
});
