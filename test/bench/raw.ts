/**
 * The baseline: raw JetStream doing the same work as Parley's message path, as well tuned as we can
 * make it — one room write, one inbox write per member (with a per-recipient Nats-Msg-Id, as the
 * fan-out does), one durable consume + ack per member — with the same client options
 * (`noAsyncTraces`), the same stream settings, and the same partitioned, batched fan-out.
 */
import {
  AckPolicy,
  DeliverPolicy,
  type JetStreamClient,
  type JsMsg,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { headers, type NatsConnection, nanos } from '@nats-io/transport-node';
import { atRate, percentiles, progress, windowed } from './stats.js';

/** Options of the raw pipeline. */
export interface RawOptions {
  connect: () => Promise<NatsConnection>;
  rooms: number;
  membersPerRoom: number;
  payloadBytes: number;
  messages: number;
  latencyRate: number;
  latencySeconds: number;
  partitions: number;
  batch: number;
  window: number;
}

/** What the raw pipeline measured. */
export interface PipelineResult {
  deliveredPerSec: number;
  latencyMs: { p50: number; p95: number; p99: number };
}

const PREFIX = 'bench';

export async function benchRaw(o: RawOptions): Promise<PipelineResult> {
  const nc = await o.connect();
  const jsm = await jetstreamManager(nc);
  for (const name of ['BENCH_ROOMS', 'BENCH_INBOX']) await jsm.streams.delete(name).catch(() => undefined);
  await jsm.streams.add({
    name: 'BENCH_ROOMS',
    subjects: [`${PREFIX}.room.*.*`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    allow_direct: true,
  });
  await jsm.streams.add({
    name: 'BENCH_INBOX',
    subjects: [`${PREFIX}.inbox.*.*`],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    max_msgs_per_subject: 10_000,
    allow_direct: true,
  });
  const members: string[][] = [];
  for (let r = 0; r < o.rooms; r++) {
    members.push(Array.from({ length: o.membersPerRoom }, (_, i) => `m${r}x${i}`));
  }
  const all = members.flat();
  for (const m of all) {
    await jsm.consumers.add('BENCH_INBOX', {
      durable_name: m,
      filter_subject: `${PREFIX}.inbox.${m}.*`,
      ack_policy: AckPolicy.Explicit,
      ack_wait: nanos(30_000),
      max_ack_pending: 1_000,
    });
  }
  for (let p = 0; p < o.partitions; p++) {
    await jsm.consumers.add('BENCH_ROOMS', {
      durable_name: `fan${p}`,
      filter_subject: `${PREFIX}.room.${p}.*`,
      ack_policy: AckPolicy.All,
      deliver_policy: DeliverPolicy.All,
      max_ack_pending: 20_000,
    });
  }

  // Consumers: one connection per member, like one process per agent.
  let delivered = 0;
  let latencies: number[] | undefined;
  let onDelivered: (() => void) | undefined;
  const memberConns: NatsConnection[] = [];
  const closers: (() => Promise<unknown>)[] = [];
  for (const m of all) {
    const c = await o.connect();
    memberConns.push(c);
    const consumer = await jetstream(c).consumers.get('BENCH_INBOX', m);
    const iter = await consumer.consume({
      max_messages: 256,
      callback: (msg) => {
        if (latencies) latencies.push(performance.now() - Number(msg.headers?.get('t')));
        msg.ack();
        delivered++;
        onDelivered?.();
      },
    });
    closers.push(() => iter.close());
  }

  // The fan-out: one worker per partition, micro-batched like Parley's.
  const fanConn = await o.connect();
  const fjs = jetstream(fanConn);
  let stopping = false;
  const fanouts = await Promise.all(
    Array.from({ length: o.partitions }, async (_, p) => {
      const consumer = await fjs.consumers.get('BENCH_ROOMS', `fan${p}`);
      const queue: JsMsg[] = [];
      let wake: (() => void) | undefined;
      const iter = await consumer.consume({
        max_messages: o.batch * 4,
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
          await Promise.all(
            batch.flatMap((m) => {
              const room = Number(m.subject.split('.')[3]);
              return (members[room] ?? []).map((member) => {
                const h = headers();
                h.set('t', m.headers?.get('t') ?? '0');
                h.set('Nats-Msg-Id', `${m.seq}:${member}`);
                return fjs.publish(`${PREFIX}.inbox.${member}.${room}`, m.data, { headers: h });
              });
            }),
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

  const pub = jetstream(nc);
  const payload = new Uint8Array(o.payloadBytes).fill(120);
  const publish = (js: JetStreamClient, i: number) => {
    const room = i % o.rooms;
    const h = headers();
    h.set('t', String(performance.now()));
    return js.publish(`${PREFIX}.room.${room % o.partitions}.${room}`, payload, { headers: h });
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

  // Throughput: as fast as it goes.
  const t0 = performance.now();
  await windowed(o.messages, o.window, (i) => publish(pub, i));
  await waitDelivered(o.messages * o.membersPerRoom);
  const seconds = (performance.now() - t0) / 1000;
  const deliveredPerSec = Math.round((o.messages * o.membersPerRoom) / seconds);
  progress(`raw: ${deliveredPerSec} deliveries/s`);

  // Latency at a fixed rate.
  const before = delivered;
  latencies = [];
  const count = o.latencyRate * o.latencySeconds;
  await atRate(count, o.latencyRate, (i) => void publish(pub, i));
  await waitDelivered(before + count * o.membersPerRoom);
  const latencyMs = percentiles(latencies);
  progress(`raw: latency at ${o.latencyRate}/s p50 ${latencyMs.p50} ms p99 ${latencyMs.p99} ms`);

  for (const f of fanouts) await f();
  for (const close of closers) await close();
  await Promise.all([...memberConns, fanConn].map((c) => c.close()));
  for (const name of ['BENCH_ROOMS', 'BENCH_INBOX']) await jsm.streams.delete(name).catch(() => undefined);
  await nc.close();
  return { deliveredPerSec, latencyMs };
}
