/**
 * The LangGraph.js adapter (`@parley/sdk/langgraph`, needs `@langchain/langgraph`): a compiled
 * graph works as a Parley participant. A task assigned to the agent starts the graph's thread (the
 * thread id is the task id, bound to the task with the run id), an `interrupt()` moves the task to
 * `input_required` with the interrupt's value as the question, the requester's answer (a message
 * in the room carrying the task id) resumes it with `Command({ resume })`, and the final state
 * completes the task; a throw fails it.
 *
 * The checkpointer keeps each thread's checkpoints in Parley (`tasks.saveCheckpoint`, the
 * `parley_tasks` bucket), so a process killed mid-thread is replaced by one that resumes where the
 * last checkpoint was: nodes that finished do not run again.
 */

import { Command, MemorySaver } from '@langchain/langgraph';
import { nuid } from '@nats-io/transport-node';
import { isFinalTaskState, type Task, tasksApi } from '@parley/contracts';
import type { Agent } from './agent.js';
import type { Delivery } from './delivery.js';

type RunnableConfig = Parameters<MemorySaver['getTuple']>[0];
type ListOptions = Parameters<MemorySaver['list']>[1];

/** Checkpoints kept per thread and namespace (the newest; older ones are history, not needed to resume). */
const KEEP = 3;

function encode(value: unknown): unknown {
  if (value instanceof Uint8Array) return { $b64: Buffer.from(value).toString('base64') };
  if (Array.isArray(value)) return value.map(encode);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, encode(v)]));
  }
  return value;
}

function decode(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(decode);
  if (value && typeof value === 'object') {
    const b = (value as { $b64?: unknown }).$b64;
    if (typeof b === 'string') return new Uint8Array(Buffer.from(b, 'base64'));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, decode(v)]));
  }
  return value;
}

/**
 * A LangGraph checkpointer whose threads live in Parley: the in-memory saver, loaded from
 * `tasks.loadCheckpoint` on a thread's first use and written back after every checkpoint and
 * write (compare-and-set on the stored revision).
 */
export class ParleyCheckpointer extends MemorySaver {
  readonly #agent: Agent;
  readonly #revisions = new Map<string, number>();
  readonly #loading = new Map<string, Promise<void>>();
  #saving: Promise<void> = Promise.resolve();

  constructor(agent: Agent) {
    super();
    this.#agent = agent;
  }

  #load(thread: string | undefined): Promise<void> {
    if (thread === undefined) return Promise.resolve();
    let p = this.#loading.get(thread);
    if (!p) {
      p = (async () => {
        const r = await this.#agent.call(tasksApi.loadCheckpoint, { thread });
        this.#revisions.set(thread, r.revision);
        if (!r.data) return;
        const saved = decode(JSON.parse(r.data)) as {
          storage: MemorySaver['storage'][string];
          writes: MemorySaver['writes'];
        };
        this.storage[thread] = saved.storage;
        Object.assign(this.writes, saved.writes);
      })();
      this.#loading.set(thread, p);
      p.catch(() => this.#loading.delete(thread));
    }
    return p;
  }

  #save(thread: string): Promise<void> {
    const run = async () => {
      const byNs = this.storage[thread] ?? {};
      const dropped = new Set<string>();
      for (const [ns, checkpoints] of Object.entries(byNs)) {
        const ids = Object.keys(checkpoints).sort().reverse();
        for (const id of ids.slice(KEEP)) {
          delete checkpoints[id];
          dropped.add(JSON.stringify([ns, id]));
        }
      }
      // Writes can arrive before their checkpoint is put (LangGraph persists checkpoints
      // asynchronously): only the writes of dropped checkpoints go.
      const writes: MemorySaver['writes'] = {};
      for (const [key, w] of Object.entries(this.writes)) {
        const [t, ns, id] = JSON.parse(key) as [string, string | null, string];
        if (t !== thread) continue;
        if (dropped.has(JSON.stringify([ns ?? '', id]))) delete this.writes[key];
        else writes[key] = w;
      }
      const data = JSON.stringify(encode({ storage: byNs, writes }));
      const r = await this.#agent.call(tasksApi.saveCheckpoint, {
        thread,
        data,
        revision: this.#revisions.get(thread) ?? 0,
      });
      this.#revisions.set(thread, r.revision);
    };
    // One save at a time, in order: each carries the revision the previous one produced.
    this.#saving = this.#saving.then(run, run);
    return this.#saving;
  }

  override async getTuple(config: RunnableConfig) {
    await this.#load(config.configurable?.thread_id);
    return super.getTuple(config);
  }

  override async *list(config: RunnableConfig, options?: ListOptions) {
    await this.#load(config.configurable?.thread_id);
    yield* super.list(config, options);
  }

  override async put(...args: Parameters<MemorySaver['put']>) {
    const thread = args[0].configurable?.thread_id as string;
    await this.#load(thread);
    const r = await super.put(...args);
    await this.#save(thread);
    return r;
  }

  override async putWrites(...args: Parameters<MemorySaver['putWrites']>) {
    const thread = args[0].configurable?.thread_id as string;
    await this.#load(thread);
    await super.putWrites(...args);
    await this.#save(thread);
  }
}

/** What the adapter needs of a compiled graph (`StateGraph(...).compile({ checkpointer })`). */
export interface LangGraphRunnable {
  invoke(
    input: unknown,
    config: { configurable: { thread_id: string; run_id?: string }; durability?: 'sync' | 'async' | 'exit' },
  ): Promise<unknown>;
  getState(config: { configurable: { thread_id: string } }): Promise<{
    values: unknown;
    next: readonly string[];
    tasks: readonly { interrupts?: readonly { value?: unknown }[] }[];
  }>;
}

/** Options of {@link serveLangGraph}. */
export interface LangGraphParticipantOptions {
  agent: Agent;
  /** Compiles the graph with the checkpointer it must use. */
  graph: (checkpointer: ParleyCheckpointer) => LangGraphRunnable;
  /** The graph's input for a new task. @default the task's inputs */
  input?: (task: Task) => unknown;
  /** The task's result from the final state. @default the state's values */
  output?: (values: unknown) => Record<string, unknown>;
  /** The question an interrupt asks. @default its value as text (JSON unless a string) */
  question?: (value: unknown) => string;
  /** What an answer resumes the graph with. @default the message's text */
  answer?: (delivery: Delivery) => unknown;
  /** Something went wrong outside a task's own failure (a lost call, a bad state). */
  onError?: (err: unknown, task?: string) => void;
}

/** A graph serving as a participant. */
export interface LangGraphParticipant {
  checkpointer: ParleyCheckpointer;
  /** Resolves once open tasks of an earlier process were picked up and deliveries flow. */
  ready: Promise<void>;
}

const textOf = (d: Delivery) =>
  d.message.parts
    .map((p) => (p.type === 'text' ? p.text : ''))
    .join('')
    .trim();

/** The binding id of a task's LangGraph thread. */
export const langGraphBindingId = (thread: string) => `langgraph:${thread}`;

/**
 * Serves `graph` as the agent: tasks assigned to it run as threads, interrupts ask for input,
 * answers resume, results complete. Open threads of an earlier process of this agent (found by
 * their bindings) resume at once.
 */
export function serveLangGraph(o: LangGraphParticipantOptions): LangGraphParticipant {
  const { agent } = o;
  const checkpointer = new ParleyCheckpointer(agent);
  const graph = o.graph(checkpointer);
  const running = new Map<string, Promise<void>>();
  const question =
    o.question ?? ((v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v ?? 'input needed')));
  const onError = o.onError ?? (() => undefined);

  async function step(task: Task, input: unknown): Promise<void> {
    const thread = task.id;
    const run = nuid.next();
    await agent.bindings.attach(task.id, {
      id: langGraphBindingId(thread),
      runtime: 'langgraph',
      ids: { thread_id: thread, run_id: run },
    });
    if (task.state !== 'working') await agent.tasks.start(task.id);
    const config = { configurable: { thread_id: thread } };
    try {
      // Each step's checkpoint is stored before the next step starts: a kill re-runs at most the
      // step that was under way.
      await graph.invoke(input, { configurable: { thread_id: thread, run_id: run }, durability: 'sync' });
    } catch (err) {
      await agent.tasks.fail(
        task.id,
        `graph failed: ${(err as Error)?.message ?? String(err)}`.slice(0, 2000),
      );
      return;
    }
    const state = await graph.getState(config);
    const interrupt = state.tasks.flatMap((t) => t.interrupts ?? [])[0];
    if (interrupt) {
      await agent.tasks.needInput(task.id, question(interrupt.value).slice(0, 2000));
      return;
    }
    if (state.next.length === 0) {
      await agent.tasks.complete(
        task.id,
        o.output ? o.output(state.values) : (state.values as Record<string, unknown>),
      );
    }
  }

  /** One step of a task at a time: a second trigger waits for the first. */
  function enqueue(id: string, fn: () => Promise<void>): Promise<void> {
    const prev = running.get(id) ?? Promise.resolve();
    const next = prev.then(fn, fn).catch((err) => onError(err, id));
    running.set(id, next);
    void next.finally(() => {
      if (running.get(id) === next) running.delete(id);
    });
    return next;
  }

  agent.tasks.onAssigned((task) =>
    enqueue(task.id, async () => {
      const t = await agent.tasks.get(task.id);
      // A redelivered assignment of a thread already under way is not a new start.
      if (t.state !== 'submitted') return;
      await step(t, o.input ? o.input(t) : t.inputs);
    }),
  );
  agent.on('message', async (d) => {
    const id = d.message.task;
    if (!id || d.message.kind !== 'message' || d.message.sender.id === agent.id) return;
    await enqueue(id, async () => {
      const t = await agent.tasks.get(id).catch(() => undefined);
      if (!t || t.assignee !== agent.id || t.state !== 'input_required') return;
      if (d.message.sender.id !== t.requester) return;
      await agent.tasks.start(t.id);
      await step({ ...t, state: 'working' }, new Command({ resume: o.answer ? o.answer(d) : textOf(d) }));
    });
  });

  const ready = (async () => {
    await agent.listening;
    // Threads an earlier process of this agent left under way: carry on from their checkpoints.
    const open = await agent.tasks.list({ assignee: agent.id, state: ['working'] });
    for (const t of open) {
      if (!t.bindings.some((b) => b.participant === agent.id && b.id === langGraphBindingId(t.id))) continue;
      if (isFinalTaskState(t.state)) continue;
      void enqueue(t.id, () => step(t, null));
    }
  })();
  ready.catch((err) => onError(err));
  return { checkpointer, ready };
}
