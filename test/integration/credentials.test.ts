/**
 * Rotation and revocation really stop old creds: the server closes their live connections, refuses
 * them from then on, and still does after the local backbone restarts.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import {
  AuditRecord,
  buckets,
  CredentialRecord,
  governanceApi,
  inboxStream,
  ParleyEvent,
  ParticipantPolicy,
  policyKeys,
  registryApi,
  streams,
} from '@parley/contracts';
import { publicKeys, revocationsOf } from '@parley/keys';
import { silentLogger } from '@parley/kit';
import { type Agent, connect } from '@parley/sdk';
import { freePort, startStandalone } from '@parley/standalone';
import {
  codeOf,
  connectAdmin,
  connectService,
  connectSystem,
  connectTo,
  createAgent,
  createHuman,
  createOrg,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';

describe('credentials: rotation and revocation', () => {
  let parley: TestParley;
  let admin: Agent;
  let owner: Agent;
  let ownerId: string;
  let colleague: Agent;
  let outsider: Agent;

  before(async () => {
    parley = await startParley();
    admin = await connectAdmin(parley);
    const org = await createOrg(admin, 'cred-org');
    const other = await createOrg(admin, 'cred-other');
    const o = await createHuman(admin, { org: org.id, name: 'owner' });
    ownerId = o.user.id;
    owner = await connectTo(parley, o.creds);
    colleague = await connectTo(parley, (await createHuman(admin, { org: org.id, name: 'colleague' })).creds);
    outsider = await connectTo(parley, (await createHuman(admin, { org: other.id, name: 'outsider' })).creds);
  });
  after(async () => {
    for (const a of [admin, owner, colleague, outsider]) await a?.close();
    await parley?.destroy();
  });

  it('rotation closes the old connection, refuses the old creds and hands out working new ones', async () => {
    const { agent, creds } = await createAgent(owner, { name: 'rotating-bot' });
    const live = await connectTo(parley, creds);
    const closed = live.nc.closed();
    const fresh = await owner.call(governanceApi.rotateCredentials, { participant: agent.id });
    // Closed by the server (revoked), then refused on every reconnect attempt.
    assert.match(String(await closed), /revoked|authorization/i);
    assert.equal(await codeOf(connectTo(parley, creds)), 'UNAUTHENTICATED');
    const again = await connectTo(parley, fresh.creds);
    assert.equal((await again.whoami()).id, agent.id);
    await again.close();

    const svc = await connectService(parley);
    const record = CredentialRecord.parse(
      (await (await new Kvm(svc).open(buckets.policy)).get(policyKeys.creds(agent.id)))?.json(),
    );
    assert.equal(record.keys.length, 2);
    assert.ok(record.keys[0]?.revokedAt);
    assert.equal(record.keys[1]?.userPublicKey, fresh.userPublicKey);
    assert.equal(record.keys[1]?.revokedAt, undefined);
    await svc.close();
  });

  it('revocation closes connections for good, records the standing, audits and emits an event', async () => {
    const { agent, creds } = await createAgent(owner, { name: 'revoked-bot' });
    const live = await connectTo(parley, creds);
    const closed = live.nc.closed();
    const svc = await connectService(parley);
    const events: ParleyEvent[] = [];
    const sub = svc.subscribe('parley.evt.governance.>', {
      callback: (_e, m) => {
        events.push(ParleyEvent.parse(m.json()));
      },
    });
    await svc.flush();

    const r = await owner.call(governanceApi.revokeCredentials, { participant: agent.id, reason: 'leaked' });
    assert.equal(r.revoked, 1);
    assert.match(String(await closed), /revoked|authorization/i);
    assert.equal(await codeOf(connectTo(parley, creds)), 'UNAUTHENTICATED');
    // No way back: neither rotation nor new creds.
    assert.equal(
      await codeOf(owner.call(governanceApi.rotateCredentials, { participant: agent.id })),
      'REVOKED',
    );
    const policy = await new Kvm(svc).open(buckets.policy);
    const standing = ParticipantPolicy.parse((await policy.get(policyKeys.participant(agent.id)))?.json());
    assert.equal(standing.status, 'revoked');
    assert.equal(standing.reason, 'leaked');
    assert.equal(standing.by, ownerId);
    const listed = await owner.directory.getAgent(agent.id);
    assert.equal(listed.agent.status, 'revoked');

    await waitFor(
      () => events.some((e) => e.kind === 'credentials.revoked' && e.subject === agent.id),
      'the event',
    );
    const jsm = await jetstreamManager(svc);
    const last = await jsm.streams.getMessage(streams.audit, { last_by_subj: 'parley.audit.credentials' });
    const audit = AuditRecord.parse(last?.json());
    assert.equal(audit.action, 'revoke');
    assert.equal(audit.target, agent.id);
    assert.equal(audit.actor, ownerId);
    assert.equal(last?.header.get('Nats-Msg-Id'), audit.id);
    sub.unsubscribe();
    await svc.close();
  });

  it('pushes the account JWT only when the server does not hold its claims already', async () => {
    // Every push makes nats-server 2.9.10 answer the account's JetStream requests "no responders"
    // for a moment, so a push the server does not need (each start of governance made one) is left out.
    const sys = await connectSystem(parley);
    const pushed: string[] = [];
    sys.subscribe('$SYS.REQ.CLAIMS.UPDATE', {
      callback: (_e, m) => {
        pushed.push(m.string());
      },
    });
    await sys.flush();
    const governance = parley.services.find((s) => s.name === 'governance') as unknown as {
      pushRevocations(): Promise<number>;
    };
    const revokedBefore = await governance.pushRevocations();
    const { agent, creds } = await createAgent(owner, { name: 'push-counted' });
    await owner.call(governanceApi.revokeCredentials, { participant: agent.id });
    // The revocation's push comes after any push before it (one connection, one route): once it is
    // here, a push the server did not need would be here too.
    const carriesIt = (jwt: string) => Object.keys(revocationsOf(jwt)).length === revokedBefore + 1;
    await waitFor(() => pushed.some(carriesIt), 'the revocation pushed');
    assert.equal(pushed.length, 1, 'one push: the revocation, none for the claims the server held');
    assert.equal(await codeOf(connectTo(parley, creds)), 'UNAUTHENTICATED');
    await sys.close();
  });

  it('refuses rotation and revocation to anyone but the owner, an org admin or a service, changing nothing', async () => {
    const { agent, creds } = await createAgent(owner, { name: 'guarded-bot', visibility: 'org' });
    const priv = await createAgent(owner, { name: 'private-bot', visibility: 'private' });
    const bot = await connectTo(parley, creds);
    assert.equal(
      await codeOf(colleague.call(governanceApi.rotateCredentials, { participant: agent.id })),
      'PERMISSION_DENIED',
    );
    assert.equal(
      await codeOf(colleague.call(governanceApi.revokeCredentials, { participant: priv.agent.id })),
      'NOT_FOUND',
    );
    assert.equal(
      await codeOf(outsider.call(governanceApi.revokeCredentials, { participant: agent.id })),
      'NOT_FOUND',
    );
    // Agents cannot manage credentials at all, not even their own.
    assert.equal(
      await codeOf(bot.call(governanceApi.revokeCredentials, { participant: agent.id })),
      'UNAUTHENTICATED',
    );
    assert.equal(
      await codeOf(owner.call(governanceApi.issueCredentials, { participant: agent.id })),
      'PERMISSION_DENIED',
    );
    assert.equal(
      await codeOf(owner.call(governanceApi.revokeCredentials, { participant: 'agt_nope' })),
      'INVALID_ARGUMENT',
    );
    // Nothing changed: the bot still works and is active.
    assert.equal((await bot.whoami()).id, agent.id);
    assert.equal((await owner.directory.getAgent(agent.id)).agent.status, 'active');
    await bot.close();
    // The org admin may.
    const fresh = await admin.call(governanceApi.rotateCredentials, { participant: agent.id });
    assert.ok(fresh.creds.includes('NATS USER JWT'));
  });

  it('deregistration revokes the creds, deletes the inbox consumer and frees the name', async () => {
    const { agent, creds } = await createAgent(owner, { name: 'leaving-bot' });
    const svc = await connectService(parley);
    const jsm = await jetstreamManager(svc);
    assert.equal((await jsm.consumers.info(inboxStream(agent.id), agent.id)).name, agent.id);
    await owner.call(registryApi.deregisterAgent, { agent: agent.id });
    assert.equal(await codeOf(connectTo(parley, creds)), 'UNAUTHENTICATED');
    assert.equal(await codeOf(owner.directory.getAgent(agent.id)), 'NOT_FOUND');
    await assert.rejects(jsm.consumers.info(inboxStream(agent.id), agent.id), /consumer not found/);
    const again = await createAgent(owner, { name: 'leaving-bot' });
    assert.notEqual(again.agent.id, agent.id);
    await svc.close();
  });
});

describe('revocations survive a restart of the local backbone', () => {
  let home: string;
  before(async () => {
    home = await mkdtemp(join(tmpdir(), 'parley-restart-'));
  });
  after(async () => {
    await rm(home, { recursive: true, force: true });
  });

  it('keeps refusing revoked and rotated-out creds after nats-server restarts with a fresh preload', async () => {
    const start = async () =>
      startStandalone({ home, natsPort: await freePort(), httpPort: await freePort(), log: silentLogger() });
    let p = await start();
    let revokedCreds: string;
    let rotatedCreds: string;
    let currentCreds: string;
    try {
      const admin = await connect({ servers: p.natsUrl, creds: p.home.paths.adminCreds, presence: false });
      const revoked = await createAgent(admin, { name: 'gone' });
      const rotated = await createAgent(admin, { name: 'rotated' });
      await admin.call(governanceApi.revokeCredentials, { participant: revoked.agent.id });
      currentCreds = (await admin.call(governanceApi.rotateCredentials, { participant: rotated.agent.id }))
        .creds;
      revokedCreds = revoked.creds;
      rotatedCreds = rotated.creds;
      await admin.close();
    } finally {
      await p.stop();
    }
    p = await start();
    try {
      // The preload written for this start already carries the revocations (not only governance's
      // re-push after it starts): no window where revoked creds could connect.
      const config = await readFile(p.home.paths.natsConfig, 'utf8');
      const account = publicKeys(p.home.keys).account;
      const preloaded = new RegExp(`${account}: "([^"]+)"`).exec(config)?.[1] ?? '';
      assert.equal(Object.keys(revocationsOf(preloaded)).length, 2);
      const conn = (creds: string) => connect({ servers: p.natsUrl, creds, presence: false });
      assert.equal(await codeOf(conn(revokedCreds)), 'UNAUTHENTICATED');
      assert.equal(await codeOf(conn(rotatedCreds)), 'UNAUTHENTICATED');
      const ok = await conn(currentCreds);
      assert.equal((await ok.whoami()).name, 'rotated');
      await ok.close();
    } finally {
      await p.stop();
    }
  });
});
