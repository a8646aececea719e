import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { encodeJson, governanceApi, headerNames, isParleyError, newId } from '@parley/contracts';
import { loadTelemetryConfig } from '@parley/kit';
import { type Agent, connect } from '@parley/sdk';
import {
  type OtlpReceiver,
  parsePrometheusText,
  sampleValue,
  startOtlpReceiver,
  startParley,
  type TestParley,
} from '@parley/test/harness';

describe('telemetry of the standalone backbone', () => {
  let receiver: OtlpReceiver;
  let parley: TestParley;
  let admin: Agent;

  before(async () => {
    receiver = await startOtlpReceiver();
    parley = await startParley({
      telemetry: loadTelemetryConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      }),
      telemetryBatch: { scheduledDelayMillis: 20 },
    });
    admin = await connect({ servers: parley.natsUrl, creds: parley.home.paths.adminCreds });
  });
  after(async () => {
    await admin?.close();
    await parley?.destroy();
    await receiver?.close();
  });

  it('exports each service under its own service.name, the SDK path under the process’s', async () => {
    assert.equal(parley.telemetry?.mode, 'export');
    const me = await admin.whoami();
    assert.equal(me.id, parley.home.state.admin.id);
    await assert.rejects(admin.call(governanceApi.issueCredentials, { participant: newId('agent') }), (e) =>
      isParleyError(e, 'PERMISSION_DENIED'),
    );
    const unknown = await admin.nc.request(`parley.in.${admin.id}.api.rooms.nope`, encodeJson({}), {
      timeout: 2000,
    });
    assert.equal(unknown.headers?.get(headerNames.error), 'NOT_FOUND');
    await parley.telemetry?.forceFlush();

    const spans = await receiver.waitForSpans(
      (s) =>
        ['process registry.whoami', 'process governance.issueCredentials', 'process rooms.unknown'].every(
          (n) => s.some((x) => x.name === n),
        ) && s.some((x) => x.name === 'request registry.whoami'),
      { what: 'the spans of three services' },
    );
    const client = spans.find((s) => s.name === 'request registry.whoami');
    const whoami = spans.find((s) => s.name === 'process registry.whoami');
    assert.ok(client && whoami);
    assert.equal(client.service, 'parley-standalone');
    assert.equal(whoami.service, 'parley-registry');
    assert.equal(whoami.traceId, client.traceId);
    assert.equal(whoami.parentSpanId, client.spanId);
    assert.equal(whoami.resource['service.namespace'], 'parley');

    const denied = spans.find((s) => s.name === 'process governance.issueCredentials');
    assert.equal(denied?.service, 'parley-governance');
    assert.equal(denied?.status.code, 'error');
    assert.equal(denied?.attributes['parley.error.code'], 'PERMISSION_DENIED');
    const nope = spans.find((s) => s.name === 'process rooms.unknown');
    assert.equal(nope?.service, 'parley-rooms');
    assert.equal(nope?.attributes['parley.error.code'], 'NOT_FOUND');
  });

  it('serves every service’s metrics from one /metrics', async () => {
    const res = await fetch(`${parley.httpUrl}/metrics`);
    assert.equal(res.status, 200);
    const m = parsePrometheusText(await res.text());
    assert.ok(sampleValue(m, 'parley_api_requests_total', { endpoint: 'registry.whoami', code: 'OK' }) >= 1);
    assert.ok(
      sampleValue(m, 'parley_api_requests_total', {
        endpoint: 'governance.issueCredentials',
        code: 'PERMISSION_DENIED',
      }) >= 1,
    );
    assert.ok(
      sampleValue(m, 'parley_api_requests_total', { endpoint: 'rooms.unknown', code: 'NOT_FOUND' }) >= 1,
    );
    assert.ok(m.has('parley_messages_total'));
    assert.ok(m.has('nodejs_eventloop_lag_seconds'));
  });
});
