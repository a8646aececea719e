/**
 * Bad tool arguments and refusals come back as MCP tool errors carrying Parley's error codes — never
 * as crashes — and change nothing.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { newId } from '@parley/contracts';
import { startParley, type TestParley } from '@parley/test/harness';
import { type Bridge, spawnBridge, textOf } from './helpers.js';

describe('parley mcp: tool errors', () => {
  let parley: TestParley;
  let dir: string;
  let bridge: Bridge;
  let room: string;

  before(async () => {
    parley = await startParley();
    dir = await mkdtemp(join(tmpdir(), 'parley-mcp-errors-'));
    const me = await parley.participant();
    const creds = join(dir, 'me.creds');
    await writeFile(creds, me.creds, { mode: 0o600 });
    bridge = await spawnBridge({ creds, server: parley.natsUrl });
    room = (await bridge.ok<{ room: { id: string } }>('create_room', { title: 'mine' })).room.id;
    await bridge.ok('send_message', { room, text: 'the only message' });
  });
  after(async () => {
    await bridge?.close();
    await parley?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  const refused = async (name: string, args: Record<string, unknown>, code: string, field?: string) => {
    const r = await bridge.call(name, args);
    assert.equal(r.isError, true, `${name} ${JSON.stringify(args).slice(0, 80)} was accepted`);
    const error = (
      r.structuredContent as { error: { code: string; details?: { issues?: { path: string }[] } } }
    ).error;
    assert.equal(error.code, code, textOf(r));
    assert.ok(textOf(r).startsWith(`${code}: `));
    if (field)
      assert.ok(
        error.details?.issues?.some((i) => i.path === field),
        `no issue on ${field}: ${textOf(r)}`,
      );
  };

  it('wrong types, missing and unknown arguments, oversize values: INVALID_ARGUMENT naming the field', async () => {
    await refused('send_message', { room: 'nope', text: 'hi' }, 'INVALID_ARGUMENT', 'room');
    await refused('send_message', { room }, 'INVALID_ARGUMENT', 'text');
    await refused('send_message', { room, text: 'x'.repeat(200_000) }, 'INVALID_ARGUMENT', 'text');
    await refused('send_message', { room, text: 'hi', mentions: 'everyone' }, 'INVALID_ARGUMENT', 'mentions');
    await refused(
      'send_message',
      { room, text: 'hi', handoff: { done: [] } },
      'INVALID_ARGUMENT',
      'handoff.goal',
    );
    await refused('wait_for_messages', { timeoutSeconds: 'soon' }, 'INVALID_ARGUMENT', 'timeoutSeconds');
    await refused('wait_for_messages', { timeoutSeconds: 601 }, 'INVALID_ARGUMENT', 'timeoutSeconds');
    await refused('wait_for_messages', { max: 0 }, 'INVALID_ARGUMENT', 'max');
    await refused('whoami', { verbose: true }, 'INVALID_ARGUMENT');
    await refused(
      'report_usage',
      { model: 'm', inputTokens: -1, outputTokens: 0 },
      'INVALID_ARGUMENT',
      'inputTokens',
    );
    await refused('set_status', { state: 'sleeping' }, 'INVALID_ARGUMENT', 'state');
    await refused('answer_contact_request', { id: 'creq_1', answer: 'maybe' }, 'INVALID_ARGUMENT');
  });

  it('unknown objects and rooms outside the caller’s rights: their Parley codes', async () => {
    const stranger = newId('room');
    await refused('send_message', { room: stranger, text: 'hi' }, 'NOT_FOUND');
    await refused('read_history', { room: stranger }, 'NOT_FOUND');
    // Somebody else's room: it exists, the caller is not in it.
    const other = await parley.connect((await parley.participant()).creds, { presence: false });
    const theirs = (await other.rooms.create('theirs')).id;
    await refused('send_message', { room: theirs, text: 'let me in' }, 'NOT_A_MEMBER');
    await refused('read_history', { room: theirs }, 'NOT_A_MEMBER');
    assert.equal(
      (await other.rooms.room(theirs).history()).entries.filter((e) => e.message.kind === 'message').length,
      0,
    );
    await refused('invite', { room: stranger, participant: newId('agent') }, 'NOT_FOUND');
    await refused('leave_room', { room: stranger }, 'NOT_FOUND');
    await refused('answer_contact_request', { id: newId('contactRequest'), answer: 'accept' }, 'NOT_FOUND');
  });

  it('an unknown tool and a bad resource URI are protocol errors, and the session goes on unchanged', async () => {
    await assert.rejects(
      () => bridge.client.callTool({ name: 'drop_tables', arguments: {} }),
      (err: unknown) => err instanceof McpError && /NOT_FOUND/.test(err.message),
    );
    await assert.rejects(
      () => bridge.client.readResource({ uri: 'parley://rooms/../../etc' }),
      (err: unknown) => err instanceof McpError && /INVALID_ARGUMENT/.test(err.message),
    );
    const me = await bridge.ok<{ id: string }>('whoami');
    assert.match(me.id, /^agt_/);
    const rooms = await bridge.ok<{ rooms: { id: string }[] }>('list_rooms');
    assert.deepEqual(
      rooms.rooms.map((r) => r.id),
      [room],
    );
    const history = await bridge.ok<{ messages: { event: string; text: string }[] }>('read_history', {
      room,
    });
    assert.deepEqual(
      history.messages.filter((m) => m.event === 'message').map((m) => m.text),
      ['the only message'],
      'nothing was sent by the refused calls',
    );
  });
});
