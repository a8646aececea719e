/**
 * Tasks over REST, the same calls as `agent.tasks` and `parley task`: create in a room, list, get
 * (with side effects and bindings), move through the A2A states, reassign after a lease. The
 * refusals are the tasks API's (ILLEGAL_TRANSITION 409, PERMISSION_DENIED 403, CONFLICT 409, …).
 */
import { TaskState, tasksApi } from '@parley/contracts';
import type { RestRoute } from './routes.js';

const obj = (body: unknown): Record<string, unknown> =>
  typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : {};
const ROOM = { name: 'room', in: 'path', description: 'Room id (room_…).', type: 'string' } as const;
const TASK = { name: 'task', in: 'path', description: 'Task id (task_…).', type: 'string' } as const;
const q = (name: string, description: string) =>
  ({ name, in: 'query', description, type: 'string' }) as const;

function bodyOf(schema: unknown, field: string) {
  return (schema as { omit(m: Record<string, true>): never }).omit({ [field]: true });
}

/** Task routes, appended to the REST table. */
export const taskRoutes: RestRoute[] = [
  {
    method: 'POST',
    url: '/v1/rooms/:room/tasks',
    summary:
      'Create a task in a room, assigned to a member (goal, inputs, acceptance, deadline, parent, lease, budget).',
    tag: 'tasks',
    scope: 'write',
    params: [ROOM],
    api: tasksApi.create,
    body: bodyOf(tasksApi.create.request, 'room'),
    response: tasksApi.create.response,
    status: 201,
    request: ({ params, body }) => ({ ...obj(body), room: params.room }),
  },
  {
    method: 'GET',
    url: '/v1/tasks',
    summary: 'Tasks the caller may read, newest first.',
    tag: 'tasks',
    scope: 'read',
    params: [
      q('room', 'Only tasks of this room.'),
      q('assignee', 'Only tasks assigned to this participant.'),
      q('requester', 'Only tasks this participant asked for.'),
      q('state', `Comma-separated states: ${TaskState.options.join(', ')}.`),
      { name: 'limit', in: 'query', description: 'Most tasks.', type: 'integer' },
    ],
    api: tasksApi.list,
    request: ({ query }) =>
      Object.fromEntries(
        Object.entries({
          room: query.room,
          assignee: query.assignee,
          requester: query.requester,
          state: query.state?.split(','),
          limit:
            query.limit === undefined
              ? undefined
              : /^\d+$/.test(query.limit)
                ? Number(query.limit)
                : query.limit,
        }).filter(([, v]) => v !== undefined),
      ),
  },
  {
    method: 'GET',
    url: '/v1/tasks/:task',
    summary: 'A task with its side effects, their compensations and the runtimes bound to it.',
    tag: 'tasks',
    scope: 'read',
    params: [TASK],
    api: tasksApi.get,
    request: ({ params }) => ({ task: params.task }),
  },
  {
    method: 'POST',
    url: '/v1/tasks/:task/transitions',
    summary:
      'Move a task to another state (compare-and-set with expectedRevision): the assignee works, asks for input, completes, fails or rejects; the requester cancels.',
    tag: 'tasks',
    scope: 'write',
    params: [TASK],
    api: tasksApi.transition,
    body: bodyOf(tasksApi.transition.request, 'task'),
    response: tasksApi.transition.response,
    request: ({ params, body }) => ({ ...obj(body), task: params.task }),
  },
  {
    method: 'POST',
    url: '/v1/tasks/:task/assignee',
    summary: 'Reassign a task whose assignee was silent past its lease (the requester).',
    tag: 'tasks',
    scope: 'write',
    params: [TASK],
    api: tasksApi.reassign,
    body: bodyOf(tasksApi.reassign.request, 'task'),
    response: tasksApi.reassign.response,
    request: ({ params, body }) => ({ ...obj(body), task: params.task }),
  },
];
