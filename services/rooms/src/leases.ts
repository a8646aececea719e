/**
 * Fan-out partition leases in the `parley_leases` bucket (entries expire after the bucket's TTL).
 *
 * Every replica renews `replica.<id>` (its liveness) and the `fanout.<partition>` leases it holds,
 * every third of the TTL. Each aims at its fair share, ceil(partitions / live replicas): it takes
 * free partitions up to it and gives back the ones beyond it, so partitions spread when replicas
 * join and move to the survivors when one dies (after at most one TTL).
 */
import type { KV } from '@nats-io/kv';
import { isKvConflict, type Logger } from '@parley/kit';

/** What a lease manager drives. */
export interface LeaseCallbacks {
  /** Called when this replica acquired `partition`; resolves when its worker runs. */
  acquired(partition: number): Promise<void>;
  /** Called when this replica must stop working on `partition` (lost, expired, or given back). */
  released(partition: number): Promise<void>;
}

export interface LeaseManagerOptions {
  kv: KV;
  replicaId: string;
  partitions: number;
  ttlMs: number;
  log: Logger;
  callbacks: LeaseCallbacks;
}

interface Held {
  revision: number;
  renewedAt: number;
}

export function createLeaseManager(o: LeaseManagerOptions) {
  const held = new Map<number, Held>();
  const value = JSON.stringify({ replica: o.replicaId });
  let timer: NodeJS.Timeout | undefined;
  let running = false;
  let ticking: Promise<void> = Promise.resolve();
  const log = o.log.child({ component: 'leases', replica: o.replicaId });

  async function release(p: number, deleteKey: boolean): Promise<void> {
    const h = held.get(p);
    held.delete(p);
    await o.callbacks.released(p);
    if (deleteKey && h) {
      await o.kv.delete(`fanout.${p}`, { previousSeq: h.revision }).catch(() => undefined);
    }
  }

  async function liveReplicas(): Promise<number> {
    let n = 0;
    for await (const _ of await o.kv.keys('replica.*')) n++;
    return Math.max(1, n);
  }

  async function tick(): Promise<void> {
    const now = Date.now();
    await o.kv.put(`replica.${o.replicaId}`, value);
    // Renew what we hold; a lease we could not renew in time is given up before it can expire.
    for (const [p, h] of [...held]) {
      try {
        h.revision = await o.kv.update(`fanout.${p}`, value, h.revision);
        h.renewedAt = now;
      } catch (err) {
        if (isKvConflict(err) || now - h.renewedAt > o.ttlMs * 0.75) {
          log.warn({ partition: p, err: (err as Error).message }, 'lease lost');
          await release(p, false);
        }
      }
    }
    const fair = Math.ceil(o.partitions / (await liveReplicas()));
    if (held.size > fair) {
      const extra = [...held.keys()].slice(fair);
      for (const p of extra) {
        log.info({ partition: p }, 'giving a partition back');
        await release(p, true);
      }
      return;
    }
    if (held.size === fair) return;
    // Start at a replica-specific offset so replicas do not all race for partition 0.
    let offset = 0;
    for (const ch of o.replicaId) offset = (offset * 31 + ch.charCodeAt(0)) % o.partitions;
    for (let i = 0; i < o.partitions && held.size < fair; i++) {
      const p = (offset + i) % o.partitions;
      if (held.has(p)) continue;
      try {
        const revision = await o.kv.create(`fanout.${p}`, value);
        held.set(p, { revision, renewedAt: now });
        log.info({ partition: p }, 'lease acquired');
        await o.callbacks.acquired(p);
      } catch (err) {
        if (!isKvConflict(err)) throw err;
      }
    }
  }

  function schedule(): void {
    if (!running) return;
    timer = setTimeout(
      () => {
        ticking = tick()
          .catch((err) => log.warn({ err: (err as Error).message }, 'lease tick failed'))
          .finally(schedule);
      },
      Math.max(100, Math.floor(o.ttlMs / 3)),
    );
  }

  return {
    /** Takes its first leases, then keeps renewing and balancing in the background. */
    async start(): Promise<void> {
      running = true;
      ticking = tick().catch((err) => log.warn({ err: (err as Error).message }, 'lease tick failed'));
      await ticking;
      schedule();
    },
    /** Stops every worker and gives every lease back, so another replica takes over at once. */
    async stop(): Promise<void> {
      running = false;
      clearTimeout(timer);
      await ticking;
      for (const p of [...held.keys()]) await release(p, true);
      await o.kv.delete(`replica.${o.replicaId}`).catch(() => undefined);
    },
    held: () => [...held.keys()].sort((a, b) => a - b),
  };
}
