/**
 * The REST API `/v1` against a real Parley: rooms (create, list, get, invite, leave), messages (send
 * with the `text` shorthand or parts, idempotency, history), directory, contacts, presence, usage,
 * the audit chain and the kill switch — with the refusals of NATS (consent, membership, suspension)
 * as problem+json, validation by the contracts, and oversize bodies refused with nothing written.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { gatewayApi } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  codeOf,
  connectAdmin,
  connectTo,
  createAgent,
  createHuman,
  startParley,
  type TestParley,
} from '@parley/test/harness';
import Fastify from 'fastify';
import { sendProblem, toClientError } from '../src/problem.js';
import { http } from './helpers.js';

describe('gateway REST /v1', () => {
  let parley: TestParley;
  let admin: Agent;
  let base: string;
  /** The local admin's session (a human). */
  let adminToken: string;

  const keyFor = async (agent: string) => (await admin.call(gatewayApi.createKey, { agent })).key;

  before(async () => {
    parley = await startParley();
    admin = await connectAdmin(parley);
    base = parley.httpUrl;
    const code = await parley.gateway.createLoginCode(parley.home.state.admin.id);
    adminToken = String((await http(base, `/v1/login?code=${code}`)).body.token);
  });
  after(async () => {
    await admin?.close();
    await parley?.destroy();
  });

  it('rooms and messages follow the SDK’s shapes', async () => {
    const { agent: a } = await createAgent(admin, { name: 'rest-a' });
    const { agent: b, creds: bCreds } = await createAgent(admin, { name: 'rest-b' });
    const key = await keyFor(a.id);
    const created = await http(base, '/v1/rooms', { token: key, body: { title: 'ops', members: [b.id] } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const room = String(created.body.id);
    assert.deepEqual((created.body.members as { id: string }[]).map((m) => m.id).sort(), [a.id, b.id].sort());

    const { agent: c } = await createAgent(admin, { name: 'rest-c' });
    const invited = await http(base, `/v1/rooms/${room}/members`, {
      token: key,
      body: { participant: c.id, role: 'observer' },
    });
    assert.equal(invited.status, 201, JSON.stringify(invited.body));
    assert.equal(invited.body.role, 'observer');
    const cKey = await keyFor(c.id);
    const observerSends = await http(base, `/v1/rooms/${room}/messages`, {
      token: cKey,
      body: { text: 'hi' },
    });
    assert.equal(observerSends.body.code, 'NOT_A_MEMBER', 'observers only read, as over NATS');

    const listed = await http(base, '/v1/rooms', { token: key });
    assert.deepEqual(
      (listed.body.rooms as { id: string }[]).map((r) => r.id),
      [room],
    );
    assert.equal((await http(base, `/v1/rooms/${room}`, { token: key })).body.title, 'ops');

    const sent = await http(base, `/v1/rooms/${room}/messages`, {
      token: key,
      body: { text: 'hello over HTTP' },
    });
    assert.equal(sent.status, 201);
    assert.match(String(sent.body.id), /^msg_/);
    const parts = await http(base, `/v1/rooms/${room}/messages`, {
      token: key,
      body: { parts: [{ type: 'data', data: { ticket: 42 } }], mentions: [b.id] },
    });
    assert.equal(parts.status, 201);

    // B reads it over NATS, exactly as sent.
    const bAgent = await connectTo(parley, bCreds);
    try {
      const history = await bAgent.rooms.room(room).history({ order: 'oldest' });
      const messages = history.entries.filter((e) => e.message.kind === 'message');
      assert.deepEqual(
        messages.map((e) => e.message.parts[0]),
        [
          { type: 'text', text: 'hello over HTTP' },
          { type: 'data', data: { ticket: 42 } },
        ],
      );
      assert.equal(messages[0]?.message.sender.id, a.id);
    } finally {
      await bAgent.close();
    }

    const page = await http(base, `/v1/rooms/${room}/messages?order=oldest&limit=50`, { token: key });
    assert.equal(page.status, 200);
    assert.equal((page.body.entries as unknown[]).length >= 2, true);

    const ownerLeaves = await http(base, `/v1/rooms/${room}/leave`, { token: key, body: {} });
    assert.equal(ownerLeaves.status, 403, 'the owner cannot leave an open room, as over NATS');
    const bKey = await keyFor(b.id);
    const left = await http(base, `/v1/rooms/${room}/leave`, { token: bKey, body: {} });
    assert.equal(left.status, 200);
    const gone = await http(base, `/v1/rooms/${room}/messages`, {
      token: bKey,
      body: { text: 'after leaving' },
    });
    assert.equal(gone.status, 403);
    assert.equal(gone.body.code, 'NOT_A_MEMBER');
  });

  it('tasks: create in a room, move through the states, refusals with their codes', async () => {
    const { agent: a } = await createAgent(admin, { name: 'rest-task-a' });
    const { agent: b } = await createAgent(admin, { name: 'rest-task-b' });
    const [aKey, bKey] = [await keyFor(a.id), await keyFor(b.id)];
    const room = String(
      (await http(base, '/v1/rooms', { token: aKey, body: { title: 'tasks', members: [b.id] } })).body.id,
    );
    const created = await http(base, `/v1/rooms/${room}/tasks`, {
      token: aKey,
      body: { assignee: b.id, goal: 'summarise the incident', acceptance: ['one page'] },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const task = String(created.body.id);
    assert.equal(created.body.state, 'submitted');
    const started = await http(base, `/v1/tasks/${task}/transitions`, {
      token: bKey,
      body: { to: 'working' },
    });
    assert.equal(started.body.state, 'working', JSON.stringify(started.body));
    const byRequester = await http(base, `/v1/tasks/${task}/transitions`, {
      token: aKey,
      body: { to: 'completed' },
    });
    assert.deepEqual([byRequester.status, byRequester.body.code], [403, 'PERMISSION_DENIED']);
    const done = await http(base, `/v1/tasks/${task}/transitions`, {
      token: bKey,
      body: { to: 'completed', result: { pages: 1 } },
    });
    assert.equal(done.body.state, 'completed');
    const again = await http(base, `/v1/tasks/${task}/transitions`, { token: bKey, body: { to: 'working' } });
    assert.deepEqual([again.status, again.body.code], [409, 'ILLEGAL_TRANSITION']);
    const listed = await http(base, `/v1/tasks?room=${room}&state=completed`, { token: aKey });
    assert.deepEqual(
      (listed.body.tasks as { id: string }[]).map((t) => t.id),
      [task],
    );
    const shown = await http(base, `/v1/tasks/${task}`, { token: aKey });
    assert.deepEqual(shown.body.result, { pages: 1 });
    const bad = await http(base, `/v1/tasks/${task}/transitions`, { token: bKey, body: { to: 'finished' } });
    assert.equal(bad.body.code, 'INVALID_ARGUMENT');
  });

  it('an Idempotency-Key stores a retried send once', async () => {
    const { agent } = await createAgent(admin, { name: 'idem' });
    const key = await keyFor(agent.id);
    const room = String((await http(base, '/v1/rooms', { token: key, body: { title: 'idem' } })).body.id);
    const send = () =>
      http(base, `/v1/rooms/${room}/messages`, {
        token: key,
        body: { text: 'once' },
        headers: { 'idempotency-key': 'order-7731' },
      });
    const first = await send();
    const second = await send();
    assert.equal(first.status, 201);
    assert.equal(second.status, 200);
    assert.equal(second.body.id, first.body.id);
    assert.equal(second.body.duplicate, true);
    const history = await http(base, `/v1/rooms/${room}/messages`, { token: key });
    assert.equal(
      (history.body.entries as { message: { kind: string } }[]).filter((e) => e.message.kind === 'message')
        .length,
      1,
    );
  });

  it('bad input is refused by the contracts, oversize bodies with 413, and nothing is written', async () => {
    const { agent } = await createAgent(admin, { name: 'validator' });
    const key = await keyFor(agent.id);
    const room = String((await http(base, '/v1/rooms', { token: key, body: { title: 'v' } })).body.id);
    const badTitle = await http(base, '/v1/rooms', { token: key, body: { title: 5 } });
    assert.equal(badTitle.status, 400);
    assert.equal(badTitle.body.code, 'INVALID_ARGUMENT');
    assert.match(String(badTitle.body.detail), /title/);
    const empty = await http(base, `/v1/rooms/${room}/messages`, { token: key, body: {} });
    assert.equal(empty.status, 400);
    const notJson = await http(base, `/v1/rooms/${room}/messages`, { token: key, body: '{"text":' });
    assert.equal(notJson.status, 400);
    assert.equal(notJson.body.code, 'INVALID_ARGUMENT');
    const huge = await http(base, `/v1/rooms/${room}/messages`, {
      token: key,
      body: { text: 'x'.repeat(300 * 1024) },
    });
    assert.equal(huge.status, 413);
    assert.equal(huge.body.code, 'PAYLOAD_TOO_LARGE');
    const history = await http(base, `/v1/rooms/${room}/messages`, { token: key });
    assert.equal(
      (history.body.entries as { message: { kind: string } }[]).filter((e) => e.message.kind === 'message')
        .length,
      0,
    );
    const unknown = await http(base, '/v1/nothing-here', { token: key });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.code, 'NOT_FOUND');
  });

  it('consent refusals are the same as over NATS', async () => {
    const org = parley.home.state.org.id;
    const { user: carol, creds: carolCreds } = await createHuman(admin, { org, name: 'carol' });
    const carolNats = await connectTo(parley, carolCreds);
    try {
      const { agent: carolsAgent } = await createAgent(carolNats, {
        name: 'carols-agent',
        visibility: 'org',
      });
      const { agent: mine } = await createAgent(admin, { name: 'mine' });
      const key = await keyFor(mine.id);
      const overHttp = await http(base, '/v1/rooms', {
        token: key,
        body: { title: 'x', members: [carolsAgent.id] },
      });
      assert.equal(overHttp.status, 403);
      assert.equal(overHttp.body.code, 'NO_CONSENT');
      assert.equal(await codeOf(admin.rooms.create('x', { members: [carolsAgent.id] })), 'NO_CONSENT');

      // Contact over HTTP: the admin asks carol, carol accepts — both through the gateway.
      const carolCode = await parley.gateway.createLoginCode(carol.id);
      const carolToken = String((await http(base, `/v1/login?code=${carolCode}`)).body.token);
      const asked = await http(base, '/v1/contacts/requests', {
        token: adminToken,
        body: { to: carol.id, reason: 'working on the launch together' },
      });
      assert.equal(asked.status, 201, JSON.stringify(asked.body));
      const pending = await http(base, '/v1/contacts/requests', { token: carolToken });
      const incoming = pending.body.incoming as { id: string }[];
      assert.deepEqual(
        incoming.map((r) => r.id),
        [asked.body.id],
      );
      const answered = await http(base, `/v1/contacts/requests/${asked.body.id}/answer`, {
        token: carolToken,
        body: { answer: 'accept' },
      });
      assert.equal(answered.status, 200, JSON.stringify(answered.body));
      const contacts = await http(base, '/v1/contacts', { token: adminToken });
      assert.equal(JSON.stringify(contacts.body.contacts).includes(carol.id), true);
    } finally {
      await carolNats.close();
    }
  });

  it('directory, presence, usage and the audit chain', async () => {
    const { agent } = await createAgent(admin, {
      name: 'searchable',
      skills: [{ id: 'invoice.reconcile', name: 'Reconcile invoices' }],
    });
    const key = await keyFor(agent.id);
    const found = await http(base, '/v1/agents?skill=invoice.reconcile', { token: key });
    assert.deepEqual(
      (found.body.agents as { agent: { id: string } }[]).map((l) => l.agent.id),
      [agent.id],
    );
    const got = await http(base, `/v1/agents/${agent.id}`, { token: key });
    assert.equal((got.body.agent as { id: string }).id, agent.id);
    const inventory = await http(base, `/v1/inventory?owner=${parley.home.state.admin.id}`, {
      token: adminToken,
    });
    assert.equal(JSON.stringify(inventory.body).includes(agent.id), true);

    assert.equal(
      (
        await http(base, '/v1/presence', {
          token: key,
          method: 'PUT',
          body: { state: 'busy', activity: 'reconciling' },
        })
      ).status,
      200,
    );
    const presence = await http(base, `/v1/presence?participants=${agent.id}`, { token: adminToken });
    assert.equal((presence.body.presence as Record<string, { state: string }>)[agent.id]?.state, 'busy');

    assert.equal((await http(base, '/v1/usage?by=agent', { token: adminToken })).status, 200);

    const room = String((await http(base, '/v1/rooms', { token: key, body: { title: 'audited' } })).body.id);
    const sent = await http(base, `/v1/rooms/${room}/messages`, { token: key, body: { text: 'trace me' } });
    const chain = await http(base, `/v1/audit/chain/${sent.body.id}`, { token: key });
    assert.equal(chain.status, 200, JSON.stringify(chain.body));
    assert.equal(Array.isArray(chain.body.hops), true);
  });

  it('the kill switch over HTTP: suspended agents are refused, resumed ones send again', async () => {
    const { agent } = await createAgent(admin, { name: 'runaway' });
    const key = await keyFor(agent.id);
    const room = String((await http(base, '/v1/rooms', { token: key, body: { title: 'k' } })).body.id);
    const byAgent = await http(base, `/v1/agents/${agent.id}/suspend`, {
      token: key,
      body: { reason: 'self' },
    });
    assert.equal(byAgent.status, 401, 'an agent may not use the kill switch (humans only, as over NATS)');
    const suspended = await http(base, `/v1/agents/${agent.id}/suspend`, {
      token: adminToken,
      body: { reason: 'looping' },
    });
    assert.equal(suspended.status, 200, JSON.stringify(suspended.body));
    let refused = await http(base, `/v1/rooms/${room}/messages`, {
      token: key,
      body: { text: 'still here?' },
    });
    for (let i = 0; i < 50 && refused.status !== 403; i++) {
      refused = await http(base, `/v1/rooms/${room}/messages`, { token: key, body: { text: 'still here?' } });
    }
    assert.equal(refused.status, 403);
    assert.equal(refused.body.code, 'SUSPENDED');
    assert.equal(
      (await http(base, `/v1/agents/${agent.id}/resume`, { token: adminToken, body: {} })).status,
      200,
    );
    let ok = await http(base, `/v1/rooms/${room}/messages`, { token: key, body: { text: 'back' } });
    for (let i = 0; i < 50 && ok.status !== 201; i++) {
      ok = await http(base, `/v1/rooms/${room}/messages`, { token: key, body: { text: 'back' } });
    }
    assert.equal(ok.status, 201);
  });

  it('an unexpected error is a generic 500 without internal text', async () => {
    const app = Fastify();
    app.setErrorHandler((err, _req, reply) => sendProblem(reply, toClientError(err, parley.gateway.log)));
    app.get('/boom', async () => {
      throw new Error('db password is hunter2');
    });
    const res = await app.inject({ method: 'GET', url: '/boom' });
    assert.equal(res.statusCode, 500);
    assert.equal(res.json().code, 'INTERNAL');
    assert.equal(res.body.includes('hunter2'), false);
    await app.close();
  });
});
