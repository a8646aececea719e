import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { decodeJson, encodeJson, SendReply, type SendRequest, subjects } from '@parley/contracts';
import type { Delivery } from '@parley/sdk';
import { senderAndReceiver, startParley, type TestParley, waitFor } from '@parley/test/harness';

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

  it("keeps a sender's trace context whose header name a bridge changed the case of", async () => {
    const { sender, room, handled } = await senderAndReceiver(parley, 'traced');
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    const h = natsHeaders();
    h.set('TraceParent', traceparent);
    const req: SendRequest = {
      clientMsgId: 'traced-1',
      room: room.id,
      kind: 'message',
      parts: [{ type: 'text', text: 'traced' }],
      mentions: [],
      hop: 0,
    };
    const reply = decodeJson(
      SendReply,
      (await sender.nc.request(subjects.send(sender.id), encodeJson(req), { headers: h, timeout: 10_000 }))
        .data,
    );
    await waitFor(() => handled.some((d) => d.message.id === reply.id), 'the member to receive the message');
    const delivered = handled.find((d) => d.message.id === reply.id);
    // The trace id is the sender's (the span id is the sender's, or the ingress's own when it records).
    assert.equal(delivered?.message.trace?.traceparent.split('-')[1], '0af7651916cd43dd8448eb211c80319c');
  });
});
