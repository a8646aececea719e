/**
 * What the consent service knows of participants comes from the registry, over NATS, as
 * `svc_consent`: never from the registry's bucket. An agent's owner and org, and a human's org,
 * never change, so they are cached (bounded); a deregistration event drops the entry.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import {
  ParleyError,
  type ParticipantInfo,
  registryApi,
  request,
  serviceId,
  type Tracer,
} from '@parley/contracts';
import { LRUCache } from 'lru-cache';

const SELF = serviceId('consent');
const CAPACITY = 100_000;

/** A participant with the owner consent is decided by (a human owns itself). */
export interface Party extends ParticipantInfo {
  /** The agent's owner, or the human itself. */
  ownerId: string;
}

/** Registry lookups of the consent service. */
export function createParticipants(o: { nc: NatsConnection; tracer?: Tracer | undefined }) {
  const cache = new LRUCache<string, Party>({ max: CAPACITY });
  const opts = { tracer: o.tracer };

  const toParty = (info: ParticipantInfo): Party => ({ ...info, ownerId: info.owner ?? info.id });

  return {
    /** The participant, or NOT_FOUND. */
    async get(id: string): Promise<Party> {
      const hit = cache.get(id);
      if (hit) return hit;
      const info = await request(o.nc, SELF, registryApi.describeParticipant, { participant: id }, opts);
      const party = toParty(info);
      cache.set(id, party);
      return party;
    },

    /** The participant if `viewer` may see it (as in discovery), else NOT_FOUND. */
    async visibleTo(id: string, viewer: string): Promise<Party> {
      const info = await request(
        o.nc,
        SELF,
        registryApi.describeParticipant,
        { participant: id, viewer },
        opts,
      );
      return toParty(info);
    },

    /**
     * Throws unless `actor` may act for `agent` (its owner, an admin of its org, the superadmin):
     * NOT_FOUND when it may not even see it, else PERMISSION_DENIED.
     */
    async requireManage(actor: string, agent: string): Promise<void> {
      await request(o.nc, SELF, registryApi.checkManage, { actor, participant: agent }, opts);
    },

    /** Throws PERMISSION_DENIED unless `actor` is an admin of `org` (or the superadmin). */
    async requireOrgAdmin(actor: string, org: string): Promise<void> {
      const denied = new ParleyError(
        'PERMISSION_DENIED',
        `only an admin of ${org} may set its consent policy`,
      );
      if (!actor.startsWith('usr_')) throw denied;
      const u = await request(o.nc, SELF, registryApi.getUser, { user: actor }, opts);
      if (u.superadmin) return;
      if (u.org !== org) throw new ParleyError('NOT_FOUND', `${org} does not exist`);
      if (u.role !== 'admin') throw denied;
    },

    /** Forgets a participant (deregistered). */
    forget(id: string): void {
      cache.delete(id);
    },
  };
}

export type Participants = ReturnType<typeof createParticipants>;
