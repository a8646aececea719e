/**
 * The fan-out's de-duplication of inbox writes is by message, not by room-log position. Two states a
 * room log can be left in by JetStream under faults, each made here by hand on a real nats-server:
 * - a position reused by another message: after a stream leader lost an acknowledged write (seen on
 *   nats-server 2.9.10 after a SIGSTOP of the leader, in the chaos test), the log went on from an
 *   earlier position, and the inbox writes made for the lost entry are still in the inbox's dedupe
 *   window. A position-based id took the new message's writes for those: it never arrived, and the
 *   fan-out re-ran its batch until it gave up.
 * - one message at two positions (appended again after the room log's dedupe window): delivered once,
 *   and the room goes on;
 * - a member that handled a message at a position the log then lost (past its end, or now holding
 *   another message): the new messages at or below that position reach it, in order, once.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import { headerNames, newId, streams, subjects } from '@parley/contracts';
import {
  connectService,
  senderAndReceiver,
  startParley,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

/** Well under the fan-out's give-up (30 re-runs) and the inbox's 2 min dedupe window. */
const BOUND_MS = 20_000;

describe('fan-out de-duplication of inbox writes', () => {
  let parley: TestParley;
  let nc: NatsConnection;
  let js: JetStreamClient;
  let jsm: JetStreamManager;
  before(async () => {
    parley = await startParley({ nodes: 1 });
    nc = await connectService(parley);
    js = jetstream(nc);
    jsm = await jetstreamManager(nc);
  });
  after(async () => {
    await nc?.close();
    await parley?.destroy();
  });

  async function roomWithMember() {
    const { room, member, handled } = await senderAndReceiver(parley, 'dedupe');
    await room.send('warm-up');
    await waitFor(() => handled.length === 1, 'the warm-up to be handled');
    return { room, member, handled };
  }

  it('a message at a room-log position an earlier, lost entry was written for reaches the member', async () => {
    const { room, member, handled } = await roomWithMember();
    // What the lost entry left: an inbox write for the next position, to this member, still within
    // the dedupe window (its subject is another room's: only the id matters to the dedupe).
    const next = (await jsm.streams.info(streams.rooms)).state.last_seq + 1;
    const h = natsHeaders();
    h.set(headerNames.roomSeq, String(next));
    await js.publish(subjects.inbox(member, 'room_00000000000000000000000000'), '{}', {
      headers: h,
      msgID: `${next}:${member}`,
    });
    const reused = await room.send('at a reused position');
    assert.equal(reused.roomSeq, next, 'the test writes for the position the message is stored at');
    const after = await room.send('after it');
    await waitFor(
      () => handled.some((d) => d.message.id === after.id),
      () => `both to be handled (handled: ${handled.map(textOf).join(', ')})`,
      BOUND_MS,
    );
    assert.deepEqual(handled.map(textOf), ['warm-up', 'at a reused position', 'after it']);
  });

  // What a room log that lost its last entries leaves behind: the member handled a message at a
  // position the log no longer holds, and the log goes on from an earlier position, so new messages
  // come at or below it. The fan-out's cursor and the SDK's "handled before" check are by position:
  // both took the new messages for delivered ones.
  for (const lost of ['past the log’s end', 'now holding another message'] as const) {
    it(`messages at positions up to the member's last one, which the log lost (${lost}), reach it in order`, async () => {
      const { room, member, handled } = await roomWithMember();
      const next = (await jsm.streams.info(streams.rooms)).state.last_seq + 1;
      // The lost entry: past the log's end (the tail lost), or at the next position (reused).
      const at = lost === 'past the log’s end' ? next + 2 : next;
      const warm = handled[0];
      assert.ok(warm);
      const phantom = { ...warm.message, id: newId('message'), parts: [{ type: 'text', text: 'lost' }] };
      const h = natsHeaders();
      h.set(headerNames.roomSeq, String(at));
      h.set(headerNames.prevSeq, String(warm.roomSeq));
      h.set(headerNames.messageId, phantom.id);
      await js.publish(subjects.inbox(member, room.id), JSON.stringify(phantom), {
        headers: h,
        msgID: `${phantom.id}:${member}`,
      });
      await waitFor(() => handled.length === 2, 'the lost message to be handled');
      const sent = [];
      for (const t of ['a', 'b', 'c', 'd']) sent.push(await room.send(t));
      assert.equal(
        sent[0]?.roomSeq,
        next,
        'the new messages are stored from the position after the log’s end',
      );
      await waitFor(
        () => handled.length >= 6,
        () => `the four to be handled (handled: ${handled.map(textOf).join(', ')})`,
        BOUND_MS,
      );
      assert.deepEqual(handled.map(textOf), ['warm-up', 'lost', 'a', 'b', 'c', 'd']);
      assert.deepEqual(
        handled.map((d) => d.rewound),
        [undefined, undefined, at, undefined, undefined, undefined],
        'the first delivery after the lost position names it',
      );
      // Nothing more comes (no duplicate) once the room goes on.
      const after = await room.send('after');
      await waitFor(() => handled.some((d) => d.message.id === after.id), 'the next message');
      assert.deepEqual(handled.map(textOf).slice(2), ['a', 'b', 'c', 'd', 'after']);
    });
  }

  it('a message the room log holds twice is handled once, and the room goes on', async () => {
    const { room, handled } = await roomWithMember();
    const once = await room.send('once');
    await waitFor(() => handled.some((d) => d.message.id === once.id), 'the message to be handled');
    // Its entry appended again, as a repeat after the room log's dedupe window would be.
    const stored = await jsm.streams.getMessage(streams.rooms, { seq: once.roomSeq });
    assert.ok(stored, 'the room log holds the message');
    const copy = natsHeaders();
    for (const [k, v] of stored.header) if (k !== 'Nats-Msg-Id') for (const x of v) copy.append(k, x);
    await js.publish(stored.subject, stored.data, { headers: copy, msgID: `again-${once.id}` });
    const next = await room.send('next');
    await waitFor(
      () => handled.some((d) => d.message.id === next.id),
      () => `the next message to be handled (handled: ${handled.map(textOf).join(', ')})`,
      BOUND_MS,
    );
    assert.deepEqual(handled.map(textOf), ['warm-up', 'once', 'next']);
  });
});
