/**
 * A delivery lost in transit (the server pushed it, the agent never got it: its connection dropped
 * with it, as when nats-server is killed -9) comes back after the ack wait. When it comes back
 * while the agent waits for the redelivery of a newer message whose handler failed, the older one
 * must be handled (or recognised) first, then the newer one: the agent must not stall.
 *
 * On a 3-node cluster this stalled a member for good after a kill (issue 12): the lane waited for
 * the nak'ed message while the older redelivery sat at its head, and the nak'ed one queued behind it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { inboxStream } from '@parley/contracts';
import { connect, type Delivery } from '@parley/sdk';
import {
  type CuttingProxy,
  connectService,
  cuttingProxy,
  startParley,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

describe('a delivery lost in transit', () => {
  let parley: TestParley;
  let svc: NatsConnection;
  let proxy: CuttingProxy | undefined;
  before(async () => {
    // A short ack wait: the lost delivery comes back after 2 s.
    parley = await startParley({ nodes: 1, backbone: { inboxAckWaitMs: 2_000 } });
    svc = await connectService(parley);
  });
  after(async () => {
    await svc?.close();
    await proxy?.close();
    await parley?.destroy();
  });

  it('comes back while a newer message waits for its retry: both are handled, once, in room order', async () => {
    const s = await parley.participant();
    const r = await parley.participant();
    const sender = await parley.connect(s.creds);
    const room = await sender.rooms.create('in transit', { members: [r.id] });
    const handled: Delivery[] = [];
    const attempts = new Map<string, number>();
    proxy = await cuttingProxy(new URL(parley.natsUrl.split(',')[0] as string));
    // The retry of a failed handler comes long after the lost delivery's ack wait.
    const receiver = await connect({
      servers: proxy.url,
      creds: r.creds,
      presence: false,
      delivery: { backoffMs: () => 6_000 },
    });
    try {
      receiver.on('message', (d) => {
        const t = textOf(d);
        const n = (attempts.get(t) ?? 0) + 1;
        attempts.set(t, n);
        if (t === 'x' && n === 1) throw new Error('the first attempt at x fails');
        handled.push(d);
      });
      await receiver.listening;
      await room.send('warm-up');
      await waitFor(() => handled.length === 1, 'the warm-up to be handled');

      // y is lost in transit: the server pushes it, the connection drops with it.
      const marker = `y-lost-in-transit-${Date.now()}`;
      proxy.arm(marker);
      const y = await room.send(marker);
      await waitFor(() => proxy?.cuts() === 1, 'the connection to drop with y');
      // x reveals the gap (y is backfilled from history), then its handler fails: x waits for its
      // retry while y's own redelivery (after the 2 s ack wait) arrives first.
      const x = await room.send('x');
      await waitFor(() => attempts.get('x') === 1, 'the first attempt at x');
      await waitFor(
        () => handled.some((d) => d.message.id === x.id),
        () => `x to be handled after its retry (handled: ${handled.map(textOf).join(', ')})`,
        30_000,
      );
      assert.deepEqual(
        handled.map(textOf),
        ['warm-up', marker, 'x'],
        'each once, in room order (y from history, its redelivery recognised)',
      );
      assert.equal(handled.find((d) => d.message.id === y.id)?.roomSeq, y.roomSeq);
      assert.equal(attempts.get('x'), 2, 'x ran twice: the failure, then the retry');
      // Nothing left unacknowledged.
      const jsm = await jetstreamManager(svc);
      await waitFor(
        async () => (await jsm.consumers.info(inboxStream(r.id), r.id)).num_ack_pending === 0,
        'every delivery to be acknowledged',
      );
    } finally {
      await receiver.close();
    }
  });
});
