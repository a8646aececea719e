/**
 * The NATS server itself enforces a participant's identity: with one agent's own minted creds
 * (operator mode, scoped signing key), everything outside its own prefix, inbox and consumer is
 * refused. Each refusal is checked next to the allowed counterpart, so the test cannot pass by
 * refusing everything.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { credsAuthenticator, type NatsConnection, connect as natsConnect } from '@nats-io/transport-node';
import { inboxStream, newId, request, roomsApi, subjects } from '@parley/contracts';
import {
  connectAdmin,
  connectService,
  createAgent,
  createHuman,
  createOrg,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';

/** A raw connection with the agent's creds that records every error the server sends. */
async function rawConnect(parley: TestParley, id: string, creds: string) {
  const nc = await natsConnect({
    servers: parley.natsUrl,
    authenticator: credsAuthenticator(new TextEncoder().encode(creds)),
    inboxPrefix: subjects.replyPrefix(id),
  });
  const errors: string[] = [];
  void (async () => {
    for await (const s of nc.status()) if (s.type === 'error') errors.push(String(s.error));
  })();
  return { nc, errors };
}

async function refused(errors: string[], fragment: string, what: string) {
  await waitFor(
    () => errors.some((e) => /permissions? violation/i.test(e) && e.includes(fragment)),
    `a permissions violation for ${what}`,
    5_000,
  );
}

describe('participant permissions enforced by nats-server (operator mode)', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let alice: { id: string; creds: string };
  let bob: { id: string; creds: string };
  const room = newId('room');

  before(async () => {
    parley = await startParley();
    const admin = await connectAdmin(parley);
    const org = await createOrg(admin, 'sec-org');
    const owner = await createHuman(admin, { org: org.id, name: 'owner' });
    const a = await createAgent(admin, { name: 'alice-bot' }, owner.user.id);
    const b = await createAgent(admin, { name: 'bob-bot' }, owner.user.id);
    alice = { id: a.agent.id, creds: a.creds };
    bob = { id: b.agent.id, creds: b.creds };
    await admin.close();
    svc = await connectService(parley);
    // Something in both inboxes, as the fan-out would put there.
    const js = jetstream(svc);
    await js.publish(subjects.inbox(alice.id, room), 'for alice');
    await js.publish(subjects.inbox(bob.id, room), 'for bob');
  });
  after(async () => {
    await svc?.close();
    await parley?.destroy();
  });

  it('lets an agent receive (push, under its own _INBOX prefix) and ack its own inbox', async () => {
    const { nc, errors } = await rawConnect(parley, alice.id, alice.creds);
    const deliver = subjects.inboxDeliver(alice.id, 'session1');
    const got: string[] = [];
    nc.subscribe(deliver, {
      callback: (_e, m) => {
        if (m.reply?.startsWith('$JS.ACK.')) {
          got.push(m.string());
          m.respond('+ACK');
        }
      },
    });
    await nc.flush();
    const attached = await request(nc, alice.id, roomsApi.attachInbox, { session: 'session1' });
    assert.equal(attached.deliverSubject, deliver);
    await waitFor(() => got.includes('for alice'), 'alice’s delivery');
    await waitFor(
      async () =>
        (await (await jetstreamManager(svc)).consumers.info(inboxStream(alice.id), alice.id))
          .num_ack_pending === 0,
      'the ack to land',
    );
    // Flow control answers on its own consumer are allowed; on another's they are refused.
    nc.publish(`$JS.FC.${inboxStream(alice.id)}.${alice.id}.abcd`, '');
    nc.publish(`$JS.FC.${inboxStream(bob.id)}.${bob.id}.abcd`, '');
    await refused(errors, `$JS.FC.${inboxStream(bob.id)}.${bob.id}`, 'flow control on bob’s consumer');
    assert.ok(
      !errors.some((e) => e.includes(`$JS.FC.${inboxStream(alice.id)}.${alice.id}`)),
      errors.join('\n'),
    );
    await nc.close();
  });

  it('refuses pointing another participant’s inbox at itself', async () => {
    const { nc } = await rawConnect(parley, alice.id, alice.creds);
    // attachInbox names the caller's own consumer: there is no way to name bob's.
    const r = await request(nc, alice.id, roomsApi.attachInbox, { session: 'session2' });
    assert.equal(r.deliverSubject, subjects.inboxDeliver(alice.id, 'session2'));
    const ci = await (await jetstreamManager(svc)).consumers.info(inboxStream(bob.id), bob.id);
    assert.equal(ci.config.deliver_subject, subjects.inboxDeliver(bob.id));
    await nc.close();
  });

  it('refuses subscribing to another participant’s reply inbox, to _INBOX.> and to parley.inbox.>', async () => {
    const { nc, errors } = await rawConnect(parley, alice.id, alice.creds);
    nc.subscribe(`_INBOX.${bob.id}.>`);
    nc.subscribe('_INBOX.>');
    nc.subscribe('parley.inbox.>');
    nc.subscribe(subjects.inbox(bob.id, room));
    await refused(errors, `_INBOX.${bob.id}.>`, 'another reply inbox');
    await refused(errors, '"_INBOX.>"', '_INBOX.>');
    await refused(errors, 'parley.inbox.>', 'parley.inbox.>');
    await refused(errors, subjects.inbox(bob.id, room), 'another participant’s inbox subject');
    // Its own reply inbox is allowed: a request gets its answer.
    const reply = await nc.request(`$JS.API.CONSUMER.INFO.${inboxStream(alice.id)}.${alice.id}`, '', {
      timeout: 2000,
    });
    assert.match(reply.string(), new RegExp(alice.id));
    await nc.close();
  });

  it('refuses pulling from or acking on another participant’s consumer', async () => {
    const { nc, errors } = await rawConnect(parley, alice.id, alice.creds);
    const next = `$JS.API.CONSUMER.MSG.NEXT.${inboxStream(bob.id)}.${bob.id}`;
    nc.publish(next, JSON.stringify({ batch: 1, no_wait: true }), { reply: `_INBOX.${alice.id}.x` });
    const ack = `$JS.ACK.${inboxStream(bob.id)}.${bob.id}.1.2.2.0.0`;
    nc.publish(ack, '+ACK');
    const info = `$JS.API.CONSUMER.INFO.${inboxStream(bob.id)}.${bob.id}`;
    nc.publish(info, '');
    await refused(errors, next, 'pulling from bob’s consumer');
    await refused(errors, ack, 'acking on bob’s consumer');
    await refused(errors, info, 'bob’s consumer info');
    await nc.close();
    // Bob's message is still there, undelivered.
    const ci = await (await jetstreamManager(svc)).consumers.info(inboxStream(bob.id), bob.id);
    assert.equal(ci.num_pending, 1);
    assert.equal(ci.delivered.stream_seq, 0);
  });

  it('refuses publishing under another participant’s parley.in. prefix', async () => {
    const { nc, errors } = await rawConnect(parley, alice.id, alice.creds);
    const seen: string[] = [];
    const spy = svc.subscribe(`parley.in.${bob.id}.>`, {
      callback: (_e, m) => {
        seen.push(m.subject);
      },
    });
    await svc.flush();
    nc.publish(subjects.send(bob.id), '{}');
    nc.publish(subjects.presence(bob.id), '{}');
    nc.publish(subjects.presence(alice.id), '{}');
    await refused(errors, subjects.send(bob.id), 'sending as bob');
    await refused(errors, subjects.presence(bob.id), 'heartbeating as bob');
    await nc.flush();
    assert.deepEqual(seen, []);
    spy.unsubscribe();
    await nc.close();
  });

  it('refuses creating a consumer and reading stream info', async () => {
    const { nc, errors } = await rawConnect(parley, alice.id, alice.creds);
    const own = inboxStream(alice.id);
    const create = `$JS.API.CONSUMER.CREATE.${own}`;
    const durable = `$JS.API.CONSUMER.DURABLE.CREATE.${own}.spy`;
    const streamInfo = `$JS.API.STREAM.INFO.${own}`;
    const cfg = JSON.stringify({
      stream_name: own,
      config: { durable_name: 'spy', filter_subject: 'parley.inbox.>', ack_policy: AckPolicy.Explicit },
    });
    nc.publish(create, cfg);
    nc.publish(durable, cfg);
    nc.publish(streamInfo, '');
    nc.publish('$JS.API.STREAM.LIST', '');
    await refused(errors, create, 'creating a consumer');
    await refused(errors, durable, 'creating a durable consumer');
    await refused(errors, streamInfo, 'stream info');
    await refused(errors, '$JS.API.STREAM.LIST', 'listing streams');
    await nc.close();
    const names: string[] = [];
    for await (const c of (await jetstreamManager(svc)).consumers.list(own)) names.push(c.name);
    assert.ok(!names.includes('spy'));
  });
});
