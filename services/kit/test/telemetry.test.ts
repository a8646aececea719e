import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { type NatsConnection, headers as natsHeaders } from '@nats-io/transport-node';
import * as otel from '@opentelemetry/api';
import {
  defineApi,
  headerNames,
  isParleyError,
  newId,
  ParleyError,
  request,
  serviceId,
  type Tracer,
} from '@parley/contracts';
import {
  bind,
  createLogger,
  createMicroService,
  loadTelemetryConfig,
  serveApis,
  silentLogger,
  startTelemetry,
  type Telemetry,
} from '@parley/kit';
import {
  freePort,
  type ReceivedSpan,
  startOtlpReceiver,
  startServer,
  type TestServer,
} from '@parley/test/harness';
import * as z from 'zod';

const relay = defineApi({
  service: 'alpha',
  method: 'relay',
  summary: 'asks beta to echo',
  access: 'participant',
  request: z.object({ text: z.string(), fail: z.enum(['no', 'refuse', 'crash']).default('no') }),
  response: z.object({ text: z.string(), traceparent: z.string().optional() }),
});
const echo = defineApi({
  service: 'beta',
  method: 'echo',
  summary: 'echoes, reporting the traceparent it received',
  access: 'participant',
  request: z.object({ text: z.string(), fail: z.enum(['no', 'refuse', 'crash']).default('no') }),
  response: z.object({ text: z.string(), traceparent: z.string().optional() }),
});

/** Log lines as objects. */
function logSink() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l));
      done();
    },
  });
  return { lines, log: createLogger({ name: 'test', destination: stream, level: 'info' }) };
}

/** Service alpha (whose handler calls beta) and beta, each with its own connection and tracer. */
async function startChain(server: TestServer, telemetry: Telemetry) {
  const sink = logSink();
  const ncA = await server.connect({ inboxPrefix: '_INBOX.svc_alpha' });
  const ncB = await server.connect();
  const microA = createMicroService(ncA, { name: 'parley-alpha', version: '1' });
  const microB = createMicroService(ncB, { name: 'parley-beta', version: '1' });
  const tracerA: Tracer = telemetry.tracer('alpha');
  serveApis(
    microB,
    [
      bind(echo, async (req, ctx) => {
        if (req.fail === 'refuse')
          throw new ParleyError('NO_CONSENT', 'beta and the caller are not contacts');
        if (req.fail === 'crash') throw new Error('disk on fire');
        const traceparent = ctx.headers?.get(headerNames.traceparent);
        return { text: req.text.toUpperCase(), ...(traceparent ? { traceparent } : {}) };
      }),
    ],
    {
      service: 'beta',
      standing: 'unchecked',
      queue: 'beta',
      log: silentLogger(),
      tracer: telemetry.tracer('beta'),
    },
  );
  serveApis(
    microA,
    [
      bind(relay, async (req, ctx) => {
        ctx.log.info({ text: req.text }, 'relaying to beta');
        return request(ncA, serviceId('alpha'), echo, req, { tracer: tracerA });
      }),
    ],
    { service: 'alpha', standing: 'unchecked', queue: 'alpha', log: sink.log, tracer: tracerA },
  );
  // The subscriptions are live once the server has processed them.
  await ncA.flush();
  await ncB.flush();
  return {
    lines: sink.lines,
    async stop() {
      await microA.stop();
      await microB.stop();
      await ncA.close();
      await ncB.close();
    },
  };
}

const one = (spans: ReceivedSpan[], name: string) => {
  const found = spans.filter((s) => s.name === name);
  assert.equal(found.length, 1, `exactly one span ${name}, got ${found.length}`);
  return found[0] as ReceivedSpan;
};

describe('tracing across services', () => {
  let server: TestServer;
  let client: NatsConnection;
  const caller = newId('agent');

  before(async () => {
    server = await startServer();
    client = await server.connect({ inboxPrefix: `_INBOX.${caller}` });
  });
  after(async () => {
    await client?.close();
    await server?.stop();
  });

  async function withTelemetry<T>(
    config: Record<string, string>,
    fn: (t: Telemetry, chain: Awaited<ReturnType<typeof startChain>>) => Promise<T>,
    extra: {
      shutdownTimeoutMs?: number;
      exportTimeoutMs?: number;
      batch?: { scheduledDelayMillis: number };
      traceIdsWithoutExport?: boolean;
    } = {},
  ): Promise<T> {
    const telemetry = await startTelemetry({
      config: loadTelemetryConfig(config),
      serviceName: 'parley-test',
      log: silentLogger(),
      batch: extra.batch ?? { scheduledDelayMillis: 20 },
      ...(extra.shutdownTimeoutMs ? { shutdownTimeoutMs: extra.shutdownTimeoutMs } : {}),
      ...(extra.exportTimeoutMs ? { exportTimeoutMs: extra.exportTimeoutMs } : {}),
      ...(extra.traceIdsWithoutExport ? { traceIdsWithoutExport: true } : {}),
    });
    const chain = await startChain(server, telemetry);
    try {
      return await fn(telemetry, chain);
    } finally {
      await chain.stop();
      await telemetry.shutdown();
    }
  }

  for (const protocol of ['http/json', 'http/protobuf'] as const) {
    it(`exports a request chain across two services as one trace over ${protocol}`, async () => {
      const receiver = await startOtlpReceiver();
      try {
        await withTelemetry(
          { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_EXPORTER_OTLP_PROTOCOL: protocol },
          async (telemetry) => {
            assert.equal(telemetry.mode, 'export');
            const res = await request(client, caller, relay, { text: 'hi' });
            assert.equal(res.text, 'HI');
            await telemetry.forceFlush();
            const spans = await receiver.waitForSpans((s) => s.length >= 4, {
              what: 'the 4 spans of the chain',
            });

            const c = one(spans, 'request alpha.relay');
            const a = one(spans, 'process alpha.relay');
            const ac = one(spans, 'request beta.echo');
            const b = one(spans, 'process beta.echo');
            // One trace, and exactly this chain: client → alpha server → alpha's client → beta server.
            assert.equal(new Set(spans.map((s) => s.traceId)).size, 1);
            assert.match(c.traceId, /^[0-9a-f]{32}$/);
            assert.equal(c.parentSpanId, undefined);
            assert.equal(a.parentSpanId, c.spanId);
            assert.equal(ac.parentSpanId, a.spanId);
            assert.equal(b.parentSpanId, ac.spanId);
            // The traceparent beta received names alpha's client span.
            assert.equal(res.traceparent, `00-${c.traceId}-${ac.spanId}-01`);
            // Each side under its own service.name.
            assert.deepEqual(
              [c, a, ac, b].map((s) => s.service),
              ['parley-test', 'parley-alpha', 'parley-alpha', 'parley-beta'],
            );
            assert.deepEqual(
              [c, a, ac, b].map((s) => s.kind),
              ['client', 'server', 'client', 'server'],
            );
            // Messaging conventions and Parley attributes.
            assert.deepEqual(
              {
                system: c.attributes['messaging.system'],
                destination: c.attributes['messaging.destination.name'],
                template: c.attributes['messaging.destination.template'],
                op: c.attributes['messaging.operation.type'],
                method: c.attributes['parley.api.method'],
                caller: c.attributes['parley.caller'],
              },
              {
                system: 'nats',
                destination: relay.subject(caller),
                template: relay.listen,
                op: 'send',
                method: 'alpha.relay',
                caller,
              },
            );
            assert.equal(c.attributes['messaging.message.body.size'], JSON.stringify({ text: 'hi' }).length);
            assert.equal(a.attributes['messaging.operation.type'], 'process');
            assert.equal(a.attributes['messaging.consumer.group.name'], 'alpha');
            assert.equal(a.attributes['parley.caller'], caller);
            assert.equal(b.attributes['parley.caller'], 'svc_alpha');
            assert.equal(b.attributes['parley.api.method'], 'beta.echo');
            for (const s of spans) {
              assert.equal(s.status.code, 'unset');
              assert.equal(s.format, protocol === 'http/json' ? 'json' : 'protobuf');
            }
            assert.ok(
              receiver.requests.every((r) =>
                r.contentType.startsWith(
                  protocol === 'http/json' ? 'application/json' : 'application/x-protobuf',
                ),
              ),
            );
          },
        );
      } finally {
        await receiver.close();
      }
    });
  }

  it('marks a refusal and a crash with ERROR status and parley.error.code on every span of the chain', async () => {
    const receiver = await startOtlpReceiver();
    try {
      await withTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url }, async (telemetry) => {
        await assert.rejects(request(client, caller, relay, { text: 'x', fail: 'refuse' }), (e) =>
          isParleyError(e, 'NO_CONSENT'),
        );
        await telemetry.forceFlush();
        const spans = await receiver.waitForSpans((s) => s.length >= 4);
        for (const s of spans) {
          assert.equal(s.status.code, 'error', s.name);
          assert.equal(s.attributes['parley.error.code'], 'NO_CONSENT', s.name);
          assert.equal(s.attributes['error.type'], 'NO_CONSENT', s.name);
        }
        assert.match(
          one(spans, 'process beta.echo').status.message ?? '',
          /^NO_CONSENT: beta and the caller/,
        );

        receiver.clear();
        await assert.rejects(request(client, caller, relay, { text: 'x', fail: 'crash' }), (e) =>
          isParleyError(e, 'INTERNAL'),
        );
        await telemetry.forceFlush();
        const crashed = await receiver.waitForSpans((s) => s.length >= 4);
        const b = one(crashed, 'process beta.echo');
        assert.equal(b.attributes['parley.error.code'], 'INTERNAL');
        assert.equal(b.status.code, 'error');
        // The client side never sees the internal message, in the reply or in its span.
        const c = one(crashed, 'request alpha.relay');
        assert.equal(c.attributes['parley.error.code'], 'INTERNAL');
        assert.doesNotMatch(c.status.message ?? '', /disk on fire/);
      });
    } finally {
      await receiver.close();
    }
  });

  it('writes trace_id and span_id of the active span into log lines', async () => {
    const receiver = await startOtlpReceiver();
    try {
      await withTelemetry({ OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url }, async (telemetry, chain) => {
        await request(client, caller, relay, { text: 'logged' });
        await telemetry.forceFlush();
        const spans = await receiver.waitForSpans((s) => s.length >= 4);
        const a = one(spans, 'process alpha.relay');
        const line = chain.lines.find((l) => l.msg === 'relaying to beta');
        assert.ok(line, 'the handler logged');
        assert.equal(line.trace_id, a.traceId);
        assert.equal(line.span_id, a.spanId);
      });
    } finally {
      await receiver.close();
    }
    // Outside a span there is nothing to add.
    const sink = logSink();
    sink.log.info('no trace here');
    assert.equal(sink.lines[0]?.trace_id, undefined);
  });

  it('with no endpoint exports nothing and only propagates: replies and trace ids pass through unchanged', async () => {
    const receiver = await startOtlpReceiver();
    try {
      const configs: Record<string, string>[] = [
        {},
        { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_TRACES_EXPORTER: 'none' },
      ];
      for (const config of configs) {
        await withTelemetry(config, async (telemetry, chain) => {
          assert.equal(telemetry.mode, 'propagate');
          assert.equal(telemetry.exportTo, undefined);
          // No trace upstream: no trace headers are invented.
          const plain = await request(client, caller, relay, { text: 'plain' });
          assert.deepEqual(plain, { text: 'PLAIN' });
          // A trace started upstream crosses both services unchanged, and the log shows it.
          const traceId = 'a'.repeat(32);
          const incoming = `00-${traceId}-${'b'.repeat(16)}-01`;
          const h = natsHeaders();
          h.set(headerNames.traceparent, incoming);
          const traced = await request(client, caller, relay, { text: 'traced' }, { headers: h });
          assert.deepEqual(traced, { text: 'TRACED', traceparent: incoming });
          assert.equal(
            chain.lines.find((l) => l.msg === 'relaying to beta' && l.trace_id)?.trace_id,
            traceId,
          );
          await telemetry.forceFlush();
        });
      }
      assert.equal(receiver.requests.length, 0);
    } finally {
      await receiver.close();
    }
  });

  it('with traceIdsWithoutExport and no endpoint starts traces, ids only: nothing recorded, upstream ones kept', async () => {
    await withTelemetry(
      {},
      async (telemetry) => {
        assert.equal(telemetry.mode, 'propagate');
        // No trace upstream: one is started, sampled out (flags 00), and reaches the next hop.
        const plain = await request(client, caller, relay, { text: 'plain' });
        assert.match(plain.traceparent ?? '', /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
        assert.notEqual(plain.traceparent?.split('-')[1], '0'.repeat(32));
        const again = await request(client, caller, relay, { text: 'again' });
        assert.notEqual(again.traceparent?.split('-')[1], plain.traceparent?.split('-')[1]);
        // A trace started upstream (the caller's context) keeps its id and its sampled flag.
        const traceId = 'e'.repeat(32);
        const upstream = otel.trace.setSpanContext(otel.context.active(), {
          traceId,
          spanId: 'f'.repeat(16),
          traceFlags: otel.TraceFlags.SAMPLED,
          isRemote: true,
        });
        const traced = await otel.context.with(upstream, () =>
          request(client, caller, relay, { text: 'traced' }),
        );
        assert.match(traced.traceparent ?? '', new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
      },
      { traceIdsWithoutExport: true },
    );
  });

  it('with OTEL_SDK_DISABLED does nothing at all: not even propagation', async () => {
    await withTelemetry({ OTEL_SDK_DISABLED: 'true' }, async (telemetry) => {
      assert.equal(telemetry.mode, 'disabled');
      const h = natsHeaders();
      h.set(headerNames.traceparent, `00-${'c'.repeat(32)}-${'d'.repeat(16)}-01`);
      const res = await request(client, caller, relay, { text: 'off' }, { headers: h });
      assert.deepEqual(res, { text: 'OFF' });
    });
  });

  it('keeps answering while the collector is dead or stuck, and shuts down within its bound', async (t) => {
    // Nothing listens on the port: every export fails.
    const deadPort = await freePort();
    // A collector that accepts exports and never answers them.
    const stuck = await startOtlpReceiver({ behaviour: 'hang' });
    try {
      for (const endpoint of [`http://127.0.0.1:${deadPort}`, stuck.url]) {
        await withTelemetry(
          { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint },
          async () => {
            const first = await request(client, caller, relay, { text: 'warm' });
            assert.equal(first.text, 'WARM');
            if (endpoint === stuck.url) {
              // An export is now held open by the collector…
              const deadline = Date.now() + 10_000;
              while (stuck.pending() === 0 && Date.now() < deadline)
                await new Promise((r) => setTimeout(r, 10));
              assert.ok(stuck.pending() > 0, 'an export is held open');
            }
            // …and requests keep being answered, none waiting for it.
            const started = performance.now();
            const results = await Promise.all(
              Array.from({ length: 50 }, (_, i) => request(client, caller, relay, { text: `m${i}` })),
            );
            const ms = performance.now() - started;
            assert.deepEqual(
              results.map((r) => r.text),
              Array.from({ length: 50 }, (_, i) => `M${i}`),
            );
            if (endpoint === stuck.url) assert.ok(stuck.pending() > 0, 'the export is still held open');
            t.diagnostic(
              `${endpoint === stuck.url ? 'stuck' : 'dead'} collector: 50 chained requests in ${ms.toFixed(0)} ms`,
            );
          },
          { shutdownTimeoutMs: 300, exportTimeoutMs: 1000, batch: { scheduledDelayMillis: 5 } },
        );
      }
      // withTelemetry awaited shutdown() with an export still hanging: bounded, not stuck.
    } finally {
      await stuck.close();
    }
  });
});
