import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  buckets,
  encodeJson,
  headerNames,
  newId,
  policyKeys,
  roomsApi,
  streams,
  subjects,
} from '@parley/contracts';
import type { Agent, Delivery } from '@parley/sdk';
import {
  errorCode,
  serviceConnection,
  startParley,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

describe('rooms', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  const people: Record<string, { id: string; agent: Agent; got: Delivery[]; events: Delivery[] }> = {};

  /** Messages stored in the room log, all rooms together. */
  async function logSize(): Promise<number> {
    const jsm = await jetstreamManager(svc);
    return (await jsm.streams.info(streams.rooms)).state.messages;
  }

  async function person(name: string) {
    const p = await parley.participant();
    const agent = await parley.connect(p.creds, { delivery: { backoffMs: () => 50 } });
    const entry = { id: p.id, agent, got: [] as Delivery[], events: [] as Delivery[] };
    agent.on('message', (d) => {
      entry.got.push(d);
    });
    agent.on('room_event', (d) => {
      entry.events.push(d);
    });
    await agent.listening;
    people[name] = entry;
    return entry;
  }

  before(async () => {
    parley = await startParley();
    svc = await serviceConnection(parley);
    for (const n of ['alice', 'bob', 'carol', 'dave']) await person(n);
  });
  after(async () => {
    await svc?.close();
    await parley?.destroy();
  });

  const p = (name: string) => {
    const x = people[name];
    if (!x) throw new Error(name);
    return x;
  };

  it('creates a room, lists it for each member, and shows members with roles', async () => {
    const room = await p('alice').agent.rooms.create('design', { members: [p('bob').id] });
    assert.equal(room.room.owner, p('alice').id);
    assert.deepEqual(
      room.room.members.map((m) => [m.id, m.role]),
      [
        [p('alice').id, 'owner'],
        [p('bob').id, 'member'],
      ],
    );
    const bobs = await p('bob').agent.rooms.list();
    assert.ok(bobs.some((r) => r.id === room.id && r.role === 'member' && r.memberCount === 2));
    const carols = await p('carol').agent.rooms.list();
    assert.ok(!carols.some((r) => r.id === room.id));
  });

  it('delivers by position in the log: a member added later does not get earlier messages; a removed one stops', async () => {
    const alice = p('alice');
    const room = await alice.agent.rooms.create('positions', { members: [p('bob').id] });
    await room.send('before carol');
    await room.invite(p('carol').id);
    await room.send('with carol');
    await room.remove(p('bob').id);
    await room.send('after bob');
    await waitFor(
      () => p('carol').got.some((d) => textOf(d) === 'after bob'),
      'carol to get the last message',
    );
    const inRoom = (name: string) =>
      p(name)
        .got.filter((d) => d.room === room.id)
        .map(textOf);
    assert.deepEqual(inRoom('carol'), ['with carol', 'after bob']);
    await waitFor(() => inRoom('bob').includes('with carol'), 'bob to get the second message');
    assert.deepEqual(inRoom('bob'), ['before carol', 'with carol']);
    // Membership changes are room events, delivered in the same order.
    await waitFor(
      () =>
        p('bob').events.some(
          (d) =>
            d.room === room.id &&
            d.message.parts.some((x) => x.type === 'data' && x.data.change === 'removed'),
        ),
      'bob to see his removal',
    );
    // The removed member can no longer send.
    await assert.rejects(
      p('bob').agent.rooms.room(room.id).send('let me back'),
      (e) => errorCode(e) === 'NOT_A_MEMBER',
    );
  });

  it('honours a mentions-only delivery filter', async () => {
    const room = await p('alice').agent.rooms.create('filtered', { members: [p('dave').id] });
    await room.setMember(p('dave').id, { delivery: 'mentions' });
    await room.send('not for dave');
    await room.send('for dave', { mentions: [p('dave').id] });
    await room.send('not for dave either');
    await room.send('end', { mentions: [p('dave').id] });
    // Dave's inbox is in room order: once "end" arrived, anything else he was sent arrived before it.
    await waitFor(() => p('dave').got.some((d) => textOf(d) === 'end'), 'dave to get the last mention');
    assert.deepEqual(
      p('dave')
        .got.filter((d) => d.room === room.id)
        .map(textOf),
      ['for dave', 'end'],
    );
    // Room events still reach a mentions-only member.
    assert.ok(
      p('dave').events.some(
        (d) =>
          d.room === room.id && d.message.parts.some((x) => x.type === 'data' && x.data.change === 'updated'),
      ),
    );
  });

  it('pages history newest or oldest first, members only', async () => {
    const room = await p('alice').agent.rooms.create('history', { members: [p('bob').id] });
    for (let i = 0; i < 12; i++) await room.send(`h${i}`);
    const newest = await room.history({ limit: 5 });
    assert.deepEqual(
      newest.entries.map((e) => (e.message.parts[0] as { text: string }).text),
      ['h11', 'h10', 'h9', 'h8', 'h7'],
    );
    assert.equal(newest.more, true);
    const older = await room.history({ limit: 5, before: newest.entries.at(-1)?.seq });
    assert.deepEqual(
      older.entries.map((e) => (e.message.parts[0] as { text: string }).text),
      ['h6', 'h5', 'h4', 'h3', 'h2'],
    );
    const oldest = await room.history({ order: 'oldest', limit: 4 });
    assert.deepEqual(
      oldest.entries.map((e) => e.message.kind),
      ['room', 'membership', 'membership', 'message'],
    );
    const all = await room.history({ order: 'oldest', limit: 200 });
    assert.equal(all.entries.length, 15);
    assert.equal(all.more, false);
    const seqs = all.entries.map((e) => e.seq);
    assert.deepEqual(
      [...seqs].sort((a, b) => a - b),
      seqs,
    );
    await assert.rejects(
      p('carol').agent.rooms.room(room.id).history(),
      (e) => errorCode(e) === 'NOT_A_MEMBER',
    );
  });

  it('pages history of large messages by size as well: every page fits a NATS message, none is lost', async () => {
    const room = await p('alice').agent.rooms.create('large history', { members: [p('bob').id] });
    // 12 messages of 120,000 characters: 1.4 MB, more than one NATS message (1 MiB) carries.
    const texts = Array.from({ length: 12 }, (_, i) => `${i}`.padEnd(120_000, String.fromCharCode(97 + i)));
    for (const t of texts) await room.send(t);
    const textOf = (e: { message: { parts: unknown[] } }) => (e.message.parts[0] as { text: string }).text;
    const newest: string[] = [];
    let before: number | undefined;
    let pages = 0;
    for (;;) {
      const page = await room.history({ limit: 12, ...(before ? { before } : {}) });
      pages++;
      newest.push(...page.entries.filter((e) => e.message.kind === 'message').map(textOf));
      if (!page.more) break;
      assert.ok(page.entries.length < 12, 'a page that is cut short by size says more');
      before = page.entries.at(-1)?.seq;
    }
    assert.ok(pages >= 2, `paged in ${pages} pages`);
    assert.deepEqual(newest, [...texts].reverse());
    const oldest: string[] = [];
    let after: number | undefined;
    for (;;) {
      const page = await room.history({ order: 'oldest', limit: 15, ...(after ? { after } : {}) });
      oldest.push(...page.entries.filter((e) => e.message.kind === 'message').map(textOf));
      if (!page.more) break;
      after = page.entries.at(-1)?.seq;
    }
    assert.deepEqual(oldest, texts);
  });

  it('de-duplicates a retried send: same id, one stored message', async () => {
    const room = await p('alice').agent.rooms.create('retries', { members: [p('bob').id] });
    const before = await logSize();
    const first = await room.send('once', { clientMsgId: 'retry-1' });
    const again = await room.send('once', { clientMsgId: 'retry-1' });
    assert.equal(again.id, first.id);
    assert.equal(again.roomSeq, first.roomSeq);
    assert.equal(again.duplicate, true);
    assert.equal(await logSize(), before + 1);
  });

  it('refuses bad sends with their codes and writes nothing', async () => {
    const alice = p('alice');
    const room = await alice.agent.rooms.create('refusals', { members: [p('bob').id] });
    await room.invite(p('dave').id, { role: 'observer' });
    const before = await logSize();
    const raw = async (who: Agent, body: Uint8Array) => {
      const reply = await who.nc.request(subjects.send(who.id), body, { timeout: 2000 });
      return reply.headers?.get(headerNames.error);
    };
    assert.equal(await raw(alice.agent, new TextEncoder().encode('{not json')), 'INVALID_ARGUMENT');
    assert.equal(
      await raw(alice.agent, encodeJson({ clientMsgId: 'x', room: room.id, parts: 'hello' })),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      await raw(
        alice.agent,
        encodeJson({ clientMsgId: 'x', room: 'room_nope', parts: [{ type: 'text', text: 'x' }] }),
      ),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      await raw(
        alice.agent,
        encodeJson({ clientMsgId: 'x', room: room.id, parts: [{ type: 'text', text: 'x'.repeat(300_000) }] }),
      ),
      'PAYLOAD_TOO_LARGE',
    );
    await assert.rejects(room.send('x', { hop: 17 }), (e) => errorCode(e) === 'HOP_LIMIT');
    await assert.rejects(
      alice.agent.rooms.room(newId('room')).send('x'),
      (e) => errorCode(e) === 'NOT_FOUND',
    );
    await assert.rejects(
      p('carol').agent.rooms.room(room.id).send('not a member'),
      (e) => errorCode(e) === 'NOT_A_MEMBER',
    );
    await assert.rejects(
      p('dave').agent.rooms.room(room.id).send('observer'),
      (e) => errorCode(e) === 'NOT_A_MEMBER',
    );
    assert.equal(await logSize(), before);
  });

  it('refuses bad room operations with their codes and changes nothing', async () => {
    const alice = p('alice');
    const bob = p('bob');
    const room = await alice.agent.rooms.create('ops', { members: [bob.id] });
    const state = JSON.stringify(await alice.agent.rooms.get(room.id));
    const before = await logSize();
    await assert.rejects(
      alice.agent.rooms.create('x', { members: [newId('agent')] }),
      (e) => errorCode(e) === 'NOT_FOUND',
    );
    await assert.rejects(alice.agent.rooms.create(''), (e) => errorCode(e) === 'INVALID_ARGUMENT');
    await assert.rejects(
      alice.agent.call(roomsApi.invite, { room: room.id, participant: 'agt_bad' }),
      (e) => errorCode(e) === 'INVALID_ARGUMENT',
    );
    await assert.rejects(room.invite(newId('agent')), (e) => errorCode(e) === 'NOT_FOUND');
    await assert.rejects(
      p('carol').agent.rooms.invite(room.id, p('dave').id),
      (e) => errorCode(e) === 'NOT_A_MEMBER',
    );
    await assert.rejects(
      bob.agent.rooms.room(room.id).remove(alice.id),
      (e) => errorCode(e) === 'PERMISSION_DENIED',
    );
    await assert.rejects(bob.agent.rooms.room(room.id).close(), (e) => errorCode(e) === 'PERMISSION_DENIED');
    await assert.rejects(alice.agent.rooms.leave(room.id), (e) => errorCode(e) === 'PERMISSION_DENIED');
    await assert.rejects(
      bob.agent.rooms.room(room.id).setMember(bob.id, { role: 'observer' }),
      (e) => errorCode(e) === 'PERMISSION_DENIED',
    );
    await assert.rejects(p('carol').agent.rooms.get(room.id), (e) => errorCode(e) === 'NOT_A_MEMBER');
    await assert.rejects(p('carol').agent.rooms.join(room.id), (e) => errorCode(e) === 'NOT_A_MEMBER');
    assert.equal(JSON.stringify(await alice.agent.rooms.get(room.id)), state);
    assert.equal(await logSize(), before);

    await room.close();
    await assert.rejects(room.invite(p('carol').id), (e) => errorCode(e) === 'ROOM_CLOSED');
    await assert.rejects(room.send('closed'), (e) => errorCode(e) === 'ROOM_CLOSED');
    assert.ok(!(await bob.agent.rooms.list()).some((r) => r.id === room.id));
    assert.ok(
      (await bob.agent.rooms.list({ includeClosed: true })).some((r) => r.id === room.id && r.closed),
    );
  });

  it('refuses sends from a suspended or revoked participant as soon as the policy says so', async () => {
    const room = await p('alice').agent.rooms.create('policy', { members: [p('bob').id] });
    const policy = await new Kvm(svc).open(buckets.policy);
    const set = (status: string) =>
      policy.put(
        policyKeys.participant(p('bob').id),
        JSON.stringify({ status, reason: 'test', at: new Date().toISOString(), by: 'svc_test' }),
      );
    const bobRoom = p('bob').agent.rooms.room(room.id);
    await set('suspended');
    await waitFor(
      () =>
        bobRoom.send('x').then(
          () => false,
          (e) => errorCode(e) === 'SUSPENDED',
        ),
      'the suspension',
      1_000,
    );
    await set('revoked');
    await waitFor(
      () =>
        bobRoom.send('x').then(
          () => false,
          (e) => errorCode(e) === 'REVOKED',
        ),
      'the revocation',
      1_000,
    );
    await set('active');
    await waitFor(
      () =>
        bobRoom.send('back').then(
          () => true,
          () => false,
        ),
      'sends to work again',
      1_000,
    );
  });

  it('lets a member leave and join again', async () => {
    const room = await p('alice').agent.rooms.create('rejoin', { members: [p('carol').id] });
    await p('carol').agent.rooms.leave(room.id);
    await room.send('while carol is away');
    const back = await p('carol').agent.rooms.join(room.id);
    assert.equal(back.role, 'member');
    await room.send('carol is back');
    await waitFor(
      () => p('carol').got.some((d) => textOf(d) === 'carol is back'),
      'carol to get the message after rejoining',
    );
    assert.ok(!p('carol').got.some((d) => textOf(d) === 'while carol is away'));
  });

  it('tells the sender when a recipient never manages to handle a message (dead letter)', async () => {
    const sender = await person('sender');
    const r = await parley.participant();
    const failing = await parley.connect(r.creds, { delivery: { backoffMs: () => 20 } });
    let attempts = 0;
    let handled = '';
    failing.on('message', (d) => {
      if (textOf(d) !== 'poison pill') {
        handled = textOf(d);
        return;
      }
      attempts++;
      throw new Error('cannot handle this');
    });
    await failing.listening;
    const notices: Delivery[] = [];
    sender.agent.on('dead_letter', (d) => {
      notices.push(d);
    });
    const room = await sender.agent.rooms.create('poison', { members: [r.id] });
    const sent = await room.send('poison pill');
    await waitFor(() => notices.length === 1, 'the dead-letter notice to reach the sender', 20_000);
    assert.equal(attempts, 5);
    const data = notices[0]?.message.parts.find((x) => x.type === 'data');
    assert.equal(data?.type === 'data' && data.data.message, sent.id);
    // The DLQ holds it and the audit log recorded it.
    const jsm = await jetstreamManager(svc);
    const letter = await jsm.direct.getMessage(streams.dlq, { last_by_subj: subjects.dlq(r.id) });
    assert.ok(letter);
    assert.equal(letter.json<{ message: { id: string } }>().message.id, sent.id);
    const audit = await jsm.direct.getMessage(streams.audit, { last_by_subj: subjects.audit('delivery') });
    assert.ok(audit);
    assert.equal(audit.json<{ message: string }>().message, sent.id);
    // The recipient's lane moved on: the next message is handled.
    await room.send('next one');
    await waitFor(() => handled === 'next one', 'the next message to reach the handler');
    assert.equal(attempts, 5);
  });
});
