/**
 * The console's second set of routes, end to end over HTTP against a real Parley: the owner's
 * audited read-only view of the rooms its agents are in (and everyone else refused), budgets with
 * what was spent of them, and the admin pages' routes (people, grants, API keys, webhooks) with
 * their refusals for someone who is not an admin.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Agent } from '@parley/sdk';
import {
  connectAdmin,
  connectService,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  startParley,
  type TestParley,
} from '@parley/test/harness';
import { auditRecords } from '../../../test/integration/fixtures/governance.js';
import { http } from './helpers.js';

describe('gateway: owner view of agents’ rooms, budgets, admin routes', () => {
  let parley: TestParley;
  let base: string;
  let svc: NatsConnection;
  let ada: Agent;
  let coder: Agent;
  let coderId: string;
  let adaId: string;
  let bobId: string;
  let orgId: string;
  const token: Record<'ada' | 'bob' | 'carl' | 'eve', string> = { ada: '', bob: '', carl: '', eve: '' };
  let room: string;

  const session = async (participant: string) => {
    const code = await parley.gateway.createLoginCode(participant);
    const r = await http(base, `/v1/login?code=${code}`);
    assert.equal(r.status, 200);
    return String(r.body.token);
  };

  before(async () => {
    parley = await startParley({ gateway: { PARLEY_WEBHOOK_ALLOW_PRIVATE: '127.0.0.1' } });
    base = parley.httpUrl;
    svc = await connectService(parley);
    const admin = await connectAdmin(parley);
    const org = await createOrg(admin, 'owner-view');
    orgId = org.id;
    const other = await createOrg(admin, 'elsewhere');
    const a = await createHuman(admin, { org: org.id, name: 'ada' });
    const b = await createHuman(admin, { org: org.id, name: 'bob' });
    const c = await createHuman(admin, { org: org.id, name: 'carl', role: 'admin' });
    const e = await createHuman(admin, { org: other.id, name: 'eve' });
    await admin.close();
    adaId = a.user.id;
    bobId = b.user.id;
    ada = await connectTo(parley, a.creds);
    token.ada = await session(adaId);
    token.bob = await session(bobId);
    token.carl = await session(c.user.id);
    token.eve = await session(e.user.id);
    const made = await createAgent(ada, { name: 'coder', visibility: 'org' });
    coderId = made.agent.id;
    coder = await connectTo(parley, made.creds);
    room = (await coder.rooms.create('release plans')).id;
    await coder.rooms.room(room).send('We ship on Friday.');
  });
  after(async () => {
    await Promise.allSettled([coder?.close(), ada?.close(), svc?.close()]);
    await parley?.destroy();
  });

  it('the owner lists its agent’s rooms and reads one without joining; the read is audited', async (t) => {
    const list = await http(base, `/v1/agents/${coderId}/rooms`, { token: token.ada });
    assert.equal(list.status, 200, JSON.stringify(list.body));
    const rooms = list.body.rooms as { id: string; title: string; role: string }[];
    assert.deepEqual(
      rooms.filter((r) => r.id === room).map((r) => [r.title, r.role]),
      [['release plans', 'owner']],
    );

    const read = await http(base, `/v1/agents/${coderId}/rooms/${room}?limit=10`, { token: token.ada });
    assert.equal(read.status, 200, JSON.stringify(read.body));
    const entries = read.body.entries as { seq: number; message: { parts: { text?: string }[] } }[];
    assert.ok(entries.some((x) => x.message.parts[0]?.text === 'We ship on Friday.'));
    assert.equal((read.body.room as { title: string }).title, 'release plans');

    // The audit record the answer names: who read whose room.
    const records = await auditRecords(svc, 'access');
    const rec = records.find((r) => r.id === read.body.audit);
    assert.ok(rec, 'the read wrote the audit record it names');
    assert.equal(rec.action, 'room.owner_read');
    assert.equal(rec.actor, adaId);
    assert.equal(rec.target, coderId);
    assert.equal(rec.room, room);
    assert.equal(rec.data?.entries, entries.length);

    // What the audited read costs next to a member's plain history read (reported, not asserted).
    const key = await http(base, `/v1/agents/${coderId}/keys`, {
      token: token.ada,
      body: { label: 'bench' },
    });
    const timed = async (path: string, bearer: string) => {
      const took: number[] = [];
      for (let i = 0; i < 40; i++) {
        const t0 = performance.now();
        assert.equal((await http(base, path, { token: bearer })).status, 200);
        took.push(performance.now() - t0);
      }
      took.sort((a, b) => a - b);
      return `p50 ${took[19]?.toFixed(1)} ms, p90 ${took[35]?.toFixed(1)} ms`;
    };
    t.diagnostic(
      `owner read ${await timed(`/v1/agents/${coderId}/rooms/${room}?limit=10`, token.ada)}; member history ${await timed(`/v1/rooms/${room}/messages?limit=10`, String(key.body.key))}`,
    );
    await http(base, `/v1/keys/${(key.body.info as { id: string }).id}`, {
      method: 'DELETE',
      token: token.ada,
    });

    // Reading did not make Ada a member: the member routes still refuse her.
    const asMember = await http(base, `/v1/rooms/${room}`, { token: token.ada });
    assert.equal(asMember.body.code, 'NOT_A_MEMBER');
  });

  it('refuses everyone but the owner — a member of the org, an org admin, another org — and audits nothing', async () => {
    const before = (await auditRecords(svc, 'access')).length;
    for (const who of ['bob', 'carl'] as const) {
      const list = await http(base, `/v1/agents/${coderId}/rooms`, { token: token[who] });
      assert.equal(list.status, 403, who);
      assert.equal(list.body.code, 'PERMISSION_DENIED');
      const read = await http(base, `/v1/agents/${coderId}/rooms/${room}`, { token: token[who] });
      assert.equal(read.status, 403, who);
      assert.equal(read.body.code, 'PERMISSION_DENIED');
      assert.equal(read.body.entries, undefined);
    }
    const eve = await http(base, `/v1/agents/${coderId}/rooms/${room}`, { token: token.eve });
    assert.equal(eve.body.code, 'NOT_FOUND');
    // The owner, for a room its agent is not in.
    const other = await connectTo(parley, (await createAgent(ada, { name: 'other' })).creds);
    try {
      const notIn = (await other.rooms.create('not coder’s')).id;
      const outside = await http(base, `/v1/agents/${coderId}/rooms/${notIn}`, { token: token.ada });
      assert.equal(outside.body.code, 'NOT_A_MEMBER');
    } finally {
      await other.close();
    }
    assert.equal((await auditRecords(svc, 'access')).length, before, 'a refused read is not a read');
  });

  it('shows each budget with what was spent of it; only to those who may see it', async () => {
    const set = await http(base, '/v1/budgets', {
      method: 'PUT',
      token: token.ada,
      body: { agent: coderId, tokensPerDay: 10_000, costUsdPerDay: 1 },
    });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    await coder.usage.report({ model: 'm', inputTokens: 2000, outputTokens: 500, costUsd: 0.25, room });
    type Status = {
      budget: { id: string };
      limits: { limit: string; used: number; value: number; ratio: number }[];
    };
    const mine = await http(base, '/v1/budgets', { token: token.ada });
    assert.equal(mine.status, 200, JSON.stringify(mine.body));
    const b = (mine.body.budgets as Status[]).find((x) => x.budget.id === coderId);
    assert.ok(b);
    assert.deepEqual(
      b.limits.map((l) => [l.limit, l.used, l.value, l.ratio]),
      [
        ['tokensPerDay', 2500, 10_000, 0.25],
        ['costUsdPerDay', 0.25, 1, 0.25],
      ],
    );
    const admin = await http(base, `/v1/budgets?agent=${coderId}`, { token: token.carl });
    assert.equal((admin.body.budgets as Status[]).length, 1, 'an admin of the org sees it');
    const bob = await http(base, '/v1/budgets', { token: token.bob });
    assert.deepEqual(bob.body.budgets, [], 'another member does not');
  });

  it('admin routes: a member is refused with PERMISSION_DENIED and nothing changes; an admin succeeds', async () => {
    const user = await http(base, '/v1/users', { token: token.bob, body: { name: 'mallory', org: orgId } });
    assert.equal(user.status, 403);
    assert.equal(user.body.code, 'PERMISSION_DENIED');
    const grants = await http(base, `/v1/users/${bobId}/grants`, {
      method: 'PUT',
      token: token.bob,
      body: { scopes: ['hr:*'] },
    });
    assert.equal(grants.body.code, 'PERMISSION_DENIED');
    assert.equal((await http(base, '/v1/grants', { token: token.bob })).body.code, 'PERMISSION_DENIED');
    assert.equal(
      (await http(base, '/v1/orgs', { token: token.carl, body: { name: 'new org' } })).body.code,
      'PERMISSION_DENIED',
      'creating an org is the superadmin’s',
    );
    const people = await http(base, '/v1/users', { token: token.carl });
    assert.ok(!(people.body.users as { name: string }[]).some((u) => u.name === 'mallory'));
    const listed = await http(base, '/v1/grants', { token: token.carl });
    assert.deepEqual(listed.body.grants, [], 'bob’s refused grant changed nothing');

    const created = await http(base, '/v1/users', { token: token.carl, body: { name: 'dora', org: orgId } });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const set = await http(base, `/v1/users/${bobId}/grants`, {
      method: 'PUT',
      token: token.carl,
      body: { scopes: ['hr:payroll:read'] },
    });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    const after = await http(base, '/v1/grants', { token: token.carl });
    assert.deepEqual(
      (after.body.grants as { participant: string; scopes: string[] }[]).map((g) => [
        g.participant,
        g.scopes,
      ]),
      [[bobId, ['hr:payroll:read']]],
    );
    const orgs = await http(base, '/v1/orgs', { token: token.carl });
    assert.deepEqual(
      (orgs.body.orgs as { id: string }[]).map((o) => o.id),
      [orgId],
    );
  });

  it('API keys and webhooks of an agent: its owner manages them, another member is refused', async () => {
    const refused = await http(base, `/v1/agents/${coderId}/keys`, {
      token: token.bob,
      body: { label: 'stolen' },
    });
    assert.equal(refused.body.code, 'PERMISSION_DENIED');
    const made = await http(base, `/v1/agents/${coderId}/keys`, {
      token: token.ada,
      body: { label: 'ci', scopes: ['read'] },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const key = String(made.body.key);
    const me = await http(base, '/v1/me', { token: key });
    assert.equal(me.body.id, coderId, 'the key acts as the agent');
    const keys = await http(base, `/v1/agents/${coderId}/keys`, { token: token.ada });
    assert.deepEqual(
      (keys.body.keys as { label: string; scopes: string[]; revokedAt?: string }[])
        .filter((k) => !k.revokedAt)
        .map((k) => [k.label, k.scopes]),
      [['ci', ['read']]],
    );
    assert.equal(JSON.stringify(keys.body).includes(key.split('.')[1] as string), false, 'no secret listed');
    const id = (made.body.info as { id: string }).id;
    const revoked = await http(base, `/v1/keys/${id}`, { method: 'DELETE', token: token.ada });
    assert.equal(revoked.body.revoked, true);
    assert.equal((await http(base, '/v1/me', { token: key })).status, 401);

    const url = 'http://127.0.0.1:9/parley';
    assert.equal(
      (
        await http(base, `/v1/agents/${coderId}/webhook`, {
          method: 'PUT',
          token: token.bob,
          body: { url },
        })
      ).body.code,
      'PERMISSION_DENIED',
    );
    assert.equal(
      (await http(base, `/v1/agents/${coderId}/webhook`, { token: token.ada })).body.code,
      'NOT_FOUND',
    );
    const hook = await http(base, `/v1/agents/${coderId}/webhook`, {
      method: 'PUT',
      token: token.ada,
      body: { url, maxAttempts: 3 },
    });
    assert.equal(hook.status, 200, JSON.stringify(hook.body));
    assert.match(String(hook.body.secret), /^whsec_/);
    const got = await http(base, `/v1/agents/${coderId}/webhook`, { token: token.ada });
    assert.equal((got.body.info as { url: string }).url, url);
    const bad = await http(base, `/v1/agents/${coderId}/webhook`, {
      method: 'PUT',
      token: token.ada,
      body: { url: 'ftp://example.com/x' },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'INVALID_ARGUMENT');
    const del = await http(base, `/v1/agents/${coderId}/webhook`, { method: 'DELETE', token: token.ada });
    assert.equal(del.body.deleted, true);

    // Inbound hooks of the agent: made by its owner (the secret once), listed without it.
    assert.equal(
      (await http(base, `/v1/agents/${coderId}/hooks`, { token: token.bob, body: { room } })).body.code,
      'PERMISSION_DENIED',
    );
    const inbound = await http(base, `/v1/agents/${coderId}/hooks`, {
      token: token.ada,
      body: { room, label: 'ci' },
    });
    assert.equal(inbound.status, 201, JSON.stringify(inbound.body));
    const listed = await http(base, `/v1/agents/${coderId}/hooks`, { token: token.ada });
    assert.deepEqual(
      (listed.body.hooks as { label: string; room: string }[]).map((h) => [h.label, h.room]),
      [['ci', room]],
    );
    assert.equal(JSON.stringify(listed.body).includes(String(inbound.body.secret)), false);
  });
});
