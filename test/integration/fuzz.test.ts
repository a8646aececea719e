/**
 * Malformed payloads to every subject a participant may publish to — each API method of every
 * service, an unknown method of each, `send`, `presence` and `usage` — with a real agent's creds.
 * Every request must get a reply (no timeout), and an error reply must carry a registered code; the
 * backbone must still work afterwards.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { credsAuthenticator, type NatsConnection, connect as natsConnect } from '@nats-io/transport-node';
import {
  type ApiMethod,
  bindingsApi,
  consentApi,
  errorCodes,
  governanceApi,
  headerNames,
  mcpApi,
  registryApi,
  roomsApi,
  subjects,
} from '@parley/contracts';
import { startParley, type TestParley } from '@parley/test/harness';

const enc = new TextEncoder();
const deep = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`;
/** Malformed bodies: not JSON, wrong JSON types, hostile shapes, too large. */
const PAYLOADS: [string, Uint8Array][] = [
  ['empty', new Uint8Array()],
  ['not json', enc.encode('not json')],
  ['truncated', enc.encode('{"room":')],
  ['invalid utf-8', new Uint8Array([0xc3, 0x28, 0xff])],
  ['null', enc.encode('null')],
  ['array', enc.encode('[1,2,3]')],
  ['string', enc.encode('"hello"')],
  ['number', enc.encode('42')],
  ['wrong types', enc.encode('{"room":5,"agent":[],"participant":{},"parts":"x","id":true,"of":null}')],
  ['prototype keys', enc.encode('{"__proto__":{"admin":true},"constructor":{"prototype":{}}}')],
  ['deep nesting', enc.encode(`{"room":"room_x","parts":[{"type":"data","data":${deep(5_000)}}]}`)],
  ['oversized', enc.encode(`{"text":"${'x'.repeat(300 * 1024)}"}`)],
];

describe('fuzzing every subject a participant may publish to', () => {
  let parley: TestParley;
  let nc: NatsConnection;
  let id: string;

  before(async () => {
    parley = await startParley();
    const p = await parley.participant('agent');
    id = p.id;
    nc = await natsConnect({
      servers: parley.natsUrl,
      authenticator: credsAuthenticator(enc.encode(p.creds)),
      inboxPrefix: subjects.replyPrefix(id),
    });
  });
  after(async () => {
    await nc?.close();
    await parley?.destroy();
  });

  it('answers every malformed request with a coded reply, and the backbone keeps working', async () => {
    const methods = [roomsApi, registryApi, consentApi, governanceApi, bindingsApi, mcpApi].flatMap(
      (api) => Object.values(api) as ApiMethod[],
    );
    const services = [...new Set(methods.map((m) => m.service))];
    const targets = [
      ...methods.map((m) => m.subject(id)),
      ...services.map((s) => subjects.api(id, s, 'noSuchMethod')),
      subjects.send(id),
      subjects.presence(id),
      subjects.usage(id),
    ];
    const failures: string[] = [];
    const codes = new Map<string, number>();
    let answered = 0;
    const jobs = targets.flatMap((subject) => PAYLOADS.map(([name, data]) => ({ subject, name, data })));
    const started = performance.now();
    // A few requests in flight at once: fast, without flooding the 2-core machine.
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (let job = jobs[next++]; job; job = jobs[next++]) {
          try {
            const reply = await nc.request(job.subject, job.data, { timeout: 5_000 });
            answered++;
            const code = reply.headers?.get(headerNames.error);
            if (code) {
              codes.set(code, (codes.get(code) ?? 0) + 1);
              if (!(code in errorCodes))
                failures.push(`${job.subject} ${job.name}: unregistered code ${code}`);
              if (code === 'INTERNAL') failures.push(`${job.subject} ${job.name}: INTERNAL`);
            }
          } catch (err) {
            failures.push(`${job.subject} ${job.name}: ${(err as Error).message}`);
          }
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `fuzz: ${jobs.length} requests to ${targets.length} subjects in ${seconds.toFixed(1)} s; codes ${JSON.stringify(Object.fromEntries(codes))}`,
    );
    assert.deepEqual(failures, []);
    assert.equal(answered, jobs.length);
    // Still alive: health is green and a real conversation works.
    const health = await fetch(`${parley.httpUrl}/healthz`);
    assert.equal(health.status, 200);
    const agent = await parley.connect((await parley.participant('agent')).creds);
    const room = await agent.rooms.create('after the fuzz');
    const sent = await room.send('still standing');
    assert.match(sent.id, /^msg_/);
  });
});
