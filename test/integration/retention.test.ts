/**
 * Retention a platform team sets (docs/operations.md, "Retention"), against a real nats-server: the
 * room log's per-room cap and byte limit, the inbox's per-room cap and byte limit, what a reader of
 * history, a sender, an agent that was away and the agents that were not each notice at the limit.
 * Small limits (a few messages, 1 MiB), never waits for an age to pass.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { jetstreamManager } from '@nats-io/jetstream';
import {
  INBOX_SHARDS,
  inboxShardOf,
  inboxStream,
  inboxStreams,
  isParleyError,
  type ParleyError,
  streams,
  subjects,
} from '@parley/contracts';
import { loadConfig as loadInitConfig } from '@parley/init';
import { ConfigError, ensureBackbone, MIN_INBOX_BYTES, MIN_STREAM_BYTES, silentLogger } from '@parley/kit';
import type { Delivery } from '@parley/sdk';
import { loadConfig as loadStandaloneConfig } from '@parley/standalone';
import {
  memoryCursorStore,
  type ServiceProcess,
  senderAndReceiver,
  serviceConnection,
  startParley,
  startRoomsProcess,
  startServer,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

async function streamState(parley: TestParley, name: string) {
  const nc = await serviceConnection(parley);
  try {
    return (await (await jetstreamManager(nc, { timeout: 30_000 })).streams.info(name)).state;
  } finally {
    await nc.close();
  }
}

const root = resolve(fileURLToPath(import.meta.url), '../../..');

/** Settings that must be refused, each with what the error has to say about it. */
const BAD: [name: string, value: string, says: RegExp][] = [
  ['PARLEY_ROOMS_MAX_AGE_MS', '-1', />=0|too small/i],
  ['PARLEY_ROOMS_MAX_AGE_MS', '60000', /duplicate window/],
  ['PARLEY_ROOMS_MAX_BYTES', '-5', />=0|too small/i],
  ['PARLEY_ROOMS_MAX_BYTES', '262144', /largest message/],
  ['PARLEY_ROOMS_MAX_MSGS_PER_ROOM', '3', /at least 10/],
  ['PARLEY_ROOMS_MAX_MSGS_PER_ROOM', 'lots', /number/i],
  ['PARLEY_INBOX_MAX_AGE_MS', '1.5', /int/i],
  ['PARLEY_INBOX_MAX_BYTES', '1000', /largest message/],
  // 1 MiB is enough for the room log, not for the 16 inbox streams sharing the inboxes' limit.
  [
    'PARLEY_INBOX_MAX_BYTES',
    String(MIN_STREAM_BYTES),
    /at least 16777216 bytes .*each of the 16 inbox streams/,
  ],
  ['PARLEY_INBOX_MAX_MSGS_PER_ROOM', '0', />=1|too small/i],
];

describe('retention: settings', () => {
  it('refuses every bad setting, naming it, in the init step and the standalone alike', () => {
    for (const [name, value, says] of BAD) {
      for (const load of [loadInitConfig, loadStandaloneConfig]) {
        assert.throws(
          () => load({ [name]: value }),
          (err: unknown) =>
            err instanceof ConfigError && err.message.includes(`${name}:`) && says.test(err.message),
          `${name}=${value}`,
        );
      }
    }
    // Every problem at once, and the good values through.
    assert.throws(
      () => loadInitConfig({ PARLEY_ROOMS_MAX_BYTES: '10', PARLEY_INBOX_MAX_BYTES: '10' }),
      (err: unknown) =>
        err instanceof ConfigError &&
        /PARLEY_ROOMS_MAX_BYTES:[\s\S]*PARLEY_INBOX_MAX_BYTES:/.test(err.message),
    );
    const ok = loadInitConfig({
      PARLEY_ROOMS_MAX_BYTES: String(MIN_STREAM_BYTES),
      PARLEY_INBOX_MAX_BYTES: String(MIN_INBOX_BYTES),
      PARLEY_ROOMS_MAX_AGE_MS: '0',
    });
    assert.equal(ok.PARLEY_ROOMS_MAX_BYTES, MIN_STREAM_BYTES);
    assert.equal(ok.PARLEY_INBOX_MAX_BYTES, MIN_INBOX_BYTES);
    assert.equal(ok.PARLEY_ROOMS_MAX_AGE_MS, 0);
  });

  it('npm start with a bad setting stops before anything starts, and says which', async () => {
    const home = await mkdtemp(join(tmpdir(), 'parley-retention-'));
    try {
      const child = spawn(
        process.execPath,
        [resolve(root, 'services/standalone/src/main.ts'), '--home', home, '--no-demo'],
        {
          cwd: root,
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, PARLEY_ROOMS_MAX_BYTES: '4096', PARLEY_NATS_PORT: '0' },
        },
      );
      let err = '';
      child.stderr.on('data', (d) => {
        err += d;
      });
      const code = await new Promise<number | null>((r) => child.on('exit', r));
      assert.equal(code, 2, err);
      assert.match(err, /PARLEY_ROOMS_MAX_BYTES: must be 0 \(no byte limit\) or at least 1048576 bytes/);
    } finally {
      await rm(home, { recursive: true, force: true });
    }
  });
});

describe('retention: the backbone setup', () => {
  it('applies changed limits to existing streams at the next start, and removes them again', async () => {
    const server = await startServer();
    const nc = await server.connect();
    try {
      const jsm = await jetstreamManager(nc);
      await ensureBackbone(nc, {}, silentLogger());
      // An inbox subject holding 20 entries before the cap is lowered to 7.
      const inboxSubject = subjects.inbox('agt_away', 'room_one');
      for (let i = 0; i < 20; i++) await jsm.jetstream().publish(inboxSubject, new Uint8Array(8));
      const limited = {
        roomsMaxAgeMs: 30 * 86_400_000,
        roomsMaxBytes: 8 * MIN_STREAM_BYTES,
        roomsMaxMsgsPerRoom: 500,
        inboxMaxAgeMs: 86_400_000,
        inboxMaxBytes: 4 * MIN_INBOX_BYTES,
        inboxMaxMsgsPerSubject: 7,
      };
      const report = await ensureBackbone(nc, limited, silentLogger());
      const action = (name: string) => report.streams.find((s) => s.name === name)?.action;
      assert.equal(action(streams.rooms), 'updated');
      for (const name of inboxStreams()) assert.equal(action(name), 'updated', name);
      assert.equal(action(streams.audit), 'unchanged');
      const rooms = (await jsm.streams.info(streams.rooms)).config;
      assert.equal(rooms.max_bytes, 8 * MIN_STREAM_BYTES);
      assert.equal(rooms.max_msgs_per_subject, 500);
      assert.equal(rooms.max_age, 30 * 86_400_000 * 1e6);
      // The inboxes' byte limit is shared evenly by the inbox streams.
      const inbox = (await jsm.streams.info(inboxStream('agt_away'))).config;
      assert.equal(inbox.max_bytes, (4 * MIN_INBOX_BYTES) / INBOX_SHARDS);
      assert.equal(inbox.max_msgs_per_subject, 7);
      assert.equal(inbox.max_age, 86_400_000 * 1e6);
      // A lower limit removes what is over it at once, oldest first.
      const kept = await jsm.streams.info(inboxStream('agt_away'), { subjects_filter: inboxSubject });
      assert.equal(kept.state.subjects?.[inboxSubject], 7);
      assert.equal(kept.state.first_seq, 14);
      // Back to the defaults: the byte limits and the room cap are gone again.
      await ensureBackbone(nc, {}, silentLogger());
      const back = (await jsm.streams.info(streams.rooms)).config;
      assert.equal(back.max_bytes, -1);
      assert.equal(back.max_msgs_per_subject, -1);
      assert.equal((await jsm.streams.info(inboxStream('agt_away'))).config.max_msgs_per_subject, 10_000);
    } finally {
      await nc.close();
      await server.stop();
    }
  });
});

describe('retention: per-room caps (room log 10 entries, inbox 3 per participant and room)', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley({ backbone: { roomsMaxMsgsPerRoom: 10, inboxMaxMsgsPerSubject: 3 } });
  });
  after(async () => {
    await parley?.destroy();
  });

  it('a room past its cap: every send is accepted and delivered, history says where it starts', async () => {
    const { room, handled: got } = await senderAndReceiver(parley, 'capped');
    // Each send after the one before was delivered: the cap removes the oldest entries whether the
    // fan-out read them or not, and a 3-node cluster's fan-out fell more than 10 entries behind 14
    // sends in a row (the online member got 10 or 12 of them).
    const sent: number[] = [];
    for (let i = 0; i < 14; i++) {
      sent.push((await room.send(`m${i}`)).roomSeq);
      await waitFor(
        () => got.length === i + 1,
        () => `delivery ${i + 1} (got ${got.length})`,
      );
    }
    // Nothing accepted is lost to the cap: the member online got every message, in order.
    assert.deepEqual(
      got.map(textOf),
      Array.from({ length: 14 }, (_, i) => `m${i}`),
    );
    // The room keeps its newest 10 entries: m4..m13 (its creation and joins went first).
    const latest = await room.history({ limit: 50 });
    assert.deepEqual(
      latest.entries.map((e) => e.seq),
      sent.slice(4).reverse(),
    );
    assert.equal(latest.more, false);
    assert.equal(latest.retainedFrom, sent[4]);
    // A cursor into what was removed is refused with a stable code saying where history starts.
    const stale = await room.history({ order: 'oldest', after: sent[0] }).then(
      () => assert.fail('a read after a removed position must be refused'),
      (err: unknown) => err,
    );
    assert.ok(isParleyError(stale, 'HISTORY_EXPIRED'), String(stale));
    assert.equal((stale as ParleyError).details?.retainedFrom, sent[4]);
    const older = await room.history({ before: sent[4] }).catch((err: unknown) => err);
    assert.ok(isParleyError(older, 'HISTORY_EXPIRED'), String(older));
    // From where retained history starts, it reads through.
    const rest = await room.history({ order: 'oldest', after: (sent[4] ?? 0) - 1 });
    assert.deepEqual(
      rest.entries.map((e) => e.seq),
      sent.slice(4),
    );
    assert.equal(rest.retainedFrom, sent[4]);
    // Without a cursor, the oldest page is the oldest retained, flagged.
    const own = await room.history({ order: 'oldest', limit: 3 });
    assert.deepEqual(
      own.entries.map((e) => e.seq),
      sent.slice(4, 7),
    );
    assert.equal(own.more, true);
  });

  it('an agent away past both caps: the others keep receiving, and it is told what it missed', async () => {
    const a = await parley.participant();
    const away = await parley.participant();
    // The agent online shares the inbox stream of the agent away: its traffic fills that stream.
    let there = await parley.participant();
    for (let i = 0; i < 200 && inboxShardOf(there.id) !== inboxShardOf(away.id); i++)
      there = await parley.participant();
    assert.equal(inboxShardOf(there.id), inboxShardOf(away.id), 'a participant in the same inbox shard');
    const sender = await parley.connect(a.creds);
    const present = await parley.connect(there.creds);
    const presentGot: string[] = [];
    present.on('message', (d) => {
      presentGot.push(textOf(d));
    });
    await present.listening;
    const store = memoryCursorStore();
    const got: Delivery[] = [];
    const first = await parley.connect(away.creds, { delivery: { cursorStore: store } });
    first.on('message', (d) => {
      got.push(d);
    });
    await first.listening;
    const room = await sender.rooms.create('away', { members: [away.id, there.id] });
    const sent = [(await room.send('m0')).roomSeq];
    await waitFor(() => got.length === 1, 'the first message');
    await first.close();
    // 15 more while it is away: its inbox keeps 3 of them, the room log its newest 10 entries.
    for (let i = 1; i <= 15; i++) sent.push((await room.send(`m${i}`)).roomSeq);
    await waitFor(
      () => presentGot.length === 16,
      () => `16 for the agent online (got ${presentGot.length})`,
    );
    assert.deepEqual(
      presentGot,
      Array.from({ length: 16 }, (_, i) => `m${i}`),
    );

    const errors: unknown[] = [];
    const back = await parley.connect(away.creds, {
      delivery: { cursorStore: store },
      onError: (err) => errors.push(err),
    });
    back.on('message', (d) => {
      got.push(d);
    });
    // m6..m15 are in the room log (m6..m12 backfilled from it, m13..m15 from the inbox); m1..m5 are gone.
    await waitFor(
      () => got.length === 11,
      () => `11 deliveries after the return (got ${got.length})`,
    );
    assert.deepEqual(got.map(textOf), ['m0', ...Array.from({ length: 10 }, (_, i) => `m${i + 6}`)]);
    const firstBack = got[1];
    assert.deepEqual(firstBack?.gap, { after: sent[0], retainedFrom: sent[6] });
    assert.equal(firstBack?.backfilled, true);
    assert.ok(got.slice(2).every((d) => d.gap === undefined));
    assert.ok(got.slice(-3).every((d) => !d.backfilled));
    const told = errors.find((e) => isParleyError(e, 'HISTORY_EXPIRED')) as ParleyError | undefined;
    assert.equal(told?.details?.retainedFrom, sent[6]);
    assert.equal(told?.details?.room, room.id);
  });
});

describe('retention: a room whose first entries the cap removed before the fan-out read them', () => {
  let parley: TestParley;
  let replica: ServiceProcess | undefined;
  before(async () => {
    // No fan-out until the test starts one: the in-process rooms service takes sends (the ingress)
    // and serves the control plane only.
    parley = await startParley({
      backbone: { roomsMaxMsgsPerRoom: 10 },
      rooms: { PARLEY_FANOUT: false },
    });
  });
  after(async () => {
    await replica?.kill9();
    await parley?.destroy();
  });

  it('the fan-out that comes after delivers what the log holds, in order, once', async () => {
    // The room's creation, its joins and m0..m3 are gone from the log before any fan-out reads it:
    // a fan-out that lagged more than the cap behind (seen on a 3-node cluster under a burst).
    const { room, handled: got } = await senderAndReceiver(parley, 'capped before the fan-out');
    const sent: number[] = [];
    for (let i = 0; i < 14; i++) sent.push((await room.send(`m${i}`)).roomSeq);
    assert.equal((await room.history({ order: 'oldest', limit: 1 })).retainedFrom, sent[4]);
    replica = await startRoomsProcess(parley, 'fanout-0', { PARLEY_INGRESS: 'false' });
    // Its view of the room starts from the room's members (before: nobody, so nothing was ever
    // delivered to anyone in the room, then or later).
    await waitFor(
      () => got.length >= 10,
      () => `the 10 messages the log holds (got ${got.map(textOf).join(', ') || 'nothing'})`,
      60_000,
    );
    // And what is sent after reaches the member too.
    await room.send('after');
    await waitFor(
      () => got.length >= 11,
      () => `the message sent after (got ${got.map(textOf).join(', ')})`,
    );
    assert.deepEqual(got.map(textOf), [...Array.from({ length: 10 }, (_, i) => `m${i + 4}`), 'after']);
    assert.deepEqual(
      got.slice(0, 10).map((d) => d.roomSeq),
      sent.slice(4),
    );
    assert.match(replica.output(), /the room's first log entries were removed before the fan-out read them/);
  });
});

const big = (i: number) => `m${i} ${'x'.repeat(100 * 1024)}`;
const label = (d: Delivery) => textOf(d).split(' ')[0];

describe('retention: the room log at a 1 MiB byte limit', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley({ backbone: { roomsMaxBytes: MIN_STREAM_BYTES } });
  });
  after(async () => {
    await parley?.destroy();
  });

  it('the room log at its byte limit: sends are accepted and delivered, the oldest history goes', async () => {
    const { room, handled } = await senderAndReceiver(parley, 'bytes');
    const sent: number[] = [];
    // The first message delivered before the log fills: the room's membership is in its first
    // entries, and a fan-out more than the byte limit behind would find them gone (likely what a
    // loaded 3-node run saw: 0 of 15 delivered) — see docs/operations.md, "Retention".
    sent.push((await room.send(big(0))).roomSeq);
    await waitFor(() => handled.length === 1, 'the first delivery');
    for (let i = 1; i < 15; i++) sent.push((await room.send(big(i))).roomSeq);
    await waitFor(
      () => handled.length === 15,
      () => `15 deliveries (got ${handled.length})`,
    );
    assert.deepEqual(
      handled.map(label),
      Array.from({ length: 15 }, (_, i) => `m${i}`),
    );
    const state = await streamState(parley, streams.rooms);
    assert.ok(state.bytes <= MIN_STREAM_BYTES, `room log holds ${state.bytes} bytes`);
    // Small pages: ten of these messages would come close to NATS's 1 MiB max_payload in one reply.
    const page = await room.history({ order: 'oldest', limit: 3 });
    const retainedFrom = page.retainedFrom ?? 0;
    assert.ok(retainedFrom > (sent[0] ?? 0), 'the oldest messages are no longer retained');
    assert.equal(page.entries[0]?.seq, retainedFrom);
    assert.equal(page.more, true);
    const latest = await room.history({ limit: 1 });
    assert.equal(latest.entries[0]?.seq, sent.at(-1));
    assert.equal(latest.retainedFrom, retainedFrom, 'every page says where retained history starts');
    const stale = await room.history({ order: 'oldest', after: sent[0] }).catch((err: unknown) => err);
    assert.ok(isParleyError(stale, 'HISTORY_EXPIRED'), String(stale));
  });
});

describe('retention: the inboxes at a byte limit of 1 MiB per inbox stream', () => {
  let parley: TestParley;
  before(async () => {
    parley = await startParley({ backbone: { inboxMaxBytes: MIN_INBOX_BYTES } });
  });
  after(async () => {
    await parley?.destroy();
  });

  it('an inbox past its byte limit: the others keep receiving, the fenced writes go on, the agent away catches up', async () => {
    const a = await parley.participant();
    const away = await parley.participant();
    // The agent online shares the inbox stream of the agent away: its traffic fills that stream.
    let there = await parley.participant();
    for (let i = 0; i < 200 && inboxShardOf(there.id) !== inboxShardOf(away.id); i++)
      there = await parley.participant();
    assert.equal(inboxShardOf(there.id), inboxShardOf(away.id), 'a participant in the same inbox shard');
    const sender = await parley.connect(a.creds);
    const present = await parley.connect(there.creds);
    const presentGot: string[] = [];
    present.on('message', (d) => {
      presentGot.push(label(d) ?? '');
    });
    await present.listening;
    const store = memoryCursorStore();
    const got: Delivery[] = [];
    const first = await parley.connect(away.creds, { delivery: { cursorStore: store } });
    first.on('message', (d) => {
      got.push(d);
    });
    await first.listening;
    const quiet = await sender.rooms.create('quiet', { members: [away.id] });
    await quiet.send('q0');
    await waitFor(() => got.length === 1, 'the first message');
    await first.close();
    await quiet.send('q1');
    // Another room's traffic fills the inbox stream: the absent agent's entries are the oldest and
    // go first, until its inbox subject is empty, while the agent online receives every message.
    const busy = await sender.rooms.create('busy', { members: [there.id] });
    for (let i = 0; i < 15; i++) await busy.send(big(i));
    await waitFor(
      () => presentGot.length === 15,
      () => `15 for the agent online (got ${presentGot.length})`,
    );
    assert.deepEqual(
      presentGot,
      Array.from({ length: 15 }, (_, i) => `m${i}`),
    );
    const state = await streamState(parley, inboxStream(away.id));
    assert.ok(state.bytes <= MIN_STREAM_BYTES, `inbox stream holds ${state.bytes} bytes`);
    // The fan-out's next write to the emptied inbox subject is fenced against an entry retention
    // removed: it must still go through, chained to what was delivered before.
    await quiet.send('q2');
    const back = await parley.connect(away.creds, { delivery: { cursorStore: store } });
    back.on('message', (d) => {
      got.push(d);
    });
    await waitFor(
      () => got.length === 3,
      () => `3 quiet messages (got ${got.map(textOf).join(', ')})`,
    );
    assert.deepEqual(got.map(textOf), ['q0', 'q1', 'q2']);
    // q1 was lost from the inbox and read back from the room log; nothing is missing.
    assert.equal(got[1]?.backfilled, true);
    assert.equal(got[2]?.backfilled, false);
    assert.ok(got.every((d) => d.gap === undefined));
  });
});
