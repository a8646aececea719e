/**
 * Bad input on every governance API method, the usage channel and the rooms methods added for
 * governance: non-JSON, wrong types, oversized, unknown ids, callers outside their rights — each
 * gets its code, and no state changes (policy, usage, room views, room logs).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiMethod,
  buckets,
  decodeReply,
  encodeJson,
  governanceApi,
  isParleyError,
  newId,
  roomsApi,
  streams,
  subjects,
} from '@parley/contracts';
import type { Agent } from '@parley/sdk';
import { connectService, startParley, type TestParley } from '@parley/test/harness';
import * as z from 'zod';
import { codeOf, createWorld, type Member } from './fixtures/governance.js';

const enc = new TextEncoder();
const big = 'x'.repeat(70 * 1024);

async function raw(who: Agent, subject: string, body: Uint8Array): Promise<string> {
  try {
    decodeReply(z.unknown(), await who.nc.request(subject, body, { timeout: 5_000 }));
    return 'no error';
  } catch (err) {
    return isParleyError(err) ? err.code : String(err);
  }
}

describe('governance API: bad input changes nothing', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let other: Awaited<ReturnType<typeof createWorld>>;
  let owner: Member;
  let colleague: Member;
  let stranger: Member;
  let bot: Member;
  let token: string;
  let jti: string;
  let room: string;

  /** Everything a refused request must not change. */
  async function state(): Promise<string> {
    const kvm = new Kvm(svc);
    const parts: string[] = [];
    for (const b of [buckets.policy, buckets.usage, buckets.rooms]) {
      const kv = await kvm.open(b);
      const keys: string[] = [];
      for await (const k of await kv.keys()) keys.push(k);
      for (const k of keys.sort()) parts.push(`${b}/${k}@${(await kv.get(k))?.revision}`);
    }
    const jsm = await jetstreamManager(svc);
    parts.push(`rooms-log:${(await jsm.streams.info(streams.rooms)).state.last_seq}`);
    return parts.join('\n');
  }

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    world = await createWorld(parley);
    other = await createWorld(parley);
    owner = await world.person('api-owner', ['tickets:*'], { listen: false });
    colleague = await world.person('api-colleague', [], { listen: false });
    stranger = await other.person('api-stranger', ['tickets:*'], { listen: false });
    bot = await world.agentOf(owner, 'api-bot', ['tickets:*']);
    room = (await owner.agent.rooms.create('api', { members: [bot.id] })).id;
    const t = await owner.agent.tokens.issue(bot.id, ['tickets:read']);
    token = t.token;
    jti = t.jti;
  });
  after(async () => {
    await world?.close();
    await other?.close();
    await svc?.close();
    await parley?.destroy();
  });

  it('refuses non-JSON, wrongly typed and oversized requests on every method', async () => {
    const before = await state();
    const methods: [ApiMethod, unknown][] = [
      [governanceApi.jwks, {}],
      [governanceApi.issueToken, { actor: 'agt_nope', scope: 'tickets:read' }],
      [governanceApi.exchangeToken, { token: 42, actor: bot.id }],
      [governanceApi.revokeToken, { jti: 'tok_bad', principal: owner.id }],
      [governanceApi.authorize, { token, action: 'NOT A SCOPE' }],
      [
        governanceApi.recordToolCall,
        { id: 'tc_1', tool: 'x', argsDigest: 'md5', status: 'maybe', durationMs: -1 },
      ],
      [governanceApi.suspend, { agent: bot.id }],
      [governanceApi.resume, { agent: 'usr_x' }],
      [governanceApi.setGrants, { participant: bot.id, scopes: ['ok:scope'] }],
      [governanceApi.setOrgPolicy, { org: world.org.id, deny: 'everything' }],
      [governanceApi.setBudget, { agent: bot.id, owner: owner.id, tokensPerDay: 5 }],
      [governanceApi.usage, { by: 'planet', since: 'yesterday' }],
      [governanceApi.auditChain, { of: 'evt_x' }],
      [roomsApi.pause, { room: 'room_x', reason: '' }],
      [roomsApi.resume, { room: room, reason: 5 }],
    ];
    for (const [m, wrong] of methods) {
      assert.equal(
        await raw(owner.agent, m.subject(owner.id), enc.encode('{nope')),
        'INVALID_ARGUMENT',
        `${m.method} non-JSON`,
      );
      // jwks takes an empty object: there is no wrong type to send it.
      if (m.method !== 'jwks') {
        assert.equal(
          await raw(owner.agent, m.subject(owner.id), encodeJson(wrong)),
          'INVALID_ARGUMENT',
          `${m.method} wrong types`,
        );
      }
      assert.equal(
        await raw(owner.agent, m.subject(owner.id), encodeJson({ padding: big })),
        'PAYLOAD_TOO_LARGE',
        `${m.method} oversized`,
      );
    }
    // The usage channel too.
    const usage = subjects.usage(bot.id);
    assert.equal(await raw(bot.agent, usage, enc.encode('{nope')), 'INVALID_ARGUMENT');
    assert.equal(
      await raw(bot.agent, usage, encodeJson({ model: '', inputTokens: -1, outputTokens: 'lots' })),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      await raw(bot.agent, usage, encodeJson({ model: 'm', inputTokens: 1, outputTokens: 1, pad: big })),
      'PAYLOAD_TOO_LARGE',
    );
    assert.equal(
      await codeOf(owner.agent.call(governanceApi.usage, { since: '2026-01-02', until: '2026-01-01' })),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      await codeOf(owner.agent.call(governanceApi.usage, { since: '2020-01-01', until: '2026-01-01' })),
      'INVALID_ARGUMENT',
    );
    assert.equal(await state(), before);
  });

  it('refuses unknown ids and callers outside their rights, and changes nothing', async () => {
    const before = await state();
    const refusals: Record<string, string> = {
      issueForUnknownAgent: await codeOf(owner.agent.tokens.issue(newId('agent'), ['tickets:read'])),
      issueByAgent: await codeOf(bot.agent.tokens.issue(bot.id, ['tickets:read'])),
      issueForSomeoneElse: await codeOf(
        colleague.agent.tokens.issue(bot.id, ['tickets:read'], { onBehalfOf: owner.id }),
      ),
      issueNotHeld: await codeOf(colleague.agent.tokens.issue(bot.id, ['tickets:read'])),
      exchangeToUnknown: await codeOf(bot.agent.tokens.exchange(token, newId('agent'), { room })),
      exchangeForged: await codeOf(bot.agent.tokens.exchange(`${token}x`, bot.id, { room })),
      revokeUnknownJti: await codeOf(owner.agent.tokens.revoke({ jti: newId('token') })),
      revokeOthersJti: await codeOf(stranger.agent.tokens.revoke({ jti })),
      revokeOthersPrincipal: await codeOf(stranger.agent.tokens.revoke({ principal: owner.id })),
      revokeUnknownPrincipal: await codeOf(owner.agent.tokens.revoke({ principal: newId('user') })),
      suspendUnknown: await codeOf(
        owner.agent.call(governanceApi.suspend, { agent: newId('agent'), reason: 'x' }),
      ),
      suspendByStranger: await codeOf(
        stranger.agent.call(governanceApi.suspend, { agent: bot.id, reason: 'x' }),
      ),
      suspendByAgent: await codeOf(bot.agent.call(governanceApi.suspend, { agent: bot.id, reason: 'x' })),
      resumeByColleague: await codeOf(colleague.agent.call(governanceApi.resume, { agent: bot.id })),
      grantsByMember: await codeOf(
        colleague.agent.call(governanceApi.setGrants, { participant: colleague.id, scopes: ['hr:*'] }),
      ),
      grantsOtherOrg: await codeOf(
        stranger.agent.call(governanceApi.setGrants, { participant: owner.id, scopes: [] }),
      ),
      grantsUnknown: await codeOf(
        world.admin.call(governanceApi.setGrants, { participant: newId('user'), scopes: [] }),
      ),
      orgPolicyByMember: await codeOf(owner.agent.call(governanceApi.setOrgPolicy, { org: world.org.id })),
      orgPolicyUnknownOrg: await codeOf(world.admin.call(governanceApi.setOrgPolicy, { org: newId('org') })),
      budgetByColleague: await codeOf(
        colleague.agent.call(governanceApi.setBudget, { agent: bot.id, tokensPerDay: 1 }),
      ),
      budgetOtherOrg: await codeOf(
        stranger.agent.call(governanceApi.setBudget, { agent: bot.id, tokensPerDay: 1 }),
      ),
      budgetUnknown: await codeOf(
        owner.agent.call(governanceApi.setBudget, { agent: newId('agent'), tokensPerDay: 1 }),
      ),
      chainUnknown: await codeOf(owner.agent.call(governanceApi.auditChain, { of: newId('message') })),
      pauseUnknownRoom: await codeOf(owner.agent.call(roomsApi.pause, { room: newId('room') })),
      pauseByStranger: await codeOf(stranger.agent.call(roomsApi.pause, { room })),
      resumeByAgent: await codeOf(bot.agent.call(roomsApi.resume, { room })),
      membersByParticipant: await codeOf(
        owner.agent.call(roomsApi.members, { room, participants: [owner.id] }),
      ),
      findByParticipant: await codeOf(owner.agent.call(roomsApi.findMessage, { id: newId('message') })),
      notifyByParticipant: await codeOf(
        owner.agent.call(roomsApi.notify, { to: owner.id, text: 'spoof', data: {}, key: 'spoof' }),
      ),
    };
    assert.deepEqual(refusals, {
      issueForUnknownAgent: 'NOT_FOUND',
      issueByAgent: 'UNAUTHENTICATED',
      issueForSomeoneElse: 'PERMISSION_DENIED',
      issueNotHeld: 'PERMISSION_DENIED',
      exchangeToUnknown: 'NOT_FOUND',
      exchangeForged: 'UNAUTHENTICATED',
      revokeUnknownJti: 'NOT_FOUND',
      revokeOthersJti: 'NOT_FOUND',
      revokeOthersPrincipal: 'NOT_FOUND',
      revokeUnknownPrincipal: 'NOT_FOUND',
      suspendUnknown: 'NOT_FOUND',
      suspendByStranger: 'NOT_FOUND',
      suspendByAgent: 'UNAUTHENTICATED',
      resumeByColleague: 'PERMISSION_DENIED',
      grantsByMember: 'PERMISSION_DENIED',
      grantsOtherOrg: 'NOT_FOUND',
      grantsUnknown: 'NOT_FOUND',
      orgPolicyByMember: 'PERMISSION_DENIED',
      orgPolicyUnknownOrg: 'NOT_FOUND',
      budgetByColleague: 'PERMISSION_DENIED',
      budgetOtherOrg: 'NOT_FOUND',
      budgetUnknown: 'NOT_FOUND',
      chainUnknown: 'NOT_FOUND',
      pauseUnknownRoom: 'NOT_FOUND',
      pauseByStranger: 'NOT_A_MEMBER',
      resumeByAgent: 'PERMISSION_DENIED',
      membersByParticipant: 'PERMISSION_DENIED',
      findByParticipant: 'PERMISSION_DENIED',
      notifyByParticipant: 'PERMISSION_DENIED',
    });
    assert.equal(await state(), before);
    // An agent asking about a tool call under someone else's token is told no, and nothing changes.
    const d = await stranger.agent.call(governanceApi.authorize, { token, action: 'tickets:read' });
    assert.equal(d.allow, false);
    assert.equal(await state(), before);
  });
});
