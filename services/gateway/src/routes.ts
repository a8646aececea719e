/**
 * The REST API `/v1` as data: each route names the contract method it calls, how the HTTP request
 * becomes that method's request, and what it may need of an API key's scopes. The handler
 * (http.ts) and the OpenAPI document (openapi.ts) are both made from this table, so they cannot
 * disagree. Resource shapes follow the SDK (`agent.rooms.create(title, {members})`,
 * `room.send(…)`, `room.history(…)`).
 */
import {
  type ApiMethod,
  consentApi,
  governanceApi,
  HANDOFF_MEDIA_TYPE,
  Handoff,
  limits,
  MessageId,
  Part,
  ParticipantId,
  PresenceHeartbeat,
  Provenance,
  registryApi,
  roomsApi,
  SendReply,
  TaskId,
} from '@parley/contracts';
import * as z from 'zod';
import { adminRoutes } from './admin-routes.js';
import { consoleRoutes } from './console-routes.js';
import { taskRoutes } from './task-routes.js';

/** What a route handler gets from the HTTP request. */
export interface RouteInput {
  params: Record<string, string>;
  query: Record<string, string | undefined>;
  body: unknown;
}

/** A query or path parameter, for the OpenAPI document. */
export interface RouteParam {
  name: string;
  in: 'path' | 'query';
  description: string;
  type: 'string' | 'integer' | 'boolean';
}

/** One REST route. */
export interface RestRoute {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** Fastify form (`/v1/rooms/:room`). */
  url: string;
  summary: string;
  tag: string;
  /** `read` for what only reads, `write` for everything else (API key scopes). */
  scope: 'read' | 'write';
  params: RouteParam[];
  /** The contract method called; absent for the message path (send, presence). */
  api?: ApiMethod;
  /** The JSON body the route accepts (write routes), for validation and the OpenAPI document. */
  body?: z.ZodType;
  /** The response body. @default the contract method's (`api.response`) */
  response?: z.ZodType;
  /** 201 for creations. @default 200 */
  status?: number;
  /** Builds the method's request from the HTTP request. */
  request(input: RouteInput): unknown;
}

/** The body of `POST /v1/rooms/{room}/messages`: the SDK's send, with `text` as shorthand for one text part. */
export const SendBody = z
  .object({
    text: z
      .string()
      .min(1)
      .max(limits.maxTextChars)
      .optional()
      .describe('Shorthand for parts: [{type: "text", text}].'),
    parts: z.array(Part).min(1).max(limits.maxParts).optional(),
    mentions: z.array(ParticipantId).max(limits.maxMentions).optional(),
    replyTo: MessageId.optional(),
    kind: z.enum(['message', 'handoff', 'status']).optional(),
    handoff: Handoff.optional().describe('A structured handoff, sent as a data part of a handoff message.'),
    provenance: Provenance.optional(),
    task: TaskId.optional(),
    metadata: z.record(z.string().max(64), z.string().max(1024)).optional(),
    clientMsgId: z
      .string()
      .min(1)
      .max(limits.maxClientMsgIdChars)
      .regex(/^[A-Za-z0-9_-]+$/)
      .optional()
      .describe('Makes retries idempotent (also taken from the Idempotency-Key header).'),
  })
  .refine((b) => b.text !== undefined || b.parts !== undefined || b.handoff !== undefined, {
    message: 'give text, parts or handoff',
  });
export type SendBody = z.infer<typeof SendBody>;

/** The parts a send body stands for. */
export function partsOf(body: SendBody): z.input<typeof Part>[] {
  const parts: z.input<typeof Part>[] = [];
  if (body.text !== undefined) parts.push({ type: 'text', text: body.text });
  if (body.parts) parts.push(...body.parts);
  if (body.handoff) parts.push({ type: 'data', data: body.handoff, mediaType: HANDOFF_MEDIA_TYPE });
  return parts;
}

const num = (v: string | undefined): number | string | undefined =>
  v === undefined ? undefined : /^-?\d+$/.test(v) ? Number(v) : v;
const bool = (v: string | undefined): boolean | string | undefined =>
  v === undefined ? undefined : v === 'true' ? true : v === 'false' ? false : v;
const defined = (o: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
const obj = (body: unknown): Record<string, unknown> =>
  typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};

const path = (name: string, description: string): RouteParam => ({
  name,
  in: 'path',
  description,
  type: 'string',
});
const query = (name: string, description: string, type: RouteParam['type'] = 'string'): RouteParam => ({
  name,
  in: 'query',
  description,
  type,
});
const ROOM = path('room', 'Room id (room_…).');
const PAGE = [query('limit', 'Page size.', 'integer'), query('cursor', 'From the previous page’s next.')];

/** Fields of an object schema other than those the path supplies (the body part of a request). */
function without(api: ApiMethod, ...fields: string[]): z.ZodType {
  const schema = api.request as unknown as z.ZodObject;
  return typeof schema.omit === 'function'
    ? schema.omit(Object.fromEntries(fields.map((f) => [f, true])) as never)
    : api.request;
}

/** Every REST route under `/v1`. */
export const restRoutes: RestRoute[] = [
  {
    method: 'GET',
    url: '/v1/me',
    summary: 'Who the caller is, as the registry knows it.',
    tag: 'me',
    scope: 'read',
    params: [],
    api: registryApi.whoami,
    request: () => ({}),
  },
  {
    method: 'POST',
    url: '/v1/rooms',
    summary:
      'Create a room owned by the caller, optionally inviting members (consent is required across owners).',
    tag: 'rooms',
    scope: 'write',
    params: [],
    api: roomsApi.create,
    body: roomsApi.create.request,
    response: roomsApi.create.response,
    status: 201,
    request: ({ body }) => body,
  },
  {
    method: 'GET',
    url: '/v1/rooms',
    summary: 'The rooms the caller is a member of.',
    tag: 'rooms',
    scope: 'read',
    params: [query('includeClosed', 'Closed rooms too.', 'boolean'), ...PAGE],
    api: roomsApi.list,
    request: ({ query: q }) =>
      defined({ includeClosed: bool(q.includeClosed), limit: num(q.limit), cursor: q.cursor }),
  },
  {
    method: 'GET',
    url: '/v1/rooms/:room',
    summary: 'A room with its members (members only).',
    tag: 'rooms',
    scope: 'read',
    params: [ROOM],
    api: roomsApi.get,
    request: ({ params }) => ({ room: params.room }),
  },
  {
    method: 'POST',
    url: '/v1/rooms/:room/members',
    summary: 'Invite a participant (consent is required across owners).',
    tag: 'rooms',
    scope: 'write',
    params: [ROOM],
    api: roomsApi.invite,
    body: without(roomsApi.invite, 'room'),
    response: roomsApi.invite.response,
    status: 201,
    request: ({ params, body }) => ({ ...obj(body), room: params.room }),
  },
  {
    method: 'POST',
    url: '/v1/rooms/:room/leave',
    summary: 'Leave a room.',
    tag: 'rooms',
    scope: 'write',
    params: [ROOM],
    api: roomsApi.leave,
    request: ({ params }) => ({ room: params.room }),
  },
  {
    method: 'POST',
    url: '/v1/rooms/:room/messages',
    summary:
      'Send to a room (the SDK’s send; {"text": "…"} for one text part). Answers once the room log stored it, with its id and position. Idempotency-Key makes retries safe.',
    tag: 'messages',
    scope: 'write',
    params: [ROOM],
    body: SendBody,
    response: SendReply,
    status: 201,
    request: ({ body }) => body,
  },
  {
    method: 'GET',
    url: '/v1/rooms/:room/messages',
    summary: 'A page of the room’s log (members only), newest or oldest first.',
    tag: 'messages',
    scope: 'read',
    params: [
      ROOM,
      query('order', 'newest (default) or oldest'),
      query('before', 'Only entries before this room sequence.', 'integer'),
      query('after', 'Only entries after this room sequence.', 'integer'),
      query('limit', 'Page size.', 'integer'),
    ],
    api: roomsApi.history,
    request: ({ params, query: q }) =>
      defined({
        room: params.room,
        order: q.order,
        before: num(q.before),
        after: num(q.after),
        limit: num(q.limit),
      }),
  },
  {
    method: 'GET',
    url: '/v1/agents',
    summary: 'Discover agents by skill, tag, text, runtime, owner or org (only agents the caller may see).',
    tag: 'directory',
    scope: 'read',
    params: [
      query('skill', 'A skill id.'),
      query('tag', 'A skill tag.'),
      query('text', 'Words matched by prefix in name, description and skills.'),
      query('runtime', 'claude-code, codex, cursor, langgraph, bridge or custom.'),
      query('owner', 'Owner id (usr_…).'),
      query('org', 'Org id (org_…).'),
      ...PAGE,
    ],
    api: registryApi.discover,
    request: ({ query: q }) =>
      defined({
        skill: q.skill,
        tag: q.tag,
        text: q.text,
        runtime: q.runtime,
        owner: q.owner,
        org: q.org,
        limit: num(q.limit),
        cursor: q.cursor,
      }),
  },
  {
    method: 'GET',
    url: '/v1/inventory',
    summary: 'Agents by owner or org, with presence (what the caller may see).',
    tag: 'directory',
    scope: 'read',
    params: [query('owner', 'Owner id (usr_…).'), query('org', 'Org id (org_…).'), ...PAGE],
    api: registryApi.listAgents,
    request: ({ query: q }) => defined({ owner: q.owner, org: q.org, limit: num(q.limit), cursor: q.cursor }),
  },
  {
    method: 'GET',
    url: '/v1/agents/:agent',
    summary: 'An agent the caller may see.',
    tag: 'directory',
    scope: 'read',
    params: [path('agent', 'Agent id (agt_…).')],
    api: registryApi.getAgent,
    request: ({ params }) => ({ agent: params.agent }),
  },
  {
    method: 'GET',
    url: '/v1/contacts',
    summary: 'The caller’s contacts and whom it blocked.',
    tag: 'contacts',
    scope: 'read',
    params: [query('of', 'One of the caller’s agents (agt_…), for an owner.')],
    api: consentApi.list,
    request: ({ query: q }) => defined({ of: q.of }),
  },
  {
    method: 'POST',
    url: '/v1/contacts/requests',
    summary: 'Ask another participant for contact, with a reason.',
    tag: 'contacts',
    scope: 'write',
    params: [],
    api: consentApi.request,
    body: consentApi.request.request,
    response: consentApi.request.response,
    status: 201,
    request: ({ body }) => body,
  },
  {
    method: 'GET',
    url: '/v1/contacts/requests',
    summary: 'Pending contact requests to and from the caller.',
    tag: 'contacts',
    scope: 'read',
    params: [query('of', 'One of the caller’s agents (agt_…), for an owner.')],
    api: consentApi.pending,
    request: ({ query: q }) => defined({ of: q.of }),
  },
  {
    method: 'POST',
    url: '/v1/contacts/requests/:id/answer',
    summary: 'Accept, reject or block a pending request addressed to the caller (or its agent).',
    tag: 'contacts',
    scope: 'write',
    params: [path('id', 'Contact request id (creq_…).')],
    api: consentApi.answer,
    body: without(consentApi.answer, 'id'),
    response: consentApi.answer.response,
    request: ({ params, body }) => ({ ...obj(body), id: params.id }),
  },
  {
    method: 'GET',
    url: '/v1/presence',
    summary: 'Presence of participants the caller may see.',
    tag: 'presence',
    scope: 'read',
    params: [query('participants', 'Comma-separated participant ids.')],
    api: registryApi.presence,
    request: ({ query: q }) => ({ participants: (q.participants ?? '').split(',').filter(Boolean) }),
  },
  {
    method: 'PUT',
    url: '/v1/presence',
    summary: 'Set the caller’s presence (online, busy, away) and activity.',
    tag: 'presence',
    scope: 'write',
    params: [],
    body: PresenceHeartbeat,
    response: z.object({ state: z.string(), activity: z.string().optional() }),
    request: ({ body }) => body,
  },
  {
    method: 'GET',
    url: '/v1/usage',
    summary: 'Usage the caller may see, summed by agent, owner, org, room or day.',
    tag: 'governance',
    scope: 'read',
    params: [
      query('by', 'agent (default), owner, org, room or day'),
      query('since', 'First UTC day (YYYY-MM-DD).'),
      query('until', 'Last UTC day (YYYY-MM-DD).'),
      query('org', 'Only this org.'),
      query('agent', 'Only this agent.'),
    ],
    api: governanceApi.usage,
    request: ({ query: q }) =>
      defined({ by: q.by, since: q.since, until: q.until, org: q.org, agent: q.agent }),
  },
  {
    method: 'GET',
    url: '/v1/audit/chain/:of',
    summary: 'Walk a message or tool call back to the human who started it.',
    tag: 'governance',
    scope: 'read',
    params: [path('of', 'A message id (msg_…) or tool call id (tc_…).')],
    api: governanceApi.auditChain,
    request: ({ params }) => ({ of: params.of }),
  },
  {
    method: 'POST',
    url: '/v1/agents/:agent/suspend',
    summary: 'Kill switch (the agent’s owner or an admin): its sends are refused everywhere within a second.',
    tag: 'governance',
    scope: 'write',
    params: [path('agent', 'Agent id (agt_…).')],
    api: governanceApi.suspend,
    body: without(governanceApi.suspend, 'agent'),
    response: governanceApi.suspend.response,
    request: ({ params, body }) => ({ ...obj(body), agent: params.agent }),
  },
  {
    method: 'POST',
    url: '/v1/agents/:agent/resume',
    summary: 'Lift a suspension (the agent’s owner or an admin).',
    tag: 'governance',
    scope: 'write',
    params: [path('agent', 'Agent id (agt_…).')],
    api: governanceApi.resume,
    body: without(governanceApi.resume, 'agent'),
    response: governanceApi.resume.response,
    request: ({ params, body }) => ({ ...obj(body), agent: params.agent }),
  },
  // The console's additions (pause/resume a room, create an agent, rotate/revoke credentials).
  ...consoleRoutes,
  ...adminRoutes,
  ...taskRoutes,
];
