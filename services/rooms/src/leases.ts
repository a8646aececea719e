/**
 * Fan-out partition leases in the `parley_leases` bucket (entries expire after the bucket's TTL).
 *
 * Two loops, so that slow work never delays a renewal:
 * - every third of the TTL, all held leases and this replica's liveness key (`replica.<id>`) are
 *   renewed at once; a renewal refused because the key lapsed (or vanished with a killed
 *   nats-server) and nobody took it takes the key back and keeps the worker; a key another replica
 *   holds is given up; a renewal that got no answer changes nothing (the backbone is away, and the
 *   worker cannot write either: giving leases up on timeouts restarted every worker after each
 *   outage). A worker whose key another replica took (it lapsed) is told to stop at once and
 *   acknowledges nothing more; its writes in flight are fenced;
 * - every half TTL, and at once when a replica joins or stops or a lease is handed back (KV
 *   watches), the replica aims at its fair share, ceil(partitions / live replicas): it takes free
 *   partitions up to it, so partitions spread when replicas join and move to the survivors when one
 *   dies. A dead replica's leases lapse one TTL after its last renewal and it counts as dead 1.5
 *   TTLs after it, so the survivors' next step takes them within two TTLs of that renewal.
 * Coverage never depends on that count being right: a partition found without a holder for a TTL is
 * taken by whoever sees it, beyond its fair share, and a replica gives a partition back only when a
 * live replica below its fair share exists to take it. (On a first start of a fresh home a replica
 * once computed the share of two replicas and held 8 of 16 partitions for good: rooms of the other
 * 8 received nothing.) Every partition thus has a live holder within about two and a half TTLs of
 * losing one. A balance step is bounded in time, so a hung KV listing cannot stop it.
 * Workers are stopped in the background: stopping one waits for its batch in flight.
 * Handover rule: a partition given back keeps its key, renewed, until its worker has stopped, and
 * only then is the key deleted. Deleting it first (or letting it lapse while a slow stop waited on a
 * batch after a heal) let the next holder recreate the partition consumer while the old worker still
 * ran: the old worker's AckAll then moved the new consumer's ack floor past entries nobody wrote
 * (chaos runs: 1–188 messages never reached some members).
 */
import type { KV, KvEntry } from '@nats-io/kv';
import { isKvConflict, type Logger } from '@parley/kit';
import { keepWatching, type LiveKeys, watchLiveKeys } from './live-keys.js';

/** The replica a lease entry names ('?' when it names none). */
function holderOf(e: KvEntry): string {
  try {
    return e.json<{ replica?: string }>().replica ?? '?';
  } catch {
    return '?';
  }
}

/**
 * The partition a replica looks at first when it takes partitions (the others follow in order): an
 * offset of its own, so that replicas do not all race for partition 0.
 */
export function firstPartition(replicaId: string, partitions: number): number {
  let offset = 0;
  for (const ch of replicaId) offset = (offset * 31 + ch.charCodeAt(0)) % partitions;
  return offset;
}

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
  /** After each balance: the partitions no live replica holds (this one could not take them). */
  onUnheld?: (partitions: number[]) => void;
}

/** Rejects when `p` takes longer than `ms`. */
function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

interface Held {
  revision: number;
  renewedAt: number;
}

export function createLeaseManager(o: LeaseManagerOptions) {
  const held = new Map<number, Held>();
  /** Leases given back whose worker is still stopping: renewed until it stopped (handover rule). */
  const handing = new Map<number, Held>();
  const stopping = new Set<Promise<void>>();
  /** Partitions whose worker is being stopped: not to be taken again until it stopped. */
  const releasing = new Set<number>();
  /** Partitions handed off (see `handOff`): not taken again here until then (ms since the epoch). */
  const avoided = new Map<number, number>();
  const value = JSON.stringify({ replica: o.replicaId });
  /** The loops' next steps (one per loop: a step schedules the next when it ends). */
  const timers = new Set<NodeJS.Timeout>();
  let running = false;
  let renewing: Promise<void> = Promise.resolve();
  let balancing: Promise<void> = Promise.resolve();
  const log = o.log.child({ component: 'leases', replica: o.replicaId });
  const key = (p: number) => `fanout.${p}`;

  /**
   * Stops the worker in the background. With `deleteKey` (a partition given back) the key stays
   * this replica's, renewed, until the worker has stopped, and is deleted only then: nobody else
   * can take the partition while the worker may still receive, write or acknowledge.
   */
  function release(p: number, deleteKey: boolean): void {
    const h = held.get(p);
    held.delete(p);
    releasing.add(p);
    if (deleteKey && h) handing.set(p, h);
    // Bounded: a stop that never ends must not keep the partition from everyone. Past the bound the
    // worker, told to stop, can no longer acknowledge or take the consumer over (fanout.ts).
    const done = within(o.callbacks.released(p), Math.max(10_000, 3 * o.ttlMs), 'stopping the worker')
      .catch((err) => log.warn({ partition: p, err: (err as Error).message }, 'stopping a worker failed'))
      .then(async () => {
        const last = handing.get(p);
        handing.delete(p);
        if (last) await o.kv.delete(key(p), { previousSeq: last.revision }).catch(() => undefined);
      })
      .finally(() => {
        releasing.delete(p);
        stopping.delete(done);
      });
    stopping.add(done);
  }

  /** The backbone did not answer the last renewal: when it answers again, balance at once. */
  let unreachable = false;
  let kicked: Promise<void> | undefined;
  /** Off until the first balance of `start()` is done: never two balances at once. */
  let kicksOn = false;
  /** A kick came while a kicked balance was under way (which may have read the leases before it). */
  let kickedAgain = false;
  function kickBalance(): void {
    if (!kicksOn || !running) return;
    if (kicked) {
      kickedAgain = true;
      return;
    }
    // After the partitions' balance in progress, if any: never two at once.
    kicked = balancing
      .then(() => (running ? balance() : undefined))
      .catch((err) => log.warn({ err: (err as Error).message }, 'lease step failed'))
      .finally(() => {
        kicked = undefined;
        if (kickedAgain) {
          kickedAgain = false;
          kickBalance();
        }
      });
    balancing = kicked;
  }

  /**
   * After a renewal was refused: the lease's revision when it is still, or again, this replica's.
   * A refusal often is no loss: the key expired while renewals were slow (a busy machine), or
   * vanished with a nats-server killed before it wrote it, or the previous renewal was stored but
   * its answer lost. Taking it back there keeps the worker and its consumer instead of restarting
   * both, which after every outage cost each partition a consumer recreation. Safe: a key another
   * replica created is never taken, and every inbox write is fenced anyway.
   */
  async function reclaim(p: number): Promise<number | undefined> {
    const e = await o.kv.get(key(p));
    if (e?.operation === 'PUT') {
      const holder = (() => {
        try {
          return e.json<{ replica?: string }>().replica;
        } catch {
          return undefined;
        }
      })();
      return holder === o.replicaId ? e.revision : undefined;
    }
    const revision = await o.kv.create(key(p), value);
    log.info({ partition: p }, 'lapsed lease taken back (nobody else took it)');
    return revision;
  }

  async function renew(): Promise<void> {
    const now = Date.now();
    await Promise.allSettled([
      o.kv.put(`replica.${o.replicaId}`, value).then(
        () => {
          // Back after an outage (nats-server restarted, say): take the partitions that lapsed now,
          // not at the next balance.
          if (unreachable) kickBalance();
          unreachable = false;
        },
        (err) => {
          unreachable = true;
          throw err;
        },
      ),
      // Leases being handed over are still ours until their worker stopped: renewed, never reclaimed.
      ...[...handing].map(async ([p, h]) => {
        try {
          h.revision = await o.kv.update(key(p), value, h.revision);
          h.renewedAt = now;
        } catch (err) {
          // Someone else holds the key (it lapsed): there is nothing to delete afterwards.
          if (isKvConflict(err) && handing.get(p) === h) handing.delete(p);
        }
      }),
      ...[...held].map(async ([p, h]) => {
        try {
          h.revision = await o.kv.update(key(p), value, h.revision);
          h.renewedAt = now;
        } catch (err) {
          // A renewal that timed out or found no JetStream loses nothing by itself: the backbone is
          // away (a restart, leader elections) and the worker cannot write anyway. Giving the lease
          // up there restarted every worker after each outage and recreated its consumer, seconds
          // of recovery. Only the backbone's answer decides: a key someone else holds is lost.
          if (!isKvConflict(err)) return;
          let revision: number | undefined;
          try {
            revision = await reclaim(p);
          } catch {
            // No answer to the reclaim either: try again at the next renewal.
            return;
          }
          if (held.get(p) !== h) return;
          if (revision !== undefined) {
            h.revision = revision;
            h.renewedAt = now;
            return;
          }
          log.warn({ partition: p, err: (err as Error).message }, 'lease lost');
          release(p, false);
        }
      }),
    ]);
  }

  /** Replicas seen alive (a KV watch, not a listing per balance: see live-keys.ts). */
  let replicas: LiveKeys | undefined;
  /** The watch on the partitions' leases (deletions kick a balance). */
  let leaseWatch: { stop(): void } | undefined;
  async function liveReplicas(): Promise<Set<string>> {
    const live = replicas?.live() ?? new Set<string>();
    live.add(o.replicaId);
    return live;
  }

  /** Who holds each partition's lease (absent: nobody). */
  async function holders(): Promise<Map<number, string>> {
    const out = new Map<number, string>();
    await Promise.all(
      Array.from({ length: o.partitions }, async (_, p) => {
        const e = await o.kv.get(key(p));
        if (e && e.operation === 'PUT') out.set(p, holderOf(e));
      }),
    );
    return out;
  }

  async function take(p: number, holder: string | undefined): Promise<boolean> {
    if (held.has(p) || releasing.has(p)) return false;
    try {
      let revision: number;
      if (holder === o.replicaId) {
        // Ours from before a restart (same replica id): take it back at once instead of after the TTL,
        // only while it still is: another replica may have taken it since the listing (after this
        // replica gave it back at its stop), and updating at that write's revision stole it (chaos
        // test: two holders of one lease, 2 ms apart, at the restart of a replica).
        const e = await o.kv.get(key(p));
        if (e?.operation !== 'PUT' || holderOf(e) !== o.replicaId) return false;
        revision = await o.kv.update(key(p), value, e.revision);
      } else {
        revision = await o.kv.create(key(p), value);
      }
      // nats-server checks a write's expected revision before its raft proposal, not when it is
      // applied: two replicas creating the same key at once can both be answered (nats-server issue
      // #4320; chaos test: two holders of one lease 3 ms apart, after a node's pause). The later
      // write is the key's: a replica that finds another's after its own does not start a worker (its
      // next renewal, refused, drops the lease).
      const last = await o.kv.get(key(p)).catch(() => null);
      if (last && last.revision > revision && holderOf(last) !== o.replicaId) {
        log.warn(
          { partition: p, revision, holder: holderOf(last), theirs: last.revision },
          'lease taken by another replica at once after this one (a conditional write JetStream did not serialise): not taken',
        );
        return false;
      }
      const already = held.get(p);
      if (already) {
        // Taken meanwhile by another step of this replica: one worker per partition.
        already.revision = Math.max(already.revision, revision);
        return false;
      }
      held.set(p, { revision, renewedAt: Date.now() });
      log.info({ partition: p }, 'lease acquired');
      o.callbacks.acquired(p);
      return true;
    } catch (err) {
      if (!isKvConflict(err)) throw err;
      return false;
    }
  }

  /** Partitions without a holder at the last balance, and since when (ms since the epoch). */
  let freeSince = new Map<number, number>();

  async function balance(): Promise<void> {
    // Generous: only a listing that never ends must not stop balancing (a recovering cluster is slow).
    const bound = Math.max(5_000, 3 * o.ttlMs);
    const [live, holding] = await Promise.all([
      within(liveReplicas(), bound, 'listing live replicas'),
      within(holders(), bound, 'reading the leases'),
    ]);
    const fair = Math.ceil(o.partitions / live.size);
    if (held.size > fair) {
      // Give back only what a live replica below its fair share can take at once.
      const counts = new Map<string, number>();
      for (const r of live) if (r !== o.replicaId) counts.set(r, 0);
      for (const r of holding.values()) if (counts.has(r)) counts.set(r, (counts.get(r) ?? 0) + 1);
      let room = 0;
      for (const n of counts.values()) room += Math.max(0, fair - n);
      const surplus = Math.min(held.size - fair, room);
      for (const p of [...held.keys()].slice(0, surplus)) {
        log.info({ partition: p, fair }, 'giving a partition back');
        release(p, true);
      }
    }
    const offset = firstPartition(o.replicaId, o.partitions);
    const now = Date.now();
    const free = new Map<number, number>();
    for (let i = 0; i < o.partitions && running; i++) {
      const p = (offset + i) % o.partitions;
      if (held.has(p) || releasing.has(p)) continue;
      const holder = holding.get(p);
      if (holder !== undefined && holder !== o.replicaId) continue;
      // Up to the fair share; beyond it only what stayed without a holder for a TTL (balances are
      // more frequent than that, and a handover in progress leaves a partition free for a moment).
      const since = freeSince.get(p) ?? now;
      const orphan = holder === undefined && now - since >= o.ttlMs;
      // Handed off from here (see `handOff`): left to the others until its time is up.
      const handedOff = (avoided.get(p) ?? 0) > now;
      if (!handedOff) avoided.delete(p);
      if (!handedOff && (held.size < fair || holder === o.replicaId || orphan)) {
        if (orphan && held.size >= fair) log.warn({ partition: p, fair }, 'taking a partition nobody holds');
        if (await take(p, holder)) continue;
      }
      if (holder === undefined) free.set(p, since);
    }
    freeSince = free;
    o.onUnheld?.([...free.keys()].sort((a, b) => a - b));
  }

  function every(ms: number, step: () => Promise<void>, set: (p: Promise<void>) => void): void {
    const next = () => {
      const t = setTimeout(() => {
        timers.delete(t);
        loop();
      }, ms);
      timers.add(t);
    };
    const loop = () => {
      if (!running) return;
      const p = step().catch((err) => log.warn({ err: (err as Error).message }, 'lease step failed'));
      set(p);
      void p.finally(() => {
        if (running) next();
      });
    };
    next();
  }

  return {
    /** Takes its first leases, then keeps renewing and balancing in the background. */
    async start(): Promise<void> {
      running = true;
      await o.kv.put(`replica.${o.replicaId}`, value);
      // A replica joining or stopping, or a lease deleted (handed back to one below its share, or by
      // a replica stopping): balance at once instead of at the next step, so a partition's rooms
      // wait for a worker's stop and a consumer's creation, not for a timer too. (Expiry deletes
      // nothing a watch sees: a dead replica and its leases are found by the steps.)
      replicas = await watchLiveKeys({
        kv: o.kv,
        prefix: 'replica.',
        ttlMs: o.ttlMs,
        log,
        onChange: kickBalance,
      });
      leaseWatch = await keepWatching({
        kv: o.kv,
        key: 'fanout.*',
        log,
        updatesOnly: true,
        onEntry: (e) => {
          if (e.operation !== 'PUT') kickBalance();
        },
      });
      balancing = balance().catch((err) => log.warn({ err: (err as Error).message }, 'lease step failed'));
      await balancing;
      kicksOn = true;
      every(Math.max(100, Math.floor(o.ttlMs / 3)), renew, (p) => {
        renewing = p;
      });
      // A step that finds a kicked balance under way waits for it instead of running beside it.
      every(
        Math.max(100, Math.floor(o.ttlMs / 2)),
        () => kicked ?? balance(),
        (p) => {
          balancing = p;
        },
      );
    },
    /** Stops every worker and gives every lease back, so another replica takes over at once. */
    async stop(): Promise<void> {
      running = false;
      replicas?.stop();
      leaseWatch?.stop();
      for (const t of timers) clearTimeout(t);
      timers.clear();
      await Promise.allSettled([renewing, balancing]);
      for (const p of [...held.keys()]) release(p, true);
      // Keys of workers still stopping stay renewed until they stopped (handover rule).
      const keepAlive = setInterval(() => void renew(), Math.max(100, Math.floor(o.ttlMs / 3)));
      await Promise.allSettled([...stopping]).finally(() => clearInterval(keepAlive));
      await o.kv.delete(`replica.${o.replicaId}`).catch(() => undefined);
    },
    held: () => [...held.keys()].sort((a, b) => a - b),
    /** Whether the backbone answered this replica's last renewal (false during an outage). */
    reachable: () => !unreachable,
    /**
     * Gives `partition` back so that another live replica takes it, and takes it again here only
     * after `avoidMs`: for a worker that cannot work it from here while others can (see the fan-out's
     * stuck partitions). False, changing nothing, when no other replica is alive to take it.
     */
    async handOff(partition: number, avoidMs: number): Promise<boolean> {
      if (!held.has(partition)) return false;
      const others = [...(await liveReplicas())].filter((r) => r !== o.replicaId);
      if (others.length === 0) return false;
      avoided.set(partition, Date.now() + avoidMs);
      log.warn({ partition, avoidMs, others }, 'handing a partition off to another replica');
      release(partition, true);
      return true;
    },
  };
}
