import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Delivery } from '@parley/sdk';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';

describe('rooms: the message path end to end', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('delivers a message to every member in order, through real inboxes', async () => {
    const a = await parley.participant();
    const b = await parley.participant();
    const c = await parley.participant();
    const alice = await parley.connect(a.creds);
    const bob = await parley.connect(b.creds);
    const carol = await parley.connect(c.creds);
    const got: Record<string, Delivery[]> = { bob: [], carol: [] };
    bob.on('message', (d) => {
      got.bob?.push(d);
    });
    carol.on('message', (d) => {
      got.carol?.push(d);
    });
    await Promise.all([bob.listening, carol.listening]);
    const room = await alice.rooms.create('plan review', { members: [b.id, c.id] });
    assert.equal(room.room.members.length, 3);
    const sent = [];
    for (let i = 0; i < 20; i++) sent.push(await room.send(`message ${i}`));
    await waitFor(() => got.bob?.length === 20 && got.carol?.length === 20, 'both to receive 20 messages');
    for (const who of ['bob', 'carol']) {
      const texts = got[who]?.map((d) => (d.message.parts[0] as { text: string }).text);
      assert.deepEqual(
        texts,
        sent.map((_, i) => `message ${i}`),
      );
      assert.deepEqual(
        got[who]?.map((d) => d.message.id),
        sent.map((s) => s.id),
      );
      assert.ok(got[who]?.every((d) => d.message.sender.id === a.id && d.room === room.id));
    }
    const seqs = sent.map((s) => s.roomSeq);
    assert.deepEqual(
      [...seqs].sort((x, y) => x - y),
      seqs,
    );
  });
});
