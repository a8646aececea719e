/**
 * The tasks API, served inside the rooms service process (see "Tasks" in docs/architecture.md): a
 * task's state is one `parley_tasks` entry changed only by compare-and-set; every transition is
 * then announced in the task's room (a `task.assigned` / `task.update` entry with a fixed
 * de-duplication id), audited (domain `task`), and — for a failure or a cancel — told to everyone up
 * the chain (notices) and cascaded down to the open children.
 *
 * Deadlines and leases are watched by every replica from one KV watch; compare-and-set makes the
 * replicas agree on who moved a task (the others see it final and do nothing).
 */
import { createHash } from 'node:crypto';
import type { JetStreamClient } from '@nats-io/jetstream';
import type { KV, KvEntry } from '@nats-io/kv';
import {
  type ApiParsedRequest,
  type ApiResponse,
  activeTraceIds,
  canTransition,
  type ErrorCode,
  isFinalTaskState,
  isParticipantId,
  isServiceId,
  newId,
  ParleyError,
  type RoomMessage,
  type roomsApi,
  type SideEffect,
  type Task,
  type TaskNotice,
  type TaskState,
  type TaskTransition,
  type tasksApi,
  taskTransitions,
} from '@parley/contracts';
import { appendAudit, isKvConflict, type KvWatch, type Logger, publishEvent, watchKv } from '@parley/kit';
import { appendEntry } from '../room-log.js';
import { keys, type RoomRecord, readEntry } from '../room-store.js';
import { ALL_TASKS, createTask, readTask, type TaskRecord, updateTask, withRevision } from './store.js';

type Req<M extends keyof typeof tasksApi> = ApiParsedRequest<(typeof tasksApi)[M]>;
type Res<M extends keyof typeof tasksApi> = ApiResponse<(typeof tasksApi)[M]>;

/** Sends a notice to a participant's notice room (the rooms service's `notify`). */
export type Notify = (req: ApiParsedRequest<typeof roomsApi.notify>, caller: string) => Promise<unknown>;

/** What the tasks module needs. */
export interface TasksDeps {
  js: JetStreamClient;
  /** `parley_tasks` */
  kv: KV;
  /** `parley_rooms` (room records: members, partition) */
  rooms: KV;
  notify: Notify;
  log: Logger;
  /** How often deadlines and leases are checked. */
  sweepMs: number;
  /** Ancestors walked at most (a chain is also capped by the hop limit of its messages). */
  maxDepth?: number;
}

/** The actor Parley itself uses for transitions nobody asked for (deadline, cascade, budget). */
const SELF = 'svc_rooms';

/** A runtime checkpoint key: per caller, the thread hashed (any thread id is a safe key then). */
function checkpointKey(caller: string, thread: string): string {
  return `ckpt.${caller}.${createHash('sha256').update(thread).digest('hex').slice(0, 40)}`;
}

/** Most side effects one task records. */
const MAX_SIDE_EFFECTS = 200;

/** The tasks module: handlers plus the deadline/lease sweeper. */
export function createTasks(deps: TasksDeps) {
  const { kv, js, log } = deps;
  const maxDepth = deps.maxDepth ?? 32;
  /** Every task this replica knows of (from the watch): listings, deadlines, leases. */
  const view = new Map<string, Task>();
  const leaseTold = new Set<string>();
  let watch: KvWatch | undefined;
  let timer: NodeJS.Timeout | undefined;
  let sweeping = false;

  async function roomOf(id: string): Promise<RoomRecord> {
    const r = await readEntry<RoomRecord>(deps.rooms, keys.room(id));
    if (!r) throw new ParleyError('NOT_FOUND', `room ${id} does not exist`);
    return r.value;
  }

  async function ancestors(t: TaskRecord): Promise<TaskRecord[]> {
    const out: TaskRecord[] = [];
    let next = t.parent;
    while (next && out.length < maxDepth) {
      const p = await readTask(kv, next).catch(() => undefined);
      if (!p) break;
      out.push(p.record);
      next = p.record.parent;
    }
    return out;
  }

  /** Whether `caller` may read `t`: its requester, assignee, a room member, someone up its chain, a service. */
  async function mayRead(t: TaskRecord, caller: string): Promise<boolean> {
    if (isServiceId(caller) || t.requester === caller || t.assignee === caller) return true;
    const room = await roomOf(t.room).catch(() => undefined);
    if (room?.members[caller]) return true;
    return (await ancestors(t)).some((a) => a.requester === caller || a.assignee === caller);
  }

  async function requireReadable(
    id: string,
    caller: string,
  ): Promise<{ record: TaskRecord; revision: number }> {
    const found = await readTask(kv, id);
    // NOT_FOUND rather than PERMISSION_DENIED: a task id says nothing to whoever may not read it.
    if (!(await mayRead(found.record, caller)))
      throw new ParleyError('NOT_FOUND', `task ${id} does not exist`);
    return found;
  }

  const textOf = (t: TaskRecord, from: TaskState | undefined, by: string) =>
    from === undefined
      ? `task ${t.id} for ${t.assignee}: ${t.goal}`
      : `task ${t.id}: ${from} → ${t.state} by ${by}${t.reason ? ` (${t.code ? `${t.code}: ` : ''}${t.reason})` : ''}`;

  /** The room message and audit record of a transition. Idempotent per revision. */
  async function announce(
    t: TaskRecord,
    revision: number,
    from: TaskState | undefined,
    by: string,
  ): Promise<void> {
    const transition: TaskTransition = {
      event: 'task',
      task: t.id,
      ...(from ? { from } : {}),
      to: t.state,
      by,
      revision,
      requester: t.requester,
      assignee: t.assignee,
      ...(t.parent ? { parent: t.parent } : {}),
      ...(from === undefined ? { goal: t.goal } : {}),
      ...(t.reason && from !== undefined ? { reason: t.reason } : {}),
      ...(t.code ? { code: t.code } : {}),
      ...(t.progress ? { progress: t.progress } : {}),
      ...(t.result && t.state === 'completed' ? { result: t.result } : {}),
    };
    const trace = activeTraceIds();
    const message: RoomMessage = {
      id: newId('message'),
      room: t.room,
      // Written by Parley, never by the actor (who is in the data part): a participant can send a
      // `task.update` message of its own, but not one from a service.
      sender: { id: SELF, kind: 'service', name: 'tasks' },
      kind: from === undefined ? 'task.assigned' : 'task.update',
      parts: [
        { type: 'text', text: textOf(t, from, by) },
        { type: 'data', data: transition, mediaType: 'application/vnd.parley.task+json' },
      ],
      mentions: [...new Set([t.assignee, t.requester].filter((p) => p !== by && isParticipantId(p)))],
      hop: 0,
      task: t.id,
      sentAt: new Date().toISOString(),
    };
    try {
      const room = await roomOf(t.room);
      const { seq } = await appendEntry(js, room, message, `task:${t.id}:${revision}`);
      await appendAudit(js, {
        domain: 'task',
        action: from === undefined ? 'create' : t.state,
        actor: by,
        target: t.id,
        room: t.room,
        message: message.id,
        ...(trace ? { traceId: trace.traceId } : {}),
        data: {
          ...(from ? { from } : {}),
          to: t.state,
          revision,
          seq,
          requester: t.requester,
          assignee: t.assignee,
          ...(t.parent ? { parent: t.parent } : {}),
          ...(t.reason ? { reason: t.reason } : {}),
          ...(t.code ? { code: t.code } : {}),
        },
      });
      await publishEvent(js, 'tasks', 'transition', {
        id: `task-${t.id}-${revision}`,
        actor: by,
        subject: t.id,
        data: transition,
      });
    } catch (err) {
      // The transition is stored; the announcement is what a retry of the sweep repairs (see the note on it).
      log.warn({ err, task: t.id, revision }, 'task transition not announced');
    }
  }

  /** Tells the chain of a failed or canceled task, and cancels its open children. */
  async function travel(t: TaskRecord, by: string, cascade?: { origin: string }): Promise<void> {
    const up = await ancestors(t);
    const path = [t.id, ...up.map((a) => a.id)];
    const told = new Map<string, TaskNotice['role']>();
    if (!cascade) {
      told.set(t.requester, 'requester');
      for (const a of up) {
        if (!told.has(a.assignee)) told.set(a.assignee, 'ancestor');
        if (!told.has(a.requester)) told.set(a.requester, 'ancestor');
      }
    }
    // The assignee is told when someone else ended its task: it stops, and compensates.
    if (!told.has(t.assignee)) told.set(t.assignee, 'assignee');
    told.delete(by);
    const event = t.state === 'failed' ? 'task_failed' : 'task_canceled';
    const reason = t.reason ?? t.state;
    await Promise.all(
      [...told].map(async ([to, role]) => {
        if (!isParticipantId(to)) return;
        const notice: TaskNotice = {
          event,
          task: t.id,
          room: t.room,
          state: t.state,
          by,
          reason,
          ...(t.code ? { code: t.code } : {}),
          origin: cascade?.origin ?? t.id,
          path,
          role,
        };
        await deps
          .notify(
            {
              to,
              text: `task ${t.id} ${t.state}${t.code ? ` (${t.code})` : ''}: ${reason}`,
              data: notice,
              key: `task:${t.id}:${t.state}:${to}`,
            },
            SELF,
          )
          .catch((err) => log.warn({ err, task: t.id, to }, 'task notice not sent'));
      }),
    );
    for (const child of t.children) {
      await transition(child, 'canceled', SELF, {
        reason: `parent task ${t.id} ${t.state}: ${reason}`,
        ...(t.code ? { code: t.code } : {}),
        cascade: { origin: cascade?.origin ?? t.id },
      }).catch((err) => {
        if (!(err instanceof ParleyError && (err.code === 'ILLEGAL_TRANSITION' || err.code === 'NOT_FOUND')))
          log.warn({ err, task: child }, 'child task not canceled');
      });
    }
  }

  function authorizeTransition(t: TaskRecord, to: TaskState, by: string): void {
    if (isServiceId(by)) return;
    const allowed = to === 'canceled' ? t.requester === by : t.assignee === by;
    if (!allowed) {
      throw new ParleyError(
        'PERMISSION_DENIED',
        to === 'canceled'
          ? `only the requester (${t.requester}) may cancel task ${t.id}`
          : `only the assignee (${t.assignee}) may move task ${t.id} to ${to}`,
      );
    }
  }

  interface TransitionOptions {
    reason?: string | undefined;
    code?: ErrorCode | undefined;
    progress?: Task['progress'] | undefined;
    result?: Task['result'] | undefined;
    artifacts?: Task['artifacts'] | undefined;
    expectedRevision?: number | undefined;
    cascade?: { origin: string };
  }

  async function transition(id: string, to: TaskState, by: string, o: TransitionOptions = {}): Promise<Task> {
    const now = new Date();
    const { before, after, revision, changed } = await updateTask(
      kv,
      id,
      (t) => {
        authorizeTransition(t, to, by);
        // A final state reached again (a sweeper and a person at once): nothing to do.
        if (t.state === to && isFinalTaskState(to)) return undefined;
        if (!canTransition(t.state, to)) {
          throw new ParleyError('ILLEGAL_TRANSITION', `task ${id} is ${t.state}: it cannot become ${to}`, {
            details: { task: id, from: t.state, to, allowed: taskTransitions[t.state] },
          });
        }
        const next: TaskRecord = { ...t, state: to, updatedAt: now.toISOString() };
        if (o.reason !== undefined) next.reason = o.reason;
        else if (to === 'working') delete next.reason;
        if (o.code !== undefined) next.code = o.code;
        if (o.progress) next.progress = o.progress;
        if (o.result) next.result = o.result;
        if (o.artifacts) next.artifacts = o.artifacts;
        if (by === t.assignee && t.leaseMs)
          next.leaseUntil = new Date(now.getTime() + t.leaseMs).toISOString();
        return next;
      },
      o.expectedRevision !== undefined ? { expectedRevision: o.expectedRevision } : {},
    );
    if (changed) {
      await announce(after, revision, before.state, by);
      if (after.state === 'failed' || after.state === 'canceled') {
        await travel(after, by, o.cascade);
      }
    }
    return withRevision(after, revision);
  }

  /** Fails or tells about tasks past their deadline or lease. */
  async function sweep(): Promise<void> {
    if (sweeping) return;
    sweeping = true;
    try {
      const now = Date.now();
      for (const t of view.values()) {
        if (isFinalTaskState(t.state)) continue;
        if (t.deadline && Date.parse(t.deadline) <= now) {
          await transition(t.id, 'failed', SELF, {
            reason: `deadline ${t.deadline} passed`,
            code: 'DEADLINE_EXCEEDED',
          }).catch((err) => {
            if (!(err instanceof ParleyError && err.code === 'ILLEGAL_TRANSITION'))
              log.warn({ err, task: t.id }, 'deadline not applied');
          });
          continue;
        }
        const leaseKey = `${t.id}:${t.leaseUntil}`;
        if (t.leaseUntil && Date.parse(t.leaseUntil) <= now && !leaseTold.has(leaseKey)) {
          leaseTold.add(leaseKey);
          if (!isParticipantId(t.requester)) continue;
          const notice: TaskNotice = {
            event: 'task_lease_expired',
            task: t.id,
            room: t.room,
            state: t.state,
            by: SELF,
            reason: `${t.assignee} was silent past its lease (${t.leaseUntil}): you may reassign the task`,
            origin: t.id,
            path: [t.id],
            role: 'requester',
          };
          await deps
            .notify(
              { to: t.requester, text: notice.reason, data: notice, key: `task:${leaseKey}:lease` },
              SELF,
            )
            .catch((err) => log.warn({ err, task: t.id }, 'lease notice not sent'));
        }
      }
    } finally {
      sweeping = false;
    }
  }

  function onEntry(e: KvEntry): void {
    const id = e.key.slice('task.'.length);
    if (e.operation !== 'PUT' || e.length === 0) {
      view.delete(id);
      return;
    }
    view.set(id, withRevision(e.json<TaskRecord>(), e.revision));
  }

  function requireAssignee(t: TaskRecord, caller: string, what: string): void {
    if (t.assignee !== caller && !isServiceId(caller)) {
      throw new ParleyError('PERMISSION_DENIED', `only the assignee (${t.assignee}) may ${what}`);
    }
  }

  function requireOpen(t: TaskRecord): void {
    if (isFinalTaskState(t.state)) throw new ParleyError('TASK_CLOSED', `task ${t.id} is ${t.state}`);
  }

  return {
    async start(): Promise<void> {
      watch = await watchKv(kv, {
        key: ALL_TASKS,
        onEntry,
        onError: (err) => log.warn({ err }, 'task entry not read'),
      });
      await watch.initialized;
      timer = setInterval(() => {
        void sweep().catch((err) => log.warn({ err }, 'task sweep failed'));
      }, deps.sweepMs);
      timer.unref();
    },

    stop(): void {
      if (timer) clearInterval(timer);
      watch?.stop();
    },

    async create(req: Req<'create'>, caller: string): Promise<Res<'create'>> {
      const room = await roomOf(req.room);
      if (room.closed) throw new ParleyError('ROOM_CLOSED', `room ${room.id} is closed`);
      if (!room.members[caller] && !isServiceId(caller)) {
        throw new ParleyError('NOT_A_MEMBER', `${caller} is not a member of room ${room.id}`);
      }
      if (!room.members[req.assignee]) {
        throw new ParleyError(
          'NOT_A_MEMBER',
          `the assignee ${req.assignee} is not a member of room ${room.id}`,
        );
      }
      let deadline = req.deadline;
      if (req.parent) {
        const parent = await requireReadable(req.parent, caller);
        if (parent.record.assignee !== caller && !isServiceId(caller)) {
          throw new ParleyError(
            'PERMISSION_DENIED',
            `only the assignee of task ${req.parent} (${parent.record.assignee}) may delegate part of it`,
          );
        }
        requireOpen(parent.record);
        // A child never outlives its parent.
        const pd = parent.record.deadline;
        if (pd && (!deadline || Date.parse(deadline) > Date.parse(pd))) deadline = pd;
      }
      if (deadline && Date.parse(deadline) <= Date.now()) {
        throw new ParleyError('INVALID_ARGUMENT', `deadline ${deadline} has already passed`);
      }
      const now = new Date();
      const record: TaskRecord = {
        id: newId('task'),
        room: room.id,
        requester: caller,
        assignee: req.assignee,
        goal: req.goal,
        inputs: req.inputs,
        acceptance: req.acceptance,
        ...(deadline ? { deadline } : {}),
        ...(req.parent ? { parent: req.parent } : {}),
        children: [],
        state: 'submitted',
        artifacts: [],
        ...(req.leaseMs
          ? { leaseMs: req.leaseMs, leaseUntil: new Date(now.getTime() + req.leaseMs).toISOString() }
          : {}),
        sideEffects: [],
        bindings: [],
        ...(req.budgetUsd !== undefined ? { budgetUsd: req.budgetUsd } : {}),
        costUsd: 0,
        createdAt: now.toISOString(),
        updatedAt: now.toISOString(),
      };
      const revision = await createTask(kv, record);
      if (req.parent) {
        const { after } = await updateTask(kv, req.parent, (p) => ({
          ...p,
          children: [...p.children, record.id],
        }));
        // The parent ended while this child was being made: the cascade missed it, so do it here.
        if (isFinalTaskState(after.state) && after.state !== 'completed') {
          await announce(record, revision, undefined, caller);
          return transition(record.id, 'canceled', SELF, {
            reason: `parent task ${after.id} ${after.state}`,
            ...(after.code ? { code: after.code } : {}),
            cascade: { origin: after.id },
          });
        }
      }
      await announce(record, revision, undefined, caller);
      return withRevision(record, revision);
    },

    async get(req: Req<'get'>, caller: string): Promise<Res<'get'>> {
      const { record, revision } = await requireReadable(req.task, caller);
      return withRevision(record, revision);
    },

    async list(req: Req<'list'>, caller: string): Promise<Res<'list'>> {
      const candidates = [...view.values()]
        .filter(
          (t) =>
            (!req.room || t.room === req.room) &&
            (!req.assignee || t.assignee === req.assignee) &&
            (!req.requester || t.requester === req.requester) &&
            (!req.state || req.state.includes(t.state)),
        )
        .sort((a, b) => (a.id < b.id ? 1 : -1));
      const out: Task[] = [];
      for (const t of candidates) {
        if (out.length === req.limit) break;
        if (await mayRead(t, caller)) out.push(t);
      }
      return { tasks: out };
    },

    transition: (req: Req<'transition'>, caller: string): Promise<Res<'transition'>> =>
      transition(req.task, req.to, caller, req),

    async heartbeat(req: Req<'heartbeat'>, caller: string): Promise<Res<'heartbeat'>> {
      const { after, revision } = await updateTask(kv, req.task, (t) => {
        requireAssignee(t, caller, `renew the lease of task ${t.id}`);
        requireOpen(t);
        return {
          ...t,
          ...(req.progress ? { progress: req.progress } : {}),
          ...(t.leaseMs ? { leaseUntil: new Date(Date.now() + t.leaseMs).toISOString() } : {}),
          updatedAt: new Date().toISOString(),
        };
      });
      return withRevision(after, revision);
    },

    async reassign(req: Req<'reassign'>, caller: string): Promise<Res<'reassign'>> {
      const current = await readTask(kv, req.task);
      const room = await roomOf(current.record.room);
      if (!room.members[req.assignee]) {
        throw new ParleyError('NOT_A_MEMBER', `${req.assignee} is not a member of room ${room.id}`);
      }
      const { before, after, revision } = await updateTask(kv, req.task, (t) => {
        if (t.requester !== caller && !isServiceId(caller)) {
          throw new ParleyError(
            'PERMISSION_DENIED',
            `only the requester (${t.requester}) may reassign task ${t.id}`,
          );
        }
        requireOpen(t);
        if (!t.leaseUntil || Date.parse(t.leaseUntil) > Date.now()) {
          throw new ParleyError(
            'CONFLICT',
            t.leaseUntil
              ? `${t.assignee} holds task ${t.id} until ${t.leaseUntil}`
              : `task ${t.id} has no lease: cancel it and create another`,
            { details: { leaseUntil: t.leaseUntil } },
          );
        }
        const now = Date.now();
        return {
          ...t,
          assignee: req.assignee,
          state: 'submitted',
          reason: `reassigned from ${t.assignee}: its lease passed`,
          ...(t.leaseMs ? { leaseUntil: new Date(now + t.leaseMs).toISOString() } : {}),
          updatedAt: new Date(now).toISOString(),
        };
      });
      await announce(after, revision, before.state, caller);
      return withRevision(after, revision);
    },

    async effect(req: Req<'effect'>, caller: string): Promise<Res<'effect'>> {
      let replay = false;
      let found: SideEffect | undefined;
      const { after, changed } = await updateTask(kv, req.task, (t) => {
        requireAssignee(t, caller, `record side effects of task ${t.id}`);
        const existing = t.sideEffects.find((s) => s.key === req.key);
        replay = false;
        found = existing;
        if (req.phase === 'begin') {
          if (existing?.state === 'done') {
            replay = true;
            return undefined;
          }
          // Nothing new is started under a final task (a retry of a done one is answered above).
          requireOpen(t);
          if (existing) {
            // A retry after a crash or an error: it runs again under the same key.
            existing.state = 'running';
            existing.at = new Date().toISOString();
            return t;
          }
          if (t.sideEffects.length >= MAX_SIDE_EFFECTS) {
            throw new ParleyError(
              'INVALID_ARGUMENT',
              `task ${t.id} has ${MAX_SIDE_EFFECTS} side effects already`,
            );
          }
          t.sideEffects.push({
            key: req.key,
            tool: req.tool,
            ...(req.toolCall ? { toolCall: req.toolCall } : {}),
            argsDigest: req.argsDigest,
            state: 'running',
            compensable: req.compensable,
            by: caller,
            at: new Date().toISOString(),
          });
          return t;
        }
        if (!existing) throw new ParleyError('NOT_FOUND', `no side effect ${req.key} under task ${t.id}`);
        if (existing.state === 'done') {
          replay = true;
          return undefined;
        }
        existing.state = req.phase;
        existing.compensable = req.compensable;
        if (req.toolCall) existing.toolCall = req.toolCall;
        if (req.phase === 'done' && req.result !== undefined) existing.result = req.result;
        if (req.error) existing.error = req.error;
        existing.at = new Date().toISOString();
        return t;
      });
      const effect = changed ? after.sideEffects.find((s) => s.key === req.key) : found;
      if (!effect) throw new ParleyError('INTERNAL', 'side effect was not recorded');
      if (changed && req.phase !== 'begin') {
        await appendAudit(js, {
          domain: 'task',
          action: 'side_effect',
          actor: caller,
          target: req.task,
          room: after.room,
          ...(effect.toolCall ? { toolCall: effect.toolCall } : {}),
          data: { key: req.key, tool: req.tool, state: req.phase, compensable: req.compensable },
        }).catch((err) => log.warn({ err }, 'side effect not audited'));
      }
      return { effect, replay };
    },

    async compensation(req: Req<'compensation'>, caller: string): Promise<Res<'compensation'>> {
      let proceed = false;
      const { after } = await updateTask(kv, req.task, (t) => {
        requireAssignee(t, caller, `compensate side effects of task ${t.id}`);
        if (t.state !== 'failed' && t.state !== 'canceled') {
          throw new ParleyError(
            'ILLEGAL_TRANSITION',
            `task ${t.id} is ${t.state}: only a failed or canceled task is compensated`,
          );
        }
        const e = t.sideEffects.find((s) => s.key === req.key);
        if (!e) throw new ParleyError('NOT_FOUND', `no side effect ${req.key} under task ${t.id}`);
        proceed = false;
        const at = new Date().toISOString();
        if (req.phase === 'begin') {
          // Claimed once: a second process (or a redelivered notice) finds it taken.
          if (e.compensation) return undefined;
          e.compensation = { state: 'running', by: caller, at };
          proceed = true;
          return t;
        }
        if (e.compensation?.state !== 'running') {
          throw new ParleyError('ILLEGAL_TRANSITION', `compensation of ${req.key} is not running`);
        }
        e.compensation = { state: req.phase, by: caller, at, ...(req.error ? { error: req.error } : {}) };
        return t;
      });
      const effect = after.sideEffects.find((s) => s.key === req.key);
      if (!effect) throw new ParleyError('INTERNAL', 'side effect vanished');
      if (req.phase !== 'begin' || proceed) {
        await appendAudit(js, {
          domain: 'task',
          action: req.phase === 'begin' ? 'compensation_started' : `compensation_${req.phase}`,
          actor: caller,
          target: req.task,
          room: after.room,
          ...(effect.toolCall ? { toolCall: effect.toolCall } : {}),
          data: { key: req.key, tool: effect.tool, ...(req.error ? { error: req.error } : {}) },
        }).catch((err) => log.warn({ err }, 'compensation not audited'));
      }
      return { effect, proceed };
    },

    async bind(req: Req<'bind'>, caller: string): Promise<Res<'bind'>> {
      const { after, revision } = await updateTask(kv, req.task, (t) => {
        if (t.assignee !== caller && t.requester !== caller && !isServiceId(caller)) {
          throw new ParleyError(
            'PERMISSION_DENIED',
            `only the assignee or requester may bind runtimes to task ${t.id}`,
          );
        }
        const binding = { ...req.binding, participant: caller, at: new Date().toISOString() };
        const others = t.bindings.filter((b) => !(b.id === binding.id && b.participant === caller));
        if (others.length >= 32) throw new ParleyError('INVALID_ARGUMENT', `task ${t.id} has 32 bindings`);
        return { ...t, bindings: [...others, binding], updatedAt: binding.at };
      });
      return withRevision(after, revision);
    },

    async findBinding(req: Req<'findBinding'>, caller: string): Promise<Res<'findBinding'>> {
      const tasks = [...view.values()]
        .filter((t) => t.bindings.some((b) => b.id === req.id && b.participant === caller))
        .sort((a, b) => (a.id < b.id ? 1 : -1));
      return { tasks };
    },

    async saveCheckpoint(req: Req<'saveCheckpoint'>, caller: string): Promise<Res<'saveCheckpoint'>> {
      const key = checkpointKey(caller, req.thread);
      const value = new TextEncoder().encode(req.data);
      try {
        const revision =
          req.revision === 0 ? await kv.create(key, value) : await kv.update(key, value, req.revision);
        return { revision };
      } catch (err) {
        if (isKvConflict(err)) {
          throw new ParleyError(
            'CONFLICT',
            `the checkpoint of ${req.thread} moved on since revision ${req.revision}`,
          );
        }
        throw err;
      }
    },

    async loadCheckpoint(req: Req<'loadCheckpoint'>, caller: string): Promise<Res<'loadCheckpoint'>> {
      const e = await kv.get(checkpointKey(caller, req.thread));
      if (e?.operation !== 'PUT' || e.length === 0) return { revision: 0 };
      return { data: e.string(), revision: e.revision };
    },

    async usage(req: Req<'usage'>): Promise<Res<'usage'>> {
      let exceeded = false;
      const { after } = await updateTask(kv, req.task, (t) => {
        if (t.assignee !== req.reporter && t.requester !== req.reporter) {
          throw new ParleyError(
            'PERMISSION_DENIED',
            `${req.reporter} neither works on nor asked for task ${t.id}`,
          );
        }
        const costUsd = Math.round((t.costUsd + req.costUsd) * 1e9) / 1e9;
        exceeded = t.budgetUsd !== undefined && costUsd > t.budgetUsd && !isFinalTaskState(t.state);
        return { ...t, costUsd };
      });
      if (exceeded) {
        await transition(req.task, 'failed', SELF, {
          reason: `cost ${after.costUsd} USD passed the task budget of ${after.budgetUsd} USD`,
          code: 'BUDGET_EXCEEDED',
        }).catch((err) => {
          if (!(err instanceof ParleyError && err.code === 'ILLEGAL_TRANSITION')) throw err;
        });
      }
      return { costUsd: after.costUsd, exceeded };
    },
  };
}
