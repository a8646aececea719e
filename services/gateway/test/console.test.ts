/**
 * What the gateway does for the console: serves the built console at `/` (CSP, gzip, nothing else
 * shadowed), and the routes the console needs beyond the SDK's shapes — pause/resume a room,
 * create an agent (credentials once), rotate/revoke an agent's credentials, set a budget — with
 * the same authentication and refusals as over NATS.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Agent } from '@parley/sdk';
import {
  codeOf,
  connectAdmin,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import { ensureConsoleBuilt } from '../../../console/scripts/ensure-built.mjs';
import { http } from './helpers.js';

describe('gateway: the console and its routes', () => {
  let parley: TestParley;
  let base: string;
  let adaToken: string;
  let bobToken: string;
  let ada: Agent;

  const session = async (participant: string) => {
    const code = await parley.gateway.createLoginCode(participant);
    const r = await http(base, `/v1/login?code=${code}`);
    assert.equal(r.status, 200);
    return String(r.body.token);
  };

  before(async () => {
    ensureConsoleBuilt({ quiet: true });
    parley = await startParley({ gateway: { PARLEY_JAEGER_URL: 'http://jaeger.example:16686/' } });
    base = parley.httpUrl;
    const admin = await connectAdmin(parley);
    const org = await createOrg(admin, 'console-routes');
    const a = await createHuman(admin, { org: org.id, name: 'ada' });
    const b = await createHuman(admin, { org: org.id, name: 'bob' });
    await admin.close();
    ada = await connectTo(parley, a.creds);
    adaToken = await session(a.user.id);
    bobToken = await session(b.user.id);
  });
  after(async () => {
    await ada?.close();
    await parley?.destroy();
  });

  it('serves the console at / with a CSP and gzip, and leaves other paths to the API', async () => {
    const index = await fetch(`${base}/`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(index.status, 200);
    assert.match(index.headers.get('content-type') ?? '', /text\/html/);
    assert.equal(index.headers.get('content-encoding'), 'gzip');
    assert.match(index.headers.get('content-security-policy') ?? '', /script-src 'self'/);
    const html = await index.text();
    const asset = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
    assert.ok(asset, 'index.html names its script');
    const js = await fetch(`${base}${asset}`, { headers: { 'accept-encoding': 'gzip' } });
    assert.equal(js.status, 200);
    assert.match(js.headers.get('cache-control') ?? '', /immutable/);
    const missing = await http(base, '/v1/nope');
    assert.equal(missing.status, 404);
    assert.match(missing.contentType, /application\/problem\+json/);
    const config = await http(base, '/console/config.json');
    assert.equal(config.body.jaegerUrl, 'http://jaeger.example:16686');
  });

  it('pauses and resumes a room for its human members only; paused, agents get ROOM_PAUSED', async () => {
    const { creds } = await createAgent(ada, { name: 'pausable' });
    const agent = await connectTo(parley, creds);
    try {
      const room = await agent.rooms.create('pause me', { members: [ada.id] });
      const stranger = await http(base, `/v1/rooms/${room.id}/pause`, {
        token: bobToken,
        body: { reason: 'no' },
      });
      assert.equal(stranger.body.code, 'NOT_A_MEMBER', JSON.stringify(stranger.body));
      assert.equal((await agent.rooms.get(room.id)).paused, false, 'a refused pause changes nothing');
      const paused = await http(base, `/v1/rooms/${room.id}/pause`, {
        token: adaToken,
        body: { reason: 'look' },
      });
      assert.equal(paused.status, 200, JSON.stringify(paused.body));
      assert.equal(paused.body.paused, true);
      assert.equal(await codeOf(agent.rooms.room(room.id).send('now?')), 'ROOM_PAUSED');
      const bad = await http(base, `/v1/rooms/${room.id}/resume`, { token: adaToken, body: { reason: '' } });
      assert.equal(bad.body.code, 'INVALID_ARGUMENT');
      const resumed = await http(base, `/v1/rooms/${room.id}/resume`, { token: adaToken, body: {} });
      assert.equal(resumed.body.paused, false);
      assert.equal(await codeOf(agent.rooms.room(room.id).send('again')), 'no error');
    } finally {
      await agent.close();
    }
  });

  it('creates an agent with its credentials once; its owner rotates and revokes them, others cannot', async () => {
    const created = await http(base, '/v1/agents', {
      token: adaToken,
      body: { card: { name: 'made-in-console', runtime: 'claude-code' } },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const { agent: record, credentials } = created.body as {
      agent: { id: string; owner: string };
      credentials: { creds: string };
    };
    assert.equal(record.owner, ada.id);
    const first = await connectTo(parley, credentials.creds);
    assert.equal((await first.whoami()).id, record.id);

    const foreign = await http(base, `/v1/agents/${record.id}/credentials/rotate`, {
      token: bobToken,
      body: {},
    });
    assert.ok([403, 404].includes(foreign.status), JSON.stringify(foreign.body));
    const rotated = await http(base, `/v1/agents/${record.id}/credentials/rotate`, {
      token: adaToken,
      body: {},
    });
    assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
    const second = await connectTo(parley, String(rotated.body.creds));
    assert.equal((await second.whoami()).id, record.id);
    // The older credentials stop working: their connection is closed.
    await waitFor(() => first.nc.isClosed(), 'the connection with the old creds closed');

    const budget = await http(base, '/v1/budgets', {
      token: adaToken,
      method: 'PUT',
      body: { agent: record.id, costUsdPerDay: 5 },
    });
    assert.equal(budget.status, 200, JSON.stringify(budget.body));
    assert.equal(budget.body.costUsdPerDay, 5);

    const revoked = await http(base, `/v1/agents/${record.id}/credentials/revoke`, {
      token: adaToken,
      body: { reason: 'leaked in a screenshot' },
    });
    assert.equal(revoked.status, 200, JSON.stringify(revoked.body));
    await waitFor(() => second.nc.isClosed(), 'the revoked agent’s connection closed');
    const inventory = await http(base, `/v1/agents/${record.id}`, { token: adaToken });
    assert.equal((inventory.body.agent as { status: string }).status, 'revoked');
  });
});
