/**
 * Delegation end to end: the confused deputy, RFC 8693 exchange rules, and forged, expired and
 * revoked tokens — refused both by authorize and by the rooms ingress.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  actClaimOf,
  buckets,
  governanceApi,
  isParleyError,
  newId,
  type ParleyError,
  policyKeys,
} from '@parley/contracts';
import type { Delivery } from '@parley/sdk';
import { connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';
import {
  alterToken,
  codeOf,
  createWorld,
  type Member,
  signToken,
  textOf,
  unsignedToken,
} from './fixtures/governance.js';

describe('delegation', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let alice: Member;
  let bob: Member;
  let support: Member;
  let hr: Member;
  let extra: Member[];
  let room: string;

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    world = await createWorld(parley);
    // alice may read her own HR records but not payroll; bob (payroll team) may read payroll.
    alice = await world.person('alice', ['tickets:*', 'hr:records:read']);
    bob = await world.person('bob', ['tickets:*', 'hr:payroll:read']);
    const supportLead = await world.person('support-lead', ['tickets:*', 'hr:*'], { listen: false });
    const hrLead = await world.person('hr-lead', ['hr:*'], { listen: false });
    support = await world.agentOf(supportLead, 'support', ['tickets:*', 'hr:*'], { listen: true });
    hr = await world.agentOf(hrLead, 'hr', ['hr:payroll:read', 'hr:records:read'], { listen: true });
    extra = [];
    for (const n of ['relay-1', 'relay-2', 'relay-3']) {
      extra.push(await world.agentOf(hrLead, n, ['hr:records:read', 'hr:payroll:read']));
    }
    const r = await alice.agent.rooms.create('help desk', {
      members: [bob.id, support.id, hr.id, ...extra.map((e) => e.id)],
    });
    room = r.id;
  });
  after(async () => {
    await world?.close();
    await svc?.close();
    await parley?.destroy();
  });

  async function tokenKeys(): Promise<number> {
    const kv = await new Kvm(svc).open(buckets.policy);
    let n = 0;
    for await (const _ of await kv.keys(policyKeys.token('*'))) n++;
    return n;
  }

  it('the confused deputy: HR’s payroll call for alice (via support) is denied by alice’s link; for bob it is allowed', async () => {
    const calls: { for: string; tc: string; outcome: 'ran' | ParleyError }[] = [];
    let ran = 0;
    // The support agent passes whatever it is asked to HR, under the asker's delegation.
    support.agent.on('message', async (d: Delivery) => {
      const token = support.agent.tokens.current();
      if (!token || d.message.sender.id === support.id) return;
      const ex = await support.agent.tokens.exchange(token, hr.id, { room: d.room });
      await support.agent.rooms.room(d.room).send(`HR, please answer: ${textOf(d)}`, {
        delegation: ex.token,
        mentions: [hr.id],
      });
    });
    // HR holds hr:payroll:read itself, and reads payroll for whoever the delegation says.
    hr.agent.on('message', async (d: Delivery) => {
      if (!hr.agent.tokens.current()) return;
      const tc = newId('toolCall');
      const principal = d.message.onBehalfOf?.principal ?? '?';
      try {
        await hr.agent.tools.call(
          'hr.payroll.read',
          { employee: principal },
          () => {
            ran++;
            return { salary: 'confidential' };
          },
          { action: 'hr:payroll:read', id: tc },
        );
        calls.push({ for: principal, tc, outcome: 'ran' });
      } catch (err) {
        calls.push({ for: principal, tc, outcome: err as ParleyError });
      }
    });

    // alice cannot even delegate what she does not hold.
    assert.equal(
      await codeOf(alice.agent.tokens.issue(support.id, ['hr:payroll:read'])),
      'PERMISSION_DENIED',
    );
    const t1 = await alice.agent.tokens.issue(support.id, ['tickets:*', 'hr:records:read']);
    assert.deepEqual(t1.chain, [support.id]);
    await alice.agent.rooms
      .room(room)
      .send('What is my salary?', { delegation: t1.token, mentions: [support.id] });
    await waitFor(() => calls.some((c) => c.for === alice.id), 'HR to try the call for alice');

    const forAlice = calls.find((c) => c.for === alice.id);
    assert.ok(forAlice && forAlice.outcome !== 'ran', 'the call for alice must be refused');
    const refusal = forAlice.outcome as ParleyError;
    assert.ok(isParleyError(refusal, 'PERMISSION_DENIED'));
    assert.equal(refusal.details?.decidedBy, alice.id, refusal.message);
    assert.match(refusal.message, /does not hold hr:payroll:read/);
    assert.equal(ran, 0, 'the tool never ran for alice');

    // What the receivers saw: "support, acting for alice, asks…", with the hand-over to HR.
    const toSupport = support.got.find((d) => d.message.sender.id === alice.id);
    assert.deepEqual(toSupport?.message.onBehalfOf?.chain, [support.id]);
    assert.equal(toSupport?.message.onBehalfOf?.principal, alice.id);
    const toHr = hr.got.find(
      (d) => d.message.sender.id === support.id && d.message.onBehalfOf?.principal === alice.id,
    );
    assert.deepEqual(toHr?.message.onBehalfOf?.chain, [support.id, hr.id]);
    assert.deepEqual(
      toHr?.message.onBehalfOf?.scope,
      ['hr:records:read'],
      'tickets:* dropped: not on HR’s card',
    );
    assert.equal(toHr?.message.causedBy, toSupport?.message.id);

    // The audit chain shows which link decided.
    const chain = await alice.agent.call(governanceApi.auditChain, { of: forAlice.tc }, { timeout: 30_000 });
    assert.equal(chain.hops.length, 3);
    const [tool, m2, m1] = chain.hops;
    assert.equal(tool?.kind, 'tool_call');
    assert.equal(tool?.decision?.allow, false);
    assert.equal(tool?.decision?.decidedBy, alice.id);
    assert.equal(tool?.status, 'denied');
    assert.deepEqual(tool?.onBehalfOf, [alice.id, support.id, hr.id]);
    assert.equal(m2?.actor, support.id);
    assert.deepEqual(m2?.onBehalfOf, [alice.id, support.id, hr.id]);
    assert.equal(m1?.actor, alice.id);
    assert.equal(chain.origin, alice.id);
    assert.equal(chain.complete, true);

    // The same request from bob, who holds the scope, goes through the same two agents and is allowed.
    const t2 = await bob.agent.tokens.issue(support.id, ['tickets:*', 'hr:payroll:read']);
    await bob.agent.rooms
      .room(room)
      .send('What is my salary?', { delegation: t2.token, mentions: [support.id] });
    await waitFor(() => calls.some((c) => c.for === bob.id), 'HR to try the call for bob');
    assert.equal(calls.find((c) => c.for === bob.id)?.outcome, 'ran');
    assert.equal(ran, 1);
    const bobChain = await bob.agent.call(
      governanceApi.auditChain,
      { of: calls.find((c) => c.for === bob.id)?.tc as string },
      { timeout: 30_000 },
    );
    assert.equal(bobChain.hops[0]?.decision?.allow, true);
    assert.equal(bobChain.hops[0]?.status, 'ok');
    assert.equal(bobChain.origin, bob.id);
  });

  it('exchange refuses scope escalation, exp extension, depth past the cap and a non-actor', async () => {
    // An agent of another org: not a contact, and in no room with support.
    const elsewhere = await createWorld(parley);
    const outsider = await elsewhere.agentOf(
      await elsewhere.person('other-lead', ['hr:*'], { listen: false }),
      'outsider',
      ['hr:records:read'],
    );
    const t = await alice.agent.tokens.issue(support.id, ['hr:records:read'], { ttlSeconds: 600 });
    const before = await tokenKeys();
    const refusals = {
      escalation: await codeOf(
        support.agent.tokens.exchange(t.token, hr.id, {
          room,
          scope: ['hr:records:read', 'hr:payroll:read'],
        }),
      ),
      expExtension: await codeOf(support.agent.tokens.exchange(t.token, hr.id, { room, ttlSeconds: 3_600 })),
      nonActor: await codeOf(hr.agent.tokens.exchange(t.token, extra[0]?.id as string, { room })),
      notContact: await codeOf(support.agent.tokens.exchange(t.token, outsider.id)),
      self: await codeOf(support.agent.tokens.exchange(t.token, support.id, { room })),
    };
    assert.deepEqual(refusals, {
      escalation: 'PERMISSION_DENIED',
      expExtension: 'PERMISSION_DENIED',
      nonActor: 'PERMISSION_DENIED',
      notContact: 'NO_CONSENT',
      self: 'INVALID_ARGUMENT',
    });
    assert.equal(await tokenKeys(), before, 'no token was made');

    // Depth: support → hr → relay-1 → relay-2 is 4 actors (the cap); a 5th is refused.
    const a = await support.agent.tokens.exchange(t.token, hr.id, { room, ttlSeconds: 300 });
    assert.ok(new Date(a.expiresAt) <= new Date(t.expiresAt), 'exp never grows');
    const b = await hr.agent.tokens.exchange(a.token, extra[0]?.id as string, { room });
    const c = await extra[0]?.agent.tokens.exchange(b.token, extra[1]?.id as string, { room });
    assert.deepEqual(c?.chain, [support.id, hr.id, extra[0]?.id, extra[1]?.id]);
    const tooDeep = extra[1]?.agent.tokens.exchange(c?.token as string, extra[2]?.id as string, { room });
    assert.equal(await codeOf(tooDeep as Promise<unknown>), 'PERMISSION_DENIED');
    assert.equal(await tokenKeys(), before + 3);

    // Contacts need no room: in this org everyone is pre-approved (the consent service says so).
    const viaContact = await support.agent.tokens.exchange(t.token, hr.id);
    assert.deepEqual(viaContact.chain, [support.id, hr.id]);
    await elsewhere.close();
  });

  it('refuses forged, altered, unsigned, expired and revoked tokens at authorize and at the ingress', async () => {
    const real = await alice.agent.tokens.issue(support.id, ['hr:records:read']);
    const key = parley.home.delegationKeys.keys[0] as {
      kty: string;
      crv: string;
      x: string;
      d: string;
      kid: string;
    };
    const claims = support.agent.tokens.read(real.token).claims;
    const stranger = await import('node:crypto').then((c) =>
      c.generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' }),
    );
    const now = Math.floor(Date.now() / 1000);
    const tokens = {
      wrongKey: await signToken(
        { ...(stranger as { x: string; d: string }), kty: 'OKP', crv: 'Ed25519', kid: key.kid },
        {
          ...claims,
          jti: newId('token'),
        },
      ),
      unknownKid: await signToken(
        { ...(stranger as { x: string; d: string }), kty: 'OKP', crv: 'Ed25519', kid: 'who' },
        {
          ...claims,
          jti: newId('token'),
        },
      ),
      algNone: unsignedToken(real.token),
      altered: alterToken(real.token, (c) => {
        c.scope = 'hr:records:read hr:payroll:read';
      }),
      otherActor: alterToken(real.token, (c) => {
        c.act = actClaimOf([hr.id]);
      }),
      expired: await signToken(key, { ...claims, jti: newId('token'), iat: now - 7200, exp: now - 3600 }),
      garbage: 'not.a.token',
    };
    const expected = {
      wrongKey: 'UNAUTHENTICATED',
      unknownKid: 'UNAUTHENTICATED',
      algNone: 'UNAUTHENTICATED',
      altered: 'UNAUTHENTICATED',
      otherActor: 'UNAUTHENTICATED',
      expired: 'EXPIRED',
      garbage: 'UNAUTHENTICATED',
    };
    const sent = support.got.length;
    const atAuthorize: Record<string, string> = {};
    const atIngress: Record<string, string> = {};
    for (const [name, token] of Object.entries(tokens)) {
      const d = await support.agent.call(governanceApi.authorize, { token, action: 'hr:records:read' });
      atAuthorize[name] = d.allow ? 'allowed' : (d.code ?? 'no code');
      atIngress[name] = await codeOf(
        support.agent.rooms.room(room).send(`under ${name}`, { delegation: token }),
      );
    }
    assert.deepEqual(atAuthorize, expected);
    assert.deepEqual(atIngress, expected);

    // The real one works: for support acting, and as alice's hand-over; not for anyone else.
    const ok = await support.agent.call(governanceApi.authorize, {
      token: real.token,
      action: 'hr:records:read',
    });
    assert.equal(ok.allow, true, ok.reason);
    await support.agent.rooms.room(room).send('acting for alice', { delegation: real.token });
    assert.equal(
      await codeOf(hr.agent.rooms.room(room).send('not mine', { delegation: real.token })),
      'PERMISSION_DENIED',
    );
    const notMine = await hr.agent.call(governanceApi.authorize, {
      token: real.token,
      action: 'hr:records:read',
    });
    assert.equal(notMine.allow, false);

    // Revoked: the token and one exchanged from it, at both places, for every replica's cache.
    const child = await support.agent.tokens.exchange(real.token, hr.id, { room });
    await alice.agent.tokens.revoke({ jti: real.jti }, 'alice changed her mind');
    for (const [who, token] of [
      [support, real.token],
      [hr, child.token],
    ] as const) {
      const d = await who.agent.call(governanceApi.authorize, { token, action: 'hr:records:read' });
      assert.equal(d.code, 'REVOKED', d.reason);
      await waitFor(
        async () =>
          (await codeOf(who.agent.rooms.room(room).send('revoked?', { delegation: token }))) === 'REVOKED',
        'the ingress to refuse the revoked token',
        2_000,
      );
    }
    // Nothing refused reached anyone.
    assert.ok(
      support.got.slice(sent).every((d) => !/^under /.test(textOf(d))),
      'a refused message was delivered',
    );

    // By principal: every token alice issued so far, not the ones after.
    const older = await alice.agent.tokens.issue(support.id, ['hr:records:read']);
    const revoked = await alice.agent.tokens.revoke({ principal: alice.id }, 'lost laptop');
    assert.equal(revoked.revoked, 'principal');
    assert.equal(
      (await support.agent.call(governanceApi.authorize, { token: older.token, action: 'hr:records:read' }))
        .code,
      'REVOKED',
    );
    // Tokens issued in the same second as the revocation count as before it: wait for the next one.
    await waitFor(
      () => Date.now() >= (Math.floor(new Date(revoked.at).getTime() / 1000) + 1) * 1000,
      'the next second',
    );
    const newer = await alice.agent.tokens.issue(support.id, ['hr:records:read']);
    assert.equal(
      (await support.agent.call(governanceApi.authorize, { token: newer.token, action: 'hr:records:read' }))
        .allow,
      true,
    );
    // Only the principal, an actor of the chain or an admin may revoke a token.
    assert.equal(await codeOf(bob.agent.tokens.revoke({ jti: newer.jti })), 'NOT_FOUND');
  });

  it('drops cached allows as soon as the token is revoked', async () => {
    const t = await bob.agent.tokens.issue(support.id, ['hr:payroll:read']);
    const ex = await support.agent.tokens.exchange(t.token, hr.id, { room });
    let runs = 0;
    hr.agent.tools.invalidate();
    const call = () =>
      hr.agent.tools.call('hr.payroll.read', { employee: bob.id }, () => ++runs, {
        onBehalfOf: ex.token,
        action: 'hr:payroll:read',
      });
    await call();
    await call();
    assert.equal(runs, 2);
    assert.equal(hr.agent.tools.cached, 1, 'the allow is cached');
    await bob.agent.tokens.revoke({ jti: t.jti }, 'done');
    await waitFor(() => hr.agent.tools.cached === 0, 'governance to tell HR to drop its cached allow', 2_000);
    assert.equal(await codeOf(call()), 'REVOKED');
    assert.equal(runs, 2);
  });
});
