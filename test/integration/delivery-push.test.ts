/**
 * Push-delivered inboxes: one connection per participant receives, a second one is refused, and an
 * inbox consumer made by an earlier version (a pull consumer) becomes a push one at its ack floor
 * without losing or repeating what was acknowledged.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type NatsConnection, nanos } from '@nats-io/transport-node';
import { INBOX_IDLE_HEARTBEAT_MS, inboxConsumer, inboxStream, subjects } from '@parley/contracts';
import { inboxConsumerConfig } from '@parley/kit';
import { codeOf, connectService, startParley, type TestParley, textOf, waitFor } from '@parley/test/harness';

describe('push-delivered inboxes', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
  });
  after(async () => {
    await svc?.close();
    await parley?.destroy();
  });

  /** A room of a sender and a receiver, the receiver connected and listening. */
  async function roomWithReceiver(name: string) {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const room = await sender.rooms.create(name, { members: [r.id] });
    const got: string[] = [];
    const agent = await parley.connect(r.creds);
    agent.on('message', (d) => {
      got.push(textOf(d));
    });
    await agent.listening;
    return { r, room, got, agent };
  }

  it('a second process of the same agent is refused while the first receives; after it stops the next one gets the rest', async () => {
    const { r, room, got: firstGot, agent: first } = await roomWithReceiver('one process');
    await room.send('a1');
    await waitFor(() => firstGot.length === 1, 'the first process to get a1');

    const secondGot: string[] = [];
    const errors: unknown[] = [];
    const second = await parley.connect(r.creds, { delivery: { onError: (e) => errors.push(e) } });
    second.on('message', (d) => {
      secondGot.push(textOf(d));
    });
    assert.equal(await codeOf(second.listening), 'CONFLICT');
    await room.send('a2');
    await waitFor(() => firstGot.length === 2, 'the first process to get a2');
    assert.deepEqual(secondGot, []);
    assert.equal(errors.length, 1);
    await second.close();

    await first.close();
    await room.send('a3');
    const thirdGot: string[] = [];
    const third = await parley.connect(r.creds);
    third.on('message', (d) => {
      thirdGot.push(textOf(d));
    });
    await third.listening;
    await waitFor(() => thirdGot.length === 1, 'the next process to get a3');
    assert.deepEqual([...firstGot, ...thirdGot], ['a1', 'a2', 'a3']);
  });

  it('after a reconnect, an inbox consumer made again while the agent was away is attached at once, not after two missed heartbeats', async () => {
    const { r, room, got, agent } = await roomWithReceiver('made again');
    await room.send('b1');
    await waitFor(() => got.length === 1, 'b1');
    const jsm = await jetstreamManager(svc);
    // The handler ran before its ack left: read the ack floor once the server applied the ack, or
    // the consumer made again below would start at b1 and hold two entries, not one (a clean clone's
    // run on a busy machine waited 30 s for "b2 in the inbox" that way).
    let before = await jsm.consumers.info(inboxStream(r.id), r.id);
    await waitFor(async () => {
      before = await jsm.consumers.info(inboxStream(r.id), r.id);
      return before.num_ack_pending === 0 && before.ack_floor.stream_seq >= before.delivered.stream_seq;
    }, 'b1 acknowledged');
    assert.equal(before.config.idle_heartbeat, nanos(INBOX_IDLE_HEARTBEAT_MS));
    // A service makes the consumer again (as an operator's repair or a migration would): it points
    // at the placeholder subject, not at this agent's connection, and nothing is pushed to it.
    await jsm.consumers.delete(inboxStream(r.id), r.id);
    await jsm.consumers.add(inboxStream(r.id), {
      ...inboxConsumerConfig(r.id),
      deliver_policy: DeliverPolicy.StartSequence,
      opt_start_seq: before.ack_floor.stream_seq + 1,
    });
    await room.send('b2');
    let pending = -1;
    await waitFor(
      async () => {
        pending = (await jsm.consumers.info(inboxStream(r.id), r.id)).num_pending;
        return pending === 1;
      },
      () => `b2 in the inbox (the consumer made again has ${pending} entries pending)`,
    );
    assert.deepEqual(got, ['b1']);
    await agent.nc.reconnect();
    // Two missed 30 s heartbeats would take a minute; the check after the reconnect attaches it.
    await waitFor(() => got.length === 2, 'b2 after the reconnect', 20_000);
    assert.deepEqual(got, ['b1', 'b2']);
  });

  it('turns a pull inbox consumer from an earlier version into a push one at its ack floor', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const jsm = await jetstreamManager(svc);
    // The inbox as an earlier version made it: a pull consumer.
    const def = inboxConsumer(r.id);
    await jsm.consumers.delete(inboxStream(r.id), r.id);
    await jsm.consumers.add(inboxStream(r.id), {
      durable_name: def.durableName,
      filter_subject: def.filterSubject,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(def.ackWaitMs),
      max_deliver: def.maxDeliver,
      max_ack_pending: def.maxAckPending,
    });
    const room = await sender.rooms.create('migration', { members: [r.id] });
    for (const t of ['m1', 'm2', 'm3']) await room.send(t);
    // The old version handled and acknowledged the membership event and m1, then stopped.
    const pull = await jetstream(svc).consumers.get(inboxStream(r.id), r.id);
    await waitFor(
      async () => (await jsm.consumers.info(inboxStream(r.id), r.id)).num_pending === 4,
      '4 entries',
    );
    for (let i = 0; i < 2; i++) {
      const m = await pull.next({ expires: 2_000 });
      assert.ok(m);
      await m.ackAck();
    }
    const got: string[] = [];
    const agent = await parley.connect(r.creds);
    agent.on('message', (d) => {
      got.push(textOf(d));
    });
    await agent.listening;
    await waitFor(() => got.length === 2, 'm2 and m3 after the migration');
    const info = await jsm.consumers.info(inboxStream(r.id), r.id);
    assert.equal(info.config.deliver_subject?.startsWith(`${subjects.inboxDeliver(r.id)}.`), true);
    assert.ok(info.config.flow_control);
    await room.send('m4');
    await waitFor(() => got.length === 3, 'm4 pushed');
    assert.deepEqual(got, ['m2', 'm3', 'm4']);
  });
});
