/**
 * A push inbox consumer the server reports as having no subscriber, while this connection is
 * subscribed, is subscribed to again (nats-server before 2.10.28 and 2.11.2 can leave a push
 * consumer in that state, delivering nothing, after a delivery failed as a connection closed:
 * nats-server PR #6807). The state comes from a race inside the server that a test cannot bring
 * about on demand, so the server's answer about the binding is the one part given here; the server,
 * the consumer, the subscription and the deliveries are real.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type ConsumerInfo, jetstreamManager } from '@nats-io/jetstream';
import { nuid } from '@nats-io/transport-node';
import { inboxStream, roomsApi, subjects } from '@parley/contracts';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';
import { type Delivery, DeliveryEngine } from '../src/delivery.js';

const text = (d: Delivery) => d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');

describe('an inbox consumer the server reports unbound', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('is subscribed to again after a reconnect, and delivers once each what comes next; a bound one is left alone', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const room = await sender.rooms.create('unbound', { members: [r.id] });
    // The receiver's connection, with a delivery engine of its own whose view of the consumer can
    // be told "nobody bound" (what the server answers for a consumer in the defect's state).
    const receiver = await parley.connect(r.creds);
    const jsm = await jetstreamManager(receiver.nc, { checkAPI: false });
    let unboundAnswers = 0;
    let infoCalls = 0;
    const session = nuid.next();
    const failures: { message: string; details?: Record<string, unknown> }[] = [];
    const got: string[] = [];
    const engine = new DeliveryEngine(
      r.id,
      {
        onFailure: (err, _source, details) =>
          failures.push({ message: (err as Error).message, ...(details ? { details } : {}) }),
      },
      () => Promise.reject(new Error('no gap expected')),
    );
    engine.on('message', (d) => {
      got.push(text(d));
    });
    await engine.start({
      nc: receiver.nc,
      deliverSubject: subjects.inboxDeliver(r.id, session),
      info: async (): Promise<ConsumerInfo> => {
        infoCalls++;
        const info = await jsm.consumers.info(inboxStream(r.id), r.id);
        if (unboundAnswers === 0) return info;
        unboundAnswers--;
        return { ...info, push_bound: false };
      },
      attach: async () => (await receiver.call(roomsApi.attachInbox, { session })).resumedAfter,
    });
    try {
      await room.send('m1');
      await waitFor(() => got.length === 1, 'm1');

      // A reconnect with the consumer bound: checked, left as it is.
      let calls = infoCalls;
      await receiver.nc.reconnect();
      await waitFor(() => infoCalls > calls, 'the consumer checked after the reconnect');
      await room.send('m2');
      await waitFor(() => got.length === 2, 'm2');
      assert.equal(failures.length, 0, JSON.stringify(failures));

      // Reported unbound once: asked again, bound by then, left alone.
      calls = infoCalls;
      unboundAnswers = 1;
      await receiver.nc.reconnect();
      await waitFor(() => infoCalls >= calls + 2, 'the consumer asked about twice');
      await room.send('m3');
      await waitFor(() => got.length === 3, 'm3');
      assert.equal(failures.length, 0, JSON.stringify(failures));

      // Reported unbound twice: subscribed again, said so, and nothing lost or repeated.
      unboundAnswers = 2;
      await receiver.nc.reconnect();
      await waitFor(() => failures.length > 0, 'the engine to subscribe again');
      assert.deepEqual(
        failures.map((f) => f.details?.reason),
        ['inbox_unbound'],
      );
      assert.match(failures[0]?.message ?? '', /subscribed again/);
      for (const t of ['m4', 'm5']) await room.send(t);
      await waitFor(() => got.length === 5, 'm4 and m5 after subscribing again');
      assert.deepEqual(got, ['m1', 'm2', 'm3', 'm4', 'm5']);
      // Bound again as the server sees it, and every ack applied (nothing left to come again).
      await waitFor(async () => {
        const info = await jsm.consumers.info(inboxStream(r.id), r.id);
        return info.push_bound === true && info.num_ack_pending === 0;
      }, 'the consumer bound with nothing unacknowledged');
    } finally {
      await engine.close();
    }
  });
});
