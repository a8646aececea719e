/**
 * Routes of the console's admin pages, over the NATS APIs that decide who may: organisations and
 * people (registry: creating an org is the superadmin's, creating a person an admin's of that org),
 * grants and org policy (governance: admins of the org), API keys and the gateway's inbound and
 * outbound webhooks of an agent (the gateway's own API: the agent, its owner or an admin of its org).
 * The gateway checks nothing of its own here: each call goes out as the caller, and the service
 * refuses as it would over NATS (PERMISSION_DENIED, NOT_FOUND).
 */
import { gatewayApi, governanceApi, ParticipantId, RoomId, registryApi } from '@parley/contracts';
import * as z from 'zod';
import type { RestRoute, RouteParam } from './routes.js';

const obj = (body: unknown): Record<string, unknown> =>
  typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
const path = (name: string, description: string): RouteParam => ({
  name,
  in: 'path',
  description,
  type: 'string',
});
const AGENT = path('agent', 'Agent id (agt_…).');
const ORG_QUERY: RouteParam = {
  name: 'org',
  in: 'query',
  description: 'Organisation id (org_…); unset: the caller’s.',
  type: 'string',
};

/** Omits the path-supplied fields from a contract request (the body of the route). */
function bodyOf(schema: unknown, ...fields: string[]) {
  return (schema as { omit(m: Record<string, true>): never }).omit(
    Object.fromEntries(fields.map((f) => [f, true])),
  );
}

/** The admin pages' routes, appended to the REST table. */
export const adminRoutes: RestRoute[] = [
  {
    method: 'GET',
    url: '/v1/orgs',
    summary: 'Organisations the caller can see (its own; the superadmin: all).',
    tag: 'admin',
    scope: 'read',
    params: [],
    api: registryApi.listOrgs,
    request: () => ({}),
  },
  {
    method: 'POST',
    url: '/v1/orgs',
    summary: 'Create an organisation (the superadmin only).',
    tag: 'admin',
    scope: 'write',
    params: [],
    api: registryApi.createOrg,
    body: registryApi.createOrg.request,
    response: registryApi.createOrg.response,
    status: 201,
    request: ({ body }) => body,
  },
  {
    method: 'GET',
    url: '/v1/users',
    summary: 'The people of an organisation (its members; the superadmin: any org), sorted by name.',
    tag: 'admin',
    scope: 'read',
    params: [ORG_QUERY],
    api: registryApi.listUsers,
    request: ({ query }) => (query.org ? { org: query.org } : {}),
  },
  {
    method: 'POST',
    url: '/v1/users',
    summary:
      'Create a person in an organisation (an admin of that org); their NATS credentials are in the answer, once.',
    tag: 'admin',
    scope: 'write',
    params: [],
    api: registryApi.createUser,
    body: registryApi.createUser.request,
    response: registryApi.createUser.response,
    status: 201,
    request: ({ body }) => body,
  },
  {
    method: 'GET',
    url: '/v1/grants',
    summary: 'An organisation’s delegation policy and its people’s grants (an admin of the org).',
    tag: 'admin',
    scope: 'read',
    params: [ORG_QUERY],
    api: governanceApi.listGrants,
    request: ({ query }) => (query.org ? { org: query.org } : {}),
  },
  {
    method: 'PUT',
    url: '/v1/users/:user/grants',
    summary: 'Set the scopes a person holds (an admin of their org); replaces the previous list.',
    tag: 'admin',
    scope: 'write',
    params: [path('user', 'Person id (usr_…).')],
    api: governanceApi.setGrants,
    body: bodyOf(governanceApi.setGrants.request, 'participant'),
    response: governanceApi.setGrants.response,
    request: ({ params, body }) => ({ ...obj(body), participant: params.user }),
  },
  {
    method: 'PUT',
    url: '/v1/orgs/:org/policy',
    summary:
      'Set an organisation’s delegation policy (an admin of the org): scopes everyone holds, scopes nobody may use.',
    tag: 'admin',
    scope: 'write',
    params: [path('org', 'Organisation id (org_…).')],
    api: governanceApi.setOrgPolicy,
    body: bodyOf(governanceApi.setOrgPolicy.request, 'org'),
    response: governanceApi.setOrgPolicy.response,
    request: ({ params, body }) => ({ ...obj(body), org: params.org }),
  },
  {
    method: 'GET',
    url: '/v1/agents/:agent/keys',
    summary: 'The API keys of an agent, never their secrets (the agent, its owner or an admin of its org).',
    tag: 'admin',
    scope: 'read',
    params: [AGENT],
    api: gatewayApi.listKeys,
    request: ({ params }) => ({ agent: params.agent }),
  },
  {
    method: 'POST',
    url: '/v1/agents/:agent/keys',
    summary:
      'Mint an API key that acts as exactly this agent (the agent, its owner or an admin of its org); the key is in the answer, once.',
    tag: 'admin',
    scope: 'write',
    params: [AGENT],
    api: gatewayApi.createKey,
    body: bodyOf(gatewayApi.createKey.request, 'agent'),
    response: gatewayApi.createKey.response,
    status: 201,
    request: ({ params, body }) => ({ ...obj(body), agent: params.agent }),
  },
  {
    method: 'DELETE',
    url: '/v1/keys/:id',
    summary: 'Revoke an API key at once (the agent, its owner or an admin of its org).',
    tag: 'admin',
    scope: 'write',
    params: [path('id', 'API key id (pak_…).')],
    api: gatewayApi.revokeKey,
    request: ({ params }) => ({ id: params.id }),
  },
  {
    method: 'GET',
    url: '/v1/agents/:agent/webhook',
    summary: 'An agent’s outbound webhook and its dead letters (NOT_FOUND when it has none).',
    tag: 'admin',
    scope: 'read',
    params: [AGENT],
    api: gatewayApi.getWebhook,
    request: ({ params }) => ({ agent: params.agent }),
  },
  {
    method: 'PUT',
    url: '/v1/agents/:agent/webhook',
    summary:
      'Deliver an agent’s inbox as signed POSTs to a URL (private addresses refused unless allowed); the signing secret is in the answer, once.',
    tag: 'admin',
    scope: 'write',
    params: [AGENT],
    api: gatewayApi.setWebhook,
    body: bodyOf(gatewayApi.setWebhook.request, 'agent'),
    response: gatewayApi.setWebhook.response,
    request: ({ params, body }) => ({ ...obj(body), agent: params.agent }),
  },
  {
    method: 'DELETE',
    url: '/v1/agents/:agent/webhook',
    summary: 'Stop delivering an agent’s inbox to its URL.',
    tag: 'admin',
    scope: 'write',
    params: [AGENT],
    api: gatewayApi.deleteWebhook,
    request: ({ params }) => ({ agent: params.agent }),
  },
  {
    method: 'GET',
    url: '/v1/agents/:agent/hooks',
    summary: 'The inbound webhooks a bridge agent speaks through, never their secrets.',
    tag: 'admin',
    scope: 'read',
    params: [AGENT],
    api: gatewayApi.listHooks,
    request: ({ params }) => ({ agent: params.agent }),
  },
  {
    method: 'POST',
    url: '/v1/agents/:agent/hooks',
    summary:
      'Create an inbound webhook that posts to a room as this bridge agent; the signing secret is in the answer, once.',
    tag: 'admin',
    scope: 'write',
    params: [AGENT],
    api: gatewayApi.createHook,
    // The contract's request has a refinement (room xor participant), checked on the built request.
    body: z.object({
      room: RoomId.optional(),
      participant: ParticipantId.optional(),
      template: z.string().max(4000).optional(),
      includeData: z.boolean().optional(),
      label: z.string().max(100).optional(),
    }),
    response: gatewayApi.createHook.response,
    status: 201,
    request: ({ params, body }) => ({ ...obj(body), agent: params.agent }),
  },
];
