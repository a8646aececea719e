/**
 * Tasks: `agent.tasks.create(room, { assignee, goal, deadline, parent })` delegates work in a room;
 * the assignee moves it `submitted → working → input_required | completed | failed | rejected`, the
 * requester may cancel it. Failures and cancels travel up the chain as `task_failed` /
 * `task_canceled` deliveries (`agent.on('task_failed', d => d.taskNotice)`), and cancel open
 * children. Side effects recorded with `agent.tools.call(…, { task, idempotencyKey, compensate })`
 * are compensated here, in reverse order and once, when the task fails or is canceled.
 */
import {
  type ApiRequest,
  isParleyError,
  type Task,
  type TaskNotice,
  type TaskState,
  TaskTransition,
  tasksApi,
} from '@parley/contracts';
import type { Agent } from './agent.js';
import type { Delivery } from './delivery.js';

/** Options of {@link Tasks.create}. */
export interface CreateTaskOptions {
  assignee: string;
  goal: string;
  inputs?: Record<string, unknown>;
  acceptance?: string[];
  /** When the task fails with DEADLINE_EXCEEDED: a date, an ISO string, or milliseconds from now. */
  deadline?: Date | string | number;
  /** The task this one is part of (the caller must be its assignee). */
  parent?: string;
  /** How long the assignee may stay silent before the requester may reassign, in ms. */
  leaseMs?: number;
  /** Cost reported under the task past this fails it with BUDGET_EXCEEDED. */
  budgetUsd?: number;
}

/** A compensating step: gets what the side effect returned. */
export type Compensation = (result: unknown) => unknown | Promise<unknown>;

/** What a compensation run did, per side effect. */
export interface CompensationOutcome {
  key: string;
  tool: string;
  outcome: 'done' | 'failed' | 'skipped' | 'claimed_elsewhere';
  error?: string;
}

/** Transition options of the assignee's and requester's calls. */
type Extra = Omit<ApiRequest<typeof tasksApi.transition>, 'task' | 'to'>;

/** The tasks of a participant: `agent.tasks`. */
export class Tasks {
  readonly #agent: Agent;
  /** Compensations of side effects this process made, by `<task>|<key>`. */
  readonly #inline = new Map<string, Compensation>();
  /** Compensations by tool name: they survive a restart (they get the recorded result). */
  readonly #byTool = new Map<string, Compensation>();
  readonly #running = new Map<string, Promise<CompensationOutcome[]>>();
  #watching = false;

  /** @internal created by {@link Agent} */
  constructor(agent: Agent) {
    this.#agent = agent;
  }

  /** Creates a task in `room`, assigned to a member of it. */
  create(room: string, o: CreateTaskOptions): Promise<Task> {
    const deadline =
      o.deadline === undefined
        ? undefined
        : typeof o.deadline === 'number'
          ? new Date(Date.now() + o.deadline).toISOString()
          : new Date(o.deadline).toISOString();
    return this.#agent.call(tasksApi.create, {
      room,
      assignee: o.assignee,
      goal: o.goal,
      ...(o.inputs ? { inputs: o.inputs } : {}),
      ...(o.acceptance ? { acceptance: o.acceptance } : {}),
      ...(deadline ? { deadline } : {}),
      ...(o.parent ? { parent: o.parent } : {}),
      ...(o.leaseMs ? { leaseMs: o.leaseMs } : {}),
      ...(o.budgetUsd !== undefined ? { budgetUsd: o.budgetUsd } : {}),
    });
  }

  /** A task with its side effects, compensations and bindings. */
  get(id: string): Promise<Task> {
    return this.#agent.call(tasksApi.get, { task: id });
  }

  /** Tasks the caller may read, newest first. */
  async list(filter: ApiRequest<typeof tasksApi.list> = {}): Promise<Task[]> {
    return (await this.#agent.call(tasksApi.list, filter)).tasks;
  }

  /** Moves a task to `to` (see the state machine in the contracts: `taskTransitions`). */
  transition(id: string, to: TaskState, extra: Extra = {}): Promise<Task> {
    return this.#agent.call(tasksApi.transition, { task: id, to, ...extra });
  }

  /** The assignee starts (or resumes) work. */
  start(id: string, progress?: { text?: string; percent?: number }): Promise<Task> {
    return this.transition(id, 'working', progress ? { progress } : {});
  }

  /** The assignee renews its lease, optionally with progress. */
  heartbeat(id: string, progress?: { text?: string; percent?: number }): Promise<Task> {
    return this.#agent.call(tasksApi.heartbeat, { task: id, ...(progress ? { progress } : {}) });
  }

  /** The assignee needs an answer before it can go on. */
  needInput(id: string, question: string): Promise<Task> {
    return this.transition(id, 'input_required', { reason: question });
  }

  /** The assignee is done. */
  complete(id: string, result?: Record<string, unknown>, extra: Omit<Extra, 'result'> = {}): Promise<Task> {
    return this.transition(id, 'completed', { ...extra, ...(result ? { result } : {}) });
  }

  /**
   * The assignee gives up: the task fails with `reason` (and `code`), the chain is told, open
   * children are canceled, and the side effects this participant recorded are compensated.
   */
  async fail(id: string, reason: string, extra: Omit<Extra, 'reason'> = {}): Promise<Task> {
    const task = await this.transition(id, 'failed', { ...extra, reason });
    await this.compensate(id);
    return task;
  }

  /** The assignee declines the task. */
  reject(id: string, reason: string): Promise<Task> {
    return this.transition(id, 'rejected', { reason });
  }

  /** The requester cancels the task (and with it its open children). */
  cancel(id: string, reason: string): Promise<Task> {
    return this.transition(id, 'canceled', { reason });
  }

  /** The requester hands a task whose assignee's lease passed to another member. */
  reassign(id: string, assignee: string): Promise<Task> {
    return this.#agent.call(tasksApi.reassign, { task: id, assignee });
  }

  /**
   * Handles tasks assigned to this participant (`task.assigned` messages in its rooms). The handler
   * gets the task as it is now.
   */
  onAssigned(handler: (task: Task, delivery: Delivery) => unknown): this {
    this.#agent.on('message', async (d) => {
      if (d.message.kind !== 'task.assigned') return;
      const t = transitionOf(d);
      if (!t || t.assignee !== this.#agent.id) return;
      await handler(await this.get(t.task), d);
    });
    return this;
  }

  /**
   * Every transition of tasks in this participant's rooms that matches `filter` (its room messages:
   * ordered, durable, backfilled after a gap).
   */
  watch(
    filter: { room?: string; task?: string; assignee?: string; requester?: string; state?: TaskState[] },
    handler: (transition: TaskTransition, delivery: Delivery) => unknown,
  ): this {
    this.#agent.on('message', async (d) => {
      const t = transitionOf(d);
      if (!t) return;
      if (filter.room && d.room !== filter.room) return;
      if (filter.task && t.task !== filter.task) return;
      if (filter.assignee && t.assignee !== filter.assignee) return;
      if (filter.requester && t.requester !== filter.requester) return;
      if (filter.state && !filter.state.includes(t.to)) return;
      await handler(t, d);
    });
    return this;
  }

  /**
   * A compensation for every side effect of `tool`, kept across restarts of this process (register
   * it at start-up): it gets the recorded result. An inline `compensate` of a call takes precedence.
   */
  compensator(tool: string, fn: Compensation): this {
    this.#byTool.set(tool, fn);
    this.#watchEnds();
    return this;
  }

  /** @internal tools.call registered a compensation for a side effect under `task`. */
  registerCompensation(task: string, key: string, fn: Compensation): void {
    this.#inline.set(`${task}|${key}`, fn);
    this.#watchEnds();
  }

  /**
   * Runs the compensations of a failed or canceled task's side effects recorded by this
   * participant, newest first, each at most once across every process (claimed in the task first).
   * Called by {@link Tasks.fail} and when a `task_failed` / `task_canceled` notice says someone
   * else ended this participant's task.
   */
  compensate(id: string): Promise<CompensationOutcome[]> {
    const running = this.#running.get(id);
    if (running) return running;
    const p = this.#compensate(id).finally(() => this.#running.delete(id));
    this.#running.set(id, p);
    return p;
  }

  async #compensate(id: string): Promise<CompensationOutcome[]> {
    const task = await this.get(id);
    const out: CompensationOutcome[] = [];
    const effects = task.sideEffects
      .filter((e) => e.by === this.#agent.id && e.state === 'done' && !e.compensation)
      .reverse();
    for (const e of effects) {
      const fn = this.#inline.get(`${id}|${e.key}`) ?? this.#byTool.get(e.tool);
      if (!fn) {
        if (e.compensable) out.push({ key: e.key, tool: e.tool, outcome: 'skipped' });
        continue;
      }
      const claim = await this.#agent.call(tasksApi.compensation, { task: id, key: e.key, phase: 'begin' });
      if (!claim.proceed) {
        out.push({ key: e.key, tool: e.tool, outcome: 'claimed_elsewhere' });
        continue;
      }
      try {
        await fn(e.result);
        await this.#agent.call(tasksApi.compensation, { task: id, key: e.key, phase: 'done' });
        out.push({ key: e.key, tool: e.tool, outcome: 'done' });
      } catch (err) {
        const error = (
          isParleyError(err) ? `${err.code}: ${err.message}` : String((err as Error)?.message ?? err)
        ).slice(0, 500);
        await this.#agent.call(tasksApi.compensation, { task: id, key: e.key, phase: 'failed', error });
        out.push({ key: e.key, tool: e.tool, outcome: 'failed', error });
      }
      this.#inline.delete(`${id}|${e.key}`);
    }
    return out;
  }

  /** Compensates this participant's tasks that someone else ended (cancel from above, deadline, budget). */
  #watchEnds(): void {
    if (this.#watching) return;
    this.#watching = true;
    const onEnd = async (d: Delivery) => {
      const n = d.taskNotice;
      if (n?.role === 'assignee') await this.compensate(n.task);
    };
    this.#agent.on('task_failed', onEnd);
    this.#agent.on('task_canceled', onEnd);
  }
}

/** The task transition a room message announces, if it is one. */
export function transitionOf(d: Delivery): TaskTransition | undefined {
  if (d.message.kind !== 'task.assigned' && d.message.kind !== 'task.update') return undefined;
  // Parley writes transitions as a service; a participant's own `task.update` message is not one.
  if (d.message.sender.kind !== 'service') return undefined;
  const data = d.message.parts.find((p) => p.type === 'data')?.data;
  const parsed = TaskTransition.safeParse(data);
  return parsed.success ? parsed.data : undefined;
}

export type { Task, TaskNotice };
