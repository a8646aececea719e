import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  ConfigError,
  commonEnv,
  loadEnv,
  loadTelemetryConfig,
  parseResourceAttributes,
  traceExportTarget,
} from '@parley/kit';
import * as z from 'zod';

const Env = z.object({ ...commonEnv, EXTRA: z.coerce.number().int().min(1).describe('x') });

describe('loadEnv', () => {
  it('treats empty strings as unset and fills defaults', () => {
    const c = loadEnv('t', Env, { NATS_URL: '', EXTRA: '3', LOG_LEVEL: '' });
    assert.equal(c.NATS_URL, 'nats://127.0.0.1:4222');
    assert.equal(c.LOG_LEVEL, 'info');
    assert.equal(c.EXTRA, 3);
    assert.ok(Object.isFrozen(c));
  });

  it('lists every problem at once', () => {
    try {
      loadEnv('t', Env, { HTTP_PORT: '99999', LOG_LEVEL: 'loud' });
      assert.fail('accepted');
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      assert.deepEqual(
        err.problems.map((p) => p.split(':')[0]),
        ['LOG_LEVEL', 'HTTP_PORT', 'EXTRA'],
      );
      assert.match(err.message, /invalid configuration for t/);
    }
  });
});

describe('the OTEL_* settings', () => {
  it('default to: no export, parent-based sampling, http/protobuf', () => {
    const c = loadTelemetryConfig({});
    assert.equal(c.OTEL_SDK_DISABLED, false);
    assert.equal(c.OTEL_TRACES_SAMPLER, 'parentbased_always_on');
    assert.equal(c.OTEL_EXPORTER_OTLP_PROTOCOL, 'http/protobuf');
    assert.equal(traceExportTarget(c), undefined);
  });

  it('find the traces URL the way the specification says', () => {
    const t = (env: Record<string, string>) => traceExportTarget(loadTelemetryConfig(env));
    assert.deepEqual(t({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318/' }), {
      protocol: 'http/protobuf',
      url: 'http://jaeger:4318/v1/traces',
    });
    assert.deepEqual(
      t({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://other:9999/custom',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      }),
      { protocol: 'http/json', url: 'http://other:9999/custom' },
    );
    assert.deepEqual(
      t({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }),
      {
        protocol: 'grpc',
        url: 'http://jaeger:4317',
      },
    );
    assert.equal(
      t({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318', OTEL_TRACES_EXPORTER: 'none' }),
      undefined,
    );
    assert.equal(
      t({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://jaeger:4318', OTEL_SDK_DISABLED: 'true' }),
      undefined,
    );
    assert.equal(t({ OTEL_TRACES_EXPORTER: 'console' })?.protocol, 'console');
  });

  it('refuse values OpenTelemetry would silently ignore, naming each', () => {
    try {
      loadTelemetryConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'jaeger:4318',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'thrift',
        OTEL_TRACES_SAMPLER: 'jaeger_remote',
        OTEL_TRACES_SAMPLER_ARG: '2',
        OTEL_RESOURCE_ATTRIBUTES: 'no-equals-sign',
      });
      assert.fail('accepted');
    } catch (err) {
      assert.ok(err instanceof ConfigError);
      assert.deepEqual(err.problems.map((p) => p.split(':')[0]).sort(), [
        'OTEL_EXPORTER_OTLP_ENDPOINT',
        'OTEL_EXPORTER_OTLP_PROTOCOL',
        'OTEL_RESOURCE_ATTRIBUTES',
        'OTEL_TRACES_SAMPLER',
        'OTEL_TRACES_SAMPLER_ARG',
      ]);
    }
  });

  it('read OTEL_RESOURCE_ATTRIBUTES with percent-encoded values', () => {
    assert.deepEqual(parseResourceAttributes('deployment.environment.name=prod,team=a%20b'), {
      'deployment.environment.name': 'prod',
      team: 'a b',
    });
    assert.deepEqual(parseResourceAttributes(undefined), {});
  });
});
