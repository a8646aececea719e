/**
 * Runtime bindings: `agent.bindings.attach(task, { id, runtime, ids })` ties a runtime's own ids (a
 * LangGraph `thread_id` and `run_id`, a Claude Code or Codex session, an execution id) to a task, so
 * `parley task show` lists every runtime working on it and a restarted runtime finds its task
 * again with `agent.bindings.find(id)`. MCP sessions keep their own bindings (`sessions()`).
 */
import { bindingsApi, type RuntimeBinding, type Task, tasksApi } from '@parley/contracts';
import type { Agent } from './agent.js';

/** A binding to attach: a stable id of the runtime's, the runtime's name, and its ids. */
export interface TaskBindingInput {
  /** Stable across the runtime's restarts, e.g. `langgraph:<thread_id>`. */
  id: string;
  /** e.g. `langgraph`, `claude-code`, `codex`, `exec`. */
  runtime: string;
  /** e.g. `{ thread_id, run_id }`, `{ session_id }`. */
  ids: Record<string, string>;
}

/** A participant's runtime bindings: `agent.bindings`. */
export class Bindings {
  readonly #agent: Agent;

  /** @internal created by {@link Agent} */
  constructor(agent: Agent) {
    this.#agent = agent;
  }

  /** Attaches (or updates) this participant's binding `binding.id` on `task`. */
  attach(task: string, binding: TaskBindingInput): Promise<Task> {
    return this.#agent.call(tasksApi.bind, { task, binding });
  }

  /** The tasks this participant attached binding `id` to, newest first. */
  async find(id: string): Promise<Task[]> {
    return (await this.#agent.call(tasksApi.findBinding, { id })).tasks;
  }

  /** This participant's MCP session bindings (rooms taken part in, positions). */
  async sessions(): Promise<RuntimeBinding[]> {
    return (await this.#agent.call(bindingsApi.list, {})).bindings;
  }
}
