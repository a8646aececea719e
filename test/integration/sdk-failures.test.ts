/**
 * The SDK says when it fails where nobody awaits the failure: handler exceptions, dropped tool-call
 * audit records, delivery engine errors go to `connect({ onError })` and `connect({ logger })`;
 * nothing is said without them. API misuse is refused with INVALID_ARGUMENT.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { isParleyError } from '@parley/contracts';
import type { Failure } from '@parley/sdk';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';
import { createWorld } from './fixtures/governance.js';

describe('sdk: failures nobody awaits', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley();
  });
  after(async () => {
    await parley?.destroy();
  });

  it('a handler exception reaches onError and the logger (source handler), and the message comes again', async () => {
    const a = await parley.participant();
    const b = await parley.participant();
    const seen: { err: unknown; failure: Failure }[] = [];
    const logged: { obj: Record<string, unknown>; msg: string }[] = [];
    const alice = await parley.connect(a.creds);
    const bob = await parley.connect(b.creds, {
      onError: (err, failure) => seen.push({ err, failure }),
      logger: { warn: (obj, msg) => logged.push({ obj, msg }) },
      delivery: { backoffMs: () => 1 },
    });
    let calls = 0;
    bob.on('message', () => {
      calls++;
      if (calls === 1) throw new Error('handler broke');
    });
    await bob.listening;
    const room = await alice.rooms.create('failing handler', { members: [b.id] });
    await room.send('hello');
    await waitFor(() => calls >= 2, 'the message to come again after the handler threw');
    const failure = seen.find((s) => s.failure.source === 'handler');
    assert.ok(failure, JSON.stringify(seen.map((s) => s.failure)));
    assert.equal((failure.err as Error).message, 'handler broke');
    assert.equal(failure.failure.participant, b.id);
    assert.equal(failure.failure.details?.room, room.id);
    assert.ok(logged.some((l) => l.obj.source === 'handler' && l.obj.err === 'handler broke'));
  });

  it('a tool-call outcome governance never got is reported (tool_audit), the call still returns', async () => {
    const world = await createWorld(parley);
    const owner = await world.person('tool-owner', ['notes:read'], { listen: false });
    const noter = await world.agentOf(owner, 'noter', ['notes:read']);
    const seen: Failure[] = [];
    const agent = await parley.connect(noter.creds, { onError: (_err, f) => seen.push(f) });
    const result = await agent.tools.call(
      'notes.read',
      {},
      async () => {
        // The connection goes away while the tool runs: its outcome cannot be recorded.
        await agent.nc.close();
        return 'notes';
      },
      { onBehalfOf: null, action: 'notes:read' },
    );
    assert.equal(result, 'notes');
    await waitFor(() => seen.some((f) => f.source === 'tool_audit'), 'the dropped audit record');
    const f = seen.find((s) => s.source === 'tool_audit');
    assert.equal(f?.details?.tool, 'notes.read');
    assert.equal(f?.details?.status, 'ok');
    assert.match(String(f?.details?.toolCall), /^tc_/);
    await world.close();
  });

  it('is silent by default: a throwing handler without onError breaks nothing', async () => {
    const a = await parley.participant();
    const b = await parley.participant();
    const alice = await parley.connect(a.creds);
    const bob = await parley.connect(b.creds, { delivery: { backoffMs: () => 1 } });
    let calls = 0;
    bob.on('message', () => {
      calls++;
      if (calls === 1) throw new Error('once');
    });
    await bob.listening;
    const room = await alice.rooms.create('silent', { members: [b.id] });
    await room.send('hi');
    await waitFor(() => calls >= 2, 'the retry');
  });

  it('API misuse is INVALID_ARGUMENT', async () => {
    const a = await parley.participant();
    const pulling = await parley.connect(a.creds, { delivery: { mode: 'pull' } });
    assert.throws(
      () => pulling.on('message', () => undefined),
      (err: unknown) => isParleyError(err, 'INVALID_ARGUMENT'),
    );
    const b = await parley.participant();
    const pushing = await parley.connect(b.creds);
    await assert.rejects(pushing.pull(), (err: unknown) => isParleyError(err, 'INVALID_ARGUMENT'));
  });
});
