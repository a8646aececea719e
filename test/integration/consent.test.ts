/**
 * Consent across services: the rooms service refuses to bring a participant of another owner into
 * a room without consent (NO_CONSENT naming what is missing), accepts once the two are contacts,
 * and applies each room's onContactRevoked policy when the contact ends.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { newId, type ParleyError, registryApi, request, roomsApi } from '@parley/contracts';
import type { Agent, Delivery } from '@parley/sdk';
import {
  connectAdmin,
  connectService,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  errorCode,
  startParley,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

describe('consent in rooms', () => {
  let parley: TestParley;
  let admin: Agent;
  const conns: Agent[] = [];
  /** A human of `org` and one agent of theirs. */
  async function team(org: string, name: string, visibility: 'org' | 'public' = 'public') {
    const h = await createHuman(admin, { org, name });
    const human = await connectTo(parley, h.creds);
    const a = await createAgent(human, { name: `${name}-bot`, visibility });
    const agent = await connectTo(parley, a.creds);
    conns.push(human, agent);
    return { human, humanId: h.user.id, agent, agentId: a.agent.id };
  }

  before(async () => {
    parley = await startParley();
    admin = await connectAdmin(parley);
  });
  after(async () => {
    await Promise.allSettled([admin?.close(), ...conns.map((c) => c.close())]);
    await parley?.destroy();
  });

  it('refuses an invite across owners before consent, naming the pair and the fix, and accepts it after', async () => {
    const other = await createOrg(admin, 'partner-co');
    const planner = await team(parley.home.state.org.id, 'pat');
    const auditor = await team(other.id, 'aud');
    const room = await planner.agent.rooms.create('rollout review');
    const roomsBefore = (await room.get()).members.length;

    const refused = (await room.invite(auditor.agentId).catch((e: unknown) => e)) as ParleyError;
    assert.equal(errorCode(refused), 'NO_CONSENT');
    assert.equal(refused.details?.inviter, planner.agentId);
    assert.equal(refused.details?.invitee, auditor.agentId);
    assert.equal(refused.details?.missing, 'contact');
    assert.match(String(refused.details?.fix), /parley contact request/);
    assert.match(refused.message, new RegExp(`${planner.agentId} may not bring ${auditor.agentId}`));
    // A room created with the member, and a direct room, are refused the same way; nothing is created.
    const roomsListed = (await planner.agent.rooms.list()).length;
    await assert.rejects(
      planner.agent.rooms.create('with members', { members: [auditor.agentId] }),
      (e) => errorCode(e) === 'NO_CONSENT',
    );
    await assert.rejects(
      planner.agent.rooms.create('direct', { members: [auditor.agentId], direct: true }),
      (e) => errorCode(e) === 'NO_CONSENT',
    );
    assert.equal((await planner.agent.rooms.list()).length, roomsListed);
    // A person inviting someone else's agent needs consent too.
    await assert.rejects(
      planner.human.rooms.create('human invites', { members: [auditor.agentId] }),
      (e) => errorCode(e) === 'NO_CONSENT',
    );
    assert.equal((await room.get()).members.length, roomsBefore);

    // The auditor asks; its request shows in the refusal while it waits.
    const requested = new Promise<Delivery>((resolve) => {
      planner.agent.on('contact_request', resolve);
    });
    const joinedAuditor = new Promise<Delivery>((resolve) => {
      auditor.agent.on('room_event', (d) => {
        if (d.room === room.id) resolve(d);
      });
    });
    await Promise.all([planner.agent.listening, auditor.agent.listening]);
    const t0 = performance.now();
    const req = await auditor.agent.contacts.request(planner.agentId, { reason: 'I audit rollout plans' });
    const waiting = (await room.invite(auditor.agentId).catch((e: unknown) => e)) as ParleyError;
    assert.equal(errorCode(waiting), 'NO_CONSENT');
    assert.equal(waiting.details?.pending, req.id);
    const notice = await requested;
    const tNotice = performance.now();
    assert.equal(notice.contactRequest?.id, req.id);
    assert.match(textOf(notice), /asks for contact/);
    await planner.agent.contacts.accept(notice.contactRequest?.id as string);
    const tAccepted = performance.now();
    const member = await room.invite(auditor.agentId);
    const tInvited = performance.now();
    assert.equal(member.invitedBy, planner.agentId);
    await joinedAuditor;
    const tJoined = performance.now();
    console.log(
      `consent round trip: request→notice ${(tNotice - t0).toFixed(1)} ms, accept ${(tAccepted - tNotice).toFixed(1)} ms, invite ${(tInvited - tAccepted).toFixed(1)} ms, request→invite accepted ${(tInvited - t0).toFixed(1)} ms, →auditor sees its join ${(tJoined - t0).toFixed(1)} ms`,
    );
    // Direct rooms work both ways now.
    const direct = await auditor.agent.rooms.create('direct', { members: [planner.agentId], direct: true });
    assert.deepEqual(direct.room.members.map((m) => m.id).sort(), [planner.agentId, auditor.agentId].sort());
    // The owner still needs its own consent: a contact of its agent is not its contact.
    await assert.rejects(
      planner.human.rooms.create('owner', { members: [auditor.agentId] }),
      (e) => errorCode(e) === 'NO_CONSENT',
    );
  });

  it('needs no consent for a person’s own agents, or agents of one owner', async () => {
    const t = await team(parley.home.state.org.id, 'solo');
    const second = await createAgent(t.human, { name: 'solo-bot-2' });
    const room = await t.human.rooms.create('mine', { members: [t.agentId, second.agent.id] });
    assert.equal(room.room.members.length, 3);
    const byAgent = await t.agent.rooms.create('agents', { members: [second.agent.id, t.humanId] });
    assert.equal(byAgent.room.members.length, 3);
  });

  for (const policy of ['stay', 'remove'] as const) {
    it(`on a revoked contact, a room with onContactRevoked=${policy} ${policy === 'stay' ? 'keeps the member, marked' : 'removes the member'}; history stays; new invites are refused`, async () => {
      const a = await team(parley.home.state.org.id, `rev-${policy}-a`);
      const b = await team(parley.home.state.org.id, `rev-${policy}-b`);
      const req = await a.agent.contacts.request(b.agentId, { reason: 'work together' });
      await b.agent.contacts.accept(req.id);
      const room = await a.agent.rooms.create(`shared ${policy}`, {
        members: [b.agentId],
        policy: { onContactRevoked: policy },
      });
      const said = await b.agent.rooms.room(room.id).send('something worth keeping');
      const unrelated = await a.agent.rooms.create('a alone');

      await b.agent.contacts.revoke(a.agentId);
      if (policy === 'stay') {
        await waitFor(
          async () => Boolean((await room.get()).members.find((m) => m.id === b.agentId)?.mark),
          'the member to be marked',
        );
        const m = (await room.get()).members.find((x) => x.id === b.agentId);
        assert.equal(m?.mark, `contact with ${a.agentId} revoked`);
        // It is still a member: it may still speak.
        await b.agent.rooms.room(room.id).send('still here');
      } else {
        await waitFor(
          async () => !(await room.get()).members.some((x) => x.id === b.agentId),
          'the member to be removed',
        );
        await assert.rejects(
          b.agent.rooms.room(room.id).send('gone?'),
          (e) => errorCode(e) === 'NOT_A_MEMBER',
        );
      }
      // Nothing already said is removed.
      const history = await room.history({ order: 'oldest', limit: 200 });
      assert.ok(history.entries.some((e) => e.message.id === said.id));
      // New invites are refused again.
      await assert.rejects(unrelated.invite(b.agentId), (e) => errorCode(e) === 'NO_CONSENT');
      assert.equal((await unrelated.get()).members.length, 1);
    });
  }

  it('serves its services-only helpers to services alone, and refuses bad input to them', async () => {
    const t = await team(parley.home.state.org.id, 'helpers', 'org');
    const outsider = await team((await createOrg(admin, 'elsewhere')).id, 'outsider', 'org');
    const svc = await connectService(parley);
    try {
      // registry.describeParticipant: owners and orgs for consent; with a viewer, visibility applies.
      const info = await request(svc, 'svc_test', registryApi.describeParticipant, {
        participant: t.agentId,
      });
      assert.equal(info.owner, t.humanId);
      const hidden = request(svc, 'svc_test', registryApi.describeParticipant, {
        participant: t.agentId,
        viewer: outsider.agentId,
      });
      await assert.rejects(hidden, (e) => errorCode(e) === 'NOT_FOUND');
      await assert.rejects(
        request(svc, 'svc_test', registryApi.describeParticipant, { participant: newId('agent') }),
        (e) => errorCode(e) === 'NOT_FOUND',
      );
      await assert.rejects(
        t.agent.call(registryApi.describeParticipant, { participant: t.humanId }),
        (e) => errorCode(e) === 'PERMISSION_DENIED',
      );
      // rooms.notify: idempotent by key, into the participant's notice room, nobody can be invited.
      const body = { to: t.agentId, text: 'hello', data: { event: 'test' }, key: `k-${Date.now()}` };
      const first = await request(svc, 'svc_test', roomsApi.notify, body);
      const again = await request(svc, 'svc_test', roomsApi.notify, body);
      assert.equal(again.duplicate, true);
      assert.equal(again.id, first.id);
      assert.equal(again.roomSeq, first.roomSeq);
      const second = await request(svc, 'svc_test', roomsApi.notify, { ...body, key: `${body.key}-2` });
      assert.equal(second.room, first.room, 'one notice room per participant');
      const noticeRoom = await t.agent.rooms.get(first.room);
      assert.deepEqual(
        noticeRoom.members.map((m) => m.id),
        [t.agentId],
      );
      await assert.rejects(
        t.agent.rooms.invite(first.room, t.humanId),
        (e) => errorCode(e) === 'PERMISSION_DENIED',
      );
      for (const [expected, call] of [
        ['PERMISSION_DENIED', () => t.agent.call(roomsApi.notify, body)],
        [
          'PERMISSION_DENIED',
          () => t.agent.call(roomsApi.contactRevoked, { a: t.agentId, b: t.humanId, by: t.agentId }),
        ],
        [
          'INVALID_ARGUMENT',
          () => request(svc, 'svc_test', roomsApi.notify, { ...body, key: 'bad key with spaces' }),
        ],
        ['INVALID_ARGUMENT', () => request(svc, 'svc_test', roomsApi.notify, { ...body, text: '' })],
        [
          'NOT_FOUND',
          () => request(svc, 'svc_test', roomsApi.notify, { ...body, to: newId('agent'), key: 'k-x' }),
        ],
      ] as const) {
        await assert.rejects(call(), (e) => errorCode(e) === expected, expected);
      }
      assert.equal((await t.agent.rooms.room(first.room).history({ limit: 50 })).entries.length, 4);
      // contactRevoked with nothing shared changes nothing.
      assert.deepEqual(
        await request(svc, 'svc_test', roomsApi.contactRevoked, {
          a: t.agentId,
          b: outsider.agentId,
          by: t.agentId,
        }),
        { marked: [], removed: [] },
      );
    } finally {
      await svc.close();
    }
  });
});
