import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import {
  activeTraceIds,
  contextFromTraceFields,
  extractContext,
  headerNames,
  injectContext,
  otelApi,
  runInSpan,
  startMessagingSpan,
  startToolSpan,
  traceAttributes,
  traceFieldsOf,
} from '@parley/contracts';
import { loadTelemetryConfig, silentLogger, startTelemetry } from '@parley/kit';
import { startOtlpReceiver, startServer, type TestServer } from '@parley/test/harness';

const api = otelApi as NonNullable<typeof otelApi>;
const TRACE = '0af7651916cd43dd8448eb211c80319c';
const SPAN = 'b7ad6b7169203331';
const PARENT = `00-${TRACE}-${SPAN}-01`;

/** A context whose active span is the remote parent above. */
const remoteParent = () =>
  api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: TRACE,
    spanId: SPAN,
    traceFlags: 1,
    isRemote: true,
  });

describe('trace context in NATS headers', () => {
  it('is a silent no-op while nothing is registered: no headers are created, none are read', () => {
    assert.ok(api, '@opentelemetry/api is installed in the workspace');
    assert.equal(injectContext(undefined, remoteParent()), undefined);
    const h = natsHeaders();
    h.set('x', '1');
    assert.equal(injectContext(h, remoteParent()), h);
    assert.deepEqual(h.keys(), ['x']);
    h.set(headerNames.traceparent, PARENT);
    assert.equal(api.trace.getSpanContext(extractContext(h, api.ROOT_CONTEXT)), undefined);
    assert.equal(traceFieldsOf(remoteParent()), undefined);
    // A span from the no-op tracer records nothing and costs nothing.
    const span = startMessagingSpan(api.trace.getTracer('t'), { operation: 'send', destination: 'a.b' });
    assert.equal(span?.isRecording(), false);
  });

  describe('with the W3C propagators registered (telemetry without an exporter)', () => {
    let stop: () => Promise<void>;
    before(async () => {
      const t = await startTelemetry({
        config: loadTelemetryConfig({}),
        serviceName: 'test',
        log: silentLogger(),
      });
      assert.equal(t.mode, 'propagate');
      stop = () => t.shutdown();
    });
    after(() => stop());

    it('writes traceparent, tracestate and baggage, creating the headers only when needed', () => {
      assert.equal(injectContext(undefined, api.ROOT_CONTEXT), undefined, 'nothing to propagate');
      let ctx = remoteParent();
      ctx = api.trace.setSpanContext(ctx, {
        ...(api.trace.getSpanContext(ctx) as NonNullable<ReturnType<typeof api.trace.getSpanContext>>),
        traceState: api.createTraceState('parley=r1'),
      });
      ctx = api.propagation.setBaggage(
        ctx,
        api.propagation.createBaggage({ 'parley.org': { value: 'org_1' } }),
      );
      const h = injectContext(undefined, ctx);
      assert.ok(h);
      assert.equal(h.get(headerNames.traceparent), PARENT);
      assert.equal(h.get(headerNames.tracestate), 'parley=r1');
      assert.equal(h.get(headerNames.baggage), 'parley.org=org_1');
      // Into existing headers, next to what is there.
      const existing = natsHeaders();
      existing.set(headerNames.msgId, 'A:1');
      assert.equal(injectContext(existing, ctx), existing);
      assert.equal(existing.get(headerNames.msgId), 'A:1');
      assert.equal(existing.get(headerNames.traceparent), PARENT);

      const back = extractContext(h, api.ROOT_CONTEXT);
      const sc = api.trace.getSpanContext(back);
      assert.deepEqual([sc?.traceId, sc?.spanId, sc?.isRemote], [TRACE, SPAN, true]);
      assert.equal(sc?.traceState?.get('parley'), 'r1');
      assert.equal(api.propagation.getBaggage(back)?.getEntry('parley.org')?.value, 'org_1');
    });

    it('reads headers whose case a bridge changed, and ignores a malformed traceparent', () => {
      const h = natsHeaders();
      h.set('TraceParent', PARENT);
      assert.equal(api.trace.getSpanContext(extractContext(h, api.ROOT_CONTEXT))?.traceId, TRACE);
      const bad = natsHeaders();
      bad.set(headerNames.traceparent, '00-zz-yy-01');
      const ctx = extractContext(bad, api.ROOT_CONTEXT);
      assert.equal(api.trace.getSpanContext(ctx), undefined);
      assert.equal(extractContext(undefined, api.ROOT_CONTEXT), api.ROOT_CONTEXT);
    });

    it('round-trips through the trace fields of a message body, and names the active ids', () => {
      const fields = traceFieldsOf(remoteParent());
      assert.deepEqual(fields, { traceparent: PARENT });
      const ctx = contextFromTraceFields(fields, api.ROOT_CONTEXT);
      assert.equal(api.trace.getSpanContext(ctx)?.spanId, SPAN);
      assert.deepEqual(activeTraceIds(ctx), { traceId: TRACE, spanId: SPAN });
      assert.equal(activeTraceIds(api.ROOT_CONTEXT), undefined);
      api.context.with(ctx, () => assert.equal(activeTraceIds()?.traceId, TRACE));
    });
  });
});

describe('messaging spans around a JetStream publish and consume', () => {
  let server: TestServer;
  let nc: NatsConnection;
  before(async () => {
    server = await startServer();
    nc = await server.connect();
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  it('chain producer → consumer (process) → execute_tool in one trace', async () => {
    const receiver = await startOtlpReceiver();
    const telemetry = await startTelemetry({
      config: loadTelemetryConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url }),
      serviceName: 'parley-test',
      log: silentLogger(),
      batch: { scheduledDelayMillis: 20 },
    });
    try {
      const tracer = telemetry.tracer('rooms');
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: 'T', subjects: ['t.>'] });
      await jsm.consumers.add('T', { durable_name: 'c', ack_policy: AckPolicy.Explicit });
      const js = jetstream(nc);

      // Producer: the span is the parent of what the consumer does; its context rides the headers.
      const data = new TextEncoder().encode('{"text":"hello"}');
      const producer = startMessagingSpan(tracer, {
        operation: 'send',
        operationName: 'publish',
        destination: 't.room1',
        target: 'room',
        bodySize: data.length,
        attributes: { [traceAttributes.roomId]: 'room1' },
      });
      await runInSpan(producer, async () => {
        const h = natsHeaders();
        h.set(headerNames.msgId, 'A:1');
        await js.publish('t.room1', data, { headers: injectContext(h) });
      });

      // Consumer: the parent comes from the message; the handler (and its tool call) run inside.
      const consumer = await js.consumers.get('T', 'c');
      const msg = await consumer.next({ expires: 5000 });
      assert.ok(msg);
      const parent = extractContext(msg.headers, api.ROOT_CONTEXT);
      const process = startMessagingSpan(tracer, {
        operation: 'process',
        destination: msg.subject,
        target: 'inbox',
        parent,
        bodySize: msg.data.length,
        attributes: { [traceAttributes.deliveryCount]: msg.info.deliveryCount },
      });
      await runInSpan(
        process,
        async () => {
          const tool = startToolSpan(tracer, 'lookup_payroll', { [traceAttributes.toolCallId]: 'call_1' });
          await runInSpan(tool, async () => undefined);
          msg.ack();
        },
        parent,
      );
      await telemetry.forceFlush();
      const spans = await receiver.waitForSpans((s) => s.length >= 3);
      const p = spans.find((s) => s.name === 'publish room');
      const c = spans.find((s) => s.name === 'process inbox');
      const t = spans.find((s) => s.name === 'execute_tool lookup_payroll');
      assert.ok(p && c && t, spans.map((s) => s.name).join(', '));
      assert.equal(new Set([p.traceId, c.traceId, t.traceId]).size, 1);
      assert.equal(c.parentSpanId, p.spanId);
      assert.equal(t.parentSpanId, c.spanId);
      assert.deepEqual([p.kind, c.kind, t.kind], ['producer', 'consumer', 'internal']);
      assert.equal(p.attributes['messaging.operation.type'], 'send');
      assert.equal(p.attributes['messaging.operation.name'], 'publish');
      assert.equal(p.attributes['parley.room.id'], 'room1');
      assert.equal(c.attributes['messaging.operation.type'], 'process');
      assert.equal(c.attributes['messaging.nats.delivery_count'], 1);
      assert.equal(t.attributes['gen_ai.tool.name'], 'lookup_payroll');
      assert.equal(t.attributes['gen_ai.operation.name'], 'execute_tool');
      assert.equal(p.service, 'parley-rooms');
    } finally {
      await telemetry.shutdown();
      await receiver.close();
    }
  });
});
