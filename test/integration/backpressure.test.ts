/**
 * Backpressure in the SDK: a rate-limited send waits what the ingress says and goes again under the
 * same id (stored once, in order); an oversize message is refused at once with PAYLOAD_TOO_LARGE,
 * by the SDK when the NATS server could never carry it and by the ingress past its own limit.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { codeOf, startParley, type TestParley, textOf, waitFor } from '@parley/test/harness';

describe('SDK backpressure', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley({
      rooms: {
        PARLEY_RATE_AGENT_PER_SEC: 10,
        PARLEY_RATE_AGENT_BURST: 3,
        PARLEY_MAX_MESSAGE_BYTES: 64 * 1024,
      },
    });
  });
  after(async () => {
    await parley?.destroy();
  });

  it('a RATE_LIMITED send waits retryAfterMs and is stored once, in order, under its id', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const receiver = await parley.connect(r.creds);
    const got: string[] = [];
    receiver.on('message', (d) => {
      got.push(textOf(d));
    });
    await receiver.listening;
    const room = sender.rooms.room((await sender.rooms.create('pressure', { members: [r.id] })).id);
    const started = Date.now();
    const replies = [];
    // 12 sends at a burst of 3 and 10/s: the last 9 each wait for a token (~100 ms).
    for (let i = 0; i < 12; i++)
      replies.push(await room.send(`p${i}`, { clientMsgId: `bp-${i}-${started}` }));
    const took = Date.now() - started;
    assert.ok(took >= 700, `12 sends took ${took} ms: they must have waited for the rate`);
    const seqs = replies.map((x) => x.roomSeq);
    assert.deepEqual(
      seqs,
      [...seqs].sort((a, b) => a - b),
    );
    assert.equal(new Set(replies.map((x) => x.id)).size, 12);
    await waitFor(() => got.length === 12, 'all 12 delivered');
    assert.deepEqual(
      got,
      Array.from({ length: 12 }, (_, i) => `p${i}`),
    );
  });

  it('retryRateLimited: false throws the RATE_LIMITED refusal at once', async () => {
    const s = await parley.participant();
    const sender = await parley.connect(s.creds);
    const room = sender.rooms.room((await sender.rooms.create('no retry')).id);
    const codes: string[] = [];
    for (let i = 0; i < 6; i++) codes.push(await codeOf(room.send(`n${i}`, { retryRateLimited: false })));
    // A burst of 3 goes through; the rest are refused, not delayed.
    assert.deepEqual(codes.slice(0, 3), ['no error', 'no error', 'no error']);
    assert.ok(codes.slice(3).includes('RATE_LIMITED'), codes.join(','));
  });

  it('refuses an oversize message at once with PAYLOAD_TOO_LARGE: past the ingress limit and past the server’s', async () => {
    const s = await parley.participant();
    const sender = await parley.connect(s.creds);
    const room = sender.rooms.room((await sender.rooms.create('big')).id);
    let started = Date.now();
    assert.equal(await codeOf(room.send('x'.repeat(100 * 1024))), 'PAYLOAD_TOO_LARGE');
    assert.ok(Date.now() - started < 2_000, 'the ingress refused it at once');
    started = Date.now();
    assert.equal(await codeOf(room.send('x'.repeat(2 * 1024 * 1024))), 'PAYLOAD_TOO_LARGE');
    assert.ok(Date.now() - started < 500, 'the SDK refused it before sending');
    // Nothing was stored: the room log holds only the room's creation.
    const h = await room.history();
    assert.equal(h.entries.filter((e) => e.message.kind === 'message').length, 0);
  });
});
