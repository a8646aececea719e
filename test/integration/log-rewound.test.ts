/**
 * A room log that lost its last entries: nats-server comes back with less of `PARLEY_ROOMS` than it
 * had stored and delivered — what a node that lost writes it had not synced to disk does, and what
 * nats-server 2.9.10 was seen doing after a partition or a pause of a stream leader (chaos test).
 * Made here on a real nats-server by cutting the stream's message block while the server is
 * stopped. New messages are then stored at positions the partition consumer and the member's inbox
 * already went past: nats-server's consumer waits until the log is past its own position again (so
 * they were never fanned out), and the fan-out's cursors and the SDK's "handled before" check, which
 * go by position, took them for delivered ones.
 */
import assert from 'node:assert/strict';
import { readdir, readFile, rm, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { streams } from '@parley/contracts';
import type { Delivery } from '@parley/sdk';
import {
  connectService,
  senderAndReceiver,
  startParley,
  type TestParley,
  waitFor,
} from '@parley/test/harness';

const text = (d: Delivery) => d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join('');

/** The directory of a stream's store under a nats-server store directory. */
async function streamDir(root: string, stream: string): Promise<string | undefined> {
  for (const e of await readdir(root, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    const path = join(root, e.name);
    if (e.name === stream) return path;
    const found = await streamDir(path, stream);
    if (found) return found;
  }
  return undefined;
}

/**
 * Cuts every record after sequence `keep` from a stopped nats-server's file store of `stream` (2.9
 * message block format: total length with the headers bit, sequence, timestamp, subject length, …),
 * and removes the block indexes so the server rebuilds its state from what is left.
 */
async function cutStream(storeDir: string, stream: string, keep: number): Promise<number> {
  const dir = await streamDir(storeDir, stream);
  assert.ok(dir, `${stream} is in the store`);
  const msgs = join(dir, 'msgs');
  let cut = 0;
  for (const f of await readdir(msgs)) {
    if (!f.endsWith('.blk')) continue;
    const buf = await readFile(join(msgs, f));
    let at = 0;
    while (at + 22 <= buf.length) {
      const length = buf.readUInt32LE(at) & 0x7fffffff;
      const seq = Number(buf.readBigUInt64LE(at + 4) & 0x7fffffffffffffffn);
      if (seq > keep) break;
      at += length;
    }
    if (at < buf.length) {
      cut++;
      await truncate(join(msgs, f), at);
    }
  }
  for (const f of await readdir(msgs)) if (!f.endsWith('.blk')) await rm(join(msgs, f));
  return cut;
}

describe('a room log that lost its last entries', () => {
  let parley: TestParley;
  let nc: NatsConnection;
  before(async () => {
    // One node: the store is cut on disk while it is stopped.
    parley = await startParley({ nodes: 1 });
    nc = await connectService(parley);
  });
  after(async () => {
    await nc?.close();
    await parley?.destroy();
  });

  it('new messages at positions the member already handled reach it, in order, once', async () => {
    const { room, handled } = await senderAndReceiver(parley, 'rewound');
    const before = [];
    for (const t of ['1', '2', '3', '4', '5', '6']) before.push(await room.send(t));
    await waitFor(() => handled.length === 6, 'the six messages to be handled');
    const keep = before[2]?.roomSeq ?? 0;
    const jsm = await jetstreamManager(nc);
    const lost = before[5]?.roomSeq ?? 0;

    // nats-server comes back with the log up to the third message; the services run on throughout.
    await parley.restartNats({
      whileStopped: async () => {
        assert.equal(await cutStream(parley.home.paths.jetstream, streams.rooms, keep), 1);
      },
    });
    await waitFor(
      async () => (await jsm.streams.info(streams.rooms).catch(() => undefined))?.state.last_seq === keep,
      'the room log to end at the third message',
    );

    const after = [];
    for (const t of ['x', 'y', 'z', 'w']) after.push(await room.send(t));
    assert.equal(after[0]?.roomSeq, keep + 1, 'the new messages are stored at positions delivered before');
    await waitFor(
      () => handled.length >= 10,
      () => `the four new messages to be handled (handled: ${handled.map(text).join(', ')})`,
      30_000,
    );
    assert.deepEqual(handled.map(text), ['1', '2', '3', '4', '5', '6', 'x', 'y', 'z', 'w']);
    assert.equal(handled[6]?.rewound, lost, 'the first one names the lost position the member was at');
    assert.deepEqual(
      handled.slice(7).map((d) => d.rewound),
      [undefined, undefined, undefined],
    );
    // The room goes on, and nothing comes twice.
    const next = await room.send('next');
    await waitFor(() => handled.some((d) => d.message.id === next.id), 'the next message to be handled');
    assert.deepEqual(handled.slice(6).map(text), ['x', 'y', 'z', 'w', 'next']);
  });
});
