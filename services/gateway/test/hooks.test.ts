/**
 * Inbound webhooks over real HTTP: Standard Webhooks signatures (the `standardwebhooks` library
 * signs, as a sender would), GitHub-style X-Hub-Signature-256, CloudEvents binary and structured
 * mode (the `cloudevents` library builds them); bad, missing and stale signatures are 401 with
 * nothing written; the same event twice is stored once; a hook to one participant uses their
 * direct room; the hook management API.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { gatewayApi, type HistoryEntry } from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  codeOf,
  connectAdmin,
  connectTo,
  createAgent,
  startParley,
  type TestParley,
} from '@parley/test/harness';
import { CloudEvent, HTTP } from 'cloudevents';
import { Webhook } from 'standardwebhooks';

describe('gateway inbound webhooks', () => {
  let parley: TestParley;
  let admin: Agent;

  before(async () => {
    parley = await startParley();
    admin = await connectAdmin(parley);
  });
  after(async () => {
    await admin?.close();
    await parley?.destroy();
  });

  /** A bridge agent with a room the admin is in, and a hook into it. */
  async function setup(o: { template?: string; includeData?: boolean } = {}) {
    const { agent: bridge, creds } = await createAgent(admin, {
      name: `bridge-${Math.random().toString(36).slice(2, 7)}`,
      runtime: 'bridge',
    });
    const bridgeAgent = await connectTo(parley, creds);
    const room = await bridgeAgent.rooms.create('alerts', { members: [parley.home.state.admin.id] });
    const created = await admin.call(gatewayApi.createHook, {
      agent: bridge.id,
      room: room.id,
      label: 'ci',
      ...o,
    });
    const url = `${parley.httpUrl}${created.path}`;
    const messages = async (): Promise<HistoryEntry[]> =>
      (await admin.rooms.room(room.id).history({ order: 'oldest' })).entries.filter(
        (e) => e.message.kind === 'message',
      );
    return { bridge, bridgeAgent, room, hook: created.info, secret: created.secret, url, messages };
  }

  const post = (url: string, body: string, headers: Record<string, string>) =>
    fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });

  function standardHeaders(secret: string, id: string, body: string, at = new Date()) {
    return {
      'webhook-id': id,
      'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
      'webhook-signature': new Webhook(secret).sign(id, at, body),
    };
  }

  it('a Standard Webhooks POST becomes one message of the bridge agent, stored once however often it is sent', async () => {
    const s = await setup({ template: 'Build {{build.id}} {{build.status}}' });
    const body = JSON.stringify({ build: { id: 812, status: 'failed' } });
    const headers = standardHeaders(s.secret, 'msg_2x1', body);
    const first = await post(s.url, body, headers);
    assert.equal(first.status, 202, await first.clone().text());
    const again = await post(s.url, body, headers);
    assert.equal(again.status, 200);
    assert.equal(((await again.json()) as { duplicate: boolean }).duplicate, true);
    const stored = await s.messages();
    assert.equal(stored.length, 1);
    const m = stored[0]?.message;
    assert.equal(m?.sender.id, s.bridge.id);
    assert.deepEqual(m?.parts[0], { type: 'text', text: 'Build 812 failed' });
    assert.deepEqual(m?.parts[1], {
      type: 'data',
      data: { build: { id: 812, status: 'failed' } },
      mediaType: 'application/json',
    });
    assert.equal(m?.provenance?.trust, 'external', 'labelled as outside content');
    await s.bridgeAgent.close();
  });

  it('bad, missing and stale signatures are 401 and write nothing', async () => {
    const s = await setup();
    const body = JSON.stringify({ n: 1 });
    const wrongSecret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`;
    const cases: [string, Record<string, string>][] = [
      ['no signature', {}],
      ['wrong secret', standardHeaders(wrongSecret, 'e1', body)],
      ['tampered body', standardHeaders(s.secret, 'e2', JSON.stringify({ n: 2 }))],
      ['stale timestamp', standardHeaders(s.secret, 'e3', body, new Date(Date.now() - 6 * 60_000))],
      ['future timestamp', standardHeaders(s.secret, 'e4', body, new Date(Date.now() + 6 * 60_000))],
      ['bad hub signature', { 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` }],
    ];
    for (const [what, headers] of cases) {
      const res = await post(s.url, body, headers);
      assert.equal(res.status, 401, what);
      assert.equal(((await res.json()) as { code: string }).code, 'UNAUTHENTICATED', what);
    }
    assert.equal((await s.messages()).length, 0);
    // A rotated secret: the old one stops verifying.
    const rotated = await admin.call(gatewayApi.rotateHookSecret, { id: s.hook.id });
    assert.equal((await post(s.url, body, standardHeaders(s.secret, 'e5', body))).status, 401);
    assert.equal((await post(s.url, body, standardHeaders(rotated.secret, 'e6', body))).status, 202);
    await s.bridgeAgent.close();
  });

  it('accepts GitHub-style X-Hub-Signature-256, deduplicated by X-GitHub-Delivery', async () => {
    const s = await setup({ template: '{{action}} on #{{number}}' });
    const body = JSON.stringify({ action: 'opened', number: 7 });
    const headers = {
      'x-hub-signature-256': `sha256=${createHmac('sha256', s.secret).update(body).digest('hex')}`,
      'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958',
    };
    assert.equal((await post(s.url, body, headers)).status, 202);
    assert.equal((await post(s.url, body, headers)).status, 200);
    const stored = await s.messages();
    assert.equal(stored.length, 1);
    assert.deepEqual(stored[0]?.message.parts[0], { type: 'text', text: 'opened on #7' });
    await s.bridgeAgent.close();
  });

  it('accepts CloudEvents in binary and structured mode; the same event (source + id) is stored once', async () => {
    const s = await setup({ template: 'order {{orderId}}' });
    const event = new CloudEvent({
      id: 'evt-1',
      source: '/sap/s4/orders',
      type: 'sap.s4.beh.salesorder.v1.SalesOrder.Created.v1',
      datacontenttype: 'application/json',
      data: { orderId: '4711' },
    });
    const binary = HTTP.binary(event);
    const signed = (b: string, id: string) => standardHeaders(s.secret, id, b);
    const res1 = await post(s.url, String(binary.body), {
      ...(binary.headers as Record<string, string>),
      ...signed(String(binary.body), 'delivery-1'),
    });
    assert.equal(res1.status, 202, await res1.clone().text());
    // The same event again in structured mode, on a new delivery attempt: still one message.
    const structured = HTTP.structured(event);
    const res2 = await post(s.url, String(structured.body), {
      ...(structured.headers as Record<string, string>),
      ...signed(String(structured.body), 'delivery-2'),
    });
    assert.equal(res2.status, 200);
    const other = HTTP.structured(
      new CloudEvent({ id: 'evt-2', source: '/sap/s4/orders', type: 't', data: { orderId: '4712' } }),
    );
    assert.equal(
      (
        await post(s.url, String(other.body), {
          ...(other.headers as Record<string, string>),
          ...signed(String(other.body), 'delivery-3'),
        })
      ).status,
      202,
    );
    const stored = await s.messages();
    assert.deepEqual(
      stored.map((e) => (e.message.parts[0] as { text: string }).text),
      ['order 4711', 'order 4712'],
    );
    assert.equal(stored[0]?.message.metadata?.['ce-type'], 'sap.s4.beh.salesorder.v1.SalesOrder.Created.v1');
    // Not a CloudEvent after all (required attributes missing): refused, nothing written.
    const broken = JSON.stringify({ specversion: '1.0', id: 'x' });
    const bad = await post(s.url, broken, {
      'content-type': 'application/cloudevents+json',
      ...signed(broken, 'delivery-4'),
    });
    assert.equal(bad.status, 400);
    assert.equal((await s.messages()).length, 2);
    await s.bridgeAgent.close();
  });

  it('a hook to one participant posts in their direct room; an oversize body is 413', async () => {
    const { agent: bridge } = await createAgent(admin, { name: 'dm-bridge', runtime: 'bridge' });
    const created = await admin.call(gatewayApi.createHook, {
      agent: bridge.id,
      participant: parley.home.state.admin.id,
    });
    const room = await admin.rooms.get(created.info.room);
    assert.equal(room.direct, true);
    const body = JSON.stringify({ hello: 'admin' });
    const url = `${parley.httpUrl}${created.path}`;
    assert.equal((await post(url, body, standardHeaders(created.secret, 'd1', body))).status, 202);
    const huge = JSON.stringify({ blob: 'x'.repeat(300 * 1024) });
    assert.equal((await post(url, huge, standardHeaders(created.secret, 'd2', huge))).status, 413);
    const entries = (await admin.rooms.room(room.id).history()).entries.filter(
      (e) => e.message.kind === 'message',
    );
    assert.equal(entries.length, 1);
  });

  it('manages hooks: list without secrets, delete, and only the owner side may', async () => {
    const s = await setup();
    const listed = await admin.call(gatewayApi.listHooks, { agent: s.bridge.id });
    assert.deepEqual(
      listed.hooks.map((h) => h.id),
      [s.hook.id],
    );
    assert.equal(JSON.stringify(listed).includes(s.secret), false);
    const { agent: stranger, creds } = await createAgent(admin, { name: 'stranger' });
    const strangerAgent = await connectTo(parley, creds);
    assert.equal(
      await codeOf(strangerAgent.call(gatewayApi.deleteHook, { id: s.hook.id })),
      'PERMISSION_DENIED',
    );
    await strangerAgent.close();
    assert.ok(stranger.id);
    assert.equal((await admin.call(gatewayApi.deleteHook, { id: s.hook.id })).deleted, true);
    const body = '{}';
    assert.equal((await post(s.url, body, standardHeaders(s.secret, 'z', body))).status, 404);
    await s.bridgeAgent.close();
  });
});
