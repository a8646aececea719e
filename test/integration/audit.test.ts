/**
 * The audit trail: PARLEY_AUDIT refuses deletion and purges; membership changes are audited; and
 * `parley audit chain` walks a 4-hop chain (a tool call, two agents' messages, the human's) back to
 * the human who started it, in words and as JSON.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { governanceApi, newId, streams } from '@parley/contracts';
import type { Delivery } from '@parley/sdk';
import { runCli } from '@parley/sdk/cli';
import { connectService, startParley, type TestParley, waitFor } from '@parley/test/harness';
import { auditRecords, codeOf, createWorld, type Member } from './fixtures/governance.js';

describe('audit', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let world: Awaited<ReturnType<typeof createWorld>>;

  before(async () => {
    parley = await startParley();
    svc = await connectService(parley);
    world = await createWorld(parley);
  });
  after(async () => {
    await world?.close();
    await svc?.close();
    await parley?.destroy();
  });

  it('the audit stream refuses deleting a record and purging, even for a service', async () => {
    const person = await world.person('auditor', [], { listen: false });
    await person.agent.rooms.create('something to audit');
    const jsm = await jetstreamManager(svc);
    const before = (await jsm.streams.info(streams.audit)).state;
    assert.ok(before.messages > 0);
    await assert.rejects(
      jsm.streams.deleteMessage(streams.audit, before.first_seq),
      /delete|not allowed|denied/i,
    );
    await assert.rejects(
      jsm.streams.deleteMessage(streams.audit, before.last_seq, false),
      /delete|not allowed|denied/i,
    );
    await assert.rejects(jsm.streams.purge(streams.audit), /purge|not allowed|denied/i);
    await assert.rejects(
      jsm.streams.purge(streams.audit, { filter: 'parley.audit.membership' }),
      /purge|not allowed|denied/i,
    );
    const afterState = (await jsm.streams.info(streams.audit)).state;
    assert.equal(afterState.first_seq, before.first_seq);
    assert.ok(afterState.messages >= before.messages);
    // Loosening the stream is refused as well: deny_delete/deny_purge cannot be turned off by an update.
    const info = await jsm.streams.info(streams.audit);
    await assert.rejects(
      jsm.streams.update(streams.audit, { ...info.config, deny_delete: false, deny_purge: false }),
    );
  });

  it('records membership changes with the room, the log entry and who did it', async () => {
    const owner = await world.person('room-owner', [], { listen: false });
    const guest = await world.person('guest', [], { listen: false });
    const room = await owner.agent.rooms.create('audited', { members: [] });
    await owner.agent.rooms.room(room.id).invite(guest.id);
    await owner.agent.rooms.room(room.id).remove(guest.id);
    const records = (await auditRecords(svc, 'membership')).filter((r) => r.room === room.id);
    assert.deepEqual(
      records.map((r) => [r.action, r.actor, r.target]),
      [
        ['joined', owner.id, owner.id],
        ['joined', owner.id, guest.id],
        ['removed', owner.id, guest.id],
      ],
    );
    assert.ok(records.every((r) => r.message?.startsWith('msg_')));
  });

  it('walks a 4-hop chain back to the human, with each hop’s actor, delegation and decision', async () => {
    const hana = await world.person('hana', ['research:*']);
    const lead = await world.person('lab-lead', ['research:*'], { listen: false });
    const [a, b, c] = [
      await world.agentOf(lead, 'scout', ['research:*'], { listen: true }),
      await world.agentOf(lead, 'analyst', ['research:*'], { listen: true }),
      await world.agentOf(lead, 'librarian', ['research:read'], { listen: true }),
    ] as [Member, Member, Member];
    const room = (await hana.agent.rooms.create('research', { members: [a.id, b.id, c.id] })).id;
    // Each agent hands the work to the next under an exchanged token; the last one calls a tool.
    const relay = (from: Member, to: Member) =>
      from.agent.on('message', async (d: Delivery) => {
        const token = from.agent.tokens.current();
        if (!token) return;
        const ex = await from.agent.tokens.exchange(token, to.id, { room: d.room });
        await from.agent.rooms.room(d.room).send(`${to.id}: take it from here`, { delegation: ex.token });
      });
    relay(a, b);
    relay(b, c);
    let toolCall: string | undefined;
    c.agent.on('message', async () => {
      if (!c.agent.tokens.current()) return;
      const id = newId('toolCall');
      await c.agent.tools.call('library.search', { q: 'nats' }, () => ['paper'], {
        action: 'research:read',
        id,
      });
      toolCall = id;
    });
    const t = await hana.agent.tokens.issue(a.id, ['research:read', 'research:write']);
    await hana.agent.rooms.room(room).send('find me papers on NATS', { delegation: t.token });
    await waitFor(() => toolCall !== undefined, 'the tool call at the end of the chain');

    const started = performance.now();
    const chain = await hana.agent.call(
      governanceApi.auditChain,
      { of: toolCall as string },
      { timeout: 30_000 },
    );
    console.log(`audit chain: 4 hops walked in ${(performance.now() - started).toFixed(0)} ms`);
    assert.equal(chain.hops.length, 4);
    assert.deepEqual(
      chain.hops.map((h) => [h.kind, h.actor]),
      [
        ['tool_call', c.id],
        ['message', b.id],
        ['message', a.id],
        ['message', hana.id],
      ],
    );
    assert.deepEqual(chain.hops[0]?.onBehalfOf, [hana.id, a.id, b.id, c.id]);
    assert.equal(chain.hops[0]?.decision?.allow, true);
    assert.deepEqual(
      chain.hops[0]?.scope,
      ['research:read'],
      'research:write dropped at the librarian’s link',
    );
    assert.deepEqual(chain.hops[1]?.onBehalfOf, [hana.id, a.id, b.id, c.id]);
    assert.match(chain.hops[1]?.decision?.reason ?? '', /exchanged by/);
    assert.deepEqual(chain.hops[2]?.onBehalfOf, [hana.id, a.id, b.id]);
    assert.deepEqual(chain.hops[3]?.onBehalfOf, [hana.id, a.id]);
    assert.equal(chain.hops[3]?.hop, 0);
    assert.equal(chain.hops[1]?.causedBy, chain.hops[2]?.id);
    assert.equal(chain.origin, hana.id);
    assert.equal(chain.complete, true);

    // The same from a message id, and from the CLI, in words and as JSON.
    const fromMessage = await hana.agent.call(governanceApi.auditChain, { of: chain.hops[1]?.id as string });
    assert.equal(fromMessage.hops.length, 3);
    const out: string[] = [];
    const io = { out: (l: string) => out.push(l), err: (l: string) => out.push(l) };
    const base = ['--server', parley.natsUrl, '--as', hana.creds];
    assert.equal(await runCli(['audit', 'chain', toolCall as string, ...base], io), 0, out.join('\n'));
    const text = out.join('\n');
    assert.match(text, new RegExp(`1\\. tool call ${toolCall} +library\\.search +by ${c.id} for ${hana.id}`));
    assert.match(text, /allowed — decided by policy/);
    assert.match(text, new RegExp(`4\\. message msg_\\w+ +in room_\\w+ \\(hop 0\\) +from ${hana.id}`));
    assert.match(text, new RegExp(`started by ${hana.id}`));
    out.length = 0;
    assert.equal(await runCli(['audit', 'chain', toolCall as string, '--json', ...base], io), 0);
    assert.deepEqual(JSON.parse(out.join('\n')), chain);

    // Nobody outside the chain (and not an admin) learns it exists.
    const outsider = await world.person('nosy', [], { listen: false });
    assert.equal(
      await codeOf(outsider.agent.call(governanceApi.auditChain, { of: toolCall as string })),
      'NOT_FOUND',
    );
    assert.equal(
      await codeOf(hana.agent.call(governanceApi.auditChain, { of: newId('toolCall') })),
      'NOT_FOUND',
    );
    assert.equal(
      await codeOf(hana.agent.call(governanceApi.auditChain, { of: newId('message') })),
      'NOT_FOUND',
    );
  });
});
