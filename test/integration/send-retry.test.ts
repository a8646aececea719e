/**
 * A retried send (same client id) is answered with the id of the copy the room log stored first.
 * The ingress reads that copy back by its position from the stream leader (a direct get may be
 * answered by a follower still catching up after a cluster restart, which misses it), and when the
 * copy cannot be read it refuses the retry — never answers with the id of the copy that was not
 * stored, which the sender would count as accepted and no member would ever receive.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { streams } from '@parley/contracts';
import type { Delivery } from '@parley/sdk';
import { codeOf, connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';

describe('send retries: the answer names the stored copy', () => {
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

  it('a retry is answered with the stored id, read from the stream leader (direct reads not needed)', async () => {
    const jsm = await jetstreamManager(svc);
    const a = await parley.participant();
    const b = await parley.participant();
    const alice = await parley.connect(a.creds);
    const bob = await parley.connect(b.creds);
    const got: Delivery[] = [];
    bob.on('message', (d) => {
      got.push(d);
    });
    await bob.listening;
    const room = await alice.rooms.create('retry-leader', { members: [b.id] });
    const first = await room.send('once', { clientMsgId: 'leader-1' });
    // No replica answers direct gets any more: only the leader can say what is stored.
    const info = await jsm.streams.info(streams.rooms);
    await jsm.streams.update(streams.rooms, { ...info.config, allow_direct: false });
    try {
      const again = await room.send('once', { clientMsgId: 'leader-1' });
      assert.equal(again.id, first.id, 'the retry names the message stored the first time');
      assert.equal(again.roomSeq, first.roomSeq);
      const after = await room.send('after');
      await waitFor(() => got.some((d) => d.message.id === after.id), 'bob to receive the next message');
      assert.deepEqual(
        got.map((d) => d.message.id),
        [first.id, after.id],
        'bob received the retried message once, under the id its sender was given',
      );
    } finally {
      const now = await jsm.streams.info(streams.rooms);
      await jsm.streams.update(streams.rooms, { ...now.config, allow_direct: true });
    }
  });

  it('a retry whose stored copy cannot be read is refused (UNAVAILABLE), not answered with an id never stored', async () => {
    const jsm = await jetstreamManager(svc);
    const a = await parley.participant();
    const alice = await parley.connect(a.creds);
    const room = await alice.rooms.create('retry-unreadable');
    const first = await room.send('gone', { clientMsgId: 'unreadable-1' });
    // The first copy is in the de-duplication window but can no longer be read back.
    await jsm.streams.deleteMessage(streams.rooms, first.roomSeq);
    assert.equal(
      await codeOf(room.send('gone', { clientMsgId: 'unreadable-1', deadlineMs: 1_500 })),
      'UNAVAILABLE',
    );
    const history = await room.history({ limit: 50 });
    assert.deepEqual(
      history.entries.filter((e) => e.message.kind === 'message').map((e) => e.message.id),
      [],
      'nothing stored under another id',
    );
  });
});
