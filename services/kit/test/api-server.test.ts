import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  defineApi,
  encodeJson,
  headerNames,
  isParleyError,
  newId,
  ParleyError,
  request,
} from '@parley/contracts';
import { bind, createMicroService, type MicroService, serveApis, silentLogger } from '@parley/kit';
import { startServer, type TestServer } from '@parley/test/harness';
import * as z from 'zod';

const echo = defineApi({
  service: 'echo',
  method: 'say',
  summary: 'echo',
  access: 'participant',
  request: z.object({ text: z.string().max(100), times: z.int().min(1).max(3).default(1) }),
  response: z.object({ text: z.string(), caller: z.string() }),
});
const boom = defineApi({
  service: 'echo',
  method: 'boom',
  summary: 'throws an unexpected error',
  access: 'participant',
  request: z.object({}),
  response: z.object({}),
});
const internalOnly = defineApi({
  service: 'echo',
  method: 'internal',
  summary: 'services only',
  access: 'service',
  request: z.object({}),
  response: z.object({ ok: z.boolean() }),
});

describe('serveApis on a real nats-server', () => {
  let server: TestServer;
  let nc: NatsConnection;
  let svc: NatsConnection;
  let mallory: NatsConnection;
  let micro: MicroService;
  const caller = newId('agent');

  before(async () => {
    server = await startServer();
    // Services answer only to a caller's own reply prefix: each caller connects with its own.
    nc = await server.connect({ inboxPrefix: `_INBOX.${caller}` });
    svc = await server.connect({ inboxPrefix: '_INBOX.svc_rooms' });
    mallory = await server.connect({ inboxPrefix: '_INBOX.mallory' });
    micro = createMicroService(nc, { name: 'parley-echo', version: '1.2.3' });
    serveApis(
      micro,
      [
        bind(echo, async (req, ctx) => ({ text: req.text.repeat(req.times), caller: ctx.caller })),
        bind(boom, async () => {
          throw new Error('secret database password is hunter2');
        }),
        bind(internalOnly, async () => ({ ok: true })),
      ],
      { service: 'echo', standing: 'unchecked', queue: 'echo', log: silentLogger(), maxBytes: 1024 },
    );
  });
  after(async () => {
    await micro?.stop();
    await nc?.close();
    await svc?.close();
    await mallory?.close();
    await server?.stop();
  });

  /** Sends raw bytes and returns the error code of the reply (or undefined). */
  async function rawCode(subject: string, data: Uint8Array, from = nc) {
    const reply = await from.request(subject, data, { timeout: 2000 });
    return {
      code: reply.headers?.get(headerNames.error),
      body: reply.json<{ error: { message: string } }>(),
    };
  }

  it('answers a valid request, with the caller taken from the subject', async () => {
    const res = await request(nc, caller, echo, { text: 'ab', times: 2 });
    assert.deepEqual(res, { text: 'abab', caller });
  });

  it('refuses non-JSON bytes, wrong types, oversized bodies and unknown methods with codes', async () => {
    const subject = echo.subject(caller);
    assert.equal((await rawCode(subject, new TextEncoder().encode('not json'))).code, 'INVALID_ARGUMENT');
    assert.equal((await rawCode(subject, new Uint8Array([0xc3, 0x28]))).code, 'INVALID_ARGUMENT');
    const wrong = await rawCode(subject, encodeJson({ text: 7 }));
    assert.equal(wrong.code, 'INVALID_ARGUMENT');
    assert.match(wrong.body.error.message, /text/);
    assert.equal((await rawCode(subject, encodeJson({ text: 'x', times: 9 }))).code, 'INVALID_ARGUMENT');
    assert.equal((await rawCode(subject, new Uint8Array(4096).fill(0x20))).code, 'PAYLOAD_TOO_LARGE');
    const unknown = await rawCode(`parley.in.${caller}.api.echo.nope`, encodeJson({}));
    assert.equal(unknown.code, 'NOT_FOUND');
    assert.match(unknown.body.error.message, /no method nope/);
  });

  it('refuses callers outside the method’s access, and callers whose id is not a principal', async () => {
    await assert.rejects(request(nc, caller, internalOnly, {}), (e) => isParleyError(e, 'PERMISSION_DENIED'));
    assert.deepEqual(await request(svc, 'svc_rooms', internalOnly, {}), { ok: true });
    assert.equal(
      (await rawCode('parley.in.mallory.api.echo.say', encodeJson({ text: 'x' }), mallory)).code,
      'UNAUTHENTICATED',
    );
  });

  it('turns an unexpected failure into INTERNAL without leaking its message', async () => {
    const err = await request(nc, caller, boom, {}).catch((e: unknown) => e);
    assert.ok(isParleyError(err, 'INTERNAL'));
    assert.doesNotMatch((err as ParleyError).message, /hunter2/);
  });

  it('reports UNAVAILABLE when no service answers', async () => {
    const missing = defineApi({ ...echo, service: 'absent', method: 'x' });
    await assert.rejects(request(nc, caller, missing, { text: 'x' }), (e) => isParleyError(e, 'UNAVAILABLE'));
  });

  it('is discoverable with $SRV.PING / INFO / STATS, and the stats count requests and errors', async () => {
    const ping = (await nc.request('$SRV.PING.parley-echo', undefined, { timeout: 1000 })).json<{
      name: string;
      version: string;
    }>();
    assert.equal(ping.name, 'parley-echo');
    assert.equal(ping.version, '1.2.3');
    const info = (await nc.request('$SRV.INFO.parley-echo', undefined, { timeout: 1000 })).json<{
      endpoints: { name: string; subject: string }[];
    }>();
    assert.ok(info.endpoints.some((e) => e.name === 'echo.say' && e.subject === 'parley.in.*.api.echo.say'));
    await request(nc, caller, boom, {}).catch(() => undefined);
    const stats = (
      await nc.request(`$SRV.STATS.parley-echo.${micro.id}`, undefined, { timeout: 1000 })
    ).json<{
      endpoints: {
        name: string;
        num_requests: number;
        num_errors: number;
        last_error: string;
        processing_time: number;
      }[];
    }>();
    const b = stats.endpoints.find((e) => e.name === 'echo.boom');
    assert.ok(b && b.num_requests >= 1 && b.num_errors >= 1);
    assert.match(b.last_error, /^INTERNAL/);
    const say = stats.endpoints.find((e) => e.name === 'echo.say');
    assert.ok(say && say.num_requests >= 1 && say.processing_time > 0);
  });
});

describe('ParleyError envelopes across the wire', () => {
  it('carry details and retry hints to the caller', async () => {
    const server = await startServer();
    const user = newId('user');
    const nc = await server.connect({ inboxPrefix: `_INBOX.${user}` });
    const micro = createMicroService(nc, { name: 'parley-echo', version: '1' });
    try {
      serveApis(
        micro,
        [
          bind(echo, async () => {
            throw new ParleyError('RATE_LIMITED', 'too fast', {
              retryAfterMs: 750,
              details: { bucket: 'agent' },
            });
          }),
        ],
        { service: 'echo', standing: 'unchecked', queue: 'echo', log: silentLogger() },
      );
      const err = await request(nc, user, echo, { text: 'x' }).catch((e: unknown) => e);
      assert.ok(isParleyError(err, 'RATE_LIMITED'));
      assert.equal((err as ParleyError).retryAfterMs, 750);
      assert.deepEqual((err as ParleyError).details, { bucket: 'agent' });
    } finally {
      await micro.stop();
      await nc.close();
      await server.stop();
    }
  });
});
