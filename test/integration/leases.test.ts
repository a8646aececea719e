/**
 * Fan-out leases: every partition gets a live holder in bounded time, whatever the count of live
 * replicas says; and from a fresh home, rooms in every partition get their messages.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { partitionOf } from '@parley/contracts';
import { createLogger } from '@parley/kit';
import { createLeaseManager } from '@parley/rooms/internal';
import type { Delivery } from '@parley/sdk';
import { startParley, startServer, type TestServer, waitFor } from '@parley/test/harness';

const log = createLogger({ name: 'leases-test', level: 'silent' });

describe('fan-out leases', () => {
  let server: TestServer;
  let nc: NatsConnection;
  before(async () => {
    server = await startServer();
    nc = await server.connect();
  });
  after(async () => {
    await nc?.close();
    await server?.stop();
  });

  it('takes every partition even when a ghost replica key halves its fair share', async () => {
    const kv = await new Kvm(nc).create('leases_ghost', { ttl: 2_000, history: 1 });
    // A replica key nobody renews stays for one TTL; one that is renewed (a replica that holds
    // nothing, or a miscount) stays for good: the fair share is then 8 of 16.
    const ghost = setInterval(() => void kv.put('replica.ghost', '{}'), 300);
    await kv.put('replica.ghost', '{}');
    const acquired: number[] = [];
    const unheldReports: number[][] = [];
    const m = createLeaseManager({
      kv,
      replicaId: 'only',
      partitions: 16,
      ttlMs: 2_000,
      log,
      callbacks: {
        acquired: (p) => void acquired.push(p),
        released: async () => undefined,
      },
      onUnheld: (free) => void unheldReports.push(free),
    });
    try {
      await m.start();
      assert.equal(m.held().length, 8, 'the fair share of two replicas at first');
      assert.equal(unheldReports.at(-1)?.length, 8, 'the other 8 are reported without a holder');
      // Within two TTLs the partitions nobody holds are taken.
      await waitFor(() => m.held().length === 16, 'all 16 partitions held', 8_000);
      assert.deepEqual(
        [...acquired].sort((a, b) => a - b),
        Array.from({ length: 16 }, (_, i) => i),
      );
      await waitFor(() => unheldReports.at(-1)?.length === 0, 'no partition reported unheld');
    } finally {
      clearInterval(ghost);
      await m.stop();
    }
  });

  /** A lease manager of 16 partitions whose workers start and stop at once. */
  const replica = (kv: KV, replicaId: string, ttlMs = 1_500) =>
    createLeaseManager({
      kv,
      replicaId,
      partitions: 16,
      ttlMs,
      log,
      callbacks: { acquired: () => undefined, released: async () => undefined },
    });

  it('two replicas split the partitions, and the survivor takes them all when one stops', async () => {
    const kv = await new Kvm(nc).create('leases_two', { ttl: 1_500, history: 1 });
    const a = replica(kv, 'a');
    const b = replica(kv, 'b');
    await a.start();
    assert.equal(a.held().length, 16);
    const joined = Date.now();
    await b.start();
    await waitFor(() => a.held().length === 8 && b.held().length === 8, 'an 8/8 split', 10_000);
    const splitMs = Date.now() - joined;
    assert.equal(new Set([...a.held(), ...b.held()]).size, 16, 'no partition held twice');
    const stopped = Date.now();
    await b.stop();
    await waitFor(() => a.held().length === 16, 'the survivor holding all 16', 10_000);
    console.log(
      `8/8 split ${splitMs} ms after the second replica started; all 16 back ${Date.now() - stopped} ms after it stopped (TTL 1500 ms)`,
    );
    await a.stop();
  });

  it('a partition handed off goes to another live replica and is not taken back meanwhile; alone, it is kept', async () => {
    const kv = await new Kvm(nc).create('leases_handoff', { ttl: 1_500, history: 1 });
    const a = replica(kv, 'a');
    await a.start();
    const b = replica(kv, 'b');
    try {
      const p = a.held()[0] as number;
      assert.equal(await a.handOff(p, 60_000), false, 'no other replica: kept');
      assert.ok(a.held().includes(p));
      await b.start();
      await waitFor(() => a.held().length === 8 && b.held().length === 8, 'an 8/8 split', 10_000);
      const mine = a.held()[0] as number;
      assert.equal(await a.handOff(mine, 60_000), true);
      await waitFor(() => b.held().includes(mine), 'the other replica taking it', 10_000);
      // Balanced again, without the partition coming back: a took one of b's others instead.
      await waitFor(() => a.held().length === 8 && b.held().length === 8, 'an 8/8 split again', 10_000);
      assert.ok(!a.held().includes(mine) && b.held().includes(mine));
      assert.equal(new Set([...a.held(), ...b.held()]).size, 16, 'no partition held twice');
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('the survivor takes a dead replica’s partitions within two TTLs', async () => {
    // A replica killed -9 renews nothing more: its leases lapse after one TTL, its replica key is
    // judged gone after 1.5 TTLs (live-keys.ts), and the survivor's next balance (every half TTL) takes them.
    const ttlMs = 1_500;
    const kv = await new Kvm(nc).create('leases_dead', { ttl: ttlMs, history: 1 });
    const deadNc = await server.connect();
    const a = replica(kv, 'a', ttlMs);
    const b = replica(await new Kvm(deadNc).open('leases_dead'), 'b', ttlMs);
    await a.start();
    await b.start();
    try {
      await waitFor(() => a.held().length === 8 && b.held().length === 8, 'an 8/8 split', 10_000);
      // The last renewal that reached the server: the leases lapse one TTL after it.
      const renewedAt = async () =>
        Math.max(
          ...(await Promise.all(
            b.held().map(async (p) => (await kv.get(`fanout.${p}`))?.created.getTime() ?? 0),
          )),
        );
      await deadNc.close();
      const lastRenewal = await renewedAt();
      await waitFor(() => a.held().length === 16, 'the survivor holding all 16', 5 * ttlMs);
      const ms = Date.now() - lastRenewal;
      console.log(`dead replica's partitions taken ${ms} ms after its last renewal (TTL ${ttlMs} ms)`);
      assert.ok(ms <= 2 * ttlMs + 500, `taken ${ms} ms after the last renewal, more than two TTLs`);
    } finally {
      // The dead one's loops still run (on a closed connection): stopped so the file can end.
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('a replica restarted under its old id does not take back a lease another replica took meanwhile', async () => {
    // A replica that stopped gave its partitions back; one listing of the leases still named it when
    // another replica took partition 0: the restarted one must not update that write.
    const kv = await new Kvm(nc).create('leases_restart', { ttl: 60_000, history: 1 });
    await kv.put('fanout.0', JSON.stringify({ replica: 'a' }));
    let gets = 0;
    // The other replica's create lands between the listing's read of fanout.0 and the take's read.
    const racing = new Proxy(kv, {
      get(target, prop, receiver) {
        if (prop !== 'get') return Reflect.get(target, prop, receiver);
        return async (k: string) => {
          if (k === 'fanout.0' && ++gets === 2) {
            await target.delete('fanout.0');
            await target.create('fanout.0', JSON.stringify({ replica: 'b' }));
          }
          return target.get(k);
        };
      },
    });
    const acquired: number[] = [];
    const a = createLeaseManager({
      kv: racing,
      replicaId: 'a',
      partitions: 1,
      ttlMs: 60_000,
      log,
      callbacks: { acquired: (p) => void acquired.push(p), released: async () => undefined },
    });
    try {
      await a.start();
      assert.equal(gets >= 2, true, 'the take read the lease after the listing');
      assert.deepEqual(acquired, [], 'the restarted replica did not take the partition');
      assert.deepEqual(
        (await kv.get('fanout.0'))?.json(),
        { replica: 'b' },
        'the other replica still holds it',
      );
    } finally {
      await a.stop();
    }
  });

  it('a partition given back stays with its holder, renewed, until its worker has stopped', async () => {
    // The handover rule: while a released worker is still stopping (a batch in flight after a
    // heal can take longer than the TTL), nobody else may take its partition and recreate its
    // consumer; its key is deleted only when the worker stopped.
    const kv = await new Kvm(nc).create('leases_handover', { ttl: 1_500, history: 1 });
    let finishStop: () => void = () => undefined;
    const workerStopped = new Promise<void>((r) => {
      finishStop = r;
    });
    let givenBack: number | undefined;
    const aAcquired: number[] = [];
    const a = createLeaseManager({
      kv,
      replicaId: 'a',
      partitions: 2,
      ttlMs: 1_500,
      log,
      callbacks: {
        acquired: (p) => void aAcquired.push(p),
        released: async (p) => {
          givenBack = p;
          await workerStopped;
        },
      },
    });
    const bAcquired: number[] = [];
    const b = createLeaseManager({
      kv,
      replicaId: 'b',
      partitions: 2,
      ttlMs: 1_500,
      log,
      callbacks: { acquired: (p) => void bAcquired.push(p), released: async () => undefined },
    });
    try {
      await a.start();
      assert.equal(a.held().length, 2);
      await b.start();
      await waitFor(() => givenBack !== undefined, 'a giving a partition back', 10_000);
      const p = givenBack as number;
      const first = await kv.get(`fanout.${p}`);
      assert.equal(first?.operation, 'PUT', 'the key stays while the worker stops');
      // Three renewals span more than the TTL: without them the key would have lapsed.
      let renewals = 0;
      let revision = first?.revision ?? 0;
      await waitFor(
        async () => {
          const e = await kv.get(`fanout.${p}`);
          if (
            e?.operation === 'PUT' &&
            e.json<{ replica: string }>().replica === 'a' &&
            e.revision > revision
          ) {
            revision = e.revision;
            renewals++;
          }
          return renewals >= 3;
        },
        'the given-back key renewed by its holder while its worker stops',
        10_000,
      );
      assert.ok(!bAcquired.includes(p), 'nobody took the partition while its worker was still running');
      finishStop();
      // Once the key is deleted the partition is free: the replica below its share takes it at its
      // next balance — or, when that balance comes late (a loaded 3-node run), the one that gave it
      // back takes it again as a partition nobody holds (the orphan rule). Either way it has a holder.
      const taken = aAcquired.length;
      await waitFor(
        () => bAcquired.includes(p) || aAcquired.slice(taken).includes(p),
        () =>
          `a holder for partition ${p} once the worker stopped (a holds ${a.held()}, b took ${bAcquired})`,
        10_000,
      );
      if (bAcquired.includes(p)) assert.deepEqual(a.held(), [1 - p]);
    } finally {
      finishStop();
      await b.stop();
      await a.stop();
    }
  });
});

describe('fan-out from a fresh home', () => {
  it('delivers to rooms in every partition', async () => {
    const parley = await startParley();
    try {
      const s = await parley.participant();
      const r = await parley.participant();
      const sender = await parley.connect(s.creds);
      const receiver = await parley.connect(r.creds);
      const got = new Map<string, string>();
      receiver.on('message', (d: Delivery) => {
        got.set(d.room, d.message.parts.map((p) => (p.type === 'text' ? p.text : '')).join(''));
      });
      await receiver.listening;
      const partitions = 16;
      const byPartition = new Map<number, string>();
      while (byPartition.size < partitions) {
        const room = await sender.rooms.create(`p${byPartition.size}`, { members: [r.id] });
        const p = partitionOf(room.id, partitions);
        if (!byPartition.has(p)) byPartition.set(p, room.id);
        else await room.close();
      }
      for (const [p, room] of byPartition) await sender.rooms.room(room).send(`to partition ${p}`);
      await waitFor(
        () => [...byPartition.values()].every((room) => got.has(room)),
        () =>
          `a message in every partition (missing: ${[...byPartition]
            .filter(([, room]) => !got.has(room))
            .map(([p]) => p)
            .join(',')})`,
        30_000,
      );
      for (const [p, room] of byPartition) assert.equal(got.get(room), `to partition ${p}`);
    } finally {
      await parley.destroy();
    }
  });
});
