/** What a model is shown when messages of a room were lost to retention while its agent was away. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { RoomMessage } from '@parley/contracts';
import { renderMessages, structure } from '@parley/mcp';

const message: RoomMessage = {
  id: 'msg_01JABCDEFGHJKMNPQRSTVWXYZ0',
  room: 'room_01JABCDEFGHJKMNPQRSTVWXYZ0',
  sender: { id: 'agt_01JABCDEFGHJKMNPQRSTVWXYZ0', kind: 'agent' },
  kind: 'message',
  parts: [{ type: 'text', text: 'the first one still kept' }],
  mentions: [],
  hop: 0,
  sentAt: '2026-12-01T12:00:00.000Z',
};

describe('rendering a retention gap', () => {
  it('warns before the first message after the hole, and only there', () => {
    const first = structure({
      message,
      room: message.room,
      seq: 40,
      trusted: true,
      gap: { after: 12, retainedFrom: 40 },
    });
    const next = structure({ message, room: message.room, seq: 41, trusted: true });
    assert.deepEqual(first.gap, { after: 12, retainedFrom: 40 });
    assert.equal(next.gap, undefined);
    const text = renderMessages([first, next], 'FENCE');
    const lines = text.split('\n');
    const warning = lines.findIndex((l) => l.includes('may be missing'));
    assert.ok(warning >= 0, text);
    assert.match(lines[warning] ?? '', /after #12 and before #40/);
    assert.ok(warning < lines.findIndex((l) => l.includes('#40]')), 'the warning comes before the message');
    assert.equal(text.match(/may be missing/g)?.length, 1);
  });
});
