/**
 * Who holds which scopes: a human's grants (`grants.<userId>`) and their org's policy
 * (`org.<orgId>`: scopes every member holds, scopes nobody may use). Only admins of the org (and
 * the superadmin, and services) read and set them; each change is audited (domain `policy`).
 */
import type { JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  type ApiParsedRequest,
  type ApiResponse,
  type Grants,
  type governanceApi,
  isParleyError,
  isServiceId,
  normalizeScopes,
  type OrgPolicy,
  ParleyError,
  type PrincipalId,
  registryApi,
  request,
  serviceId,
  type Tracer,
} from '@parley/contracts';
import { audit } from './audit.js';
import type { Directory } from './directory.js';
import type { PolicyStore } from './policy-store.js';

const SELF = serviceId('governance');

/** Builds listGrants, setGrants and setOrgPolicy. */
export function createGrants(deps: {
  nc: NatsConnection;
  js: JetStreamClient;
  directory: Directory;
  store: PolicyStore;
  tracer?: Tracer | undefined;
}) {
  /** Throws unless `caller` administers `org` (NOT_FOUND when it is not even in it). */
  async function requireAdmin(caller: string, org: string): Promise<void> {
    if (isServiceId(caller)) return;
    const me = await deps.directory.human(caller);
    if (me.superadmin) return;
    if (me.org !== org) throw new ParleyError('NOT_FOUND', `${org} does not exist`);
    if (me.role !== 'admin')
      throw new ParleyError('PERMISSION_DENIED', `only an admin of ${org} may change its policy`);
  }

  return {
    /** An org's policy and its people's grants (an admin of the org, the superadmin, a service). */
    async listGrants(
      req: ApiParsedRequest<typeof governanceApi.listGrants>,
      caller: string,
    ): Promise<ApiResponse<typeof governanceApi.listGrants>> {
      const org = req.org ?? (isServiceId(caller) ? undefined : (await deps.directory.human(caller)).org);
      if (!org) throw new ParleyError('INVALID_ARGUMENT', 'name the org');
      await requireAdmin(caller, org);
      const grants: Grants[] = [];
      for (const g of deps.store.allGrants()) {
        if ((await deps.directory.find(g.participant))?.org === org) grants.push(g);
      }
      grants.sort((a, b) => a.participant.localeCompare(b.participant));
      const policy = deps.store.orgPolicy(org);
      return { org: org as OrgPolicy['org'], ...(policy ? { policy } : {}), grants };
    },

    async setGrants(req: ApiParsedRequest<typeof governanceApi.setGrants>, caller: string): Promise<Grants> {
      const target = await deps.directory.human(req.participant);
      await requireAdmin(caller, target.org).catch((err) => {
        // A person of another org is reported as unknown, like the registry does.
        throw isParleyError(err, 'NOT_FOUND')
          ? new ParleyError('NOT_FOUND', `${req.participant} does not exist`)
          : err;
      });
      const value: Grants = {
        participant: req.participant,
        scopes: normalizeScopes(req.scopes),
        by: caller as PrincipalId,
        at: new Date().toISOString(),
      };
      await deps.store.setGrants(value);
      await audit(deps.js, {
        domain: 'policy',
        action: 'set_grants',
        actor: caller as PrincipalId,
        target: req.participant,
        data: { scopes: value.scopes },
      });
      return value;
    },

    async getOrgPolicy(org: string, caller: string): Promise<{ policy?: OrgPolicy }> {
      await requireAdmin(caller, org);
      const policy = deps.store.orgPolicy(org);
      return policy ? { policy } : {};
    },

    async setOrgPolicy(
      req: ApiParsedRequest<typeof governanceApi.setOrgPolicy>,
      caller: string,
    ): Promise<OrgPolicy> {
      await requireAdmin(caller, req.org);
      const me = isServiceId(caller) ? undefined : await deps.directory.human(caller);
      if (!me || me.org !== req.org) {
        // The superadmin and services may name any org: it must exist.
        const { orgs } = await request(deps.nc, SELF, registryApi.listOrgs, {}, { tracer: deps.tracer });
        if (!orgs.some((o) => o.id === req.org))
          throw new ParleyError('NOT_FOUND', `${req.org} does not exist`);
      }
      const value: OrgPolicy = {
        org: req.org,
        grants: normalizeScopes(req.grants),
        deny: normalizeScopes(req.deny),
        requireApproval: req.requireApproval,
        by: caller as PrincipalId,
        at: new Date().toISOString(),
      };
      await deps.store.setOrgPolicy(value);
      await audit(deps.js, {
        domain: 'policy',
        action: 'set_org_policy',
        actor: caller as PrincipalId,
        target: req.org,
        data: { grants: value.grants, deny: value.deny, requireApproval: value.requireApproval },
      });
      return value;
    },
  };
}
