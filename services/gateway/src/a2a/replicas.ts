/**
 * A2A task events across gateway replicas. The SDK keeps the event bus of a running task in memory,
 * on the replica running it; `tasks/resubscribe` on any other replica would see only the snapshot.
 * So every event of a task run here is also published on core NATS
 * (`_INBOX.svc_gateway.a2a.<caller>.<taskId>`, which no participant can subscribe to), and a replica
 * asked for a task it does not run hands the SDK a bus fed from that subject while someone listens.
 * The snapshot comes from the task record in KV (read after the subscription is in place, so an
 * event is seen at least once: in the snapshot, live, or both).
 *
 * `tasks/cancel` on a replica that does not run the task is forwarded to the one that does
 * (request/reply on `_INBOX.svc_gateway.a2actl.<caller>.<taskId>`); when none answers, nobody runs
 * it (it waits for input, or its replica died) and it is canceled as stored.
 */
import { Message, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent } from '@a2a-js/sdk';
import {
  type AgentExecutionEvent,
  DefaultExecutionEventBus,
  DefaultExecutionEventBusManager,
  type ExecutionEventBus,
  type ExecutionEventBusManager,
  type ServerCallContext,
} from '@a2a-js/sdk/server';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { subjects } from '@parley/contracts';
import type { Logger } from '@parley/kit';
import { callerOf, keyToken } from './store.js';

type Wire = { kind: AgentExecutionEvent['kind']; data: unknown } | { finished: true };

const codec = {
  task: Task,
  statusUpdate: TaskStatusUpdateEvent,
  artifactUpdate: TaskArtifactUpdateEvent,
  message: Message,
} as const;

function toWire(e: AgentExecutionEvent): Wire {
  return { kind: e.kind, data: (codec[e.kind] as { toJSON(v: unknown): unknown }).toJSON(e.data) };
}

function fromWire(w: Wire): AgentExecutionEvent | undefined {
  if ('finished' in w) return undefined;
  const c = codec[w.kind] as { fromJSON(v: unknown): unknown } | undefined;
  return c ? ({ kind: w.kind, data: c.fromJSON(w.data) } as AgentExecutionEvent) : undefined;
}

/** A bus of a task another replica runs: its events from NATS, while anyone listens. */
export class RemoteBus extends DefaultExecutionEventBus {
  #sub: Subscription | undefined;
  #listeners = 0;
  readonly subject: string;
  /** Where the replica running the task takes a cancel. */
  readonly controlSubject: string;

  constructor(
    private readonly nc: NatsConnection,
    readonly caller: string,
    taskId: string,
    private readonly log: Logger,
  ) {
    super();
    this.subject = subjects.a2aTaskEvents(keyToken(caller), keyToken(taskId));
    this.controlSubject = subjects.a2aTaskControl(keyToken(caller), keyToken(taskId));
  }

  override on(name: 'event' | 'finished', listener: never): this {
    super.on(name as never, listener);
    if (name === 'event' && this.#listeners++ === 0) {
      this.#sub = this.nc.subscribe(this.subject, {
        callback: (err, msg) => {
          if (err) return this.log.warn({ err }, 'A2A task event subscription ended');
          try {
            const w = msg.json<Wire>();
            const e = fromWire(w);
            if (e) this.publish(e);
            else this.finished();
          } catch (e) {
            this.log.warn({ err: e }, 'unreadable A2A task event');
          }
        },
      });
    }
    return this;
  }

  override off(name: 'event' | 'finished', listener: never): this {
    super.off(name as never, listener);
    if (name === 'event' && --this.#listeners === 0) {
      this.#sub?.unsubscribe();
      this.#sub = undefined;
    }
    return this;
  }
}

/** The SDK's bus manager, with the events of local tasks shared and remote tasks followed. */
export class ReplicaEventBusManager implements ExecutionEventBusManager {
  readonly #local = new DefaultExecutionEventBusManager();

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: Logger,
  ) {}

  #subject(taskId: string, context?: ServerCallContext) {
    return subjects.a2aTaskEvents(keyToken(context ? callerOf(context) : 'unknown'), keyToken(taskId));
  }

  createOrGetByTaskId(taskId: string, context?: ServerCallContext): ExecutionEventBus {
    const existing = this.#local.getByTaskId(taskId, context);
    if (existing) return existing;
    const bus = this.#local.createOrGetByTaskId(taskId, context);
    const subject = this.#subject(taskId, context);
    const send = (w: Wire) => {
      try {
        this.nc.publish(subject, JSON.stringify(w));
      } catch (err) {
        this.log.warn({ err, taskId }, 'A2A task event not shared');
      }
    };
    bus.on('event', (e: AgentExecutionEvent) => send(toWire(e)));
    bus.on('finished', () => send({ finished: true }));
    return bus;
  }

  getByTaskId(taskId: string, context?: ServerCallContext): ExecutionEventBus | undefined {
    return (
      this.#local.getByTaskId(taskId, context) ??
      new RemoteBus(this.nc, context ? callerOf(context) : 'unknown', taskId, this.log)
    );
  }

  cleanupByTaskId(taskId: string, context?: ServerCallContext): void {
    this.#local.cleanupByTaskId(taskId, context);
  }
}
