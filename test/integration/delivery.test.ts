import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstream, jetstreamManager, type StoredMsg } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import { headerNames, inboxStream, roomsApi, streams, subjects } from '@parley/contracts';
import type { Agent, Delivery } from '@parley/sdk';
import {
  connectService,
  memoryCursorStore,
  senderAndReceiver,
  startParley,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

describe('SDK delivery', () => {
  let parley: TestParley;
  before(async () => {
    // A tiny inbox cap per (participant, room) so an absent agent falls behind it.
    parley = await startParley({ backbone: { inboxMaxMsgsPerSubject: 5 } });
  });
  after(async () => {
    await parley?.destroy();
  });

  /**
   * A member of a new room `name` that handled its first message (m0) and went away; `again()`
   * connects it once more with the same cursor store, and `listen(agent)` collects what it handles
   * into `got` after m0.
   */
  async function awayAfterFirst(name: string) {
    const store = memoryCursorStore();
    const {
      receiver,
      member,
      creds,
      room,
      handled: got,
    } = await senderAndReceiver(parley, name, {
      delivery: { cursorStore: store },
    });
    await room.send('m0');
    await waitFor(() => got.length === 1, 'the first message');
    await receiver.close();
    const listen = (agent: Agent) =>
      agent.on('message', (d) => {
        got.push(d);
      });
    const again = () => parley.connect(creds, { delivery: { cursorStore: store } });
    return { member, room, got, again, listen };
  }

  /**
   * Stores an inbox entry read back (`stored`) once more on `subject`, with its Parley headers (and
   * `set` over them), as the fan-out would write it; JetStream's own headers are left out.
   */
  async function storeAgain(
    nc: Awaited<ReturnType<typeof connectService>>,
    subject: string,
    stored: StoredMsg,
    set: Record<string, string> = {},
  ) {
    const h = natsHeaders();
    for (const [k, v] of stored.header) if (!k.startsWith('Nats-')) for (const x of v) h.append(k, x);
    for (const [k, v] of Object.entries(set)) h.set(k, v);
    await jetstream(nc).publish(subject, stored.data, { headers: h });
  }

  it('backfills from history what an absent agent lost to the inbox cap, in order', async () => {
    const { room, got, again, listen } = await awayAfterFirst('gap');
    for (let i = 1; i <= 20; i++) await room.send(`m${i}`);
    listen(await again());
    await waitFor(() => got.length === 21, 'all 21 messages', 15_000);
    assert.deepEqual(
      got.map(textOf),
      Array.from({ length: 21 }, (_, i) => `m${i}`),
    );
    const backfilled = got.filter((d) => d.backfilled).length;
    // The inbox kept the newest 5 (a membership event among them): the rest came from history.
    assert.ok(backfilled >= 15, `only ${backfilled} were backfilled`);
    assert.ok(got.slice(-4).every((d) => !d.backfilled));
    // Only what came from the inbox says when it was stored and received.
    assert.ok(got.every((d) => (d.backfilled ? !d.inboxedAt && !d.receivedAt : d.inboxedAt && d.receivedAt)));
  });

  it('reads history again when it comes back short of the hole (a replica catching up), and hands nothing out of order', async () => {
    const { room, got, again: connectAgain, listen } = await awayAfterFirst('short read');
    for (let i = 1; i <= 20; i++) await room.send(`m${i}`);
    const again = await connectAgain();
    // The first history read answers as a replica still applying the log would: the first three
    // entries of the hole, and nothing more to read.
    const call = again.call.bind(again);
    let reads = 0;
    again.call = (async (method: unknown, req: unknown, options?: unknown) => {
      const res = await (call as (m: unknown, r: unknown, o?: unknown) => Promise<unknown>)(
        method,
        req,
        options,
      );
      if (method !== roomsApi.history || reads++ > 0) return res;
      const page = res as { entries: unknown[] };
      return { ...page, entries: page.entries.slice(0, 3), more: false };
    }) as typeof again.call;
    listen(again);
    await waitFor(() => got.length === 21, 'all 21 messages', 15_000);
    assert.deepEqual(
      got.map(textOf),
      Array.from({ length: 21 }, (_, i) => `m${i}`),
    );
    assert.ok(reads >= 2, `history was read ${reads} time(s)`);
    await again.close();
  });

  it('backfills what the inbox lost after the fan-out stored it, when the next entry comes', async () => {
    const { member, room, got, again: connectAgain, listen } = await awayAfterFirst('lost by the inbox');
    for (let i = 1; i <= 3; i++) await room.send(`m${i}`);
    // The inbox loses its two newest entries after the fan-out stored them, and its last entry is
    // again the one before them (as the new leader of an inbox stream had it after a whole-cluster
    // kill -9 of nats-server 2.9.10, though their PubAcks had come back). nats-server 2.9.10 takes a
    // subject whose newest entry was deleted for empty, so that entry is stored once more after them.
    const nc = await connectService(parley);
    try {
      const jsm = await jetstreamManager(nc);
      const stream = inboxStream(member);
      const subject = subjects.inbox(member, room.id);
      const stored = async () => {
        const out: number[] = [];
        for (let seq = 1; ; ) {
          const m = await jsm.direct.getMessage(stream, { seq, next_by_subj: subject });
          if (!m) return out;
          out.push(m.seq);
          seq = m.seq + 1;
        }
      };
      await waitFor(async () => (await stored()).length >= 4, 'm0…m3 in the inbox');
      const [m1, m2, m3] = (await stored()).slice(-3) as [number, number, number];
      const before = await jsm.streams.getMessage(stream, { seq: m1 });
      assert.ok(before);
      for (const seq of [m3, m2]) assert.ok(await jsm.streams.deleteMessage(stream, seq));
      await storeAgain(nc, subject, before);
    } finally {
      await nc.close();
    }
    await room.send('m4');
    const again = await connectAgain();
    listen(again);
    await waitFor(() => got.length === 5, 'all 5 messages', 15_000);
    assert.deepEqual(got.map(textOf), ['m0', 'm1', 'm2', 'm3', 'm4']);
    assert.deepEqual(
      got.map((d) => d.backfilled),
      [false, false, true, true, false],
    );
    await again.close();
  });

  it('hands out at once an entry that names its own position as the one before it', async () => {
    const { member, room, got, again: connectAgain, listen } = await awayAfterFirst('chained to itself');
    await room.send('m1');
    // m1's inbox entry is replaced by one naming m1's own position before it, as a fan-out run that
    // held a position twice once wrote (chaos test); the history read for the "hole" before it can
    // never reach that position.
    const nc = await connectService(parley);
    try {
      const jsm = await jetstreamManager(nc);
      const stream = inboxStream(member);
      const subject = subjects.inbox(member, room.id);
      const last = () => jsm.streams.getMessage(stream, { last_by_subj: subject });
      const isM1 = (data: Uint8Array | undefined) =>
        data !== undefined && JSON.parse(new TextDecoder().decode(data)).parts[0]?.text === 'm1';
      await waitFor(async () => isM1((await last())?.data), 'm1 in the inbox');
      const m1 = await last();
      assert.ok(m1);
      const roomSeq = m1.header.get(headerNames.roomSeq);
      assert.ok(await jsm.streams.deleteMessage(stream, m1.seq));
      await storeAgain(nc, subject, m1, { [headerNames.prevSeq]: roomSeq });
    } finally {
      await nc.close();
    }
    const again = await connectAgain();
    listen(again);
    // Before, the history read was refused as short of the named position and tried again for a
    // minute (BACKFILL_RETRY_MS) before m1 was handed out.
    await waitFor(() => got.length === 2, 'm1', 15_000);
    assert.deepEqual(got.map(textOf), ['m0', 'm1']);
    await again.close();
  });

  it('per-room concurrency: a slow room does not hold up another, and each stays in order', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const slow = await sender.rooms.create('slow', { members: [r.id] });
    const fast = await sender.rooms.create('fast', { members: [r.id] });
    let release!: () => void;
    const gate = new Promise<void>((res) => {
      release = res;
    });
    const got: { room: string; text: string; delivery: Delivery; handledAt: number }[] = [];
    const agent = await parley.connect(r.creds, { delivery: { concurrency: 'per-room' } });
    agent.on('message', async (d) => {
      if (d.room === slow.id && textOf(d) === 's0') await gate;
      got.push({ room: d.room, text: textOf(d), delivery: d, handledAt: Date.now() });
    });
    await agent.listening;
    await slow.send('s0');
    await slow.send('s1');
    for (let i = 0; i < 5; i++) await fast.send(`f${i}`);
    await waitFor(
      () => got.filter((g) => g.room === fast.id).length === 5,
      'the fast room while the slow one waits',
    );
    assert.equal(got.filter((g) => g.room === slow.id).length, 0);
    const releasedAt = Date.now();
    release();
    await waitFor(() => got.length === 7, 'the slow room');
    assert.deepEqual(
      got.filter((g) => g.room === slow.id).map((g) => g.text),
      ['s0', 's1'],
    );
    assert.deepEqual(
      got.filter((g) => g.room === fast.id).map((g) => g.text),
      ['f0', 'f1', 'f2', 'f3', 'f4'],
    );
    // Each says when it was stored and when this process received it: s1 came before the fast
    // room's messages and waited behind s0, so its wait is after `receivedAt`, not before it.
    for (const g of got) {
      const { inboxedAt, receivedAt } = g.delivery;
      assert.ok(inboxedAt && receivedAt, `${g.text}: inboxedAt ${inboxedAt}, receivedAt ${receivedAt}`);
      assert.ok(
        inboxedAt <= receivedAt + 1 && receivedAt <= g.handledAt,
        `${g.text}: ${inboxedAt} ${receivedAt} ${g.handledAt}`,
      );
    }
    const s1 = got.find((g) => g.text === 's1');
    assert.ok(s1?.delivery.receivedAt && s1.delivery.receivedAt < releasedAt && s1.handledAt >= releasedAt);
  });

  it('a failing handler is retried before anything after it, then the lane continues in order', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const room = await sender.rooms.create('retry', { members: [r.id] });
    const got: string[] = [];
    let failures = 0;
    const agent = await parley.connect(r.creds, { delivery: { backoffMs: () => 30 } });
    agent.on('message', (d) => {
      if (textOf(d) === 'flaky' && failures < 2) {
        failures++;
        throw new Error('transient');
      }
      got.push(`${textOf(d)}${d.redelivered ? ' (redelivered)' : ''}`);
    });
    await agent.listening;
    for (const t of ['a', 'flaky', 'b', 'c']) await room.send(t);
    await waitFor(() => got.length === 4, 'four messages');
    assert.deepEqual(got, ['a', 'flaky (redelivered)', 'b', 'c']);
  });

  it('inside a handler, sends carry causedBy and hop + 1', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const asker = await parley.connect(s.creds);
    const answerer = await parley.connect(r.creds);
    const room = await asker.rooms.create('causality', { members: [r.id] });
    answerer.on('message', async (d) => {
      await answerer.rooms.room(d.room).send('answer');
    });
    const answers: Delivery[] = [];
    asker.on('message', (d) => {
      answers.push(d);
    });
    await Promise.all([answerer.listening, asker.listening]);
    const q = await room.send('question', { hop: 2 });
    await waitFor(() => answers.length === 1, 'the answer');
    assert.equal(answers[0]?.message.causedBy, q.id);
    assert.equal(answers[0]?.message.hop, 3);
  });
});

describe('SDK delivery: a message the room log holds at two positions', () => {
  let parley: TestParley;
  before(async () => {
    // An inbox keeps one entry per (participant, room), and the dedupe window is short, so the
    // fan-out stores the second copy in the inbox.
    parley = await startParley({ backbone: { inboxMaxMsgsPerSubject: 1, duplicateWindowMs: 1_000 } });
  });
  after(async () => {
    await parley?.destroy();
  });

  /**
   * Stores the room-log entry of `sent` once more, past the dedupe window counted from `sentAt`
   * (as a JetStream fault can leave it); returns the copy's position.
   */
  async function storeAgain(sent: { roomSeq: number }, sentAt: number): Promise<number> {
    const nc = await connectService(parley);
    try {
      const stored = await (await jetstreamManager(nc)).streams.getMessage(streams.rooms, {
        seq: sent.roomSeq,
      });
      assert.ok(stored, 'the message is in the room log');
      await waitFor(() => Date.now() - sentAt > 1_500, 'the dedupe window to pass');
      return (await jetstream(nc).publish(stored.subject, stored.data, { headers: stored.header })).seq;
    } finally {
      await nc.close();
    }
  }

  /**
   * What a JetStream fault can leave (a retried send stored twice, a history read from a copy that
   * went another way): the same message at two positions, the first reaching the member only through
   * the backfill that its second copy set off. The second was then handed out again. Returns the
   * (text, position, backfilled) of each delivery, and what they should be.
   */
  async function twice(mode: 'handlers' | 'pull') {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds, { presence: false });
    const store = memoryCursorStore();
    const got: Delivery[] = [];
    const connectMember = async () => {
      const agent = await parley.connect(r.creds, {
        presence: false,
        delivery: { mode, cursorStore: store },
      });
      if (mode === 'handlers') {
        agent.on('message', (d) => {
          got.push(d);
        });
        await agent.listening;
      }
      return agent;
    };
    /** Pull mode: acknowledged batches until `until` was handed out. */
    const pullUntil = async (agent: Agent, until: () => boolean) => {
      while (!until()) {
        const batch = await agent.pull();
        got.push(...batch.deliveries.filter((d) => d.event === 'message'));
        await batch.ack();
      }
    };
    const first = await connectMember();
    const room = await sender.rooms.create('twice', { members: [r.id] });
    await room.send('m0');
    if (mode === 'pull') await pullUntil(first, () => got.length === 1);
    await waitFor(() => got.length === 1, 'the first message');
    await first.close();

    const sent = await room.send('m1');
    const copy = await storeAgain(sent, Date.now());
    assert.ok(copy > sent.roomSeq);

    const back = await connectMember();
    const next = await room.send('m2');
    const arrived = () => got.some((d) => d.message.id === next.id);
    if (mode === 'pull') await pullUntil(back, arrived);
    await waitFor(arrived, 'the message after them');
    await back.close();
    return {
      got: got.map((d) => [textOf(d), d.roomSeq, d.backfilled]),
      want: [
        ['m0', sent.roomSeq - 1, false],
        ['m1', sent.roomSeq, true],
        ['m2', next.roomSeq, false],
      ],
    };
  }

  it('is handled once, also when its first copy comes from history', async () => {
    const { got, want } = await twice('handlers');
    assert.deepEqual(got, want);
  });

  it('is handed out once in pull mode, also when its first copy comes from history', async () => {
    const { got, want } = await twice('pull');
    assert.deepEqual(got, want);
  });

  it('is handed out once in pull mode when both copies are queued before a pull', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds, { presence: false });
    const queued: string[] = [];
    const reader = await parley.connect(r.creds, {
      presence: false,
      delivery: { mode: 'pull', onQueued: (d) => void queued.push(d.message.id) },
    });
    await reader.listen();
    const room = await sender.rooms.create('twice queued', { members: [r.id] });
    const sent = await room.send('m1');
    const sentAt = Date.now();
    await waitFor(() => queued.includes(sent.id), 'm1 to be queued');
    await storeAgain(sent, sentAt);
    // The copy comes before m2 in the log, so it was looked at once m2 is queued.
    const next = await room.send('m2');
    await waitFor(() => queued.includes(next.id), 'm2 to be queued');
    const got: string[] = [];
    while (!got.includes('m2')) {
      const batch = await reader.pull();
      got.push(...batch.deliveries.filter((d) => d.event === 'message').map(textOf));
      await batch.ack();
    }
    assert.deepEqual(got, ['m1', 'm2']);
    await reader.close();
  });
});
