/**
 * Who the gateway acts for: API keys (one agent each, scopes, revocation, expiry), OIDC tokens of a
 * local issuer (discovery + JWKS over real HTTP; forged, expired, not-yet-valid, wrong-audience,
 * wrong-issuer and unsigned tokens refused; key rotation; verified email → user; just-in-time
 * sign-up only for allowed domains), the one-time login link, and the NATS side of it: requests go
 * out as the principal itself, with its own refusals.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kvm } from '@nats-io/kv';
import {
  buckets,
  CredentialRecord,
  gatewayApi,
  governanceApi,
  policyKeys,
  registryApi,
  roomsApi,
} from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import {
  codeOf,
  connectAdmin,
  connectService,
  connectTo,
  createAgent,
  createHuman,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import WebSocket from 'ws';
import { http, startIssuer, strangerKey, type TestIssuer, unsignedToken } from './helpers.js';

describe('gateway authentication', () => {
  let parley: TestParley;
  let issuer: TestIssuer;
  let admin: Agent;
  let base: string;
  const AUD = 'parley-test';

  before(async () => {
    issuer = await startIssuer();
    parley = await startParley({
      gateway: {
        PARLEY_OIDC_ISSUER: issuer.issuer,
        PARLEY_OIDC_AUDIENCE: AUD,
        PARLEY_OIDC_CLOCK_SKEW_S: '30',
        // Key rotation is seen at the next token with the new key id (production: at most every 30 s).
        PARLEY_OIDC_JWKS_COOLDOWN_S: '0',
        PARLEY_OIDC_JIT_DOMAINS: 'jit.example',
      },
    });
    admin = await connectAdmin(parley);
    base = parley.httpUrl;
  });
  after(async () => {
    await admin?.close();
    await parley?.destroy();
    await issuer?.close();
  });

  describe('API keys', () => {
    it('a key acts as exactly its agent, and stops at once when revoked', async () => {
      const { agent } = await createAgent(admin, { name: 'crm-bridge' });
      const { key, info } = await admin.call(gatewayApi.createKey, { agent: agent.id, label: 'salesforce' });
      assert.match(key, /^pak_[0-9A-Z]{26}\.[A-Za-z0-9_-]{43}$/);
      const me = await http(base, '/v1/me', { token: key });
      assert.equal(me.status, 200);
      assert.equal(me.body.id, agent.id);

      const listed = await admin.call(gatewayApi.listKeys, { agent: agent.id });
      assert.deepEqual(
        listed.keys.map((k) => k.id),
        [info.id],
      );
      assert.equal(
        JSON.stringify(listed).includes(key.split('.')[1] as string),
        false,
        'no secret in listings',
      );

      await admin.call(gatewayApi.revokeKey, { id: info.id });
      const after = await http(base, '/v1/me', { token: key });
      assert.equal(after.status, 401);
      assert.equal(after.body.code, 'REVOKED');
      assert.match(after.contentType, /^application\/problem\+json/);
    });

    it('a wrong secret, a malformed key or none at all is 401 as problem+json', async () => {
      const { agent } = await createAgent(admin, { name: 'keyed' });
      const { key } = await admin.call(gatewayApi.createKey, { agent: agent.id });
      const forged = `${key.split('.')[0]}.${'A'.repeat(43)}`;
      for (const token of [forged, 'pak_nope', 'garbage']) {
        const r = await http(base, '/v1/me', { token });
        assert.equal(r.status, 401, token);
        assert.equal(r.body.code, 'UNAUTHENTICATED');
      }
      const none = await http(base, '/v1/me');
      assert.equal(none.status, 401);
      assert.equal(none.body.type, 'urn:parley:error:UNAUTHENTICATED');
      assert.match(String(none.headers.get('www-authenticate')), /^Bearer realm="parley"/);
    });

    it('a read-only key cannot write', async () => {
      const { agent } = await createAgent(admin, { name: 'reader' });
      const { key } = await admin.call(gatewayApi.createKey, { agent: agent.id, scopes: ['read'] });
      assert.equal((await http(base, '/v1/rooms', { token: key })).status, 200);
      const r = await http(base, '/v1/rooms', { token: key, body: { title: 'nope' } });
      assert.equal(r.status, 403);
      assert.equal(r.body.code, 'PERMISSION_DENIED');
      const rooms = await http(base, '/v1/rooms', { token: key });
      assert.deepEqual(rooms.body.rooms, [], 'nothing was created');
    });

    it('only the agent, its owner or an org admin may mint its keys', async () => {
      const { user, creds } = await createHuman(admin, { org: parley.home.state.org.id, name: 'mallory' });
      const mallory = await connectTo(parley, creds);
      try {
        const { agent } = await createAgent(admin, { name: 'not-mallorys', visibility: 'org' });
        assert.equal(
          await codeOf(mallory.call(gatewayApi.createKey, { agent: agent.id })),
          'PERMISSION_DENIED',
        );
        assert.ok(user.id);
      } finally {
        await mallory.close();
      }
    });

    it('a key never reaches further than its agent over NATS: another agent’s room is refused the same way', async () => {
      const { agent: a } = await createAgent(admin, { name: 'agent-a' });
      const { agent: b, creds: bCreds } = await createAgent(admin, { name: 'agent-b' });
      const bAgent = await connectTo(parley, bCreds);
      try {
        const room = await bAgent.rooms.create('b only');
        const { key } = await admin.call(gatewayApi.createKey, { agent: a.id });
        const overHttp = await http(base, `/v1/rooms/${room.id}/messages`, {
          token: key,
          body: { text: 'hi' },
        });
        const aNats = await connectTo(
          parley,
          (await admin.call(governanceApi.rotateCredentials, { participant: a.id })).creds,
        );
        const overNats = await codeOf(aNats.rooms.room(room.id).send('hi'));
        await aNats.close();
        assert.equal(overHttp.body.code, overNats);
        assert.equal(overHttp.status, 403);
        assert.equal(
          (await bAgent.rooms.room(room.id).history()).entries.filter((e) => e.message.kind === 'message')
            .length,
          0,
        );
        assert.ok(b.id);
      } finally {
        await bAgent.close();
      }
    });

    it('renews a principal’s credentials without dropping its live stream', async () => {
      const { agent } = await createAgent(admin, { name: 'renewed' });
      const { creds: peerCreds } = await createAgent(admin, { name: 'renew-peer' });
      const { key } = await admin.call(gatewayApi.createKey, { agent: agent.id });
      const p = await connectTo(parley, peerCreds);
      try {
        const room = await p.rooms.create('renewal', { members: [agent.id] });
        const frames: string[] = [];
        const ws = new WebSocket(`${base.replace(/^http/, 'ws')}/v1/stream`, {
          headers: { authorization: `Bearer ${key}` },
        });
        ws.on('message', (d) => {
          const f = JSON.parse(String(d)) as { event: string; message: { parts: { text?: string }[] } };
          if (f.event === 'message') frames.push(f.message.parts[0]?.text ?? '');
        });
        await new Promise((r) => ws.once('open', r));
        await room.send('before');
        await waitFor(() => frames.includes('before'), 'the first frame');
        const keysOf = async () => {
          const svc = await connectService(parley);
          try {
            const kv = await new Kvm(svc).open(buckets.policy);
            return CredentialRecord.parse((await kv.get(policyKeys.creds(agent.id)))?.json()).keys.length;
          } finally {
            await svc.close();
          }
        };
        const before = await keysOf();
        await parley.gateway.pool.renew(agent.id);
        assert.equal(await keysOf(), before + 1, 'a fresh session key was minted');
        await room.send('after');
        await waitFor(() => frames.includes('after'), 'a frame after the renewal, on the same socket');
        assert.equal((await http(base, '/v1/me', { token: key })).body.id, agent.id);
        ws.close();
      } finally {
        await p.close();
      }
    });

    it('session credentials are minted for the gateway alone', async () => {
      const other = await connectService(parley, 'rooms');
      try {
        const { request } = await import('@parley/contracts');
        const code = await codeOf(
          request(other, 'svc_rooms', governanceApi.sessionCredentials, {
            participant: parley.home.state.admin.id,
          }),
        );
        assert.equal(code, 'PERMISSION_DENIED');
        assert.equal(
          await codeOf(
            admin.call(governanceApi.sessionCredentials, { participant: parley.home.state.admin.id }),
          ),
          'PERMISSION_DENIED',
        );
      } finally {
        await other.close();
      }
    });

    it('revoking the agent revokes what the gateway holds for it', async () => {
      const { agent } = await createAgent(admin, { name: 'to-revoke' });
      const { key } = await admin.call(gatewayApi.createKey, { agent: agent.id });
      assert.equal((await http(base, '/v1/rooms', { token: key, body: { title: 'before' } })).status, 201);
      assert.equal(parley.gateway.pool.has(agent.id), true, 'the gateway holds a connection for it');
      await admin.call(governanceApi.revokeCredentials, { participant: agent.id, reason: 'test' });
      await waitFor(() => !parley.gateway.pool.has(agent.id), 'the pooled connection closed');
      const r = await http(base, '/v1/rooms', { token: key, body: { title: 'after' } });
      assert.equal(r.status, 401);
      assert.equal(r.body.code, 'REVOKED');
    });
  });

  describe('OIDC', () => {
    const claims = (over: Record<string, unknown> = {}) => ({
      sub: `sub-${Math.random().toString(36).slice(2)}`,
      aud: AUD,
      email_verified: true,
      ...over,
    });

    it('a verified email of an existing user signs in as that user', async () => {
      const r = await admin.call(registryApi.createUser, {
        name: 'ada',
        org: parley.home.state.org.id,
        email: 'ada@corp.example',
      });
      const token = await issuer.sign(claims({ email: 'ADA@corp.example' }));
      const me = await http(base, '/v1/me', { token });
      assert.equal(me.status, 200, JSON.stringify(me.body));
      assert.equal(me.body.id, r.user.id);
    });

    it('refuses forged, expired, not-yet-valid, wrong-audience, wrong-issuer and unsigned tokens', async () => {
      await admin.call(registryApi.createUser, {
        name: 'bob',
        org: parley.home.state.org.id,
        email: 'bob@corp.example',
      });
      const good = claims({ email: 'bob@corp.example' });
      assert.equal((await http(base, '/v1/me', { token: await issuer.sign(good) })).status, 200);
      const cases: [string, string, string][] = [
        ['forged', await issuer.sign(good, { key: await strangerKey() }), 'UNAUTHENTICATED'],
        ['expired', await issuer.sign(good, { expiresIn: Math.floor(Date.now() / 1000) - 120 }), 'EXPIRED'],
        [
          'not yet valid',
          await issuer.sign({ ...good, nbf: Math.floor(Date.now() / 1000) + 600 }),
          'UNAUTHENTICATED',
        ],
        ['wrong audience', await issuer.sign({ ...good, aud: 'someone-else' }), 'UNAUTHENTICATED'],
        ['wrong issuer', await issuer.sign({ ...good, iss: 'https://evil.example' }), 'UNAUTHENTICATED'],
        [
          'alg none',
          unsignedToken({ ...good, iss: issuer.issuer, exp: Math.floor(Date.now() / 1000) + 300 }),
          'UNAUTHENTICATED',
        ],
      ];
      for (const [what, token, code] of cases) {
        const r = await http(base, '/v1/me', { token });
        assert.equal(r.status, 401, what);
        assert.equal(r.body.code, code, what);
      }
    });

    it('tolerates bounded clock skew only', async () => {
      await admin.call(registryApi.createUser, {
        name: 'cy',
        org: parley.home.state.org.id,
        email: 'cy@corp.example',
      });
      const now = Math.floor(Date.now() / 1000);
      const within = await issuer.sign(claims({ email: 'cy@corp.example', nbf: now + 10 }));
      assert.equal((await http(base, '/v1/me', { token: within })).status, 200);
      const past = await issuer.sign(claims({ email: 'cy@corp.example' }), { expiresIn: now - 10 });
      assert.equal((await http(base, '/v1/me', { token: past })).status, 200, 'expired 10 s ago, skew 30 s');
    });

    it('follows key rotation at the issuer', async () => {
      await admin.call(registryApi.createUser, {
        name: 'dee',
        org: parley.home.state.org.id,
        email: 'dee@corp.example',
      });
      await http(base, '/v1/me', { token: await issuer.sign(claims({ email: 'dee@corp.example' })) });
      await issuer.rotate();
      const fetched = issuer.jwksFetches;
      const r = await http(base, '/v1/me', {
        token: await issuer.sign(claims({ email: 'dee@corp.example' })),
      });
      assert.equal(r.status, 200);
      assert.ok(issuer.jwksFetches > fetched, 'the JWKS was fetched again for the new key id');
    });

    it('creates a user at first sign-in only for an allowed domain, and links the subject', async () => {
      const sub = 'jit-subject-1';
      const token = await issuer.sign(claims({ sub, email: 'eve@jit.example', name: 'Eve' }));
      const me = await http(base, '/v1/me', { token });
      assert.equal(me.status, 200, JSON.stringify(me.body));
      assert.equal(me.body.kind, 'human');
      // The same subject later, even without an email claim, is the same user.
      const again = await http(base, '/v1/me', { token: await issuer.sign({ sub, aud: AUD }) });
      assert.equal(again.body.id, me.body.id);

      const outsider = await http(base, '/v1/me', {
        token: await issuer.sign(claims({ email: 'frank@elsewhere.example' })),
      });
      assert.equal(outsider.status, 401);
      assert.equal(outsider.body.code, 'UNAUTHENTICATED');
      const unverified = await http(base, '/v1/me', {
        token: await issuer.sign(claims({ email: 'gus@jit.example', email_verified: false })),
      });
      assert.equal(unverified.status, 401, 'an unverified email is no email');
    });
  });

  describe('login link', () => {
    it('signs the local admin in once', async () => {
      const code = await parley.gateway.createLoginCode(parley.home.state.admin.id);
      const first = await http(base, `/v1/login?code=${code}`);
      assert.equal(first.status, 200);
      const token = String(first.body.token);
      assert.match(String(first.headers.get('set-cookie')), /parley_session=ses_.*HttpOnly; SameSite=Strict/);
      const me = await http(base, '/v1/me', { token });
      assert.equal(me.body.id, parley.home.state.admin.id);
      const cookie = await http(base, '/v1/me', {
        headers: { cookie: `parley_session=${encodeURIComponent(token)}` },
      });
      assert.equal(cookie.body.id, parley.home.state.admin.id);
      const second = await http(base, `/v1/login?code=${code}`);
      assert.equal(second.status, 401, 'a login link works once');
      const created = await http(base, '/v1/rooms', {
        body: { title: 'x' },
        headers: { cookie: `parley_session=${encodeURIComponent(token)}`, origin: 'https://evil.example' },
      });
      assert.equal(created.status, 403, 'a cross-origin write with the cookie is refused');
      assert.ok(roomsApi.create);
    });
  });
});
