/**
 * The inboxes are 16 streams, a participant in the one its id hashes to: a room whose members are in
 * different shards reaches each of them from its own shard's stream, and a deployment made before the
 * shards (one `PARLEY_INBOX` stream) gets every registered participant's inbox in its shard at the
 * next backbone setup, reading what it missed from room history.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AckPolicy, DeliverPolicy, jetstreamManager } from '@nats-io/jetstream';
import { type NatsConnection, nanos } from '@nats-io/transport-node';
import { headerNames, inboxShardOf, inboxStream, subjects } from '@parley/contracts';
import { ensureBackbone, LEGACY_INBOX_STREAM } from '@parley/kit';
import type { Delivery } from '@parley/sdk';
import {
  capturingLogger,
  connectService,
  memoryCursorStore,
  startParley,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

describe('inbox shards', () => {
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

  it('a room with members in different shards: each gets every message, in order, from its own shard’s stream', async () => {
    const sender = await parley.participant();
    const members = await Promise.all(Array.from({ length: 5 }, () => parley.participant()));
    const shards = new Set([sender, ...members].map((m) => inboxShardOf(m.id)));
    assert.ok(shards.size >= 2, `members in ${shards.size} shard(s)`);
    const got = new Map<string, string[]>(members.map((m) => [m.id, []]));
    const agents = await Promise.all(
      members.map(async (m) => {
        const a = await parley.connect(m.creds);
        a.on('message', (d) => {
          got.get(m.id)?.push(textOf(d));
        });
        await a.listening;
        return a;
      }),
    );
    const s = await parley.connect(sender.creds);
    const room = await s.rooms.create('across shards', { members: members.map((m) => m.id) });
    for (const t of ['one', 'two', 'three']) await room.send(t);
    await waitFor(
      () => [...got.values()].every((g) => g.length === 3),
      () => `3 messages for everyone (${[...got.values()].map((g) => g.length).join(', ')})`,
    );
    for (const g of got.values()) assert.deepEqual(g, ['one', 'two', 'three']);
    const jsm = await jetstreamManager(svc);
    for (const m of members) {
      const subject = subjects.inbox(m.id, room.id);
      const info = await jsm.streams.info(inboxStream(m.id), { subjects_filter: subject });
      assert.ok((info.state.subjects?.[subject] ?? 0) >= 3, `${m.id}'s entries in ${inboxStream(m.id)}`);
    }
    await Promise.all([...agents, s].map((a) => a.close()));
  });

  it('after an upgrade from the single inbox stream: the participant’s inbox is made in its shard, and it reads what it missed from room history', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const room = await sender.rooms.create('upgrade', { members: [r.id] });
    const store = memoryCursorStore();
    const got: Delivery[] = [];
    const before = await parley.connect(r.creds, { delivery: { cursorStore: store } });
    before.on('message', (d) => {
      got.push(d);
    });
    await before.listening;
    await room.send('before');
    await waitFor(() => got.length === 1, 'the message before the upgrade');
    await before.close();

    // The deployment as the version before the shards left it: r's inbox consumer in PARLEY_INBOX
    // (subjects parley.inbox.<participant>.<room>), none in its shard, and what was sent meanwhile
    // only in the old stream (here: removed from the shard's stream).
    const jsm = await jetstreamManager(svc);
    await jsm.streams.add({ name: LEGACY_INBOX_STREAM, subjects: ['parley.inbox.*.*'] });
    await jsm.consumers.add(LEGACY_INBOX_STREAM, {
      durable_name: r.id,
      filter_subject: `parley.inbox.${r.id}.*`,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(30_000),
    });
    await jsm.consumers.delete(inboxStream(r.id), r.id);
    const meanwhile = await room.send('meanwhile');
    // The fan-out writes the inbox entry after the send was accepted: purged once it is there.
    const subject = subjects.inbox(r.id, room.id);
    await waitFor(async () => {
      const last = await jsm.streams
        .getMessage(inboxStream(r.id), { last_by_subj: subject })
        .catch(() => null);
      return Number(last?.header.get(headerNames.roomSeq)) === meanwhile.roomSeq;
    }, 'the fan-out to write “meanwhile” to the inbox');
    await jsm.streams.purge(inboxStream(r.id), { filter: subject });

    const { log, lines } = capturingLogger();
    // The settings the harness started with (R3 streams on its cluster).
    const backbone = parley.cluster ? { replicas: 3, inboxConsumerReplicas: 1 } : {};
    const report = await ensureBackbone(svc, backbone, log);
    assert.ok((report.movedInboxes ?? 0) >= 1, `moved ${report.movedInboxes}`);
    assert.ok(lines.some((l) => l.includes(LEGACY_INBOX_STREAM) && l.includes('nats stream rm')));
    const made = await jsm.consumers.info(inboxStream(r.id), r.id);
    assert.equal(made.config.filter_subject, subjects.inboxAll(r.id));
    assert.ok(made.config.deliver_subject?.startsWith(subjects.inboxDeliver(r.id)));
    // Once made, a second setup has nothing to move.
    assert.equal((await ensureBackbone(svc, backbone, log)).movedInboxes, undefined);

    await room.send('after');
    const back = await parley.connect(r.creds, { delivery: { cursorStore: store } });
    back.on('message', (d) => {
      got.push(d);
    });
    await waitFor(
      () => got.length === 3,
      () => `3 messages (got ${got.map(textOf).join(', ')})`,
    );
    assert.deepEqual(got.map(textOf), ['before', 'meanwhile', 'after']);
    assert.equal(got[1]?.backfilled, true, 'the message that waited in the old stream, from room history');
    await Promise.all([back.close(), sender.close()]);
    await jsm.streams.delete(LEGACY_INBOX_STREAM);
  });
});
