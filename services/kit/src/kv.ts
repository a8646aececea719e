/** Helpers for KV buckets: watches that say when they have caught up, snapshots, CAS errors. */
import type { KV, KvEntry } from '@nats-io/kv';

/** A running watch of {@link watchKv}. */
export interface KvWatch {
  /** Resolves once every value that existed when the watch started has been handed to `onEntry`. */
  readonly initialized: Promise<void>;
  /** Stops the watch. */
  stop(): void;
}

/** Options of {@link watchKv}. */
export interface WatchKvOptions {
  /** Key or wildcard. @default ">" */
  key?: string;
  /** Called for every current value, then for every change (deletes included), in order. */
  onEntry: (entry: KvEntry) => void;
  /** Called when `onEntry` throws (the watch goes on). */
  onError?: (err: unknown, entry: KvEntry) => void;
}

/**
 * Watches a bucket: first the last value of every key (which is how an in-memory view is built
 * without scanning key by key), then every change.
 */
export async function watchKv(kv: KV, options: WatchKvOptions): Promise<KvWatch> {
  const iter = await kv.watch({ key: options.key ?? '>' });
  // The watcher's consumer knows how many values it will replay first; the client keeps that
  // info (pinned @nats-io/kv 3.4.0) but does not expose it.
  const consumer = (
    iter as unknown as { _data?: { info(cached: boolean): Promise<{ num_pending: number }> } }
  )._data;
  const pending = consumer
    ? (await consumer.info(true)).num_pending
    : // Without that info: an empty bucket has nothing to replay; otherwise the last replayed
      // entry (delta 0) marks the end.
      (await kv.status()).values === 0
      ? 0
      : undefined;
  let markInitialized: () => void = () => undefined;
  const initialized = new Promise<void>((resolve) => {
    markInitialized = resolve;
  });
  if (pending === 0) markInitialized();
  void (async () => {
    for await (const e of iter) {
      try {
        options.onEntry(e);
      } catch (err) {
        options.onError?.(err, e);
      }
      if (e.isUpdate || e.delta === 0) markInitialized();
    }
    markInitialized();
  })();
  return { initialized, stop: () => iter.stop() };
}

/** Every current entry under `key` (one watch, not one request per key). */
export async function snapshotKv(kv: KV, key = '>'): Promise<Map<string, KvEntry>> {
  const out = new Map<string, KvEntry>();
  const w = await watchKv(kv, {
    key,
    onEntry: (e) => {
      if (e.operation === 'PUT') out.set(e.key, e);
      else out.delete(e.key);
    },
  });
  await w.initialized;
  w.stop();
  return out;
}

/** True when a KV write failed its compare-and-set (the key exists, or its revision moved on). */
export function isKvConflict(err: unknown): boolean {
  return /wrong last sequence|key exists/i.test((err as Error)?.message ?? '');
}
