/**
 * The baseline: raw JetStream doing the same work as Parley's message path, as well tuned as we can
 * make it — one room write (with a Nats-Msg-Id, as the ingress writes), one inbox write per member
 * (with a per-recipient Nats-Msg-Id, as the fan-out does), writes retried when they fail as Parley
 * retries them, one durable consume + ack per member — with the same client options
 * (`noAsyncTraces`, and one socket write per event-loop turn: `coalesceWrites`), the same JetStream publish path (kit's `JsPublisher`: PubAcks paired through one
 * subscription, no Error built per completed request), the same stream settings, the same
 * partitioned, batched fan-out, and the same
 * topology and push/pull choice as Parley: durable push consumers (flow control, idle heartbeats)
 * for the inboxes and the partitions, the fan-out on two connections of its own, one connection per
 * member, and each room written by one of its members over that member's own connection (as a
 * Parley agent sends over its own; with every room write on one connection, the baseline's 256
 * writes in flight shared one socket's batched reads and writes where Parley's senders have 100).
 */
import {
  AckPolicy,
  type ConsumerMessages,
  DeliverPolicy,
  type JsMsg,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { headers, type NatsConnection, nanos } from '@nats-io/transport-node';
import { INBOX_IDLE_HEARTBEAT_MS, PARTITION_IDLE_HEARTBEAT_MS } from '@parley/contracts';
import { JsPublisher } from '@parley/kit';
import { atRate, LatencyRecorder, progress, type Tail, tail, windowed } from './stats.js';

/** Options of the raw pipeline. */
export interface RawOptions {
  connect: () => Promise<NatsConnection>;
  rooms: number;
  membersPerRoom: number;
  payloadBytes: number;
  partitions: number;
  batch: number;
  window: number;
  /** Connections of the fan-out (partition p on p % n), as Parley's PARLEY_FANOUT_CONNECTIONS. */
  fanoutConnections: number;
  /** Names its streams and subjects, so two pipelines can share a server. @default "bench" */
  name?: string;
  /**
   * Senders send each room write as a request to a relay on a connection of its own, which writes
   * it to the room stream and answers with the acknowledgement: the ingress's request/reply hop,
   * without any of its checks (`pnpm bench:hop`).
   */
  relay?: boolean;
  /** Inbox streams, members spread over them by index, as Parley's 16 inbox shards. @default 1 */
  inboxStreams?: number;
  /**
   * Room and inbox entries carry headers of the sizes Parley's do (ids of Parley's length, a
   * `traceparent`, the room positions), in place of raw's two short ones.
   */
  parleyHeaders?: boolean;
  /** Connects a member (default `connect`): e.g. as a user with permissions of its own. */
  memberConnect?: (member: string) => Promise<NatsConnection>;
}

/** How a latency run is measured. */
export interface LatencyOptions {
  /**
   * Seconds at the run's rate sent before the measured ones and not counted: what came before (a
   * throughput run at saturation, the other pipeline's run) is still draining when a run starts,
   * and its first half second held the run's worst deliveries (raw after a throughput run: 100–240
   * ms in the first 0.5 s, under 20 ms after; session 34). @default 0
   */
  warmupSeconds?: number;
}

/** What one latency run measured. */
export interface LoadResult {
  /** Send → handler, ms. */
  endToEnd: Tail;
  /** Per half second of send time after the warm-up: `seconds:p50/max` (ms). */
  series: string;
  /** Per stage, when the pipeline can tell (ms). */
  stages?: Record<string, Tail>;
}

/** A message pipeline set up once and measured several times. */
export interface Pipeline {
  /** Sends `messages` as fast as the window allows; deliveries per second until the last one. */
  throughput(messages: number): Promise<number>;
  /**
   * Sends at `ratePerSec` room messages per second for `warmupSeconds` and then `seconds` more, and
   * measures every delivery of what was sent after the warm-up (see {@link LatencyOptions}).
   */
  latency(ratePerSec: number, seconds: number, options?: LatencyOptions): Promise<LoadResult>;
  close(): Promise<void>;
}

/** Runs `f` again when it fails, as Parley's SDK and fan-out retry their writes (10 attempts). */
async function retried<T>(f: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await f();
    } catch (err) {
      if (attempt >= 10) throw err;
      await new Promise((r) => setTimeout(r, 100 * attempt));
    }
  }
}
/** The heartbeats Parley's consumers have. */
const INBOX_HEARTBEAT = nanos(INBOX_IDLE_HEARTBEAT_MS);
const PARTITION_HEARTBEAT = nanos(PARTITION_IDLE_HEARTBEAT_MS);

/** The members' names (and durable consumer names), room by room. */
export function memberNames(rooms: number, membersPerRoom: number): string[][] {
  return Array.from({ length: rooms }, (_, r) =>
    Array.from({ length: membersPerRoom }, (_, i) => `m${r}x${i}`),
  );
}

export async function setupRaw(o: RawOptions): Promise<Pipeline> {
  const PREFIX = o.name ?? 'bench';
  const ROOMS = `${PREFIX.toUpperCase()}_ROOMS`;
  const INBOX = `${PREFIX.toUpperCase()}_INBOX`;
  const REPLIES = `_INBOX.${PREFIX}`;
  const roomSubject = (room: number) => `${PREFIX}.room.${room % o.partitions}.${room}`;
  const nc = await o.connect();
  const jsm = await jetstreamManager(nc);
  const shards = Math.max(1, o.inboxStreams ?? 1);
  const inboxes = shards === 1 ? [INBOX] : Array.from({ length: shards }, (_, i) => `${INBOX}_${i}`);
  const members = memberNames(o.rooms, o.membersPerRoom);
  const all = members.flat();
  /** The inbox stream of the member at index `i` of `all`. */
  const inboxOf = (i: number) => inboxes[i % shards] as string;
  for (const name of [ROOMS, ...inboxes]) await jsm.streams.delete(name).catch(() => undefined);
  await jsm.streams.add({
    name: ROOMS,
    subjects: [`${PREFIX}.room.*.*`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    allow_direct: true,
  });
  for (const [s, name] of inboxes.entries()) {
    await jsm.streams.add({
      name,
      subjects:
        shards === 1
          ? [`${PREFIX}.inbox.*.*`]
          : all.filter((_, i) => i % shards === s).map((m) => `${PREFIX}.inbox.${m}.*`),
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      max_msgs_per_subject: 10_000,
      allow_direct: true,
    });
  }
  for (const [i, m] of all.entries()) {
    await jsm.consumers.add(inboxOf(i), {
      durable_name: m,
      filter_subject: `${PREFIX}.inbox.${m}.*`,
      ack_policy: AckPolicy.Explicit,
      ack_wait: nanos(30_000),
      max_ack_pending: 1_000,
      deliver_subject: `${REPLIES}.deliver.${m}`,
      idle_heartbeat: INBOX_HEARTBEAT,
      flow_control: true,
    });
  }
  for (let p = 0; p < o.partitions; p++) {
    await jsm.consumers.add(ROOMS, {
      durable_name: `fan${p}`,
      filter_subject: `${PREFIX}.room.${p}.*`,
      ack_policy: AckPolicy.All,
      deliver_policy: DeliverPolicy.All,
      max_ack_pending: 10_000,
      deliver_subject: `${REPLIES}.fanout.${p}`,
      idle_heartbeat: PARTITION_HEARTBEAT,
      flow_control: true,
    });
  }

  // Consumers: one connection per member, like one process per agent.
  let delivered = 0;
  let recorder: LatencyRecorder | undefined;
  let onDelivered: (() => void) | undefined;
  const memberConns: NatsConnection[] = [];
  const iters: ConsumerMessages[] = [];
  for (const [i, m] of all.entries()) {
    const c = await (o.memberConnect ? o.memberConnect(m) : o.connect());
    memberConns.push(c);
    const consumer = await jetstream(c).consumers.getPushConsumer(inboxOf(i), m);
    iters.push(
      await consumer.consume({
        callback: (msg) => {
          recorder?.record(Number(msg.headers?.get('t')));
          msg.ack();
          delivered++;
          onDelivered?.();
        },
      }),
    );
  }

  // The fan-out: one worker per partition, micro-batched like Parley's, on its own connections.
  const fanConns = await Promise.all(Array.from({ length: Math.max(1, o.fanoutConnections) }, o.connect));
  const fanPublishers = fanConns.map((c) => new JsPublisher(c, REPLIES));
  for (const fp of fanPublishers) await fp.start();
  let stopping = false;
  const fanouts = await Promise.all(
    Array.from({ length: o.partitions }, async (_, p) => {
      const fjs = jetstream(fanConns[p % fanConns.length] as NatsConnection);
      const fpub = fanPublishers[p % fanPublishers.length] as JsPublisher;
      const consumer = await fjs.consumers.getPushConsumer(ROOMS, `fan${p}`);
      const queue: JsMsg[] = [];
      let wake: (() => void) | undefined;
      const iter = await consumer.consume({
        callback: (m) => {
          queue.push(m);
          wake?.();
        },
      });
      const loop = (async () => {
        while (!stopping) {
          if (queue.length === 0) {
            await new Promise<void>((r) => {
              wake = r;
            });
            wake = undefined;
            continue;
          }
          const batch = queue.splice(0, o.batch);
          // As Parley's fan-out: a batch whose writes failed (no acknowledgement in time on a busy
          // machine) is written again; the per-recipient Nats-Msg-Id makes that idempotent.
          await retried(() =>
            Promise.all(
              batch.flatMap((m) => {
                const room = Number(m.subject.split('.')[3]);
                return (members[room] ?? []).map((member) => {
                  const h = headers();
                  h.set('t', m.headers?.get('t') ?? '0');
                  if (o.parleyHeaders) {
                    // What the fan-out writes: the message id, the trace context, the positions, the stored time.
                    const id = m.headers?.get('Parley-Msg-Id') ?? '';
                    h.set('Parley-Msg-Id', id);
                    h.set('traceparent', m.headers?.get('traceparent') ?? '');
                    h.set('Parley-Room-Seq', String(m.seq));
                    h.set('Parley-Room-Time', String(Math.floor(m.info.timestampNanos / 1e6)));
                    h.set('Parley-Prev-Seq', String(m.seq - 1));
                    h.set('Nats-Msg-Id', `${id}:agt_${member.padEnd(26, '0')}`);
                  } else h.set('Nats-Msg-Id', `${m.seq}:${member}`);
                  return fpub.publish(`${PREFIX}.inbox.${member}.${room}`, m.data, { headers: h });
                });
              }),
            ),
          );
          batch.at(-1)?.ack();
        }
      })();
      return async () => {
        stopping = true;
        wake?.();
        await iter.close();
        await loop;
      };
    }),
  );

  // Room r is written by its first member, over that member's connection.
  const senders = await Promise.all(
    members.map(async (_, r) => {
      const js = new JsPublisher(memberConns[r * o.membersPerRoom] as NatsConnection, REPLIES);
      await js.start();
      return js;
    }),
  );
  // The relay: what the ingress does on the way to the room stream, and nothing else.
  const relayConn = o.relay ? await o.connect() : undefined;
  const relay = relayConn && new JsPublisher(relayConn, REPLIES);
  if (relayConn && relay) {
    await relay.start();
    const encoder = new TextEncoder();
    const sendPrefix = `${PREFIX}.send.`;
    relayConn.subscribe(`${sendPrefix}*`, {
      queue: 'relay',
      callback: (err, msg) => {
        if (err) return;
        relay
          .publish(roomSubject(Number(msg.subject.slice(sendPrefix.length))), msg.data, {
            ...(msg.headers ? { headers: msg.headers } : {}),
          })
          .then(
            (ack) => msg.respond(encoder.encode(JSON.stringify(ack))),
            (e: unknown) =>
              msg.respond(encoder.encode(JSON.stringify({ error: { description: (e as Error).message } }))),
          );
      },
    });
    await relayConn.flush();
  }
  const payload = new Uint8Array(o.payloadBytes).fill(120);
  let sent = 0;
  const publish = (i: number) => {
    const room = i % o.rooms;
    const js = senders[room] as JsPublisher;
    const h = headers();
    h.set('t', String(performance.now()));
    if (o.parleyHeaders) {
      // What the ingress writes: routing facts, the message id, the trace context.
      const n = String(++sent).padStart(26, '0');
      const sender = `agt_${String(room).padStart(26, '0')}`;
      h.set('Parley-Kind', 'message');
      h.set('Parley-Sender', sender);
      h.set('Parley-Msg-Id', `msg_${n}`);
      h.set('traceparent', `00-${n.padEnd(32, '0')}-${n.slice(0, 16)}-00`);
      h.set('Nats-Msg-Id', `${sender}:${n}`);
    } else {
      // As Parley's ingress: the room write carries a message id, so a retry is stored once.
      h.set('Nats-Msg-Id', `w${++sent}`);
    }
    return retried(() =>
      js.publish(relay ? `${PREFIX}.send.${room}` : roomSubject(room), payload, { headers: h }),
    );
  };
  const waitDelivered = (n: number) =>
    new Promise<void>((resolve) => {
      if (delivered >= n) return resolve();
      onDelivered = () => {
        if (delivered >= n) {
          onDelivered = undefined;
          resolve();
        }
      };
    });

  return {
    async throughput(messages) {
      const before = delivered;
      const t0 = performance.now();
      await windowed(messages, o.window, (i) => publish(i));
      await waitDelivered(before + messages * o.membersPerRoom);
      const perSec = Math.round((messages * o.membersPerRoom) / ((performance.now() - t0) / 1000));
      progress(`raw: ${perSec} deliveries/s`);
      return perSec;
    },
    async latency(ratePerSec, seconds, { warmupSeconds = 0 } = {}) {
      const before = delivered;
      const r = new LatencyRecorder(performance.now() + warmupSeconds * 1000);
      recorder = r;
      const count = Math.round(ratePerSec * (warmupSeconds + seconds));
      await atRate(count, ratePerSec, (i) => void publish(i));
      await waitDelivered(before + count * o.membersPerRoom);
      recorder = undefined;
      const endToEnd = tail(r.latencies);
      progress(`raw: at ${ratePerSec}/s p50 ${endToEnd.p50} p99 ${endToEnd.p99} max ${endToEnd.max} ms`);
      return { endToEnd, series: r.series() };
    },
    async close() {
      for (const f of fanouts) await f();
      for (const it of iters) await it.close();
      for (const fp of [...senders, ...fanPublishers]) fp.close();
      relay?.close();
      await Promise.all(
        [...memberConns, ...fanConns, ...(relayConn ? [relayConn] : [])].map((c) => c.close()),
      );
      for (const name of [ROOMS, ...inboxes]) await jsm.streams.delete(name).catch(() => undefined);
      await nc.close();
    },
  };
}
