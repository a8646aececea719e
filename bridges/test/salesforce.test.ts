/**
 * The Salesforce bridge against our Pub/Sub API server (gRPC, Avro, CDC bitmaps, OAuth client
 * credentials) and a real backbone.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { registryApi } from '@parley/contracts';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';
import { ACTION_MEDIA_TYPE, type Bridge } from '../src/bridge.js';
import { type LocalSalesforce, startLocalSalesforce } from '../src/local/salesforce-server.js';
import {
  attachSalesforce,
  type ManagedSubscription,
  type SalesforceSource,
} from '../src/salesforce/index.js';
import { createWorld, ingressDuplicates, type Member, messagesOf, textOf } from './helpers.js';

const TOPICS = ['/data/AccountChangeEvent', '/event/Credit_Hold__e', '/event/Unmapped__e'];

describe('salesforce bridge', () => {
  let parley: TestParley;
  let sf: LocalSalesforce;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let alice: Member;
  let bridgeAgent: { id: string; creds: string };
  let room: string;
  let aliceToken: string;
  const sources: SalesforceSource[] = [];

  before(async () => {
    parley = await startParley();
    sf = await startLocalSalesforce();
    world = await createWorld(parley);
    const ops = await world.person('ops');
    alice = await world.person('alice', ['tool:salesforce.publish']);
    bridgeAgent = await world.bridgeAgent(ops, 'salesforce', ['tool:salesforce.publish']);
    room = (await ops.agent.rooms.create('accounts', { members: [bridgeAgent.id, alice.id] })).id;
    aliceToken = (await alice.agent.tokens.issue(bridgeAgent.id, ['tool:salesforce.publish'])).token;
  });
  after(async () => {
    await Promise.allSettled(sources.map((s) => s.stop()));
    await world?.close();
    await sf?.stop();
    await parley?.destroy();
  });

  const mapping = () => `
bridge: salesforce
inbound:
  - type: /data/AccountChangeEvent*
    to: { room: ${room} }
    text: "{{payload.ChangeEventHeader.changeType}} Account {{payload.ChangeEventHeader.recordIds}}: {{payload.ChangeEventHeader.changedFields}}"
  - type: /event/Credit_Hold__e
    to: { room: ${room} }
    text: "Credit hold for {{payload.Account_Id__c}}: {{payload.Reason__c}}"
identities:
  "005000000000001AAA": { tokenEnv: SF_ALICE, user: ${alice.id} }
outbound:
  - action: creditHold
    tool: salesforce.publish
    args: { topic: /event/Credit_Hold__e }
    reply: "published {{result.eventId}}"
`;

  async function bridgeWith(
    stateDir?: string,
    batch = 100,
    streams: { topics: string[]; managed?: ManagedSubscription[] } = { topics: TOPICS },
  ): Promise<{ bridge: Bridge; source: SalesforceSource; dir: string }> {
    const dir = stateDir ?? (await world.stateDir());
    const agent = await world.connect(bridgeAgent.creds);
    const bridge = await world.bridge(agent, mapping(), dir, { SF_ALICE: aliceToken });
    const source = attachSalesforce(bridge, {
      endpoint: sf.endpoint,
      insecure: true,
      loginUrl: sf.loginUrl,
      clientId: sf.clientId,
      clientSecret: sf.clientSecret,
      ...streams,
      startAt: 'EARLIEST',
      batch,
      maxBackoffMs: 500,
    });
    sources.push(source);
    return { bridge, source, dir };
  }

  const fromSalesforce = async () =>
    (await messagesOf(alice.agent, room)).filter(
      (m) => m.message.sender.id === bridgeAgent.id && m.message.metadata?.['source-id'],
    );
  const sourceIds = async () => (await fromSalesforce()).map((m) => m.message.metadata?.['source-id']);

  it('stores CDC and Platform Events decoded (bitmaps as names) for the mapped user; malformed refused, unmapped ignored', async () => {
    const change = sf.emitChange('Account', {
      recordIds: ['001xx000003DGb2AAG'],
      fields: {
        Name: 'Acme Corp',
        BillingAddress: { Street: null, City: 'Lyon', PostalCode: null, Country: null },
      },
      changedFields: ['Name', 'BillingAddress.City'],
    });
    sf.emitMalformed('/data/AccountChangeEvent');
    sf.emitPlatformEvent('/event/Unmapped__e', { Reason__c: 'x' });
    const pe = sf.emitPlatformEvent('/event/Credit_Hold__e', {
      Account_Id__c: '001xx000003DGb2AAG',
      Reason__c: 'overdue',
    });
    const { bridge } = await bridgeWith();
    await waitFor(
      async () => (await fromSalesforce()).length >= 2,
      'the change and the platform event in the room',
    );
    await waitFor(() => bridge.metrics.count('ignored') === 1, 'the unmapped event counted as ignored');
    const msgs = await fromSalesforce();
    assert.deepEqual(
      // Each topic is its own stream: the order holds within a topic, not across them.
      msgs.map((m) => textOf(m.message)).sort(),
      [
        'Credit hold for 001xx000003DGb2AAG: overdue',
        'UPDATE Account 001xx000003DGb2AAG: Name, BillingAddress.City',
      ],
    );
    assert.deepEqual((await sourceIds()).sort(), [change.id, pe.id].sort());
    const data = msgs.find((m) => m.message.metadata?.['source-id'] === change.id)?.message.parts[1];
    assert.ok(data?.type === 'data');
    assert.deepEqual((data.data.ChangeEventHeader as { changedFields: string[] }).changedFields, [
      'Name',
      'BillingAddress.City',
    ]);
    assert.ok(msgs.every((m) => m.message.onBehalfOf?.principal === alice.id));
    assert.equal(bridge.metrics.count('refused', 'malformed'), 1);
    // The first request of each stream: the preset, and the flow-control window.
    const first = sf.fetchRequests.find((r) => r.topic_name === '/data/AccountChangeEvent');
    assert.equal(first?.replay_preset, 'EARLIEST');
    assert.equal(first?.num_requested, 100);
    assert.ok(sf.tokensIssued() >= 1);
    await Promise.all(sources.splice(0).map((s) => s.stop()));
  });

  it('pulls in windows of num_requested and, restarted, resumes after the last stored replay id: nothing skipped, nothing twice', async () => {
    const before_ = (await sourceIds()).length;
    const reqsAtStart = sf.fetchRequests.length;
    const { source, dir, bridge } = await bridgeWith(undefined, 10);
    const emitted: string[] = [];
    for (let i = 0; i < 25; i++)
      emitted.push(sf.emitChange('Account', { recordIds: [`001R${i}`], fields: { Name: `R${i}` } }).id);
    await waitFor(async () => {
      const ids = await sourceIds();
      return emitted.every((id) => ids.includes(id));
    }, 'the 25 changes in the room');
    // Replayed from EARLIEST, the first test's events were recognised, not stored again.
    assert.equal((await sourceIds()).length, before_ + 25);
    // At least those two (a send the SDK retried under load is also answered as a duplicate).
    assert.ok(bridge.metrics.count('duplicate') >= 2);
    const windows = sf.fetchRequests
      .slice(reqsAtStart)
      .filter((r) => r.topic_name === '/data/AccountChangeEvent' && r.num_requested > 0);
    assert.ok(
      windows.every((r) => r.num_requested <= 10),
      'no request asks for more than the window',
    );
    assert.ok(windows.length >= 3, `events came in several windows (${windows.length} requests)`);
    await source.stop();
    await bridge.agent.close();
    // While the bridge is down, more changes happen.
    for (let i = 25; i < 30; i++)
      emitted.push(sf.emitChange('Account', { recordIds: [`001R${i}`], fields: { Name: `R${i}` } }).id);
    const reqsBefore = sf.fetchRequests.length;
    await bridgeWith(dir, 10);
    await waitFor(async () => {
      const ids = await sourceIds();
      return emitted.every((id) => ids.includes(id));
    }, 'every change in the room');
    const resumed = sf.fetchRequests
      .slice(reqsBefore)
      .find((r) => r.topic_name === '/data/AccountChangeEvent');
    assert.equal(resumed?.replay_preset, 'CUSTOM');
    const ids = await sourceIds();
    assert.equal(new Set(ids).size, ids.length, 'no source event stored twice');
    await Promise.all(sources.splice(0).map((s) => s.stop()));
  });

  it('follows a managed subscription (ManagedSubscribe): each batch committed at the server once stored; restarted without its state, it resumes after the commit; a refused commit re-delivers, nothing stored twice', async () => {
    const name = 'Parley_Accounts';
    sf.createManagedSubscription(name, '/data/AccountChangeEvent', { replayPreset: 'LATEST' });
    const streams = { topics: [], managed: [{ name, topic: '/data/AccountChangeEvent' }] };
    const reqsAtStart = sf.managedRequests.length;
    const { source, bridge } = await bridgeWith(undefined, 5, streams);
    // LATEST is taken when the stream opens: emit once it has.
    await waitFor(() => sf.managedRequests.length > reqsAtStart, 'the managed subscription opened');
    const first = sf.managedRequests[reqsAtStart];
    assert.equal(first?.developer_name, name);
    assert.equal(first?.num_requested, 5);
    const emitted: { id: string; replayId: string }[] = [];
    const emit = (from: number, to: number) => {
      for (let i = from; i < to; i++)
        emitted.push(sf.emitChange('Account', { recordIds: [`001M${i}`], fields: { Name: `M${i}` } }));
    };
    const allStored = async () => {
      const ids = await sourceIds();
      return emitted.every((e) => ids.includes(e.id));
    };
    const lastCommitted = () => sf.committedReplayId(name) === emitted[emitted.length - 1]?.replayId;
    emit(0, 12);
    await waitFor(allStored, 'the 12 changes in the room');
    await waitFor(lastCommitted, 'the last stored replay id committed at the server');
    const commits = sf.managedRequests.slice(reqsAtStart).filter((r) => r.commit_replay_id_request);
    assert.ok(commits.length >= 3, `a commit per batch of at most 5 (${commits.length} commits)`);
    assert.ok(
      sf.managedRequests.slice(reqsAtStart).every((r) => (r.num_requested ?? 0) <= 5),
      'no request asks for more than the window',
    );
    assert.ok(bridge.metrics.parley.registry.getSingleMetric('parley_bridge_source_commit_seconds'));
    await source.stop();
    await bridge.agent.close();

    // While it is down, more changes; it comes back with an empty state directory.
    emit(12, 17);
    const again = await bridgeWith(undefined, 5, streams);
    await waitFor(allStored, 'the changes made while it was down');
    await waitFor(lastCommitted, 'committed again');
    for (const e of emitted.slice(0, 12))
      assert.equal(sf.deliveries(e.id), 1, 'nothing before the commit came again');

    // A refused commit ends the stream; the batch comes again and is recognised from the journal.
    const duplicates = again.bridge.metrics.count('duplicate');
    const resent = await ingressDuplicates(parley);
    sf.refuseNextCommit('commit failed: replay store unavailable');
    emit(17, 20);
    await waitFor(allStored, 'the changes around the refused commit');
    await waitFor(lastCommitted, 'committed after the refusal');
    // The first batch after the refusal holds change 17: stored, its commit refused, delivered again.
    assert.equal(sf.deliveries(emitted[17]?.id ?? ''), 2, 'the batch whose commit was refused came again');
    assert.ok(
      again.bridge.metrics.count('duplicate') > duplicates,
      'the re-delivered, already stored change was recognised',
    );
    assert.equal(await ingressDuplicates(parley), resent, 'from the journal: nothing was sent again');
    const ids = (await sourceIds()).filter((id) => emitted.some((e) => e.id === id));
    assert.equal(ids.length, emitted.length, 'each change stored once');
    assert.deepEqual(
      ids,
      emitted.map((e) => e.id),
      'in the order Salesforce sent them',
    );
    await Promise.all(sources.splice(0).map((s) => s.stop()));
  });

  it('an outage shows as presence offline with the reason; after it, with a revoked token, the bridge re-authenticates and continues', async () => {
    const { bridge } = await bridgeWith();
    await waitFor(() => bridge.sourceDownReason === undefined && sf.fetchRequests.length > 0, 'subscribed');
    const tokens = sf.tokensIssued();
    sf.revokeTokens();
    await sf.outage();
    const presence = async () =>
      (await alice.agent.call(registryApi.presence, { participants: [bridgeAgent.id] })).presence[
        bridgeAgent.id
      ];
    await waitFor(async () => (await presence())?.state === 'offline', 'presence offline');
    assert.match((await presence())?.activity ?? '', /source unreachable: (UNAVAILABLE|CANCELLED|UNKNOWN)/);
    await sf.resume();
    const after_ = sf.emitChange('Account', {
      recordIds: ['001AFTER'],
      fields: { Name: 'After the outage' },
    });
    await waitFor(async () => (await sourceIds()).includes(after_.id), 'the change after the outage');
    await waitFor(async () => (await presence())?.state === 'online', 'presence online');
    assert.ok(sf.tokensIssued() > tokens, 'a new token was fetched after UNAUTHENTICATED');
    await Promise.all(sources.splice(0).map((s) => s.stop()));
  });

  it('publishes a Platform Event back as a tool call on the asker’s behalf', async () => {
    const { bridge } = await bridgeWith();
    await bridge.start();
    const token = (await alice.agent.tokens.issue(bridgeAgent.id, ['tool:salesforce.publish'])).token;
    const ask = await alice.agent.rooms.room(room).send(
      [
        { type: 'text', text: 'put 001HOLD on credit hold' },
        {
          type: 'data',
          mediaType: ACTION_MEDIA_TYPE,
          data: {
            agent: bridgeAgent.id,
            action: 'creditHold',
            args: { Account_Id__c: '001HOLD', Reason__c: 'approved by alice', topic: '/event/Other__e' },
          },
        },
      ],
      { delegation: token, mentions: [bridgeAgent.id] },
    );
    await waitFor(() => sf.published('/event/Credit_Hold__e').length === 1, 'the platform event published');
    const ev = sf.published('/event/Credit_Hold__e')[0];
    assert.equal(ev?.Account_Id__c, '001HOLD');
    assert.equal(ev?.Reason__c, 'approved by alice');
    await waitFor(
      async () =>
        (await messagesOf(alice.agent, room)).some(
          (m) => m.message.replyTo === ask.id && textOf(m.message).startsWith('published '),
        ),
      'the bridge’s answer',
    );
  });
});
