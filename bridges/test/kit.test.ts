/**
 * The bridge kit against a real backbone: mapping validation, idempotent ingest, ignored and refused
 * events, identity through delegation, trace context from the source, dead letters, presence on a
 * source outage, and outbound actions as authorized, audited tool calls.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { governanceApi, registryApi } from '@parley/contracts';
import { loadTelemetryConfig } from '@parley/kit';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';
import { ACTION_MEDIA_TYPE, clientMsgIdOf, RESULT_MEDIA_TYPE } from '../src/bridge.js';
import { loadMapping, MappingError, render } from '../src/mapping.js';
import { createWorld, historyOf, ingressDuplicates, type Member, messagesOf, textOf } from './helpers.js';

describe('mapping', () => {
  it('refuses a mapping with every problem named by its path', () => {
    const err = (() => {
      try {
        loadMapping(`
bridge: Sales Force
inbound:
  - type: x
    to: { room: room_1, agent: agt_2 }
    text: hi
identities:
  "005": { user: alice }
`);
      } catch (e) {
        return e as MappingError;
      }
      throw new Error('accepted an invalid mapping');
    })();
    assert.ok(err instanceof MappingError);
    const text = err.problems.join('\n');
    assert.match(text, /^bridge:/m);
    assert.match(text, /inbound\.0\.to\.room: a room id/);
    assert.match(text, /identities\.005\.user: a usr_… id/);
    assert.throws(() => loadMapping('bridge: [unclosed'), /not YAML/);
  });

  it('renders dot paths, arrays and objects, and nothing else', () => {
    const scope = { payload: { Name: 'Acme', ids: ['001A', '001B'], o: { a: 1 } } };
    assert.equal(
      render('{{payload.Name}}: {{payload.ids}} {{payload.o}} {{payload.ids.1}}', scope),
      'Acme: 001A, 001B {"a":1} 001B',
    );
    assert.equal(render('{{payload.missing}}|{{constructor}}', scope), '|');
  });
});

describe('bridge kit', () => {
  let parley: TestParley;
  let world: Awaited<ReturnType<typeof createWorld>>;
  let ops: Member;
  let alice: Member;
  let room: string;
  let bridgeId: string;
  let bridgeCreds: string;
  let aliceToken: string;

  before(async () => {
    // Propagate-only telemetry: no exporter, but W3C context flows through every hop.
    parley = await startParley({ telemetry: loadTelemetryConfig({}) });
    world = await createWorld(parley);
    ops = await world.person('ops');
    alice = await world.person('alice', ['tool:crm.note.add']);
    const b = await world.bridgeAgent(ops, 'crm-bridge', ['tool:crm.note.add']);
    bridgeId = b.id;
    bridgeCreds = b.creds;
    const r = await ops.agent.rooms.create('crm events', { members: [bridgeId, alice.id] });
    room = r.id;
    aliceToken = (await alice.agent.tokens.issue(bridgeId, ['tool:crm.note.add'], { ttlSeconds: 3600 }))
      .token;
  });
  after(async () => {
    await world?.close();
    await parley?.destroy();
  });

  const mapping = (extra = '') => `
bridge: crm
inbound:
  - type: crm.account.changed
    to: { room: __ROOM__ }
    text: "Account {{payload.name}} changed by {{user}}"
  - type: crm.case.*
    to:
      case: { key: "{{payload.account}}", title: "Case {{payload.account}}", members: [__ALICE__] }
    text: "Case event {{type}}"
    data: { account: "{{payload.account}}" }
  - type: crm.deal.*
    to: { room: __ROOM__ }
    text: "Deal {{payload.deal}}: {{type}}"
    data: false
    mentions: [__ALICE__]
    task: { key: "{{payload.deal}}" }
  - type: crm.task.*
    to: { agent: __ALICE__ }
    text: "Task {{payload.title}}"
    data: false
identities:
  "005-alice": { tokenEnv: ALICE_TOKEN, user: __ALICE__ }
outbound:
  - action: addNote
    tool: crm.note.add
    reply: "note {{result.noteId}} added for {{principal}}"
  - action: deleteNote
    tool: crm.note.delete
${extra}`;
  const fill = (y: string) => y.replaceAll('__ROOM__', room).replaceAll('__ALICE__', alice.id);

  it('stores a source event once however often the source replays it; unmapped types are ignored, refusals never reach a room', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()), undefined, { ALICE_TOKEN: aliceToken });
    const ev = { id: 'evt-1', type: 'crm.account.changed', user: '005-alice', payload: { name: 'Acme' } };
    const first = await bridge.ingest(ev);
    const again = await bridge.ingest(ev);
    assert.equal(first.outcome, 'stored');
    assert.equal(again.outcome, 'duplicate');
    assert.equal(again.message, first.message);
    assert.equal((await bridge.ingest({ ...ev, id: 'evt-2', type: 'crm.lead.created' })).outcome, 'ignored');
    bridge.refuse('bad_signature', {
      sourceId: 'evt-3',
      type: ev.type,
      message: 'signature does not verify',
    });
    const msgs = (await messagesOf(alice.agent, room)).filter((m) => textOf(m.message).startsWith('Account'));
    assert.equal(msgs.length, 1);
    assert.equal(textOf(msgs[0]?.message), 'Account Acme changed by 005-alice');
    // The payload is a data part; the message is labelled as outside content from this bridge.
    assert.deepEqual(msgs[0]?.message.parts[1], { type: 'data', data: { name: 'Acme' } });
    assert.equal(msgs[0]?.message.provenance?.trust, 'external');
    assert.equal(msgs[0]?.message.clientMsgId, clientMsgIdOf('crm', 'evt-1'));
    assert.equal(bridge.metrics.count('ignored'), 1);
    assert.equal(bridge.metrics.count('refused', 'bad_signature'), 1);
    assert.equal(bridge.metrics.count('duplicate'), 1);
  });

  it('acts for the Parley user the source user maps to (alice’s delegation), and refuses unmapped users when identity is required', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping('requireIdentity: true')), undefined, {
      ALICE_TOKEN: aliceToken,
    });
    const r = await bridge.ingest({
      id: 'evt-10',
      type: 'crm.account.changed',
      user: '005-alice',
      payload: { name: 'Beta' },
    });
    assert.equal(r.outcome, 'stored');
    const stored = (await messagesOf(alice.agent, room)).find((m) => m.message.id === r.message);
    assert.equal(stored?.message.onBehalfOf?.principal, alice.id);
    assert.deepEqual(stored?.message.onBehalfOf?.chain, [bridgeId]);
    const refused = await bridge.ingest({
      id: 'evt-11',
      type: 'crm.account.changed',
      user: '005-mallory',
      payload: { name: 'X' },
    });
    assert.deepEqual([refused.outcome, refused.reason], ['refused', 'unmapped_identity']);
    assert.equal(
      (await messagesOf(alice.agent, room)).filter((m) => textOf(m.message).includes('X changed')).length,
      0,
    );
  });

  it('continues the source’s trace: the stored message carries the trace id the source sent', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()));
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const r = await bridge.ingest({
      id: 'evt-20',
      type: 'crm.account.changed',
      payload: { name: 'Traced' },
      trace: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
    });
    const stored = (await messagesOf(alice.agent, room)).find((m) => m.message.id === r.message);
    assert.equal(stored?.message.trace?.traceparent.split('-')[1], traceId);
  });

  it('opens one case room per key, also across a restart with lost state', async () => {
    const agent = await world.connect(bridgeCreds);
    const dir = await world.stateDir();
    const bridge = await world.bridge(agent, fill(mapping()), dir);
    const a = await bridge.ingest({ id: 'c-1', type: 'crm.case.opened', payload: { account: 'ACME-1' } });
    const b = await bridge.ingest({ id: 'c-2', type: 'crm.case.updated', payload: { account: 'ACME-1' } });
    assert.equal(a.room, b.room);
    // Another state directory (the file was lost): the room is found again by its title.
    const fresh = await world.bridge(agent, fill(mapping()), await world.stateDir());
    const c = await fresh.ingest({ id: 'c-3', type: 'crm.case.updated', payload: { account: 'ACME-1' } });
    assert.equal(c.room, a.room);
    const room_ = await alice.agent.rooms.get(a.room as string);
    assert.equal(room_.title, 'Case ACME-1');
    assert.ok(room_.members.some((m) => m.id === alice.id));
    const msgs = await messagesOf(alice.agent, a.room as string);
    assert.deepEqual(
      msgs.map((m) => m.message.parts[1]),
      [
        { type: 'data', data: { account: 'ACME-1' } },
        { type: 'data', data: { account: 'ACME-1' } },
        { type: 'data', data: { account: 'ACME-1' } },
      ],
    );
  });

  it('opens one room for a case whose first events arrive at the same time', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()));
    const results = await Promise.all(
      Array.from({ length: 5 }, (_, i) =>
        bridge.ingest({ id: `race-${i}`, type: 'crm.case.opened', payload: { account: 'RACE-1' } }),
      ),
    );
    assert.equal(new Set(results.map((r) => r.room)).size, 1);
    assert.equal((await agent.rooms.list()).filter((r) => r.title === 'Case RACE-1').length, 1);
  });

  it('keeps one room with a participant for `to.agent` rules', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()));
    const a = await bridge.ingest({ id: 't-1', type: 'crm.task.created', payload: { title: 'call Acme' } });
    const b = await bridge.ingest({ id: 't-2', type: 'crm.task.done', payload: { title: 'call Acme' } });
    assert.equal(a.room, b.room);
    const r = await alice.agent.rooms.get(a.room as string);
    assert.ok(r.members.some((m) => m.id === alice.id));
    assert.deepEqual(
      (await messagesOf(alice.agent, a.room as string)).map((m) => m.message.parts),
      [[{ type: 'text', text: 'Task call Acme' }], [{ type: 'text', text: 'Task call Acme' }]],
    );
  });

  it('turns the events of one key into a task: assigned first, updated after, and answers inside it', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()));
    bridge.tool('crm.note.add', async () => ({ noteId: 'N-9' }));
    await bridge.start();
    const opened = await bridge.ingest({ id: 'd-1', type: 'crm.deal.opened', payload: { deal: 'D-1' } });
    const won = await bridge.ingest({ id: 'd-2', type: 'crm.deal.won', payload: { deal: 'D-1' } });
    const other = await bridge.ingest({ id: 'd-3', type: 'crm.deal.opened', payload: { deal: 'D-2' } });
    const byId = async (id: string | undefined) =>
      (await historyOf(alice.agent, room)).find((e) => e.message.id === id)?.message;
    const [a, b, c] = [await byId(opened.message), await byId(won.message), await byId(other.message)];
    assert.deepEqual([a?.kind, b?.kind, c?.kind], ['task.assigned', 'task.update', 'task.assigned']);
    assert.ok(a?.task?.startsWith('task_'));
    assert.equal(b?.task, a?.task);
    assert.notEqual(c?.task, a?.task);
    // A request inside the task is answered inside it.
    const token = (await alice.agent.tokens.issue(bridgeId, ['tool:crm.note.add'])).token;
    const ask = await alice.agent.rooms.room(room).send(
      [
        {
          type: 'data',
          data: { agent: bridgeId, action: 'addNote', args: {} },
          mediaType: ACTION_MEDIA_TYPE,
        },
      ],
      { delegation: token, mentions: [bridgeId], task: a?.task as string, kind: 'task.update' },
    );
    let answer: Awaited<ReturnType<typeof byId>>;
    await waitFor(async () => {
      answer = (await historyOf(alice.agent, room)).find((e) => e.message.replyTo === ask.id)?.message;
      return answer !== undefined;
    }, 'the answer');
    assert.deepEqual([answer?.kind, answer?.task], ['task.update', a?.task]);
    // Stop consuming: later tests start a bridge of the same participant.
    await agent.close();
  });

  it('dead-letters a poison event with its source id and goes on with the next', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()));
    const poison = await bridge.ingest({
      id: 'evt-poison',
      type: 'crm.account.changed',
      payload: { name: 'Big', blob: 'x'.repeat(300 * 1024) },
    });
    assert.deepEqual([poison.outcome, poison.reason], ['dead_lettered', 'too_large']);
    const next = await bridge.ingest({
      id: 'evt-after',
      type: 'crm.account.changed',
      payload: { name: 'Small' },
    });
    assert.equal(next.outcome, 'stored');
    const letters = await bridge.state.deadLetters();
    assert.equal(letters.length, 1);
    assert.equal(letters[0]?.sourceId, 'evt-poison');
    assert.match(letters[0]?.reason ?? '', /PAYLOAD_TOO_LARGE/);
    assert.equal(
      (await messagesOf(alice.agent, room)).filter((m) => textOf(m.message).includes('Big')).length,
      0,
    );
  });

  it('shows a source outage as presence offline with the reason, and online again after', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()));
    await bridge.sourceDown('ECONNREFUSED crm.example:443');
    const presence = async () =>
      (await alice.agent.call(registryApi.presence, { participants: [bridgeId] })).presence[bridgeId];
    await waitFor(async () => (await presence())?.state === 'offline', 'presence offline');
    assert.match((await presence())?.activity ?? '', /source unreachable: ECONNREFUSED/);
    await bridge.sourceUp();
    await waitFor(async () => (await presence())?.state === 'online', 'presence online again');
  });

  it('runs an outbound action as a tool call under the asker’s delegation, and refuses one without it', async () => {
    const agent = await world.connect(bridgeCreds);
    const bridge = await world.bridge(agent, fill(mapping()));
    const calls: unknown[] = [];
    bridge.tool('crm.note.add', async (args, ctx) => {
      calls.push({ args, principal: ctx.principal });
      return { noteId: 'N-1' };
    });
    await bridge.start();
    const ask = (args: Record<string, unknown>) => [
      { type: 'text' as const, text: 'add a note' },
      {
        type: 'data' as const,
        data: { agent: bridgeId, action: 'addNote', args },
        mediaType: ACTION_MEDIA_TYPE,
      },
    ];
    const token = (await alice.agent.tokens.issue(bridgeId, ['tool:crm.note.add'])).token;
    const withToken = await alice.agent.rooms
      .room(room)
      .send(ask({ text: 'called' }), { delegation: token, mentions: [bridgeId] });
    const without = await alice.agent.rooms
      .room(room)
      .send(ask({ text: 'sneaky' }), { mentions: [bridgeId] });
    const answerTo = async (id: string) =>
      (await messagesOf(alice.agent, room)).find(
        (m) => m.message.replyTo === id && m.message.sender.id === bridgeId,
      );
    await waitFor(
      async () => (await answerTo(withToken.id)) !== undefined && (await answerTo(without.id)) !== undefined,
      'both answers',
    );
    const ok = await answerTo(withToken.id);
    assert.equal(textOf(ok?.message), `note N-1 added for ${alice.id}`);
    const result = ok?.message.parts.find((p) => p.type === 'data' && p.mediaType === RESULT_MEDIA_TYPE);
    assert.ok(result?.type === 'data');
    assert.deepEqual(calls, [{ args: { text: 'called' }, principal: alice.id }]);
    assert.match(
      textOf((await answerTo(without.id))?.message),
      /refused: the request carries no delegation token/,
    );
    // Governance decided and the audit holds the call, on alice's behalf.
    const chain = await alice.agent.call(
      governanceApi.auditChain,
      { of: result.data.toolCall as string },
      { timeout: 30_000 },
    );
    assert.equal(chain.hops[0]?.kind, 'tool_call');
    assert.equal(chain.hops[0]?.status, 'ok');
    assert.equal(chain.origin, alice.id);

    // A tool outside the token's scope: governance refuses, the tool never runs, the refusal is audited.
    let deletes = 0;
    bridge.tool('crm.note.delete', async () => {
      deletes++;
      return {};
    });
    const del = await alice.agent.rooms.room(room).send(
      [
        {
          type: 'data',
          data: { agent: bridgeId, action: 'deleteNote', args: { id: 'N-1' } },
          mediaType: ACTION_MEDIA_TYPE,
        },
      ],
      {
        delegation: (await alice.agent.tokens.issue(bridgeId, ['tool:crm.note.add'])).token,
        mentions: [bridgeId],
      },
    );
    await waitFor(async () => (await answerTo(del.id)) !== undefined, 'the refusal');
    const refusal = await answerTo(del.id);
    assert.match(textOf(refusal?.message), /^deleteNote refused: PERMISSION_DENIED/);
    assert.equal(deletes, 0);
    const refusedCall = refusal?.message.parts.find(
      (p) => p.type === 'data' && p.mediaType === RESULT_MEDIA_TYPE,
    );
    assert.ok(refusedCall?.type === 'data');
    const denied = await alice.agent.call(
      governanceApi.auditChain,
      { of: refusedCall.data.toolCall as string },
      { timeout: 30_000 },
    );
    assert.equal(denied.hops[0]?.status, 'denied');
    assert.equal(bridge.metrics.count('refused'), 0, 'a denied action is not a refused event');
  });
});

describe('bridge state across a crash before the cursor was written', () => {
  let parley: TestParley;
  let world: Awaited<ReturnType<typeof createWorld>>;

  before(async () => {
    parley = await startParley();
    world = await createWorld(parley);
  });
  after(async () => {
    await world?.close();
    await parley?.destroy();
  });

  const retriedSends = () => ingressDuplicates(parley);

  it('the restarted bridge does not send again what it stored, whatever the dedupe window', async () => {
    const ops = await world.person('ops');
    const b = await world.bridgeAgent(ops, 'journal', []);
    const room = (await ops.agent.rooms.create('journal', { members: [b.id] })).id;
    const mapping = `bridge: journal\ninbound:\n  - type: t\n    to: { room: ${room} }\n    text: "{{payload.n}}"\n`;
    const dir = await world.stateDir();
    const events = (from: number, to: number) =>
      Array.from({ length: to - from }, (_, i) => ({
        event: { id: `e-${from + i}`, type: 't', payload: { n: from + i } },
        cursor: `c-${from + i}`,
      }));
    const first = await world.bridge(await world.connect(b.creds), mapping, dir);
    // The process dies after storing the batch and before its cursor reaches the disk.
    first.state.advance = async () => {
      throw new Error('killed');
    };
    await assert.rejects(first.ingestBatch(events(0, 5)), /killed/);
    const before_ = await retriedSends();
    const second = await world.bridge(await world.connect(b.creds), mapping, dir);
    assert.equal(second.state.cursor, undefined, 'the cursor was not written');
    const results = await second.ingestBatch(events(0, 8));
    assert.deepEqual(
      results.map((r) => r.outcome),
      ['duplicate', 'duplicate', 'duplicate', 'duplicate', 'duplicate', 'stored', 'stored', 'stored'],
    );
    assert.equal(await retriedSends(), before_, 'nothing was sent again (the ingress saw no retry)');
    assert.equal(second.state.cursor, 'c-7');
    const texts = (await messagesOf(ops.agent, room)).map((m) => textOf(m.message));
    assert.deepEqual(texts, ['0', '1', '2', '3', '4', '5', '6', '7']);
    // The counter does see a retry: e-0 sent again past the journal is recognised by the ingress.
    assert.equal((await second.ingest({ id: 'e-0', type: 't', payload: { n: 0 } })).outcome, 'duplicate');
    assert.equal(await retriedSends(), before_ + 1);
    // Once the cursor is past them, the journal is empty.
    const third = await world.bridge(await world.connect(b.creds), mapping, dir);
    assert.equal(third.state.storedSinceCursor('e-0'), false);
  });

  it('one stream’s cursor write keeps another stream’s journaled events: they are not sent again after a crash', async () => {
    const ops = await world.person('ops2');
    const b = await world.bridgeAgent(ops, 'streams', []);
    const room = (await ops.agent.rooms.create('streams', { members: [b.id] })).id;
    const mapping = `bridge: streams\ninbound:\n  - type: t\n    to: { room: ${room} }\n    text: "{{payload.n}}"\n`;
    const dir = await world.stateDir();
    // Two streams (as two Salesforce topics), each batch moving its own stream's position.
    const batch = (stream: string, n: number) =>
      Array.from({ length: n }, (_, i) => ({
        event: { id: `${stream}-${i}`, type: 't', payload: { n: `${stream}${i}` } },
        cursor: `${stream}:${i}`,
      }));
    const first = await world.bridge(await world.connect(b.creds), mapping, dir);
    const advance = first.state.advance.bind(first.state);
    let kill = true;
    // Stream a's batch is stored, then its cursor write is lost (the process dies right after
    // stream b's batch wrote its own cursor).
    first.state.advance = async (...args) => {
      if (kill) {
        kill = false;
        throw new Error('killed');
      }
      return advance(...args);
    };
    await assert.rejects(first.ingestBatch(batch('a', 3)), /killed/);
    await first.ingestBatch(batch('b', 2));
    const before_ = await retriedSends();
    const second = await world.bridge(await world.connect(b.creds), mapping, dir);
    assert.deepEqual(
      (await second.ingestBatch(batch('a', 4))).map((r) => r.outcome),
      ['duplicate', 'duplicate', 'duplicate', 'stored'],
    );
    assert.equal(await retriedSends(), before_, 'stream a’s stored events were not sent again');
    const texts = (await messagesOf(ops.agent, room)).map((m) => textOf(m.message));
    assert.deepEqual(texts, ['a0', 'a1', 'a2', 'b0', 'b1', 'a3']);
  });
});
