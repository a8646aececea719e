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
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { inboxStream, partitionOf, streams } from '@parley/contracts';
import { partitionConsumer } from '@parley/rooms/internal';
import type { Delivery } from '@parley/sdk';
import {
  connectService,
  senderAndReceiver,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';

const text = (d: Delivery) => d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');

/** Empties the state files of a stopped nats-server's consumers of `stream` that `which` picks. */
async function emptyConsumerState(
  root: string,
  stream: string,
  which: (name: string) => boolean,
): Promise<number> {
  let emptied = 0;
  const visit = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      if (!e.isDirectory()) continue;
      const path = join(dir, e.name);
      if (e.name === 'obs' && dir.endsWith(`/${stream}`)) {
        for (const c of await readdir(path)) {
          if (!which(c)) continue;
          await truncate(join(path, c, 'o.dat'), 0);
          emptied++;
        }
      } else await visit(path);
    }
  };
  await visit(root);
  return emptied;
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

describe('a consumer whose state nats-server lost (kill -9 while it rewrote its state file)', () => {
  let parley: TestParley;
  let nc: NatsConnection;
  before(async () => {
    // One node: the state files are emptied on disk while it is stopped.
    parley = await startParley({ nodes: 1 });
    nc = await connectService(parley);
  });
  after(async () => {
    await nc?.close();
    await parley?.destroy();
  });

  it('the fan-out goes on after what it acknowledged instead of pushing the room log again; the member handles nothing twice', async () => {
    const { room, handled, member } = await senderAndReceiver(parley, 'state lost');
    const jsm = await jetstreamManager(nc);
    const earlier = 200;
    for (let i = 0; i < earlier; i++) await room.send(`m${i}`);
    await waitFor(() => handled.length === earlier, 'the earlier messages to be handled');
    await waitFor(async () => {
      const c = await jsm.consumers.info(inboxStream(member), member);
      return c.num_ack_pending === 0 && c.ack_floor.stream_seq === c.delivered.stream_seq;
    }, 'the earlier messages acknowledged');

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
    const next = await room.send('next');
    await waitFor(
      () => handled.some((d) => d.message.id === next.id),
      'the next message to be handled',
      30_000,
    );
    assert.deepEqual(handled.map(text), [...Array.from({ length: earlier }, (_, i) => `m${i}`), 'next']);

    // What the room's partition consumer pushed since the restart: the new message, not the
    // earlier ones again (16: the default PARLEY_PARTITIONS).
    const partition = await answered(() =>
      jsm.consumers.info(streams.rooms, partitionConsumer(partitionOf(room.id, 16))),
    );
    assert.ok(
      partition.delivered.consumer_seq < earlier / 4,
      `the partition consumer pushed ${partition.delivered.consumer_seq} entries after the restart`,
    );
    // The member's inbox consumer did push its whole inbox again, and the SDK recognised each entry
    // as handled (above): it knows no safe point to go on after (docs/architecture.md, "A consumer
    // whose state nats-server lost").
    const inbox = await answered(() => jsm.consumers.info(inboxStream(member), member));
    assert.ok(
      inbox.delivered.consumer_seq > earlier,
      `the inbox consumer came back with its state and pushed only ${inbox.delivered.consumer_seq} entries`,
    );
  });
});
