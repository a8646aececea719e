/**
 * Which `<prefix><id>` keys of a TTL bucket (`parley_leases`) are live, kept current by one KV watch
 * instead of a key listing per look. A listing is an ephemeral consumer on the bucket's stream, and
 * the lease balance and the ingress replica count listed every second or two: on a cluster each
 * one is a consumer assignment in the JetStream meta log, and during an outage the listings that
 * timed out were retried all along. A node restarted after a whole-cluster kill then replayed
 * thousands of them and was not ready after 90 s. Expiry (the bucket's max age) writes no delete
 * marker, so a key counts as live while it was put less than 1.5 TTLs ago (its owner puts it every
 * third of the TTL).
 */
import { type KV, type KvWatchEntry, KvWatchInclude } from '@nats-io/kv';
import type { Logger } from '@parley/kit';

/** How long a start waits for the listing of the keys present, ms. */
const LISTING_MS = 5_000;

/** The ids behind the live keys of one prefix. */
export interface LiveKeys {
  /** The ids whose key was put within the last 1.5 TTLs. */
  live(): Set<string>;
  stop(): void;
}

/**
 * Watches `key` (a filter such as `replica.*`) in `kv`, headers only, and passes every entry to
 * `onEntry`; a watch that ends under us (a restarted server) is started again. Resolves once the
 * first watch is in place.
 */
export async function keepWatching(o: {
  kv: KV;
  key: string;
  log: Logger;
  onEntry(e: KvWatchEntry): void;
  /** Only changes from now on, not the keys' current values. */
  updatesOnly?: boolean;
}): Promise<{ stop(): void }> {
  let stopped = false;
  let stopWatch: (() => void) | undefined;
  const watch = async () => {
    const iter = await o.kv.watch({
      key: o.key,
      headers_only: true,
      ...(o.updatesOnly ? { include: KvWatchInclude.UpdatesOnly } : {}),
    });
    stopWatch = () => iter.stop();
    void (async () => {
      try {
        for await (const e of iter) o.onEntry(e);
      } catch (err) {
        o.log.warn({ err: (err as Error).message, key: o.key }, 'KV watch ended');
      }
      // Ended under us (not stopped): watch again.
      while (!stopped) {
        try {
          await watch();
          return;
        } catch {
          await new Promise((r) => setTimeout(r, 1_000));
        }
      }
    })();
  };
  await watch();
  return {
    stop() {
      stopped = true;
      stopWatch?.();
    },
  };
}

/** Starts watching `<prefix>*` in `kv`; resolves once the keys present now are known. */
export async function watchLiveKeys(o: {
  kv: KV;
  prefix: string;
  ttlMs: number;
  log: Logger;
  /** An id appeared or its key was deleted (one that stopped); expiry is seen by `live()` only. */
  onChange?: () => void;
}): Promise<LiveKeys> {
  // What was seen stays, across a watch started again, until it ages out.
  const seen = new Map<string, number>();
  const watching = await keepWatching({
    kv: o.kv,
    key: `${o.prefix}*`,
    log: o.log,
    onEntry(e) {
      const id = e.key.slice(o.prefix.length);
      const known = seen.has(id);
      if (e.operation === 'PUT') seen.set(id, Date.now());
      else seen.delete(id);
      if (known !== (e.operation === 'PUT')) o.onChange?.();
    },
  });
  // The keys present now, once (the watch's first values arrive in the background). Bounded: a
  // listing is an ordered consumer read to its end, and one whose pushes never came hung a rooms
  // replica's start for good (chaos test: "waiting for the ingress: the replica count" for 120 s,
  // on a 3-node cluster just started). The watch delivers the same keys; only the start waits less.
  let lister: { stop(): void } | undefined;
  const listed = (async () => {
    const keys = await o.kv.keys(`${o.prefix}*`);
    lister = keys;
    for await (const k of keys) seen.set(k.slice(o.prefix.length), Date.now());
    return true;
  })();
  let timer: NodeJS.Timeout | undefined;
  const inTime = await Promise.race([
    listed,
    new Promise<false>((r) => {
      timer = setTimeout(() => r(false), LISTING_MS);
    }),
  ]).finally(() => clearTimeout(timer));
  if (!inTime) {
    lister?.stop();
    listed.catch(() => undefined);
    o.log.warn(
      { prefix: o.prefix, ms: LISTING_MS },
      'live keys not listed in time: going on with what the watch delivers',
    );
  }
  return {
    live() {
      const oldest = Date.now() - o.ttlMs * 1.5;
      for (const [id, at] of seen) if (at < oldest) seen.delete(id);
      return new Set(seen.keys());
    },
    stop() {
      watching.stop();
    },
  };
}
