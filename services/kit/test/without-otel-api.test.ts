import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import { defineApi } from '@parley/contracts';
import { bind, createMicroService, type MicroService, serveApis, silentLogger } from '@parley/kit';
import { startServer, type TestServer } from '@parley/test/harness';
import * as z from 'zod';

const echo = defineApi({
  service: 'echo',
  method: 'say',
  summary: 'echo',
  access: 'participant',
  request: z.object({ text: z.string() }),
  response: z.object({ text: z.string(), traced: z.boolean() }),
});

// A module hook that makes `@opentelemetry/api` impossible to resolve, as for an SDK user who never
// installed the optional peer dependency.
const hideApi = `data:text/javascript,${encodeURIComponent(`
import { register } from 'node:module';
register('data:text/javascript,' + encodeURIComponent(\`
export async function resolve(specifier, context, next) {
  if (specifier === '@opentelemetry/api' || specifier.startsWith('@opentelemetry/api/')) {
    const err = new Error('Cannot find package @opentelemetry/api');
    err.code = 'ERR_MODULE_NOT_FOUND';
    throw err;
  }
  return next(specifier, context);
}\`));
`)}`;

// What the child runs: contracts and a NATS client, no OpenTelemetry anywhere.
const child = `
import { connect, headers } from '@nats-io/transport-node';
import { defineApi, extractContext, injectContext, otelApi, request, runInSpan, startMessagingSpan, traceFieldsOf } from '@parley/contracts';
import * as z from 'zod';
const echo = defineApi({ service: 'echo', method: 'say', summary: 'echo', access: 'participant',
  request: z.object({ text: z.string() }), response: z.object({ text: z.string(), traced: z.boolean() }) });
const nc = await connect({
  servers: process.env.NATS_URL,
  noAsyncTraces: true,
  inboxPrefix: '_INBOX.agt_01M8MX91V0GDQE7RV8ZZM89EQZ',
});
const h = headers();
const out = {
  api: otelApi === undefined,
  reply: await request(nc, 'agt_01M8MX91V0GDQE7RV8ZZM89EQZ', echo, { text: 'hi' }),
  inject: injectContext() === undefined && injectContext(h) === h,
  extract: typeof extractContext(h).getValue === 'function',
  span: startMessagingSpan(undefined, { operation: 'send', destination: 'x' }) === undefined,
  run: await runInSpan(undefined, async () => 7),
  fields: traceFieldsOf() === undefined,
};
await nc.close();
process.stdout.write(JSON.stringify(out));
`;

describe('contracts without @opentelemetry/api installed', () => {
  let server: TestServer;
  let nc: NatsConnection;
  let micro: MicroService;
  before(async () => {
    server = await startServer();
    nc = await server.connect();
    micro = createMicroService(nc, { name: 'parley-echo', version: '1' });
    serveApis(
      micro,
      [
        bind(echo, async (req, ctx) => ({
          text: req.text,
          traced: ctx.headers?.has('traceparent') ?? false,
        })),
      ],
      { service: 'echo', standing: 'unchecked', queue: 'echo', log: silentLogger() },
    );
    await nc.flush();
  });
  after(async () => {
    await micro?.stop();
    await nc?.close();
    await server?.stop();
  });

  it('loads, calls APIs and no-ops every tracing helper, silently', async () => {
    const proc = spawn(
      process.execPath,
      [
        '--conditions=@parley/source',
        '--import',
        'tsx',
        '--import',
        hideApi,
        '--input-type=module',
        '-e',
        child,
      ],
      {
        cwd: new URL('.', import.meta.url).pathname,
        env: { ...process.env, NATS_URL: server.url, NODE_OPTIONS: '' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => {
      stdout += d;
    });
    proc.stderr.on('data', (d) => {
      stderr += d;
    });
    const code = await new Promise<number | null>((resolve) => proc.once('exit', resolve));
    assert.equal(code, 0, stderr);
    assert.equal(stderr, '', 'nothing printed');
    assert.deepEqual(JSON.parse(stdout), {
      api: true,
      reply: { text: 'hi', traced: false },
      inject: true,
      extract: true,
      span: true,
      run: 7,
      fields: true,
    });
  });
});
