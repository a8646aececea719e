/**
 * Tasks: delegated work with a state, an owner, a deadline and a parent. States are A2A's, so an
 * A2A task maps 1:1. The state lives in the `parley_tasks` bucket (compare-and-set transitions);
 * every transition is also a room message (`task.assigned` on creation, `task.update` after), so
 * room history and traces show it.
 */
import * as z from 'zod';
import { defineApi } from './api.js';
import { ErrorCodeSchema } from './errors.js';
import { ParticipantId, PrincipalId, RoomId, TaskId } from './ids.js';
import { limits } from './limits.js';
import { FilePart } from './messages.js';
import { named } from './registry-of-schemas.js';

/** A task's state (A2A's `TaskState`, with `_` for `-`). */
export const TaskState = named(
  'TaskState',
  z
    .enum(['submitted', 'working', 'input_required', 'completed', 'failed', 'canceled', 'rejected'])
    .describe('A2A task states; completed, failed, canceled and rejected are final.'),
);
export type TaskState = z.infer<typeof TaskState>;

/** States a task never leaves. */
export const FINAL_TASK_STATES: readonly TaskState[] = ['completed', 'failed', 'canceled', 'rejected'];

/** Whether `state` is final. */
export function isFinalTaskState(state: TaskState): boolean {
  return FINAL_TASK_STATES.includes(state);
}

/**
 * Which state may follow which. `failed` from `submitted` is a deadline or budget passing before the
 * assignee started; `input_required → working` is the assignee resuming once it got its answer.
 */
export const taskTransitions: Readonly<Record<TaskState, readonly TaskState[]>> = {
  submitted: ['working', 'rejected', 'canceled', 'failed', 'completed'],
  working: ['input_required', 'completed', 'failed', 'canceled'],
  input_required: ['working', 'completed', 'failed', 'canceled'],
  completed: [],
  failed: [],
  canceled: [],
  rejected: [],
};

/** Whether a task in `from` may move to `to`. */
export function canTransition(from: TaskState, to: TaskState): boolean {
  return taskTransitions[from].includes(to);
}

/** A compensation's progress. */
export const CompensationState = named(
  'CompensationState',
  z
    .object({
      state: z.enum(['running', 'done', 'failed']),
      by: ParticipantId,
      at: z.iso.datetime(),
      error: z.string().max(500).optional(),
    })
    .describe('The compensating step of a side effect: claimed (running), then done or failed.'),
);
export type CompensationState = z.infer<typeof CompensationState>;

/** A side effect recorded under a task by `agent.tools.call(…, { task, idempotencyKey })`. */
export const SideEffect = named(
  'SideEffect',
  z
    .object({
      key: z.string().describe('The idempotency key.'),
      tool: z.string(),
      toolCall: z.string().optional().describe('The tool call id (tc_…) of the audit record.'),
      argsDigest: z.string(),
      state: z.enum(['running', 'done', 'error']),
      result: z.unknown().optional().describe('What the call returned (JSON), replayed to a retry.'),
      error: z.string().max(500).optional(),
      compensable: z.boolean().describe('A compensating step was registered with it.'),
      compensation: CompensationState.optional(),
      by: ParticipantId,
      at: z.iso.datetime(),
    })
    .describe('A recorded side effect of a task.'),
);
export type SideEffect = z.infer<typeof SideEffect>;

/** Progress reported by the assignee. */
export const TaskProgress = named(
  'TaskProgress',
  z
    .object({
      text: z.string().max(2000).optional(),
      percent: z.number().min(0).max(100).optional(),
    })
    .describe('How far the assignee is.'),
);

/** A runtime's ids attached to a task (LangGraph thread and run, a Claude Code session, …). */
export const TaskBinding = named(
  'TaskBinding',
  z
    .object({
      id: z
        .string()
        .regex(/^[A-Za-z0-9_:.-]{1,128}$/)
        .describe('Chosen by the runtime, stable across its restarts (e.g. langgraph:<thread>).'),
      runtime: z
        .string()
        .regex(/^[a-z0-9_.-]{1,64}$/)
        .describe('e.g. langgraph, claude-code, codex, exec'),
      ids: z
        .record(z.string().max(64), z.string().max(256))
        .refine((r) => Object.keys(r).length <= 16, { message: 'at most 16 ids' })
        .describe('e.g. { thread_id, run_id } or { session_id }'),
      participant: ParticipantId.describe('Who attached it.'),
      at: z.iso.datetime(),
    })
    .describe('Runtime ids working on a task.'),
);
export type TaskBinding = z.infer<typeof TaskBinding>;

/** A task. */
export const Task = named(
  'Task',
  z
    .object({
      id: TaskId,
      room: RoomId,
      requester: PrincipalId.describe('Who created it (the one told when it fails).'),
      assignee: ParticipantId,
      goal: z.string(),
      inputs: z.record(z.string(), z.unknown()),
      acceptance: z.array(z.string()).describe('Acceptance criteria.'),
      deadline: z.iso.datetime().optional().describe('Past it the task fails with DEADLINE_EXCEEDED.'),
      parent: TaskId.optional(),
      children: z.array(TaskId),
      state: TaskState,
      revision: z.int().min(1).describe('Bucket revision: pass it as expectedRevision to compare-and-set.'),
      progress: TaskProgress.optional(),
      result: z.record(z.string(), z.unknown()).optional(),
      artifacts: z.array(FilePart),
      reason: z.string().optional().describe('Why it failed, was canceled, rejected or needs input.'),
      code: ErrorCodeSchema.optional().describe('The error code of a failure (DEADLINE_EXCEEDED, …).'),
      leaseMs: z.int().min(0).optional().describe('How long the assignee may stay silent.'),
      leaseUntil: z.iso.datetime().optional().describe('Past it the requester may reassign.'),
      sideEffects: z.array(SideEffect),
      bindings: z.array(TaskBinding),
      budgetUsd: z.number().min(0).optional(),
      costUsd: z.number().min(0),
      createdAt: z.iso.datetime(),
      updatedAt: z.iso.datetime(),
    })
    .describe('Delegated work in a room.'),
);
export type Task = z.infer<typeof Task>;

/**
 * The data part of a `task.assigned` / `task.update` room message: one transition. The room message
 * is written by Parley after the transition was stored.
 */
export const TaskTransition = named(
  'TaskTransition',
  z
    .object({
      event: z.literal('task'),
      task: TaskId,
      from: TaskState.optional().describe('Absent on creation.'),
      to: TaskState,
      by: PrincipalId,
      revision: z.int().min(1),
      requester: PrincipalId,
      assignee: ParticipantId,
      parent: TaskId.optional(),
      goal: z.string().optional().describe('On creation.'),
      reason: z.string().optional(),
      code: ErrorCodeSchema.optional(),
      progress: TaskProgress.optional(),
      result: z.record(z.string(), z.unknown()).optional(),
    })
    .describe('A task transition, as the data part of its room message.'),
);
export type TaskTransition = z.infer<typeof TaskTransition>;

/**
 * A notice (the participant's notice room, `system` kind, `event` = `task_failed` | `task_canceled`
 * | `task_lease_expired`) telling someone up (or down) the chain what happened to a task.
 */
export const TaskNotice = named(
  'TaskNotice',
  z
    .object({
      event: z.enum(['task_failed', 'task_canceled', 'task_lease_expired']),
      task: TaskId,
      room: RoomId,
      state: TaskState,
      by: PrincipalId,
      reason: z.string(),
      code: ErrorCodeSchema.optional(),
      origin: TaskId.describe('The task where it started (the failed one; a parent for a cascade).'),
      path: z.array(TaskId).describe('From `task` up to the root of its chain.'),
      role: z
        .enum(['requester', 'ancestor', 'assignee'])
        .describe('Why this participant is told: it asked for the task, works on an ancestor, or on it.'),
    })
    .describe('What happened to a task in the chain of this participant’s work.'),
);
export type TaskNotice = z.infer<typeof TaskNotice>;

const Reason = z.string().trim().min(1).max(2000);
const TaskRef = () => z.object({ task: TaskId });

/** The tasks API (served by the rooms service process). */
export const tasksApi = {
  create: defineApi({
    service: 'tasks',
    method: 'create',
    summary:
      'Create a task in a room, assigned to a member: goal, inputs, acceptance criteria, optional deadline, parent task (the caller must be its assignee), lease and budget. Announced as a task.assigned message.',
    access: 'participant',
    request: named(
      'CreateTaskRequest',
      z.object({
        room: RoomId,
        assignee: ParticipantId,
        goal: z.string().trim().min(1).max(4000),
        inputs: z.record(z.string(), z.unknown()).default({}),
        acceptance: z.array(z.string().max(1000)).max(50).default([]),
        deadline: z.iso.datetime().optional().describe('Capped at the parent’s deadline.'),
        parent: TaskId.optional(),
        leaseMs: z
          .int()
          .min(1000)
          .max(7 * 24 * 3600_000)
          .optional()
          .describe(
            'The assignee renews it by any transition or a heartbeat; past it the requester may reassign.',
          ),
        budgetUsd: z.number().min(0).optional().describe('Cost reported under the task past it fails it.'),
      }),
    ),
    response: Task,
  }),
  get: defineApi({
    service: 'tasks',
    method: 'get',
    effect: 'read',
    summary: 'A task (its requester, assignee, a member of its room, or a service).',
    access: 'participant',
    request: named('GetTaskRequest', TaskRef()),
    response: Task,
  }),
  list: defineApi({
    service: 'tasks',
    method: 'list',
    effect: 'read',
    summary: 'Tasks the caller may read, by room, assignee, requester and state, newest first.',
    access: 'participant',
    request: named(
      'ListTasksRequest',
      z.object({
        room: RoomId.optional(),
        assignee: ParticipantId.optional(),
        requester: PrincipalId.optional(),
        state: z.array(TaskState).max(7).optional(),
        limit: z.int().min(1).max(limits.maxPageSize).default(50),
      }),
    ),
    response: named('ListTasksResponse', z.object({ tasks: z.array(Task) })),
  }),
  transition: defineApi({
    service: 'tasks',
    method: 'transition',
    summary:
      'Move a task to another state (compare-and-set; ILLEGAL_TRANSITION when the state machine forbids it, CONFLICT on a stale expectedRevision). The assignee works, asks for input, completes, fails or rejects; the requester cancels. Failure and cancel tell the chain and cancel open children.',
    access: 'participant',
    request: named(
      'TransitionTaskRequest',
      TaskRef().extend({
        to: TaskState,
        reason: Reason.optional(),
        code: ErrorCodeSchema.optional().describe('The error code of a failure.'),
        progress: TaskProgress.optional(),
        result: z.record(z.string(), z.unknown()).optional(),
        artifacts: z.array(FilePart).max(50).optional(),
        expectedRevision: z.int().min(1).optional(),
      }),
    ),
    response: Task,
  }),
  heartbeat: defineApi({
    service: 'tasks',
    method: 'heartbeat',
    summary: 'The assignee renews its lease (and may report progress) without a transition.',
    access: 'participant',
    request: named('TaskHeartbeatRequest', TaskRef().extend({ progress: TaskProgress.optional() })),
    response: Task,
  }),
  reassign: defineApi({
    service: 'tasks',
    method: 'reassign',
    summary:
      'The requester gives an open task to another member of its room once the assignee’s lease passed (CONFLICT while it holds).',
    access: 'participant',
    request: named('ReassignTaskRequest', TaskRef().extend({ assignee: ParticipantId })),
    response: Task,
  }),
  effect: defineApi({
    service: 'tasks',
    method: 'effect',
    summary:
      'The assignee records a side effect under its task by idempotency key: `begin` before running it (answers `replay` with the recorded result when the key was done before), then `done` or `error`.',
    access: 'participant',
    request: named(
      'TaskEffectRequest',
      TaskRef().extend({
        key: z.string().regex(/^[A-Za-z0-9_:.-]{1,200}$/),
        phase: z.enum(['begin', 'done', 'error']),
        tool: z.string().min(1).max(200),
        toolCall: z.string().max(64).optional(),
        argsDigest: z.string().max(100),
        result: z.unknown().optional(),
        error: z.string().max(500).optional(),
        compensable: z.boolean().default(false),
      }),
    ),
    response: named(
      'TaskEffectResponse',
      z.object({
        effect: SideEffect,
        replay: z.boolean().describe('The key was done before: `effect.result` is what it returned.'),
      }),
    ),
  }),
  compensation: defineApi({
    service: 'tasks',
    method: 'compensation',
    summary:
      'The assignee of a failed or canceled task claims a side effect’s compensation (`begin`: `proceed` is false when it was claimed before, so it runs once) and reports its outcome (`done`, `failed`). Audited.',
    access: 'participant',
    request: named(
      'TaskCompensationRequest',
      TaskRef().extend({
        key: z.string().regex(/^[A-Za-z0-9_:.-]{1,200}$/),
        phase: z.enum(['begin', 'done', 'failed']),
        error: z.string().max(500).optional(),
      }),
    ),
    response: named('TaskCompensationResponse', z.object({ effect: SideEffect, proceed: z.boolean() })),
  }),
  bind: defineApi({
    service: 'tasks',
    method: 'bind',
    summary:
      'Attach a runtime’s ids to a task (the assignee or requester): a restarted runtime finds its task again with `findBinding`.',
    access: 'participant',
    request: named(
      'BindTaskRequest',
      TaskRef().extend({ binding: TaskBinding.omit({ participant: true, at: true }) }),
    ),
    response: Task,
  }),
  findBinding: defineApi({
    service: 'tasks',
    method: 'findBinding',
    effect: 'read',
    summary: 'The tasks a binding id of the caller is attached to, newest first.',
    access: 'participant',
    request: named('FindBindingRequest', z.object({ id: TaskBinding.shape.id })),
    response: named('FindBindingResponse', z.object({ tasks: z.array(Task) })),
  }),
  saveCheckpoint: defineApi({
    service: 'tasks',
    method: 'saveCheckpoint',
    summary:
      'Store a runtime’s checkpoint of one of its threads (e.g. a LangGraph thread), so a restarted process resumes it: one opaque blob per (caller, thread), compare-and-set on `revision`.',
    access: 'participant',
    request: named(
      'SaveCheckpointRequest',
      z.object({
        thread: z.string().regex(/^[A-Za-z0-9_:.-]{1,128}$/),
        data: z
          .string()
          .max(60_000)
          .describe('Opaque (base64 or JSON), at most 60 kB (the request limit is 64 kB).'),
        revision: z.int().min(0).describe('The revision loaded (0 = none yet); CONFLICT when it moved on.'),
      }),
    ),
    response: named('SaveCheckpointResponse', z.object({ revision: z.int().min(1) })),
  }),
  loadCheckpoint: defineApi({
    service: 'tasks',
    method: 'loadCheckpoint',
    effect: 'read',
    summary: 'The caller’s stored checkpoint of a thread (revision 0 and no data when there is none).',
    access: 'participant',
    request: named(
      'LoadCheckpointRequest',
      z.object({ thread: z.string().regex(/^[A-Za-z0-9_:.-]{1,128}$/) }),
    ),
    response: named(
      'LoadCheckpointResponse',
      z.object({ data: z.string().optional(), revision: z.int().min(0) }),
    ),
  }),
  usage: defineApi({
    service: 'tasks',
    method: 'usage',
    summary:
      'Services only (governance): add reported cost to a task; over its budget the task fails with BUDGET_EXCEEDED (cascading).',
    access: 'service',
    request: named(
      'TaskUsageRequest',
      TaskRef().extend({
        costUsd: z.number().min(0),
        report: z.string().max(200),
        reporter: ParticipantId.describe('Who reported it: the task’s assignee or requester.'),
      }),
    ),
    response: named('TaskUsageResponse', z.object({ costUsd: z.number(), exceeded: z.boolean() })),
  }),
} as const;
