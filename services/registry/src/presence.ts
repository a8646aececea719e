/**
 * Presence and work status. Heartbeats (`parley.in.<id>.presence`) are written to the TTL bucket
 * `parley_presence`; every replica keeps a view of it from a KV watch. A change of state or
 * activity is an event (`parley.evt.presence.changed`, and `presence.needs_input` for the owner).
 *
 * Expiry: on nats-server 2.9 a KV entry that ages out is removed without a delete marker, so no
 * watch sees it. Each replica sweeps its view instead, and a participant whose last heartbeat is
 * older than the TTL turns `offline` with an event. Every replica computes the same event id from
 * (participant, revision of the last heartbeat), so JetStream keeps one event however many notice.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import {
  deterministicId,
  Presence,
  type PresenceHeartbeat,
  type Presence as PresenceT,
  type PrincipalId,
} from '@parley/contracts';
import { type Logger, publishEvent } from '@parley/kit';

interface Seen {
  presence: PresenceT;
  revision: number;
  lastSeenMs: number;
  /** The offline event for this revision was published (or the state already was offline). */
  offlineAnnounced: boolean;
}

/** What {@link createPresence} needs. */
export interface PresenceDeps {
  kv: KV;
  js: JetStreamClient;
  log: Logger;
  /** The bucket's TTL: no heartbeat for this long = offline. */
  ttlMs: number;
  /** The owner of an agent (notified on needs_input), undefined for humans and unknown ids. */
  ownerOf(participantId: string): string | undefined;
  now?: () => number;
}

/** The presence tracker of one registry replica. */
export function createPresence(deps: PresenceDeps) {
  const seen = new Map<string, Seen>();
  const now = deps.now ?? Date.now;
  let timer: NodeJS.Timeout | undefined;

  const expired = (s: Seen) => now() - s.lastSeenMs > deps.ttlMs;

  /** The presence as callers see it: offline when absent, expired or said so. */
  function get(id: string): PresenceT {
    const s = seen.get(id);
    if (!s) return { state: 'offline' };
    if (s.presence.state === 'offline' || expired(s)) {
      return {
        state: 'offline',
        ...(s.presence.lastSeen ? { lastSeen: s.presence.lastSeen } : {}),
        ...(s.presence.activity ? { activity: s.presence.activity } : {}),
      };
    }
    return s.presence;
  }

  function applyEntry(e: KvEntry): void {
    const old = seen.get(e.key);
    if (old && old.revision >= e.revision) return;
    if (e.operation !== 'PUT') {
      seen.delete(e.key);
      return;
    }
    const p = Presence.safeParse(e.json());
    if (!p.success) return;
    const lastSeenMs = p.data.lastSeen ? Date.parse(p.data.lastSeen) : now();
    seen.set(e.key, {
      presence: p.data,
      revision: e.revision,
      lastSeenMs,
      offlineAnnounced: p.data.state === 'offline',
    });
  }

  async function announce(id: string, from: PresenceT, to: PresenceT, eventId?: string, at?: string) {
    await publishEvent(deps.js, 'presence', 'changed', {
      subject: id,
      ...(eventId ? { id: eventId } : {}),
      ...(at ? { at } : {}),
      data: { from: from.state, to: to.state, ...(to.activity ? { activity: to.activity } : {}) },
    });
    const owner = deps.ownerOf(id);
    if (to.state === 'needs_input' && from.state !== 'needs_input') {
      await publishEvent(deps.js, 'presence', 'needs_input', {
        subject: id,
        data: { ...(owner ? { owner } : {}), ...(to.activity ? { activity: to.activity } : {}) },
      });
    }
  }

  async function sweep(): Promise<void> {
    for (const [id, s] of seen) {
      if (s.offlineAnnounced || !expired(s)) continue;
      s.offlineAnnounced = true;
      const atMs = s.lastSeenMs + deps.ttlMs;
      try {
        await announce(
          id,
          s.presence,
          { state: 'offline', ...(s.presence.lastSeen ? { lastSeen: s.presence.lastSeen } : {}) },
          deterministicId('event', `presence-offline:${id}:${s.revision}`, atMs),
          new Date(atMs).toISOString(),
        );
      } catch (err) {
        s.offlineAnnounced = false;
        deps.log.warn({ err, participant: id }, 'could not publish the offline event; retrying');
      }
    }
  }

  return {
    get,
    applyEntry,

    /** Records a heartbeat of `id` and publishes the events its change calls for. */
    async heartbeat(id: PrincipalId, hb: PresenceHeartbeat & { state: PresenceT['state'] }): Promise<void> {
      const before = get(id);
      // Going offline keeps the last activity line: the inventory shows what it was doing last.
      const activity = hb.activity ?? (hb.state === 'offline' ? before.activity : undefined);
      const next: PresenceT = {
        state: hb.state,
        lastSeen: new Date(now()).toISOString(),
        ...(activity ? { activity } : {}),
      };
      const revision = await deps.kv.put(id, JSON.stringify(next));
      applyEntry({ key: id, revision, operation: 'PUT', json: () => next } as unknown as KvEntry);
      if (before.state !== next.state || (before.activity ?? '') !== (next.activity ?? '')) {
        await announce(id, before, next);
      }
    },

    /** Forgets a participant (deregistration). */
    async remove(id: string): Promise<void> {
      await deps.kv.delete(id);
      seen.delete(id);
    },

    /** Starts the expiry sweep. */
    start(): void {
      const every = Math.max(100, Math.min(1000, Math.floor(deps.ttlMs / 4)));
      timer = setInterval(() => void sweep(), every);
      timer.unref();
    },

    stop(): void {
      if (timer) clearInterval(timer);
    },

    sweep,
  };
}

/** The presence tracker. */
export type PresenceTracker = ReturnType<typeof createPresence>;
