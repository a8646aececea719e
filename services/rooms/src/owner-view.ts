/**
 * The owner's read-only view of the rooms its agents are in (`rooms.ownerRooms`, `rooms.ownerRead`).
 *
 * A person may see what their agents are doing without joining the rooms: the listing and each
 * page of a room are what the agent itself sees (`list` and `history` as the agent: its history
 * policy, mentions-only messages only when they mention it). Only the agent's **owner** may: not an
 * admin of its org (the security model gives admins the agent's credentials and standing, never
 * the content of rooms they are not in — the audit chain redacts those rooms for them too), and not
 * another member of the org. The registry says who owns the agent; an agent the caller may not see
 * is NOT_FOUND, one it sees but does not own PERMISSION_DENIED.
 *
 * Every read of a room is an audit record (domain `access`, action `room.owner_read`) on
 * PARLEY_AUDIT, appended before the page is returned: if it cannot be written, nothing is shown.
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiParsedRequest,
  type ApiResponse,
  activeTraceIds,
  ParleyError,
  type ParticipantId,
  type PrincipalId,
  registryApi,
  request,
  type roomsApi,
  serviceId,
  type Tracer,
} from '@parley/contracts';
import { appendAudit } from '@parley/kit';
import type { ControlPlane } from './control.js';

const SELF = serviceId('rooms');

type Req<M extends 'ownerRooms' | 'ownerRead'> = ApiParsedRequest<(typeof roomsApi)[M]>;
type Res<M extends 'ownerRooms' | 'ownerRead'> = ApiResponse<(typeof roomsApi)[M]>;

/** What the owner's view needs. */
export interface OwnerViewDeps {
  nc: NatsConnection;
  js: JetStreamClient;
  control: ControlPlane;
  tracer?: Tracer | undefined;
}

/** Builds the handlers of `rooms.ownerRooms` and `rooms.ownerRead`. */
export function createOwnerView(deps: OwnerViewDeps) {
  /** Throws unless `caller` owns `agent` (NOT_FOUND when it may not even see it). */
  async function requireOwner(caller: string, agent: string): Promise<void> {
    const info = await request(
      deps.nc,
      SELF,
      registryApi.describeParticipant,
      { participant: agent, viewer: caller as ParticipantId },
      { tracer: deps.tracer },
    );
    if (info.kind !== 'agent' || info.owner !== caller) {
      throw new ParleyError(
        'PERMISSION_DENIED',
        `only the owner of ${agent} may read the rooms it is in (ask ${info.owner ?? 'its owner'}, or be invited to the room)`,
        { details: { agent, owner: info.owner } },
      );
    }
  }

  return {
    async ownerRooms(req: Req<'ownerRooms'>, caller: string): Promise<Res<'ownerRooms'>> {
      await requireOwner(caller, req.agent);
      const { agent, ...page } = req;
      return { agent, ...(await deps.control.list(page, agent)) };
    },

    async ownerRead(req: Req<'ownerRead'>, caller: string): Promise<Res<'ownerRead'>> {
      await requireOwner(caller, req.agent);
      const { agent, ...page } = req;
      // As the agent: NOT_A_MEMBER when it is not (or no longer) in the room.
      const room = await deps.control.get({ room: req.room }, agent);
      const history = await deps.control.history(page, agent);
      const seqs = history.entries.map((e) => e.seq);
      const trace = activeTraceIds();
      const record = await appendAudit(deps.js, {
        domain: 'access',
        action: 'room.owner_read',
        actor: caller as PrincipalId,
        target: agent,
        room: req.room,
        ...(trace ? { traceId: trace.traceId } : {}),
        data: {
          entries: seqs.length,
          ...(seqs.length ? { fromSeq: Math.min(...seqs), toSeq: Math.max(...seqs) } : {}),
          order: req.order,
        },
      }).catch((err: unknown) => {
        // An unaudited read is not allowed to happen: nothing of the room is returned.
        throw new ParleyError('UNAVAILABLE', 'the read could not be audited; try again', {
          cause: err,
          retryAfterMs: 1000,
        });
      });
      return {
        agent,
        room,
        entries: history.entries,
        more: history.more,
        ...(history.retainedFrom ? { retainedFrom: history.retainedFrom } : {}),
        audit: record.id,
      };
    },
  };
}
