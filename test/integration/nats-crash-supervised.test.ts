/**
 * The local backbone supervises its nats-server: one that dies without being asked to (a crash, an
 * OOM kill, `kill -9` from a shell) is started again on the same store and port, and the message
 * path goes on. Before, the backbone ran on with no server under its services, and every send
 * failed until somebody restarted `npm start`.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { readLocalRun } from '@parley/sdk';
import { startParley, type TestParley, waitFor } from '@parley/test/harness';
import { type Member, member } from './fixtures/crash.js';

describe('a nats-server that dies on its own', () => {
  let parley: TestParley;
  before(async () => {
    // One node: the supervisor is the standalone's (a cluster's nodes are not its children).
    parley = await startParley({ nodes: 1, backbone: { inboxAckWaitMs: 3_000, leaseTtlMs: 2_000 } });
  });
  after(async () => {
    await parley?.destroy();
  });

  it('is started again on the same store and port, and messages sent after the crash are delivered', async () => {
    const [a, b] = [await member(parley), await member(parley)] as [Member, Member];
    const room = await a.agent.rooms.create('supervised', { members: [b.id] });
    const before = await room.send('before the crash');
    await waitFor(() => (b.handled.get(room.id) ?? []).length === 1, 'the first message');

    const crashed = parley.nats?.pid as number;
    process.kill(crashed, 'SIGKILL');
    await waitFor(
      () => parley.nats?.pid !== crashed && parley.nats?.running === true,
      'nats-server to be started again',
      60_000,
    );
    // What the CLI, `parley mcp` and connect() read to find the backbone names the new server.
    await waitFor(
      () => readLocalRun(parley.home.paths.home)?.natsPid === parley.nats?.pid,
      'run.json to name it',
    );

    const afterCrash = await room.send('after the crash', { deadlineMs: 60_000 });
    const seen = () => (b.handled.get(room.id) ?? []).map((h) => h.id);
    await waitFor(() => seen().includes(afterCrash.id), 'the message sent after the crash', 60_000);
    // Distinct, in order: a SIGKILLed 2.9 server can lose its last buffered acknowledgements
    // (docs/operations.md), and a message whose ack was lost comes again, marked redelivered.
    assert.deepEqual([...new Set(seen())], [before.id, afterCrash.id]);
  });
});
