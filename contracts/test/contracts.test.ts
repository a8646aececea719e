import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  callerOf,
  decodeJson,
  encodeJson,
  INBOX_SHARDS,
  inboxConsumer,
  inboxShardOf,
  inboxStream,
  inboxStreams,
  isInboxStream,
  isParleyError,
  newId,
  ParleyError,
  partitionOf,
  RoomMessage,
  roomsApi,
  SendRequest,
  streamDefinitions,
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
    assert.equal(subjects.inbox(agent, room), `parley.inbox.${inboxShardOf(agent)}.${agent}.${room}`);
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

  it('put each participant in one of 16 inbox streams, by the same hash, with disjoint subjects', () => {
    const counts = new Array(INBOX_SHARDS).fill(0);
    for (let i = 0; i < 1600; i++) counts[inboxShardOf(newId('agent'))]++;
    assert.ok(Math.min(...counts) > 50, `uneven: ${counts}`);
    // FNV-1a reference value (computed independently): the Go client computes the same shard.
    assert.equal(inboxShardOf('agt_01J0000000000000000000000'), 982419843 % 16);
    const agent = newId('agent');
    const stream = inboxStream(agent);
    assert.equal(stream, `PARLEY_INBOX_${inboxShardOf(agent)}`);
    assert.ok(isInboxStream(stream));
    for (const other of ['PARLEY_INBOX', 'PARLEY_INBOX_16', 'PARLEY_INBOX_01', 'PARLEY_ROOMS']) {
      assert.equal(isInboxStream(other), false, other);
    }
    const consumer = inboxConsumer(agent);
    assert.equal(consumer.stream, stream);
    assert.equal(consumer.filterSubject, `parley.inbox.${inboxShardOf(agent)}.${agent}.*`);
    // Each inbox stream holds its own shard's subjects and shares the inboxes' byte limit.
    const defs = streamDefinitions({ inboxMaxBytes: 32 * 1024 * 1024 }).filter((d) => isInboxStream(d.name));
    assert.deepEqual(
      defs.map((d) => d.name),
      inboxStreams(),
    );
    assert.deepEqual(
      defs.map((d) => d.subjects),
      inboxStreams().map((_, k) => [`parley.inbox.${k}.*.*`]),
    );
    assert.ok(defs.every((d) => d.maxBytes === 2 * 1024 * 1024));
    assert.ok(
      defs
        .find((d) => d.name === stream)
        ?.subjects.every((f) => subjectMatches(f, subjects.inbox(agent, newId('room')))),
    );
  });
});

/** NATS subject matching of `*` tokens (what a stream's subjects mean). */
function subjectMatches(filter: string, subject: string): boolean {
  const f = filter.split('.');
  const s = subject.split('.');
  return f.length === s.length && f.every((t, i) => t === '*' || t === s[i]);
}

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
