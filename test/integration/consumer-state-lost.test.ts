/**
 * A consumer whose state nats-server lost: every nats-server before 2.11.11 (and 2.12.0) rewrites a
 * consumer's state file in place (open with truncate, then write), so a kill -9 between the two
 * leaves it empty, and the consumer comes back at its start: a partition consumer at the start of
 * the room log, an inbox consumer at the start of the inbox, pushing everything again. Measured on
 * 2.9.10: 7 of 1,800 consumer state files empty after 60 kill -9s under load (30 consumers), and in
 * a crash test one member's inbox consumer came back with nothing delivered, 5,990 entries to push
 * again before the new ones. Made here exactly: the state files are emptied while nats-server is
 * stopped.
 */
import assert from 'node:assert/strict';
import { readdir, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { type JetStreamManager, jetstreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { buckets, inboxShardOf, inboxStream, partitionOf, roomsApi, streams } from '@parley/contracts';
import { partitionConsumer } from '@parley/rooms/internal';
import type { Delivery, RoomHandle } from '@parley/sdk';
import {
  codeOf,
  connectService,
  senderAndReceiver,
  startParley,
  streamDir,
  type TestParley,
  waitFor,
} from '@parley/test/harness';

/** Empties the state files of a stopped nats-server's consumers of `stream` that `which` picks. */
async function emptyConsumerState(
  root: string,
  stream: string,
  which: (name: string) => boolean,
): Promise<number> {
  const dir = await streamDir(root, stream);
  assert.ok(dir, `${stream} is in the store`);
  const consumers = (await readdir(join(dir, 'obs'))).filter(which);
  for (const c of consumers) await truncate(join(dir, 'obs', c, 'o.dat'), 0);
  return consumers.length;
}

/** What `ask` answers once it does (the test's own connection may still be reconnecting). */
async function answered<T>(ask: () => Promise<T>): Promise<T> {
  let answer: T | undefined;
  await waitFor(async () => {
    answer = await ask().catch(() => undefined);
    return answer !== undefined;
  }, 'JetStream to answer');
  return answer as T;
}

/**
 * Sends `n` messages to `room`, 20 at a time, and waits until `member` handled them all and its inbox
 * consumer acknowledged everything it delivered; resolves what was sent and the consumer's floor.
 */
async function sendHandledAndAcknowledged(
  room: RoomHandle,
  handled: Delivery[],
  jsm: JetStreamManager,
  member: string,
  n: number,
): Promise<{ sent: { id: string; roomSeq: number }[]; floor: number }> {
  const sent: { id: string; roomSeq: number }[] = [];
  for (let i = 0; i < n; i += 20)
    sent.push(...(await Promise.all(Array.from({ length: 20 }, (_, k) => room.send(`m${i + k}`)))));
  await waitFor(() => handled.length === n, 'the earlier messages to be handled');
  let floor = 0;
  await waitFor(async () => {
    const c = await jsm.consumers.info(inboxStream(member), member);
    floor = c.ack_floor.stream_seq;
    return c.num_ack_pending === 0 && floor === c.delivered.stream_seq;
  }, 'the earlier messages acknowledged');
  return { sent, floor };
}

/**
 * Sends one more message to `room` and waits until `member` handled it; asserts that everything
 * was handled once, in room order: the earlier messages `sent`, then this one.
 */
async function nextHandledOnceInOrder(
  room: RoomHandle,
  handled: Delivery[],
  sent: { id: string; roomSeq: number }[],
): Promise<void> {
  const next = await room.send('next');
  await waitFor(
    () => handled.some((d) => d.message.id === next.id),
    'the next message to be handled',
    30_000,
  );
  assert.deepEqual(
    handled.map((d) => d.message.id),
    [...sent.sort((x, y) => x.roomSeq - y.roomSeq).map((m) => m.id), next.id],
  );
}

/**
 * Waits until the SDK reported its inbox consumer made again. The next message may be handled first:
 * the old consumer pushes it while the SDK's request to make the consumer again is on its way (that
 * request is one the rooms service answers once JetStream does, after the restart; the next message
 * needs JetStream too, but not that answer), and the SDK handles deliveries past what it had before.
 */
async function madeAgain(failures: unknown[]): Promise<void> {
  await waitFor(() => failures.length > 0, 'the SDK to report its inbox consumer made again', 30_000);
}

/** The inbox floor the rooms service recorded for `member`. */
async function recordedFloor(floors: KV, member: string): Promise<number | undefined> {
  const e = await floors.get(`inbox.${inboxShardOf(member)}`);
  return e?.json<Record<string, number>>()[member];
}

describe('a consumer whose state nats-server lost (kill -9 while it rewrote its state file)', () => {
  let parley: TestParley;
  let nc: NatsConnection;
  before(async () => {
    // One node: the state files are emptied on disk while it is stopped. The inbox floors are
    // recorded every 200 ms instead of 10 s.
    parley = await startParley({ nodes: 1, rooms: { PARLEY_INBOX_FLOORS_MS: 200 } });
    nc = await connectService(parley);
  });
  after(async () => {
    await nc?.close();
    await parley?.destroy();
  });

  it('the fan-out and the member go on after what they acknowledged instead of pushing the room log and the inbox again; nothing is handled twice', async () => {
    const failures: { reason?: unknown; err?: string }[] = [];
    const { room, handled, member } = await senderAndReceiver(parley, 'state lost', {
      onError: (err, failure) =>
        failures.push({ reason: failure.details?.reason, err: (err as Error).message }),
    });
    const jsm = await jetstreamManager(nc);
    // Enough for the SDK to have read its consumer's acknowledgement floor a few times (every 250).
    const earlier = 1_200;
    const { sent } = await sendHandledAndAcknowledged(room, handled, jsm, member, earlier);

    await parley.restartNats({
      kill: true,
      whileStopped: async () => {
        assert.equal(
          await emptyConsumerState(parley.home.paths.jetstream, inboxStream(member), (c) => c === member),
          1,
        );
        assert.ok(
          await emptyConsumerState(parley.home.paths.jetstream, streams.rooms, (c) =>
            c.startsWith('fanout_'),
          ),
        );
      },
    });
    // Each once, in room order.
    await nextHandledOnceInOrder(room, handled, sent);
    await madeAgain(failures);

    // What the room's partition consumer pushed since the restart: the new message, not the
    // earlier ones again (16: the default PARLEY_PARTITIONS).
    const partition = await answered(() =>
      jsm.consumers.info(streams.rooms, partitionConsumer(partitionOf(room.id, 16))),
    );
    assert.ok(
      partition.delivered.consumer_seq < earlier / 4,
      `the partition consumer pushed ${partition.delivered.consumer_seq} entries after the restart`,
    );
    // The member's inbox consumer: made again after the last floor the SDK read (every 250
    // deliveries) or the one the rooms service recorded, whichever is higher, not pushed whole again.
    const inbox = await answered(() => jsm.consumers.info(inboxStream(member), member));
    console.log(
      `consumer-state-lost: the inbox consumer pushed ${inbox.delivered.consumer_seq} entries after the restart, the partition consumer ${partition.delivered.consumer_seq}`,
    );
    assert.ok(
      inbox.delivered.consumer_seq < earlier / 2,
      `the inbox consumer pushed ${inbox.delivered.consumer_seq} entries after the restart (the SDK reported ${JSON.stringify(failures)})`,
    );
    assert.deepEqual(
      failures.map((f) => f.reason),
      ['inbox_state_lost'],
    );
  });

  it('a running agent that had not read its floor yet goes on after the floor the rooms service recorded', async () => {
    // Fewer deliveries than the SDK reads its consumer's floor after (250): it knows no floor.
    const failures: unknown[] = [];
    let resumeMs: unknown;
    const { room, handled, member } = await senderAndReceiver(parley, 'no floor read', {
      onError: (_err, failure) => {
        failures.push(failure.details?.reason);
        resumeMs = failure.details?.resumeMs;
      },
    });
    const jsm = await jetstreamManager(nc);
    const floors = await new Kvm(nc).open(buckets.floors);
    const earlier = 200;
    const { sent, floor } = await sendHandledAndAcknowledged(room, handled, jsm, member, earlier);
    const recorded = () => recordedFloor(floors, member);
    await waitFor(async () => (await recorded()) === floor, 'the floor recorded');

    await parley.restartNats({
      kill: true,
      whileStopped: async () => {
        assert.equal(
          await emptyConsumerState(parley.home.paths.jetstream, inboxStream(member), (c) => c === member),
          1,
        );
      },
    });
    await nextHandledOnceInOrder(room, handled, sent);
    await madeAgain(failures);
    const inbox = await answered(() => jsm.consumers.info(inboxStream(member), member));
    console.log(
      `consumer-state-lost: with no floor read, the inbox consumer pushed ${inbox.delivered.consumer_seq} entries after the restart`,
    );
    // Made again after the recorded floor: the new message, and at most what the old consumer
    // pushed before the SDK noticed (held back, never handled).
    assert.ok(
      inbox.delivered.consumer_seq <= 2,
      `the inbox consumer pushed ${inbox.delivered.consumer_seq} entries after the restart (the SDK reported ${JSON.stringify(failures)}; floor recorded before the crash ${floor}, now ${await recorded()}; the consumer now: ack floor ${inbox.ack_floor.stream_seq}, delivered ${inbox.delivered.stream_seq}, start ${inbox.config.opt_start_seq ?? 'all'})`,
    );
    assert.deepEqual(failures, ['inbox_state_lost']);
    // The engine noticed it and says how long making the consumer again took.
    assert.ok(typeof resumeMs === 'number' && resumeMs >= 0, `resumeMs ${String(resumeMs)}`);
    console.log(`consumer-state-lost: the consumer was made again ${resumeMs} ms after the SDK noticed`);
  });

  it('an agent started after the crash goes on after the floor the rooms service recorded instead of handling its inbox again', async () => {
    const { room, handled, receiver, member, creds } = await senderAndReceiver(parley, 'restarted after');
    const jsm = await jetstreamManager(nc);
    const floors = await new Kvm(nc).open(buckets.floors);
    const earlier = 300;
    const { floor } = await sendHandledAndAcknowledged(room, handled, jsm, member, earlier);
    const recorded = () => recordedFloor(floors, member);
    await waitFor(async () => (await recorded()) === floor, 'the floor recorded');
    await receiver.close();

    await parley.restartNats({
      kill: true,
      whileStopped: async () => {
        assert.equal(
          await emptyConsumerState(parley.home.paths.jetstream, inboxStream(member), (c) => c === member),
          1,
        );
      },
    });
    // The consumer came back at its start; rounds of recording meanwhile keep the higher floor.
    const lost = await answered(() => jsm.consumers.info(inboxStream(member), member));
    assert.equal(lost.ack_floor.stream_seq, 0);
    assert.equal(await answered(recorded), floor);

    const failures: unknown[] = [];
    const again = await parley.connect(creds, {
      onError: (_err, failure) => failures.push(failure.details?.reason),
    });
    const handledAgain: string[] = [];
    again.on('message', (d) => {
      handledAgain.push(d.message.id);
    });
    await again.listening;
    const next = await room.send('next');
    await waitFor(() => handledAgain.includes(next.id), 'the next message to be handled', 30_000);
    console.log(
      `consumer-state-lost: the restarted agent handled ${handledAgain.length} messages (1 sent after the restart)`,
    );
    // Nothing of the earlier 300 handled again.
    assert.deepEqual(handledAgain, [next.id]);
    assert.deepEqual(failures, ['inbox_state_lost']);
    // Made again after the recorded floor: it pushed the new message alone.
    const inbox = await jsm.consumers.info(inboxStream(member), member);
    assert.equal(inbox.delivered.consumer_seq, 1);
  });

  it('refuses to move an inbox past its end, or one another connection receives, and changes nothing', async () => {
    const { receiver, member } = await senderAndReceiver(parley, 'resume refused');
    const jsm = await jetstreamManager(nc);
    const was = await jsm.consumers.info(inboxStream(member), member);
    const end = (await jsm.streams.info(inboxStream(member))).state.last_seq;
    // Far past it: the inbox stream is a shard that other participants' deliveries (and this room's
    // first entries, still on their way) go on filling.
    const past = await codeOf(
      receiver.call(roomsApi.attachInbox, { session: 'OtherSession1', resumeAfter: end + 1_000_000 }),
    );
    assert.equal(past, 'INVALID_ARGUMENT');
    // Pointed at the receiver's own session, not this one: not this call's to move.
    const other = await codeOf(
      receiver.call(roomsApi.attachInbox, { session: 'OtherSession1', resumeAfter: end }),
    );
    assert.equal(other, 'CONFLICT');
    const now = await jsm.consumers.info(inboxStream(member), member);
    assert.equal(now.config.deliver_subject, was.config.deliver_subject);
    assert.equal(now.created, was.created);
  });
});
