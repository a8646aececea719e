/**
 * Usage and budgets: what agents report is summed exactly (by agent, owner, org, room, day), shown
 * only to whom it concerns, counted once per report id; a budget crossing suspends the agent (its
 * sends then refused with BUDGET_EXCEEDED) or pauses the room, and the owner is told.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  buckets,
  governanceApi,
  ParleyEvent,
  ParticipantPolicy,
  policyKeys,
  roomsApi,
} from '@parley/contracts';
import { runCli } from '@parley/sdk/cli';
import { connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';
import { codeOf, createWorld, type Member, textOf } from './fixtures/governance.js';

describe('usage and budgets', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let other: Awaited<ReturnType<typeof createWorld>>;
  let orgAdmin: Member;
  let dana: Member;
  let eve: Member;
  let writer: Member;
  let editor: Member;
  let evesBot: Member;
  let room: string;

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    world = await createWorld(parley);
    other = await createWorld(parley);
    orgAdmin = await world.person('usage-admin', [], { role: 'admin', listen: false });
    dana = await world.person('dana');
    eve = await world.person('eve', [], { listen: false });
    writer = await world.agentOf(dana, 'writer', []);
    editor = await world.agentOf(dana, 'editor', []);
    evesBot = await world.agentOf(eve, 'eves-bot', []);
    room = (await dana.agent.rooms.create('drafts', { members: [writer.id, editor.id, evesBot.id] })).id;
  });
  after(async () => {
    await world?.close();
    await other?.close();
    await svc?.close();
    await parley?.destroy();
  });

  it('sums exactly what was reported, by agent, owner, org, room and day, for whom it concerns', async () => {
    const reports = [
      [writer, { model: 'm1', inputTokens: 1000, outputTokens: 200, costUsd: 0.1, room }],
      [writer, { model: 'm1', inputTokens: 500, outputTokens: 100, costUsd: 0.2, room }],
      [writer, { model: 'm2', inputTokens: 7, outputTokens: 3, costUsd: 0.000001 }],
      [editor, { model: 'm1', inputTokens: 300, outputTokens: 30, costUsd: 0.7, room }],
      [evesBot, { model: 'm1', inputTokens: 11, outputTokens: 1, costUsd: 1.5, room }],
    ] as const;
    for (const [who, r] of reports) {
      const reply = await who.agent.usage.report(r);
      assert.deepEqual(reply, { counted: true, exceeded: [] });
    }
    // A retried report (same id) is counted once.
    const once = { id: 'retry-me', model: 'm1', inputTokens: 1, outputTokens: 1, costUsd: 0 };
    assert.equal((await writer.agent.usage.report(once)).counted, true);
    assert.equal((await writer.agent.usage.report(once)).counted, false);

    const byAgent = await orgAdmin.agent.call(governanceApi.usage, { by: 'agent' });
    const row = (r: typeof byAgent, key: string) => r.rows.find((x) => x.key === key);
    assert.deepEqual(row(byAgent, writer.id), {
      key: writer.id,
      inputTokens: 1508,
      outputTokens: 304,
      costUsd: 0.300001,
      reports: 4,
    });
    assert.deepEqual(row(byAgent, editor.id), {
      key: editor.id,
      inputTokens: 300,
      outputTokens: 30,
      costUsd: 0.7,
      reports: 1,
    });
    assert.equal(byAgent.total.inputTokens, 1508 + 300 + 11);
    assert.equal(byAgent.total.costUsd, 2.500001);

    const byOwner = await orgAdmin.agent.call(governanceApi.usage, { by: 'owner' });
    assert.equal(row(byOwner, dana.id)?.inputTokens, 1808);
    assert.equal(row(byOwner, eve.id)?.costUsd, 1.5);
    const byRoom = await orgAdmin.agent.call(governanceApi.usage, { by: 'room' });
    assert.equal(row(byRoom, room)?.inputTokens, 1811);
    assert.equal(row(byRoom, '-')?.inputTokens, 8);
    const byOrg = await orgAdmin.agent.call(governanceApi.usage, { by: 'org' });
    assert.deepEqual(
      byOrg.rows.map((r) => r.key),
      [world.org.id],
    );
    const byDay = await orgAdmin.agent.call(governanceApi.usage, { by: 'day' });
    assert.equal(byDay.rows.length, 1);
    assert.equal(byDay.rows[0]?.reports, 6);

    // Owners see their agents; an agent itself; other orgs nothing.
    const danas = await dana.agent.call(governanceApi.usage, { by: 'agent' });
    assert.deepEqual(danas.rows.map((r) => r.key).sort(), [writer.id, editor.id].sort());
    const own = await editor.agent.call(governanceApi.usage, {});
    assert.deepEqual(
      own.rows.map((r) => r.key),
      [editor.id],
    );
    const outsider = await other.person('outsider', [], { listen: false });
    assert.deepEqual((await outsider.agent.call(governanceApi.usage, { by: 'org' })).rows, []);

    // The CLI prints the same.
    const out: string[] = [];
    const code = await runCli(['usage', '--by', 'agent', '--server', parley.natsUrl, '--as', dana.creds], {
      out: (l) => out.push(l),
      err: (l) => out.push(l),
    });
    assert.equal(code, 0, out.join('\n'));
    assert.match(out.join('\n'), new RegExp(`${writer.id}\\s+1508\\s+304\\s+\\$0\\.3000`));
  });

  it('suspends an agent that crosses its budget and tells its owner; its sends are refused with BUDGET_EXCEEDED', async () => {
    const bot = await world.agentOf(dana, 'spender', []);
    await dana.agent.rooms.room(room).invite(bot.id);
    await dana.agent.call(governanceApi.setBudget, { agent: bot.id, tokensPerDay: 1_000 });
    const events: ParleyEvent[] = [];
    const sub = svc.subscribe('parley.evt.governance.>', {
      callback: (_e, m) => {
        events.push(ParleyEvent.parse(m.json()));
      },
    });
    await svc.flush();
    assert.deepEqual(
      (await bot.agent.usage.report({ model: 'm', inputTokens: 600, outputTokens: 0 })).exceeded,
      [],
    );
    await bot.agent.rooms.room(room).send('still within budget');
    const crossing = await bot.agent.usage.report({ model: 'm', inputTokens: 300, outputTokens: 200 });
    assert.deepEqual(crossing.exceeded, ['agent tokensPerDay']);
    const kv = await new Kvm(svc).open(buckets.policy);
    const standing = ParticipantPolicy.parse((await kv.get(policyKeys.participant(bot.id)))?.json());
    assert.equal(standing.status, 'suspended');
    assert.equal(standing.cause, 'budget');
    await waitFor(
      async () =>
        (await codeOf(bot.agent.rooms.room(room).send('over budget', { deadlineMs: 0 }))) ===
        'BUDGET_EXCEEDED',
      'the ingress to refuse the agent',
      2_000,
    );
    assert.equal(
      await codeOf(bot.agent.tools.call('t', {}, () => 1, { onBehalfOf: null })),
      'BUDGET_EXCEEDED',
    );
    await waitFor(() => dana.got.some((d) => /budget exceeded/.test(textOf(d))), 'the owner’s notice');
    await waitFor(
      () => events.some((e) => e.kind === 'budget.exceeded' && e.subject === bot.id),
      'the event',
    );
    sub.unsubscribe();
  });

  it('pauses the room instead when the owner’s budget says so', async () => {
    const bot = await world.agentOf(eve, 'room-spender', []);
    const writeRoom = (await dana.agent.rooms.create('costly', { members: [bot.id] })).id;
    // Only an admin caps an owner.
    assert.equal(
      await codeOf(eve.agent.call(governanceApi.setBudget, { owner: eve.id, costUsdPerDay: 1 })),
      'PERMISSION_DENIED',
    );
    await orgAdmin.agent.call(governanceApi.setBudget, {
      owner: eve.id,
      costUsdPerDay: 2,
      onExceed: 'pause_room',
    });
    const r = await bot.agent.usage.report({
      model: 'm',
      inputTokens: 1,
      outputTokens: 1,
      costUsd: 5,
      room: writeRoom,
    });
    assert.deepEqual(r.exceeded, ['owner costUsdPerDay']);
    await waitFor(
      async () => (await dana.agent.call(roomsApi.get, { room: writeRoom })).paused,
      'the room to pause',
    );
    await waitFor(
      async () =>
        (await codeOf(bot.agent.rooms.room(writeRoom).send('more', { deadlineMs: 0 }))) === 'ROOM_PAUSED',
      'the pause to reach the ingress',
      2_000,
    );
  });
});
