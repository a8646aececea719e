/**
 * Routes the console needs beyond the SDK's shapes, over existing NATS APIs with the same
 * authentication and refusals as every other `/v1` route: pause and resume a room (the kill switch
 * for a room), create an agent (its credentials are in the answer, once), rotate and revoke an
 * agent's credentials, set and read budgets, and the owner's audited read-only view of the rooms
 * its agents are in.
 */
import { governanceApi, registryApi, roomsApi } from '@parley/contracts';
import type { RestRoute } from './routes.js';

const obj = (body: unknown): Record<string, unknown> =>
  typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
const ROOM = { name: 'room', in: 'path', description: 'Room id (room_…).', type: 'string' } as const;
const AGENT = { name: 'agent', in: 'path', description: 'Agent id (agt_…).', type: 'string' } as const;
const q = (name: string, description: string, type: 'string' | 'integer' | 'boolean' = 'string') =>
  ({ name, in: 'query', description, type }) as const;
const num = (v: string | undefined): number | string | undefined =>
  v === undefined ? undefined : /^-?\d+$/.test(v) ? Number(v) : v;
const defined = (o: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));

/** Omits the path-supplied fields from a contract request (the body of the route). */
function bodyOf(schema: unknown, field: string) {
  return (schema as { omit(m: Record<string, true>): never }).omit({ [field]: true });
}

/** The console's routes, appended to the REST table. */
export const consoleRoutes: RestRoute[] = [
  {
    method: 'POST',
    url: '/v1/rooms/:room/pause',
    summary:
      'Pause a room for agents with a reason (its owner or a human member): their sends get ROOM_PAUSED.',
    tag: 'rooms',
    scope: 'write',
    params: [ROOM],
    api: roomsApi.pause,
    body: bodyOf(roomsApi.pause.request, 'room'),
    response: roomsApi.pause.response,
    request: ({ params, body }) => ({ ...obj(body), room: params.room }),
  },
  {
    method: 'POST',
    url: '/v1/rooms/:room/resume',
    summary: 'Resume a paused room (a human member): agents may send again.',
    tag: 'rooms',
    scope: 'write',
    params: [ROOM],
    api: roomsApi.resume,
    body: bodyOf(roomsApi.resume.request, 'room'),
    response: roomsApi.resume.response,
    request: ({ params, body }) => ({ ...obj(body), room: params.room }),
  },
  {
    method: 'POST',
    url: '/v1/agents',
    summary: 'Register an agent owned by the caller (a human); its NATS credentials are in the answer, once.',
    tag: 'directory',
    scope: 'write',
    params: [],
    api: registryApi.createAgent,
    body: registryApi.createAgent.request,
    response: registryApi.createAgent.response,
    status: 201,
    request: ({ body }) => body,
  },
  {
    method: 'POST',
    url: '/v1/agents/:agent/credentials/rotate',
    summary: 'New credentials for an agent (its owner or an admin); every older one stops working.',
    tag: 'governance',
    scope: 'write',
    params: [AGENT],
    api: governanceApi.rotateCredentials,
    request: ({ params }) => ({ participant: params.agent }),
  },
  {
    method: 'POST',
    url: '/v1/agents/:agent/credentials/revoke',
    summary: 'Revoke every credential of an agent for good (its owner or an admin), with a reason.',
    tag: 'governance',
    scope: 'write',
    params: [AGENT],
    api: governanceApi.revokeCredentials,
    body: bodyOf(governanceApi.revokeCredentials.request, 'participant'),
    response: governanceApi.revokeCredentials.response,
    request: ({ params, body }) => ({ ...obj(body), participant: params.agent }),
  },
  {
    method: 'PUT',
    url: '/v1/budgets',
    summary:
      'Set the budget of an agent (its owner or an admin) or of an owner (an admin); crossing it suspends the agent or pauses the room.',
    tag: 'governance',
    scope: 'write',
    params: [],
    api: governanceApi.setBudget,
    body: governanceApi.setBudget.request,
    response: governanceApi.setBudget.response,
    request: ({ body }) => body,
  },
  {
    method: 'GET',
    url: '/v1/budgets',
    summary:
      'Budgets the caller may see (its agents’ and its own; an admin: its org’s), each limit with what was spent of it in the current UTC day or month.',
    tag: 'governance',
    scope: 'read',
    params: [
      q('agent', 'Only this agent’s budget.'),
      q('owner', 'Only budgets of this owner and its agents.'),
    ],
    api: governanceApi.budgets,
    request: ({ query }) => defined({ agent: query.agent, owner: query.owner }),
  },
  {
    method: 'GET',
    url: '/v1/agents/:agent/rooms',
    summary:
      'The rooms one of your agents is in (its owner only), with its role in each: what the owner may open read-only.',
    tag: 'rooms',
    scope: 'read',
    params: [
      AGENT,
      q('includeClosed', 'Include closed rooms.', 'boolean'),
      q('limit', 'Page size.', 'integer'),
      q('cursor', 'From a previous page’s `next`.'),
    ],
    api: roomsApi.ownerRooms,
    request: ({ params, query }) =>
      defined({
        agent: params.agent,
        includeClosed: query.includeClosed === undefined ? undefined : query.includeClosed === 'true',
        limit: num(query.limit),
        cursor: query.cursor,
      }),
  },
  {
    method: 'GET',
    url: '/v1/agents/:agent/rooms/:room',
    summary:
      'Read-only view of a room one of your agents is in, without joining (its owner only): the room and a page of its history as the agent sees it. Every read is audited (domain access, action room.owner_read); the answer names the audit record.',
    tag: 'rooms',
    scope: 'read',
    params: [
      AGENT,
      ROOM,
      q('order', 'newest (default) or oldest first.'),
      q('before', 'Only entries with seq < before.', 'integer'),
      q('after', 'Only entries with seq > after.', 'integer'),
      q('limit', 'Page size.', 'integer'),
    ],
    api: roomsApi.ownerRead,
    request: ({ params, query }) =>
      defined({
        agent: params.agent,
        room: params.room,
        order: query.order,
        before: num(query.before),
        after: num(query.after),
        limit: num(query.limit),
      }),
  },
];
