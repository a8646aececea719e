import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  buckets,
  type ContactRequest,
  consentApi,
  encodeJson,
  newId,
  ParleyEvent,
  request,
  streams,
} from '@parley/contracts';
import { snapshotKv } from '@parley/kit';
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
  waitFor,
} from '@parley/test/harness';

/** Every key of parley_contacts with its revision: equal before and after = nothing changed. */
async function contactsState(kv: KV): Promise<string> {
  const entries = await snapshotKv(kv);
  return [...entries.entries()]
    .map(([k, e]) => `${k}@${e.revision}`)
    .sort()
    .join('\n');
}

/**
 * How many consent events the stream holds. A call returns after its events were stored, so this is
 * exact right after a call (the subscription in {@link collectEvents} may lag).
 */
async function storedEvents(svc: NatsConnection): Promise<number> {
  const info = await (await jetstreamManager(svc)).streams.info(streams.events, {
    subjects_filter: 'parley.evt.consent.>',
  });
  return Object.values(info.state.subjects ?? {}).reduce((n, c) => n + c, 0);
}

/** Collects the consent events published while the test runs. */
function collectEvents(svc: NatsConnection): ParleyEvent[] {
  const events: ParleyEvent[] = [];
  svc.subscribe('parley.evt.consent.>', {
    callback: (err, msg) => {
      if (!err) events.push(ParleyEvent.parse(msg.json()));
    },
  });
  return events;
}

describe('consent', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let contacts: KV;
  let events: ParleyEvent[];
  let admin: Agent;
  const people: Record<string, { id: string; agent: Agent }> = {};
  const p = (name: string) => {
    const x = people[name];
    if (!x) throw new Error(name);
    return x;
  };

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    contacts = await new Kvm(svc).open(buckets.contacts);
    events = collectEvents(svc);
    admin = await connectAdmin(parley);
    const org = parley.home.state.org.id;
    const other = await createOrg(admin, 'other-co');
    for (const [name, o] of [
      ['grace', org],
      ['henry', org],
      ['ivy', org],
      ['olga', other.id],
    ] as const) {
      const h = await createHuman(admin, { org: o, name });
      people[name] = { id: h.user.id, agent: await connectTo(parley, h.creds) };
    }
    const bot = async (owner: string, name: string, visibility: 'org' | 'public' | 'private' = 'org') => {
      const a = await createAgent(p(owner).agent, { name, visibility });
      people[name] = { id: a.agent.id, agent: await connectTo(parley, a.creds) };
    };
    await bot('grace', 'grace-bot');
    await bot('grace', 'grace-bot-2');
    await bot('henry', 'henry-bot');
    await bot('henry', 'henry-bot-2');
    await bot('henry', 'henry-private', 'private');
    await bot('ivy', 'ivy-bot');
    await bot('olga', 'olga-bot', 'public');
    await bot('olga', 'olga-org-bot', 'org');
  });
  after(async () => {
    await Promise.allSettled([admin?.close(), ...Object.values(people).map((x) => x.agent.close())]);
    await svc?.close();
    await parley?.destroy();
  });

  const check = (a: string, b: string) => request(svc, 'svc_test', consentApi.check, { a, b });

  it('asks, notifies the target, and on acceptance makes a contact that holds both ways', async () => {
    const asker = p('henry-bot');
    const target = p('grace-bot');
    const notices: Delivery[] = [];
    target.agent.on('contact_request', (d) => {
      notices.push(d);
    });
    const updates: Delivery[] = [];
    asker.agent.on('contact_update', (d) => {
      updates.push(d);
    });
    await Promise.all([target.agent.listening, asker.agent.listening]);
    assert.equal((await check(asker.id, target.id)).allowed, false);

    const req = await asker.agent.contacts.request(target.id, {
      reason: 'I test rollouts; can we pair on billing?',
    });
    assert.equal(req.state, 'pending');
    assert.equal(req.from, asker.id);
    // A repeat is the same request, unchanged.
    assert.equal((await asker.agent.contacts.request(target.id, { reason: 'again' })).id, req.id);
    const pendingCheck = await check(asker.id, target.id);
    assert.equal(pendingCheck.allowed, false);
    assert.equal(pendingCheck.pending?.id, req.id);

    await waitFor(() => notices.length > 0, 'the contact_request notice');
    const notice = notices[0] as Delivery;
    assert.equal(notice.contactRequest?.id, req.id);
    assert.equal(notice.message.sender.id, 'svc_consent');
    assert.equal(notice.message.provenance?.trust, 'external', 'the reason is labelled as untrusted');
    assert.deepEqual(
      (await target.agent.contacts.pending()).incoming.map((r) => r.id),
      [req.id],
    );
    assert.deepEqual(
      (await asker.agent.contacts.pending()).outgoing.map((r) => r.id),
      [req.id],
    );
    // The owner sees its agent's incoming request too, and got an event naming it.
    assert.ok((await p('grace').agent.contacts.pending()).incoming.some((r) => r.id === req.id));
    await waitFor(
      () => events.some((e) => e.kind === 'requested' && e.subject === req.id),
      'the requested event',
    );
    const requested = events.find((e) => e.kind === 'requested' && e.subject === req.id);
    assert.equal(requested?.data.owner, p('grace').id);

    const accepted = await target.agent.contacts.accept(req.id);
    assert.equal(accepted.state, 'accepted');
    assert.equal(accepted.answeredBy, target.id);
    for (const [a, b] of [
      [asker.id, target.id],
      [target.id, asker.id],
    ] as const) {
      const c = await check(a, b);
      assert.equal(c.allowed, true);
      assert.equal(c.via, 'contact');
    }
    assert.deepEqual(
      (await asker.agent.contacts.list()).contacts.map((c) => [c.with, c.via, c.request]),
      [[target.id, 'request', req.id]],
    );
    assert.deepEqual(
      (await target.agent.contacts.list()).contacts.map((c) => c.with),
      [asker.id],
    );
    await waitFor(() => updates.some((u) => u.contactRequest?.id === req.id), 'the contact_update notice');
    assert.equal(updates.find((u) => u.contactRequest?.id === req.id)?.contactNotice?.change, 'accepted');
    await waitFor(
      () => events.some((e) => e.kind === 'answered' && e.subject === req.id),
      'the answered event',
    );
  });

  it('needs no consent between a human and its own agents, nor between agents of one owner', async () => {
    for (const [a, b] of [
      ['grace', 'grace-bot'],
      ['grace-bot', 'grace'],
      ['grace-bot', 'grace-bot-2'],
    ] as const) {
      const c = await check(p(a).id, p(b).id);
      assert.equal(c.allowed, true, `${a} ↔ ${b}`);
      assert.equal(c.via, 'same_owner');
    }
    const before = await contactsState(contacts);
    await assert.rejects(
      p('grace-bot').agent.contacts.request(p('grace-bot-2').id, { reason: 'hello' }),
      (e) => errorCode(e) === 'INVALID_ARGUMENT',
    );
    // A person and someone else's agent are different owners.
    assert.equal((await check(p('grace').id, p('henry-bot').id)).allowed, false);
    assert.equal(await contactsState(contacts), before);
  });

  it('lets an org pre-approve contacts inside it (its admin only), while other orgs still need a request', async () => {
    const org = await createOrg(admin, 'pre-approving');
    const boss = await createHuman(admin, { org: org.id, name: 'boss', role: 'admin' });
    const worker = await createHuman(admin, { org: org.id, name: 'worker' });
    const bossConn = await connectTo(parley, boss.creds);
    const workerConn = await connectTo(parley, worker.creds);
    try {
      const a = (await createAgent(bossConn, { name: 'a' })).agent.id;
      const b = (await createAgent(workerConn, { name: 'b' })).agent.id;
      assert.equal((await check(a, b)).allowed, false);
      await assert.rejects(
        workerConn.contacts.setOrgPolicy(org.id, { preApproveWithinOrg: true }),
        (e) => errorCode(e) === 'PERMISSION_DENIED',
      );
      await assert.rejects(
        p('grace').agent.contacts.setOrgPolicy(org.id, { preApproveWithinOrg: true }),
        (e) => errorCode(e) === 'NOT_FOUND',
      );
      assert.equal((await check(a, b)).allowed, false);
      await bossConn.contacts.setOrgPolicy(org.id, { preApproveWithinOrg: true });
      const c = await check(a, b);
      assert.equal(c.allowed, true);
      assert.equal(c.via, 'org_policy');
      assert.equal((await check(a, p('olga-bot').id)).allowed, false, 'another org is not pre-approved');
      await bossConn.contacts.setOrgPolicy(org.id, { preApproveWithinOrg: false });
      assert.equal((await check(a, b)).allowed, false);
    } finally {
      await Promise.allSettled([bossConn.close(), workerConn.close()]);
    }
  });

  it('refuses a request after a block (BLOCKED), and the blocker’s own request until it unblocks', async () => {
    const asker = p('grace-bot-2');
    const target = p('henry-bot-2');
    const req = await asker.agent.contacts.request(target.id, { reason: 'a colleague’s agent says hi' });
    const blocked = await target.agent.call(consentApi.answer, { id: req.id, answer: 'block' });
    assert.equal(blocked.state, 'blocked');
    const c = await check(asker.id, target.id);
    assert.equal(c.allowed, false);
    assert.equal(c.missing, 'unblock');
    assert.equal(c.blockedBy, target.id);

    const before = await contactsState(contacts);
    const eventsBefore = await storedEvents(svc);
    await assert.rejects(
      asker.agent.contacts.request(target.id, { reason: 'please?' }),
      (e) => errorCode(e) === 'BLOCKED',
    );
    await assert.rejects(
      target.agent.contacts.request(asker.id, { reason: 'changed my mind' }),
      (e) => errorCode(e) === 'CONFLICT',
    );
    assert.equal(await contactsState(contacts), before);
    assert.equal(await storedEvents(svc), eventsBefore);
    assert.deepEqual(
      (await target.agent.contacts.list()).blocked.map((b) => b.participant),
      [asker.id],
    );

    await target.agent.contacts.unblock(asker.id);
    const again = await asker.agent.contacts.request(target.id, { reason: 'second try' });
    assert.equal(again.state, 'pending');
    await target.agent.contacts.reject(again.id);
  });

  it('turns two requests crossing each other into one contact, never two (truly concurrent calls)', async () => {
    const pairs: [Agent, string, Agent, string][] = [];
    for (let i = 0; i < 6; i++) {
      const left = await createAgent(p('ivy').agent, { name: `cross-left-${i}`, visibility: 'public' });
      const right = await createAgent(p('olga').agent, { name: `cross-right-${i}`, visibility: 'public' });
      pairs.push([
        await connectTo(parley, left.creds),
        left.agent.id,
        await connectTo(parley, right.creds),
        right.agent.id,
      ]);
    }
    try {
      await Promise.all(
        pairs.map(async ([l, lId, r, rId]) => {
          const [x, y] = await Promise.all([
            l.contacts.request(rId, { reason: 'crossing' }),
            r.contacts.request(lId, { reason: 'crossing' }),
          ]);
          // Both calls name the same request: the first one made, accepted by the second.
          assert.equal(x.id, y.id);
          assert.deepEqual([x.state, y.state].sort(), ['accepted', 'pending']);
          const listed = await l.contacts.list();
          assert.deepEqual(
            listed.contacts.map((c) => [c.with, c.via]),
            [[rId, 'crossing']],
          );
          assert.deepEqual(
            (await r.contacts.list()).contacts.map((c) => c.with),
            [lId],
          );
          assert.equal((await check(lId, rId)).via, 'contact');
          assert.deepEqual(await l.contacts.pending(), { incoming: [], outgoing: [] });
        }),
      );
      // Two answers racing: exactly one wins.
      const [l, , r, rId] = pairs[0] as (typeof pairs)[number];
      await l.contacts.revoke(rId);
      const req = await l.contacts.request(rId, { reason: 'once more' });
      const results = await Promise.allSettled([r.contacts.accept(req.id), r.contacts.reject(req.id)]);
      assert.equal(results.filter((x) => x.status === 'fulfilled').length, 1);
      const lost = results.find((x) => x.status === 'rejected') as PromiseRejectedResult;
      assert.equal(errorCode(lost.reason), 'CONFLICT');
    } finally {
      await Promise.allSettled(pairs.flatMap(([l, , r]) => [l.close(), r.close()]));
    }
  });

  it('lets the owner decide for its agent (owner_decides) and auto-accepts within the org (auto_accept_org)', async () => {
    const target = p('ivy-bot');
    await assert.rejects(
      p('henry').agent.contacts.setPolicy(target.id, 'owner_decides'),
      (e) => errorCode(e) === 'PERMISSION_DENIED',
    );
    await p('ivy').agent.contacts.setPolicy(target.id, 'owner_decides');
    const ownerNotices: Delivery[] = [];
    p('ivy').agent.on('contact_request', (d) => {
      ownerNotices.push(d);
    });
    await p('ivy').agent.listening;
    const req = await p('henry-bot').agent.contacts.request(target.id, { reason: 'owner please' });
    await waitFor(() => ownerNotices.some((n) => n.contactRequest?.id === req.id), 'the owner’s notice');
    await assert.rejects(target.agent.contacts.accept(req.id), (e) => errorCode(e) === 'PERMISSION_DENIED');
    assert.ok(
      (await p('ivy').agent.contacts.pending({ of: target.id })).incoming.some((r) => r.id === req.id),
    );
    const ok = await p('ivy').agent.contacts.accept(req.id);
    assert.equal(ok.answeredBy, p('ivy').id);
    assert.equal((await check(p('henry-bot').id, target.id)).via, 'contact');

    await p('ivy').agent.contacts.setPolicy(target.id, 'auto_accept_org');
    const inOrg = await p('grace-bot').agent.contacts.request(target.id, { reason: 'same org' });
    assert.equal(inOrg.state, 'accepted');
    assert.equal(inOrg.via, 'auto_accept');
    // Olga's agents are in another org and cannot even see an org-visible agent of this one.
    await assert.rejects(
      p('olga-org-bot').agent.contacts.request(target.id, { reason: 'other org' }),
      (e) => errorCode(e) === 'NOT_FOUND',
    );
  });

  it('revokes: either side ends the contact, the check refuses again, and a new request may follow', async () => {
    const a = p('grace-bot-2');
    const b = p('olga-bot');
    const req = await a.agent.contacts.request(b.id, { reason: 'short project' });
    await b.agent.contacts.accept(req.id);
    assert.equal((await check(a.id, b.id)).allowed, true);
    await b.agent.contacts.revoke(a.id);
    assert.equal((await check(a.id, b.id)).allowed, false);
    assert.deepEqual((await a.agent.contacts.list()).contacts, []);
    await waitFor(() => events.some((e) => e.kind === 'revoked' && e.data.a === b.id), 'the revoked event');
    await assert.rejects(b.agent.contacts.revoke(a.id), (e) => errorCode(e) === 'NOT_FOUND');
    const again = await a.agent.contacts.request(b.id, { reason: 'next project' });
    assert.equal(again.state, 'pending');
    assert.notEqual(again.id, req.id);
  });

  it('refuses bad input with its code and changes nothing', async () => {
    const henryBot = p('henry-bot');
    const graceBot = p('grace-bot');
    // Something pending to answer wrongly.
    const pending = await henryBot.agent.contacts.request(p('olga-bot').id, { reason: 'bad-input test' });
    const before = await contactsState(contacts);
    const eventsBefore = await storedEvents(svc);
    const raw = async (subject: string, data: Uint8Array) => {
      const m = await svc.request(subject, data, { timeout: 5000 });
      return m.headers?.get('Parley-Error');
    };
    const cases: [string, () => Promise<unknown>][] = [
      ['INVALID_ARGUMENT', () => henryBot.agent.contacts.request(henryBot.id, { reason: 'me' })],
      ['NOT_FOUND', () => henryBot.agent.contacts.request(newId('agent'), { reason: 'nobody' })],
      ['NOT_FOUND', () => p('olga-bot').agent.contacts.request(p('henry-private').id, { reason: 'hidden' })],
      [
        'NOT_FOUND',
        () => p('olga-bot').agent.contacts.request(p('grace').id, { reason: 'a person elsewhere' }),
      ],
      ['INVALID_ARGUMENT', () => henryBot.agent.contacts.request('agt_nope', { reason: 'x' })],
      ['INVALID_ARGUMENT', () => henryBot.agent.contacts.request(graceBot.id, { reason: '   ' })],
      [
        'INVALID_ARGUMENT',
        () => henryBot.agent.call(consentApi.request, { to: graceBot.id, reason: 42 as never }),
      ],
      ['CONFLICT', () => henryBot.agent.contacts.request(graceBot.id, { reason: 'contacts already' })],
      ['NOT_FOUND', () => henryBot.agent.contacts.accept(newId('contactRequest'))],
      ['NOT_FOUND', () => p('grace-bot-2').agent.contacts.accept(pending.id)],
      ['NOT_FOUND', () => p('henry').agent.contacts.accept(pending.id)],
      ['PERMISSION_DENIED', () => henryBot.agent.contacts.accept(pending.id)],
      [
        'PERMISSION_DENIED',
        () => p('grace-bot-2').agent.call(consentApi.check, { a: henryBot.id, b: graceBot.id }),
      ],
      ['UNAUTHENTICATED', () => graceBot.agent.contacts.setPolicy(graceBot.id, 'owner_decides')],
      ['NOT_FOUND', () => p('olga').agent.contacts.setPolicy(graceBot.id, 'owner_decides')],
      ['NOT_FOUND', () => henryBot.agent.contacts.revoke(p('ivy').id)],
      ['NOT_FOUND', () => henryBot.agent.contacts.unblock(graceBot.id)],
      ['INVALID_ARGUMENT', () => henryBot.agent.contacts.block(henryBot.id)],
      ['NOT_FOUND', () => henryBot.agent.contacts.block(newId('agent'))],
      ['PERMISSION_DENIED', () => henryBot.agent.contacts.list({ of: graceBot.id })],
      ['NOT_FOUND', () => p('olga').agent.contacts.pending({ of: henryBot.id })],
      [
        'PAYLOAD_TOO_LARGE',
        () => henryBot.agent.call(consentApi.request, { to: graceBot.id, reason: 'x'.repeat(70_000) }),
      ],
    ];
    for (const [expected, call] of cases) {
      await assert.rejects(call(), (e) => errorCode(e) === expected, `${expected}: ${call.toString()}`);
    }
    // Not JSON, wrong values, at the wire.
    assert.equal(
      await raw(consentApi.request.subject('svc_test'), new TextEncoder().encode('{nope')),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      await raw(consentApi.answer.subject('svc_test'), encodeJson({ id: 'creq_1', answer: 'maybe' })),
      'INVALID_ARGUMENT',
    );
    assert.equal(await contactsState(contacts), before);
    assert.equal(await storedEvents(svc), eventsBefore);

    // Answered twice: the first answer stands, the second is refused and changes nothing.
    const first = await p('olga-bot').agent.contacts.reject(pending.id);
    assert.equal(first.state, 'rejected');
    const afterAnswer = await contactsState(contacts);
    const eventsAfterAnswer = await storedEvents(svc);
    assert.equal(eventsAfterAnswer, eventsBefore + 1, 'one answered event');
    for (const again of [
      () => p('olga-bot').agent.contacts.accept(pending.id),
      () => p('olga-bot').agent.contacts.reject(pending.id),
      () => p('olga-bot').agent.contacts.block(pending.id),
    ]) {
      await assert.rejects(again(), (e) => errorCode(e) === 'CONFLICT');
    }
    assert.equal(await contactsState(contacts), afterAnswer);
    assert.equal(await storedEvents(svc), eventsAfterAnswer);
  });
});

describe('consent: expiry', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let events: ParleyEvent[];
  before(async () => {
    parley = await startParley({ consent: { CONSENT_REQUEST_TTL_MS: 1_500 } });
    svc = await connectService(parley);
    events = collectEvents(svc);
  });
  after(async () => {
    await svc?.close();
    await parley?.destroy();
  });

  it('expires an unanswered request: state expired, an event, a notice to both sides; answering it is refused', async () => {
    const admin = await connectAdmin(parley);
    const org = parley.home.state.org.id;
    const a = await createHuman(admin, { org, name: 'a' });
    const b = await createHuman(admin, { org, name: 'b' });
    const aConn = await connectTo(parley, a.creds);
    const bConn = await connectTo(parley, b.creds);
    const aBot = await connectTo(parley, (await createAgent(aConn, { name: 'a-bot' })).creds);
    const bBot = await connectTo(parley, (await createAgent(bConn, { name: 'b-bot' })).creds);
    try {
      const updates: Delivery[] = [];
      aBot.on('contact_update', (d) => {
        updates.push(d);
      });
      await aBot.listening;
      const req: ContactRequest = await aBot.contacts.request(bBot.id, {
        reason: 'will you answer in time?',
      });
      assert.equal(Date.parse(req.expiresAt) - Date.parse(req.createdAt), 1_500);
      await waitFor(
        () => events.some((e) => e.kind === 'expired' && e.subject === req.id),
        'the expired event',
      );
      const expired = events.find((e) => e.kind === 'expired' && e.subject === req.id);
      assert.equal((expired?.data.request as ContactRequest | undefined)?.state, 'expired');
      await waitFor(() => updates.some((u) => u.contactNotice?.change === 'expired'), 'the expiry notice');
      assert.deepEqual(await bBot.contacts.pending(), { incoming: [], outgoing: [] });
      await assert.rejects(
        bBot.contacts.accept(req.id),
        (e) => errorCode(e) === 'CONFLICT' && /expired/.test(String(e)),
      );
      // A new request may follow.
      assert.equal((await aBot.contacts.request(bBot.id, { reason: 'second chance' })).state, 'pending');
      assert.equal(events.filter((e) => e.kind === 'expired' && e.subject === req.id).length, 1);
    } finally {
      await Promise.allSettled([admin.close(), aConn.close(), bConn.close(), aBot.close(), bBot.close()]);
    }
  });
});
