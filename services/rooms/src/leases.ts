/**
 * Fan-out partition leases in the `parley_leases` bucket (entries expire after the bucket's TTL).
 *
 * Two loops, so that slow work never delays a renewal:
 * - every third of the TTL, all held leases and this replica's liveness key (`replica.<id>`) are
 *   renewed at once; a lease that could not be renewed for three quarters of the TTL is given up
 *   before it can expire under a worker that still believes it owns the partition;
 * - every TTL, the replica aims at its fair share, ceil(partitions / live replicas): it takes free
 *   partitions up to it and gives back the ones beyond it, so partitions spread when replicas join
 *   and move to the survivors when one dies (after at most one TTL).
 * Workers are stopped in the background: stopping one waits for its batch in flight.
 */
import type { KV } from '@nats-io/kv';
import { isKvConflict, type Logger } from '@parley/kit';

/** What a lease manager drives. */
export interface LeaseCallbacks {
  /** This replica acquired `partition`: start working on it. */
  acquired(partition: number): void;
  /** This replica must stop working on `partition`; resolves when it stopped. */
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
  const stopping = new Set<Promise<void>>();
  const value = JSON.stringify({ replica: o.replicaId });
  const timers: NodeJS.Timeout[] = [];
  let running = false;
  let renewing: Promise<void> = Promise.resolve();
  let balancing: Promise<void> = Promise.resolve();
  const log = o.log.child({ component: 'leases', replica: o.replicaId });
  const key = (p: number) => `fanout.${p}`;

  /** Stops the worker in the background; `deleteKey` hands the partition over at once. */
  function release(p: number, deleteKey: boolean): void {
    const h = held.get(p);
    held.delete(p);
    const done = o.callbacks
      .released(p)
      .then(async () => {
        if (deleteKey && h) await o.kv.delete(key(p), { previousSeq: h.revision }).catch(() => undefined);
      })
      .finally(() => stopping.delete(done));
    stopping.add(done);
  }

  async function renew(): Promise<void> {
    const now = Date.now();
    await Promise.allSettled([
      o.kv.put(`replica.${o.replicaId}`, value),
      ...[...held].map(async ([p, h]) => {
        try {
          h.revision = await o.kv.update(key(p), value, h.revision);
          h.renewedAt = now;
        } catch (err) {
          if (isKvConflict(err) || Date.now() - h.renewedAt > o.ttlMs * 0.75) {
            log.warn({ partition: p, err: (err as Error).message }, 'lease lost');
            if (held.get(p) === h) release(p, false);
          }
        }
      }),
    ]);
  }

  async function liveReplicas(): Promise<number> {
    let n = 0;
    for await (const _ of await o.kv.keys('replica.*')) n++;
    return Math.max(1, n);
  }

  async function balance(): Promise<void> {
    const fair = Math.ceil(o.partitions / (await liveReplicas()));
    if (held.size > fair) {
      for (const p of [...held.keys()].slice(fair)) {
        log.info({ partition: p }, 'giving a partition back');
        release(p, true);
      }
      return;
    }
    // Start at a replica-specific offset so replicas do not all race for partition 0.
    let offset = 0;
    for (const ch of o.replicaId) offset = (offset * 31 + ch.charCodeAt(0)) % o.partitions;
    for (let i = 0; i < o.partitions && held.size < fair && running; i++) {
      const p = (offset + i) % o.partitions;
      if (held.has(p)) continue;
      try {
        const revision = await o.kv.create(key(p), value);
        held.set(p, { revision, renewedAt: Date.now() });
        log.info({ partition: p }, 'lease acquired');
        o.callbacks.acquired(p);
      } catch (err) {
        if (!isKvConflict(err)) throw err;
      }
    }
  }

  function every(ms: number, step: () => Promise<void>, set: (p: Promise<void>) => void): void {
    const loop = () => {
      if (!running) return;
      const p = step().catch((err) => log.warn({ err: (err as Error).message }, 'lease step failed'));
      set(p);
      void p.finally(() => {
        if (running) timers.push(setTimeout(loop, ms));
      });
    };
    timers.push(setTimeout(loop, ms));
  }

  return {
    /** Takes its first leases, then keeps renewing and balancing in the background. */
    async start(): Promise<void> {
      running = true;
      await o.kv.put(`replica.${o.replicaId}`, value);
      balancing = balance().catch((err) => log.warn({ err: (err as Error).message }, 'lease step failed'));
      await balancing;
      every(Math.max(100, Math.floor(o.ttlMs / 3)), renew, (p) => {
        renewing = p;
      });
      every(o.ttlMs, balance, (p) => {
        balancing = p;
      });
    },
    /** Stops every worker and gives every lease back, so another replica takes over at once. */
    async stop(): Promise<void> {
      running = false;
      for (const t of timers) clearTimeout(t);
      await Promise.allSettled([renewing, balancing]);
      for (const p of [...held.keys()]) release(p, true);
      await Promise.allSettled([...stopping]);
      await o.kv.delete(`replica.${o.replicaId}`).catch(() => undefined);
    },
    held: () => [...held.keys()].sort((a, b) => a - b),
  };
}
