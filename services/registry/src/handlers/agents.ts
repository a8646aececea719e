/** Agents and their cards: create, read, update (with the revision read), deregister, list, discover. */
import {
  type ApiParsedRequest,
  type ApiResponse,
  governanceApi,
  newId,
  ParleyError,
  type registryApi,
  request,
} from '@parley/contracts';
import {
  claimName,
  deleteInboxConsumer,
  isKvConflict,
  nameKey,
  type RequestContext,
  registryKeys,
  releaseName,
} from '@parley/kit';
import { canManage, canSeeHuman, canUpdateCard, isAdminOf } from '../access.js';
import type { AgentDoc, StoredAgent } from '../catalog.js';
import { discover as discoverPage, listAgents as listPage } from '../discovery.js';
import { entry, GOVERNANCE_TIMEOUT_MS, notFound, type RegistryState, SELF } from '../state.js';

/** `registry.createAgent`. */
export async function createAgent(
  req: ApiParsedRequest<typeof registryApi.createAgent>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.createAgent>> {
  const v = await r.viewerOf(ctx.caller);
  const ownerId = req.owner ?? (v.kind === 'human' ? v.id : undefined);
  if (!ownerId) throw new ParleyError('INVALID_ARGUMENT', 'owner is required');
  const owner = await r.loadUser(ownerId);
  if (!owner || !canSeeHuman(v, owner)) throw notFound(ownerId);
  if (v.id !== owner.id && !isAdminOf(v, owner.org)) {
    throw new ParleyError('PERMISSION_DENIED', 'only an admin of the org may create agents for someone else');
  }
  const id = newId('agent');
  const claim = nameKey('agent', owner.org, req.card.name);
  await claimName(r.store().kv, claim, id, `agent name "${req.card.name}" in this organisation`);
  const now = new Date().toISOString();
  const stored: StoredAgent = {
    id,
    owner: owner.id,
    org: owner.org,
    card: req.card,
    createdAt: now,
    updatedAt: now,
  };
  const credentials = await r.provisionParticipant(id, claim, async () => {
    const rev = await r.store().kv.create(registryKeys.agent(id), JSON.stringify(stored));
    r.catalog.applyRegistryEntry(entry(registryKeys.agent(id), rev, stored));
  });
  await r.event('agent.created', ctx.caller, id, { owner: owner.id, org: owner.org, name: req.card.name });
  return { agent: r.catalog.agentRecord(r.catalog.agents.get(id) as AgentDoc), credentials };
}

/** `registry.getAgent`. */
export async function getAgent(
  req: ApiParsedRequest<typeof registryApi.getAgent>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.getAgent>> {
  const v = await r.viewerOf(ctx.caller);
  return r.listing(await r.visibleAgent(v, req.agent));
}

/** `registry.updateAgent`. */
export async function updateAgent(
  req: ApiParsedRequest<typeof registryApi.updateAgent>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.updateAgent>> {
  const v = await r.viewerOf(ctx.caller);
  const doc = await r.visibleAgent(v, req.agent);
  if (!canUpdateCard(v, doc.stored)) {
    throw new ParleyError('PERMISSION_DENIED', 'only the agent’s owner may change its card');
  }
  const { kv } = r.store();
  const oldClaim = nameKey('agent', doc.stored.org, doc.stored.card.name);
  const newClaim = nameKey('agent', doc.stored.org, req.card.name);
  const renamed = oldClaim !== newClaim;
  if (renamed) await claimName(kv, newClaim, req.agent, `agent name "${req.card.name}" in this organisation`);
  const stored: StoredAgent = { ...doc.stored, card: req.card, updatedAt: new Date().toISOString() };
  let rev: number;
  try {
    rev = await kv.update(registryKeys.agent(req.agent), JSON.stringify(stored), req.revision);
  } catch (err) {
    if (renamed) await releaseName(kv, newClaim).catch(() => undefined);
    if (!isKvConflict(err)) throw err;
    await r.readThrough(registryKeys.agent(req.agent));
    const current = r.catalog.agents.get(req.agent)?.revision;
    throw new ParleyError(
      'CONFLICT',
      `revision ${req.revision} is stale${current ? `; the current revision is ${current}` : ''}: read the agent again and retry`,
      { details: { revision: req.revision, ...(current ? { current } : {}) } },
    );
  }
  if (renamed) await releaseName(kv, oldClaim).catch(() => undefined);
  r.catalog.applyRegistryEntry(entry(registryKeys.agent(req.agent), rev, stored));
  await r.event('agent.updated', ctx.caller, req.agent, { revision: rev });
  return r.catalog.agentRecord(r.catalog.agents.get(req.agent) as AgentDoc);
}

/** `registry.deregisterAgent`. */
export async function deregisterAgent(
  req: ApiParsedRequest<typeof registryApi.deregisterAgent>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.deregisterAgent>> {
  const v = await r.viewerOf(ctx.caller);
  const doc = await r.visibleAgent(v, req.agent);
  if (!canManage(v, doc.stored)) {
    throw new ParleyError('PERMISSION_DENIED', 'only the agent’s owner or an org admin may remove it');
  }
  const { kv, jsm, presence } = r.store();
  // Credentials first: from here on it can neither connect nor act.
  await request(
    r.deps.nc,
    SELF,
    governanceApi.revokeCredentials,
    { participant: req.agent, reason: 'deregistered' },
    { timeout: GOVERNANCE_TIMEOUT_MS, tracer: r.deps.tracer },
  );
  await deleteInboxConsumer(jsm, req.agent);
  await kv.delete(registryKeys.agent(req.agent));
  r.catalog.forgetAgent(req.agent);
  await releaseName(kv, nameKey('agent', doc.stored.org, doc.stored.card.name));
  await presence.remove(req.agent);
  await r.event('agent.deregistered', ctx.caller, req.agent, { owner: doc.stored.owner });
  return { agent: req.agent };
}

/** `registry.listAgents`. */
export async function listAgents(
  req: ApiParsedRequest<typeof registryApi.listAgents>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.listAgents>> {
  const v = await r.viewerOf(ctx.caller);
  const page = listPage(r.catalog, v, req);
  return { agents: page.docs.map(r.listing), ...(page.next ? { next: page.next } : {}) };
}

/** `registry.discover`. */
export async function discover(
  req: ApiParsedRequest<typeof registryApi.discover>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.discover>> {
  const v = await r.viewerOf(ctx.caller);
  const page = discoverPage(r.catalog, v, req);
  return { agents: page.docs.map(r.listing), ...(page.next ? { next: page.next } : {}) };
}
