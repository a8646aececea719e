import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { defineApi, encodeJson, isParleyError, newId, ParleyError, request } from '@parley/contracts';
import {
  bind,
  createHealthServer,
  createMetrics,
  createMicroService,
  INBOX_BACKLOG_BOUNDS,
  type MicroService,
  metricNames,
  type ParleyMetrics,
  serveApis,
  silentLogger,
} from '@parley/kit';
import {
  type PromFamily,
  parsePrometheusText,
  sampleValue,
  startServer,
  type TestServer,
} from '@parley/test/harness';
import * as z from 'zod';

const greet = defineApi({
  service: 'greeter',
  method: 'greet',
  summary: 'greets, or refuses a name it does not like',
  access: 'participant',
  request: z.object({ name: z.string().max(20) }),
  response: z.object({ text: z.string() }),
});

describe('metrics', () => {
  let server: TestServer;
  let nc: NatsConnection;
  let micro: MicroService;
  let metrics: ParleyMetrics;
  let app: ReturnType<typeof createHealthServer>;
  const caller = newId('agent');

  before(async () => {
    server = await startServer();
    nc = await server.connect({ inboxPrefix: `_INBOX.${caller}` });
    metrics = createMetrics();
    micro = createMicroService(nc, { name: 'parley-greeter', version: '1' });
    serveApis(
      micro,
      [
        bind(greet, async (req) => {
          if (req.name === 'mallory') throw new ParleyError('PERMISSION_DENIED', 'not you');
          return { text: `hello ${req.name}` };
        }),
      ],
      { service: 'greeter', standing: 'unchecked', queue: 'greeter', log: silentLogger(), metrics },
    );
    app = createHealthServer({ log: silentLogger(), checks: { ok: () => true }, metrics });
  });
  after(async () => {
    await app?.close();
    await micro?.stop();
    await nc?.close();
    await server?.stop();
  });

  const scrape = async () => {
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    assert.equal(res.statusCode, 200);
    assert.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4/);
    return parsePrometheusText(res.body);
  };

  it('serves /metrics as Prometheus text with every Parley metric and the process metrics', async () => {
    const families = await scrape();
    for (const name of Object.values(metricNames)) {
      const family = name.replace(/_total$/, '');
      assert.ok(families.has(family) || families.has(name), `${name} is exported`);
    }
    assert.equal(families.get('parley_api_request_duration_seconds')?.type, 'histogram');
    assert.equal(
      families.get('parley_api_requests')?.type ?? families.get('parley_api_requests_total')?.type,
      'counter',
    );
    assert.ok(families.has('process_cpu_user_seconds_total') || families.has('process_cpu_user_seconds'));
  });

  it('counts API requests by endpoint and code, and times them by outcome', async () => {
    const before = await scrape();
    const ok = (m: Map<string, PromFamily>) =>
      sampleValue(m, 'parley_api_requests_total', { endpoint: 'greeter.greet', code: 'OK' });
    const denied = (m: Map<string, PromFamily>) =>
      sampleValue(m, 'parley_api_requests_total', {
        endpoint: 'greeter.greet',
        code: 'PERMISSION_DENIED',
      });
    await request(nc, caller, greet, { name: 'ada' });
    await request(nc, caller, greet, { name: 'bob' });
    await assert.rejects(request(nc, caller, greet, { name: 'mallory' }), (e) =>
      isParleyError(e, 'PERMISSION_DENIED'),
    );
    // Bad input and unknown methods are counted too, under bounded labels.
    await nc.request(greet.subject(caller), encodeJson({ name: 7 }), { timeout: 2000 });
    await nc.request(`parley.in.${caller}.api.greeter.${'x'.repeat(30)}`, encodeJson({}), { timeout: 2000 });
    const afterwards = await scrape();
    assert.equal(ok(afterwards) - ok(before), 2);
    assert.equal(denied(afterwards) - denied(before), 1);
    assert.equal(
      sampleValue(afterwards, 'parley_api_requests_total', {
        endpoint: 'greeter.greet',
        code: 'INVALID_ARGUMENT',
      }),
      1,
    );
    assert.equal(
      sampleValue(afterwards, 'parley_api_requests_total', {
        endpoint: 'greeter.unknown',
        code: 'NOT_FOUND',
      }),
      1,
    );
    assert.equal(
      sampleValue(afterwards, 'parley_api_request_duration_seconds_count', {
        endpoint: 'greeter.greet',
        outcome: 'ok',
      }),
      2,
    );
    assert.equal(
      sampleValue(afterwards, 'parley_api_request_duration_seconds_count', {
        endpoint: 'greeter.greet',
        outcome: 'error',
      }),
      2,
    );
    assert.ok(
      sampleValue(afterwards, 'parley_api_request_duration_seconds_sum', { endpoint: 'greeter.greet' }) > 0,
    );
    // The caller never becomes a label.
    assert.doesNotMatch((await app.inject({ method: 'GET', url: '/metrics' })).body, new RegExp(caller));
  });

  it('exports the message-path metrics with bounded labels', async () => {
    const m = createMetrics({ processMetrics: false, topBacklogs: 3 });
    m.recordMessage('accepted');
    m.recordMessage('refused', 'NOT_A_MEMBER');
    m.recordMessage('fanned_out', 'OK', 3);
    // Not an error code: folded into INTERNAL instead of becoming a new series.
    m.recordMessage('failed', 'disk on fire' as never);
    m.recordMessage('failed', 'constructor' as never);
    m.recordDenial('NO_CONSENT');
    m.recordDenial('NO_CONSENT');
    m.observeDelivery(0.004);
    m.setFanoutLag(3, { messages: 12, seconds: 0.5 });
    m.setFanoutLag(99_999, { messages: 1 });
    const backlogs = Array.from({ length: 50 }, (_, i) => [`agt_${i}`, i * 50] as const);
    m.recordInboxBacklog(backlogs);
    const f = parsePrometheusText(await m.render());
    assert.equal(sampleValue(f, 'parley_messages_total', { outcome: 'accepted', code: 'OK' }), 1);
    assert.equal(sampleValue(f, 'parley_messages_total', { outcome: 'refused', code: 'NOT_A_MEMBER' }), 1);
    assert.equal(sampleValue(f, 'parley_messages_total', { outcome: 'fanned_out' }), 3);
    assert.equal(sampleValue(f, 'parley_messages_total', { outcome: 'failed', code: 'INTERNAL' }), 2);
    assert.equal(sampleValue(f, 'parley_policy_denials_total', { reason: 'NO_CONSENT' }), 2);
    assert.equal(sampleValue(f, 'parley_message_delivery_seconds_count'), 1);
    assert.equal(sampleValue(f, 'parley_message_delivery_seconds_bucket', { le: '0.005' }), 1);
    assert.equal(sampleValue(f, 'parley_fanout_lag_messages', { partition: '3' }), 12);
    assert.equal(sampleValue(f, 'parley_fanout_lag_seconds', { partition: '3' }), 0.5);
    assert.equal(
      f.get('parley_fanout_lag_messages')?.samples.length,
      1,
      'an impossible partition is ignored',
    );
    // Top 3 by backlog only, whatever the number of participants.
    const top = f.get('parley_inbox_backlog_messages')?.samples ?? [];
    assert.deepEqual(top.map((s) => [s.labels.participant, s.value]).sort(), [
      ['agt_47', 2350],
      ['agt_48', 2400],
      ['agt_49', 2450],
    ]);
    // The distribution over all participants, like a histogram snapshot.
    assert.equal(sampleValue(f, 'parley_inbox_backlog_participants', { le: '0' }), 1);
    assert.equal(sampleValue(f, 'parley_inbox_backlog_participants', { le: '100' }), 3);
    assert.equal(sampleValue(f, 'parley_inbox_backlog_participants', { le: '1000' }), 21);
    assert.equal(sampleValue(f, 'parley_inbox_backlog_participants', { le: '+Inf' }), 50);
    assert.equal(f.get('parley_inbox_backlog_participants')?.samples.length, INBOX_BACKLOG_BOUNDS.length + 1);
    assert.equal(sampleValue(f, 'parley_inbox_backlog_total_messages'), (49 * 50 * 50) / 2);
    // A new picture replaces the old one: participants that drained drop out of the top N.
    m.recordInboxBacklog([['agt_1', 5]]);
    const g = parsePrometheusText(await m.render());
    assert.deepEqual(
      g.get('parley_inbox_backlog_messages')?.samples.map((s) => s.labels.participant),
      ['agt_1'],
    );
  });

  it('rejects text that is not Prometheus exposition format (the parser is strict)', () => {
    assert.throws(() => parsePrometheusText('# TYPE x counter\nx{a="1" 3\n'), /line 2/);
    assert.throws(() => parsePrometheusText('y 1\n'), /no declared family/);
    assert.throws(() => parsePrometheusText('# TYPE h histogram\nh_bucket 1\n'), /without le/);
    assert.throws(() => parsePrometheusText('# TYPE x counter\nx abc\n'), /bad value/);
  });
});
