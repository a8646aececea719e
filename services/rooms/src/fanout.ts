/**
 * The fan-out: for each room-log entry, one publish per recipient to its inbox subject
 * `parley.inbox.<recipient>.<room>`, then the entry is acknowledged.
 *
 * - The log is split in partitions (`parley.room.<p>.*`), each read by a durable push consumer
 *   `fanout_<p>` that delivers to the lease holder's own subject (see leases.ts): no entry waits
 *   for a pull request to reach the server (nats-server 2.9.10 can lose an expired pull without
 *   telling the client, which stalled partitions for seconds).
 * - Partitions are spread over the fan-out's own NATS connections (never the ingress's): on 2.9 a
 *   connection's JetStream publishes are stored one after the other in that connection's read
 *   loop, so a shared socket queues inbox writes behind room appends.
 * - Entries are handled in micro-batches: everything that arrived while the previous batch was in
 *   flight, up to `batchSize`; all inbox publishes of a batch go out at once, and when every one was
 *   acknowledged by JetStream the batch is acknowledged with one ack (AckAll).
 * - Recipients are decided at the entry's position: membership events are applied in log order to a
 *   per-room view (membership intervals), persisted in `fanout.<room>` before the ack.
 * - Idempotence and fencing without the dedupe window: per (recipient, room) the fan-out knows the
 *   last room position it delivered and the inbox sequence it got (from the StoredAck, or after a
 *   restart from a direct get of the subject's last message). A position already delivered is
 *   skipped; every publish carries `Nats-Expected-Last-Subject-Sequence`, so if two replicas ever
 *   believed they owned the partition, the server refuses the stale one's publish instead of
 *   reordering an inbox. The same value is stamped as `Parley-Prev-Seq` for gap detection.
 */
import {
  AckPolicy,
  type ConsumerInfo,
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  jetstreamManager,
} from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { type NatsConnection, nanos, headers as natsHeaders } from '@nats-io/transport-node';
import {
  type Context,
  type DeliveryFilter,
  extractContext,
  headerNames,
  headerOf,
  inboxStream,
  inboxStreams,
  injectContext,
  type MemberRole,
  type MembershipChange,
  otelApi,
  PARTITION_IDLE_HEARTBEAT_MS,
  type RoomChange,
  recordSpanError,
  roomOf,
  type Span,
  serviceId,
  setHeader,
  startMessagingSpan,
  streams,
  subjects,
  type Tracer,
  traceAttributes,
} from '@parley/contracts';
import {
  isClusterNotAvailable,
  isConsumerNotFound,
  isKvConflict,
  type JsPublisher,
  type Logger,
  type ParleyMetrics,
  type StoredAck,
} from '@parley/kit';
import { LRUCache } from 'lru-cache';
import { createLeaseManager } from './leases.js';
import { type FanoutRecord, keys, memberAt, type RoomRecord, readEntry } from './room-store.js';
import type { ObservedEntry } from './runaway.js';

/** One NATS connection of the fan-out, with its JetStream clients. */
export interface FanoutConnection {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** Inbox writes (StoredAcks paired without an Error built per completed request). */
  publisher: JsPublisher;
  /** How long an inbox write waits for its PubAck. @default the publisher's (5 s) */
  pubAckTimeoutMs?: number;
}

/** Settings of the fan-out. */
export interface FanoutOptions {
  /** For consumer management and lookups. */
  jsm: JetStreamManager;
  /** Partition p is received and written on `connections[p % connections.length]`. */
  connections: FanoutConnection[];
  rooms: KV;
  leases: KV;
  partitions: number;
  replicaId: string;
  leaseTtlMs: number;
  batchSize: number;
  /**
   * A worker that has not had a working subscription for this long is stuck: `/healthz` says so,
   * and when the replica's other workers deliver and another replica is alive, the partition is
   * handed off to it. @default 30000
   */
  stuckAfterMs?: number;
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
  /** The last room position delivered to the subject. */
  roomSeq: number;
  /** The subject's last inbox entry (what the next write is fenced on). */
  inboxSeq: number;
  /** The message the room log held at `roomSeq` when it was delivered (absent when none was). */
  messageId?: string;
  /**
   * When the room log stored that entry (ms; absent in deliveries written before Parley-Room-Time):
   * the same message stored again at the same position is another entry (see `sameEntry`).
   */
  roomAt?: number;
  /**
   * Set when the room log no longer holds that message: JetStream lost the entry and went on from an
   * earlier position. `roomSeq` is then below the batch's entries again, and this is the lost
   * position, which the next write names (`Parley-Rewound`) so the recipient goes back with it.
   */
  rewound?: number;
}

/**
 * The room log's entry at a position, read at most once per batch: its id and stored time; `null`
 * when nothing is there within the log (removed by retention or deleted); `undefined` when the
 * position is past the log's end.
 */
type LogReads = Map<number, Promise<LogEntry | null | undefined>>;

/** A room-log entry as the stream leader holds it: its message id (`''` when none) and stored time (ms). */
interface LogEntry {
  id: string;
  at: number;
}

/**
 * Stored times within this much (ms) are one store: the stream answers a read to the millisecond,
 * and a message's push gives nanoseconds that a double holds only to a fraction of a microsecond.
 * A message stored again after the log lost it comes seconds later (the log's leader restarted or
 * was replaced in between).
 */
const SAME_STORE_MS = 2;

/** Whether `held` is the entry with message `id` stored at `at` (ms; unknown: by id alone). */
const sameEntry = (held: LogEntry, id: string | undefined, at: number | undefined) =>
  held.id === id && (at === undefined || Math.abs(held.at - at) < SAME_STORE_MS);

/** The message id of a room-log entry. */
const messageIdOf = (m: JsMsg) => headerOf(m.headers, headerNames.messageId);

/**
 * The message the room log holds at `seq` (its id, `''` when it has none) and when it was stored
 * there (ms), read from the stream leader (a follower behind it could miss a position that is
 * there): `null` when nothing is there within the log (removed by retention, or deleted),
 * `undefined` when the position is past the log's end (lost, and not stored again yet). `logEnd`
 * (the stream's info unless the caller knows the end) is read only after a miss, and the position
 * is read again when the end is past it: the room goes on while its log is checked, and a message
 * stored at the position between the two reads was taken for a removed entry (CI, log-rewound
 * test: the first message stored at a lost position was passed over as delivered and never reached
 * its member).
 */
export async function logEntryAt(
  jsm: JetStreamManager,
  seq: number,
  logEnd = async () => (await jsm.streams.info(streams.rooms)).state.last_seq,
): Promise<LogEntry | null | undefined> {
  const read = async () => {
    const sm = await jsm.streams.getMessage(streams.rooms, { seq });
    return sm ? { id: sm.header.get(headerNames.messageId) || '', at: sm.time.getTime() } : undefined;
  };
  const entry = await read();
  if (entry !== undefined) return entry;
  if (seq > (await logEnd())) return undefined;
  return (await read()) ?? null;
}

/** A room-log entry a partition worker acknowledged: its position, message and when it was stored (ms). */
interface LogPoint {
  seq: number;
  id: string | undefined;
  at: number;
}

/** When the room log stored `m`, in whole ms (as a read of the log gives it). */
const roomTimeOf = (m: JsMsg) => Math.floor(m.info.timestampNanos / 1e6);

/** A room-log entry as a {@link LogPoint}. */
const pointOf = (m: JsMsg): LogPoint => ({ seq: m.seq, id: messageIdOf(m), at: m.info.timestampNanos / 1e6 });

const dec = new TextDecoder();
const SYSTEM_KINDS = new Set(['membership', 'room', 'system']);
const FORWARDED_HEADERS = [
  headerNames.messageId,
  headerNames.traceparent,
  headerNames.tracestate,
  headerNames.baggage,
];

/** The consumer name of a partition. */
export const partitionConsumer = (p: number) => `fanout_${p}`;

/**
 * A batch as the fan-out handles it: one entry per room-log position (the copy pushed last; the
 * worker starts over when two copies are different messages), in log order. A partition consumer
 * may push again entries that still wait here: a node paused with SIGSTOP pushes, as it wakes, what
 * the consumer's next leader pushed meanwhile. A run holding a position twice wrote the second copy
 * chained to itself (its predecessor being the first copy), and one out of order chained an entry
 * to a later one. The inbox's de-duplication hides that only while every replica agrees: in the
 * chaos test two replicas stored room position 269 once, chained to 266, while the paused one
 * stored only the second copy, chained to 269 itself, and the check read that replica.
 */
export function inLogOrder<T extends { seq: number }>(batch: T[]): T[] {
  let ordered = true;
  for (let i = 1; i < batch.length && ordered; i++) ordered = (batch[i] as T).seq > (batch[i - 1] as T).seq;
  if (ordered) return batch;
  const bySeq = new Map<number, T>();
  for (const m of batch) bySeq.set(m.seq, m);
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}

/** The longest wait of a fan-out worker before it starts over (doubling from 100 ms). */
const RESTART_BACKOFF_MAX_MS = 1_000;

/** Most entries a partition consumer pushes before the fan-out acknowledged them. */
const MAX_ACK_PENDING = 10_000;

/** How long one readiness probe of the inbox stream may take, and how long to keep probing. */
const PROBE_TIMEOUT_MS = 1_000;
const PROBE_FOR_MS = 30_000;

/**
 * When the room log holds none of the entries a worker handled lately at their positions, its
 * partition consumer is made again at the entries stored since this long before the oldest of them:
 * clocks of the stream's nodes may differ by this much. (When it holds one, the consumer starts
 * after the last it holds, by position: see `resumeAt`.)
 */
const REWOUND_MARGIN_MS = 2_000;

/** What a worker knows, when it makes its partition consumer again, of what it delivered. */
interface Delivered {
  /** Ends of the batches it handled lately, oldest first: the last one it acknowledged last. */
  recent: readonly LogPoint[];
  /** An entry it found the room log no longer holds at its position, or could not check. */
  lost?: LogPoint | undefined;
}

/** Where a partition consumer made again starts: a stream position, or a time (ISO). */
type StartAt = { start: number; held?: LogPoint } | { since: string };

/** A consumer's deliver policy from a {@link StartAt}. */
const startingAt = (from: StartAt) =>
  'since' in from
    ? { deliver_policy: DeliverPolicy.StartTime, opt_start_time: from.since }
    : from.start > 1
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from.start }
      : { deliver_policy: DeliverPolicy.All };

/**
 * Entries of one partition stored at least this far apart (ms) may have been stored by different
 * leaders of the room log: a leader that failed is replaced only after raft's election timeout (2–5
 * s in nats-server 2.9), and a graceful handover loses nothing. The entry before such a silence is
 * checked against the log before the worker goes on (see `confirm`), and so is the last entry of a
 * partition that then stays silent this long.
 */
const SILENCE_MS = 1_000;

/** How often a partition worker checks an entry it handled against the room log's leader (see `sample`), ms. */
const SAMPLE_MS = 1_000;

/** How long a worker that reconnected watches its consumer for a push before it starts over, ms. */
const STALL_WATCH_MS = 500;

/**
 * How long a partition consumer may answer "JetStream system temporarily unavailable" (its own raft
 * group without a leader, as the server the worker reads from sees it) before the worker makes it
 * again, ms. After a 3-node cluster's whole restart one consumer's group had no leader for 11 s
 * after the room log answered (test:contended, session 34: its partition delivered 13.3 s after the
 * streams answered); a consumer made anew has a new group, elected in 150–800 ms on an idle cluster.
 */
const CONSUMER_LEADERLESS_MS = 2_000;

/** `err` with `what` failed in front of its message (its type and cause kept). */
function named(what: string, err: unknown): Error {
  if (!(err instanceof Error)) return new Error(`${what}: ${String(err)}`);
  err.message = `${what}: ${err.message}`;
  return err;
}

/** `p`, whose error says it was `what` that failed. */
function step<T>(what: string, p: Promise<T>): Promise<T> {
  return p.catch((err: unknown) => {
    throw named(what, err);
  });
}

/** A replica id as one subject token. */
const replicaToken = (id: string) => id.replace(/[^A-Za-z0-9_-]/g, '_');

export function createFanout(o: FanoutOptions) {
  const log = o.log.child({ component: 'fanout', replica: o.replicaId });
  const views = new LRUCache<string, RoomView>({ max: 50_000 });
  const cursors = new LRUCache<string, Cursor>({ max: 200_000 });
  const workers = new Map<number, ReturnType<typeof startWorker>>();
  const stuckAfterMs = o.stuckAfterMs ?? 30_000;
  /** The partitions held here whose worker is stuck. */
  const stuckPartitions = () => [...workers].filter(([, w]) => w.stuck()).map(([p]) => p);
  const stuckChanged = () => o.metrics?.setFanoutStuck(stuckPartitions().length);
  /** Whether any worker here has a working subscription. */
  const anyDelivering = () => [...workers.values()].some((w) => w.delivering());

  const deliverSubject = (p: number) =>
    subjects.fanoutDeliver(serviceId('rooms'), p, replicaToken(o.replicaId));
  const connectionOf = (p: number): FanoutConnection => {
    const c = o.connections[p % o.connections.length];
    if (!c) throw new Error('the fan-out needs at least one connection');
    return c;
  };

  /**
   * Makes partition p's consumer deliver to this replica. It is recreated at its ack floor when it
   * delivers elsewhere (another replica held the partition, or it is a pull consumer from an earlier
   * version) or holds unacknowledged entries (a previous owner's: they would come back only after
   * the ack wait, behind newer ones). And when the room log went back under it (see
   * {@link logWentBack}) or the worker found an entry lost (`delivered.lost`): it is made again after
   * the last entry the worker handled that the log still holds at its position (see `resumeAt`),
   * and what the log holds from there is delivered again where it was delivered before (the
   * cursors tell new messages apart); with no such entry (a fresh process), at the log's end as read
   * here — what was stored before this read at positions already delivered is then missed.
   *
   * Reads go through `reader` (the worker passes its probe, with a 1 s timeout): right after a
   * whole-cluster restart a read can go unanswered while the consumer elects its leader, and with
   * the default 5 s each such loss added 5 s to the recovery (seen: a 3-node reliability run
   * restarting a partition twice on "timeout", its last delivery 8.4 s after the streams answered).
   * A read that times out restarts the worker, which tries again after its backoff. The delete
   * goes the same way, and one that timed out is checked at once: after a whole-cluster restart
   * the delete of a consumer that held entries and pushed none went unanswered yet was made (3 of
   * 3 times in session 22's 3-node kill runs where the failing step was named; 4 earlier, unnamed
   * ones fit). Started over instead, the worker found the consumer gone only after a backoff and
   * another round of reads: making it again took 1.5–1.9 s with the probe's 1 s, 5.5–5.7 s with
   * the default 5 s, and 0.5–1.5 s with this check.
   * The add goes through `writer` (the JetStream default, 5 s): an R3 consumer's add is answered
   * once its own raft group has a leader, 150–800 ms on an idle 3-node cluster here. An add that
   * timed out but was made is found as it should be next time, and a delete that was made is
   * followed by an add after the last entry handled that the log holds. An error names the step
   * that failed. `rewound` is called when the consumer was made again from an entry handled
   * before, with the entry it starts after (none when it starts at a time).
   *
   * `leaderless`: the worker's reads of the consumer have answered "JetStream system temporarily
   * unavailable" for CONSUMER_LEADERLESS_MS. When this one does too and the worker handled entries,
   * the consumer is deleted and made again after the last entry handled that the log holds, as one
   * that is gone (a new raft group), instead of waiting for its group to elect.
   */
  async function ensureConsumer(
    p: number,
    stopped: () => boolean,
    delivered: Delivered,
    reader: JetStreamManager,
    writer: JetStreamManager,
    rewound: (held: LogPoint | undefined) => void,
    recreate: boolean,
    leaderless: boolean,
  ): Promise<number> {
    const name = partitionConsumer(p);
    const base = {
      durable_name: name,
      filter_subject: subjects.roomPartition(p),
      ack_policy: AckPolicy.All,
      ack_wait: nanos(30_000),
      max_ack_pending: MAX_ACK_PENDING,
      deliver_subject: deliverSubject(p),
      idle_heartbeat: nanos(PARTITION_IDLE_HEARTBEAT_MS),
      flow_control: true,
    };
    const acked = delivered.recent.at(-1);
    const handledAny = acked !== undefined || delivered.lost !== undefined;
    const logEndOf = async () =>
      (await step('reading the room log', reader.streams.info(streams.rooms))).state.last_seq;
    /** The consumer as the server has it, undefined when there is none. */
    const current = () =>
      reader.consumers.info(streams.rooms, name).catch((err: unknown) => {
        if (isConsumerNotFound(err)) return undefined;
        throw named(READING_CONSUMER, err);
      });
    const add = (from: StartAt) =>
      step(
        'adding the partition consumer',
        writer.consumers.add(streams.rooms, { ...base, ...startingAt(from) }),
      );
    const info = await current().catch(async (err: unknown) => {
      if (!leaderless || !handledAny || !isClusterNotAvailable(err) || stopped()) throw err;
      log.warn(
        { partition: p, ms: CONSUMER_LEADERLESS_MS },
        'partition consumer without a leader while the room log answers: deleting it, to make it again after the last entry handled that the log holds',
      );
      // With the probe's short wait, checked when unanswered, as above: after a whole-cluster
      // restart this delete went unanswered for the JetStream default 5 s and was made all the same
      // (test:contended, session 34: the partition delivered 5.7 s after the worker started over).
      await reader.consumers.delete(streams.rooms, name).catch(async (e: unknown) => {
        if (isConsumerNotFound(e)) return;
        if ((await current().catch(() => true)) !== undefined) throw named(LEADERLESS_DELETE, e);
      });
      return undefined;
    });
    if (!info) {
      // Gone while this worker held the partition (a delete whose answer was lost, an operator):
      // made again after the last entry handled that the log holds, as when the log went back (the
      // delete may have been that recreation's).
      const from: StartAt = handledAny ? await resumeAt(reader, delivered, logEndOf) : { start: 1 };
      await add(from);
      if (handledAny) rewound('held' in from ? from.held : undefined);
      return 0;
    }
    const logEnd = await logEndOf();
    const wentBack = delivered.lost !== undefined || (await logWentBack(reader, info, logEnd, acked));
    // The server forgot acknowledgements this worker made: nats-server before 2.11.11 (and 2.12.0)
    // rewrites a consumer's state file in place, and a kill -9 between the truncate and the write
    // brings the consumer back empty, at the start of the log. With AckAll the last entry this
    // worker acknowledged is a floor (everything before it in the partition was handled): the
    // consumer is made again after it instead of pushing the whole log again.
    const floor = acked && !wentBack ? Math.min(acked.seq, logEnd) : 0;
    const forgot = floor > info.ack_floor.stream_seq;
    // The heartbeat must be the one the worker expects (a consumer from an earlier version has 5 s:
    // the worker would count every second without one as missed). A consumer that held entries
    // and pushed none to a bound subscription is made again (`recreate`): subscribing again did not
    // move it (3-node cluster under contention, after a whole-cluster restart: the worker started
    // over 5–6 times in a row, 0.7 s apart, for 4–20 s, until the consumer happened to be recreated
    // for another reason; made again at its ack floor, it pushed within a second each time).
    if (
      !recreate &&
      !wentBack &&
      !forgot &&
      info.config.deliver_subject === base.deliver_subject &&
      info.config.idle_heartbeat === base.idle_heartbeat &&
      info.num_ack_pending === 0
    )
      return info.delivered.consumer_seq;
    const rewinds = wentBack && handledAny;
    const from: StartAt = rewinds
      ? await resumeAt(reader, delivered, async () => logEnd)
      : { start: Math.max(Math.min(info.ack_floor.stream_seq, logEnd), floor) + 1 };
    const where = 'since' in from ? { since: from.since } : { start: from.start };
    // Below what the worker acknowledged, the server does not even remember delivering: its state
    // was lost (an ack floor merely behind the worker's last ack is an ack in flight).
    if (forgot && info.delivered.stream_seq < floor)
      log.warn(
        { partition: p, ackFloor: info.ack_floor.stream_seq, acked: floor, start: floor + 1 },
        'the partition consumer forgot what it had delivered (nats-server lost its state file): made again after the last entry acknowledged',
      );
    if (wentBack)
      log.warn(
        {
          partition: p,
          delivered: info.delivered.stream_seq,
          logEnd,
          acked: acked?.seq ?? null,
          lost: delivered.lost?.seq ?? null,
          ...where,
        },
        'the room log went back under its partition consumer (JetStream lost entries it had delivered): the consumer is made again, so new entries at positions delivered before reach their recipients',
      );
    // A worker told to stop never takes the consumer over: its partition is being handed over, and
    // pointing the consumer back at itself stole the next holder's deliveries.
    if (stopped()) throw new Error('stopped');
    await reader.consumers.delete(streams.rooms, name).catch(async (err: unknown) => {
      // Unanswered, but made all the same each time it was seen (see above): gone means done.
      if (await current().catch(() => true)) throw named('deleting the partition consumer', err);
    });
    await add(from);
    if (rewinds) rewound('held' in from ? from.held : undefined);
    log.info(
      {
        partition: p,
        ...where,
        from: info.config.deliver_subject ?? 'pull',
        pending: info.num_ack_pending,
        ...(recreate ? { why: STALLED } : {}),
      },
      'since' in from
        ? 'partition consumer recreated at a time'
        : rewinds
          ? 'partition consumer recreated after the last entry handled that the room log holds'
          : 'partition consumer recreated at its ack floor',
    );
    return 0;
  }

  /**
   * Where a partition consumer made again after a loss starts: after the last of the entries the
   * worker handled lately that the room log still holds at its position (found by bisection: a log
   * that went another way keeps what it held up to there, so the entries it holds come before those
   * it lost), by position. Not at a time: a room log's copies store entries at different times, and
   * a consumer made again at a time from before the lost entry passed over what the leader had
   * stored at the lost positions earlier than that (chaos test, after a SIGSTOP: a partition
   * consumer pushed from a node that kept another copy of the log; made again 2 s before the lost
   * entry was stored, it skipped the leader's entries from 41 positions back, and one message never
   * reached its room). When the log holds none of them, at a time shortly before the oldest.
   */
  async function resumeAt(
    jsm: JetStreamManager,
    delivered: Delivered,
    logEnd: () => Promise<number>,
  ): Promise<StartAt> {
    const { recent } = delivered;
    let held = 0;
    let lost = recent.length;
    while (held < lost) {
      const mid = (held + lost) >> 1;
      if (await lostAt(jsm, recent[mid] as LogPoint, logEnd)) lost = mid;
      else held = mid + 1;
    }
    const last = recent[held - 1];
    if (last) return { start: last.seq + 1, held: last };
    const oldest = recent[0] ?? delivered.lost;
    return oldest ? { since: new Date(oldest.at - REWOUND_MARGIN_MS).toISOString() } : { start: 1 };
  }

  /**
   * Whether the room log went back under a partition consumer: JetStream lost entries it had
   * delivered and stores new ones at their positions (nats-server 2.9.10 after some faults; a node
   * that lost writes it had not synced). nats-server keeps the consumer's position, so it would pass
   * over every new entry up to it. Seen while it lasts as a consumer past the log's end; after the
   * log caught up, as the entry the worker acknowledged last (`acked`) no longer being at its
   * position.
   */
  async function logWentBack(
    jsm: JetStreamManager,
    info: ConsumerInfo | undefined,
    logEnd: number,
    acked: LogPoint | undefined,
  ): Promise<boolean> {
    if (info && info.delivered.stream_seq > logEnd) return true;
    return acked !== undefined && lostAt(jsm, acked, async () => logEnd);
  }

  /**
   * Whether the room log no longer holds `point`: another message at its position, the same message
   * stored there again (another time: an entry written again under its message id after the log
   * lost it — the control service retries a room's creation and membership entries under theirs —
   * lands where it was when as many entries came first; session 37's chaos run had the worker take
   * three new messages before such a match for delivered ones), or the position past the log's
   * end. Nothing there below the end was removed by retention or deleted, not lost. One read
   * of the stream leader in the usual case; `logEnd` (a stream info, slow to answer for seconds
   * after a cluster restart) only when the position holds nothing.
   */
  async function lostAt(jsm: JetStreamManager, point: LogPoint, logEnd?: () => Promise<number>) {
    if (!point.id) return false;
    const held = await logEntryAt(jsm, point.seq, logEnd);
    return held !== null && (held === undefined || !sameEntry(held, point.id, point.at));
  }

  /** The fan-out's view of `room`, as it stands before the entry at `seq` is applied. */
  async function view(room: string, seq: number): Promise<RoomView> {
    let v = views.get(room);
    if (!v) {
      const e = await step('reading a room view', readEntry<FanoutRecord>(o.rooms, keys.fanout(room)));
      v = e ? { record: e.value, revision: e.revision, dirty: false } : await firstView(room, seq);
      views.set(room, v);
    }
    return v;
  }

  /**
   * A room the fan-out has no view of yet: it starts from nobody, and the room's first entries (its
   * creation, the first joins) make its members. When those entries are gone before the fan-out read
   * them — a per-room cap (`PARLEY_ROOMS_MAX_MSGS_PER_ROOM`) removed them while the fan-out lagged
   * behind more sends than the cap holds — the members are taken from the room's control view:
   * each current member from its join position. Without it nobody received the room's messages,
   * ever (a 3-node cluster's fan-out, 14 sends against a cap of 10: 0 delivered in 3 of 5 runs).
   * Someone who left since this position is not there: told nothing of what retention removed
   * anyway, they miss what was sent between here and their leave.
   */
  async function firstView(room: string, seq: number): Promise<RoomView> {
    const empty: RoomView = {
      record: { closed: false, members: {}, appliedSeq: 0 },
      revision: 0,
      dirty: false,
    };
    const control = (await step('reading a room', readEntry<RoomRecord>(o.rooms, keys.room(room))))?.value;
    // The creation at or after `seq` (or no position recorded): the fan-out reads it in order.
    if (!control || !(control.createdSeq < seq)) return empty;
    log.warn(
      { room, createdSeq: control.createdSeq, seq, members: Object.keys(control.members).length },
      "the room's first log entries were removed before the fan-out read them (a per-room cap): its members taken from the room's control view",
    );
    const members: FanoutRecord['members'] = {};
    for (const [id, m] of Object.entries(control.members))
      members[id] = { role: m.role, delivery: m.delivery, intervals: [[m.joinedSeq]] };
    return { record: { closed: false, members, appliedSeq: 0 }, revision: 0, dirty: true };
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

  async function cursor(conn: FanoutConnection, recipient: string, room: string): Promise<Cursor> {
    const key = `${recipient}.${room}`;
    let c = cursors.get(key);
    if (!c) {
      c = await lookupCursor(conn, recipient, room);
      cursors.set(key, c);
    }
    return c;
  }

  /**
   * The last entry of a (recipient, room) inbox subject. A direct get may be answered by a follower
   * that is behind (after a cluster restart it may not have the subject yet): the fence then refuses
   * the write, and the second lookup asks the stream leader, which is never behind.
   */
  async function lookupCursor(
    conn: FanoutConnection,
    recipient: string,
    room: string,
    fromLeader = false,
  ): Promise<Cursor> {
    const query = { last_by_subj: subjects.inbox(recipient, room) };
    const stream = inboxStream(recipient);
    const last = await (fromLeader
      ? conn.jsm.streams.getMessage(stream, query)
      : conn.jsm.direct.getMessage(stream, query)
    ).catch((err: unknown) => {
      failedOn(stream);
      throw named(`reading an inbox cursor${fromLeader ? ' from the stream leader' : ''}`, err);
    });
    if (!last) return { roomSeq: 0, inboxSeq: 0 };
    const messageId = last.header.get(headerNames.messageId);
    const roomAt = Number(last.header.get(headerNames.roomTime)) || undefined;
    return {
      roomSeq: Number(last.header.get(headerNames.roomSeq)) || 0,
      inboxSeq: last.seq,
      ...(messageId ? { messageId } : {}),
      ...(roomAt ? { roomAt } : {}),
    };
  }

  /**
   * Called only when the batch holds entries at or below the cursor, and the cursor knows its
   * message. Entries of a batch at or below a cursor were delivered before (a re-run after a crash or a
   * handover) only while the room log still holds, at the cursor's position, the message delivered
   * from there. nats-server 2.9.10 was seen (chaos test, after a partition or a SIGSTOP of a stream
   * leader) pushing room-log entries it then lost and going on from an earlier position; a node that
   * loses the tail of its store does the same. New messages then come at positions already
   * delivered, and a cursor by position alone passed them over: never delivered. When the message is
   * gone, the cursor goes back to just before the batch's first entry for this subject and names the
   * lost position; what of the batch was delivered before is told apart by message (the inbox's
   * dedupe window, then the recipient's own check).
   */
  async function checkCursor(
    conn: FanoutConnection,
    key: string,
    c: Cursor,
    items: Delivery[],
    reads: LogReads,
  ): Promise<Cursor> {
    const first = items[0];
    if (!first) return c;
    let read = reads.get(c.roomSeq);
    if (!read) {
      read = step('reading the room log at the position an inbox names', logEntryAt(conn.jsm, c.roomSeq));
      reads.set(c.roomSeq, read);
    }
    const held = await read;
    if (held === null || (held && sameEntry(held, c.messageId, c.roomAt))) return c;
    log.warn(
      {
        inbox: key,
        lost: c.roomSeq,
        delivered: c.messageId,
        heldNow: held?.id ?? null,
        ...(held && held.id === c.messageId ? { storedAgainAt: new Date(held.at).toISOString() } : {}),
        from: first.m.seq,
      },
      'the room log no longer holds the last message delivered to this inbox (JetStream lost it and went on from an earlier position): delivering again from the first entry at or below it',
    );
    return { roomSeq: first.m.seq - 1, inboxSeq: c.inboxSeq, rewound: c.roomSeq };
  }

  /** One inbox publish with its producer span (child of the room entry's fan-out span). */
  function publishOne(
    conn: FanoutConnection,
    item: Delivery,
    recipient: string,
    room: string,
    prevRoomSeq: number,
    expectedInboxSeq: number | undefined,
    rewound?: number,
  ): Promise<StoredAck> {
    const { m, parent } = item;
    // A span that records nothing (propagate mode, an unsampled trace) would only give the delivery
    // another parent id that no backend holds: the entry's span context is passed on instead (3
    // span ids fewer per room message of 3 members).
    const span =
      parent && otelApi?.trace.getSpan(parent)?.isRecording() === false
        ? undefined
        : startMessagingSpan(o.tracer, {
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
    const h = natsHeaders();
    // Only what a recipient needs before parsing the body (its id, for de-duplication) and the
    // trace context as the entry carries it; every header is encoded once per recipient.
    for (const name of FORWARDED_HEADERS) {
      const value = headerOf(m.headers, name);
      if (value) setHeader(h, name, value);
    }
    // This recipient's producer span becomes the delivery's parent (when this process traces). Its
    // context is injected directly, not made active around the publish: entering a context
    // (AsyncLocalStorage) per inbox write was 9% of the services' CPU in `pnpm bench`, and nothing
    // below the publish reads the active context. Without a recording span, an entry's own trace
    // headers, forwarded above, are what an injection would write again (propagate mode) or differ
    // only by the id of a span nobody records (sampled out): only an entry without any gets the
    // fan-out span's context (a trace started here, `traceIdsWithoutExport`).
    if (span && otelApi) injectContext(h, otelApi.trace.setSpan(parent ?? otelApi.ROOT_CONTEXT, span));
    else if (parent && !headerOf(h, headerNames.traceparent)) injectContext(h, parent);
    setHeader(h, headerNames.roomSeq, String(m.seq));
    setHeader(h, headerNames.roomTime, String(roomTimeOf(m)));
    if (prevRoomSeq > 0) setHeader(h, headerNames.prevSeq, String(prevRoomSeq));
    if (rewound) setHeader(h, headerNames.rewound, String(rewound));
    // De-duplication by message, not position: nats-server 2.9.10 was seen (chaos test, after a
    // SIGSTOP or a partition of a stream leader) pushing room-log entries it then lost and going on
    // from an earlier position, so another message came at a position already written; a
    // position-based id made its inbox writes "duplicates" — dropped, or a fan-out re-running the
    // same batch until it gave up.
    setHeader(h, headerNames.msgId, `${messageIdOf(m) ?? m.seq}:${recipient}`);
    if (expectedInboxSeq !== undefined)
      setHeader(h, headerNames.expectedLastSubjectSeq, String(expectedInboxSeq));
    const stored = conn.publisher
      .publish(subjects.inbox(recipient, room), m.data, {
        headers: h,
        ...(conn.pubAckTimeoutMs ? { timeoutMs: conn.pubAckTimeoutMs } : {}),
      })
      .then(
        (ack) => {
          if (!ack.duplicate) o.metrics?.observeDelivery((Date.now() - m.info.timestampNanos / 1e6) / 1000);
          span?.end();
          return ack;
        },
        (err: unknown) => {
          if (span) {
            recordSpanError(span, err);
            span.end();
          }
          failedOn(inboxStream(recipient));
          throw named('storing in an inbox', err);
        },
      );
    return stored;
  }

  /**
   * The cursor to go on from when the subject's last entry (`fresh`, read from the stream leader) is
   * not the one `c` expected. Written by someone else (another replica, or a write of ours whose
   * acknowledgement was lost): `fresh`. Behind what was delivered here — the subject lost entries
   * this fan-out stored (their PubAcks came back; a whole-cluster kill -9 of nats-server 2.9.10 left
   * a leader without them), or retention emptied it — the fence moves to the subject's last entry and
   * the chain stays on the position delivered last: the next delivery names it (Parley-Prev-Seq), so
   * the recipient sees the hole and backfills it from the room's history. Taking `fresh` whole
   * chained the next delivery onto the entry before the lost ones, and the recipient never knew of
   * them (`reliability.test.ts`, 3 nodes: 7 messages of one room never reached one member).
   */
  function behind(c: Cursor, fresh: Cursor): Cursor {
    return fresh.roomSeq < c.roomSeq ? { ...c, inboxSeq: fresh.inboxSeq } : fresh;
  }

  /**
   * Delivers a batch's entries for one (recipient, room) inbox subject, in log order. The first
   * publish is fenced — stored only if the subject's last entry is the one this fan-out last wrote
   * (`Nats-Expected-Last-Subject-Sequence`) — and the rest follow at once on the same connection,
   * which keeps their order without waiting for each acknowledgement. A writer that loses the
   * fence (another replica believed it owned the partition) writes nothing more for that subject.
   */
  async function deliverRun(
    conn: FanoutConnection,
    recipient: string,
    room: string,
    items: Delivery[],
    reads: LogReads,
  ): Promise<void> {
    const key = `${recipient}.${room}`;
    let c = await cursor(conn, recipient, room);
    let checked: Cursor | undefined;
    let refused = '';
    // Times the subject changed under this run (a passed-over duplicate does not count).
    let changes = 0;
    for (;;) {
      // Entries at or below the cursor were delivered before (a re-run after a crash), while the
      // room log still holds what was delivered at the cursor.
      if (checked !== c && c.messageId && (items[0]?.m.seq ?? Number.POSITIVE_INFINITY) <= c.roomSeq) {
        c = await checkCursor(conn, key, c, items, reads);
        checked = c;
      }
      const todo = items.filter((x) => x.m.seq > c.roomSeq);
      const [first, ...rest] = todo;
      if (!first) return;
      if (changes === 3)
        throw new Error(
          `inbox ${key} keeps changing under the fan-out (last try: ${refused}; the stream leader named inbox #${c.inboxSeq}, room #${c.roomSeq} as its last entry)`,
        );
      let fenced: StoredAck;
      try {
        fenced = await publishOne(conn, first, recipient, room, c.roomSeq, c.inboxSeq, c.rewound);
      } catch (err) {
        if (!isKvConflict(err)) throw err;
        refused = `expected inbox #${c.inboxSeq}, refused with "${(err as Error).message}"`;
        changes++;
        c = behind(c, await lookupCursor(conn, recipient, room, true));
        cursors.set(key, c);
        continue;
      }
      if (fenced.duplicate) {
        // Stored before, within the dedupe window: the cursor was behind. Read it again. When it was
        // not (the subject's last entry is the one expected), this message is in the subject at an
        // earlier position (the room log holds it twice): it is delivered, so it is passed over.
        refused = `expected inbox #${c.inboxSeq}, stored before (a duplicate)`;
        const fresh = await lookupCursor(conn, recipient, room, true);
        if (fresh.inboxSeq === c.inboxSeq) {
          // Passed over, and the next entry is fenced on the same inbox entry (still naming the lost
          // position when there is one: the recipient has not been told yet).
          const messageId = messageIdOf(first.m);
          const { rewound } = c;
          c = {
            roomSeq: first.m.seq,
            inboxSeq: c.inboxSeq,
            ...(messageId ? { messageId } : {}),
            roomAt: roomTimeOf(first.m),
            ...(rewound ? { rewound } : {}),
          };
          checked = c;
        } else {
          c = behind(c, fresh);
          changes++;
        }
        cursors.set(key, c);
        continue;
      }
      const settled = await Promise.allSettled(
        rest.map((x, i) =>
          publishOne(conn, x, recipient, room, (i === 0 ? first : rest[i - 1])?.m.seq ?? 0, undefined),
        ),
      );
      const failedAt = settled.findIndex((s) => s.status === 'rejected');
      if (failedAt >= 0) {
        // The batch runs again from the inbox's last entry. A write refused while a later one was
        // stored (a stream leader change or a lost connection in the middle of the run) left a hole
        // that nothing here can fill; its next entry names the position before the hole
        // (Parley-Prev-Seq), and the recipient backfills the hole from the room's history.
        const storedAfter = settled.findLastIndex((s) => s.status === 'fulfilled');
        if (storedAfter > failedAt)
          log.warn(
            {
              inbox: key,
              missing: settled.flatMap((s, i) =>
                s.status === 'rejected' && i < storedAfter ? [rest[i]?.m.seq] : [],
              ),
              err: ((settled[failedAt] as PromiseRejectedResult).reason as Error).message,
            },
            'inbox writes refused before a stored one: the recipient backfills the hole',
          );
        throw (settled[failedAt] as PromiseRejectedResult).reason;
      }
      const acks = settled.map((s) => (s as PromiseFulfilledResult<StoredAck>).value);
      const last = todo.at(-1) ?? first;
      const messageId = messageIdOf(last.m);
      cursors.set(key, {
        roomSeq: last.m.seq,
        inboxSeq: (acks.at(-1) ?? fenced).seq,
        ...(messageId ? { messageId } : {}),
        roomAt: roomTimeOf(last.m),
      });
      return;
    }
  }

  function recipients(v: RoomView, m: JsMsg, kind: string): string[] {
    const mentions = headerOf(m.headers, headerNames.mentions)?.split(',') ?? [];
    const privateNotice = headerOf(m.headers, headerNames.audience) === 'mentions';
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
  async function handleBatch(conn: FanoutConnection, batch: JsMsg[], stopped: () => boolean): Promise<void> {
    const runs = new Map<string, { recipient: string; room: string; items: Delivery[] }>();
    const touched = new Map<string, RoomView>();
    const spans: Span[] = [];
    for (const m of batch) {
      const room = roomOf(m.subject);
      const v = await view(room, m.seq);
      if (v.dirty) touched.set(room, v);
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
      const kind = headerOf(m.headers, headerNames.kind) ?? 'message';
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
        sender: headerOf(m.headers, headerNames.sender) ?? '',
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
      const reads: LogReads = new Map();
      await Promise.all([...runs.values()].map((r) => deliverRun(conn, r.recipient, r.room, r.items, reads)));
    } catch (err) {
      for (const span of spans) recordSpanError(span, err);
      o.metrics?.recordMessage('failed', 'UNAVAILABLE', batch.length);
      throw err;
    } finally {
      for (const span of spans) span.end();
    }
    for (const [room, v] of touched) if (v.dirty) await persistView(room, v);
    // A worker told to stop acknowledges nothing: with AckAll, an ack that reached a consumer the
    // next holder had recreated moved its ack floor past entries that holder never wrote. Left
    // unacknowledged, the batch is redone by the next holder (idempotent: the cursors skip it).
    if (stopped()) return;
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

  /**
   * Handles a batch, retrying it in place when a write fails (a lost connection, a timeout): the
   * batch stays unacknowledged and ours, and a re-run is idempotent (cursors are re-read from the
   * inboxes). Recreating the consumer instead would wait for JetStream to be fully back first: after
   * a whole-cluster restart that made recovery take 20 s. Gives up (the worker restarts) after 30
   * attempts. Returns the attempts it took.
   */
  async function handleWithRetry(
    conn: FanoutConnection,
    batch: JsMsg[],
    stopped: () => boolean,
    plog: Logger,
    recovering = false,
  ): Promise<number> {
    const t0 = Date.now();
    for (let attempt = 1; ; attempt++) {
      const tried = Date.now();
      try {
        // A re-run reads its cursors again with the probe's short timeout: right after a restart a
        // lookup can go unanswered (a replica still recovering), and with the default 5 s each such
        // loss added 5 s to the recovery (seen: a 3-node re-run failing "timeout" 5 s after the
        // inbox stream answered again). A slow answer only costs one more attempt.
        // A worker `recovering` (it started over, or its connection came back) runs its first attempt
        // the same way, and waits for its PubAcks as briefly: after a 3-node cluster restart such a
        // batch had its cursor reads or its writes go unanswered, and waited 5 s before a re-run
        // stored it in 0.1-0.25 s (session 15, test:contended: 5.1 s after the streams answered).
        // Re-runs wait the whole 5 s for their PubAcks: a busy machine's slow PubAcks are not taken
        // for lost ones twice.
        const run =
          attempt === 1 && !recovering
            ? conn
            : {
                ...conn,
                jsm: await probeOf(conn),
                ...(attempt === 1 ? { pubAckTimeoutMs: PROBE_TIMEOUT_MS } : {}),
              };
        await handleBatch(run, batch, stopped);
        if (attempt > 1)
          plog.info({ attempts: attempt, ms: Date.now() - t0 }, 'fan-out batch delivered after retries');
        return attempt;
      } catch (err) {
        if (stopped() || attempt >= 30) throw err;
        plog.warn({ err: (err as Error).message, attempt }, 'fan-out batch failed: retrying it');
        // The cursors may be behind what the failed attempt stored. The room views stay: events are
        // applied once by position (a re-run changes nothing), and one that lost a write race was
        // dropped by persistView.
        cursors.clear();
        // Short: the write fails fast while JetStream is away, and every wait adds to the recovery.
        await new Promise((r) => setTimeout(r, Math.min(50 * 2 ** attempt, 500)));
        const failed = [...unanswered.entries()].filter(([, at]) => at >= tried).map(([name]) => name);
        await inboxAnswers(conn, stopped, failed.length > 0 ? failed : inboxStreams());
      }
    }
  }

  /**
   * Before a failed batch runs again: until every inbox stream has a leader that answers, polled with
   * a short timeout. Re-running the batch at once sent its writes to a stream with no leader yet
   * (a restarted cluster electing), where nothing answers them: each attempt then waited out the
   * whole PubAck timeout (5 s) even when the stream was back a moment after it was sent, which was
   * most of a whole-cluster kill's recovery. Bounded: the batch runs again after PROBE_FOR_MS
   * whatever the answer (and fails or succeeds on its own). Only the inbox streams whose writes or
   * reads failed during the attempt are waited for (all of them when none is known): waiting for
   * every stream held a batch until streams it does not write had elected too (3-node room-leader
   * kill: a batch waited 7.7 s for that, then was stored in 9 ms).
   */
  async function inboxAnswers(
    conn: FanoutConnection,
    stopped: () => boolean,
    names: string[],
  ): Promise<void> {
    const probe = await probeOf(conn);
    const until = Date.now() + PROBE_FOR_MS;
    while (!stopped() && Date.now() < until) {
      const answers = await Promise.all(
        names.map(async (name) => {
          const info = await probe.streams.info(name).catch(() => undefined);
          return Boolean(info?.cluster?.leader || (info && !info.cluster));
        }),
      );
      if (answers.every(Boolean)) return;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  /** When a write or cursor read to each inbox stream last failed (see `inboxAnswers`). */
  const unanswered = new Map<string, number>();
  function failedOn(stream: string): void {
    unanswered.set(stream, Date.now());
  }
  const probes = new WeakMap<FanoutConnection, Promise<JetStreamManager>>();
  function probeOf(conn: FanoutConnection): Promise<JetStreamManager> {
    let p = probes.get(conn);
    if (!p) {
      p = jetstreamManager(conn.nc, { checkAPI: false, timeout: PROBE_TIMEOUT_MS });
      probes.set(conn, p);
    }
    return p;
  }

  /** Why a worker starts over when its consumer holds entries and pushes none (see `recheck`). */
  const STALLED = 'partition consumer pushes nothing';
  const READING_CONSUMER = 'reading the partition consumer';
  const LEADERLESS = 'partition consumer without a leader';
  const LEADERLESS_DELETE = 'deleting the leaderless partition consumer';
  const FORGOTTEN = 'the partition consumer started over from the start of the room log';

  /**
   * Why a partition consumer delivers nothing to a worker holding nothing, or undefined when it is
   * fine. `lastDelivery` is the last delivery sequence the worker received.
   */
  function stallOf(info: ConsumerInfo, lastDelivery: number): string | undefined {
    // Nobody subscribed, as the server sees it (the interest did not come back with the connection).
    if (!info.push_bound) return 'no subscription bound to the partition consumer';
    // Counted as delivered, never received: lost in transit, back only after the 30 s ack wait.
    if (info.delivered.consumer_seq > lastDelivery) return 'deliveries lost in transit';
    if (info.num_pending > 0) return STALLED;
    return undefined;
  }

  function startWorker(p: number) {
    let stopped = false;
    let messages: ConsumerMessages | undefined;
    const queue: JsMsg[] = [];
    let wake: (() => void) | undefined;
    const plog = log.child({ partition: p });
    const conn = connectionOf(p);
    // The subscription being worked on: its last delivery sequence, the deliveries it received,
    // whether a batch is in hand, and why it must start over (set by `recheck`).
    let live: { lastDelivery: number; arrivals: number; busy: boolean; restart?: string } | undefined;
    let checking = false;
    // Why a check was asked for while one ran: it runs again once that one is done (a check that
    // began before nats-server restarted may have read the log before it came back with less).
    let checkAgain: string | undefined;
    // A check that found the consumer holding entries while a batch was in hand, and nothing
    // arriving: made again once the batch is done (see `recheck`).
    let deferred: string | undefined;
    // The last entry this worker acknowledged (see ensureConsumer), and the last ones of the last
    // 30 s: after a leader election of the room log, the one stored before it is checked.
    let acked: LogPoint | undefined;
    const recent: LogPoint[] = [];
    // An entry the room log lost, or that could not be checked (seen after an election): the
    // consumer is made again after the last entry handled that the log holds (see `resumeAt`).
    let lostPoint: LogPoint | undefined;
    // The batch in hand: an election during it is checked against its entries too.
    let inHand: JsMsg[] = [];
    // Set when the worker started over or its connection came back, until a batch is stored: its
    // first attempt then waits as briefly as the probe (see handleWithRetry).
    let recovering = false;
    // Since when the worker has had no working subscription (it failed, and keeps failing), and
    // whether that was reported as stuck (see FanoutOptions.stuckAfterMs).
    let failingSince: number | undefined;
    let stuck = false;
    // Since when reads of the partition consumer have answered "temporarily unavailable" in a row
    // (see CONSUMER_LEADERLESS_MS): in the worker's restarts, or in the check that started it over.
    let leaderlessSince: number | undefined;

    /**
     * Whether the room log no longer holds `point` (see {@link logWentBack}), asked with the probe's
     * short timeout; undefined when JetStream did not answer.
     */
    const lostFromLog = async (point: LogPoint): Promise<boolean | undefined> => {
      const probe = await probeOf(conn);
      return lostAt(probe, point).catch(() => undefined);
    };

    /**
     * {@link lostFromLog}, asked again every 250 ms while JetStream does not answer (a leader being
     * elected), for up to PROBE_FOR_MS; undefined when it never answered, the worker stopped, or
     * `abandon()` said to give up.
     */
    const confirm = async (point: LogPoint, abandon = () => false): Promise<boolean | undefined> => {
      const until = Date.now() + PROBE_FOR_MS;
      while (!stopped && !abandon() && Date.now() < until) {
        const lost = await lostFromLog(point);
        if (lost !== undefined) return lost;
        await new Promise((r) => setTimeout(r, 250));
      }
      return undefined;
    };

    // The last entry confirmed still in the log at its position (see `confirm`), and the last one
    // checked after the partition went silent.
    let confirmed: LogPoint | undefined;
    let idleChecked: LogPoint | undefined;
    const isConfirmed = (point: LogPoint) => point.seq === confirmed?.seq && point.id === confirmed.id;
    // Whether a sample is being checked, and when the last one started (see `sample`).
    let sampling = false;
    let sampledAt = 0;

    /**
     * Checks an entry just handled against the room log's leader, in the background, at most every
     * SAMPLE_MS. A partition consumer pushes from its own leader's copy of the log, which nats-server
     * 2.9.10 was seen keeping apart from the stream leader's after a SIGSTOP of a node, while the
     * stream named it current: the consumer, made again with that node as its leader, pushed the old
     * messages at their positions (lost from the log, and from the sends' answers) instead of those
     * the log holds, which never reached their recipients (chaos test). When the log holds another
     * message there, the consumer is made again after the last entry handled that the log holds
     * (see `resumeAt`; with a new leader, chosen again) and the cursors deliver what the log holds.
     */
    const sample = async (sub: NonNullable<typeof live>, point: LogPoint) => {
      sampling = true;
      sampledAt = Date.now();
      try {
        const lost = await lostFromLog(point);
        if (lost === false) confirmed = point;
        if (!lost || stopped || sub !== live) return;
        plog.warn(
          { pushed: point.seq, id: point.id ?? null },
          "the partition consumer pushed an entry the room log's leader does not hold at that position (the consumer's node kept another copy of the log): making it again",
        );
        lostPoint = point;
        kick(sub, 'the partition consumer pushed an entry the room log does not hold');
      } finally {
        sampling = false;
      }
    };

    /**
     * The log point from which the consumer must be made again before `batch` is handled, if any:
     * when an entry before a silence (SILENCE_MS between it and the next one pushed, in the times
     * they were stored) is no longer in the log, or the log did not answer. A new leader of the room
     * log can lack the last entries its predecessor pushed, and store new messages at their
     * positions, which the consumer, past them, never pushes. The leader-election advisory tells of
     * that too, but it is lost while the connection that receives it is cut off (seen in the chaos
     * test: after a SIGSTOP of the room log's leader, the message stored at a lost entry's position
     * never reached its room). Checked before the batch is handled: once a cursor moved past the
     * reused position, the message there would be taken for one delivered.
     */
    const lostBefore = async (batch: JsMsg[]): Promise<LogPoint | undefined> => {
      let prevAt = acked?.at;
      let prev: JsMsg | undefined;
      for (const m of batch) {
        const at = m.info.timestampNanos / 1e6;
        if (prevAt !== undefined && at - prevAt >= SILENCE_MS) {
          const point = prev ? pointOf(prev) : (acked as LogPoint);
          if (!isConfirmed(point)) {
            // From the batch's first entry when the lost one is in the batch: none of it is handled.
            if ((await confirm(point)) !== false) return prev ? pointOf(batch[0] as JsMsg) : point;
            confirmed = point;
          }
        }
        prevAt = at;
        prev = m;
      }
      return undefined;
    };

    /** Restarts the worker (resubscribe, and recreate the consumer at its ack floor if needed). */
    const kick = (sub: NonNullable<typeof live>, reason: string) => {
      if (sub.restart || stopped) return;
      sub.restart = reason;
      wake?.();
    };

    /**
     * After the connection came back or heartbeats stopped: once JetStream answers about the
     * consumer, starts over at once if it delivers nothing while the worker holds nothing — instead
     * of waiting for missed heartbeats, or for the ack wait of entries lost with the connection.
     * While JetStream does not answer (a cluster electing leaders) a restart cannot succeed and only
     * adds to the recovery. Checked twice, STALL_WATCH_MS apart with no push in between, so an entry
     * on its way is not taken for a stall.
     */
    const recheck = async (why: string): Promise<void> => {
      const sub = live;
      if (!sub) return;
      if (checking) {
        checkAgain = why;
        return;
      }
      checking = true;
      try {
        const probe = await probeOf(conn);
        const until = Date.now() + PROBE_FOR_MS;
        let reason: string | undefined;
        // Since when this check's reads have answered "temporarily unavailable", in a row.
        let leaderlessFrom: number | undefined;
        /** After a read JetStream did not answer: true to read again, false (said) past the window. */
        const readAgain = async (what: string) => {
          if (Date.now() > until) {
            plog.warn({ why, waitedMs: PROBE_FOR_MS }, `${what} not checked: JetStream did not answer`);
            return false;
          }
          await new Promise((r) => setTimeout(r, 100));
          return true;
        };
        for (let look = 0; look < 2; ) {
          if (stopped || sub !== live || sub.restart) return;
          const arrivals = sub.arrivals;
          const info = await probe.consumers
            .info(streams.rooms, partitionConsumer(p))
            .catch((err: unknown) => {
              if (isConsumerNotFound(err)) return null;
              if (isClusterNotAvailable(err)) leaderlessFrom ??= Date.now();
              else leaderlessFrom = undefined;
              return undefined;
            });
          if (info === undefined) {
            // Its group without a leader for a while: starting over makes it again (ensureConsumer).
            if (leaderlessFrom !== undefined && Date.now() - leaderlessFrom >= CONSUMER_LEADERLESS_MS) {
              plog.info({ why, reason: LEADERLESS }, 'partition consumer stalled: starting over');
              leaderlessSince = leaderlessFrom;
              kick(sub, LEADERLESS);
              return;
            }
            if (!(await readAgain('partition consumer'))) return;
            continue;
          }
          // The server came back with less of the log than it had delivered: starting over makes
          // the consumer again (see ensureConsumer) before, or after, new entries at positions it
          // counts as delivered pass it by.
          // A read that failed is tried again, not taken for a log that kept everything: right
          // after a restart the stream's reads time out while the consumer's already answer.
          const wentBack = info
            ? await probe.streams
                .info(streams.rooms)
                .then((si) => logWentBack(probe, info, si.state.last_seq, acked))
                .catch(() => undefined)
            : false;
          if (wentBack) {
            kick(sub, 'the room log went back under the partition consumer');
            return;
          }
          if (wentBack === undefined) {
            if (!(await readAgain('room log'))) return;
            continue;
          }
          reason = info === null ? 'partition consumer gone' : stallOf(info, sub.lastDelivery);
          if (!reason || queue.length > 0 || sub.arrivals !== arrivals) return;
          if (sub.busy) {
            // Not judged while a batch is in hand (its entries count as pending), nor dropped: after
            // a 3-node cluster restart the reconnect's check found the consumer holding entries
            // while a batch was being retried, and the consumer pushed nothing more after that
            // batch was stored, until the next check (8.3 s after the streams answered; with 1 s
            // heartbeats, two missed ones made that check after 2 s).
            deferred = why;
            return;
          }
          if (++look < 2) await new Promise((r) => setTimeout(r, STALL_WATCH_MS));
        }
        if (reason) {
          plog.info({ why, reason }, 'partition consumer stalled: starting over');
          kick(sub, reason);
        }
      } finally {
        checking = false;
        const again = checkAgain;
        checkAgain = undefined;
        if (again !== undefined && !stopped) void recheck(again);
      }
    };

    const run = async () => {
      let backoff = 100;
      // Why the worker last started over: the new subscription is then checked at once.
      let restartedFor: string | undefined;
      // When it last failed (ms since the epoch).
      let failedAt = 0;

      while (!stopped) {
        try {
          // The consumer's delivery sequence so far: each push must be the next one. A jump means
          // entries were lost in transit (the connection dropped, e.g. nats-server was killed) yet
          // count as delivered, and acknowledging a later one (AckAll) would skip them.
          const sub: NonNullable<typeof live> = {
            lastDelivery: await ensureConsumer(
              p,
              () => stopped,
              { recent, lost: lostPoint },
              await probeOf(conn),
              conn.jsm,
              (held) => {
                // Made again after `held` (in the log), or at a time: what this worker acknowledged
                // after it is delivered again, and the lost entry must not be checked again (every
                // check would find it lost and make the consumer again, for good).
                acked = held;
                recent.length = 0;
                if (held) recent.push(held);
                confirmed = held;
                idleChecked = undefined;
              },
              restartedFor === STALLED,
              leaderlessSince !== undefined && Date.now() - leaderlessSince >= CONSUMER_LEADERLESS_MS,
            ),
            arrivals: 0,
            busy: false,
          };
          lostPoint = undefined;
          leaderlessSince = undefined;
          deferred = undefined;
          let gap = false;
          queue.length = 0;
          const consumer = await conn.js.consumers.getBoundPushConsumer({
            deliver_subject: deliverSubject(p),
            idle_heartbeat: nanos(PARTITION_IDLE_HEARTBEAT_MS),
          });
          const current = await consumer.consume({
            abort_on_missing_resource: true,
            callback: (m) => {
              const d = m.info.deliverySequence;
              if (d > sub.lastDelivery + 1) gap = true;
              // Lower or equal: the server went back (it restarted with older state) and sends
              // again what may have been handled: the cursors make that idempotent. Back to the
              // first delivery, below what this worker acknowledged: the server lost the consumer's
              // state (see ensureConsumer) and would push the partition's whole log again.
              else if (d === 1 && sub.lastDelivery > 0 && acked && m.seq <= acked.seq) kick(sub, FORGOTTEN);
              sub.lastDelivery = d;
              sub.arrivals++;
              queue.push(m);
              wake?.();
            },
          });
          messages = current;
          live = sub;
          if (stuck) {
            plog.info({ ms: Date.now() - (failingSince ?? 0) }, 'fan-out partition delivering again');
            stuck = false;
            stuckChanged();
          }
          failingSince = undefined;
          // After starting over, whether the consumer pushes now, without waiting for two missed
          // heartbeats: after a whole-cluster restart a 3-node partition consumer pushed nothing for
          // two subscriptions in a row, each found only 2.6 s after it was made.
          if (restartedFor !== undefined) {
            plog.info({ after: restartedFor, ms: Date.now() - failedAt }, 'fan-out worker started again');
            void recheck(`started over: ${restartedFor}`);
            recovering = true;
          }
          restartedFor = undefined;
          void (async () => {
            for await (const s of current.status()) {
              if (s.type === 'heartbeat') {
                // An idle heartbeat names the last delivery the server made; one later than the
                // last received was lost in transit (it comes in order behind the deliveries).
                if (s.lastConsumerSequence > sub.lastDelivery) kick(sub, 'deliveries lost in transit');
              } else if (s.type === 'heartbeats_missed') {
                // The consumer was deleted, moved (a stream leader change) or went silent (seen
                // after a whole-cluster restart: a partition stalled for minutes).
                void recheck('heartbeats missed');
              }
            }
          })();
          const closed = current.closed().then(() => {
            wake?.();
          });
          backoff = 100;
          while (!stopped) {
            if (sub.restart) throw new Error(sub.restart);
            if (queue.length === 0) {
              // The last entry handled, when it was not checked yet: checked once nothing came for
              // SILENCE_MS (see `lostBefore`), as no later entry of the partition may come to tell.
              const unchecked = acked && acked !== idleChecked && !isConfirmed(acked) ? acked : undefined;
              let silent = false;
              let timer: ReturnType<typeof setTimeout> | undefined;
              await new Promise<void>((r) => {
                wake = r;
                if (unchecked)
                  timer = setTimeout(() => {
                    silent = true;
                    r();
                  }, SILENCE_MS);
              });
              clearTimeout(timer);
              wake = undefined;
              if (silent && unchecked && queue.length === 0 && !stopped && !sub.restart) {
                idleChecked = unchecked;
                // Given up when the worker is told to start over meanwhile (a stalled consumer
                // found after a reconnect): that waited for this check, up to 8 s while JetStream
                // elected its leaders. The entry is checked again after the next silence.
                const lost = await confirm(unchecked, () => sub.restart !== undefined);
                if (lost === undefined && sub.restart) idleChecked = undefined;
                if (lost === false) confirmed = unchecked;
                if (lost) {
                  lostPoint = unchecked;
                  throw new Error('the room log lost the last entry pushed to this partition');
                }
                continue;
              }
              if (queue.length === 0) {
                // Woken with nothing to do: the consumer closed under us (deleted, or we stopped),
                // or it stalled.
                if (!stopped) throw new Error(sub.restart ?? 'partition consumer closed');
                break;
              }
            }
            // Told to start over while it waited (see `kick`): no batch of the old subscription is
            // handled, so `acked` stays the last entry handled before (the point to go on after).
            if (sub.restart) throw new Error(sub.restart);
            if (gap) throw new Error('deliveries lost in transit: restarting at the ack floor');
            sub.busy = true;
            const taken = queue.splice(0, o.batchSize);
            const batch = inLogOrder(taken);
            if (batch !== taken) {
              // Two messages at one position: one of them is not in the log (a copy from a node
              // whose store diverged). Which one is the log's to say: the worker starts over from it.
              const kept = new Map(batch.map((m) => [m.seq, messageIdOf(m)]));
              const differing = taken.filter((m) => messageIdOf(m) !== kept.get(m.seq)).map((m) => m.seq);
              plog.info(
                {
                  pushed: taken.length,
                  positions: batch.length,
                  from: batch[0]?.seq,
                  to: batch.at(-1)?.seq,
                  differing,
                },
                'the partition consumer pushed entries again or out of order: handled once each, in log order',
              );
              if (differing.length)
                throw new Error(
                  `the partition consumer pushed two messages at room-log position ${differing[0]}: starting over from the log`,
                );
            }
            const lost = await lostBefore(batch);
            if (lost) {
              lostPoint = lost;
              throw new Error(
                'the room log lost an entry pushed before a silence, or did not answer about it',
              );
            }
            inHand = batch;
            const attempts = await handleWithRetry(conn, batch, () => stopped, plog, recovering);
            // A batch stored in a recovery (after retries, or the first after the worker started
            // over or reconnected): the consumer is checked once it is done, as the cluster may have
            // come back meanwhile with a consumer that holds entries and pushes none.
            if (attempts > 1 || recovering) deferred ??= 'a batch stored in a recovery';
            recovering = false;
            inHand = [];
            const end = batch.at(-1);
            if (end && !stopped) {
              acked = pointOf(end);
              recent.push(acked);
              while (recent.length > 64 || (recent[0] && recent[0].at < acked.at - 30_000)) recent.shift();
              // A batch that took retries may have outlived the room log's leader that pushed it, and
              // the log may have lost it (nats-server 2.9.10 after a partition): the consumer's
              // position stays past it, so new entries stored at its positions would never be
              // pushed. Seen in the chaos test: a batch delivered 17.5 s after it failed, and the
              // message stored later at one of its positions never reached its room's members.
              // Unanswered, the worker starts over all the same: ensureConsumer asks again.
              if (attempts > 1 && (await lostFromLog(acked)) !== false) {
                lostPoint = acked;
                throw new Error('the room log may have lost entries of a batch delivered after retries');
              }
              if (!sampling && Date.now() - sampledAt >= SAMPLE_MS) void sample(sub, acked);
            }
            sub.busy = false;
            if (deferred !== undefined && queue.length === 0) {
              void recheck(`after the batch in hand: ${deferred}`);
              deferred = undefined;
            }
          }
          await current.close().catch(() => undefined);
          await closed;
        } catch (err) {
          live = undefined;
          await messages?.close().catch(() => undefined);
          if (stopped) break;
          plog.warn({ err: (err as Error).message }, 'fan-out worker restarting');
          restartedFor = (err as Error).message;
          failedAt = Date.now();
          if (isClusterNotAvailable(err) && restartedFor.startsWith(READING_CONSUMER))
            leaderlessSince ??= failedAt;
          else if (restartedFor !== LEADERLESS && !restartedFor.startsWith(LEADERLESS_DELETE))
            leaderlessSince = undefined;
          failingSince ??= failedAt;
          if (failedAt - failingSince >= stuckAfterMs) {
            if (!stuck) {
              stuck = true;
              stuckChanged();
              // `backboneAnswers: false` is an outage (see `healthy`), not this replica's trouble.
              plog.error(
                { ms: failedAt - failingSince, err: restartedFor, backboneAnswers: leases.reachable() },
                'fan-out partition held here but not delivering: its worker keeps failing',
              );
            }
            // Seen in the chaos test (nats-server 2.9.10, after a node's kill -9): one replica's
            // reads of two partition consumers answered "JetStream system temporarily unavailable"
            // for over 30 s while its other partitions delivered and the consumers answered other
            // connections. Worked from elsewhere, the partition delivers; an outage, where every
            // worker here fails, is waited out instead.
            if (anyDelivering() && (await leases.handOff(p, stuckAfterMs))) break;
          }
          // Forget what may be stale: cursors are re-read from the inboxes on demand.
          cursors.clear();
          views.clear();
          // Woken early by stop(): a given-back partition is handed over only once this worker ended.
          await new Promise<void>((r) => {
            wake = r;
            setTimeout(r, backoff);
          });
          wake = undefined;
          // At most 1 s: a worker that starts over is a partition that delivers nothing, and JetStream
          // coming back says nothing to a sleeping worker. With 5 s, a worker that had failed through
          // a 3-node cluster's elections slept up to 5 s past their end (a message accepted 25 ms after
          // the streams answered was stored in its inboxes 5.2 s later, in session 15's
          // test:contended). 16 partitions starting over every second are 16 consumer reads a second.
          backoff = Math.min(backoff * 2, RESTART_BACKOFF_MAX_MS);
        }
      }
    };
    /**
     * The room log elected a leader at `at` (ms): a new leader can lack entries the old one had
     * stored and pushed (nats-server 2.9.10 after a partition or a pause), and the consumer's
     * position, kept apart, stays past them. The last entry pushed before the election (acknowledged,
     * or in the batch in hand) is checked (see {@link logWentBack}) while JetStream answers, for up to PROBE_FOR_MS; when the
     * log lost it, the worker starts over and the consumer is made again after the last entry
     * handled that the log holds.
     */
    const leaderElected = async (at: number) => {
      // The batch in hand counts: it was pushed before its acknowledgement, maybe by the old leader.
      const point = [...recent, ...inHand.map(pointOf)].findLast((x) => x.at <= at);
      if (!point || !(await confirm(point))) return;
      plog.warn(
        { lost: point.seq, at: new Date(point.at).toISOString() },
        'the room log lost an entry pushed to this partition before its leader election: starting over',
      );
      lostPoint = point;
      if (live) kick(live, 'the room log lost entries after a leader election');
    };
    const done = run();
    return {
      /** Whether the worker is stuck (see FanoutOptions.stuckAfterMs). */
      stuck: () => stuck,
      /** Whether the worker has a working subscription. */
      delivering: () => live !== undefined,
      /** The connection came back: see `recheck`. */
      reconnected: () => {
        recovering = true;
        void recheck('reconnected');
      },
      leaderElected: (at: number) => void leaderElected(at),
      /**
       * The partition consumer elected a leader (a node failed or stepped down): what the old leader
       * pushed may be lost in transit while this connection stayed up. Checked at once (see
       * `recheck`), not at the next idle heartbeat.
       */
      consumerElected: () => void recheck('partition consumer elected a leader'),
      async stop() {
        stopped = true;
        wake?.();
        await messages?.close().catch(() => undefined);
        await done;
      },
    };
  }

  /** Partitions with entries waiting and no live holder, as of the last balance. */
  let unheld: number[] = [];
  async function checkUnheld(free: number[]): Promise<void> {
    const waiting: { partition: number; pending: number }[] = [];
    for (const p of free) {
      const info = await o.jsm.consumers.info(streams.rooms, partitionConsumer(p)).catch(() => undefined);
      const pending = info ? info.num_pending + info.num_ack_pending : 0;
      if (pending > 0) waiting.push({ partition: p, pending });
    }
    unheld = waiting.map((w) => w.partition);
    o.metrics?.setFanoutUnheld(unheld.length);
    if (waiting.length > 0)
      log.warn({ partitions: waiting }, 'fan-out partitions with entries waiting and no holder');
  }

  const leases = createLeaseManager({
    kv: o.leases,
    replicaId: o.replicaId,
    partitions: o.partitions,
    ttlMs: o.leaseTtlMs,
    log,
    onUnheld(free) {
      if (free.length === 0) {
        if (unheld.length > 0) log.info('every fan-out partition has a holder again');
        unheld = [];
        o.metrics?.setFanoutUnheld(0);
        return;
      }
      void checkUnheld(free).catch((err) => log.warn({ err: (err as Error).message }, 'unheld check failed'));
    },
    callbacks: {
      acquired(p) {
        workers.set(p, startWorker(p));
      },
      async released(p) {
        const w = workers.get(p);
        workers.delete(p);
        if (w?.stuck()) stuckChanged();
        await w?.stop();
      },
    },
  });

  // A connection that came back: its partitions check their consumers at once (see `recheck`). The
  // loops end with their connections (closed by the service after the fan-out stopped).
  let watching = false;
  function watchReconnects(): void {
    if (watching) return;
    watching = true;
    // Leader elections of the room log: see the workers' `leaderElected`.
    const first = o.connections[0];
    if (first) {
      const sub = first.nc.subscribe(`$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.${streams.rooms}`, {
        callback: (_err, m) => {
          let at = Date.now();
          try {
            const t = Date.parse((m.json() as { timestamp?: string }).timestamp ?? '');
            if (Number.isFinite(t)) at = t;
          } catch {}
          for (const w of workers.values()) w.leaderElected(at);
        },
      });
      // Leader elections of the partition consumers (each its own group on a cluster): see the
      // workers' `consumerElected`.
      const prefix = `$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.${streams.rooms}.`;
      const consumerSub = first.nc.subscribe(`${prefix}*`, {
        callback: (_err, m) => {
          const name = m.subject.slice(prefix.length);
          const p = Number(name.slice(partitionConsumer(0).length - 1));
          if (name === partitionConsumer(p)) workers.get(p)?.consumerElected();
        },
      });
      void first.nc.closed().then(() => {
        sub.unsubscribe();
        consumerSub.unsubscribe();
      });
    }
    for (const conn of new Set(o.connections)) {
      void (async () => {
        for await (const s of conn.nc.status()) {
          if (s.type !== 'reconnect') continue;
          for (const [p, w] of workers) if (connectionOf(p) === conn) w.reconnected();
        }
      })();
    }
  }

  return {
    start: async () => {
      watchReconnects();
      await leases.start();
    },
    stop: () => leases.stop(),
    /** Partitions this replica works on. */
    owned: () => leases.held(),
    /** Partitions with entries waiting and no live holder at the last balance (should be none). */
    unheld: () => [...unheld],
    /** Partitions held here whose worker has not delivered for `stuckAfterMs` (should be none). */
    stuck: () => stuckPartitions().sort((a, b) => a - b),
    /**
     * The `/healthz` check: no partition unheld, and none stuck here while the backbone answers this
     * replica's lease renewals. A partition stuck in an outage (the renewals fail too) does not fail
     * it: a restart does not bring JetStream back, and a replica restarted into an outage waits in
     * its start, where Kubernetes' back-off can keep it for minutes after JetStream is back. The
     * gauge and the log still say it is stuck.
     */
    healthy: () => unheld.length === 0 && (stuckPartitions().length === 0 || !leases.reachable()),
  };
}
