/**
 * What governance needs to know of participants — an agent's owner, org and card scopes, a human's
 * org and role — asked of the registry over NATS (services never share code or state), kept for a
 * few seconds, and forgotten as soon as the registry announces a change.
 */
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import {
  isParleyError,
  ParleyError,
  participantKind,
  registryApi,
  request,
  serviceId,
  subjects,
  type Tracer,
} from '@parley/contracts';
import { LRUCache } from 'lru-cache';

const SELF = serviceId('governance');

/** An agent, as governance sees it. */
export interface AgentFacts {
  id: string;
  kind: 'agent';
  owner: string;
  org: string;
  name: string;
  /** Scopes its card says it may hold. */
  scopes: string[];
}

/** A human, as governance sees it. */
export interface HumanFacts {
  id: string;
  kind: 'human';
  org: string;
  name: string;
  role: 'admin' | 'member';
  superadmin: boolean;
}

/** A participant. */
export type ParticipantFacts = AgentFacts | HumanFacts;

/** Options of {@link createDirectory}. */
export interface DirectoryOptions {
  nc: NatsConnection;
  tracer?: Tracer | undefined;
  /** How long an answer is reused. @default 5000 */
  ttlMs?: number;
}

/** Cached registry lookups. */
export function createDirectory(o: DirectoryOptions) {
  const ttl = o.ttlMs ?? 5_000;
  // Bounded, with a TTL; `fetch` shares one load among concurrent callers, does not keep a failed
  // one, and (ignoreFetchAbort) still answers the callers of a load that a registry change
  // invalidated while it ran, without keeping its possibly stale result.
  const cache = new LRUCache<string, ParticipantFacts>({
    max: 50_000,
    ttl: Math.max(1, ttl),
    ignoreFetchAbort: true,
    fetchMethod: (id) => load(id),
  });
  let changes: Subscription | undefined;

  async function load(id: string): Promise<ParticipantFacts> {
    const kind = participantKind(id);
    if (kind === 'agent') {
      const { agent } = await request(o.nc, SELF, registryApi.getAgent, { agent: id }, { tracer: o.tracer });
      return {
        id,
        kind: 'agent',
        owner: agent.owner,
        org: agent.org,
        name: agent.card.name,
        scopes: agent.card.scopes,
      };
    }
    if (kind === 'human') {
      const u = await request(o.nc, SELF, registryApi.getUser, { user: id }, { tracer: o.tracer });
      return { id, kind: 'human', org: u.org, name: u.name, role: u.role, superadmin: u.superadmin };
    }
    throw new ParleyError('NOT_FOUND', `${id} is not a participant`);
  }

  async function get(id: string): Promise<ParticipantFacts> {
    if (ttl <= 0) return load(id);
    return (await cache.fetch(id)) as ParticipantFacts;
  }

  return {
    /** Starts listening for registry changes (cards, deregistrations). */
    start() {
      changes = o.nc.subscribe(subjects.eventsOf('registry'), {
        callback: (err, msg) => {
          if (err) return;
          const id = msg.json<{ subject?: string }>().subject;
          if (id) cache.delete(id);
        },
      });
    },
    stop() {
      changes?.unsubscribe();
    },
    /** A participant, or NOT_FOUND. */
    participant: get,
    /** An agent, or NOT_FOUND (also when the id names a human). */
    async agent(id: string): Promise<AgentFacts> {
      const p = await get(id);
      if (p.kind !== 'agent') throw new ParleyError('NOT_FOUND', `${id} is not an agent`);
      return p;
    },
    /** A human, or NOT_FOUND. */
    async human(id: string): Promise<HumanFacts> {
      const p = await get(id);
      if (p.kind !== 'human') throw new ParleyError('NOT_FOUND', `${id} is not a person`);
      return p;
    },
    /** A participant, or undefined when it does not exist. */
    async find(id: string): Promise<ParticipantFacts | undefined> {
      try {
        return await get(id);
      } catch (err) {
        if (isParleyError(err, 'NOT_FOUND') || isParleyError(err, 'INVALID_ARGUMENT')) return undefined;
        throw err;
      }
    },
    /** Forgets what is cached about `id`. */
    forget(id: string) {
      cache.delete(id);
    },
  };
}

/** The directory of {@link createDirectory}. */
export type Directory = ReturnType<typeof createDirectory>;
