/**
 * The ingress's copy of the control views (`room.*` in parley_rooms), kept current by a KV watch, so
 * a send checks membership without a round trip. A miss or a refusal is confirmed with a direct read
 * first: a room created or joined a moment ago may not have reached the watch yet.
 *
 * Closed rooms are not kept (only their ids, bounded): a send to one is confirmed with a direct read
 * anyway, and keeping them made the cache grow with every room ever created (`pnpm soak` closes
 * ~2,000 rooms an hour).
 */
import type { KV, KvWatchEntry } from '@nats-io/kv';
import type { Logger } from '@parley/kit';
import { LRUCache } from 'lru-cache';
import { type RoomRecord, readEntry } from './room-store.js';

export interface RoomCache {
  /** The cached view; `fresh` forces a direct read. */
  get(roomId: string, fresh?: boolean): Promise<RoomRecord | undefined>;
  stop(): Promise<void>;
}

export async function createRoomCache(kv: KV, log: Logger): Promise<RoomCache> {
  const rooms = new Map<string, { record: RoomRecord; revision: number }>();
  // Rooms seen closed (a room never reopens): a direct read that raced the close and comes back
  // with the open view must not put it back. Bounded: past 10,000 later closes the race is long over.
  const closed = new LRUCache<string, true>({ max: 10_000 });
  const keep = (id: string, record: RoomRecord, revision: number) => {
    if (record.closed) {
      rooms.delete(id);
      closed.set(id, true);
    } else if (!closed.has(id)) rooms.set(id, { record, revision });
  };
  const watch = await kv.watch({ key: 'room.*' });
  let stopped = false;
  void (async () => {
    try {
      for await (const e of watch as AsyncIterable<KvWatchEntry>) {
        const id = e.key.slice('room.'.length);
        if (e.operation !== 'PUT' || e.length === 0) rooms.delete(id);
        else {
          const prev = rooms.get(id);
          if (!prev || prev.revision < e.revision) keep(id, e.json<RoomRecord>(), e.revision);
        }
      }
    } catch (err) {
      if (!stopped) log.error({ err }, 'room watch ended');
    }
  })();
  return {
    async get(roomId, fresh = false) {
      const cached = rooms.get(roomId);
      if (cached && !fresh) return cached.record;
      const e = await readEntry<RoomRecord>(kv, `room.${roomId}`);
      if (!e) return undefined;
      const now = rooms.get(roomId);
      if (!now || now.revision < e.revision) keep(roomId, e.value, e.revision);
      return e.value;
    },
    async stop() {
      stopped = true;
      watch.stop();
    },
  };
}
