/**
 * A room-log entry lost in transit to the fan-out (nats-server pushed it to the partition's lease
 * holder, whose connection dropped with it, as when nats-server is killed -9) counts as delivered
 * to the partition consumer and would come back only after its 30 s ack wait — or when a later
 * entry of that partition revealed the gap. With nothing sent after it, the fan-out must notice by
 * itself (issue 12: the recovery bound after a kill).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { streams } from '@parley/contracts';
import {
  type CuttingProxy,
  cuttingProxy,
  type ServiceProcess,
  senderAndReceiver,
  startParley,
  startRoomsProcess,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

/** The partition consumers' ack wait (fanout.ts): what a lost entry would otherwise wait for. */
const PARTITION_ACK_WAIT_MS = 30_000;

describe('a room-log entry lost in transit to the fan-out', () => {
  let parley: TestParley;
  let proxy: CuttingProxy | undefined;
  let replica: ServiceProcess | undefined;
  before(async () => {
    // The fan-out runs in a rooms process connected through the proxy; the in-process rooms service
    // keeps the control plane only.
    parley = await startParley({ nodes: 1, rooms: { PARLEY_INGRESS: false, PARLEY_FANOUT: false } });
  });
  after(async () => {
    await replica?.kill9();
    await proxy?.close();
    await parley?.destroy();
  });

  it('reaches the member well before the ack wait, once, in room order, with nothing sent after it', async () => {
    proxy = await cuttingProxy(new URL(parley.natsUrl.split(',')[0] as string));
    replica = await startRoomsProcess(parley, 'replica-0', { NATS_URL: proxy.url });
    const { room, handled } = await senderAndReceiver(parley, 'lost on the way to the fan-out');
    // The room's partition has a worker and a consumer that delivered before.
    await room.send('warm-up');
    await waitFor(() => handled.length === 1, 'the warm-up to be handled', 120_000);

    // Cut the replica's connection that carries the entry to its partition worker: a push carries
    // the ack subject of its consumer (`fanout_<p>` on the room log); the ingress's request with the
    // same text goes through untouched.
    const marker = `lost-in-transit-${Date.now()}`;
    proxy.arm(marker, `$JS.ACK.${streams.rooms}.fanout_`);
    const lost = await room.send(marker);
    await waitFor(() => proxy?.cuts() === 1, 'the fan-out connection to drop with the entry', 60_000);
    // Two thirds of the ack wait: the redelivery after the ack wait does not count.
    await waitFor(
      () => handled.some((d) => d.message.id === lost.id),
      () => `the lost entry to be delivered (handled: ${handled.map(textOf).join(', ')})`,
      (PARTITION_ACK_WAIT_MS * 2) / 3,
    );
    assert.deepEqual(handled.map(textOf), ['warm-up', marker], 'each once, in room order');
    assert.equal(proxy.cuts(), 1);
  });
});
