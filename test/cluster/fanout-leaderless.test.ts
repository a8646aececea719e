/**
 * A partition consumer whose own raft group lost its leader for good while the room log answers:
 * the fan-out makes it again instead of waiting. After a 3-node cluster's whole restart one
 * partition consumer answered "JetStream system temporarily unavailable" for 11 s after the room
 * log did (test:contended, session 34), and the chaos test saw one do so for over 30 s. Made here
 * on purpose: the partition consumer has two replicas, and its leader's node is killed, so its
 * group has no quorum while the room log (three replicas) keeps one.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AckPolicy, DeliverPolicy, jetstreamManager } from '@nats-io/jetstream';
import { type NatsConnection, nanos } from '@nats-io/transport-node';
import {
  inboxStream,
  PARTITION_IDLE_HEARTBEAT_MS,
  partitionOf,
  serviceId,
  streams,
  subjects,
} from '@parley/contracts';
import { partitionConsumer } from '@parley/rooms/internal';
import {
  type ServiceProcess,
  senderAndReceiver,
  serviceConnection,
  startParley,
  startRoomsProcess,
  type TestParley,
  textOf,
  waitFor,
} from '@parley/test/harness';

describe('a partition consumer without a leader while the room log answers', () => {
  let parley: TestParley;
  let nc: NatsConnection;
  let replica: ServiceProcess | undefined;
  before(async () => {
    // The fan-out runs in a rooms process of its own, connected to one node; the in-process rooms
    // service takes the sends.
    parley = await startParley({ nodes: 3, rooms: { PARLEY_FANOUT: false } });
    nc = await serviceConnection(parley, { maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  });
  after(async () => {
    await replica?.kill9();
    await nc?.close();
    await parley?.destroy();
  });

  it('is made again, and the room delivers, with the consumer’s leader gone for good', async () => {
    const cluster = parley.cluster;
    assert.ok(cluster, 'a 3-node cluster');
    const jsm = await jetstreamManager(nc, { timeout: 5_000 });
    const nodeOf: Record<string, number> = {};
    for (const [i, url] of cluster.urls.entries()) {
      const c = await serviceConnection({ natsUrl: url, serviceCreds: (n) => parley.serviceCreds(n) });
      nodeOf[c.info?.server_name ?? ''] = i;
      await c.close();
    }
    const { room, member, handled: got } = await senderAndReceiver(parley, 'leaderless partition');
    const p = partitionOf(room.id, 16);
    // The member's inbox consumer has one replica: its node stays up.
    const inboxNode = (await jsm.consumers.info(inboxStream(member), member)).cluster?.leader;
    // The partition consumer as the fan-out makes it, with two replicas, led by another node.
    const config = {
      durable_name: partitionConsumer(p),
      filter_subject: subjects.roomPartition(p),
      ack_policy: AckPolicy.All,
      ack_wait: nanos(30_000),
      max_ack_pending: 10_000,
      deliver_subject: subjects.fanoutDeliver(serviceId('rooms'), p, 'solo'),
      idle_heartbeat: nanos(PARTITION_IDLE_HEARTBEAT_MS),
      flow_control: true,
      deliver_policy: DeliverPolicy.All,
      num_replicas: 2,
    };
    let leader: string | undefined;
    let follower: string | undefined;
    for (let tries = 0; tries < 20 && (!leader || leader === inboxNode); tries++) {
      await jsm.consumers.delete(streams.rooms, config.durable_name).catch(() => undefined);
      await jsm.consumers.add(streams.rooms, config);
      await waitFor(async () => {
        const c = (await jsm.consumers.info(streams.rooms, config.durable_name)).cluster;
        leader = c?.leader;
        follower = c?.replicas?.[0]?.name;
        return leader !== undefined && follower !== undefined;
      }, 'the partition consumer to elect a leader');
    }
    assert.ok(leader && follower && leader !== inboxNode, `a consumer leader apart from ${inboxNode}`);

    replica = await startRoomsProcess(parley, 'solo', {
      NATS_URL: cluster.urls[nodeOf[follower] as number] as string,
      PARLEY_INGRESS: 'false',
      LOG_LEVEL: 'info',
    });
    await room.send('before');
    await waitFor(
      () => got.length === 1,
      () => `the message before the kill (got ${got.map(textOf).join(', ') || 'nothing'})`,
      60_000,
    );

    // The consumer's leader goes, and stays gone: its group (2 replicas) has no quorum; the room
    // log (3 replicas) elects among the two nodes left.
    await cluster.kill9(nodeOf[leader] as number);
    const killed = Date.now();
    await room.send('after');
    await waitFor(
      () => got.length === 2,
      () =>
        `the message after the kill (got ${got.map(textOf).join(', ')}); the fan-out's log:\n${replica?.output().slice(-3_000)}`,
      // Without the fan-out making the consumer again, never; with it, 18–37 s here (two missed
      // heartbeats, the server's own timeouts before it answers "temporarily unavailable").
      90_000,
    );
    console.log(
      `fanout-leaderless: delivered ${Date.now() - killed} ms after the consumer's leader was killed`,
    );
    assert.deepEqual(got.map(textOf), ['before', 'after']);
    assert.match(replica.output(), /partition consumer without a leader while the room log answers/);
  });
});
