/**
 * One NATS connection per active principal, made with that principal's own short-lived credentials
 * (`governance.sessionCredentials`): every request the gateway makes for a person or a system goes
 * out as them, under the participant permission template the NATS server enforces. The gateway's
 * own service connection is only used to mint those credentials and to keep its records.
 *
 * The pool is an LRU (`PARLEY_GATEWAY_POOL_SIZE`); an entry in use by a live stream or webhook
 * worker is kept open until released even when the LRU lets it go. Credentials are renewed before
 * they expire: the authenticator hands the newest to every (re)connect, and the connection is
 * moved to them with `reconnect()`, so subscriptions (the inbox consumer) survive the renewal.
 */
import { credsAuthenticator, type NatsConnection, connect as natsConnect } from '@nats-io/transport-node';
import { governanceApi, ParleyError, request, serviceId, subjects } from '@parley/contracts';
import type { Logger } from '@parley/kit';
import { type Agent, attach, type DeliveryOptions, drainConnection } from '@parley/sdk';
import { LRUCache } from 'lru-cache';

/** What {@link createPrincipalPool} needs. */
export interface PrincipalPoolOptions {
  /** The gateway's service connection (mints credentials). */
  nc: NatsConnection;
  /** NATS servers the principals' connections go to. */
  servers: string[];
  log: Logger;
  /** Most open principals. */
  max: number;
  /** Lifetime of minted credentials, in seconds. */
  credsTtlSeconds: number;
  /** How a principal's deliveries are consumed (pull mode: the stream and webhooks hand them on). */
  delivery?: (participant: string) => DeliveryOptions;
}

/** A principal's connection, held while in use. */
export interface PooledPrincipal {
  agent: Agent;
  /** Give it back (an evicted entry is closed once nobody holds it). */
  release(): void;
}

interface Entry {
  participant: string;
  agent: Agent;
  nc: NatsConnection;
  refs: number;
  evicted: boolean;
  renew: NodeJS.Timeout | undefined;
  closed: Promise<void> | undefined;
  /** Mints fresh credentials and moves the connection onto them. */
  renewNow(): Promise<void>;
}

const enc = new TextEncoder();
const SELF = serviceId('gateway');

/** The pool; see the module comment. */
export function createPrincipalPool(o: PrincipalPoolOptions) {
  const log = o.log.child({ component: 'gateway-pool' });
  const opening = new Map<string, Promise<Entry>>();
  const lru = new LRUCache<string, Entry>({
    max: o.max,
    dispose: (entry) => {
      entry.evicted = true;
      if (entry.refs === 0) void close(entry);
    },
  });

  async function mint(participant: string): Promise<{ creds: Uint8Array; expiresAt: number }> {
    const issued = await request(
      o.nc,
      SELF,
      governanceApi.sessionCredentials,
      { participant, ttlSeconds: o.credsTtlSeconds },
      { timeout: 5000 },
    );
    return { creds: enc.encode(issued.creds), expiresAt: Date.parse(issued.expiresAt) };
  }

  function close(entry: Entry): Promise<void> {
    entry.closed ??= (async () => {
      clearTimeout(entry.renew);
      // The agent's running handlers get a bounded time; a connection the server cut (revoked
      // credentials) never drains, so the drain is bounded too, then the connection closed.
      await Promise.race([
        entry.agent.close().catch(() => undefined),
        new Promise((r) => setTimeout(r, 2_000).unref()),
      ]);
      await drainConnection(entry.nc, 2_000);
    })();
    return entry.closed;
  }

  async function open(participant: string): Promise<Entry> {
    let current = await mint(participant);
    let nc: NatsConnection;
    try {
      nc = await natsConnect({
        servers: o.servers,
        name: `parley-gateway:${participant}`,
        // The newest credentials at every (re)connect: renewal below swaps them in.
        authenticator: credsAuthenticator(() => current.creds),
        inboxPrefix: subjects.replyPrefix(participant),
        noAsyncTraces: true,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 250,
      });
    } catch (err) {
      throw new ParleyError('UNAVAILABLE', 'cannot reach NATS for this principal', {
        cause: err,
        retryAfterMs: 1000,
      });
    }
    const agent = attach(nc, participant, o.delivery ? { delivery: o.delivery(participant) } : {});
    await agent.replies.start();
    const entry: Entry = {
      participant,
      agent,
      nc,
      refs: 0,
      evicted: false,
      renew: undefined,
      closed: undefined,
      renewNow: async () => {
        current = await mint(participant);
        // The next connect authenticates with the new credentials; subscriptions are restored.
        await nc.reconnect();
      },
    };
    const schedule = () => {
      // Renew at 80% of the lifetime, so a slow mint still lands before expiry.
      const wait = Math.max(5_000, (current.expiresAt - Date.now()) * 0.8);
      entry.renew = setTimeout(async () => {
        try {
          await entry.renewNow();
          schedule();
        } catch (err) {
          // Revoked (or governance away): drop the principal; the next request mints anew or is refused.
          log.warn({ err, participant }, 'renewing session credentials failed; closing the connection');
          lru.delete(participant);
          if (entry.refs === 0) void close(entry);
        }
      }, wait);
      entry.renew.unref();
    };
    schedule();
    void nc.closed().then(() => {
      if (lru.get(participant) === entry) lru.delete(participant);
    });
    return entry;
  }

  return {
    /** The principal's connection (opened with fresh credentials when it has none). */
    async acquire(participant: string): Promise<PooledPrincipal> {
      let entry = lru.get(participant);
      if (!entry || entry.closed || entry.nc.isClosed()) {
        let pending = opening.get(participant);
        if (!pending) {
          pending = open(participant).finally(() => opening.delete(participant));
          opening.set(participant, pending);
        }
        entry = await pending;
        if (lru.get(participant) !== entry) lru.set(participant, entry);
      }
      const held = entry;
      held.refs++;
      let released = false;
      return {
        agent: held.agent,
        release() {
          if (released) return;
          released = true;
          held.refs--;
          if (held.refs === 0 && held.evicted) void close(held);
        },
      };
    },

    /** Closes a principal's connection now (e.g. its key was revoked). */
    async drop(participant: string): Promise<void> {
      const entry = lru.get(participant);
      if (!entry) return;
      lru.delete(participant);
      await close(entry);
    },

    /**
     * Closes a principal's connection once nobody holds it any more (its deliveries go back to the
     * server); the next {@link acquire} opens a fresh one.
     */
    async retire(participant: string): Promise<void> {
      const entry = lru.peek(participant);
      if (!entry) return;
      // Deleting from the LRU marks it evicted; it closes now or when the last holder releases it.
      lru.delete(participant);
    },

    /** Renews a principal's credentials now (what the timer does at 80% of their lifetime). */
    async renew(participant: string): Promise<void> {
      const entry = lru.peek(participant);
      if (!entry) throw new Error(`no open connection for ${participant}`);
      await entry.renewNow();
    },

    /** True while a connection for the principal is open. */
    has(participant: string): boolean {
      const entry = lru.peek(participant);
      return entry !== undefined && !entry.closed;
    },

    /** Open principals (for metrics and tests). */
    get size(): number {
      return lru.size;
    },

    /** Closes every connection. */
    async close(): Promise<void> {
      const entries = [...lru.values()];
      lru.clear();
      await Promise.allSettled(entries.map(close));
    },
  };
}

/** The pool's API. */
export type PrincipalPool = ReturnType<typeof createPrincipalPool>;
