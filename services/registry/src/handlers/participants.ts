/** Questions other services ask about participants: may an actor manage one, what is one (as a viewer sees it), and presence. */
import { type ApiParsedRequest, type ApiResponse, ParleyError, type registryApi } from '@parley/contracts';
import type { RequestContext } from '@parley/kit';
import { canManage, canSee, canSeeHuman, isAdminOf } from '../access.js';
import type { PresenceTracker } from '../presence.js';
import { notFound, type RegistryState } from '../state.js';

/** `registry.checkManage`. */
export async function checkManage(
  req: ApiParsedRequest<typeof registryApi.checkManage>,
  _ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.checkManage>> {
  const v = await r.viewerOf(req.actor).catch(() => {
    throw notFound(req.participant);
  });
  if (req.participant.startsWith('agt_')) {
    const doc = await r.visibleAgent(v, req.participant);
    if (!canManage(v, doc.stored)) {
      throw new ParleyError('PERMISSION_DENIED', 'only the agent’s owner or an admin of its org may do this');
    }
    const a = doc.stored;
    return { id: a.id, kind: 'agent', name: a.card.name, org: a.org, owner: a.owner };
  }
  const u = await r.loadUser(req.participant);
  if (!u || !canSeeHuman(v, u)) throw notFound(req.participant);
  if (v.id !== u.id && !isAdminOf(v, u.org)) {
    throw new ParleyError('PERMISSION_DENIED', 'only the person or an admin of their org may do this');
  }
  return { id: u.id, kind: 'human', name: u.name, org: u.org, role: u.role };
}

/** `registry.describeParticipant`. */
export async function describeParticipant(
  req: ApiParsedRequest<typeof registryApi.describeParticipant>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.describeParticipant>> {
  const v = await r.viewerOf(req.viewer ?? ctx.caller).catch(() => {
    throw notFound(req.participant);
  });
  if (req.participant.startsWith('agt_')) {
    const a = (await r.visibleAgent(v, req.participant)).stored;
    return { id: a.id, kind: 'agent', name: a.card.name, org: a.org, owner: a.owner };
  }
  const u = await r.loadUser(req.participant);
  if (!u || !canSeeHuman(v, u)) throw notFound(req.participant);
  return { id: u.id, kind: 'human', name: u.name, org: u.org, role: u.role };
}

/** `registry.presence`. */
export async function presence(
  req: ApiParsedRequest<typeof registryApi.presence>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.presence>> {
  const v = await r.viewerOf(ctx.caller);
  const out: Record<string, ReturnType<PresenceTracker['get']>> = {};
  for (const id of req.participants) {
    if (id.startsWith('agt_')) {
      const doc = await r.loadAgent(id);
      if (doc && canSee(v, doc.stored)) out[id] = r.store().presence.get(id);
    } else {
      const u = await r.loadUser(id);
      if (u && canSeeHuman(v, u)) out[id] = r.store().presence.get(id);
    }
  }
  return { presence: out };
}
