/**
 * The fan-out: for each room-log entry, one publish per recipient to its inbox subject
 * `parley.inbox.<recipient>.<room>`, then the entry is acknowledged.
 *
 * - The log is split in partitions (`parley.room.<p>.*`), each read by a durable consumer
 *   `fanout_<p>` that only the holder of the partition's lease pulls from (see leases.ts).
 * - Entries are handled in micro-batches: everything that arrived while the previous batch was in
 *   flight, up to `batchSize`; all inbox publishes of a batch go out at once, and when every one was
 *   acknowledged by JetStream the batch is acknowledged with one ack (AckAll).
 * - Recipients are decided at the entry's position: membership events are applied in log order to a
 *   per-room view (membership intervals), persisted in `fanout.<room>` before the ack.
 * - Idempotence and fencing without the dedupe window: per (recipient, room) the fan-out knows the
 *   last room position it delivered and the inbox sequence it got (from the PubAck, or after a
 *   restart from a direct get of the subject's last message). A position already delivered is
 *   skipped; every publish carries `Nats-Expected-Last-Subject-Sequence`, so if two replicas ever
 *   believed they owned the partition, the server refuses the stale one's publish instead of
 *   reordering an inbox. The same value is stamped as `Parley-Prev-Seq` for gap detection.
 */
import {
  AckPolicy,
  DeliverPolicy,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  type PubAck,
} from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { nanos, headers as natsHeaders } from '@nats-io/transport-node';
import {
  type Context,
  type DeliveryFilter,
  extractContext,
  headerNames,
  injectContext,
  type MemberRole,
  type MembershipChange,
  otelApi,
  type RoomChange,
  recordSpanError,
  roomOf,
  runInSpan,
  type Span,
  startMessagingSpan,
  streams,
  subjects,
  type Tracer,
  traceAttributes,
} from '@parley/contracts';
import { isKvConflict, type Logger, type ParleyMetrics } from '@parley/kit';
import { createLeaseManager } from './leases.js';
import { LruMap } from './lru.js';
import { type FanoutRecord, keys, memberAt, readEntry } from './room-store.js';
import type { ObservedEntry } from './runaway.js';

/** Settings of the fan-out. */
export interface FanoutOptions {
  js: JetStreamClient;
  jsm: JetStreamManager;
  rooms: KV;
  leases: KV;
  partitions: number;
  replicaId: string;
  leaseTtlMs: number;
  batchSize: number;
  log: Logger;
  /** Sees every entry of the owned partitions, in log order (the runaway detector). */
  observe?: ((entry: ObservedEntry) => void) | undefined;
  tracer?: Tracer;
  metrics?: ParleyMetrics;
}

interface RoomView {
  record: FanoutRecord;
  revision: number;
  dirty: boolean;
}

/** A room-log entry to deliver to one recipient, with its fan-out span's context. */
interface Delivery {
  m: JsMsg;
  parent?: Context;
}

interface Cursor {
  roomSeq: number;
  inboxSeq: number;
}

const dec = new TextDecoder();
const SYSTEM_KINDS = new Set(['membership', 'room', 'system']);
const FORWARDED_HEADERS = [headerNames.messageId, headerNames.traceparent, headerNames.tracestate];

/** The consumer name of a partition. */
export const partitionConsumer = (p: number) => `fanout_${p}`;

export function createFanout(o: FanoutOptions) {
  const log = o.log.child({ component: 'fanout', replica: o.replicaId });
  const views = new LruMap<string, RoomView>(50_000);
  const cursors = new LruMap<string, Cursor>(200_000);
  const workers = new Map<number, ReturnType<typeof startWorker>>();

  async function ensureConsumer(p: number): Promise<void> {
    const name = partitionConsumer(p);
    const base = {
      durable_name: name,
      filter_subject: subjects.roomPartition(p),
      ack_policy: AckPolicy.All,
      ack_wait: nanos(30_000),
      max_ack_pending: 20_000,
    };
    const info = await o.jsm.consumers.info(streams.rooms, name).catch((err: Error) => {
      if (/consumer not found/i.test(err.message)) return undefined;
      throw err;
    });
    if (!info) {
      await o.jsm.consumers.add(streams.rooms, { ...base, deliver_policy: DeliverPolicy.All });
      return;
    }
    // Entries handed to a previous owner and not acknowledged would be redelivered only after the
    // ack wait, behind newer ones: restart the consumer at the ack floor to keep log order.
    if (info.num_ack_pending > 0) {
      const start = info.ack_floor.stream_seq + 1;
      await o.jsm.consumers.delete(streams.rooms, name);
      await o.jsm.consumers.add(streams.rooms, {
        ...base,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: start,
      });
      log.info({ partition: p, start }, 'partition consumer restarted at its ack floor');
    }
  }

  async function view(room: string): Promise<RoomView> {
    let v = views.get(room);
    if (!v) {
      const e = await readEntry<FanoutRecord>(o.rooms, keys.fanout(room));
      v = e
        ? { record: e.value, revision: e.revision, dirty: false }
        : { record: { closed: false, members: {}, appliedSeq: 0 }, revision: 0, dirty: false };
      views.set(room, v);
    }
    return v;
  }

  function applyEvent(v: RoomView, seq: number, kind: string, data: Record<string, unknown>): void {
    const r = v.record;
    if (seq <= r.appliedSeq) return;
    r.appliedSeq = seq;
    v.dirty = true;
    if (kind === 'room') {
      if ((data as RoomChange).change === 'closed') r.closed = true;
      return;
    }
    const c = data as MembershipChange;
    const m = r.members[c.member];
    if (c.change === 'joined') {
      if (r.closed) return;
      const open = m?.intervals.some(([, to]) => to === undefined);
      r.members[c.member] = {
        role: c.role,
        delivery: c.delivery,
        intervals: open && m ? m.intervals : [...(m?.intervals ?? []).slice(-7), [seq]],
      };
    } else if (c.change === 'left' || c.change === 'removed') {
      const last = m?.intervals.at(-1);
      if (last && last[1] === undefined) last[1] = seq;
    } else if (c.change === 'updated' && m) {
      m.role = c.role as MemberRole;
      m.delivery = c.delivery as DeliveryFilter;
    }
  }

  async function persistView(room: string, v: RoomView): Promise<void> {
    const data = JSON.stringify(v.record);
    try {
      v.revision = v.revision
        ? await o.rooms.update(keys.fanout(room), data, v.revision)
        : await o.rooms.create(keys.fanout(room), data);
      v.dirty = false;
    } catch (err) {
      // Someone else wrote this room's view: we are not the partition's only owner any more.
      views.delete(room);
      throw err;
    }
  }

  async function cursor(recipient: string, room: string): Promise<Cursor> {
    const key = `${recipient}.${room}`;
    let c = cursors.get(key);
    if (!c) {
      c = await lookupCursor(recipient, room);
      cursors.set(key, c);
    }
    return c;
  }

  async function lookupCursor(recipient: string, room: string): Promise<Cursor> {
    const last = await o.jsm.direct.getMessage(streams.inbox, {
      last_by_subj: subjects.inbox(recipient, room),
    });
    if (!last) return { roomSeq: 0, inboxSeq: 0 };
    return { roomSeq: Number(last.header.get(headerNames.roomSeq)) || 0, inboxSeq: last.seq };
  }

  /** One inbox publish with its producer span (child of the room entry's fan-out span). */
  function publishOne(
    item: Delivery,
    recipient: string,
    room: string,
    prevRoomSeq: number,
    expectedInboxSeq: number | undefined,
  ): Promise<PubAck> {
    const { m, parent } = item;
    const span = startMessagingSpan(o.tracer, {
      operation: 'send',
      operationName: 'publish',
      destination: subjects.inbox(recipient, room),
      target: 'inbox',
      bodySize: m.data.length,
      ...(parent ? { parent } : {}),
      attributes: {
        [traceAttributes.recipient]: recipient,
        [traceAttributes.roomId]: room,
        [traceAttributes.roomSeq]: m.seq,
      },
    });
    const publish = async () => {
      const h = natsHeaders();
      // Only what a recipient needs before parsing the body (its id, for de-duplication) and the
      // trace context; every header is encoded once per recipient.
      for (const name of FORWARDED_HEADERS) {
        const value = m.headers?.get(name);
        if (value) h.set(name, value);
      }
      // This recipient's producer span becomes the delivery's parent (when this process traces).
      if (span) injectContext(h);
      h.set(headerNames.roomSeq, String(m.seq));
      if (prevRoomSeq > 0) h.set(headerNames.prevSeq, String(prevRoomSeq));
      h.set(headerNames.msgId, `${m.seq}:${recipient}`);
      if (expectedInboxSeq !== undefined) h.set(headerNames.expectedLastSubjectSeq, String(expectedInboxSeq));
      const ack = await o.js.publish(subjects.inbox(recipient, room), m.data, { headers: h });
      if (!ack.duplicate) o.metrics?.observeDelivery((Date.now() - m.info.timestampNanos / 1e6) / 1000);
      return ack;
    };
    return span ? runInSpan(span, publish, parent) : publish();
  }

  /**
   * Delivers a batch's entries for one (recipient, room) inbox subject, in log order. The first
   * publish is fenced — stored only if the subject's last entry is the one this fan-out last wrote
   * (`Nats-Expected-Last-Subject-Sequence`) — and the rest follow at once on the same connection,
   * which keeps their order without waiting for each acknowledgement. A writer that loses the
   * fence (another replica believed it owned the partition) writes nothing more for that subject.
   */
  async function deliverRun(recipient: string, room: string, items: Delivery[]): Promise<void> {
    const key = `${recipient}.${room}`;
    let c = await cursor(recipient, room);
    for (let attempt = 0; ; attempt++) {
      // Entries at or below the cursor were delivered before (a re-run after a crash).
      const todo = items.filter((x) => x.m.seq > c.roomSeq);
      const [first, ...rest] = todo;
      if (!first) return;
      if (attempt === 3) throw new Error(`inbox ${key} keeps changing under the fan-out`);
      let fenced: PubAck;
      try {
        fenced = await publishOne(first, recipient, room, c.roomSeq, c.inboxSeq);
      } catch (err) {
        if (!isKvConflict(err)) throw err;
        c = await lookupCursor(recipient, room);
        cursors.set(key, c);
        continue;
      }
      if (fenced.duplicate) {
        // Stored before, within the dedupe window: the cursor was behind. Read it again.
        c = await lookupCursor(recipient, room);
        cursors.set(key, c);
        continue;
      }
      const acks = await Promise.all(
        rest.map((x, i) =>
          publishOne(x, recipient, room, (i === 0 ? first : rest[i - 1])?.m.seq ?? 0, undefined),
        ),
      );
      const last = todo.at(-1) ?? first;
      cursors.set(key, { roomSeq: last.m.seq, inboxSeq: (acks.at(-1) ?? fenced).seq });
      return;
    }
  }

  function recipients(v: RoomView, m: JsMsg, kind: string): string[] {
    const mentions = m.headers?.get(headerNames.mentions)?.split(',') ?? [];
    const privateNotice = m.headers?.get(headerNames.audience) === 'mentions';
    const out: string[] = [];
    for (const [id, member] of Object.entries(v.record.members)) {
      if (!memberAt(member.intervals, m.seq)) continue;
      if (privateNotice) {
        if (mentions.includes(id)) out.push(id);
      } else if (SYSTEM_KINDS.has(kind) || member.delivery === 'all' || mentions.includes(id)) {
        out.push(id);
      }
    }
    return out;
  }

  /** Handles one batch: every inbox publish acknowledged, views persisted, then one ack. */
  async function handleBatch(batch: JsMsg[]): Promise<void> {
    const runs = new Map<string, { recipient: string; room: string; items: Delivery[] }>();
    const touched = new Map<string, RoomView>();
    const spans: Span[] = [];
    for (const m of batch) {
      const room = roomOf(m.subject);
      const v = await view(room);
      // One consumer span per room-log entry, child of the ingress span that stored it.
      const span = startMessagingSpan(o.tracer, {
        operation: 'process',
        operationName: 'fanout',
        destination: m.subject,
        target: 'room',
        bodySize: m.data.length,
        parent: extractContext(m.headers, otelApi?.ROOT_CONTEXT),
        attributes: { [traceAttributes.roomId]: room, [traceAttributes.roomSeq]: m.seq },
      });
      const parent = span && otelApi ? otelApi.trace.setSpan(otelApi.ROOT_CONTEXT, span) : undefined;
      if (span) spans.push(span);
      const kind = m.headers?.get(headerNames.kind) ?? 'message';
      let change: string | undefined;
      if (kind === 'membership' || kind === 'room') {
        const body = JSON.parse(dec.decode(m.data)) as {
          parts: { type: string; data?: Record<string, unknown> }[];
        };
        const data = body.parts.find((p) => p.type === 'data')?.data ?? {};
        applyEvent(v, m.seq, kind, data);
        if (v.dirty) touched.set(room, v);
        change = typeof data.change === 'string' ? data.change : undefined;
      }
      o.observe?.({
        room,
        seq: m.seq,
        kind,
        sender: m.headers?.get(headerNames.sender) ?? '',
        at: m.time.getTime(),
        change,
      });
      for (const r of recipients(v, m, kind)) {
        const key = `${r}.${room}`;
        let run = runs.get(key);
        if (!run) {
          run = { recipient: r, room, items: [] };
          runs.set(key, run);
        }
        run.items.push({ m, ...(parent ? { parent } : {}) });
      }
    }
    try {
      // Different inbox subjects go out in parallel.
      await Promise.all([...runs.values()].map((r) => deliverRun(r.recipient, r.room, r.items)));
    } catch (err) {
      for (const span of spans) recordSpanError(span, err);
      o.metrics?.recordMessage('failed', 'UNAVAILABLE', batch.length);
      throw err;
    } finally {
      for (const span of spans) span.end();
    }
    for (const [room, v] of touched) if (v.dirty) await persistView(room, v);
    const last = batch.at(-1);
    if (last) {
      last.ack();
      o.metrics?.recordMessage('fanned_out', 'OK', batch.length);
      o.metrics?.setFanoutLag(Number(last.subject.split('.')[2]), {
        messages: last.info.pending,
        seconds: Math.max(0, (Date.now() - last.info.timestampNanos / 1e6) / 1000),
      });
    }
  }

  function startWorker(p: number) {
    let stopped = false;
    let messages:
      | Awaited<ReturnType<Awaited<ReturnType<JetStreamClient['consumers']['get']>>['consume']>>
      | undefined;
    const queue: JsMsg[] = [];
    let wake: (() => void) | undefined;
    const plog = log.child({ partition: p });

    const run = async () => {
      let backoff = 100;
      while (!stopped) {
        try {
          await ensureConsumer(p);
          const consumer = await o.js.consumers.get(streams.rooms, partitionConsumer(p));
          queue.length = 0;
          messages = await consumer.consume({
            max_messages: Math.max(256, o.batchSize * 4),
            // Short pulls: a moved stream leader, or a consume left without a pull at the server (see
            // sdk/src/delivery.ts), stalls a partition for ~5 s at most instead of 30.
            expires: 5_000,
            abort_on_missing_resource: true,
            callback: (m) => {
              queue.push(m);
              wake?.();
            },
          });
          const closed = messages.closed().then(() => {
            wake?.();
          });
          backoff = 100;
          while (!stopped) {
            if (queue.length === 0) {
              await new Promise<void>((r) => {
                wake = r;
              });
              wake = undefined;
              if (queue.length === 0) {
                // Woken with nothing to do: the consumer closed under us (deleted, or we stopped).
                if (!stopped) throw new Error('partition consumer closed');
                break;
              }
            }
            await handleBatch(queue.splice(0, o.batchSize));
          }
          await messages.close().catch(() => undefined);
          await closed;
        } catch (err) {
          await messages?.close().catch(() => undefined);
          if (stopped) break;
          plog.warn({ err: (err as Error).message }, 'fan-out worker restarting');
          // Forget what may be stale: cursors are re-read from the inboxes on demand.
          cursors.clear();
          views.clear();
          await new Promise((r) => setTimeout(r, backoff));
          backoff = Math.min(backoff * 2, 5_000);
        }
      }
    };
    const done = run();
    return {
      async stop() {
        stopped = true;
        wake?.();
        await messages?.close().catch(() => undefined);
        await done;
      },
    };
  }

  const leases = createLeaseManager({
    kv: o.leases,
    replicaId: o.replicaId,
    partitions: o.partitions,
    ttlMs: o.leaseTtlMs,
    log,
    callbacks: {
      acquired(p) {
        workers.set(p, startWorker(p));
      },
      async released(p) {
        const w = workers.get(p);
        workers.delete(p);
        await w?.stop();
      },
    },
  });

  return {
    start: () => leases.start(),
    stop: () => leases.stop(),
    /** Partitions this replica works on. */
    owned: () => leases.held(),
  };
}
