/**
 * The SAP bridge: Event Mesh webhook push (handshake, OAuth bearer tokens, CloudEvents in SAP's
 * format, structured and binary) into rooms, and the S/4HANA OData API as a tool call — against our
 * local SAP and a real backbone.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadTelemetryConfig } from '@parley/kit';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';
import { ACTION_MEDIA_TYPE } from '../src/bridge.js';
import { type LocalSap, s4Event, startLocalSap } from '../src/local/sap-server.js';
import type { RunningBridge } from '../src/runtime.js';
import { attachSap } from '../src/sap/index.js';
import { type Member, messagesOf, startWebhookBridge, textOf, type WebhookBridge } from './helpers.js';

describe('sap bridge', () => {
  let parley: TestParley;
  let sap: LocalSap;
  let b: WebhookBridge;
  let alice: Member;
  let bridgeId: string;
  let room: string;
  let running: RunningBridge;
  let url: string;

  before(async () => {
    parley = await startParley({ telemetry: loadTelemetryConfig({}) });
    sap = await startLocalSap({
      orders: [
        {
          SalesOrder: '4711',
          SoldToParty: '1000123',
          TotalNetAmount: '1000.00',
          TransactionCurrency: 'EUR',
          OverallSDProcessStatus: 'A',
        },
        {
          SalesOrder: '4712',
          SoldToParty: '1000123',
          TotalNetAmount: '500.00',
          TransactionCurrency: 'EUR',
          OverallSDProcessStatus: 'B',
        },
        {
          SalesOrder: '4713',
          SoldToParty: '1000123',
          TotalNetAmount: '900.00',
          TransactionCurrency: 'EUR',
          OverallSDProcessStatus: 'C',
        },
        {
          SalesOrder: '4800',
          SoldToParty: '2000999',
          TotalNetAmount: '70.00',
          TransactionCurrency: 'USD',
          OverallSDProcessStatus: 'A',
        },
      ],
    });
    b = await startWebhookBridge(parley, {
      name: 'sap',
      scope: 'tool:sap.salesorders.open',
      path: '/sap/events',
      mapping: (room) => `
bridge: sap
inbound:
  - type: sap.s4.beh.salesorder.v1.SalesOrder.*
    to: { room: ${room} }
    text: "Sales order {{payload.data.SalesOrder}}: {{type}}"
outbound:
  - action: openOrders
    tool: sap.salesorders.open
    reply: "{{result.count}} open orders for {{result.customer}}, {{result.totalNetAmount}} {{result.currency}}"
`,
      attach: (r) =>
        attachSap(r.bridge, r.app, {
          jwksUrl: sap.jwksUrl,
          issuer: sap.issuer,
          audience: 'parley-sap-bridge',
          odata: { baseUrl: sap.baseUrl, tokenUrl: sap.tokenUrl, ...sap.odataClient },
        }),
    });
    ({ alice, bridgeId, room, running, url } = b);
  });
  after(async () => {
    await b?.close();
    await sap?.stop();
    await parley?.destroy();
  });

  const fromSap = () => b.fromSource();

  it('answers the webhook handshake', async () => {
    const res = await sap.handshake(url);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('webhook-allowed-origin'), '*');
    assert.equal(res.headers.get('webhook-allowed-rate'), '*');
    assert.equal((await fetch(url, { method: 'OPTIONS' })).status, 400);
  });

  it('stores S/4HANA events pushed in structured and binary mode once each, with the trace they carry; a redelivery is acknowledged, not stored again', async () => {
    const traceId = '0af7651916cd43dd8448eb211c80319c';
    const changed = s4Event(
      'sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1',
      { SalesOrder: '4711' },
      {
        traceparent: `00-${traceId}-b7ad6b7169203331-01`,
      },
    );
    const created = s4Event('sap.s4.beh.salesorder.v1.SalesOrder.Created.v1', { SalesOrder: '4712' });
    assert.equal(await sap.push(url, [changed]), 200);
    assert.equal(await sap.push(url, [created], { mode: 'binary' }), 200);
    assert.equal(await sap.push(url, [changed]), 200);
    const msgs = await fromSap();
    assert.deepEqual(
      msgs.map((m) => textOf(m.message)),
      [
        'Sales order 4711: sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1',
        'Sales order 4712: sap.s4.beh.salesorder.v1.SalesOrder.Created.v1',
      ],
    );
    assert.equal(msgs[0]?.message.metadata?.['source-id'], `/default/sap.s4.beh/S4HCLNT100|${changed.id}`);
    assert.equal(msgs[0]?.message.trace?.traceparent.split('-')[1], traceId);
    assert.equal(running.bridge.metrics.count('duplicate'), 1);
  });

  it('stores each event of a batched push (application/cloudevents-batch+json)', async () => {
    const before_ = (await fromSap()).length;
    const batch = [
      s4Event('sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1', { SalesOrder: '5001' }),
      s4Event('sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1', { SalesOrder: '5002' }),
    ];
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/cloudevents-batch+json',
        authorization: `Bearer ${await sap.webhookToken()}`,
      },
      body: JSON.stringify(batch.map((e) => e.toJSON())),
    });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { accepted: 2 });
    const texts = (await fromSap()).slice(before_).map((m) => textOf(m.message));
    assert.deepEqual(texts, [
      'Sales order 5001: sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1',
      'Sales order 5002: sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1',
    ]);
  });

  it('refuses pushes without a valid token and malformed events (401/400, counted, never in the room); acknowledges unmapped types', async () => {
    const before_ = (await fromSap()).length;
    const ev = s4Event('sap.s4.beh.salesorder.v1.SalesOrder.Changed.v1', { SalesOrder: '9999' });
    assert.equal(await sap.push(url, [ev], { token: null }), 401);
    // A token of the issuer but for another audience (the OData client's) is not the webhook's.
    const other = await fetch(sap.tokenUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'client_credentials',
        client_id: sap.odataClient.clientId,
        client_secret: sap.odataClient.clientSecret,
      }),
    }).then((r) => r.json() as Promise<{ access_token: string }>);
    assert.equal(await sap.push(url, [ev], { token: other.access_token }), 401);
    const malformed = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/cloudevents+json',
        authorization: `Bearer ${await sap.webhookToken()}`,
      },
      body: JSON.stringify({ specversion: '1.0', id: 'x-1', data: { SalesOrder: '1' } }),
    });
    assert.equal(malformed.status, 400);
    const bp = s4Event('sap.s4.beh.businesspartner.v1.BusinessPartner.Created.v1', {
      BusinessPartner: '1000123',
    });
    assert.equal(await sap.push(url, [bp]), 200);
    assert.equal((await fromSap()).length, before_);
    assert.equal(running.bridge.metrics.count('refused', 'unsigned'), 1);
    assert.equal(running.bridge.metrics.count('refused', 'unauthenticated'), 1);
    assert.equal(running.bridge.metrics.count('refused', 'malformed'), 1);
    assert.equal(running.bridge.metrics.count('ignored'), 1);
    const metrics = await (await fetch(url.replace('/sap/events', '/metrics'))).text();
    assert.match(metrics, /parley_bridge_events_total\{bridge="sap",outcome="refused",reason="unsigned"\} 1/);
    assert.equal((await fetch(url.replace('/sap/events', '/healthz'))).status, 200);
  });

  it('reads open sales orders from the OData API as a tool call for the asker', async () => {
    const token = (await alice.agent.tokens.issue(bridgeId, ['tool:sap.salesorders.open'])).token;
    const ask = await alice.agent.rooms.room(room).send(
      [
        { type: 'text', text: 'open orders of 1000123?' },
        {
          type: 'data',
          mediaType: ACTION_MEDIA_TYPE,
          data: { agent: bridgeId, action: 'openOrders', args: { customer: '1000123' } },
        },
      ],
      { delegation: token, mentions: [bridgeId] },
    );
    const answer = async () =>
      (await messagesOf(alice.agent, room)).find((m) => m.message.replyTo === ask.id);
    await waitFor(async () => (await answer()) !== undefined, 'the SAP bridge’s answer');
    assert.equal(textOf((await answer())?.message), '2 open orders for 1000123, 1500.00 EUR');
    assert.equal(sap.odataRequests.length, 1);
    assert.match(
      decodeURIComponent(sap.odataRequests[0] ?? ''),
      /\$filter=SoldToParty eq '1000123' and OverallSDProcessStatus ne 'C'/,
    );
  });
});
