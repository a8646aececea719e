/**
 * The delivery engine: reads the participant's durable inbox consumer and runs handlers so that
 *
 * - each room's messages are handled in room order (one lane for everything by default, or one lane
 *   per room with `concurrency: 'per-room'`);
 * - a message is acknowledged only after its handler resolved; when it throws, the message is
 *   nak'ed with backoff and its lane waits for the redelivery (so nothing overtakes it); past max
 *   deliveries the server dead-letters it and the lane moves on;
 * - a redelivered message already handled is acknowledged without running the handler again;
 * - a jump in a room's `Parley-Prev-Seq` chain (messages lost from the inbox while the agent was
 *   away past the inbox cap) is backfilled from history before the message that revealed it; when
 *   the room log no longer holds part of it either (its retention limits), the first delivery after
 *   the hole says so in `gap`;
 * - after a restart, deliveries its crashed predecessor held (unacknowledged) come back first: the
 *   engine holds newer ones until those redeliveries arrived (at most two ack waits).
 *
 * In **pull mode** (`mode: 'pull'`, for callers that hand messages on rather than handle them,
 * like the MCP bridge's `wait_for_messages`) the same checks run, but a message that would go to a
 * handler is queued instead, in order, still unacknowledged (and kept alive with `working()`).
 * {@link DeliveryEngine.pull} hands out the oldest queued ones as a {@link PullBatch}; the caller
 * acknowledges the batch once it has passed the messages on (`ack()`: positions to the cursor
 * store first, then acks the server confirms), or gives them back (`release()`: the next pull
 * returns them again, first). One batch is out at a time, so batches never overtake each other. A
 * crash before `ack()` leaves them unacknowledged: the server redelivers them to the successor,
 * before anything newer.
 */
import { type ConsumerInfo, type ConsumerMessages, type JsMsg, jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import {
  Approval,
  ContactNotice,
  type ContactRequest,
  defaultTracer,
  extractContext,
  headerNames,
  headerOf,
  otelApi,
  ParleyError,
  type RoomMessage,
  roomOf,
  runInSpan,
  startMessagingSpan,
  TaskNotice,
  type Tracer,
  traceAttributes,
} from '@parley/contracts';
import type { ReportFailure } from './failures.js';
import { handling } from './handling.js';
import { retryIdempotent } from './retry.js';

/** A message handed to a handler. */
export interface Delivery {
  message: RoomMessage;
  /** The room the message is in. */
  room: string;
  /** Its position in the room log. */
  roomSeq: number;
  /** True when the message was delivered before (its handler may have run, e.g. before a crash). */
  redelivered: boolean;
  /** True when it was recovered from history after a gap rather than delivered from the inbox. */
  backfilled: boolean;
  /**
   * Set on the first delivery of a room after messages were lost to retention: the agent was away
   * past its inbox cap and the room log no longer holds them either. Room messages after position
   * `after` (the last one handled) and before `retainedFrom` may never reach this participant.
   */
  gap?: RetentionGap;
  /** When the fan-out stored it in this participant's inbox (ms since the epoch; absent when backfilled). */
  inboxedAt?: number;
  /**
   * When this process received it from nats-server (ms since the epoch; absent when backfilled).
   * `receivedAt − inboxedAt` is the server's push and the socket; what follows, until the handler
   * runs, is the wait behind this participant's earlier deliveries.
   */
  receivedAt?: number;
  /**
   * Set when the room log went back under this participant: JetStream lost the entry at this
   * position (the last one handled here, or the last of several) after a fault and went on from an
   * earlier position, so this delivery and the ones after it come at positions at or below it.
   * What was handled at the lost positions is no longer in the room's history.
   */
  rewound?: number;
  /** For `contact_request` and `contact_update`: the request (answer it with `agent.contacts`). */
  contactRequest?: ContactRequest;
  /** For `contact_request` and `contact_update`: the whole notice (what changed, with whom). */
  contactNotice?: ContactNotice;
  /** For `task_failed`, `task_canceled` and `task_lease_expired`: what happened to which task, and why this participant is told. */
  taskNotice?: TaskNotice;
  /** For `approval_requested` and `approval_decided`: the held call (decide with `agent.approvals`). */
  approval?: Approval;
}

/** Room messages lost to retention between two positions (see {@link Delivery.gap}). */
export interface RetentionGap {
  /** The last position of the room this participant handled. */
  after: number;
  /** Where the room's retained history starts: what lies between may be lost. */
  retainedFrom: number;
}

/** What the agent read from history to fill a hole in the inbox. */
export interface Backfill {
  entries: { seq: number; message: RoomMessage }[];
  /** Set when history no longer reaches back to the start of the hole. */
  gap?: RetentionGap;
  /**
   * The last position history returned in the hole, whether or not it is among `entries` (a
   * mentions-only participant's backfill leaves out what does not mention it); 0 when none.
   */
  through: number;
}

/** The kinds of delivery a handler can subscribe to. */
export type DeliveryEvent =
  | 'message'
  | 'room_event'
  | 'dead_letter'
  | 'contact_request'
  | 'contact_update'
  | 'task_failed'
  | 'task_canceled'
  | 'task_lease_expired'
  | 'approval_requested'
  | 'approval_decided';

const NOTICE_EVENTS: ReadonlySet<unknown> = new Set([
  'dead_letter',
  'contact_request',
  'contact_update',
  'task_failed',
  'task_canceled',
  'task_lease_expired',
  'approval_requested',
  'approval_decided',
]);

/** The event a room message goes to: a membership or room change, a dead letter, a consent notice, or a message. */
export function deliveryEventOf(message: RoomMessage): DeliveryEvent {
  if (message.kind === 'membership' || message.kind === 'room') return 'room_event';
  const event =
    message.kind === 'system' ? message.parts.find((p) => p.type === 'data')?.data.event : undefined;
  if (NOTICE_EVENTS.has(event)) return event as DeliveryEvent;
  return 'message';
}

/**
 * Where an agent keeps, across restarts, the last room position it handled per room. `set` is called
 * after the handler returned: a crash between the handler's effect and `set` hands that message out
 * once more after the restart (`redelivered: true`). An agent whose effects must not happen twice
 * keeps the position with the effect, in the same write, and has `get` read it from there.
 */
export interface CursorStore {
  get(room: string): number | undefined | Promise<number | undefined>;
  set(room: string, roomSeq: number): void | Promise<void>;
}

/** A delivery handed out by {@link DeliveryEngine.pull}, with the event it would have gone to. */
export interface PulledDelivery extends Delivery {
  event: DeliveryEvent;
}

/** Deliveries handed out together by {@link DeliveryEngine.pull}. */
export interface PullBatch {
  /** In order: room order within each room, inbox order across rooms. */
  readonly deliveries: readonly PulledDelivery[];
  /**
   * The caller passed them on: records each room's last position in the cursor store, then
   * acknowledges each message and waits for the server to confirm. They are never handed out again
   * (a failure is reported to `onError`; a redelivery that follows is recognised and dropped).
   */
  ack(): Promise<void>;
  /** The caller could not pass them on: the next pull returns them again, first, in order. */
  release(): void;
}

/** Options of {@link DeliveryEngine.pull}. */
export interface PullOptions {
  /** Most deliveries in the batch. @default 50 */
  max?: number;
  /** Wait until a queued delivery satisfies this (then hand out the oldest, within `max`). @default any */
  until?: (d: PulledDelivery) => boolean;
  /** Stops waiting: the batch holds what is queued at that moment (maybe nothing). */
  signal?: AbortSignal;
}

/** Options of the delivery engine. */
export interface DeliveryOptions {
  /**
   * `handlers` (default): deliveries go to the handlers of `on()`; `pull`: they are queued for
   * {@link DeliveryEngine.pull} and acknowledged when the caller acknowledges the batch.
   */
  mode?: 'handlers' | 'pull';
  /** Called in pull mode each time a delivery is queued (e.g. to notify a subscriber). */
  onQueued?: (d: PulledDelivery) => void;
  /** `sequential` (default): one message at a time; `per-room`: rooms in parallel, each in order. */
  concurrency?: 'sequential' | 'per-room';
  /** Hand this participant's own messages to its handlers too. @default false */
  includeOwn?: boolean;
  /** Persists handled positions so gaps are detected across restarts. @default in memory */
  cursorStore?: CursorStore;
  /** Backoff after a handler failure, by delivery count (ms). @default 500 · 2^(n-1), at most 10 s */
  backoffMs?: (deliveryCount: number) => number;
  /**
   * Called with errors of the engine itself and with handler exceptions (never thrown at the
   * caller). `connect({ onError })` receives them too, with where they happened.
   */
  onError?: (err: unknown) => void;
  /** @internal the agent's failure reporter */
  onFailure?: ReportFailure | undefined;
  /** @internal the agent's tracer */
  tracer?: Tracer | undefined;
}

type Handler = (d: Delivery) => unknown;

/**
 * The participant's push inbox consumer, as the engine needs it: this connection subscribes to
 * `deliverSubject` first, then `attach()` points the consumer there (the rooms service does it;
 * refused with CONFLICT while another connection of the participant receives).
 */
export interface InboxSource {
  nc: NatsConnection;
  /** This connection's own deliver subject, `_INBOX.<id>.deliver.<session>`. */
  deliverSubject: string;
  /** The consumer's info (limits, and what a crashed predecessor held). */
  info(): Promise<ConsumerInfo>;
  /**
   * Points the consumer at `deliverSubject`. Resolves the inbox position it goes on after when the
   * rooms service found it below the floor recorded for it (nats-server lost its state) and made it
   * again there first.
   */
  attach(): Promise<number | undefined>;
  /**
   * Makes the consumer, when it acknowledged less than `after` or the floor the rooms service
   * recorded for it (nats-server lost its state), go on after the higher of the two; resolves the
   * inbox position it goes on after when it was made again.
   */
  resume?(after: number): Promise<number | undefined>;
}

/** An inbox message in a lane, with when it reached this process (see {@link Delivery.receivedAt}). */
interface Arrived {
  m: JsMsg;
  receivedAt: number;
}

interface Lane {
  queue: Arrived[];
  /** The lane's handling, while it runs (one at a time per lane). */
  running?: Promise<void> | undefined;
  /** Inbox sequence of a nak'ed message this lane waits for. */
  waiting?: number;
}

const SEEN_CAPACITY = 20_000;
/** How long a failing backfill is tried again in place before its message is nak'ed. */
const BACKFILL_RETRY_MS = 60_000;
/** How long after finding its consumer unbound the engine asks again before subscribing again. */
const UNBOUND_RECHECK_MS = 500;
/** Deliveries dealt with between two readings of the consumer's acknowledgement floor. */
const FLOOR_EVERY = 250;
const decoder = new TextDecoder();

/** A delivery queued in pull mode; `msg` is absent for one backfilled from history. */
interface Queued {
  delivery: PulledDelivery;
  msg?: JsMsg;
}

/** Runs handlers for one participant's inbox. */
export class DeliveryEngine {
  readonly #handlers = new Map<DeliveryEvent, Handler[]>();
  readonly #lanes = new Map<string, Lane>();
  readonly #seen = new Set<string>();
  readonly #lastSeq = new Map<string, number>();
  #messages: ConsumerMessages | undefined;
  #idleHeartbeat: number | undefined;
  #checking = false;
  #source: InboxSource | undefined;
  // The highest acknowledgement floor the server reported (an inbox position everything up to which
  // was acknowledged), how many deliveries were dealt with since it was read, whether a reading is
  // on its way. The highest inbox position pushed a first time: a first delivery at or below it is
  // the consumer come back at its start (see #resume), noticed once per such position; the position
  // the consumer was last made to go on after; what is held back meanwhile.
  #floor = 0;
  #sinceFloor = 0;
  #readingFloor = false;
  #pushedUpTo = 0;
  #noticedUpTo = 0;
  #resumedAt = 0;
  #resuming = false;
  #heldBack: JsMsg[] = [];
  #keepalive: NodeJS.Timeout | undefined;
  #recovering: { upTo: number; expect: number; seen: number; timer: NodeJS.Timeout } | undefined;
  #maxDeliver = 5;
  #closed = false;
  // Pull mode: queued in order, the batch handed out, and who waits for either to change.
  readonly #ready: Queued[] = [];
  #claimed: Queued[] | undefined;
  // The ids of what is queued or handed out and not acknowledged.
  readonly #held = new Set<string>();
  #wakeups = new Set<() => void>();

  constructor(
    private readonly self: string,
    private readonly options: DeliveryOptions,
    private readonly backfill: (room: string, after: number, before: number) => Promise<Backfill>,
  ) {}

  on(event: DeliveryEvent, handler: Handler): void {
    const list = this.#handlers.get(event) ?? [];
    list.push(handler);
    this.#handlers.set(event, list);
  }

  /**
   * Starts receiving: subscribes to this connection's deliver subject, then attaches the inbox
   * consumer to it. Deliveries are pushed by the server (flow control, idle heartbeats): no delivery
   * waits for a pull request to reach the server, which nats-server 2.9.10 can lose without telling
   * the client (see docs/architecture.md, "The message path").
   */
  async start(source: InboxSource): Promise<void> {
    const info = await source.info();
    const maxDeliver = info.config.max_deliver ?? -1;
    this.#maxDeliver = maxDeliver > 0 ? maxDeliver : Number.POSITIVE_INFINITY;
    const ackWaitMs = Math.max(1_000, Math.floor((info.config.ack_wait ?? 30e9) / 1e6));
    if (info.num_ack_pending > 0) {
      // A predecessor crashed holding these: they come back after the ack wait, before anything newer.
      this.#recovering = {
        upTo: info.delivered.stream_seq,
        expect: info.num_ack_pending,
        seen: 0,
        timer: setTimeout(() => this.#endRecovery(), 2 * ackWaitMs + 1_000),
      };
    }
    // Missing two of the consumer's idle heartbeats checks the consumer. The heartbeat is the one the
    // consumer was made with (nats-server 2.9 cannot change it: consumers made by an earlier version
    // keep 5 s), so a slower one is never counted as missed.
    this.#idleHeartbeat = info.config.idle_heartbeat;
    this.#source = source;
    this.#floor = info.ack_floor.stream_seq;
    this.#pushedUpTo = info.delivered.stream_seq;
    try {
      await this.#subscribe(source);
      // The server must know the subscription before the consumer points at it.
      await source.nc.flush();
      await this.#attach(source);
    } catch (err) {
      this.#closed = true;
      if (this.#recovering) clearTimeout(this.#recovering.timer);
      await this.#messages?.close().catch(() => undefined);
      throw err;
    }
    // After a reconnect the consumer is checked at once rather than after two missed heartbeats
    // (30 s apart, so that idle agents cost the server little).
    void (async () => {
      for await (const s of source.nc.status()) {
        if (this.#closed) break;
        if (s.type === 'reconnect') await this.#check(source);
      }
    })();
    // Held and running messages must not time out: tell the server we are working on them.
    this.#keepalive = setInterval(
      () => {
        for (const lane of this.#lanes.values()) for (const a of lane.queue) a.m.working();
        for (const q of [...this.#ready, ...(this.#claimed ?? [])]) q.msg?.working();
      },
      Math.max(500, Math.floor(ackWaitMs / 3)),
    );
  }

  /**
   * Subscribes this connection to its deliver subject. A subscription it had is dropped first: the
   * server sees the interest go and come back, which is what tells a push consumer it has a
   * subscriber (a second subscription beside the first would not).
   */
  async #subscribe(source: InboxSource): Promise<void> {
    await this.#messages?.close().catch(() => undefined);
    const consumer = await jetstream(source.nc).consumers.getBoundPushConsumer({
      deliver_subject: source.deliverSubject,
      ...(this.#idleHeartbeat ? { idle_heartbeat: this.#idleHeartbeat } : {}),
    });
    const messages = await consumer.consume({ callback: (m) => this.#arrive(m) });
    this.#messages = messages;
    void (async () => {
      for await (const s of messages.status()) {
        // Two missed heartbeats: the consumer may have been recreated or moved (a migration, a lost
        // server), or lost this subscription: see #check.
        if (s.type === 'heartbeats_missed' && !this.#closed && this.#messages === messages)
          await this.#check(source);
      }
    })();
  }

  /**
   * Whether the inbox consumer still delivers to this connection, mended if not: a consumer that
   * points elsewhere (made again by a service while we were away) is attached again, and one that
   * points here but has no subscriber bound, as the server sees it, is subscribed to again.
   *
   * The second is a server defect: nats-server before 2.10.28 (and 2.11.0–2.11.1) marks a push
   * consumer inactive when a delivery fails as a connection closes, even with a subscriber there
   * (nats-server PR #6807), and a consumer that registers for interest while the subscription
   * arrives can miss it. Either way it delivers nothing until the interest changes. The server
   * answers `push_bound: false` for it; asked twice, UNBOUND_RECHECK_MS apart, since a subscription
   * it has just seen takes a moment to mark the consumer bound.
   */
  async #check(source: InboxSource): Promise<void> {
    if (this.#checking || this.#closed) return;
    this.#checking = true;
    try {
      for (let look = 0; ; look++) {
        await source.nc.flush();
        // Asked again while JetStream does not answer yet (a restarted server, leaders being
        // elected), for as long as two heartbeats would have taken to tell.
        const now = await retryIdempotent(() => source.info(), {
          deadlineMs: Math.max(10_000, (2 * (this.#idleHeartbeat ?? 0)) / 1e6),
          retryable: () => !this.#closed && !source.nc.isClosed(),
        });
        if (this.#closed) return;
        if (now.config.deliver_subject !== source.deliverSubject) return await this.#attach(source);
        this.#noteFloor(now);
        if (now.push_bound) return;
        if (look === 1) break;
        await new Promise((r) => setTimeout(r, UNBOUND_RECHECK_MS));
      }
      await this.#subscribe(source);
      await source.nc.flush();
      this.#fail(
        new Error('the inbox consumer had no subscriber bound as the server saw it: subscribed again'),
        'delivery',
        {
          reason: 'inbox_unbound',
        },
      );
    } catch (err) {
      if (!this.#closed) this.#fail(err, 'delivery');
    } finally {
      this.#checking = false;
    }
  }

  /**
   * Stops consuming, lets running handlers finish (and ack), keeps nothing else. In pull mode what
   * was queued or handed out and not acknowledged is nak'ed, so a successor gets it at once.
   */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#keepalive);
    if (this.#recovering) clearTimeout(this.#recovering.timer);
    await this.#messages?.close().catch(() => undefined);
    await Promise.allSettled([...this.#lanes.values()].map((lane) => lane.running));
    for (const q of [...(this.#claimed ?? []), ...this.#ready.splice(0)]) q.msg?.nak();
    this.#claimed = undefined;
    this.#held.clear();
    this.#wake();
  }

  /**
   * Pull mode: waits until a queued delivery satisfies `until` (or any, by default), then hands out
   * the oldest queued deliveries (at most `max`) as a batch. Only one batch is out at a
   * time: a second pull waits until the first is acknowledged or released. An aborted `signal`
   * (or {@link close}) ends the wait with what is queued then, possibly nothing.
   */
  async pull(options: PullOptions = {}): Promise<PullBatch> {
    const max = Math.max(1, options.max ?? 50);
    const until = options.until ?? (() => true);
    const signal = options.signal;
    const stop = () => this.#closed || signal?.aborted === true;
    for (;;) {
      if (!this.#claimed) {
        const hit = this.#ready.findIndex((q) => until(q.delivery));
        if (hit >= 0 || stop()) {
          return this.#handOut(this.#ready.splice(0, max));
        }
      } else if (stop()) {
        return this.#handOut([]);
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          this.#wakeups.delete(wake);
          signal?.removeEventListener('abort', wake);
          resolve();
        };
        this.#wakeups.add(wake);
        signal?.addEventListener('abort', wake, { once: true });
      });
    }
  }

  #handOut(items: Queued[]): PullBatch {
    if (items.length === 0) return { deliveries: [], ack: async () => undefined, release: () => undefined };
    this.#claimed = items;
    let settled = false;
    const settle = () => {
      if (settled) return false;
      settled = true;
      if (this.#claimed === items) this.#claimed = undefined;
      return true;
    };
    return {
      deliveries: items.map((q) => q.delivery),
      ack: async () => {
        if (!settle()) return;
        const last = new Map<string, number>();
        for (const q of items) {
          last.set(q.delivery.room, Math.max(last.get(q.delivery.room) ?? 0, q.delivery.roomSeq));
          this.#remember(q.delivery.message.id);
          this.#held.delete(q.delivery.message.id);
        }
        this.#wake();
        try {
          // Positions first: if the acks are lost, the redeliveries are recognised as returned.
          for (const [room, seq] of last) await this.options.cursorStore?.set(room, seq);
          await Promise.all(items.map((q) => q.msg?.ackAck()));
        } catch (err) {
          this.#fail(err, 'delivery');
        }
      },
      release: () => {
        if (!settle()) return;
        if (this.#closed) for (const q of items) q.msg?.nak();
        else this.#ready.unshift(...items);
        this.#wake();
      },
    };
  }

  #wake(): void {
    for (const wake of [...this.#wakeups]) wake();
  }

  #enqueue(q: Queued): void {
    this.#ready.push(q);
    this.#held.add(q.delivery.message.id);
    this.options.onQueued?.(q.delivery);
    this.#wake();
  }

  /** Pull mode: a redelivery of a message still queued or handed out replaces the copy we hold. */
  #replaceHeld(m: JsMsg): boolean {
    for (const q of this.#claimed ?? []) {
      if (q.msg?.seq === m.seq) {
        q.msg = m;
        return true;
      }
    }
    for (const q of this.#ready) {
      if (q.msg?.seq === m.seq) {
        q.msg = m;
        return true;
      }
    }
    return false;
  }

  #laneKey(m: JsMsg): string {
    return this.options.concurrency === 'per-room' ? roomOf(m.subject) : '*';
  }

  #arrive(m: JsMsg): void {
    if (this.#closed) {
      // Pull mode hands nothing out any more: a successor gets it at once instead of after the ack wait.
      if (this.options.mode === 'pull') m.nak();
      return;
    }
    if (this.options.mode === 'pull' && this.#replaceHeld(m)) return;
    // A consumer pushes first deliveries in inbox order: one at or below a position it pushed before
    // is the consumer come back at its start, its state lost (see #resume). Held back (neither
    // handled nor acknowledged) while the consumer is made again, so the server stops at its
    // max_ack_pending instead of pushing the whole inbox; after, dropped at or below the position it
    // was made to go on after (what the old consumer still had on its way) and handled as any
    // delivery past it, or all of it when it was not made again (recognised as handled before).
    if (m.info.deliveryCount === 1) {
      if (m.seq <= this.#resumedAt) return;
      if (m.seq > this.#pushedUpTo) this.#pushedUpTo = m.seq;
      else if (this.#resuming || (this.#noticedUpTo < this.#pushedUpTo && this.#source?.resume)) {
        this.#heldBack.push(m);
        void this.#resume();
        return;
      }
    }
    this.#queue(m);
  }

  /** Puts `m` in its lane, in inbox order, and handles the lane if it is not running. */
  #queue(m: JsMsg): void {
    const r = this.#recovering;
    if (r && m.seq <= r.upTo && ++r.seen >= r.expect) this.#endRecovery(false);
    const key = this.#laneKey(m);
    let lane = this.#lanes.get(key);
    if (!lane) {
      lane = { queue: [] };
      this.#lanes.set(key, lane);
    }
    // Keep the lane ordered by inbox sequence; a redelivery replaces a copy we still hold.
    const a: Arrived = { m, receivedAt: Date.now() };
    const q = lane.queue;
    const last = q.at(-1);
    if (!last || last.m.seq < m.seq) {
      // The usual case: in order.
      q.push(a);
      this.#pump(lane);
      return;
    }
    const i = q.findIndex((x) => x.m.seq >= m.seq);
    if (i === -1) q.push(a);
    else if (q[i]?.m.seq === m.seq) q[i] = a;
    else q.splice(i, 0, a);
    this.#pump(lane);
  }

  #endRecovery(pump = true): void {
    if (!this.#recovering) return;
    clearTimeout(this.#recovering.timer);
    this.#recovering = undefined;
    if (pump) for (const lane of this.#lanes.values()) this.#pump(lane);
    else
      queueMicrotask(() => {
        for (const lane of this.#lanes.values()) this.#pump(lane);
      });
  }

  #pump(lane: Lane): void {
    if (!lane.running && this.#next(lane)) lane.running = this.#drain(lane);
  }

  /** Handles the lane's messages in order until it is empty or must wait. */
  async #drain(lane: Lane): Promise<void> {
    try {
      for (let a = this.#next(lane); a; a = this.#next(lane)) {
        try {
          await this.#process(a, lane);
        } catch (err) {
          this.#fail(err, 'delivery');
        }
      }
    } finally {
      lane.running = undefined;
    }
  }

  /** The lane's next message to handle, if it may be handled now. */
  #next(lane: Lane): Arrived | undefined {
    if (this.#recovering || this.#closed) return undefined;
    const head = lane.queue[0];
    if (!head) return undefined;
    if (lane.waiting !== undefined) {
      // Nothing newer may overtake the nak'ed message. Something older may, and must go first: a
      // redelivery of what was lost in transit (the connection dropped with it, e.g. a nats-server
      // kill -9). Waiting for the nak'ed one with an older one at the head stalled the lane for
      // good: the nak'ed redelivery queues behind the older one (issue 12's 3-node stall).
      if (head.m.seq > lane.waiting) return undefined;
      if (head.m.seq === lane.waiting) lane.waiting = undefined;
    }
    return head;
  }

  async #process({ m, receivedAt }: Arrived, lane: Lane): Promise<void> {
    const id = headerOf(m.headers, headerNames.messageId) ?? `${m.seq}`;
    const room = roomOf(m.subject);
    const roomSeq = Number(headerOf(m.headers, headerNames.roomSeq)) || 0;
    const prev = Number(headerOf(m.headers, headerNames.prevSeq)) || 0;
    const unqueue = () => {
      const i = lane.queue.findIndex((x) => x.m.seq === m.seq);
      if (i >= 0) lane.queue.splice(i, 1);
    };
    const done = () => {
      unqueue();
      this.#remember(id);
      this.#lastSeq.set(room, Math.max(this.#lastSeq.get(room) ?? 0, roomSeq));
    };
    // The room log lost what was handled last here and went on from an earlier position: the room
    // goes on from the position the fan-out names before this one (even when this entry itself is
    // a message handled before, so the ones after it are not taken for handled). Only while this
    // participant is still at the lost position: a redelivery after that is judged as any other.
    const rewound = headerOf(m.headers, headerNames.rewound) ? await this.#rewind(m, room, prev) : undefined;
    if (this.#seen.has(id)) {
      m.ack();
      done();
      return;
    }
    let message: RoomMessage;
    try {
      // Only the fan-out writes inboxes, forwarding what the ingress validated: parsing is enough.
      message = JSON.parse(decoder.decode(m.data)) as RoomMessage;
      if (typeof message?.id !== 'string' || !Array.isArray(message.parts))
        throw new Error('not a Parley message');
    } catch (err) {
      // Not a Parley message: it can never be handled, so it is not retried.
      m.term();
      done();
      this.#fail(err, 'delivery');
      return;
    }
    // Whether the handler returned: a failure before that is the handler's, after it the engine's.
    let handled = false;
    try {
      const last = this.#lastSeq.get(room) ?? (await this.options.cursorStore?.get(room));
      if (last !== undefined && roomSeq <= last) {
        // Handled before (e.g. by this agent before a crash, its ack lost): rooms are in order.
        m.ack();
        done();
        return;
      }
      const gap =
        last !== undefined && prev > last
          ? await this.#backfillRetrying(room, last, roomSeq, prev)
          : undefined;
      if (this.#seen.has(id) || this.#held.has(id)) {
        // Handed out from an earlier position (the room log holds it twice: a JetStream fault, or a
        // history read from a copy that went another way): by the backfill just now, or in pull mode
        // queued and not acknowledged yet.
        m.ack();
        done();
        return;
      }
      const delivery: Delivery = {
        message,
        room,
        roomSeq,
        redelivered: m.info.deliveryCount > 1,
        backfilled: false,
        ...(gap ? { gap } : {}),
        ...(rewound ? { rewound } : {}),
        inboxedAt: Math.round(m.info.timestampNanos / 1e6),
        receivedAt,
      };
      if (this.options.mode === 'pull') {
        unqueue();
        this.#lastSeq.set(room, Math.max(this.#lastSeq.get(room) ?? 0, roomSeq));
        const event = this.#classify(delivery);
        if (event) {
          this.#enqueue({ delivery: { ...delivery, event }, msg: m });
        } else {
          m.ack();
          this.#remember(id);
        }
        return;
      }
      // A consumer span per delivery, child of the fan-out's producer span for this recipient; the
      // handler runs inside it, so what it sends and the tools it calls join the same trace.
      const parent = extractContext(m.headers, otelApi?.ROOT_CONTEXT);
      const span = startMessagingSpan(this.options.tracer ?? defaultTracer(), {
        operation: 'process',
        destination: m.subject,
        target: 'inbox',
        bodySize: m.data.length,
        parent,
      });
      // Built only for a span that records: a process without tracing pays for none of it.
      if (span?.isRecording())
        span.setAttributes({
          [traceAttributes.roomId]: room,
          [traceAttributes.roomSeq]: roomSeq,
          [traceAttributes.messageId]: message.id,
          [traceAttributes.sender]: message.sender.id,
          [traceAttributes.recipient]: this.self,
          [traceAttributes.deliveryCount]: m.info.deliveryCount,
        });
      await (span ? runInSpan(span, () => this.#dispatch(delivery), parent) : this.#dispatch(delivery));
      handled = true;
      const cursors = this.options.cursorStore;
      if (cursors) await cursors.set(room, roomSeq);
      m.ack();
      done();
    } catch (err) {
      this.#fail(err, handled ? 'delivery' : 'handler', {
        room,
        roomSeq,
        deliveryCount: m.info.deliveryCount,
      });
      unqueue();
      if (m.info.deliveryCount >= this.#maxDeliver) {
        // Out of attempts: the server sees max deliveries and Parley dead-letters it and tells the
        // sender (a nak, not a term: nats-server 2.9 publishes no advisory for a term). The lane moves
        // on, and the message counts as dealt with, so it is not mistaken for a gap to backfill.
        m.nak();
        this.#lastSeq.set(room, Math.max(this.#lastSeq.get(room) ?? 0, roomSeq));
        return;
      }
      lane.waiting = m.seq;
      const backoff = this.options.backoffMs ?? ((n: number) => Math.min(500 * 2 ** (n - 1), 10_000));
      m.nak(backoff(m.info.deliveryCount));
    }
  }

  /**
   * When `m` says the room log lost this participant's last handled position in `room` (see
   * {@link Delivery.rewound}) and the participant is still there: the room's position goes back to
   * the one `m` names before it, and the lost position is returned.
   */
  async #rewind(m: JsMsg, room: string, prev: number): Promise<number | undefined> {
    const rewound = Number(headerOf(m.headers, headerNames.rewound)) || 0;
    if (!rewound || prev >= rewound) return undefined;
    const last = this.#lastSeq.get(room) ?? (await this.options.cursorStore?.get(room));
    if (last === undefined || last < rewound) return undefined;
    this.#lastSeq.set(room, prev);
    return rewound;
  }

  /**
   * The backfill, tried again in place while it fails (the lane is blocked meanwhile, and the
   * keepalive keeps the message ours). Its failure is no fault of the message: a nak would spend one
   * of its deliveries each time, and during a cluster restart (history unavailable for seconds) the
   * message that revealed the gap ran out of them and was dead-lettered. Gives up after
   * BACKFILL_RETRY_MS: then the message is nak'ed like a handler failure. A read that came back
   * short of `prev` (see {@link DeliveryEngine.#backfill}) is tried again the same way; the last
   * attempt takes what history holds, so a position the room log itself lost does not stop the
   * room for good.
   */
  async #backfillRetrying(
    room: string,
    after: number,
    before: number,
    prev: number,
  ): Promise<RetentionGap | undefined> {
    const until = Date.now() + BACKFILL_RETRY_MS;
    for (let delay = 250; ; delay = Math.min(delay * 2, 5_000)) {
      const lastAttempt = Date.now() + delay > until;
      try {
        return await this.#backfill(room, after, before, lastAttempt ? 0 : prev);
      } catch (err) {
        if (this.#closed || lastAttempt) throw err;
        this.#fail(err, 'delivery', { room, backfill: { after, before }, retryInMs: delay });
        await new Promise((r) => setTimeout(r, delay));
      }
    }
  }

  /**
   * Hands out what history holds of a hole in the inbox (remembered, or in pull mode held, at once);
   * resolves with the retention gap when it could not be told on a backfilled delivery (history held
   * nothing of the hole). The hole ends at `prev`, the position the fan-out delivered here last
   * before the message that revealed it: a read that did not reach it (an answer from a replica
   * still catching up after a restart) is refused before anything of it is handed out. Taken as
   * the whole hole, it let the revealing message be handled with the rest of the hole unfilled,
   * and what came of it later was taken for handled before: never handed out. A `prev` at or past
   * `before` is no predecessor (a broken chain): no read could reach it, and requiring it held the
   * message back for a minute.
   */
  async #backfill(room: string, after: number, before: number, prev = 0): Promise<RetentionGap | undefined> {
    const found = await this.backfill(room, after, before);
    if (!found.gap && prev < before && found.through < prev) {
      throw new ParleyError(
        'UNAVAILABLE',
        `room ${room}: history answered up to position ${found.through}, short of ${prev}, the one delivered here before position ${before}`,
        { retryAfterMs: 250, details: { room, after, before, prev, through: found.through } },
      );
    }
    let gap = found.gap;
    if (gap) {
      // Also told to the error listeners: a participant without a handler for what came first
      // after the hole would not see it on a delivery.
      this.#fail(
        new ParleyError(
          'HISTORY_EXPIRED',
          `room ${room}: messages after position ${gap.after} and before ${gap.retainedFrom} may be lost (inbox cap and room-log retention both passed while this participant was away)`,
          { details: { room, ...gap } },
        ),
        'delivery',
        { room, ...gap },
      );
    }
    for (const e of found.entries) {
      if (this.#seen.has(e.message.id) || this.#held.has(e.message.id)) continue;
      const delivery: Delivery = {
        message: e.message,
        room,
        roomSeq: e.seq,
        redelivered: false,
        backfilled: true,
        ...(gap ? { gap } : {}),
      };
      if (this.#wanted(delivery)) gap = undefined;
      if (this.options.mode === 'pull') {
        const event = this.#classify(delivery);
        if (event) this.#enqueue({ delivery: { ...delivery, event } });
        continue;
      }
      await this.#dispatch(delivery);
      this.#remember(e.message.id);
    }
    return gap;
  }

  /**
   * The event a delivery goes to (contact notices get their request attached), or undefined when
   * this participant does not want it (its own message).
   */
  #classify(d: Delivery): DeliveryEvent | undefined {
    const event = deliveryEventOf(d.message);
    if (event === 'contact_request' || event === 'contact_update') {
      const data = d.message.parts.find((p) => p.type === 'data')?.data;
      // A notice from the consent service (its notice room): hand over the request it is about.
      const parsed = ContactNotice.safeParse(data);
      if (parsed.success) {
        d.contactNotice = parsed.data;
        if (parsed.data.request) d.contactRequest = parsed.data.request;
      }
    }
    if (event === 'task_failed' || event === 'task_canceled' || event === 'task_lease_expired') {
      const parsed = TaskNotice.safeParse(d.message.parts.find((p) => p.type === 'data')?.data);
      if (parsed.success) d.taskNotice = parsed.data;
    }
    if (event === 'approval_requested' || event === 'approval_decided') {
      const parsed = Approval.safeParse(d.message.parts.find((p) => p.type === 'data')?.data);
      if (parsed.success) d.approval = parsed.data;
    }
    if (event === 'message' && d.message.sender.id === this.self && !this.options.includeOwn)
      return undefined;
    return event;
  }

  #fail(err: unknown, source: 'handler' | 'delivery', details?: Record<string, unknown>): void {
    try {
      this.options.onError?.(err);
    } catch {
      // A throwing listener must not stop the engine.
    }
    this.options.onFailure?.(err, source, details);
  }

  /** Whether a delivery reaches the caller (a handler for its event, or the pull queue). */
  #wanted(d: Delivery): boolean {
    const event = this.#classify(d);
    return event !== undefined && (this.options.mode === 'pull' || !!this.#handlers.get(event)?.length);
  }

  async #dispatch(d: Delivery): Promise<void> {
    const event = this.#classify(d);
    if (!event) return;
    const handlers = this.#handlers.get(event);
    if (!handlers?.length) return;
    const obo = d.message.onBehalfOf;
    const delegation = obo?.token && obo.chain.at(-1) === this.self ? obo.token : undefined;
    const ctx = {
      messageId: d.message.id,
      hop: d.message.hop,
      room: d.room,
      ...(d.message.causedBy ? { causedBy: d.message.causedBy } : {}),
      ...(delegation ? { delegation } : {}),
    };
    // One handler (the usual case) runs without a wrapper of its own: a promise fewer per delivery.
    const [only] = handlers;
    await handling.run(
      ctx,
      handlers.length === 1 && only
        ? () => only(d)
        : async () => {
            for (const h of handlers) await h(d);
          },
    );
  }

  /**
   * Every FLOOR_EVERY deliveries dealt with, reads the consumer's acknowledgement floor (one
   * JetStream request): what #resume goes on after if nats-server loses the consumer's state.
   */
  #dealtWith(): void {
    const source = this.#source;
    if (++this.#sinceFloor < FLOOR_EVERY || this.#readingFloor || !source || this.#closed) return;
    this.#sinceFloor = 0;
    this.#readingFloor = true;
    source
      .info()
      .then((info) => {
        if (info.config.deliver_subject === source.deliverSubject) this.#noteFloor(info);
      })
      // A missed reading leaves the last one, which is still a floor.
      .catch(() => undefined)
      .finally(() => {
        this.#readingFloor = false;
      });
  }

  /** Attaches the inbox (see {@link InboxSource.attach}) and says when it was made again first. */
  async #attach(source: InboxSource): Promise<void> {
    const after = await source.attach();
    if (after !== undefined) this.#madeAgainAfter(after, 'was below the floor recorded for it');
  }

  /**
   * Reports an inbox consumer made again after `after` because nats-server lost its state, and when
   * this engine noticed it, how long making it again took (deliveries past `after` wait for it).
   */
  #stateLost(what: string, after: number, resumeMs?: number): void {
    this.#fail(
      new Error(
        `the inbox consumer ${what} (nats-server lost its state): made again after inbox position ${after}${resumeMs === undefined ? '' : `, ${resumeMs} ms after it was noticed`}`,
      ),
      'delivery',
      { reason: 'inbox_state_lost', resumedAfter: after, ...(resumeMs === undefined ? {} : { resumeMs }) },
    );
  }

  #noteFloor(info: ConsumerInfo): void {
    this.#floor = Math.max(this.#floor, info.ack_floor.stream_seq);
  }

  /**
   * nats-server before 2.11.11 (and 2.12.0) rewrites a consumer's state file in place; a kill -9
   * between the truncate and the write brings the consumer back at its start, pushing the whole
   * inbox again (up to 14 days). Everything up to a floor the server reported was acknowledged, so
   * the rooms service makes the consumer again after it, or after the floor it recorded for the
   * consumer if that is higher (this engine may have read none yet: it reads one every
   * FLOOR_EVERY deliveries). Deliveries of the old consumer still on their way are recognised as
   * handled, as they would have been. Once per position pushed: what was held back meanwhile is
   * dropped at or below the position the consumer was made to go on after, and handled as any
   * delivery past it (or when it was not made again).
   */
  async #resume(): Promise<void> {
    const source = this.#source;
    if (this.#resuming || this.#closed || !source?.resume) return;
    this.#resuming = true;
    this.#noticedUpTo = this.#pushedUpTo;
    const noticedAt = Date.now();
    let resumedAfter: number | undefined;
    try {
      resumedAfter = await source.resume(this.#floor);
    } catch (err) {
      if (!this.#closed) this.#fail(err, 'delivery');
    }
    this.#resuming = false;
    const held = this.#heldBack;
    this.#heldBack = [];
    if (resumedAfter !== undefined)
      this.#madeAgainAfter(resumedAfter, 'came back at its start', Date.now() - noticedAt);
    // Past the position it was made to go on after, a held delivery may be the new consumer's own
    // (pushed while the answer was on its way): dropped, it would come again only after the ack wait.
    if (!this.#closed) for (const m of held) if (m.seq > this.#resumedAt) this.#queue(m);
  }

  /** The inbox consumer was made again after `after`: what the old one still pushes is dropped. */
  #madeAgainAfter(after: number, what: string, resumeMs?: number): void {
    this.#floor = Math.max(this.#floor, after);
    this.#resumedAt = Math.max(this.#resumedAt, after);
    this.#noticedUpTo = this.#pushedUpTo;
    this.#stateLost(what, after, resumeMs);
  }

  #remember(id: string): void {
    this.#dealtWith();
    this.#seen.add(id);
    if (this.#seen.size > SEEN_CAPACITY) {
      const oldest = this.#seen.values().next();
      if (!oldest.done) this.#seen.delete(oldest.value);
    }
  }
}
