import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type AgentCardInput,
  inboxStreams,
  isParleyError,
  newId,
  ParleyEvent,
  registryApi,
} from '@parley/contracts';
import {
  codeOf,
  connectAdmin,
  connectService,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';

type Participant = Awaited<ReturnType<typeof connectAdmin>>;

async function inboxConsumers(svc: NatsConnection): Promise<string[]> {
  const names: string[] = [];
  const jsm = await jetstreamManager(svc);
  for (const stream of inboxStreams()) for await (const c of jsm.consumers.list(stream)) names.push(c.name);
  return names.sort();
}

describe('registry', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let admin: Participant;
  let orgA: string;
  let orgB: string;
  let alice: Participant; // member of A, owns agents
  let aliceId: string;
  let carol: Participant; // member of A
  let orgAdmin: Participant; // admin of A
  let bob: Participant; // member of B (the outsider)
  let bobAgent: Participant; // an agent of B
  const closers: Participant[] = [];

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    admin = await connectAdmin(parley);
    orgA = (await createOrg(admin, 'org-a')).id;
    orgB = (await createOrg(admin, 'org-b')).id;
    const a = await createHuman(admin, { org: orgA, name: 'alice' });
    aliceId = a.user.id;
    alice = await connectTo(parley, a.creds);
    carol = await connectTo(parley, (await createHuman(admin, { org: orgA, name: 'carol' })).creds);
    orgAdmin = await connectTo(
      parley,
      (await createHuman(admin, { org: orgA, name: 'ada', role: 'admin' })).creds,
    );
    const b = await createHuman(admin, { org: orgB, name: 'bob' });
    bob = await connectTo(parley, b.creds);
    bobAgent = await connectTo(parley, (await createAgent(bob, { name: 'bob-bot' })).creds);
    closers.push(admin, alice, carol, orgAdmin, bob, bobAgent);
  });
  after(async () => {
    for (const c of closers) await c?.close();
    await svc?.close();
    await parley?.destroy();
  });

  it('creates orgs, people and agents, each person and agent with an inbox consumer, and emits events', async () => {
    const events: ParleyEvent[] = [];
    const sub = svc.subscribe('parley.evt.registry.>', {
      callback: (_e, m) => {
        const e = ParleyEvent.parse(m.json());
        assert.equal(m.headers?.get('Nats-Msg-Id'), e.id);
        events.push(e);
      },
    });
    await svc.flush();
    const org = await createOrg(admin, 'org-created');
    const dave = await createHuman(admin, { org: org.id, name: 'dave', role: 'admin' });
    const dConn = await connectTo(parley, dave.creds);
    closers.push(dConn);
    const { agent } = await createAgent(dConn, {
      name: 'Reviewer',
      skills: [{ id: 'code.review', name: 'Code review', tags: ['git'] }],
      runtime: 'claude-code',
      tools: ['git.diff'],
      scopes: ['repo:read'],
    });
    assert.equal(agent.owner, dave.user.id);
    assert.equal(agent.org, org.id);
    assert.equal(agent.status, 'active');
    assert.ok(agent.revision >= 1);
    const consumers = await inboxConsumers(svc);
    for (const id of [dave.user.id, agent.id, parley.home.state.admin.id])
      assert.ok(consumers.includes(id), id);
    assert.deepEqual(await dConn.whoami(), {
      id: dave.user.id,
      kind: 'human',
      name: 'dave',
      org: org.id,
      role: 'admin',
      superadmin: false,
    });
    await waitFor(
      () => ['org.created', 'user.created', 'agent.created'].every((k) => events.some((e) => e.kind === k)),
      'the three events',
    );
    assert.equal(events.find((e) => e.kind === 'agent.created')?.subject, agent.id);
    sub.unsubscribe();
  });

  it('lets only the owner update a card, with compare-and-set on the revision', async () => {
    const { agent } = await createAgent(alice, { name: 'cas-bot', description: 'first' });
    const updated = await alice.call(registryApi.updateAgent, {
      agent: agent.id,
      revision: agent.revision,
      card: { name: 'cas-bot', description: 'second' },
    });
    assert.ok(updated.revision > agent.revision);
    assert.equal(updated.card.description, 'second');
    // A stale revision conflicts and changes nothing.
    const stale = alice.call(registryApi.updateAgent, {
      agent: agent.id,
      revision: agent.revision,
      card: { name: 'cas-bot', description: 'third' },
    });
    await assert.rejects(
      stale,
      (e) => isParleyError(e, 'CONFLICT') && e.details?.current === updated.revision,
    );
    // Someone else in the org (who can see it) is refused; an org admin too: the card is the owner's.
    for (const other of [carol, orgAdmin]) {
      assert.equal(
        await codeOf(
          other.call(registryApi.updateAgent, {
            agent: agent.id,
            revision: updated.revision,
            card: { name: 'cas-bot', description: 'hijacked' },
          }),
        ),
        'PERMISSION_DENIED',
      );
    }
    // An outsider cannot even tell that it exists.
    assert.equal(
      await codeOf(
        bob.call(registryApi.updateAgent, {
          agent: agent.id,
          revision: updated.revision,
          card: { name: 'cas-bot' },
        }),
      ),
      'NOT_FOUND',
    );
    const now = await alice.directory.getAgent(agent.id);
    assert.equal(now.agent.card.description, 'second');
    assert.equal(now.agent.revision, updated.revision);
  });

  it('never shows an outsider private or org-only agents, in discovery, listings, getAgent or presence', async () => {
    const tag = `vis${Date.now()}`;
    const card = (name: string, visibility: AgentCardInput['visibility']): AgentCardInput => ({
      name,
      visibility,
      skills: [{ id: 'vis.test', name: 'Visibility', tags: [tag] }],
    });
    const priv = (await createAgent(alice, card('vis-private', 'private'))).agent;
    const org = (await createAgent(alice, card('vis-org', 'org'))).agent;
    const pub = (await createAgent(alice, card('vis-public', 'public'))).agent;
    const ids = (agents: { agent: { id: string } }[]) => agents.map((a) => a.agent.id).sort();

    for (const outsider of [bob, bobAgent]) {
      assert.deepEqual(ids((await outsider.directory.discover({ tag })).agents), [pub.id]);
      assert.deepEqual(ids((await outsider.directory.discover({ text: 'vis' })).agents), [pub.id]);
      assert.deepEqual(ids((await outsider.directory.listAgents({ owner: aliceId })).agents), [pub.id]);
      assert.deepEqual(ids((await outsider.directory.listAgents({ org: orgA })).agents), [pub.id]);
      const unknown = newId('agent');
      for (const hidden of [priv.id, org.id, unknown]) {
        const err = await outsider.directory.getAgent(hidden).catch((e) => e);
        assert.ok(isParleyError(err, 'NOT_FOUND'), `${hidden}: ${err}`);
        assert.equal(err.message, `${hidden} does not exist`);
      }
      const pres = await outsider.call(registryApi.presence, { participants: [priv.id, org.id, pub.id] });
      assert.deepEqual(Object.keys(pres.presence), [pub.id]);
    }
    // Inside the org: org-wide and public for everyone, private for its owner and the org admin.
    assert.deepEqual(ids((await carol.directory.discover({ tag })).agents), [org.id, pub.id].sort());
    assert.deepEqual(ids((await alice.directory.discover({ tag })).agents), [priv.id, org.id, pub.id].sort());
    assert.deepEqual(
      ids((await orgAdmin.directory.discover({ tag })).agents),
      [priv.id, org.id, pub.id].sort(),
    );
    // The owner's own agent sees its private sibling.
    const sibling = await createAgent(alice, card('vis-sibling', 'org'));
    const sib = await connectTo(parley, sibling.creds);
    closers.push(sib);
    assert.ok(ids((await sib.directory.discover({ tag })).agents).includes(priv.id));
  });

  it('ranks exact skill matches first, then skill-id prefixes, then skill names', async () => {
    const uniq = `rk${Date.now().toString(36)}`;
    const byName = (
      await createAgent(alice, {
        name: `${uniq}-c`,
        skills: [{ id: `${uniq}x.other`, name: `Does ${uniq} things` }],
      })
    ).agent;
    const prefix = (
      await createAgent(alice, { name: `${uniq}-a`, skills: [{ id: `${uniq}.deep`, name: 'Deep' }] })
    ).agent;
    const exact = (await createAgent(alice, { name: `${uniq}-z`, skills: [{ id: uniq, name: 'Exact' }] }))
      .agent;
    await createAgent(alice, { name: `${uniq}-none`, skills: [{ id: 'unrelated', name: 'Nothing' }] });
    const r = await carol.directory.discover({ skill: uniq });
    assert.deepEqual(
      r.agents.map((a) => a.agent.id),
      [exact.id, prefix.id, byName.id],
    );
    // Free text and runtime narrow too.
    const coder = (
      await createAgent(alice, {
        name: `${uniq} helper`,
        description: 'Reviews pull requests carefully',
        runtime: 'codex',
      })
    ).agent;
    assert.deepEqual(
      (await carol.directory.discover({ text: `${uniq} pull req` })).agents.map((a) => a.agent.id),
      [coder.id],
    );
    assert.deepEqual(
      (await carol.directory.discover({ text: uniq, runtime: 'codex' })).agents.map((a) => a.agent.id),
      [coder.id],
    );
    assert.deepEqual((await carol.directory.discover({ skill: `${uniq}-nothing-like-it` })).agents, []);
  });

  it('pages discovery and listings without gaps or repeats, and refuses a forged cursor', async () => {
    const tag = `page${Date.now()}`;
    const created: string[] = [];
    for (let i = 0; i < 7; i++) {
      created.push(
        (
          await createAgent(alice, {
            name: `pager-${tag}-${i}`,
            skills: [{ id: 'paging', name: 'Paging', tags: [tag] }],
          })
        ).agent.id,
      );
    }
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await carol.directory.discover({ tag, limit: 3, ...(cursor ? { cursor } : {}) });
      seen.push(...page.agents.map((a) => a.agent.id));
      cursor = page.next;
      pages++;
    } while (cursor);
    assert.equal(pages, 3);
    assert.deepEqual([...seen].sort(), [...created].sort());

    const listed: string[] = [];
    cursor = undefined;
    do {
      const page = await alice.directory.listAgents({
        owner: aliceId,
        limit: 4,
        ...(cursor ? { cursor } : {}),
      });
      listed.push(...page.agents.map((a) => a.agent.id));
      cursor = page.next;
    } while (cursor);
    assert.equal(new Set(listed).size, listed.length);
    for (const id of created) assert.ok(listed.includes(id));
    assert.deepEqual(listed, [...listed].sort(), 'creation order');

    assert.equal(await codeOf(carol.directory.discover({ tag, cursor: 'x99' })), 'INVALID_ARGUMENT');
    assert.equal(await codeOf(carol.directory.listAgents({ cursor: 'nope' })), 'INVALID_ARGUMENT');
  });

  it('gives bad input a code and changes nothing', async () => {
    const before = {
      consumers: await inboxConsumers(svc),
      agents: (await admin.directory.listAgents({ limit: 200 })).agents.length,
      orgs: (await admin.call(registryApi.listOrgs, {})).orgs.length,
    };
    await createAgent(alice, { name: 'Unique-Name' });
    const after1 = (await admin.directory.listAgents({ limit: 200 })).agents.length;
    const cases: [string, () => Promise<unknown>][] = [
      ['INVALID_ARGUMENT', () => alice.call(registryApi.createAgent, { card: { name: '' } })],
      [
        'INVALID_ARGUMENT',
        () =>
          alice.call(registryApi.createAgent, { card: { name: 'x', skills: [{ id: 'Bad Id', name: 'x' }] } }),
      ],
      [
        'INVALID_ARGUMENT',
        () => alice.call(registryApi.createAgent, { card: { name: 'x', runtime: 'cobol' as never } }),
      ],
      ['INVALID_ARGUMENT', () => alice.call(registryApi.createAgent, { card: 'not a card' as never })],
      ['INVALID_ARGUMENT', () => alice.call(registryApi.getAgent, { agent: 'agt_not-an-id' })],
      [
        'NOT_FOUND',
        () => alice.call(registryApi.createAgent, { owner: newId('user'), card: { name: 'orphan' } }),
      ],
      ['NOT_FOUND', () => alice.call(registryApi.getAgent, { agent: newId('agent') })],
      ['NOT_FOUND', () => alice.call(registryApi.deregisterAgent, { agent: newId('agent') })],
      ['NOT_FOUND', () => alice.call(registryApi.getUser, { user: newId('user') })],
      ['NOT_FOUND', () => admin.call(registryApi.createUser, { org: newId('org'), name: 'ghost' })],
      ['CONFLICT', () => alice.call(registryApi.createAgent, { card: { name: 'unique-name' } })],
      ['CONFLICT', () => carol.call(registryApi.createAgent, { card: { name: 'UNIQUE-NAME' } })],
      ['CONFLICT', () => admin.call(registryApi.createOrg, { name: 'Org-A' })],
      ['CONFLICT', () => admin.call(registryApi.createUser, { org: orgA, name: 'Alice' })],
      [
        'PAYLOAD_TOO_LARGE',
        () => alice.call(registryApi.createAgent, { card: { name: 'big', description: 'x'.repeat(70_000) } }),
      ],
      ['PERMISSION_DENIED', () => alice.call(registryApi.createOrg, { name: 'mine' })],
      ['PERMISSION_DENIED', () => carol.call(registryApi.createUser, { org: orgA, name: 'eve' })],
      [
        'PERMISSION_DENIED',
        () => carol.call(registryApi.createAgent, { owner: aliceId, card: { name: 'for-alice' } }),
      ],
      ['NOT_FOUND', () => bob.call(registryApi.createUser, { org: orgA, name: 'mallory' })],
      ['UNAUTHENTICATED', () => bobAgent.call(registryApi.createAgent, { card: { name: 'spawn' } })],
      [
        'PERMISSION_DENIED',
        () => alice.call(registryApi.checkManage, { actor: aliceId, participant: aliceId }),
      ],
    ];
    for (const [code, call] of cases) assert.equal(await codeOf(call()), code, String(call));
    // Raw bytes that are not JSON.
    const raw = await alice.nc.request(
      registryApi.createAgent.subject(aliceId),
      new TextEncoder().encode('{nope'),
    );
    assert.equal(raw.headers?.get('Parley-Error'), 'INVALID_ARGUMENT');
    // Nothing changed beyond the one good agent: no records, no consumers, no orgs.
    assert.equal((await admin.directory.listAgents({ limit: 200 })).agents.length, after1);
    assert.equal(after1, before.agents + 1);
    assert.equal((await admin.call(registryApi.listOrgs, {})).orgs.length, before.orgs);
    assert.equal((await inboxConsumers(svc)).length, before.consumers.length + 1);
  });

  it('lists the inventory of an org with owner, runtime, visibility, tools, scopes and presence', async () => {
    const { agent } = await createAgent(alice, {
      name: 'inventory-bot',
      runtime: 'langgraph',
      visibility: 'private',
      tools: ['search', 'hr.payroll.read'],
      scopes: ['tool:hr.payroll.read'],
    });
    const all = await orgAdmin.directory.all((cursor) =>
      orgAdmin.directory.listAgents({ org: orgA, limit: 50, ...(cursor ? { cursor } : {}) }),
    );
    const entry = all.find((a) => a.agent.id === agent.id);
    assert.ok(entry);
    assert.equal(entry.agent.owner, aliceId);
    assert.equal(entry.agent.card.runtime, 'langgraph');
    assert.equal(entry.agent.card.visibility, 'private');
    assert.deepEqual(entry.agent.card.tools, ['search', 'hr.payroll.read']);
    assert.deepEqual(entry.agent.card.scopes, ['tool:hr.payroll.read']);
    assert.equal(entry.presence.state, 'offline');
    assert.ok(all.every((a) => a.agent.org === orgA));
    // A member of the org does not see a colleague's private agent in the inventory.
    const memberView = await carol.directory.listAgents({ org: orgA, limit: 200 });
    assert.ok(!memberView.agents.some((a) => a.agent.id === agent.id));
  });
});
