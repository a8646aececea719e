/**
 * Send guards on a running backbone: per-agent and per-room rate limits, the hop limit, and the
 * runaway detector — each trips, and each recovers.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { isParleyError, ParleyEvent, roomsApi } from '@parley/contracts';
import { connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';
import { auditRecords, codeOf, createWorld, type Member, textOf } from './fixtures/governance.js';

describe('send guards', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let human: Member;
  let a1: Member;
  let a2: Member;

  before(async () => {
    parley = await startParley({
      rooms: {
        PARLEY_RATE_AGENT_PER_SEC: 5,
        PARLEY_RATE_AGENT_BURST: 5,
        PARLEY_RATE_ROOM_PER_SEC: 10,
        PARLEY_RATE_ROOM_BURST: 12,
        PARLEY_RUNAWAY_MESSAGES: 8,
        PARLEY_RUNAWAY_WINDOW_MS: 60_000,
        PARLEY_HOP_LIMIT: 3,
      },
    });
    svc = await connectService(parley);
    world = await createWorld(parley);
    human = await world.person('operator');
    a1 = await world.agentOf(human, 'chatty-1', []);
    a2 = await world.agentOf(human, 'chatty-2', []);
  });
  after(async () => {
    await world?.close();
    await svc?.close();
    await parley?.destroy();
  });

  it('rate-limits an agent with a retry-after, and lets it send again after that time', async () => {
    const room = await human.agent.rooms.create('rate', { members: [a1.id] });
    const r = a1.agent.rooms.room(room.id);
    // All at once, as the room test does: sent one after another on a busy machine, the bucket
    // refills between sends and nothing is refused.
    const started = Date.now();
    const results = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        r.send(`burst ${i}`, { deadlineMs: 0 }).then(
          () => undefined,
          (err: unknown) => err,
        ),
      ),
    );
    const refilled = Math.ceil(((Date.now() - started) * 5) / 1000);
    const accepted = results.filter((e) => e === undefined).length;
    assert.ok(accepted >= 5 && accepted <= 5 + refilled, `${accepted} accepted`);
    const refusal = results.find((e) => e !== undefined);
    assert.ok(isParleyError(refusal, 'RATE_LIMITED'), String(refusal));
    assert.ok(
      results.every((e) => e === undefined || isParleyError(e, 'RATE_LIMITED')),
      'refused only for the rate',
    );
    assert.equal(refusal.details?.limit, 'agent');
    const retryAfter = refusal.retryAfterMs ?? 0;
    assert.ok(retryAfter > 0 && retryAfter <= 200, `retry after ${retryAfter} ms`);
    const at = Date.now() + retryAfter;
    await waitFor(() => Date.now() >= at, 'the retry-after time');
    await r.send('after waiting', { deadlineMs: 0 });
  });

  it('rate-limits a room for everyone, humans included', async () => {
    const room = await human.agent.rooms.create('busy room', { members: [a2.id] });
    const r = human.agent.rooms.room(room.id);
    const started = Date.now();
    const codes = await Promise.all(
      Array.from({ length: 24 }, (_, i) => codeOf(r.send(`h${i}`, { deadlineMs: 0 }))),
    );
    const accepted = codes.filter((c) => c === 'no error').length;
    // A burst of 12, plus what refilled at 10/s while the sends were in flight.
    const refilled = Math.ceil(((Date.now() - started) * 10) / 1000);
    assert.ok(accepted >= 12 && accepted <= 12 + refilled, `${accepted} accepted`);
    assert.ok(codes.includes('RATE_LIMITED'));
    assert.deepEqual(new Set(codes), new Set(['no error', 'RATE_LIMITED']));
    await waitFor(
      () =>
        r.send('later', { deadlineMs: 0 }).then(
          () => true,
          () => false,
        ),
      'the room to accept again',
      2_000,
    );
  });

  it('refuses a message too many hops from its human, and takes the next one that is not', async () => {
    const room = await human.agent.rooms.create('hops', { members: [a1.id] });
    const r = a1.agent.rooms.room(room.id);
    assert.equal(await codeOf(r.send('far away', { hop: 4, deadlineMs: 0 })), 'HOP_LIMIT');
    await waitFor(
      () =>
        r.send('close enough', { hop: 3, deadlineMs: 0 }).then(
          () => true,
          () => false,
        ),
      'a send within the hop limit',
      2_000,
    );
  });

  it('pauses a room where agents talk past the threshold with no human, pings the humans, and a human resumes it', async () => {
    const events: ParleyEvent[] = [];
    const sub = svc.subscribe('parley.evt.rooms.>', {
      callback: (_e, m) => {
        events.push(ParleyEvent.parse(m.json()));
      },
    });
    await svc.flush();
    const room = await human.agent.rooms.create('loop', { members: [a1.id, a2.id] });
    await human.agent.rooms.room(room.id).send('please sort this out between you');
    // The agents answer each other; the limits above let 9 through, and the 9th trips the detector.
    let sent = 0;
    let code = 'no error';
    for (let i = 0; i < 40 && code === 'no error'; i++) {
      const who = i % 2 === 0 ? a1 : a2;
      code = await codeOf(
        (async () => {
          const at = Date.now() + 250;
          await waitFor(() => Date.now() >= at, 'pacing under the rate limits');
          await who.agent.rooms.room(room.id).send(`ping ${i}`, { deadlineMs: 0 });
        })(),
      );
      if (code === 'no error') sent++;
    }
    assert.equal(code, 'ROOM_PAUSED');
    assert.ok(sent >= 9 && sent <= 12, `${sent} agent messages got in before the pause`);
    const paused = await human.agent.rooms.get(room.id);
    assert.equal(paused.paused, true);

    // The owner (the human member) was pinged in the room itself, privately, and by an event.
    await waitFor(
      () => human.got.some((d) => d.room === room.id && /is paused for agents/.test(textOf(d))),
      'the notice',
    );
    const notice = human.got.find((d) => d.room === room.id && /is paused for agents/.test(textOf(d)));
    assert.equal(notice?.message.audience, 'mentions');
    assert.ok(!a1.got.some((d) => d.message.id === notice?.message.id), 'agents do not see the notice');
    await waitFor(() => events.some((e) => e.kind === 'paused' && e.subject === room.id), 'the paused event');
    const ev = events.find((e) => e.kind === 'paused' && e.subject === room.id);
    assert.equal(ev?.data.owner, human.id);
    assert.match(String(ev?.data.reason), /runaway/);

    // Humans still talk; an agent may not resume; a human does, and agents talk again.
    await human.agent.rooms.room(room.id).send('stop, both of you');
    assert.equal(await codeOf(a1.agent.call(roomsApi.resume, { room: room.id })), 'PERMISSION_DENIED');
    const resumed = await human.agent.call(roomsApi.resume, { room: room.id, reason: 'talked to them' });
    assert.equal(resumed.paused, false);
    await waitFor(
      () =>
        a1.agent.rooms
          .room(room.id)
          .send('thanks', { deadlineMs: 0 })
          .then(
            () => true,
            () => false,
          ),
      'agents to send again',
      2_000,
    );
    await waitFor(
      () => events.some((e) => e.kind === 'resumed' && e.subject === room.id),
      'the resumed event',
    );
    sub.unsubscribe();
    const policy = await auditRecords(svc, 'policy');
    assert.ok(policy.some((r) => r.action === 'room.pause' && r.room === room.id && r.actor === 'svc_rooms'));
    assert.ok(policy.some((r) => r.action === 'room.resume' && r.room === room.id && r.actor === human.id));
    const history = await human.agent.rooms.room(room.id).history({ order: 'oldest', limit: 200 });
    const changes = history.entries
      .filter((e) => e.message.kind === 'room')
      .map((e) => (e.message.parts[0] as unknown as { data: { change: string } }).data.change);
    assert.deepEqual(changes, ['created', 'paused', 'resumed']);
  });

  it('lets a person pause a room by hand; pausing twice changes nothing', async () => {
    const room = await human.agent.rooms.create('manual', { members: [a1.id] });
    await human.agent.call(roomsApi.pause, { room: room.id, reason: 'lunch' });
    const again = await human.agent.call(roomsApi.pause, { room: room.id, reason: 'still lunch' });
    assert.equal(again.paused, true);
    await waitFor(
      async () =>
        (await codeOf(a1.agent.rooms.room(room.id).send('hi', { deadlineMs: 0 }))) === 'ROOM_PAUSED',
      'the pause to reach the ingress',
      2_000,
    );
    // An agent that is not the owner cannot pause; a non-member cannot either.
    assert.equal(await codeOf(a1.agent.call(roomsApi.pause, { room: room.id })), 'PERMISSION_DENIED');
    assert.equal(await codeOf(a2.agent.call(roomsApi.pause, { room: room.id })), 'NOT_A_MEMBER');
    await human.agent.call(roomsApi.resume, { room: room.id });
  });
});
