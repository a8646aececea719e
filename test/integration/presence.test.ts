/**
 * Presence: the SDK heartbeats while connected, state changes are events, `needs_input` notifies
 * the owner, and an agent whose heartbeats stop (a crash: no goodbye) turns offline by itself.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { ParleyEvent, registryApi, subjects } from '@parley/contracts';
import {
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

describe('presence and work status', () => {
  const TTL = 1500;
  let parley: TestParley;
  let svc: NatsConnection;
  const events: ParleyEvent[] = [];

  before(async () => {
    parley = await startParley({ backbone: { presenceTtlMs: TTL } });
    svc = await connectService(parley);
    svc.subscribe('parley.evt.presence.>', {
      callback: (_e, m) => {
        events.push(ParleyEvent.parse(m.json()));
      },
    });
    await svc.flush();
  });
  after(async () => {
    await svc?.close();
    await parley?.destroy();
  });

  const changes = (id: string) =>
    events.filter((e) => e.kind === 'changed' && e.subject === id).map((e) => e.data.to);

  it('goes online → busy → needs_input (owner notified) → offline once heartbeats stop', async () => {
    const admin = await connectAdmin(parley);
    const org = await createOrg(admin, 'presence-org');
    const owner = await createHuman(admin, { org: org.id, name: 'owner' });
    const ownerConn = await connectTo(parley, owner.creds);
    const { agent, creds } = await createAgent(ownerConn, { name: 'worker' });
    const presenceOf = async () =>
      (await ownerConn.call(registryApi.presence, { participants: [agent.id] })).presence[agent.id];

    const bot = await connectTo(parley, creds, { presence: { intervalMs: 200 } });
    await waitFor(async () => (await presenceOf())?.state === 'online', 'online');
    await bot.presence.set('busy', 'reviewing PR 42');
    // set() resolves once the registry stored it: the next read sees it.
    const busy = await presenceOf();
    assert.equal(busy?.state, 'busy');
    assert.equal(busy?.activity, 'reviewing PR 42');
    await bot.presence.set('needs_input', 'which branch?');
    await waitFor(
      () => events.some((e) => e.kind === 'needs_input' && e.subject === agent.id),
      'the needs_input event',
    );
    const ask = events.find((e) => e.kind === 'needs_input' && e.subject === agent.id);
    assert.equal(ask?.data.owner, owner.user.id);
    assert.equal(ask?.data.activity, 'which branch?');
    // The inventory shows it too.
    const listed = await ownerConn.directory.listAgents({ owner: owner.user.id });
    assert.equal(listed.agents[0]?.presence.state, 'needs_input');
    assert.ok(listed.agents[0]?.presence.lastSeen);

    // Crash: the connection goes away without the SDK saying goodbye.
    const crashedAt = Date.now();
    await bot.nc.close();
    await waitFor(() => changes(agent.id).includes('offline'), 'the offline event', TTL * 4);
    assert.ok(Date.now() - crashedAt >= TTL * 0.5, 'not offline before the TTL');
    assert.equal((await presenceOf())?.state, 'offline');
    assert.deepEqual(changes(agent.id), ['online', 'busy', 'needs_input', 'offline']);
    // Once: the sweep does not announce it again.
    await new Promise((r) => setTimeout(r, TTL));
    assert.equal(changes(agent.id).filter((s) => s === 'offline').length, 1);

    // A clean close says offline at once; reconnecting is online again.
    const again = await connectTo(parley, creds, { presence: { intervalMs: 200 } });
    await waitFor(async () => (await presenceOf())?.state === 'online', 'online again');
    await again.presence.set('busy', 'last task');
    await again.close();
    await waitFor(async () => (await presenceOf())?.state === 'offline', 'offline after close', TTL / 2);
    // The inventory still says what it did last.
    assert.equal((await presenceOf())?.activity, 'last task');

    await ownerConn.close();
    await admin.close();
  });

  it('refuses heartbeats that are malformed or oversized, changing nothing', async () => {
    const admin = await connectAdmin(parley);
    const { agent, creds } = await createAgent(admin, { name: 'quiet' });
    const bot = await connectTo(parley, creds);
    const bad = async (payload: string) => {
      const r = await bot.nc.request(subjects.presence(agent.id), new TextEncoder().encode(payload), {
        timeout: 2000,
      });
      return r.headers?.get('Parley-Error');
    };
    assert.equal(await bad('{not json'), 'INVALID_ARGUMENT');
    assert.equal(await bad(JSON.stringify({ state: 'asleep' })), 'INVALID_ARGUMENT');
    assert.equal(
      await bad(JSON.stringify({ state: 'busy', activity: 'x'.repeat(2000) })),
      'PAYLOAD_TOO_LARGE',
    );
    // The SDK's set() rejects with the registry's refusal.
    await assert.rejects(bot.presence.set('busy', 'x'.repeat(2000)), { code: 'PAYLOAD_TOO_LARGE' });
    const p = await admin.call(registryApi.presence, { participants: [agent.id] });
    assert.equal(p.presence[agent.id]?.state, 'offline');
    assert.deepEqual(changes(agent.id), []);
    await bot.close();
    await admin.close();
  });
});
