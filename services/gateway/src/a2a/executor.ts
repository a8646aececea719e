/**
 * The A2A executor of one Parley agent: an A2A message from a caller becomes a Parley message from
 * that caller, in the direct room between caller and agent (A2A `contextId` ↔ that room), sent over
 * the caller's own NATS connection — so consent, membership and guards refuse exactly as they would
 * over NATS. The agent answers with its ordinary SDK handler; what it sends back becomes the A2A
 * events of the task:
 *
 * - a message of kind `status` → a `TASK_STATE_WORKING` status update carrying it;
 * - a message with metadata `a2a.state = input-required` → `TASK_STATE_INPUT_REQUIRED` (the caller
 *   answers with another message on the same task);
 * - any other message → an artifact with its parts, then `TASK_STATE_COMPLETED`.
 *
 * Replies reach the bridge through the caller's inbox (pull mode on its pooled connection), one
 * reader per caller while it has tasks open ({@link CallerInboxes}).
 */
import type { Part as A2aPart, Message, Task, TaskState as TaskStateT } from '@a2a-js/sdk';
import { Role, TaskState } from '@a2a-js/sdk';
import { TaskNotCancelableError } from '@a2a-js/sdk/errors';
import {
  AgentEvent,
  type AgentExecutor,
  type ExecutionEventBus,
  type RequestContext,
} from '@a2a-js/sdk/server';
import { isParleyError, type Part, type RoomMessage, subjects } from '@parley/contracts';
import { type Logger, respondTo } from '@parley/kit';
import type { PulledDelivery } from '@parley/sdk';
import type { GatewayService } from '../service.js';
import { RemoteBus } from './replicas.js';
import { a2aKeys, callerOf, keyToken } from './store.js';

/** Metadata keys the bridge puts on (and reads from) room messages. */
export const A2A_META = { task: 'a2a.task', context: 'a2a.context', state: 'a2a.state' } as const;

/** How long a task waits for the agent's answer before it fails (the room keeps the message). */
const ANSWER_TIMEOUT_MS = 10 * 60_000;

/** Parley parts from A2A parts (raw bytes are refused: Parley parts never carry file bytes inline). */
export function partsFromA2a(parts: readonly A2aPart[]): Part[] {
  const out: Part[] = [];
  for (const p of parts) {
    const c = p.content;
    if (c?.$case === 'text') out.push({ type: 'text', text: c.value });
    else if (c?.$case === 'data')
      out.push({
        type: 'data',
        data: (c.value ?? {}) as Record<string, unknown>,
        mediaType: p.mediaType || 'application/json',
      });
    else if (c?.$case === 'url')
      out.push({
        type: 'file',
        name: p.filename || 'file',
        url: c.value,
        ...(p.mediaType ? { mediaType: p.mediaType } : {}),
      });
  }
  return out;
}

/** A2A parts from Parley parts. */
export function partsToA2a(parts: readonly Part[]): A2aPart[] {
  return parts.map((p): A2aPart => {
    if (p.type === 'text')
      return {
        content: { $case: 'text', value: p.text },
        metadata: undefined,
        filename: '',
        mediaType: 'text/plain',
      };
    if (p.type === 'data')
      return {
        content: { $case: 'data', value: p.data },
        metadata: undefined,
        filename: '',
        mediaType: p.mediaType ?? 'application/json',
      };
    return {
      content: { $case: 'url', value: p.url ?? `parley-artifact:${p.artifact}` },
      metadata: undefined,
      filename: p.name,
      mediaType: p.mediaType ?? '',
    };
  });
}

/** An A2A message of the agent from a room message. */
function agentMessage(m: RoomMessage, taskId: string, contextId: string): Message {
  return {
    messageId: m.id,
    contextId,
    taskId,
    role: Role.ROLE_AGENT,
    parts: partsToA2a(m.parts),
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

const status = (state: TaskStateT, message?: Message) => ({
  state,
  message,
  timestamp: new Date().toISOString(),
});

type Waiter = (d: PulledDelivery) => void;

/**
 * One reader of a caller's inbox while it has A2A tasks open: deliveries go to the waiter of their
 * room and are acknowledged once handed over. While a caller uses A2A, its inbox is read here (a
 * `/v1/stream` of the same principal at the same time would compete for it; documented).
 */
export class CallerInboxes {
  readonly #readers = new Map<string, { waiters: Map<string, Set<Waiter>>; stop: AbortController }>();

  constructor(
    private readonly service: GatewayService,
    private readonly log: Logger,
  ) {}

  /** Calls `fn` for each delivery in `room` until the returned function is called. */
  watch(caller: string, room: string, fn: Waiter): () => void {
    let reader = this.#readers.get(caller);
    if (!reader) {
      reader = { waiters: new Map(), stop: new AbortController() };
      this.#readers.set(caller, reader);
      void this.#run(caller, reader);
    }
    const set = reader.waiters.get(room) ?? new Set<Waiter>();
    set.add(fn);
    reader.waiters.set(room, set);
    const r = reader;
    return () => {
      set.delete(fn);
      if (!set.size) r.waiters.delete(room);
      if (!r.waiters.size) {
        r.stop.abort();
        if (this.#readers.get(caller) === r) this.#readers.delete(caller);
      }
    };
  }

  async #run(caller: string, reader: { waiters: Map<string, Set<Waiter>>; stop: AbortController }) {
    const held = await this.service.pool.acquire(caller);
    try {
      while (!reader.stop.signal.aborted) {
        const batch = await held.agent.pull({ max: 50, signal: reader.stop.signal });
        for (const d of batch.deliveries) for (const w of reader.waiters.get(d.room) ?? []) w(d);
        await batch.ack();
      }
    } catch (err) {
      this.log.warn({ err, caller }, 'A2A inbox reader stopped');
    } finally {
      held.release();
    }
  }

  /** Registers the first waiter of a caller only after its inbox is being read (so no reply comes too early). */
  async ready(caller: string): Promise<void> {
    const held = await this.service.pool.acquire(caller);
    try {
      await held.agent.listen();
    } finally {
      held.release();
    }
  }
}

/** Running tasks of this process: how to stop their wait. */
interface Running {
  /** Known once the context's room is found or made. */
  room?: string;
  caller: string;
  /** Set when a cancel starts: from then on the request is not sent to the agent. */
  canceled: boolean;
  /** The send of the request to the agent, once started. */
  request?: Promise<string>;
  /** Ends the wait (resolves it). */
  stop(): void;
}

/** Creates the executor for Parley agent `agentId`. */
export function createParleyExecutor(o: {
  service: GatewayService;
  agentId: string;
  inboxes: CallerInboxes;
  log: Logger;
}): AgentExecutor & { stopAll(): void } {
  const { service, agentId, inboxes, log } = o;
  const running = new Map<string, Running>();

  /** The direct room a context stands for, made on first use. */
  async function roomOf(caller: string, contextId: string): Promise<string> {
    const key = a2aKeys.context(caller, agentId, contextId);
    const found = await service.kv().get(key);
    if (found?.operation === 'PUT') return found.string();
    const held = await service.pool.acquire(caller);
    try {
      const room = await held.agent.rooms.create(`A2A ${contextId.slice(0, 60)}`, {
        members: [agentId],
        direct: true,
      });
      await service.kv().put(key, room.id);
      return room.id;
    } finally {
      held.release();
    }
  }

  /** Publishes the task's `CANCELED` status, with the context the stored task names. */
  async function publishCanceled(caller: string, taskId: string, bus: ExecutionEventBus) {
    const contextId =
      (await service.kv().get(a2aKeys.task(caller, taskId)))?.json<{ contextId?: string }>()?.contextId ?? '';
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: status(TaskState.TASK_STATE_CANCELED),
        metadata: undefined,
      }),
    );
  }

  /**
   * Cancels a task this replica runs. A request not yet sent is never sent; one that was sent (or
   * is being sent) is followed by the cancel in the same room, so the agent gets the cancel after
   * the request and never a cancel for a request it does not have. Then the wait ends. When telling
   * the agent fails the cancel fails and the task keeps waiting for the answer (a cancel may be
   * retried).
   */
  async function cancelHere(taskId: string, bus: ExecutionEventBus, r: Running) {
    r.canceled = true;
    const sent = r.request
      ? await r.request.then(
          () => true,
          () => false,
        )
      : false;
    if (sent && r.room) {
      const held = await service.pool.acquire(r.caller);
      try {
        await held.agent.rooms.room(r.room).send(`cancel: ${taskId}`, {
          kind: 'task.update',
          delegation: null,
          mentions: [agentId],
          metadata: { [A2A_META.task]: taskId, [A2A_META.state]: 'canceled' },
        });
      } finally {
        held.release();
      }
    }
    try {
      await publishCanceled(r.caller, taskId, bus);
    } finally {
      r.stop();
    }
  }

  return {
    /** Ends every wait (the HTTP side closes): the tasks stay as stored. */
    stopAll() {
      for (const r of running.values()) r.stop();
    },

    async execute(ctx: RequestContext, bus: ExecutionEventBus) {
      const caller = callerOf(ctx.context);
      const { taskId, contextId } = ctx;
      const task: Task = ctx.task
        ? {
            ...ctx.task,
            status: status(TaskState.TASK_STATE_WORKING),
            history: [...ctx.task.history, ctx.userMessage],
          }
        : {
            id: taskId,
            contextId,
            status: status(TaskState.TASK_STATE_SUBMITTED),
            artifacts: [],
            history: [ctx.userMessage],
            metadata: undefined,
          };
      bus.publish(AgentEvent.task(task));
      const finish = (state: TaskStateT, text: string) => {
        bus.publish(
          AgentEvent.statusUpdate({
            taskId,
            contextId,
            status: status(state, {
              messageId: `${taskId}-${state}`,
              contextId,
              taskId,
              role: Role.ROLE_AGENT,
              parts: [
                {
                  content: { $case: 'text', value: text },
                  metadata: undefined,
                  filename: '',
                  mediaType: 'text/plain',
                },
              ],
              metadata: undefined,
              extensions: [],
              referenceTaskIds: [],
            }),
            metadata: undefined,
          }),
        );
        bus.finished();
      };
      const parts = partsFromA2a(ctx.userMessage.parts);
      if (!parts.length)
        return finish(
          TaskState.TASK_STATE_REJECTED,
          'INVALID_ARGUMENT: the message has no text, data or url part',
        );

      let done!: () => void;
      const settled = new Promise<void>((r) => {
        done = r;
      });
      // Cancelable from here on, even before the message is sent (a cancel that comes early).
      const entry: Running = {
        caller,
        canceled: false,
        stop: () => {
          entry.canceled = true;
          done();
        },
      };
      running.set(taskId, entry);
      // A cancel arriving at another replica is forwarded here (see replicas.ts).
      const control = service.nc.subscribe(subjects.a2aTaskControl(keyToken(caller), keyToken(taskId)), {
        callback: (_err, msg) => {
          cancelHere(taskId, bus, entry).then(
            () => respondTo(msg, new TextEncoder().encode('{"ok":true}')),
            (err: unknown) =>
              respondTo(msg, new TextEncoder().encode(JSON.stringify({ ok: false, error: String(err) }))),
          );
        },
      });
      const forget = () => {
        control.unsubscribe();
        running.delete(taskId);
      };
      let room: string;
      try {
        room = await roomOf(caller, contextId);
        entry.room = room;
        await inboxes.ready(caller);
      } catch (err) {
        forget();
        return finish(TaskState.TASK_STATE_REJECTED, refusal(err));
      }
      if (entry.canceled) {
        // Canceled before anything was sent: the cancel ends the task once its status is out.
        forget();
        await settled;
        bus.finished();
        return;
      }
      let sentId: string | undefined;
      const pending: PulledDelivery[] = [];
      const onDelivery = (d: PulledDelivery) => {
        if (sentId === undefined) pending.push(d);
        else handle(d);
      };
      const handle = (d: PulledDelivery) => {
        const m = d.message;
        if (d.event !== 'message' || m.sender.id !== agentId) return;
        if (m.replyTo !== sentId && m.metadata?.[A2A_META.task] !== taskId) return;
        const msg = agentMessage(m, taskId, contextId);
        if (m.kind === 'status') {
          bus.publish(
            AgentEvent.statusUpdate({
              taskId,
              contextId,
              status: status(TaskState.TASK_STATE_WORKING, msg),
              metadata: undefined,
            }),
          );
          return;
        }
        if (m.metadata?.[A2A_META.state] === 'input-required') {
          bus.publish(
            AgentEvent.statusUpdate({
              taskId,
              contextId,
              status: status(TaskState.TASK_STATE_INPUT_REQUIRED, msg),
              metadata: undefined,
            }),
          );
          done();
          return;
        }
        bus.publish(
          AgentEvent.artifactUpdate({
            taskId,
            contextId,
            artifact: {
              artifactId: m.id,
              name: 'reply',
              description: '',
              parts: msg.parts,
              metadata: undefined,
              extensions: [],
            },
            append: false,
            lastChunk: true,
            metadata: undefined,
          }),
        );
        bus.publish(
          AgentEvent.statusUpdate({
            taskId,
            contextId,
            status: status(TaskState.TASK_STATE_COMPLETED, msg),
            metadata: undefined,
          }),
        );
        done();
      };
      const unwatch = inboxes.watch(caller, room, onDelivery);
      const timer = setTimeout(() => {
        finish(
          TaskState.TASK_STATE_FAILED,
          `DEADLINE_EXCEEDED: ${agentId} did not answer within ${ANSWER_TIMEOUT_MS / 1000} s`,
        );
        done();
      }, ANSWER_TIMEOUT_MS);
      // A wait for an answer is not a reason to keep the process alive.
      timer.unref();
      try {
        if (entry.canceled) {
          await settled;
          bus.finished();
          return;
        }
        // No await between the check above and this: a cancel from here on waits for the send.
        entry.request = (async () => {
          const held = await service.pool.acquire(caller);
          try {
            const sent = await held.agent.rooms.room(room).send(parts, {
              kind: 'message',
              delegation: null,
              deadlineMs: 10_000,
              mentions: [agentId],
              // The A2A message id makes a retried send the same Parley message.
              clientMsgId: ctx.userMessage.messageId.slice(0, 128) || taskId,
              metadata: { [A2A_META.task]: taskId, [A2A_META.context]: contextId },
            });
            return sent.id;
          } finally {
            held.release();
          }
        })();
        sentId = await entry.request;
        if (!ctx.task) {
          bus.publish(
            AgentEvent.statusUpdate({
              taskId,
              contextId,
              status: status(TaskState.TASK_STATE_WORKING),
              metadata: undefined,
            }),
          );
        }
        for (const d of pending.splice(0)) handle(d);
        await settled;
        bus.finished();
      } catch (err) {
        log.debug({ err, taskId }, 'A2A task refused');
        finish(TaskState.TASK_STATE_REJECTED, refusal(err));
      } finally {
        clearTimeout(timer);
        unwatch();
        forget();
      }
    },

    async cancelTask(taskId: string, bus: ExecutionEventBus) {
      const r = running.get(taskId);
      if (r) return cancelHere(taskId, bus, r);
      if (!(bus instanceof RemoteBus)) {
        throw new TaskNotCancelableError(`task ${taskId} is not running on this gateway`);
      }
      // Another replica may run it: it cancels there, and its events come back over the bus.
      try {
        const answer = (await service.nc.request(bus.controlSubject, '', { timeout: 10_000 })).json<{
          ok: boolean;
          error?: string;
        }>();
        if (!answer.ok)
          throw new TaskNotCancelableError(answer.error ?? `task ${taskId} could not be canceled`);
        return;
      } catch (err) {
        // NoResponders, possibly wrapped in a RequestError: nobody runs the task.
        const e = err as { message?: string; cause?: { message?: string } } | undefined;
        if (!/no responders/i.test(`${e?.message} ${e?.cause?.message}`)) throw err;
      }
      // Nobody runs it (it waits for input, or its replica is gone): canceled as stored.
      await publishCanceled(bus.caller, taskId, bus);
      bus.finished();
    },
  };
}

/** What a Parley refusal says to an A2A caller: its stable code and message. */
function refusal(err: unknown): string {
  if (isParleyError(err)) return `${err.code}: ${err.message}`;
  return `INTERNAL: ${err instanceof Error ? err.message : String(err)}`;
}
