/** Who the caller is, and organisations: create (superadmin), list. */
import {
  type ApiParsedRequest,
  type ApiResponse,
  type Human as HumanT,
  newId,
  Org,
  ParleyError,
  type PrincipalId,
  type registryApi,
} from '@parley/contracts';
import { claimName, nameKey, type RequestContext, registryKeys, releaseName } from '@parley/kit';
import { seesAll } from '../access.js';
import type { AgentDoc } from '../catalog.js';
import { entry, type RegistryState } from '../state.js';

/** `registry.whoami`. */
export async function whoami(
  _req: ApiParsedRequest<typeof registryApi.whoami>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.whoami>> {
  const v = await r.viewerOf(ctx.caller).catch(() => {
    throw new ParleyError('NOT_FOUND', `${ctx.caller} is not registered`);
  });
  if (v.kind === 'service') return { id: v.id as PrincipalId, kind: 'service' };
  if (v.kind === 'human') {
    const u = r.catalog.users.get(v.id)?.user as HumanT;
    return { id: u.id, kind: 'human', name: u.name, org: u.org, role: u.role, superadmin: u.superadmin };
  }
  const a = r.catalog.agents.get(v.id) as AgentDoc;
  return {
    id: a.stored.id,
    kind: 'agent',
    name: a.stored.card.name,
    org: a.stored.org,
    owner: a.stored.owner,
  };
}

/** `registry.createOrg`. */
export async function createOrg(
  req: ApiParsedRequest<typeof registryApi.createOrg>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.createOrg>> {
  const v = await r.viewerOf(ctx.caller);
  if (!seesAll(v)) throw new ParleyError('PERMISSION_DENIED', 'only the superadmin may create organisations');
  const id = newId('org');
  const claim = nameKey('org', '_', req.name);
  await claimName(r.store().kv, claim, id, `organisation name "${req.name}"`);
  const org = Org.parse({ id, name: req.name, createdAt: new Date().toISOString() });
  try {
    const rev = await r.store().kv.create(registryKeys.org(id), JSON.stringify(org));
    r.catalog.applyRegistryEntry(entry(registryKeys.org(id), rev, org));
  } catch (err) {
    await releaseName(r.store().kv, claim).catch(() => undefined);
    throw err;
  }
  await r.event('org.created', ctx.caller, id, { name: org.name });
  return org;
}

/** `registry.listOrgs`. */
export async function listOrgs(
  _req: ApiParsedRequest<typeof registryApi.listOrgs>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.listOrgs>> {
  const v = await r.viewerOf(ctx.caller);
  const orgs = [...r.catalog.orgs.values()]
    .map((o) => o.org)
    .filter((o) => seesAll(v) || (v.kind !== 'service' && o.id === v.org))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
  return { orgs };
}
