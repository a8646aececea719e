/**
 * A background worker on a durable consumer: creates the consumer when it does not exist yet (any
 * replica may, they share it), then hands each message to `handle` and acks it; a throw asks
 * `retry` whether to redeliver it later (`nak` after the delay it returns) or give up (`term`).
 *
 * With `floors`, it also keeps the consumer's acknowledgement floor where a nats-server crash does
 * not empty it. nats-server before 2.11.11 (and 2.12.0) rewrites a consumer's state file in place,
 * and a kill -9 between the truncate and the write brings the consumer back at its start: a worker
 * would handle its whole stream again (a dead-letter worker would tell every sender again about
 * every dead letter of the last 30 days). Every `floorsEveryMs` one replica's reading of the floor
 * is recorded (key `worker.<consumer>`), and a message at or below the recorded floor, acknowledged
 * before, is acknowledged again without being handled.
 */
import {
  type Consumer,
  type ConsumerConfig,
  type ConsumerMessages,
  DeliverPolicy,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Logger } from 'pino';
import { retryJetStream } from './jetstream-ready.js';
import { updateKv } from './kv.js';
import { isConsumerExists, isConsumerNotFound } from './nats-errors.js';
import { everyRound } from './rounds.js';

export interface DurableWorkerOptions {
  js: JetStreamClient;
  jsm: JetStreamManager;
  stream: string;
  consumer: Partial<ConsumerConfig> & { durable_name: string };
  /** Messages pulled at a time. */
  maxMessages: number;
  handle: (m: JsMsg) => Promise<void>;
  /** After `handle` threw: milliseconds until redelivery, or `'term'` to give the message up. */
  retry: (m: JsMsg, err: unknown) => number | 'term';
  /** Where a start waiting for JetStream says so. */
  log?: Logger | undefined;
  /**
   * Start a consumer this worker creates after the stream's last message at that moment, by
   * sequence. Not `DeliverPolicy.New`: a consumer that lost its state starts where its policy puts
   * it when the server loads it, which for `New` is wherever the server then sees the stream's end
   * (its start, measured on 2.9.10; past what was not handled yet, if the end); a start sequence
   * comes back to that sequence, and `floors` skips what was handled.
   */
  fromEnd?: boolean;
  /** The bucket the consumer's acknowledgement floor is recorded in (parley_floors); see above. */
  floors?: KV | undefined;
  /** How often the floor is recorded, ms. @default 10000 */
  floorsEveryMs?: number;
}

export interface DurableWorker {
  start(): Promise<void>;
  /** Stops pulling and waits for the message in hand. */
  stop(): Promise<void>;
}

/** How long a durable worker's pull request lives, ms. */
export const WORKER_PULL_EXPIRES_MS = 5_000;

/** How often a worker records its consumer's acknowledgement floor by default, ms. */
export const WORKER_FLOORS_EVERY_MS = 10_000;

/** The key of a worker's acknowledgement floor in parley_floors. */
export const workerFloorKey = (consumer: string): string => `worker.${consumer}`;

export function durableWorker(o: DurableWorkerOptions): DurableWorker {
  let messages: ConsumerMessages | undefined;
  let loop: Promise<void> | undefined;
  let stopped = false;
  const name = o.consumer.durable_name;
  const floors = o.floors ? recordedFloor(o, o.floors) : undefined;

  /** Creates the consumer unless it exists (read first: `fromEnd` makes each creation differ). */
  async function ensureConsumer(): Promise<void> {
    try {
      await o.jsm.consumers.info(o.stream, name);
      return;
    } catch (err) {
      if (!isConsumerNotFound(err)) throw err;
    }
    const start = o.fromEnd
      ? {
          deliver_policy: DeliverPolicy.StartSequence,
          opt_start_seq: (await o.jsm.streams.info(o.stream)).state.last_seq + 1,
        }
      : {};
    await o.jsm.consumers.add(o.stream, { ...o.consumer, ...start }).catch((err: unknown) => {
      // Another replica made it first.
      if (!isConsumerExists(err)) throw err;
    });
  }

  return {
    async start() {
      // Usually at a service's start, which may come while the cluster elects leaders (a replica
      // restarted during a fault exited on "JetStream system temporarily unavailable" here).
      const what = `the ${name} consumer of ${o.stream}`;
      await retryJetStream(what, ensureConsumer, { log: o.log });
      const consumer = await retryJetStream(what, () => o.js.consumers.get(o.stream, name), {
        log: o.log,
      });
      if (floors) {
        await retryJetStream(`the recorded floor of ${what}`, () => floors.load(), { log: o.log });
        floors.keep(consumer);
      }
      // Pull requests of 5 s (heartbeats every 2.5 s): a request the server drops (nats-server 2.9
      // loses an expired one without a 408, and a request sent to a node that then lost its
      // leadership is gone) is noticed after two missed heartbeats. With the client's default of
      // 30 s that was up to a minute of nothing consumed after a cluster came back
      // (test/cluster/worker-late.test.ts: handled after 35 s, or not within 30 s).
      const iter = await consumer.consume({ max_messages: o.maxMessages, expires: WORKER_PULL_EXPIRES_MS });
      messages = iter;
      loop = (async () => {
        for await (const m of iter) {
          if (floors?.handledBefore(m)) {
            m.ack();
            continue;
          }
          try {
            await o.handle(m);
            m.ack();
          } catch (err) {
            if (stopped) return;
            const after = o.retry(m, err);
            if (after === 'term') m.term();
            else m.nak(after);
          }
        }
      })();
    },
    async stop() {
      stopped = true;
      floors?.stop();
      await messages?.close().catch(() => undefined);
      await loop?.catch(() => undefined);
    },
  };
}

/** A worker's recorded acknowledgement floor: read at start, raised every `floorsEveryMs`. */
function recordedFloor(o: DurableWorkerOptions, kv: KV) {
  const name = o.consumer.durable_name;
  const key = workerFloorKey(name);
  let floor = 0;
  let stop: (() => void) | undefined;
  let skipping = false;

  async function record(consumer: Consumer): Promise<void> {
    const acked = (await consumer.info()).ack_floor.stream_seq;
    if (acked <= floor) return;
    await updateKv<number>(kv, key, (now) => ((now ?? 0) >= acked ? undefined : acked), {
      attempts: 3,
      what: `the recorded floor of the ${name} consumer`,
    });
    floor = acked;
  }

  return {
    /** Reads the recorded floor. */
    async load(): Promise<void> {
      const e = await kv.get(key);
      const recorded = e?.operation === 'PUT' && e.length > 0 ? Number(e.string()) : 0;
      // Past the stream's end: the stream was made again, and its sequences with it.
      const end = recorded > 0 ? (await o.jsm.streams.info(o.stream)).state.last_seq : 0;
      floor = recorded <= end ? recorded : 0;
    },
    /** Records the consumer's floor every `floorsEveryMs` from now on. */
    keep(consumer: Consumer): void {
      stop?.();
      stop = everyRound(o.floorsEveryMs ?? WORKER_FLOORS_EVERY_MS, () => record(consumer), {
        log: o.log,
        what: 'recording the worker floor',
        fields: { consumer: name },
      });
    },
    /** Whether `m` is at or below the recorded floor: handled before, delivered again. */
    handledBefore(m: JsMsg): boolean {
      if (m.seq > floor) {
        skipping = false;
        return false;
      }
      if (!skipping)
        o.log?.warn(
          { consumer: name, stream: o.stream, seq: m.seq, floor },
          'the consumer delivers what it acknowledged before (nats-server lost its state): acknowledged again without handling it, up to its recorded floor',
        );
      skipping = true;
      return true;
    },
    stop(): void {
      stop?.();
    },
  };
}
