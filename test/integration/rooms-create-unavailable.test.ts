/**
 * `rooms.create` on a server or a consent service that does not answer in time (the 10,000-agent
 * tier of `pnpm bench:scale`): its checks come before any write, so a check that got no answer is
 * asked again, and when none comes the caller is told UNAVAILABLE — nothing was made, try again —
 * not DEADLINE_EXCEEDED ("it may still complete") nor INTERNAL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { consentApi, encodeJson, inboxStream, isParleyError, newId } from '@parley/contracts';
import { createLogger, ensureBackbone, ensureInboxConsumer } from '@parley/kit';
import { CONSENT_CHECK_TRIES, createConsentGate, createParticipantDirectory } from '@parley/rooms/internal';
import { startServer, type TestServer } from '@parley/test/harness';

const a = newId('agent');
const b = newId('agent');

describe('rooms.create checks when nothing answers in time', () => {
  let server: TestServer;
  let nc: NatsConnection;
  let consent: NatsConnection;
  before(async () => {
    server = await startServer();
    nc = await server.connect();
    consent = await server.connect();
  });
  after(async () => {
    await consent?.close();
    await nc?.close();
    await server?.stop();
  });

  /** A consent replica on the real subject that lets the first `silent` checks go unanswered. */
  const replica = async (silent: number, answer: object) => {
    const seen: string[] = [];
    const sub = consent.subscribe(consentApi.check.listen, {
      queue: 'consent',
      callback: (_err, msg) => {
        seen.push(msg.subject);
        if (seen.length > silent) msg.respond(encodeJson(answer));
      },
    });
    // The server knows the subscription before the first check is sent: a check sent before would
    // find no responder and be counted as a try nobody saw.
    await consent.flush();
    return { seen, stop: () => sub.unsubscribe() };
  };

  it('asks a check that got no answer again, and uses the answer that comes', async () => {
    const r = await replica(1, { allowed: true, via: 'same_owner', explain: 'same owner' });
    try {
      await createConsentGate({ nc, timeoutMs: 300 })(a, b);
      assert.equal(r.seen.length, 2, 'the unanswered check was asked once more');
    } finally {
      r.stop();
    }
  });

  it('answers UNAVAILABLE with a retry hint when no try is answered, after the tries it states', async () => {
    const r = await replica(Number.POSITIVE_INFINITY, {});
    try {
      await assert.rejects(createConsentGate({ nc, timeoutMs: 200 })(a, b), (err) => {
        assert.ok(isParleyError(err, 'UNAVAILABLE'), String(err));
        assert.equal(err.retryAfterMs, 1_000);
        assert.match(err.message, /nothing was changed/);
        assert.deepEqual(err.details, { inviter: a, invitee: b });
        return true;
      });
      assert.equal(r.seen.length, CONSENT_CHECK_TRIES);
    } finally {
      r.stop();
    }
  });

  it('does not ask a refusal again: it is NO_CONSENT at once', async () => {
    const r = await replica(0, { allowed: false, via: 'none', missing: 'contact', explain: 'not contacts' });
    try {
      await assert.rejects(createConsentGate({ nc, timeoutMs: 300 })(a, b), (err) =>
        isParleyError(err, 'NO_CONSENT'),
      );
      assert.equal(r.seen.length, 1);
    } finally {
      r.stop();
    }
  });

  it('tells UNAVAILABLE, not INTERNAL, when the inbox consumer cannot be read; NOT_FOUND when it is not there', async () => {
    await ensureBackbone(nc, {}, createLogger({ name: 'rooms-create-test', level: 'silent' }));
    const registered = newId('agent');
    await ensureInboxConsumer(await jetstreamManager(nc), registered);
    const lost = await server.connect();
    const directory = createParticipantDirectory(await jetstreamManager(lost));
    await assert.rejects(directory.require(newId('agent')), (err) => isParleyError(err, 'NOT_FOUND'));
    await directory.require(registered);
    await lost.close();
    // A registered participant read once is known without asking; a new one needs the server.
    await directory.require(registered);
    await assert.rejects(directory.require(newId('agent')), (err) => {
      assert.ok(isParleyError(err, 'UNAVAILABLE'), String(err));
      assert.equal(err.retryAfterMs, 1_000);
      return true;
    });
    const info = await (await jetstreamManager(nc)).consumers.info(inboxStream(registered), registered);
    assert.equal(info.name, registered, 'nothing was changed');
  });
});
