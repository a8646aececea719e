/** People of an organisation: create (an admin of it), list, find by email (services), read. */
import {
  type ApiParsedRequest,
  type ApiResponse,
  Human,
  newId,
  ParleyError,
  type registryApi,
} from '@parley/contracts';
import { claimName, nameKey, type RequestContext, registryKeys } from '@parley/kit';
import { canSeeHuman, isAdminOf, seesAll } from '../access.js';
import { entry, notFound, type RegistryState } from '../state.js';

/** `registry.createUser`. */
export async function createUser(
  req: ApiParsedRequest<typeof registryApi.createUser>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.createUser>> {
  const v = await r.viewerOf(ctx.caller);
  const org = await r.loadOrg(req.org);
  if (!org || (!seesAll(v) && v.kind !== 'service' && v.org !== req.org)) throw notFound(req.org);
  if (!isAdminOf(v, req.org)) {
    throw new ParleyError('PERMISSION_DENIED', 'only an admin of the organisation may add people to it');
  }
  const id = newId('user');
  const claim = nameKey('user', req.org, req.name);
  await claimName(r.store().kv, claim, id, `name "${req.name}" in this organisation`);
  const user = Human.parse({
    id,
    org: req.org,
    name: req.name,
    role: req.role,
    superadmin: false,
    createdAt: new Date().toISOString(),
    ...(req.email ? { email: req.email } : {}),
  });
  const credentials = await r.provisionParticipant(id, claim, async () => {
    const rev = await r.store().kv.create(registryKeys.user(id), JSON.stringify(user));
    r.catalog.applyRegistryEntry(entry(registryKeys.user(id), rev, user));
  });
  await r.event('user.created', ctx.caller, id, { org: req.org, role: req.role });
  return { user, credentials };
}

/** `registry.listUsers`. */
export async function listUsers(
  req: ApiParsedRequest<typeof registryApi.listUsers>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.listUsers>> {
  const v = await r.viewerOf(ctx.caller);
  const org = req.org ?? (v.kind === 'human' ? v.org : undefined);
  if (!org) throw new ParleyError('INVALID_ARGUMENT', 'org is required');
  if (!(await r.loadOrg(org)) || !canSeeHuman(v, { org })) throw notFound(org);
  const users = [...(r.catalog.usersByOrg.get(org) ?? [])]
    .map((id) => r.catalog.users.get(id)?.user)
    .filter((u): u is NonNullable<typeof u> => u !== undefined)
    .sort((a, b) => a.name.localeCompare(b.name) || (a.id < b.id ? -1 : 1));
  return { users };
}

/** `registry.findUser`. */
export async function findUser(
  req: ApiParsedRequest<typeof registryApi.findUser>,
  _ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.findUser>> {
  // Services only (checked by the access rule); a linear scan of the cached catalog is fine at
  // the gateway's rate: sign-ins are cached there per token.
  const email = req.email.toLowerCase();
  for (const { user } of r.catalog.users.values()) if (user.email?.toLowerCase() === email) return user;
  throw new ParleyError('NOT_FOUND', 'no user with this email address');
}

/** `registry.getUser`. */
export async function getUser(
  req: ApiParsedRequest<typeof registryApi.getUser>,
  ctx: RequestContext,
  r: RegistryState,
): Promise<ApiResponse<typeof registryApi.getUser>> {
  const v = await r.viewerOf(ctx.caller);
  const u = await r.loadUser(req.user);
  if (!u || !canSeeHuman(v, u)) throw notFound(req.user);
  return u;
}
