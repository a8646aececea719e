/**
 * The holes an attack run found (issue 13), each attacked the way it was found — a real agent's
 * creds on a raw NATS connection, naming a victim's subject as the reply — and each asserting the
 * refusal and the absence of any effect (state unchanged, nothing written).
 *
 * The attacker is an agent of one org, the victim an agent of another; they become contacts so the
 * attacker can be in one of the victim's rooms, as the issue's `rooms.leave` attack needs.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { credsAuthenticator, type NatsConnection, connect as natsConnect } from '@nats-io/transport-node';
import {
  backboneDefaults,
  buckets,
  encodeJson,
  governanceApi,
  headerNames,
  inboxStream,
  newId,
  partitionOf,
  policyKeys,
  registryApi,
  roomsApi,
  streams,
  subjects,
} from '@parley/contracts';
import { mintResponderCreds, publicKeys } from '@parley/keys';
import {
  codeOf,
  connectService,
  connectSystem,
  parsePrometheusText,
  sampleValue,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';
import { createWorld, type Member } from './fixtures/governance.js';

/** A raw connection with a participant's creds (its own reply prefix), recording server errors. */
async function raw(parley: TestParley, m: { id: string; creds: string }) {
  const nc = await natsConnect({
    servers: parley.natsUrl,
    authenticator: credsAuthenticator(new TextEncoder().encode(m.creds)),
    inboxPrefix: subjects.replyPrefix(m.id),
  });
  const errors: string[] = [];
  void (async () => {
    for await (const s of nc.status()) if (s.type === 'error') errors.push(String(s.error));
  })();
  return { nc, errors };
}

describe('attacks on the backbone (issue 13)', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let worldA: Awaited<ReturnType<typeof createWorld>>;
  let worldB: Awaited<ReturnType<typeof createWorld>>;
  let ownerA: Member;
  let ownerB: Member;
  /** The attacker (org A) and the victim (org B), and the victim's colleague. */
  let attacker: Member;
  let victim: Member;
  let colleague: Member;
  let attackerNc: NatsConnection;
  /** The victim's room (victim, colleague, and the attacker as an accepted contact). */
  let victimRoom: string;
  /** A room of the attacker alone. */
  let ownRoom: string;

  const refusedReplies = async () =>
    sampleValue(parsePrometheusText(await parley.metrics.render()), 'parley_replies_refused_total', {
      reason: 'foreign_reply',
    });

  /** Publishes a request from the attacker naming `reply`, and waits until a service dropped the reply. */
  async function attack(subject: string, body: unknown, reply: string) {
    const before = await refusedReplies();
    attackerNc.publish(subject, typeof body === 'string' ? body : encodeJson(body), { reply });
    await waitFor(async () => (await refusedReplies()) > before, `the reply to ${reply} to be dropped`);
  }

  /** The last entry of `stream` on `subject` (null when it has none; a stream not found throws). */
  const lastOf = async (stream: string, subject: string) =>
    (await jetstreamManager(svc)).direct.getMessage(stream, { last_by_subj: subject });
  const lastSeqOf = async (stream: string, subject: string) => (await lastOf(stream, subject))?.seq ?? 0;

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    worldA = await createWorld(parley);
    worldB = await createWorld(parley);
    ownerA = await worldA.person('owner-a', [], { listen: false });
    ownerB = await worldB.person('owner-b', [], { listen: false });
    attacker = await worldA.agentOf(ownerA, 'mallory', []);
    victim = await worldB.agentOf(ownerB, 'victim', [], { card: { visibility: 'public' } });
    colleague = await worldB.agentOf(ownerB, 'colleague', []);
    const request = await attacker.agent.contacts.request(victim.id, { reason: 'let us work together' });
    await victim.agent.contacts.accept(request.id);
    const room = await victim.agent.rooms.create('victim room', { members: [colleague.id, attacker.id] });
    victimRoom = room.room.id;
    ownRoom = (await attacker.agent.rooms.create('mallory alone')).room.id;
    attackerNc = (await raw(parley, attacker)).nc;
  });
  after(async () => {
    await attackerNc?.close();
    await svc?.close();
    await worldA?.close();
    await worldB?.close();
    await parley?.destroy();
  });

  describe('hole 1a: a responder answers only its caller', () => {
    it('answers the attacker on its own reply prefix (the control: the check does not refuse everything)', async () => {
      const reply = await attackerNc.request(
        subjects.api(attacker.id, 'rooms', 'get'),
        encodeJson({ room: ownRoom }),
      );
      assert.equal(reply.headers?.get(headerNames.error), undefined);
      assert.equal(reply.json<{ id: string }>().id, ownRoom);
    });

    it('cannot suspend an agent of another org by naming its parley_policy key as the reply, through any responder', async () => {
      const key = `$KV.${buckets.policy}.${policyKeys.participant(victim.id)}`;
      // Every kind of responder: the API server of each service, the ingress, presence, usage.
      const requests: [string, unknown][] = [
        [
          subjects.send(attacker.id),
          { room: ownRoom, parts: [{ type: 'text', text: 'hi' }], clientMsgId: 'a1' },
        ],
        [subjects.send(attacker.id), 'not json'],
        [subjects.presence(attacker.id), { status: 'online' }],
        [subjects.usage(attacker.id), { model: 'm', inputTokens: 1, outputTokens: 1 }],
        [subjects.api(attacker.id, 'rooms', 'get'), { room: ownRoom }],
        [subjects.api(attacker.id, 'registry', 'whoami'), {}],
        [subjects.api(attacker.id, 'consent', 'pending'), {}],
        [subjects.api(attacker.id, 'governance', 'jwks'), {}],
        [subjects.api(attacker.id, 'bindings', 'list'), {}],
        [subjects.api(attacker.id, 'mcp', 'listTokens'), { agent: attacker.id }],
        [subjects.api(attacker.id, 'rooms', 'nosuchmethod'), {}],
      ];
      for (const [subject, body] of requests) await attack(subject, body, key);
      const policy = await new Kvm(svc).open(buckets.policy);
      assert.equal(
        await policy.get(policyKeys.participant(victim.id)),
        null,
        'nothing was written to the key',
      );
      // The victim still sends, and the registry says what the ingress does.
      await victim.agent.rooms.room(victimRoom).send('still here');
      const shown = await ownerB.agent.call(registryApi.getAgent, { agent: victim.id });
      assert.equal(shown.agent.status, 'active');
    });

    it('cannot write into another participant’s inbox or into a room log it names as the reply', async () => {
      const inbox = subjects.inbox(victim.id, victimRoom);
      const log = subjects.room(partitionOf(victimRoom, backboneDefaults().partitions), victimRoom);
      // The fan-out writes the victim's own sends into its inbox too, after the send was answered:
      // once this one is there, an entry after it on this subject can only be the attack's.
      const mark = await victim.agent.rooms.room(victimRoom).send('before the attack');
      let inboxBefore = 0;
      await waitFor(async () => {
        const last = await lastOf(inboxStream(victim.id), inbox);
        inboxBefore = last?.seq ?? 0;
        return last?.header.get(headerNames.messageId) === mark.id;
      }, 'the victim’s own message in its inbox');
      const logBefore = await lastSeqOf(streams.rooms, log);
      await attack(subjects.api(attacker.id, 'rooms', 'get'), { room: ownRoom }, inbox);
      await attack(subjects.send(attacker.id), '{}', log);
      assert.equal(
        await lastSeqOf(inboxStream(victim.id), inbox),
        inboxBefore,
        'no entry in the victim’s inbox',
      );
      assert.equal(await lastSeqOf(streams.rooms, log), logBefore, 'no entry in the room log');
      // The room's history still reads (a foreign entry used to make it fail INTERNAL).
      const history = await colleague.agent.rooms.room(victimRoom).history({ limit: 50 });
      assert.ok(history.entries.length > 0);
    });

    it('cannot close the victim’s room on the victim’s authority through its own rooms.leave', async () => {
      await attack(
        subjects.api(attacker.id, 'rooms', 'leave'),
        { room: victimRoom },
        subjects.api(victim.id, 'rooms', 'close'),
      );
      const room = await victim.agent.rooms.get(victimRoom);
      assert.equal(room.closed, false, 'the victim’s room is open');
      assert.ok(!room.members.some((m) => m.id === attacker.id), 'the attacker left (its own right)');
    });

    it('cannot send a contact request in another’s name, nor publish a control-plane event', async () => {
      const before = (await victim.agent.contacts.pending()).outgoing.length;
      const eventSubject = subjects.event('consent', 'requested');
      const eventsBefore = await lastSeqOf(streams.events, eventSubject);
      await attack(
        subjects.api(attacker.id, 'registry', 'whoami'),
        {},
        subjects.api(victim.id, 'consent', 'request'),
      );
      await attack(subjects.api(attacker.id, 'registry', 'whoami'), {}, eventSubject);
      assert.equal((await victim.agent.contacts.pending()).outgoing.length, before);
      assert.equal(await lastSeqOf(streams.events, eventSubject), eventsBefore, 'no event was published');
    });

    it('does not answer into another participant’s own reply prefix either', async () => {
      const victimRaw = await raw(parley, victim);
      try {
        const got: string[] = [];
        victimRaw.nc.subscribe(`${subjects.replyPrefix(victim.id)}.>`, {
          callback: (_e, m) => {
            got.push(m.subject);
          },
        });
        await victimRaw.nc.flush();
        await attack(
          subjects.api(attacker.id, 'rooms', 'get'),
          { room: ownRoom },
          `${subjects.replyPrefix(victim.id)}.spoofed`,
        );
        await victimRaw.nc.flush();
        assert.deepEqual(got, []);
      } finally {
        await victimRaw.nc.close();
      }
    });
  });

  describe('hole 1b: the connection that answers requests cannot write', () => {
    it('is refused by the NATS server for streams, buckets, events and participants’ subjects, allowed replies', async () => {
      const creds = await mintResponderCreds(parley.home.keys, 'rooms');
      const responder = await raw(parley, { id: 'svc_rooms', creds: creds.creds });
      try {
        const log = subjects.room(partitionOf(victimRoom, backboneDefaults().partitions), victimRoom);
        const targets = [
          `$KV.${buckets.policy}.${policyKeys.participant(victim.id)}`,
          log,
          subjects.inbox(victim.id, victimRoom),
          subjects.event('consent', 'requested'),
          subjects.api(victim.id, 'rooms', 'close'),
          `$JS.API.STREAM.PURGE.${streams.rooms}`,
        ];
        const logBefore = await lastSeqOf(streams.rooms, log);
        for (const t of targets) {
          responder.nc.publish(t, encodeJson({ status: 'suspended', room: victimRoom }));
          await waitFor(
            () => responder.errors.some((e) => /permissions violation/i.test(e) && e.includes(t)),
            `a permissions violation for ${t}`,
          );
        }
        const policy = await new Kvm(svc).open(buckets.policy);
        assert.equal(await policy.get(policyKeys.participant(victim.id)), null);
        assert.equal(await lastSeqOf(streams.rooms, log), logBefore);
        // A reply subject is what it may publish to: the victim's own inbox prefix receives it.
        const victimRaw = await raw(parley, victim);
        try {
          const got: string[] = [];
          victimRaw.nc.subscribe(`${subjects.replyPrefix(victim.id)}.>`, {
            callback: (_e, m) => {
              got.push(m.string());
            },
          });
          await victimRaw.nc.flush();
          responder.nc.publish(`${subjects.replyPrefix(victim.id)}.r1`, 'a reply');
          await waitFor(() => got.length === 1, 'the reply');
        } finally {
          await victimRaw.nc.close();
        }
        assert.ok(!responder.errors.some((e) => e.includes('_INBOX')), 'replies are allowed');
      } finally {
        await responder.nc.close();
      }
    });
  });

  describe('hole 1b: every service receives its requests on its responder connection', () => {
    it('subscribes the request subjects only on the connections named parley-<service>-responder', async () => {
      const sys = await connectSystem(parley);
      try {
        const account = publicKeys(parley.home.keys).account;
        // Every server answers the PING with its own connections: in a cluster the services are
        // spread over the nodes, so one server's answer is not the whole picture.
        const servers = parley.cluster ? 3 : 1;
        const conns: { name?: string; subscriptions_list?: string[] }[] = [];
        for await (const reply of await sys.requestMany(
          '$SYS.REQ.SERVER.PING.CONNZ',
          encodeJson({ account, subscriptions: true, limit: 1024 }),
          { strategy: 'count', maxMessages: servers, maxWait: 10_000 },
        )) {
          conns.push(
            ...reply.json<{ data: { connections: { name?: string; subscriptions_list?: string[] }[] } }>()
              .data.connections,
          );
        }
        const listening = (name: string) =>
          conns
            .filter((c) => c.name === name)
            .flatMap((c) => c.subscriptions_list ?? [])
            .filter((s) => s.startsWith('parley.in.'));
        const expected: Record<string, string[]> = {
          rooms: ['parley.in.*.send', 'parley.in.*.api.rooms.*'],
          registry: ['parley.in.*.presence', 'parley.in.*.api.registry.*'],
          governance: ['parley.in.*.usage', 'parley.in.*.api.governance.*'],
          consent: ['parley.in.*.api.consent.*'],
          mcp: ['parley.in.*.api.bindings.*', 'parley.in.*.api.mcp.*'],
        };
        for (const [service, subs] of Object.entries(expected)) {
          const onResponder = listening(`parley-${service}-responder`);
          for (const sub of subs)
            assert.ok(onResponder.includes(sub), `${service} listens on ${sub} as its responder`);
          assert.deepEqual(
            listening(`parley-${service}`),
            [],
            `${service}'s service connection receives no requests`,
          );
        }
      } finally {
        await sys.close();
      }
    });
  });

  describe('hole 1c: one strict reading of a standing record', () => {
    it('treats a malformed standing as suspended in the ingress, the registry and every API, until governance rewrites it', async () => {
      const policy = await new Kvm(svc).open(buckets.policy);
      // What the reply-subject attack used to write: an ingress reply body.
      await policy.put(
        policyKeys.participant(colleague.id),
        JSON.stringify({ id: newId('message'), roomSeq: 7 }),
      );
      const room = colleague.agent.rooms.room(victimRoom);
      await waitFor(async () => (await codeOf(room.send('x'))) === 'SUSPENDED', 'the ingress to refuse');
      const err = await room.send('x').catch((e: Error) => e);
      assert.match(String(err), /malformed/);
      await waitFor(
        async () =>
          (await ownerB.agent.call(registryApi.getAgent, { agent: colleague.id })).agent.status ===
          'suspended',
        'the registry to say suspended',
      );
      assert.equal(await codeOf(colleague.agent.rooms.create('while malformed')), 'SUSPENDED');
      // Governance rewrites it (resume): active everywhere again.
      await ownerB.agent.call(governanceApi.resume, { agent: colleague.id, reason: 'fixed' });
      await waitFor(
        async () => (await codeOf(room.send('back'))) === 'no error',
        'sends to be accepted again',
      );
      assert.equal(
        (await ownerB.agent.call(registryApi.getAgent, { agent: colleague.id })).agent.status,
        'active',
      );
    });
  });

  describe('hole 2: links are verified before they are followed', () => {
    let secretRoom: string;
    let secret: string;
    before(async () => {
      secretRoom = (await victim.agent.rooms.create('secret room', { members: [colleague.id] })).room.id;
      secret = (await colleague.agent.rooms.room(secretRoom).send('the launch code is hunter2')).id;
    });

    it('does not follow a causedBy the sender could not read: no hop, no text, no sender of the other room', async () => {
      const bait = await attacker.agent.rooms.room(ownRoom).send('innocent', { causedBy: secret });
      const chain = await attacker.agent.call(governanceApi.auditChain, { of: bait.id });
      assert.equal(chain.hops.length, 1);
      assert.equal(chain.hops[0]?.id, bait.id);
      assert.equal(chain.hops[0]?.linkUnverified, true);
      const shown = JSON.stringify(chain);
      assert.doesNotMatch(shown, /hunter2/);
      assert.ok(!shown.includes(colleague.id) && !shown.includes(secretRoom));
    });

    it('does not follow a recorded tool call’s message the caller could not read', async () => {
      const id = newId('toolCall');
      await attacker.agent.call(governanceApi.recordToolCall, {
        id,
        tool: 'search',
        argsDigest: `sha256=${'0'.repeat(64)}`,
        status: 'ok',
        durationMs: 1,
        message: secret,
      });
      const chain = await attacker.agent.call(governanceApi.auditChain, { of: id });
      assert.equal(chain.hops.length, 1);
      assert.equal(chain.hops[0]?.linkUnverified, true);
      assert.doesNotMatch(JSON.stringify(chain), /hunter2/);
    });

    it('shows a verified hop in a room the caller may not read only as existing, and in full to a member', async () => {
      const reader = await worldB.agentOf(ownerB, 'reader', []);
      const shared = (await victim.agent.rooms.create('shared', { members: [reader.id] })).room.id;
      // The victim reads the secret room and links to its message: a verified link.
      const relay = await victim.agent.rooms.room(shared).send('following up', { causedBy: secret });
      const last = await reader.agent.rooms.room(shared).send('ok', { causedBy: relay.id });
      const chain = await reader.agent.call(governanceApi.auditChain, { of: last.id });
      assert.deepEqual(
        chain.hops.map((h) => [h.id, h.redacted === true]),
        [
          [last.id, false],
          [relay.id, false],
          [secret, true],
        ],
      );
      const hidden = chain.hops[2];
      assert.equal(hidden?.actor, undefined);
      assert.equal(hidden?.text, undefined);
      assert.equal(hidden?.room, undefined);
      assert.doesNotMatch(JSON.stringify(chain), /hunter2/);
      // A member of both rooms sees the whole chain.
      const full = await victim.agent.call(governanceApi.auditChain, { of: last.id });
      assert.equal(full.hops[2]?.text, 'the launch code is hunter2');
      assert.equal(full.hops[2]?.actor, colleague.id);
    });
  });

  describe('hole 3: suspended means suspended for every method that changes anything', () => {
    it('refuses a suspended agent room creation, invites, pausing and contact requests, and changes nothing', async () => {
      const bot = await worldB.agentOf(ownerB, 'to-suspend', []);
      const peer = await worldB.agentOf(ownerB, 'peer', []);
      const own = await bot.agent.rooms.create('bot room', { members: [victim.id] });
      await ownerB.agent.call(governanceApi.suspend, { agent: bot.id, reason: 'kill switch drill' });
      await waitFor(async () => (await codeOf(bot.agent.rooms.create('x'))) === 'SUSPENDED', 'the refusal');
      const roomsBefore = (await bot.agent.rooms.list()).length;
      assert.equal(await codeOf(bot.agent.rooms.create('with members', { members: [peer.id] })), 'SUSPENDED');
      assert.equal(await codeOf(own.invite(peer.id)), 'SUSPENDED');
      assert.equal(
        await codeOf(bot.agent.call(roomsApi.pause, { room: own.room.id, reason: 'silence' })),
        'SUSPENDED',
      );
      assert.equal(await codeOf(bot.agent.contacts.request(attacker.id, { reason: 'hi' })), 'SUSPENDED');
      // Nothing changed: no new room, nobody invited, the room not paused, no request; reads work.
      const room = await bot.agent.rooms.get(own.room.id);
      assert.equal(room.paused, false);
      assert.ok(!room.members.some((m) => m.id === peer.id));
      assert.equal((await bot.agent.rooms.list()).length, roomsBefore);
      assert.equal(
        (await attacker.agent.contacts.pending()).incoming.filter((r) => r.from === bot.id).length,
        0,
      );
    });
  });

  describe('hole 4: a usage report acts only on the reporter’s own rooms', () => {
    it('refuses a report naming a room the reporter is not in, and pauses no other tenant’s room', async () => {
      const spender = await worldA.agentOf(ownerA, 'spender', []);
      await ownerA.agent.call(governanceApi.setBudget, {
        agent: spender.id,
        tokensPerDay: 10,
        onExceed: 'pause_room',
      });
      const report = { model: 'm', inputTokens: 100, outputTokens: 100, room: victimRoom };
      assert.equal(await codeOf(spender.agent.usage.report(report)), 'NOT_A_MEMBER');
      assert.equal(
        await codeOf(
          spender.agent.usage.report({
            model: 'm',
            inputTokens: 1,
            outputTokens: 1,
            message: newId('message'),
          }),
        ),
        'INVALID_ARGUMENT',
      );
      const room = await victim.agent.rooms.get(victimRoom);
      assert.equal(room.paused, false, 'the victim’s room is not paused');
      const usage = await ownerA.agent.call(governanceApi.usage, { by: 'agent', agent: spender.id });
      assert.equal(usage.total.reports, 0, 'nothing was counted');
    });
  });
  describe('hole 5: bounded input', () => {
    it('refuses a data part nested 10,000 levels deep (and one level past the bound) with INVALID_ARGUMENT, storing nothing', async () => {
      const nest = (depth: number) => {
        let v: Record<string, unknown> = { leaf: true };
        for (let i = 1; i < depth; i++) v = { v };
        return v;
      };
      const room = attacker.agent.rooms.room(ownRoom);
      const log = subjects.room(partitionOf(ownRoom, backboneDefaults().partitions), ownRoom);
      const before = await lastSeqOf(streams.rooms, log);
      // 10,000 levels over the raw connection, as the attack sent it (the SDK's own encoder is not the target).
      const deep = `{"room":"${ownRoom}","clientMsgId":"deep","parts":[{"type":"data","data":${'{"v":'.repeat(10_000)}1${'}'.repeat(10_000)}}]}`;
      const reply = await attackerNc.request(subjects.send(attacker.id), new TextEncoder().encode(deep));
      assert.equal(reply.headers?.get(headerNames.error), 'INVALID_ARGUMENT');
      assert.match(reply.string(), /deeper than 32/);
      assert.equal(await codeOf(room.send([{ type: 'data', data: nest(33) }])), 'INVALID_ARGUMENT');
      assert.equal(await lastSeqOf(streams.rooms, log), before, 'nothing stored');
      // The bound itself is accepted.
      await room.send([{ type: 'data', data: nest(32) }]);
    });

    it('answers /mcp with a JSON content type and an empty body 400, not 500', async () => {
      const res = await fetch(`${parley.httpUrl}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer x' },
        body: '',
      });
      assert.equal(res.status, 400);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, 'INVALID_ARGUMENT');
    });
  });
});
