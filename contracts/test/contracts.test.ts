import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  callerOf,
  decodeJson,
  encodeJson,
  isParleyError,
  newId,
  ParleyError,
  partitionOf,
  RoomMessage,
  roomsApi,
  SendRequest,
  subjects,
} from '@parley/contracts';

const enc = new TextEncoder();

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return isParleyError(err) ? err.code : `not a ParleyError: ${err}`;
  }
  return undefined;
}

describe('subjects', () => {
  it('are built from validated tokens', () => {
    const agent = newId('agent');
    const room = newId('room');
    assert.equal(subjects.send(agent), `parley.in.${agent}.send`);
    assert.equal(subjects.inbox(agent, room), `parley.inbox.${agent}.${room}`);
    assert.equal(roomsApi.create.subject(agent), `parley.in.${agent}.api.rooms.create`);
    assert.equal(callerOf(roomsApi.create.subject(agent)), agent);
  });

  it('refuse ids that would smuggle wildcards or extra tokens', () => {
    for (const bad of ['a.b', '*', '>', 'agt_x y', '']) {
      assert.equal(
        codeOf(() => subjects.send(bad)),
        'INVALID_ARGUMENT',
        bad,
      );
    }
    assert.equal(
      codeOf(() => subjects.room(-1, newId('room'))),
      'INVALID_ARGUMENT',
    );
  });

  it('spread rooms over partitions deterministically', () => {
    const counts = new Array(16).fill(0);
    for (let i = 0; i < 1600; i++) counts[partitionOf(newId('room'), 16)]++;
    assert.ok(Math.min(...counts) > 50, `uneven: ${counts}`);
    const room = newId('room');
    assert.equal(partitionOf(room, 16), partitionOf(room, 16));
    // FNV-1a reference value (computed independently), so bridges in other languages can check theirs.
    assert.equal(partitionOf('room_01J0000000000000000000000', 16), 2714527738 % 16);
  });
});

describe('decodeJson', () => {
  it('names the failing field of a wrongly typed request', () => {
    const bad = encodeJson({ clientMsgId: 'c1', room: newId('room'), parts: [{ type: 'text', text: 42 }] });
    try {
      decodeJson(SendRequest, bad);
      assert.fail('accepted');
    } catch (err) {
      assert.ok(isParleyError(err, 'INVALID_ARGUMENT'));
      assert.match((err as ParleyError).message, /parts\.0\.text/);
    }
  });

  it('refuses non-JSON and non-UTF-8 bytes', () => {
    assert.equal(
      codeOf(() => decodeJson(SendRequest, enc.encode('{nope'))),
      'INVALID_ARGUMENT',
    );
    assert.equal(
      codeOf(() => decodeJson(SendRequest, new Uint8Array([0xff, 0xfe, 0x7b]))),
      'INVALID_ARGUMENT',
    );
  });

  it('refuses oversized payloads before parsing them', () => {
    assert.equal(
      codeOf(() => decodeJson(SendRequest, new Uint8Array(2048), { maxBytes: 1024 })),
      'PAYLOAD_TOO_LARGE',
    );
  });

  it('fills defaults of a valid send', () => {
    const req = decodeJson(
      SendRequest,
      encodeJson({ clientMsgId: 'c1', room: newId('room'), parts: [{ type: 'text', text: 'hi' }] }),
    );
    assert.equal(req.kind, 'message');
    assert.deepEqual(req.mentions, []);
    assert.equal(req.hop, 0);
  });

  it('keeps a file part honest: it needs an artifact key or a url', () => {
    const msg = {
      id: newId('message'),
      room: newId('room'),
      sender: { id: newId('agent'), kind: 'agent' },
      kind: 'message',
      parts: [{ type: 'file', name: 'plan.md' }],
      hop: 0,
      sentAt: new Date().toISOString(),
    };
    assert.equal(RoomMessage.safeParse(msg).success, false);
  });
});

describe('ParleyError', () => {
  it('round-trips through its envelope and is recognised by code, not class', () => {
    const e = new ParleyError('RATE_LIMITED', 'slow down', { retryAfterMs: 250, details: { limit: 10 } });
    const back = ParleyError.fromEnvelope(JSON.parse(JSON.stringify(e.toEnvelope())));
    assert.equal(back.code, 'RATE_LIMITED');
    assert.equal(back.retryAfterMs, 250);
    assert.deepEqual(back.details, { limit: 10 });
    assert.ok(isParleyError({ code: 'NO_CONSENT' }, 'NO_CONSENT'));
    assert.ok(!isParleyError({ code: 'SOMETHING_ELSE' }));
  });

  it('does not take names inherited from Object.prototype for error codes', () => {
    for (const code of ['constructor', 'toString', 'hasOwnProperty', '__proto__']) {
      assert.equal(isParleyError({ code }), false, code);
    }
  });
});
