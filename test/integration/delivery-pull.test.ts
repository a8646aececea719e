/**
 * Pull mode of the delivery engine (what the MCP bridge's wait_for_messages is built on): batches in
 * order, acknowledged only when the caller says so, released batches come back first, and what a
 * crashed or closed consumer held comes back to its successor.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { credsAuthenticator, connect as natsConnect } from '@nats-io/transport-node';
import { subjects } from '@parley/contracts';
import { attach, type CursorStore, type PulledDelivery } from '@parley/sdk';
import { startParley, type TestParley, textOf } from '@parley/test/harness';

const messages = (ds: readonly PulledDelivery[]) => ds.filter((d) => d.event === 'message').map(textOf);

describe('SDK delivery, pull mode', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley({ backbone: { inboxAckWaitMs: 1_500 } });
  });
  after(async () => {
    await parley?.destroy();
  });

  async function pair() {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds, { presence: false });
    const room = await sender.rooms.create('pull', { members: [r.id] });
    return { sender, room, r };
  }

  it('hands out batches in order, never again once acknowledged, and skips the own messages', async () => {
    const { room, r } = await pair();
    for (let i = 0; i < 5; i++) await room.send(`m${i}`);
    const reader = await parley.connect(r.creds, { presence: false, delivery: { mode: 'pull' } });
    await reader.rooms.room(room.id).send('my own');
    const got: string[] = [];
    const events: string[] = [];
    while (got.length < 5) {
      const batch = await reader.pull({ max: 2 });
      assert.ok(batch.deliveries.length <= 2);
      got.push(...messages(batch.deliveries));
      events.push(...batch.deliveries.map((d) => d.event));
      await batch.ack();
    }
    assert.deepEqual(got, ['m0', 'm1', 'm2', 'm3', 'm4']);
    assert.ok(events.includes('room_event'), 'the join is handed out as a room event');
    await reader.close();
    // Nothing comes back to the next reader: every batch was acknowledged.
    await room.send('after');
    const next = await parley.connect(r.creds, { presence: false, delivery: { mode: 'pull' } });
    const batch = await next.pull({ until: (d) => d.event === 'message' });
    assert.deepEqual(messages(batch.deliveries), ['after']);
    await batch.ack();
  });

  it('a released batch is handed out again first; a second pull waits for the first batch', async () => {
    const { room, r } = await pair();
    const reader = await parley.connect(r.creds, { presence: false, delivery: { mode: 'pull' } });
    for (let i = 0; i < 3; i++) await room.send(`r${i}`);
    const first = await reader.pull({ until: (d) => textOf(d) === 'r2' });
    assert.deepEqual(messages(first.deliveries), ['r0', 'r1', 'r2']);
    let secondDone = false;
    const second = reader.pull({ max: 10 }).then((b) => {
      secondDone = true;
      return b;
    });
    await new Promise((res) => setImmediate(res));
    assert.equal(secondDone, false, 'a second batch while the first is out');
    first.release();
    const again = await second;
    assert.deepEqual(messages(again.deliveries), ['r0', 'r1', 'r2']);
    await again.ack();
  });

  it('an aborted wait returns an empty batch and loses nothing', async () => {
    const { room, r } = await pair();
    const reader = await parley.connect(r.creds, { presence: false, delivery: { mode: 'pull' } });
    const joined = await reader.pull({});
    await joined.ack();
    const controller = new AbortController();
    const waiting = reader.pull({ until: (d) => d.event === 'message', signal: controller.signal });
    controller.abort();
    assert.deepEqual((await waiting).deliveries, []);
    await room.send('later');
    const b = await reader.pull({ until: (d) => d.event === 'message' });
    assert.deepEqual(messages(b.deliveries), ['later']);
    await b.ack();
  });

  it('what a consumer held without acknowledging comes back to the next one, in order and marked redelivered', async () => {
    const { room, r } = await pair();
    for (let i = 0; i < 4; i++) await room.send(`c${i}`);
    // A connection of its own that is closed abruptly: a crash as far as the server can tell.
    const nc = await natsConnect({
      servers: parley.natsUrl,
      authenticator: credsAuthenticator(new TextEncoder().encode(r.creds)),
      inboxPrefix: subjects.replyPrefix(r.id),
    });
    const doomed = attach(nc, r.id, { delivery: { mode: 'pull' } });
    const held = await doomed.pull({ until: (d) => textOf(d) === 'c3' });
    assert.deepEqual(messages(held.deliveries), ['c0', 'c1', 'c2', 'c3']);
    await nc.close(); // no ack, no nak
    await doomed.close(); // its timers; the connection is already gone
    const positions = new Map<string, number>();
    const store: CursorStore = { get: (k) => positions.get(k), set: (k, v) => void positions.set(k, v) };
    const next = await parley.connect(r.creds, {
      presence: false,
      delivery: { mode: 'pull', cursorStore: store },
    });
    const again = await next.pull({ until: (d) => textOf(d) === 'c3' });
    assert.deepEqual(messages(again.deliveries), ['c0', 'c1', 'c2', 'c3']);
    assert.ok(
      again.deliveries.filter((d) => d.event === 'message').every((d) => d.redelivered),
      'marked redelivered',
    );
    await again.ack();
    assert.equal(positions.get(room.id), again.deliveries.at(-1)?.roomSeq, 'the position was recorded');
  });
});
