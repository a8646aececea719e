/**
 * External A2A agents in rooms: an `@a2a-js/sdk` server (real HTTP, express) imported with
 * `parley agent import-a2a`, invited into a room with a human and a Parley agent; it answers (with
 * the room history as context), streams, asks for input (the humans are mentioned), is cancelled,
 * and one trace spans both sides (the Parley message's trace id arrives as `traceparent`). A
 * signed card with a bad signature and a card on a private address are refused.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import {
  A2A_DELEGATION_HEADER,
  a2aApi,
  governanceApi,
  type HistoryEntry,
  newId,
  registryApi,
  request,
} from '@parley/contracts';
import { loadTelemetryConfig } from '@parley/kit';
import type { Agent } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import {
  codeOf,
  connectService,
  connectTo,
  createAgent,
  type OtlpReceiver,
  startOtlpReceiver,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { vendorAgent } from './a2a-vendor.js';

/** Verifies a call token as a different callee would (its own card URL as the audience). */
const jwtVerifyElsewhere = (token: string, jwksUrl: string) =>
  jwtVerify(token, createRemoteJWKSet(new URL(jwksUrl)), {
    issuer: 'parley',
    audience: 'http://other.example/.well-known/agent-card.json',
  });

describe('A2A outbound: external A2A agents as room participants', () => {
  let parley: TestParley;
  let admin: Agent;
  let vendor: Awaited<ReturnType<typeof vendorAgent>>;
  let helperId: string;
  let worker: Agent;
  let room: string;
  let receiver: OtlpReceiver;

  const texts = async () =>
    (await admin.rooms.room(room).history({ order: 'oldest', limit: 200 })).entries.filter(
      (e: HistoryEntry) => e.message.sender.id === helperId,
    );
  const textOf = (e: HistoryEntry) => e.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');

  before(async () => {
    vendor = await vendorAgent();
    receiver = await startOtlpReceiver();
    parley = await startParley({
      gateway: { PARLEY_WEBHOOK_ALLOW_PRIVATE: '127.0.0.1' },
      telemetry: loadTelemetryConfig({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      }),
      telemetryBatch: { scheduledDelayMillis: 20 },
    });
    vendor.trust(`${parley.httpUrl}/a2a/jwks.json`);
    const tracer = parley.telemetry?.tracer('person');
    admin = await parley.connect(await readFile(parley.home.paths.adminCreds, 'utf8'), {
      presence: false,
      ...(tracer ? { tracer } : {}),
    });
    // The admin may delegate tickets:read to the worker (for the delegation chain below).
    await admin.call(governanceApi.setGrants, {
      participant: parley.home.state.admin.id as never,
      scopes: ['tickets:*'],
    });
    const w = await createAgent(admin, { name: 'room-worker', scopes: ['tickets:read'] } as never);
    worker = await connectTo(parley, w.creds);
    worker.on('message', async (d) => {
      if (d.message.mentions.includes(w.agent.id))
        await worker.rooms.room(d.room).send('worker here', { replyTo: d.message.id });
    });
    await worker.listening;
  });
  after(async () => {
    await worker?.close();
    await admin?.close();
    await parley?.destroy();
    await vendor?.close();
    await receiver?.close();
  });

  it('parley agent import-a2a registers it as runtime a2a; it is discoverable', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(
      [
        '--json',
        'agent',
        'import-a2a',
        vendor.cardUrl,
        '--owner',
        parley.home.state.admin.id,
        '--server',
        parley.natsUrl,
        '--as',
        parley.home.paths.adminCreds,
      ],
      { out: (l) => out.push(l), err: (l) => err.push(l) },
    );
    assert.equal(code, 0, err.join('\n'));
    const r = JSON.parse(out.join('\n')) as { agent: string; streaming: boolean; signed: boolean };
    helperId = r.agent;
    assert.equal(r.streaming, true);
    assert.equal(r.signed, false);
    const found = await admin.directory.discover({ runtime: 'a2a' } as never);
    assert.ok(JSON.stringify(found).includes(helperId));
  });

  it('verifies a signed card; refuses one whose signature does not verify, and a card on a private address', async () => {
    const owner = parley.home.state.admin.id;
    const signed = await admin.call(a2aApi.importA2a, { cardUrl: vendor.goodSignedCardUrl, owner });
    assert.equal(signed.signed, true);
    assert.equal(
      await codeOf(admin.call(a2aApi.importA2a, { cardUrl: vendor.signedCardUrl, owner })),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      await codeOf(
        admin.call(a2aApi.importA2a, { cardUrl: 'http://10.255.255.1/.well-known/agent-card.json', owner }),
      ),
      'PERMISSION_DENIED',
    );
  });

  it('invited into a room with a human and a Parley agent: answers with the history as context, in one trace', async () => {
    const created = await admin.rooms.create('vendor room', { members: [helperId, worker.id] });
    room = created.id;
    const r = admin.rooms.room(room);
    await r.send('good morning', { mentions: [worker.id] });
    await waitFor(
      async () => (await r.history({ limit: 10 })).entries.some((e) => e.message.sender.id === worker.id),
      'the worker’s answer',
    );
    const sent = await r.send('@helper summarise the morning', { mentions: [helperId] });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e).startsWith('remote: summarise')),
      'the A2A agent’s answer',
    );
    const answer = (await texts()).find((e) => textOf(e).startsWith('remote: summarise')) as HistoryEntry;
    assert.equal(answer.message.replyTo, sent.id);
    assert.match(textOf(answer), /saw [2-9]\d* earlier/);
    // The A2A message id is the Parley message id (a retry is the same message).
    assert.ok(vendor.seen.some((s) => s.messageId === sent.id));
    // One trace: the request's trace id reaches the vendor as traceparent.
    const request = (await r.history({ limit: 20 })).entries.find((e) => e.message.id === sent.id);
    const traceId = request?.message.trace?.traceparent.split('-')[1];
    assert.ok(traceId, 'the message has a trace');
    assert.equal(vendor.seen.find((s) => s.messageId === sent.id)?.traceparent?.split('-')[1], traceId);
    // …and Parley's own spans of that message are in the same trace.
    const spans = await receiver.waitForSpans((all) => all.filter((s) => s.traceId === traceId).length >= 2, {
      what: 'Parley spans of the request (the send and the ingress)',
    });
    assert.ok(spans.filter((s) => s.traceId === traceId).length >= 2);
  });

  it('every call carries a signed delegation token the vendor verifies with the gateway JWKS; tampered, expired or missing tokens are refused', async () => {
    const adminId = parley.home.state.admin.id;
    // A delegation chain: the admin delegates tickets:read to the worker, which asks the A2A agent.
    const t = await admin.tokens.issue(worker.id, ['tickets:read']);
    const sent = await worker.rooms
      .room(room)
      .send('@helper look up ticket 7', { mentions: [helperId], delegation: t.token });
    await waitFor(
      async () =>
        (await texts()).some((e) => e.message.replyTo === sent.id && textOf(e).startsWith('remote:')),
      'the answer to the delegated request',
    );
    const claims = vendor.delegations.find((c) => c.messageId === sent.id);
    assert.ok(claims, 'the vendor verified a token for the message');
    assert.equal(claims.sub, adminId);
    assert.deepEqual(claims.act, { sub: helperId, act: { sub: worker.id } });
    assert.deepEqual(claims.aud, [vendor.cardUrl]);
    assert.equal(claims.room, room);
    assert.equal(claims.sender, worker.id);
    assert.equal(claims.parent, t.jti);
    assert.equal(claims.scope, 'tickets:read');
    assert.ok(claims.exp - claims.iat <= 300, `short-lived: ${claims.exp - claims.iat} s`);
    // A human's own message: the human is the subject, the A2A agent the only actor.
    const own = vendor.delegations.find((c) => c.sender === adminId);
    assert.ok(own);
    assert.deepEqual(own.act, { sub: helperId });
    assert.equal(own.parent, undefined);

    const call = (token?: string) =>
      fetch(vendor.jsonRpcUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { [A2A_DELEGATION_HEADER]: token } : {}) },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'none' } }),
      });
    // Tampered: another subject in the payload, the signature kept.
    const [h, p, sig] = claims.token.split('.') as [string, string, string];
    const forged = JSON.parse(Buffer.from(p, 'base64url').toString());
    forged.sub = worker.id;
    const tampered = `${h}.${Buffer.from(JSON.stringify(forged)).toString('base64url')}.${sig}`;
    assert.equal((await call(tampered)).status, 401);
    assert.equal(vendor.refusedTokens.at(-1), 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED');
    assert.equal((await call()).status, 401);
    // Expired: the same token, verified after its exp.
    await assert.rejects(vendor.verify(claims.token, new Date((claims.exp + 1) * 1000)), {
      code: 'ERR_JWT_EXPIRED',
    });
    // For another audience it does not verify.
    await assert.rejects(jwtVerifyElsewhere(claims.token, `${parley.httpUrl}/a2a/jwks.json`), {
      code: 'ERR_JWT_CLAIM_VALIDATION_FAILED',
    });
    // Only the gateway gets call tokens minted.
    assert.equal(
      await codeOf(
        admin.call(governanceApi.mintA2aCallToken, {
          actor: helperId as never,
          sender: adminId as never,
          audience: vendor.cardUrl,
          room: room as never,
          messageId: sent.id as never,
        }),
      ),
      'PERMISSION_DENIED',
    );
  });

  it('governance mints call tokens only from a live delegation whose current actor sent the message', async () => {
    const adminId = parley.home.state.admin.id;
    // As the gateway (svc_gateway), the only caller it mints for.
    const gw = await connectService(parley, 'gateway');
    try {
      const mint = (tokenId: string | undefined, sender: string) =>
        request(gw, 'svc_gateway', governanceApi.mintA2aCallToken, {
          actor: helperId as never,
          sender: sender as never,
          audience: vendor.cardUrl,
          room: room as never,
          messageId: newId('message') as never,
          ...(tokenId ? { tokenId: tokenId as never } : {}),
        });
      const t = await admin.tokens.issue(worker.id, ['tickets:read']);
      const ok = await mint(t.jti, worker.id);
      assert.deepEqual(ok.chain, [worker.id, helperId]);
      assert.equal(ok.principal, adminId);
      // The token's current actor is the worker: nobody else may have it carried on.
      assert.equal(await codeOf(mint(t.jti, adminId)), 'PERMISSION_DENIED');
      assert.equal(await codeOf(mint(newId('token'), worker.id)), 'NOT_FOUND');
      await admin.tokens.revoke({ jti: t.jti });
      assert.equal(await codeOf(mint(t.jti, worker.id)), 'REVOKED');
    } finally {
      await gw.close();
    }
  });

  it('streams: the working update arrives as a status message before the answer', async () => {
    await admin.rooms.room(room).send('stream the report', { mentions: [helperId] });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e).startsWith('remote: stream')),
      'the streamed answer',
    );
    const mine = await texts();
    const status = mine.findIndex((e) => e.message.kind === 'status' && textOf(e) === 'working on it');
    const final = mine.findIndex((e) => textOf(e).startsWith('remote: stream'));
    assert.ok(status >= 0 && status < final, JSON.stringify(mine.map((e) => [e.message.kind, textOf(e)])));
  });

  it('input-required mentions the humans; their answer continues the same A2A task', async () => {
    const r = admin.rooms.room(room);
    await r.send('ask me something', { mentions: [helperId] });
    await waitFor(async () => (await texts()).some((e) => textOf(e) === 'which region?'), 'the question');
    const q = (await texts()).find((e) => textOf(e) === 'which region?') as HistoryEntry;
    assert.equal(q.message.metadata?.['a2a.state'], 'input-required');
    assert.ok(q.message.mentions.includes(parley.home.state.admin.id));
    await r.send('eu-west', { mentions: [helperId], replyTo: q.message.id });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e) === 'region noted: eu-west'),
      'the follow-up answer',
    );
  });

  it('a cancelled request sends tasks/cancel', async () => {
    const r = admin.rooms.room(room);
    const job = await r.send('slow job please', { mentions: [helperId] });
    await waitFor(
      async () => (await texts()).some((e) => textOf(e) === 'started the long job'),
      'the job to start',
    );
    await r.send('cancel', {
      kind: 'task.update',
      replyTo: job.id,
      mentions: [helperId],
      metadata: { 'a2a.state': 'canceled' },
    });
    await waitFor(() => vendor.canceled.length === 1, 'tasks/cancel at the vendor');
    await waitFor(
      async () =>
        (await texts()).some(
          (e) => e.message.replyTo === job.id && e.message.metadata?.['a2a.state'] === 'canceled',
        ),
      'the cancellation in the room',
    );
  });

  it('unreachable: shows offline, and the message is answered once the agent is back (nothing lost)', async () => {
    const flaky = await vendorAgent('Flaky Vendor');
    flaky.trust(`${parley.httpUrl}/a2a/jwks.json`);
    try {
      const imported = await admin.call(a2aApi.importA2a, {
        cardUrl: flaky.cardUrl,
        owner: parley.home.state.admin.id,
      });
      const r = admin.rooms.room((await admin.rooms.create('flaky', { members: [imported.agent] })).id);
      const from = async () =>
        (await r.history({ order: 'oldest', limit: 100 })).entries.filter(
          (e) => e.message.sender.id === imported.agent,
        );
      const stateOf = async () =>
        (await admin.call(registryApi.presence, { participants: [imported.agent] })).presence[imported.agent]
          ?.state;
      await r.send('first', { mentions: [imported.agent] });
      await waitFor(
        async () => (await from()).some((e) => textOf(e).startsWith('remote: first')),
        'the first answer',
      );
      await waitFor(async () => (await stateOf()) === 'online', 'online after a successful call');
      await flaky.down();
      const lost = await r.send('while you were down', { mentions: [imported.agent] });
      await waitFor(async () => (await stateOf()) === 'offline', 'offline while unreachable', 20_000);
      await flaky.up();
      await waitFor(
        async () =>
          (await from()).some(
            (e) => e.message.replyTo === lost.id && textOf(e).startsWith('remote: while you were down'),
          ),
        'the answer after the agent came back',
        40_000,
      );
      assert.equal(flaky.seen.filter((x) => x.messageId === lost.id).length, 1);
    } finally {
      await flaky.close();
    }
  });
});
